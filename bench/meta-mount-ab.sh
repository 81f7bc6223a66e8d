#!/usr/bin/env bash
# Meta-data rates through the mount for several versions or mount options,
# in turns: COUNT empty files created in one directory, each stat'ed, each
# unlinked (`core_bench posix-meta`), on a fresh pool of 2 image files for
# every system and round; the mount's peak resident memory beside.
#
#   bench/meta-mount-ab.sh RUNS COUNT NAME:BIN_DIR[:MOUNT_OPTS] ...
#
# e.g. (bench/build-base.sh REV makes an old version's BIN_DIR):
#   bench/meta-mount-ab.sh 5 100000 new:target/release \
#       big:target/release:inode_cache=262144 old:target/base/ea32a4d/bin
#
# One JSON line per system and round on stdout; the medians and, against
# the last system named, the median per-round ratios on stderr.
set -euo pipefail
runs=${1:?RUNS}
count=${2:?COUNT}
shift 2
[ $# -gt 0 ] || { echo "usage: $0 RUNS COUNT NAME:BIN_DIR[:MOUNT_OPTS] ..." >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
bench="$here/target/release/examples/core_bench"
work=$(mktemp -d /var/tmp/meta-mount-ab.XXXXXX)
out="$work/rows.jsonl"
cleanup() {
    mountpoint -q "$work/mnt" && { umount "$work/mnt" 2>/dev/null || umount -l "$work/mnt"; }
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/mnt"
for r in $(seq 1 "$runs"); do
    for spec in "$@"; do
        IFS=: read -r name bin opts <<<"$spec"
        rm -rf "$work/pool"
        "$bin/hurricane" mkfs "$work/pool" --devices 2 --device-size 16G >/dev/null
        "$bin/hurricane" mount "$work/pool" "$work/mnt" ${opts:+-o "$opts"}
        pid=$(pgrep -f "hurricane mount -f $work/pool" | head -1)
        res=$("$bench" posix-meta "$work/mnt" "$count")
        hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
        "$bin/hurricane" umount "$work/mnt"
        echo "{\"system\":\"$name\",\"options\":\"${opts:-}\",\"run\":$r,\"files\":$count,\"peak_rss_kib\":$hwm,\"result\":$res}" | tee -a "$out"
    done
done
python3 - "$out" >&2 <<'PY'
import collections, json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows:
    by[r["system"]].append(r)
names = list(by)
keys = [k for k in rows[0]["result"] if k.endswith("_per_s")]
for n in names:
    med = {k: round(st.median(x["result"][k] for x in by[n])) for k in keys}
    print(n, med, "peak RSS MiB", round(st.median(x["peak_rss_kib"] for x in by[n]) / 1024))
base = names[-1]
for n in names[:-1]:
    for k in keys:
        ratios = [a["result"][k] / b["result"][k] for a, b in zip(by[n], by[base])]
        print(f"{n} / {base} {k}: {st.median(ratios):.2f} (rounds {', '.join(f'{x:.2f}' for x in ratios)})")
PY
