#!/usr/bin/env bash
# Requests whose pieces run side by side, through the mount of a pool of 4
# image files (default layout: a stripe over all four), for two builds in
# turn: 1 MiB sequential and 256 KiB random reads with O_DIRECT (every read
# reaches the engine and is split over the devices), and 4 KiB writes each
# followed by fsync (every commit flushes the devices it wrote in parallel).
# fio, 8 s a measurement.
#   bench/helpers-ab.sh BEFORE_BIN AFTER_BIN [RUNS]     (default 3)
# One line per run and build on stdout, medians at the end; BENCH_DIR=DIR
# holds the images (default /var/tmp).
set -euo pipefail
before=$1 after=$2 runs=${3:-3}
work=${BENCH_DIR:-/var/tmp}/helpers-ab
mnt=$work/mnt pool=$work/pool
command -v fio >/dev/null || { echo "needs fio (scripts/setup.sh installs it)" >&2; exit 1; }
mkdir -p "$mnt"
trap 'umount "$mnt" 2>/dev/null || true' EXIT
bw() { python3 -c 'import json,sys;j=json.load(sys.stdin)["jobs"][0];print("%.0f"%(j[sys.argv[1]][sys.argv[2]]))' "$@"; }
one() {
    local bin=$1 label=$2
    umount "$mnt" 2>/dev/null || true
    rm -rf "$pool"
    "$bin" mkfs -n 4 -s 1G "$pool" >/dev/null
    "$bin" mount -f "$pool" "$mnt" >"$work/$label.log" 2>&1 &
    for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
    fio --name=w --rw=write --bs=1M --size=512M --end_fsync=1 --filename="$mnt/big" --output-format=terse >/dev/null
    local seq rnd syn
    seq=$(fio --name=r --rw=read --bs=1M --size=512M --direct=1 --filename="$mnt/big" --runtime=8 --time_based --output-format=json | bw read bw)
    rnd=$(fio --name=r --rw=randread --bs=256k --size=512M --direct=1 --filename="$mnt/big" --runtime=8 --time_based --output-format=json | bw read bw)
    syn=$(fio --name=s --rw=write --bs=4k --size=64M --fsync=1 --filename="$mnt/syncf" --runtime=8 --time_based --output-format=json | bw write iops)
    umount "$mnt"
    wait
    echo "$label seq_read_1M_KiBps=$seq rand_read_256K_KiBps=$rnd write_4K_fsync_iops=$syn"
}
for _ in $(seq "$runs"); do
    one "$after" after
    one "$before" before
done | tee "$work/runs.txt"
python3 - "$work/runs.txt" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, *kv = line.split()
    for k, v in (x.split("=") for x in kv):
        rows.setdefault(k, {}).setdefault(label, []).append(float(v))
for k, by in rows.items():
    b, a = statistics.median(by["before"]), statistics.median(by["after"])
    print(f"{k}: before {b:.0f}, after {a:.0f}, after/before {a / b:.2f}")
EOF
