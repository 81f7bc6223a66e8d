#!/usr/bin/env bash
# Devices in a Ceph cluster: Hurricane through a FUSE mount of a pool of 4
# rados devices, files laid out as stripe(width=4), against `rados bench` on
# a one-node dev cluster (scripts/ceph-dev-cluster.sh: one monitor, one
# memstore OSD on loopback), in the same run, with the same request size and
# the same number of requests in flight (QD):
#   sequential write and read, 4 MiB requests: rados bench -b 4M -t QD
#     (4 MiB objects) against fio, QD jobs of 4 MiB blocks, one file each
#   4 KiB random write and read: rados bench -b 4K -t QD (4 KiB objects)
#     against fio, QD jobs of 4 KiB blocks over one file each (RND_MIB
#     MiB in all, 1024 unless set), with O_DIRECT: every request reaches
#     the mount, none is served from the page cache
#   4 KiB random writes, the cluster's side of what the mount does:
#     bench/rados-overwrite.c writes 4 KiB at random offsets of 4 MiB
#     objects (RND_MIB MiB of them), QD in flight, as the rados devices
#     do; `rados bench` writes new 4 KiB objects, which an object store
#     may serve at another rate (the dev cluster's memstore keeps an
#     object as a list of buffers and serves overwrites at about half the
#     rate of new objects). Recorded as rand_overwrite_iops of rados-bench
# fio writes with an fsync at its end (sequential) or every 256 writes
# (random): what it counts as written is in the cluster, as what rados bench
# counts is. fio's files are preallocated (its default, fallocate=native).
# Reads are cold: the mount is remounted (its block cache emptied) and the
# page cache dropped before each. rados bench's "bandwidth" is MiB/s.
#   bench/rados.sh [SEQ_MIB] [RUNS] [QD] [SECS]   (defaults 2048 3 16 10)
# In each run every system is measured on a cluster of its own, started
# afresh the same way, its memory store empty (a pool's deleted files leave
# their objects in the cluster).
# Results: bench/results/rados/rados.jsonl (RESULTS=DIR for another place),
# medians and ratios on stdout. BENCH_DIR=DIR holds the cluster and the
# pool directory; CEPH_DEV_OSD_BYTES sizes the OSD's memory store (6 GiB).
# MOUNT_OPTS=OPTS mounts with `-o OPTS`. Each run measures the mount
# twice: as files open by default (system "hurricane", reads through the
# page cache and its readahead) and with the open policy
# `cache=none,prefetch=none` on the root directory (system
# "hurricane-nocache": every request reaches the mount as fio made it, 4
# MiB reads as 1 MiB requests one after another, nothing read ahead);
# NOCACHE_SPEC=SPEC sets another policy there, NOCACHE=0 leaves the second
# system out. A/B against another version:
# BASE=DIR, a directory holding that version's `hurricane` (built with
# --features rados); every run then also measures it, as system
# "hurricane-base".
set -euo pipefail
cd "$(dirname "$0")/.."
seq_mib=${1:-2048}; runs=${2:-3}; qd=${3:-16}; secs=${4:-10}
work=${BENCH_DIR:-$PWD/target/bench-rados}
res=${RESULTS:-bench/results/rados}
out=$res/rados.jsonl
mkdir -p "$res" "$work"; : > "$out"
for tool in fio rados ceph-mon ceph-osd; do
    command -v $tool >/dev/null || { echo "needs $tool (HURRICANE_CEPH=1 scripts/setup.sh installs Ceph)" >&2; exit 1; }
done
target=${CARGO_TARGET_DIR:-$PWD/target}
cargo build --release --locked -p hurricane-cli --features rados >/dev/null 2>&1
hc=$target/release/hurricane
# The overwrite peer: RADOS_OVERWRITE=PATH names one built elsewhere.
ow=${RADOS_OVERWRITE:-$target/rados-overwrite}
[ -n "${RADOS_OVERWRITE:-}" ] || cc -O2 -o "$ow" bench/rados-overwrite.c -lrados
export CEPH_DEV_OSD_BYTES=${CEPH_DEV_OSD_BYTES:-6442450944}
trap 'mountpoint -q "$work/mnt" && "$hc" umount "$work/mnt"; scripts/ceph-dev-cluster.sh stop "$work/ceph"' EXIT
rb() { rados -c "$conf" -p hurricane "$@"; }
cold() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
per_job=$((seq_mib / qd))
# Random I/O goes over files of this many MiB in all (QD of them).
rnd_mib=${RND_MIB:-1024}

rados_bench() { # mode (write|seq|rand) extra... -> MiB/s and IOPS
    local mode=$1; shift
    rb bench "$secs" "$mode" -t "$qd" --format json "$@" 2>/dev/null | python3 -c '
import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):])
print(round(float(j["bandwidth"]), 1), round(float(j["average_iops"])))'
}
fio_job() { # name rw bs size_per_job extra... -> MiB/s and IOPS of the QD jobs together
    local name=$1 rw=$2 bs=$3 size=$4; shift 4
    fio --name="$name" --directory="$work/mnt" --rw="$rw" --bs="$bs" --size="$size" --ioengine=psync \
        --numjobs="$qd" --group_reporting --output-format=json "$@" | python3 -c '
import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):])["jobs"][0]
print(round((j["read"]["bw"]+j["write"]["bw"])/1024,1), round(j["read"]["iops"]+j["write"]["iops"]))'
}
mount_() { "$bin" mount "$work/pool" "$work/mnt" ${MOUNT_OPTS:+-o "$MOUNT_OPTS"}; }
remount() { "$bin" umount "$work/mnt"; cold; mount_; }
record() { # system run seq_write seq_read rand_write rand_read [rand_overwrite]
    python3 - "$qd" "$@" >> "$out" <<'PY'
import json, sys
qd, s, run, w, r, rw, rr, *ow = sys.argv[1:]
row = {"bench": "rados", "system": s, "run": int(run), "qd": int(qd), "seq_write_mibs": float(w),
  "seq_read_mibs": float(r), "rand_write_iops": float(rw), "rand_read_iops": float(rr)}
if ow:
    row["rand_overwrite_iops"] = float(ow[0])
print(json.dumps(row))
PY
}

