#!/usr/bin/env bash
# Compression: Hurricane's compress layouts against its plain layout and
# against btrfs with forced compression, on the same disk, in the same run:
#   plain   stripe(width=2)                        btrfs        -d raid0 over 2 loops
#   lz4     compress(algo=lz4)[stripe(width=2)]    btrfs-lzo    -o compress-force=lzo
#   zstd    compress(algo=zstd)[stripe(width=2)]   btrfs-zstd   -o compress-force=zstd:3
# Two data sets of SIZE MiB: `text`, JSON web-server log lines (generated,
# seeded), and `random` bytes (nothing to gain: what compression costs).
# Measured: sequential write through `dd conv=fsync` (1 MiB requests), cold
# sequential read after a remount with the page cache dropped, and the bytes
# the file takes on the devices (allocated blocks for Hurricane, the file
# system's used space before and after for btrfs). The same through the
# native API (`core_bench seq`, 1 MiB requests): `native-plain`,
# `native-lz4`, `native-zstd`.
#   bench/compress.sh [SIZE_MIB] [RUNS]      (defaults 1024 3)
# Results: bench/results/compress.jsonl and compress.png, summary on stdout.
# RESULTS=DIR writes there instead; BENCH_DIR=DIR holds the images.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-1024}; runs=${2:-3}
work=${BENCH_DIR:-$PWD/target/bench-compress}
res=${RESULTS:-bench/results}
out=$res/compress.jsonl
dev_size=${DEV_SIZE:-$(( size * 2 + 1024 ))M}
mkdir -p "$res" "$work"; : > "$out"
command -v mkfs.btrfs >/dev/null || { echo "needs btrfs-progs (scripts/setup.sh installs it)" >&2; exit 1; }
cargo build --release --locked -p hurricane-cli >/dev/null 2>&1
cargo build --release --locked -p hurricane --example core_bench >/dev/null 2>&1
hc=$PWD/target/release/hurricane
cb=$PWD/target/release/examples/core_bench
mnt=$work/mnt; mkdir -p "$mnt"
loops=()
cleanup() {
    mountpoint -q "$mnt" && { "$hc" umount "$mnt" 2>/dev/null || umount "$mnt" 2>/dev/null || umount -l "$mnt"; }
    for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null || true; done
}
trap cleanup EXIT

now() { date +%s.%N; }
mibs() { python3 -c "print(round($size/($(now)-$1),1))"; }
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# The data sets, made once (the text is seeded: the same bytes every run).
if [ ! -s "$work/text" ] || [ "$(stat -c %s "$work/text")" -ne $((size << 20)) ]; then
    python3 - "$work/text" "$size" <<'PY'
import json, random, sys
random.seed(1)
paths = ["/api/v1/users", "/api/v1/orders", "/static/app.js", "/static/style.css", "/index.html", "/api/v1/search", "/login"]
agents = ["Mozilla/5.0 (X11; Linux x86_64)", "curl/8.5.0", "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1)", "python-requests/2.31"]
want = int(sys.argv[2]) << 20
with open(sys.argv[1], "w") as f:
    n, t = 0, 1700000000.0
    while n < want:
        t += random.expovariate(50)
        rec = {"ts": round(t, 3), "ip": f"10.{random.randint(0, 3)}.{random.randint(0, 255)}.{random.randint(1, 254)}",
               "method": random.choice(["GET", "GET", "GET", "POST"]),
               "path": random.choice(paths) + (f"/{random.randint(1, 99999)}" if random.random() < 0.3 else ""),
               "status": random.choice([200] * 20 + [304, 404, 500]), "bytes": random.randint(200, 90000),
               "ms": round(random.lognormvariate(2, 1), 2), "ua": random.choice(agents)}
        s = json.dumps(rec) + "\n"
        f.write(s[: want - n])
        n += min(len(s), want - n)
PY
fi
[ -s "$work/random" ] && [ "$(stat -c %s "$work/random")" -eq $((size << 20)) ] ||
    head -c $((size << 20)) /dev/urandom > "$work/random"

