#!/usr/bin/env bash
# Issue-3 mount benchmarks: the same workloads on a Hurricane FUSE mount (a
# pool of 4 image files) and on ext4 over a loop device, both backed by files
# on the same disk, in the same run.
#   bench/mount.sh [SEQ_MIB] [FILES] [RUNS]     (defaults 4096 100000 3)
# Results: bench/results/mount.jsonl and mount.png, summary on stdout.
# A/B against another version: BASE=DIR, a directory holding that version's
# `hurricane` and `core_bench` (bench/build-base.sh REV makes one); every run
# then also measures it, as system "hurricane-base", between the other two.
# MOUNT_OPTS=OPTS mounts both versions with `-o OPTS` (e.g. allow_other);
# RESULTS=DIR writes DIR/mount.jsonl and DIR/mount.png instead.
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-4096}; files=${2:-100000}; runs=${3:-3}
work=${BENCH_DIR:-$PWD/target/bench-mount}
res=${RESULTS:-bench/results}
out=$res/mount.jsonl
mkdir -p "$res" "$work"; : > "$out"
cargo build --release --locked -p hurricane-cli >/dev/null 2>&1
cargo build --release --locked -p hurricane --example core_bench >/dev/null 2>&1
new_hc=$PWD/target/release/hurricane; new_cb=$PWD/target/release/examples/core_bench
hc=$new_hc; cb=$new_cb
# Cold caches: the host's page cache, and for Hurricane its own block cache
# in the mount process (which drop_caches cannot reach): remount.
drop() {
    local dir=${1:-}
    if [ "$dir" = "$work/mnt" ]; then "$hc" umount "$dir"; fi
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    if [ "$dir" = "$work/mnt" ]; then "$hc" mount "$work/pool" "$dir" ${MOUNT_OPTS:+-o "$MOUNT_OPTS"}; fi
}
# A source tree tarball to extract: this project's own sources plus /usr/include.
tarball=$work/src.tar
[ -f "$tarball" ] || tar -cf "$tarball" -C / usr/include -C "$PWD" crates docs 2>/dev/null

fio_json() { # name rw bs size dir extra...
    local name=$1 rw=$2 bs=$3 size=$4 dir=$5; shift 5
    fio --name="$name" --directory="$dir" --rw="$rw" --bs="$bs" --size="$size" --ioengine=psync \
        --output-format=json "$@" | python3 -c '
import json,sys; j=json.load(sys.stdin)["jobs"][0]
print(round((j["read"]["bw"]+j["write"]["bw"])/1024,1), round(j["read"]["iops"]+j["write"]["iops"]))'
}

one() { # system dir
    local sys=$1 dir=$2 run=$3
    read -r w _ < <(fio_json seqw write 1M "${seq}M" "$dir" --end_fsync=1)
    drop "$dir"
    read -r r _ < <(fio_json seqw read 1M "${seq}M" "$dir")
    rm -f "$dir"/seqw*
    fio_json rnd write 4k 256M "$dir" --end_fsync=1 >/dev/null   # lay the file out first
    drop "$dir"
    read -r _ rr < <(fio_json rnd randread 4k 256M "$dir" --runtime=15 --time_based)
    read -r _ rw < <(fio_json rnd randwrite 4k 256M "$dir" --runtime=15 --time_based --fsync=256)
    rm -f "$dir"/rnd*
    meta=$("$cb" posix-meta "$dir" "$files")
    drop "$dir"
    local t0=$(date +%s.%N)
    mkdir -p "$dir/x"; tar -xf "$tarball" -C "$dir/x"; sync
    local tx=$(python3 -c "import time;print(round(time.time()-$t0,2))")
    rm -rf "$dir/x" "$dir/m"
    python3 - "$sys" "$run" "$w" "$r" "$rr" "$rw" "$tx" "$meta" >> "$out" <<'PY'
import json, sys
s, run, w, r, rr, rw, tx, meta = sys.argv[1:]
m = json.loads(meta)
print(json.dumps({"bench": "mount", "system": s, "run": int(run), "seq_write_mibs": float(w), "seq_read_mibs": float(r),
  "rand_read_iops": float(rr), "rand_write_iops": float(rw), "tar_extract_s": float(tx),
  "create_per_s": m["create_per_s"], "stat_per_s": m["stat_per_s"], "unlink_per_s": m["unlink_per_s"]}))
PY
}

for run in $(seq "$runs"); do
    rm -rf "$work/pool" "$work/mnt" "$work/ext4"; mkdir -p "$work/mnt" "$work/ext4"
    "$hc" mkfs "$work/pool" --devices 4 --device-size 4G >/dev/null
    "$hc" mount "$work/pool" "$work/mnt" ${MOUNT_OPTS:+-o "$MOUNT_OPTS"}
    one hurricane "$work/mnt" "$run"
    "$hc" umount "$work/mnt"
    if [ -n "${BASE:-}" ]; then
        hc=$BASE/hurricane; cb=$BASE/core_bench
        rm -rf "$work/pool"; "$hc" mkfs "$work/pool" --devices 4 --device-size 4G >/dev/null
        "$hc" mount "$work/pool" "$work/mnt" ${MOUNT_OPTS:+-o "$MOUNT_OPTS"}
        one hurricane-base "$work/mnt" "$run"
        "$hc" umount "$work/mnt"
        hc=$new_hc; cb=$new_cb
    fi
    truncate -s 16G "$work/ext4.img"; mkfs.ext4 -q -F "$work/ext4.img"
    loop=$(losetup -f --show "$work/ext4.img"); mount "$loop" "$work/ext4"
    one ext4-loop "$work/ext4" "$run"
    umount "$work/ext4"; losetup -d "$loop"; rm -f "$work/ext4.img"; rm -rf "$work/pool"
done
"$hc" bench mount-report --out "$res"   # medians, ratios, $res/mount.png
if [ -n "${BASE:-}" ]; then python3 bench/summarize.py "$out"; fi   # medians with the base version beside
