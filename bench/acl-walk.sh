#!/usr/bin/env bash
# What POSIX ACL support costs a user other than the files' owner on a
# shared mount (`-o allow_other`, so the kernel checks permissions and, with
# FUSE_POSIX_ACL, asks for each inode's access ACL), against ext4 on a loop
# device and other versions, in turns. A tarball is extracted as root
# (readable by all), then as uid 60201: the tree read whole right after a
# fresh mount (`tar -c` of it, every file opened and read: cold), and
# `find -printf %s` over it twice (the second timed: warm, attributes
# within their timeout or refreshed). A fresh pool of 2 image files (or a
# fresh ext4) for every system and round.
#
#   bench/acl-walk.sh RUNS TARBALL NAME:BIN_DIR ...
#
# NAME `ext4` (BIN_DIR ignored) is ext4 on a loop device (ACLs on, its
# default). One JSON line per system and round on stdout; medians and the
# median per-round ratios against the last system named on stderr.
set -euo pipefail
runs=${1:?RUNS}
tarball=${2:?TARBALL}
shift 2
[ $# -gt 0 ] || { echo "usage: $0 RUNS TARBALL NAME:BIN_DIR ..." >&2; exit 2; }
work=$(mktemp -d /var/tmp/acl-walk.XXXXXX)
chmod 755 "$work"
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
since() { python3 -c "print(round($(now) - $1, 4))"; }
as_user() { setpriv --reuid 60201 --regid 60201 --clear-groups "$@"; }

for r in $(seq 1 "$runs"); do
    for spec in "$@"; do
        IFS=: read -r name bin <<<"$spec"
        if [ "$name" = ext4 ]; then
            rm -f "$work/ext4.img"; truncate -s 4G "$work/ext4.img"
            mkfs.ext4 -q -F "$work/ext4.img"
            loop=$(losetup -f --show "$work/ext4.img")
            up() { mount "$loop" "$work/mnt"; }
            down() { umount "$work/mnt"; }
        else
            rm -rf "$work/pool"
            "$bin/hurricane" mkfs "$work/pool" --devices 2 --device-size 4G >/dev/null
            up() { "$bin/hurricane" mount "$work/pool" "$work/mnt" -o allow_other; }
            down() { "$bin/hurricane" umount "$work/mnt"; }
        fi
        up
        mkdir "$work/mnt/x"; tar -xf "$tarball" -C "$work/mnt/x"; chmod -R go+rX "$work/mnt/x"; sync
        down; sync; echo 3 > /proc/sys/vm/drop_caches; up
        t0=$(now); as_user tar -cf - -C "$work/mnt" x | cat > /dev/null; cold=$(since "$t0")
        as_user find "$work/mnt/x" -printf '%s\n' > /dev/null
        t0=$(now); as_user find "$work/mnt/x" -printf '%s\n' > /dev/null; warm=$(since "$t0")
        down
        if [ "$name" = ext4 ]; then losetup -d "$loop"; loop=""; fi
        echo "{\"system\":\"$name\",\"run\":$r,\"cold_read_s\":$cold,\"warm_stat_s\":$warm}" | tee -a "$out"
    done
done
python3 - "$out" >&2 <<'PY'
import collections, json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows:
    by[r["system"]].append(r)
names = list(by)
keys = ["cold_read_s", "warm_stat_s"]
for n in names:
    print(n, {k: st.median(x[k] for x in by[n]) for k in keys})
base = names[-1]
for n in names[:-1]:
    for k in keys:
        rs = [x[k] / y[k] for x, y in zip(by[n], by[base])]
        print(f"{n} / {base} {k}: {st.median(rs):.2f} (rounds {', '.join(f'{x:.2f}' for x in rs)})")
PY
