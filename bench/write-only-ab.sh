#!/usr/bin/env bash
# Writes through write-only descriptors, through the mount, for two builds
# in turn: a tarball extracted (tar opens every file write-only), a 256 MiB
# file copied with dd (1 MiB writes, fsync at the end, compared afterwards),
# and 20,000 appends of 100 bytes to a log opened O_WRONLY|O_APPEND.
# Each on a fresh pool of 4 image files (default layout: a stripe over all
# four); the request counts of the extraction come from the mount's
# statistics.
#   bench/write-only-ab.sh BEFORE_BIN AFTER_BIN [RUNS]     (default 3)
# TARBALL=FILE is the tarball (default: /usr/include and these sources,
# made once in BENCH_DIR); BENCH_DIR=DIR holds the images (default
# /var/tmp). One line per run and build on stdout, medians at the end.
set -euo pipefail
before=$1 after=$2 runs=${3:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
work=${BENCH_DIR:-/var/tmp}/write-only-ab
mnt=$work/mnt pool=$work/pool
mkdir -p "$mnt"
trap 'umount "$mnt" 2>/dev/null || true' EXIT
tarball=${TARBALL:-$work/src.tar}
[ -f "$tarball" ] || tar -cf "$tarball" -C / usr/include -C "$here" crates docs 2>/dev/null
[ -f "$work/src.bin" ] || head -c 256M /dev/urandom >"$work/src.bin"
now() { date +%s.%N; }
one() {
    local bin=$1 label=$2
    umount "$mnt" 2>/dev/null || true
    rm -rf "$pool"
    "$bin" mkfs -n 4 -s 2G "$pool" >/dev/null
    "$bin" mount "$pool" "$mnt"
    mkdir "$mnt/x"
    local t0 t1 t2 t3 counts append
    t0=$(now); tar -xf "$tarball" -C "$mnt/x"; sync; t1=$(now)
    counts=$("$bin" stats --json "$mnt" | python3 -c 'import json,sys; o=json.load(sys.stdin)["ops"]; print(o["getxattr"]["count"], o["write"]["count"])')
    t2=$(now); dd if="$work/src.bin" of="$mnt/big" bs=1M conv=fsync status=none; t3=$(now)
    cmp "$work/src.bin" "$mnt/big"
    append=$(python3 - "$mnt/log" <<'EOF'
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
rec = b"x" * 99 + b"\n"
t = time.perf_counter()
for _ in range(20000):
    os.write(fd, rec)
el = time.perf_counter() - t
os.close(fd)
assert os.path.getsize(sys.argv[1]) == 2000000
print("%.1f" % (el / 20000 * 1e6))
EOF
)
    "$bin" umount "$mnt"
    set -- $counts
    python3 -c "import sys; a=sys.argv; print(f'{a[1]} tar_s={float(a[3])-float(a[2]):.3f} tar_getxattrs={a[4]} tar_writes={a[5]} dd_MBps={256*1.048576/(float(a[7])-float(a[6])):.0f} append_us={a[8]}')" \
        "$label" "$t0" "$t1" "$1" "$2" "$t2" "$t3" "$append"
}
for _ in $(seq "$runs"); do
    one "$after" after
    one "$before" before
done | tee "$work/runs.txt"
python3 - "$work/runs.txt" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
keys = [kv.split("=")[0] for kv in rows[0][1:]]
med = {}
for label in ("before", "after"):
    vals = [dict(kv.split("=") for kv in r[1:]) for r in rows if r[0] == label]
    med[label] = {k: statistics.median(float(v[k]) for v in vals) for k in keys}
for k in keys:
    b, a = med["before"][k], med["after"][k]
    print(f"{k}: before {b:g}, after {a:g}, after/before {a / b:.2f}")
EOF
