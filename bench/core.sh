#!/usr/bin/env bash
# Issue-2 core benchmarks, each beside its peer in the same run, on the same
# disk: sequential 1 MiB write+read through the native API (1-device pool and
# 4-device stripe pool of image files) vs fio direct I/O on a plain file; and
# create+stat of COUNT empty files vs ext4 on a loop device over a file.
#   bench/core.sh [SIZE_MIB] [COUNT] [RUNS]      (defaults 2048 100000 3)
# Results: bench/results/core.jsonl (one JSON object per measurement).
# A/B against another version: BASE=DIR holding its `hurricane` and
# `core_bench` (bench/build-base.sh REV); each run measures it too, with
# "-base" added to the system name. RESULTS=DIR writes DIR/core.jsonl instead.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-2048}; count=${2:-100000}; runs=${3:-3}
work=${BENCH_DIR:-$PWD/target/bench-core}
res=${RESULTS:-bench/results}
out=$res/core.jsonl
mkdir -p "$res" "$work"
: > "$out"
cargo build --release --locked --example core_bench -p hurricane >/dev/null 2>&1
cargo build --release --locked -p hurricane-cli >/dev/null 2>&1
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

for run in $(seq "$runs"); do
    rm -rf "$work"/*
    # Peer: fio on a plain file, direct I/O, same size and request size.
    fio --name=w --filename="$work/fio.dat" --rw=write --bs=1M --size="${size}M" --direct=1 --end_fsync=1 \
        --output-format=json > "$work/fw.json"
    drop
    fio --name=r --filename="$work/fio.dat" --rw=read --bs=1M --size="${size}M" --direct=1 \
        --output-format=json > "$work/fr.json"
    python3 - "$work/fw.json" "$work/fr.json" "$run" >> "$out" <<'PY'
import json, sys
w = json.load(open(sys.argv[1]))["jobs"][0]["write"]["bw"] / 1024
r = json.load(open(sys.argv[2]))["jobs"][0]["read"]["bw"] / 1024
print(json.dumps({"bench": "seq", "system": "fio-direct", "run": int(sys.argv[3]), "write_mibs": round(w, 1), "read_mibs": round(r, 1)}))
PY
    rm -f "$work/fio.dat"
    # This version, then (with BASE) the other, each with its own binaries.
    for ver in "" ${BASE:+base}; do
        if [ -n "$ver" ]; then hc=$BASE/hurricane; cb=$BASE/core_bench; sfx=-base
        else hc=$PWD/target/release/hurricane; cb=$PWD/target/release/examples/core_bench; sfx=; fi
        for devs in 1 4; do
            pool="$work/pool$devs"
            devsize=$(( (size / devs + 1024) ))M
            "$hc" mkfs "$pool" --devices "$devs" --device-size "$devsize" >/dev/null
            drop
            "$cb" seq "$pool" "$size" | sed "s/^{/{\"system\":\"hurricane-${devs}dev$sfx\",\"run\":$run,/" >> "$out"
            rm -rf "$pool"
        done
        # Metadata: native API vs the kernel on ext4 over a loop device.
        pool="$work/meta"
        "$hc" mkfs "$pool" --devices 1 --device-size 4G >/dev/null
        "$cb" meta "$pool" "$count" | sed "s/^{/{\"system\":\"hurricane$sfx\",\"run\":$run,/" >> "$out"
        rm -rf "$pool"
    done
    cb=$PWD/target/release/examples/core_bench
    truncate -s 4G "$work/ext4.img"
    mkfs.ext4 -q -F "$work/ext4.img"
    mkdir -p "$work/ext4"
    loop=$(losetup -f --show "$work/ext4.img")
    mount "$loop" "$work/ext4"
    "$cb" posix-meta "$work/ext4" "$count" | sed "s/^{/{\"system\":\"ext4-loop\",\"run\":$run,/" >> "$out"
    umount "$work/ext4"; losetup -d "$loop"; rm -f "$work/ext4.img"
done
python3 bench/summarize.py "$out"
