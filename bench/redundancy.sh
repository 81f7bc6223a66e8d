#!/usr/bin/env bash
# Redundancy benchmarks: Hurricane's replicate and parity layouts against the
# btrfs RAID profiles that also checksum, scrub and self-heal, each on image
# files on the same disk (btrfs through loop devices), in the same run:
#   replicate[2 copies]            vs btrfs raid1 over 2 loops
#   replicate(copies=3)            vs btrfs raid1c3 over 3 loops (meta-data in
#                                  three copies on both)
#   parity(data=3,parity=1)        vs btrfs raid5 over 4 loops
#   parity(data=2,parity=2)        vs btrfs raid6 over 4 loops
# Measured: sequential write and read (1 MiB requests), 4 KiB random writes,
# sequential read with one device missing, scrub throughput, and the time to
# rebuild the missing device onto a new one, per GiB of file data.
#   bench/redundancy.sh [SEQ_MIB] [RUNS] [PROFILES]   (defaults 1024 3 "raid1 raid5 raid6")
# Results: bench/results/redundancy.jsonl and redundancy.png, summary on stdout.
# RESULTS=DIR writes there instead; BENCH_DIR=DIR holds the images.
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-1024}; runs=${2:-3}; profiles=${3:-raid1 raid5 raid6}
work=${BENCH_DIR:-$PWD/target/bench-redundancy}
res=${RESULTS:-bench/results}
out=$res/redundancy.jsonl
dev_size=${DEV_SIZE:-3G}
mkdir -p "$res" "$work"; : > "$out"
command -v mkfs.btrfs >/dev/null || { echo "needs btrfs-progs (scripts/setup.sh installs it)" >&2; exit 1; }
cargo build --release --locked -p hurricane-cli >/dev/null 2>&1
hc=$PWD/target/release/hurricane
mnt=$work/mnt; mkdir -p "$mnt"

now() { date +%s.%N; }
since() { python3 -c "import sys;print(round($(now)-$1,3))"; }
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
fio_mibs() { # rw bs size dir extra... -> MiB/s and IOPS of the job
    local rw=$1 bs=$2 size=$3 dir=$4; shift 4
    fio --name=job --directory="$dir" --rw="$rw" --bs="$bs" --size="$size" --ioengine=psync \
        --output-format=json "$@" | python3 -c '
import json,sys; j=json.load(sys.stdin)["jobs"][0]
print(round((j["read"]["bw"]+j["write"]["bw"])/1024,1), round(j["read"]["iops"]+j["write"]["iops"]))'
}
layout_of() { # profile -> devices and Hurricane layout
    case $1 in
        raid1) echo "2 replicate[extent@0,extent@1]" ;;
        raid1c3) echo "3 replicate(copies=3)[extent@0,extent@1,extent@2]" ;;
        raid5) echo "4 parity(data=3,parity=1)[extent@0,extent@1,extent@2,extent@3]" ;;
        raid6) echo "4 parity(data=2,parity=2)[extent@0,extent@1,extent@2,extent@3]" ;;
        *) echo "unknown profile $1" >&2; exit 1 ;;
    esac
}
record() { # system profile run w r rw dr scrub rebuild
    python3 - "$@" >> "$out" <<'PY'
import json, sys
s, p, run, w, r, rw, dr, sc, rb = sys.argv[1:]
print(json.dumps({"bench": "redundancy", "system": s, "profile": p, "run": int(run),
  "seq_write_mibs": float(w), "seq_read_mibs": float(r), "rand_write_iops": float(rw),
  "degraded_read_mibs": float(dr), "scrub_mibs": float(sc), "rebuild_s_per_gib": float(rb)}))
PY
}

# The common part: sequential write and read of the test file, 4 KiB random
# writes into a second file (removed again, so scrub and rebuild see the
# sequential file alone). $1 = directory, $2 = remount command for cold reads.
workload() {
    local dir=$1 remount=$2
    read -r w _ < <(fio_mibs write 1M "${seq}M" "$dir" --end_fsync=1 --filename=seqfile)
    $remount; cold
    read -r r _ < <(fio_mibs read 1M "${seq}M" "$dir" --filename=seqfile)
    fio_mibs write 1M 256M "$dir" --end_fsync=1 --filename=rndfile >/dev/null
    read -r _ rw < <(fio_mibs randwrite 4k 256M "$dir" --filename=rndfile --runtime=15 --time_based --fsync=256)
    rm -f "$dir/rndfile"; sync
    echo "$w $r $rw"
}