record() { # data system run write_mibs read_mibs stored_bytes
    python3 - "$@" "$((size << 20))" >> "$out" <<'PY'
import json, sys
d, s, run, w, r, st, fb = sys.argv[1:]
print(json.dumps({"bench": "compress", "data": d, "system": s, "run": int(run), "write_mibs": float(w),
  "read_mibs": float(r), "file_bytes": int(fb), "stored_bytes": int(st)}))
PY
}

# Writes the data set, remounts cold and reads it back: "write read".
write_read() { # src dst remount
    cat "$1" > /dev/null
    local t0; t0=$(now); dd if="$1" of="$2" bs=1M status=none conv=fsync; local w; w=$(mibs "$t0")
    $3; cold
    t0=$(now); dd if="$2" of=/dev/null bs=1M status=none; local r; r=$(mibs "$t0")
    echo "$w $r"
}

hurricane_run() { # data system layout run
    local pool=$work/pool
    rm -rf "$pool"; "$hc" mkfs "$pool" --devices 2 --device-size "$dev_size" >/dev/null
    "$hc" mount "$pool" "$mnt"
    setfattr -n user.hurricane.dir_layout -v "$3" "$mnt"
    read -r w r < <(write_read "$work/$1" "$mnt/f" "eval $hc umount $mnt && $hc mount $pool $mnt")
    local stored; stored=$(( $(stat -c %b "$mnt/f") * 512 ))
    cmp -s "$work/$1" "$mnt/f" || { echo "$2: $1 read back different" >&2; exit 1; }
    "$hc" umount "$mnt"; rm -rf "$pool"
    record "$1" "$2" "$4" "$w" "$r" "$stored"
}

native_run() { # data system layout run
    local pool=$work/pool
    rm -rf "$pool"; "$hc" mkfs "$pool" --devices 2 --device-size "$dev_size" >/dev/null
    cat "$work/$1" > /dev/null
    local j; j=$("$cb" seq "$pool" "$size" "$3" "$work/$1")
    rm -rf "$pool"
    read -r w r st < <(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["write_mibs"], j["read_mibs"], j["stored_bytes"])' "$j")
    record "$1" "$2" "$4" "$w" "$r" "$st"
}

btrfs_run() { # data system mount-options run
    loops=()
    for i in 0 1; do rm -f "$work/b$i.img"; truncate -s "$dev_size" "$work/b$i.img"; loops+=("$(losetup -f --show "$work/b$i.img")"); done
    mkfs.btrfs -q -f -d raid0 -m raid1 "${loops[@]}" >/dev/null
    local o=${3:+-o $3}
    # shellcheck disable=SC2086
    mount $o "${loops[0]}" "$mnt"; sync
    local before; before=$(df -B1 --output=used "$mnt" | tail -1)
    # shellcheck disable=SC2086
    read -r w r < <(write_read "$work/$1" "$mnt/f" "eval umount $mnt && mount $o ${loops[0]} $mnt")
    sync; local after; after=$(df -B1 --output=used "$mnt" | tail -1)
    cmp -s "$work/$1" "$mnt/f" || { echo "$2: $1 read back different" >&2; exit 1; }
    umount "$mnt"
    for l in "${loops[@]}"; do losetup -d "$l"; done; loops=()
    rm -f "$work"/b*.img
    record "$1" "$2" "$4" "$w" "$r" "$(( after - before ))"
}

for run in $(seq 1 "$runs"); do
    for data in text random; do
        hurricane_run "$data" plain "stripe(width=2)" "$run"
        hurricane_run "$data" lz4 "compress(algo=lz4)[stripe(width=2)]" "$run"
        hurricane_run "$data" zstd "compress(algo=zstd)[stripe(width=2)]" "$run"
        native_run "$data" native-plain "stripe(width=2)" "$run"
        native_run "$data" native-lz4 "compress(algo=lz4)[stripe(width=2)]" "$run"
        native_run "$data" native-zstd "compress(algo=zstd)[stripe(width=2)]" "$run"
        btrfs_run "$data" btrfs "" "$run"
        btrfs_run "$data" btrfs-lzo "compress-force=lzo" "$run"
        btrfs_run "$data" btrfs-zstd "compress-force=zstd:3" "$run"
        echo "run $run: $data done" >&2
    done
done
"$hc" bench compress-report --out "$res"