rados_run() {
    local run=$1
    # As many 4 MiB objects as fio writes, at most: the same data.
    read -r w _ < <(rados_bench write -b 4M --no-cleanup --max-objects $((seq_mib / 4)))
    cold
    read -r r _ < <(rados_bench seq)
    rb cleanup >/dev/null 2>&1
    read -r _ rw < <(rados_bench write -b 4K --no-cleanup --max-objects $((rnd_mib * 256)))
    read -r _ rr < <(rados_bench rand)
    rb cleanup >/dev/null 2>&1
    o=$("$ow" "$conf" hurricane $((rnd_mib / 4)) "$secs" "$qd")
    record rados-bench "$run" "$w" "$r" "$rw" "$rr" "$o"
}

hurricane_run() { # system binary run [open spec of the root]
    local sys=$1 bin=$2 run=$3 spec=${4:-} devs=()
    rm -rf "$work/pool" "$work/mnt"; mkdir -p "$work/mnt"
    for _ in 1 2 3 4; do devs+=(--device "rados:hurricane?conf=$conf"); done
    "$bin" mkfs "$work/pool" "${devs[@]}" --device-size 16G --layout 'stripe(width=4)' >/dev/null
    mount_
    if [ -n "$spec" ]; then
        python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.hurricane.open", sys.argv[2].encode())' "$work/mnt" "$spec"
    fi
    read -r w _ < <(fio_job seq write 4M "${per_job}M" --end_fsync=1)
    remount
    read -r r _ < <(fio_job seq read 4M "${per_job}M")
    rm -f "$work/mnt"/*
    fio_job rnd write 1M "$((rnd_mib / qd))M" --end_fsync=1 >/dev/null   # lay the files out first
    read -r _ rw < <(fio_job rnd randwrite 4k "$((rnd_mib / qd))M" --runtime="$secs" --time_based --direct=1 --fsync=256)
    remount
    read -r _ rr < <(fio_job rnd randread 4k "$((rnd_mib / qd))M" --runtime="$secs" --time_based --direct=1)
    "$bin" umount "$work/mnt"
    record "$sys" "$run" "$w" "$r" "$rw" "$rr"
    rm -rf "$work/pool"
}

# Each system on a fresh cluster, set up the same way: its memory store
# starts empty (a pool's deleted files leave their objects in the cluster).
fresh() { scripts/ceph-dev-cluster.sh stop "$work/ceph"; conf=$(scripts/ceph-dev-cluster.sh start "$work/ceph"); }
for run in $(seq "$runs"); do
    fresh; rados_run "$run"
    fresh; hurricane_run hurricane "$hc" "$run"
    if [ "${NOCACHE:-1}" != 0 ]; then fresh; hurricane_run hurricane-nocache "$hc" "$run" "${NOCACHE_SPEC:-cache=none,prefetch=none}"; fi
    if [ -n "${BASE:-}" ]; then fresh; hurricane_run hurricane-base "$BASE/hurricane" "$run"; fi
done
scripts/ceph-dev-cluster.sh stop "$work/ceph"
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = ["seq_write_mibs", "seq_read_mibs", "rand_write_iops", "rand_read_iops"]
systems = [s for s in ("rados-bench", "hurricane", "hurricane-nocache", "hurricane-base") if any(r["system"] == s for r in rows)]
med = {s: {k: statistics.median(r[k] for r in rows if r["system"] == s) for k in keys} for s in systems}
n = sum(1 for r in rows if r["system"] == "hurricane")
print(f"medians of {n} runs, {rows[0]['qd']} requests in flight; ratio: of rados bench")
print(f"{'':18}" + "".join(f"{s:>19}{'ratio':>7}" if s != "rados-bench" else f"{s:>14}" for s in systems))
for k in keys:
    a = med["rados-bench"][k]
    line = f"{k:18}{a:14,.1f}"
    for s in systems[1:]:
        b = med[s][k]
        line += f"{b:19,.1f}{b / a if a else 0:7.2f}"
    print(line)
ow = [r["rand_overwrite_iops"] for r in rows if r["system"] == "rados-bench" and "rand_overwrite_iops" in r]
if ow:
    o = statistics.median(ow)
    line = f"{'rand_write_iops':18}{o:14,.1f}"
    for s in systems[1:]:
        b = med[s]["rand_write_iops"]
        line += f"{b:19,.1f}{b / o:7.2f}"
    print(f"random 4 KiB writes against rados-overwrite (4 KiB into 4 MiB objects, {len(ow)} runs):")
    print(line)
PY
