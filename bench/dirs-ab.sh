#!/usr/bin/env bash
# Directory listings and small files through the mount, against ext4 on a
# loop device and other versions or mount options, in turns: a tarball
# extracted (timed, with the sync after it), `find` over the tree warm (the
# median of FINDS runs after one that warms the caches), and CREATES files
# of 4 KiB each written and closed by one process (files/s). A fresh pool of
# 2 image files (or a fresh ext4) for every system and round.
#
#   bench/dirs-ab.sh RUNS TARBALL NAME:BIN_DIR[:MOUNT_OPTS] ...
#
# NAME `ext4` (BIN_DIR ignored) is ext4 on a loop device. E.g.
#   tar -cf /var/tmp/include.tar -C /usr include
#   bench/dirs-ab.sh 3 /var/tmp/include.tar ext4:- new:target/release \
#       new-wb:target/release:writeback_cache old:$(bench/build-base.sh HEAD~1)
#
# One JSON line per system and round on stdout; medians, and the median
# per-round ratios against ext4 and against the last system named, on stderr.
set -euo pipefail
runs=${1:?RUNS}
tarball=${2:?TARBALL}
shift 2
[ $# -gt 0 ] || { echo "usage: $0 RUNS TARBALL NAME:BIN_DIR[:MOUNT_OPTS] ..." >&2; exit 2; }
finds=${FINDS:-5}
creates=${CREATES:-2000}
work=$(mktemp -d /var/tmp/dirs-ab.XXXXXX)
out="$work/rows.jsonl"
loop=""
cleanup() {
    if mountpoint -q "$work/mnt"; then umount "$work/mnt" 2>/dev/null || umount -l "$work/mnt"; fi
    [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/mnt"
now() { date +%s.%N; }
since() { python3 -c "import sys; print(round($(now) - $1, 4))"; }

measure() { # dir -> "tar_s find_s creates_per_s"
    local dir=$1 t0 tx
    t0=$(now); mkdir "$dir/x"; tar -xf "$tarball" -C "$dir/x"; sync; tx=$(since "$t0")
    find "$dir/x" >/dev/null
    local f=()
    for _ in $(seq "$finds"); do t0=$(now); find "$dir/x" >/dev/null; f+=("$(since "$t0")"); done
    local fm
    fm=$(python3 -c "import statistics,sys; print(statistics.median(map(float, sys.argv[1:])))" "${f[@]}")
    local cr
    cr=$(python3 - "$dir/c" "$creates" <<'PY'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
os.mkdir(d)
b = b"x" * 4096
t = time.time()
for i in range(n):
    with open(f"{d}/f{i}", "wb") as f:
        f.write(b)
print(round(n / (time.time() - t)))
PY
)
    echo "$tx $fm $cr"
}

for r in $(seq 1 "$runs"); do
    for spec in "$@"; do
        IFS=: read -r name bin opts <<<"$spec"
        if [ "$name" = ext4 ]; then
            rm -f "$work/ext4.img"; truncate -s 4G "$work/ext4.img"
            mkfs.ext4 -q -F "$work/ext4.img"
            loop=$(losetup -f --show "$work/ext4.img")
            mount "$loop" "$work/mnt"
            read -r tx fm cr < <(measure "$work/mnt")
            umount "$work/mnt"; losetup -d "$loop"; loop=""
        else
            rm -rf "$work/pool"
            "$bin/hurricane" mkfs "$work/pool" --devices 2 --device-size 4G >/dev/null
            "$bin/hurricane" mount "$work/pool" "$work/mnt" ${opts:+-o "$opts"}
            read -r tx fm cr < <(measure "$work/mnt")
            "$bin/hurricane" umount "$work/mnt"
        fi
        echo "{\"system\":\"$name\",\"options\":\"${opts:-}\",\"run\":$r,\"tar_s\":$tx,\"find_s\":$fm,\"creates_per_s\":$cr}" | tee -a "$out"
    done
done
python3 - "$out" >&2 <<'PY'
import collections, json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows:
    by[r["system"]].append(r)
names = list(by)
keys = ["tar_s", "find_s", "creates_per_s"]
for n in names:
    print(n, {k: st.median(x[k] for x in by[n]) for k in keys})
def ratios(a, b):
    for k in keys:
        rs = [x[k] / y[k] for x, y in zip(by[a], by[b])]
        print(f"{a} / {b} {k}: {st.median(rs):.2f} (rounds {', '.join(f'{x:.2f}' for x in rs)})")
for n in names:
    if n != "ext4" and "ext4" in by:
        ratios(n, "ext4")
base = names[-1]
for n in names[:-1]:
    if n not in ("ext4", base):
        ratios(n, base)
PY