hurricane_run() { # profile run
    local p=$1 run=$2; read -r n lay < <(layout_of "$p")
    local pool=$work/pool
    rm -rf "$pool"; "$hc" mkfs "$pool" --devices "$n" --device-size "$dev_size" >/dev/null
    "$hc" mount "$pool" "$mnt"
    setfattr -n user.hurricane.dir_layout -v "$lay" "$mnt"
    local remount="eval $hc umount $mnt && $hc mount $pool $mnt"
    read -r w r rw < <(workload "$mnt" "$remount")
    $remount; cold
    local t0; t0=$(now); "$hc" scrub "$mnt" >/dev/null; local st; st=$(since "$t0")
    "$hc" umount "$mnt"
    # One device gone: its image moved away, the pool mounted degraded.
    mv "$pool/dev1.img" "$work/gone.img"
    "$hc" mount "$pool" "$mnt"; cold
    read -r dr _ < <(fio_mibs read 1M "${seq}M" "$mnt" --filename=seqfile)
    "$hc" umount "$mnt"; rm -f "$work/gone.img"
    t0=$(now); "$hc" device replace "$pool" 1 "$pool/new1.img" >/dev/null; local rt; rt=$(since "$t0")
    record hurricane "$p" "$run" "$w" "$r" "$rw" "$dr" \
        "$(python3 -c "print(round($seq/$st,1))")" "$(python3 -c "print(round($rt/($seq/1024),2))")"
    rm -rf "$pool"
}

btrfs_run() { # profile run
    local p=$1 run=$2; read -r n _ < <(layout_of "$p")
    local loops=()
    for i in $(seq 0 $((n - 1))); do
        rm -f "$work/b$i.img"; truncate -s "$dev_size" "$work/b$i.img"
        loops+=("$(losetup -f --show "$work/b$i.img")")
    done
    local m=raid1; [ "$p" = raid1c3 ] && m=raid1c3
    mkfs.btrfs -q -f -d "$p" -m "$m" "${loops[@]}" >/dev/null
    mount "${loops[0]}" "$mnt"
    local remount="eval umount $mnt && mount ${loops[0]} $mnt"
    read -r w r rw < <(workload "$mnt" "$remount")
    $remount; cold
    local t0; t0=$(now); btrfs scrub start -B "$mnt" >/dev/null; local st; st=$(since "$t0")
    umount "$mnt"
    # One device gone: its loop detached, the file system mounted degraded.
    losetup -d "${loops[1]}"; rm -f "$work/b1.img"
    btrfs device scan --forget >/dev/null 2>&1 || true
    local opts=degraded
    for l in "${loops[0]}" "${loops[@]:2}"; do opts+=",device=$l"; done
    mount -o "$opts" "${loops[0]}" "$mnt"; cold
    read -r dr _ < <(fio_mibs read 1M "${seq}M" "$mnt" --filename=seqfile)
    truncate -s "$dev_size" "$work/new1.img"; local nl; nl=$(losetup -f --show "$work/new1.img")
    t0=$(now); btrfs replace start -B 2 "$nl" "$mnt" >/dev/null; local rt; rt=$(since "$t0")
    umount "$mnt"
    for l in "${loops[0]}" "${loops[@]:2}" "$nl"; do losetup -d "$l"; done
    rm -f "$work"/b*.img "$work/new1.img"
    record "btrfs-$p" "$p" "$run" "$w" "$r" "$rw" "$dr" \
        "$(python3 -c "print(round($seq/$st,1))")" "$(python3 -c "print(round($rt/($seq/1024),2))")"
}

for run in $(seq "$runs"); do
    for p in $profiles; do
        hurricane_run "$p" "$run"
        btrfs_run "$p" "$run"
    done
done
"$hc" bench redundancy-report --out "$res"   # medians, ratios, $res/redundancy.png
