#!/usr/bin/env bash
# Removing a device from a pool in use: Hurricane's `device remove` (files
# moved off the device through the mount) against `btrfs device remove` of a
# raid1 file system, each over 4 image files on the same disk (btrfs through
# loop devices), in the same run. The same data is written to both: FILES
# files of FILE_MIB MiB on two-copy mirrors; then device 3 is removed, and
# the time is divided by the file data written (the same for both); what
# device 3 held is recorded too (btrfs counts its allocated data chunks).
#   bench/evacuate.sh [FILES] [FILE_MIB] [RUNS]     (defaults 8 64 3)
# Results: bench/results/evacuate.jsonl (RESULTS=DIR for another place),
# medians and the ratio on stdout. BENCH_DIR=DIR holds the images.
set -euo pipefail
cd "$(dirname "$0")/.."
files=${1:-8}; mib=${2:-64}; runs=${3:-3}
work=${BENCH_DIR:-$PWD/target/bench-evacuate}
res=${RESULTS:-bench/results}
out=$res/evacuate.jsonl
dev_size=${DEV_SIZE:-2G}
mkdir -p "$res" "$work"; : > "$out"
command -v mkfs.btrfs >/dev/null || { echo "needs btrfs-progs (scripts/setup.sh installs it)" >&2; exit 1; }
cargo build --release --locked -p hurricane-cli >/dev/null 2>&1
hc=$PWD/target/release/hurricane
mnt=$work/mnt; mkdir -p "$mnt"

now() { date +%s.%N; }
since() { python3 -c "import sys;print(round($(now)-$1,3))"; }
fill() { # directory: FILES files of FILE_MIB MiB, synced
    fio --name=f --directory="$1" --rw=write --bs=1M --size="${mib}M" --numjobs="$files" \
        --ioengine=psync --end_fsync=1 --output-format=terse >/dev/null
}
record() { # system run seconds bytes_on_device
    python3 - "$@" "$((files * mib))" >> "$out" <<'PY'
import json, sys
s, run, t, b, data_mib = sys.argv[1:]
t, b = float(t), int(b)
print(json.dumps({"bench": "evacuate", "system": s, "run": int(run), "seconds": t, "bytes_on_device": b,
  "data_mib": int(data_mib), "s_per_gib": round(t / (int(data_mib) / 1024), 3)}))
PY
}

hurricane_run() {
    local run=$1 pool=$work/pool
    rm -rf "$pool"; "$hc" mkfs "$pool" --devices 4 --device-size "$dev_size" >/dev/null
    "$hc" mount "$pool" "$mnt"
    setfattr -n user.hurricane.dir_layout -v "replicate(copies=2)" "$mnt"
    fill "$mnt"
    local used; used=$("$hc" status --json "$mnt" | python3 -c '
import json, sys; print(next(d["used"] for d in json.load(sys.stdin)["devices"] if d["index"] == 3))')
    local t0; t0=$(now); "$hc" device remove "$mnt" 3 >/dev/null; local t; t=$(since "$t0")
    "$hc" umount "$mnt"
    "$hc" fsck "$pool" >/dev/null
    record hurricane "$run" "$t" "$used"
    rm -rf "$pool"
}

btrfs_run() {
    local run=$1 loops=()
    for i in 0 1 2 3; do
        rm -f "$work/b$i.img"; truncate -s "$dev_size" "$work/b$i.img"
        loops+=("$(losetup -f --show "$work/b$i.img")")
    done
    mkfs.btrfs -q -f -d raid1 -m raid1 "${loops[@]}" >/dev/null
    mount "${loops[0]}" "$mnt"
    fill "$mnt"; sync
    local used; used=$(btrfs device usage -b "$mnt" | awk -v d="${loops[3]}" '
        $1 == d"," { on = 1; next } on && $1 == "Data,RAID1:" { print $2; exit }')
    local t0; t0=$(now); btrfs device remove "${loops[3]}" "$mnt"; local t; t=$(since "$t0")
    umount "$mnt"
    for l in "${loops[@]}"; do losetup -d "$l"; done
    rm -f "$work"/b*.img
    record btrfs-raid1 "$run" "$t" "${used:-0}"
}

for run in $(seq "$runs"); do
    hurricane_run "$run"
    btrfs_run "$run"
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for s in ("hurricane", "btrfs-raid1"):
    v = [r for r in rows if r["system"] == s and r["s_per_gib"]]
    med[s] = (statistics.median(r["s_per_gib"] for r in v), statistics.median(r["bytes_on_device"] for r in v) / 2**20)
    print(f"{s:12} median {med[s][0]:.2f} s per GiB of file data ({med[s][1]:.0f} MiB on the removed device), {len(v)} runs")
print(f"speed ratio (btrfs time / Hurricane time): {med['btrfs-raid1'][0] / med['hurricane'][0]:.2f}")
PY
