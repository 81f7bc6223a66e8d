#!/usr/bin/env bash
# The log layout through the mount, against extent on the same pool and
# ext4 on a loop device, all backed by files on the same disk, in the same
# run (Seltzer's thesis, Fig. 5-8): a file of MIB MiB laid out sequentially,
# then 4 KiB random overwrites for SECONDS seconds (fio, fsync every 32
# writes: IOPS), then a sequential scan of the file after those updates
# (page cache dropped, the mount restarted: MiB/s). The backing files are
# written whole first, as a device is: a log writes where an overwrite in
# place would not, and a sparse image file would charge it the host file
# system's allocation.
#   bench/log.sh [MIB] [RUNS] [SECONDS]     (defaults 1024 3 20)
# Results: bench/results/log.jsonl (RESULTS=DIR for another place), medians
# and ratios on stdout. BENCH_DIR=DIR holds the images.
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-1024}; runs=${2:-3}; secs=${3:-20}
work=${BENCH_DIR:-$PWD/target/bench-log}
res=${RESULTS:-bench/results}
out=$res/log.jsonl
mkdir -p "$res" "$work"; : > "$out"
command -v fio >/dev/null || { echo "needs fio (scripts/setup.sh installs it)" >&2; exit 1; }
cargo build --release --locked -p hurricane-cli >/dev/null 2>&1
hc=$PWD/target/release/hurricane
pool=$work/pool mnt=$work/mnt ext=$work/ext4
mkdir -p "$mnt" "$ext"
loop=
cleanup() {
    "$hc" umount "$mnt" 2>/dev/null || true
    umount "$ext" 2>/dev/null || true
    [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null || true
}
trap cleanup EXIT

fio_json() { # file rw bs extra... -> "MiB/s IOPS"
    local f=$1 rw=$2 bs=$3; shift 3
    fio --name=j --filename="$f" --rw="$rw" --bs="$bs" --size="${mib}M" --ioengine=psync \
        --output-format=json "$@" 2>/dev/null | python3 -c '
import json,sys; j=json.load(sys.stdin)["jobs"][0]
print(round((j["read"]["bw"]+j["write"]["bw"])/1024,1), round(j["read"]["iops"]+j["write"]["iops"]))'
}
remount() { "$hc" umount "$mnt"; sync; echo 3 > /proc/sys/vm/drop_caches; "$hc" mount "$pool" "$mnt"; }
record() { # system run layout_write rand_iops scan_mibs wa
    python3 - "$@" "$mib" >> "$out" <<'PY'
import json, sys
s, run, w, iops, scan, wa, mib = sys.argv[1:]
print(json.dumps({"bench": "log", "system": s, "run": int(run), "file_mib": int(mib), "seq_write_mibs": float(w),
  "rand_write_iops": float(iops), "scan_after_updates_mibs": float(scan), "write_amplification": wa}))
PY
}

one_hfs() { # layout run
    local layout=$1 run=$2
    touch "$mnt/f"; setfattr -n user.hurricane.layout -v "$layout" "$mnt/f"
    read -r w _ < <(fio_json "$mnt/f" write 1M --end_fsync=1)
    remount
    read -r _ iops < <(fio_json "$mnt/f" randwrite 4k --fsync=32 --runtime="$secs" --time_based)
    # The log's counters of this mount: the random writes alone.
    local wa
    wa=$("$hc" stats "$mnt" --json | python3 -c 'import json,sys; l=json.load(sys.stdin).get("log",[]); print(l[0]["write_amplification"] if l else "-")')
    remount
    read -r scan _ < <(fio_json "$mnt/f" read 1M)
    record "hurricane-${layout%@*}" "$run" "$w" "$iops" "$scan" "$wa"
    rm -f "$mnt/f"
}

for run in $(seq "$runs"); do
    rm -rf "$pool" "$work/dev0.img"
    dd if=/dev/zero of="$work/dev0.img" bs=1M count=$((mib * 3 + 1024)) conv=fsync status=none
    "$hc" mkfs "$pool" --device "$work/dev0.img" >/dev/null
    "$hc" mount "$pool" "$mnt"
    # Alternate the order between runs.
    if [ $((run % 2)) = 1 ]; then order="log@0 extent@0"; else order="extent@0 log@0"; fi
    for l in $order; do one_hfs "$l" "$run"; done
    "$hc" umount "$mnt"
    rm -rf "$pool" "$work/dev0.img"
    dd if=/dev/zero of="$work/ext4.img" bs=1M count=$((mib * 3 + 1024)) conv=fsync status=none
    mkfs.ext4 -q -F "$work/ext4.img"
    loop=$(losetup -f --show "$work/ext4.img"); mount "$loop" "$ext"
    read -r w _ < <(fio_json "$ext/f" write 1M --end_fsync=1)
    umount "$ext"; sync; echo 3 > /proc/sys/vm/drop_caches; mount "$loop" "$ext"
    read -r _ iops < <(fio_json "$ext/f" randwrite 4k --fsync=32 --runtime="$secs" --time_based)
    umount "$ext"; sync; echo 3 > /proc/sys/vm/drop_caches; mount "$loop" "$ext"
    read -r scan _ < <(fio_json "$ext/f" read 1M)
    record ext4-loop "$run" "$w" "$iops" "$scan" "-"
    umount "$ext"; losetup -d "$loop"; loop=; rm -f "$work/ext4.img"
done

python3 - "$out" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
systems = sorted({r["system"] for r in rows})
med = {s: {k: st.median(r[k] for r in rows if r["system"] == s)
           for k in ("seq_write_mibs", "rand_write_iops", "scan_after_updates_mibs")} for s in systems}
print(f"{'system':<20} {'seq write MiB/s':>16} {'4K rand write IOPS':>19} {'scan after MiB/s':>17}")
for s in systems:
    m = med[s]
    print(f"{s:<20} {m['seq_write_mibs']:>16} {m['rand_write_iops']:>19} {m['scan_after_updates_mibs']:>17}")
if "hurricane-log" in med and "hurricane-extent" in med:
    a, b = med["hurricane-log"], med["hurricane-extent"]
    print(f"log / extent: random writes {a['rand_write_iops']/b['rand_write_iops']:.2f}, "
          f"scan after updates {a['scan_after_updates_mibs']/b['scan_after_updates_mibs']:.2f}")
if "hurricane-log" in med and "ext4-loop" in med:
    a, b = med["hurricane-log"], med["ext4-loop"]
    print(f"log / ext4: random writes {a['rand_write_iops']/b['rand_write_iops']:.2f}")
PY
