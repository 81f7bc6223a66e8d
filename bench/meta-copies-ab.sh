#!/usr/bin/env bash
# The cost of the meta-data's copies, through the mount, in turns: a
# three-device pool as mkfs makes it now (three copies of the meta-file and
# of the journal) against the same build keeping two (the placement of
# format 5, asked for with --meta-layout). Each round, on a fresh pool for
# every system: COUNT empty files created, stat'ed and unlinked in one
# directory (`core_bench posix-meta`), then FSYNCS files each written with
# 4 KiB and fsync'ed (`core_bench posix-fsync`).
#
#   bench/meta-copies-ab.sh RUNS COUNT FSYNCS [BIN_DIR]
#
# BASE=DIR adds a third system, "previous": the release binaries of another
# version (bench/build-base.sh REV) making its default pool.
#
# One JSON line per system and round on stdout; the medians and the median
# per-round ratios against two copies (and against the previous version)
# on stderr.
set -euo pipefail
runs=${1:?RUNS}
count=${2:?COUNT}
fsyncs=${3:?FSYNCS}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${4:-$here/target/release}
bench="$here/target/release/examples/core_bench"
work=$(mktemp -d /var/tmp/meta-copies-ab.XXXXXX)
out="$work/rows.jsonl"
cleanup() {
    mountpoint -q "$work/mnt" && { umount "$work/mnt" 2>/dev/null || umount -l "$work/mnt"; }
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/mnt"
two='replicate(copies=2)[extent(max=1T)@0,extent(max=1T)@1]'
systems="three two${BASE:+ previous}"
for r in $(seq 1 "$runs"); do
    for name in $systems; do
        rm -rf "$work/pool"
        hc=$bin/hurricane
        case $name in
            two) "$hc" mkfs "$work/pool" --devices 3 --device-size 8G --meta-layout "$two" >/dev/null ;;
            previous) hc=$BASE/hurricane; "$hc" mkfs "$work/pool" --devices 3 --device-size 8G >/dev/null ;;
            *) "$hc" mkfs "$work/pool" --devices 3 --device-size 8G >/dev/null ;;
        esac
        "$hc" mount "$work/pool" "$work/mnt"
        meta=$("$bench" posix-meta "$work/mnt" "$count")
        sync_=$("$bench" posix-fsync "$work/mnt" "$fsyncs")
        "$hc" umount "$work/mnt"
        echo "{\"system\":\"$name\",\"run\":$r,\"meta\":$meta,\"fsync\":$sync_}" | tee -a "$out"
    done
done
python3 - "$out" >&2 <<'PY'
import collections, json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows:
    by[r["system"]].append(r)
def val(r, k):
    return r["meta"][k] if k in r["meta"] else r["fsync"][k]
keys = ["create_per_s", "stat_per_s", "unlink_per_s", "fsync_per_s"]
for n in by:
    print(n, {k: round(st.median(val(x, k) for x in by[n])) for k in keys})
for other in [o for o in ("two", "previous") if o in by]:
    for k in keys:
        ratios = [val(a, k) / val(b, k) for a, b in zip(by["three"], by[other])]
        print(f"three / {other} {k}: {st.median(ratios):.2f} (rounds {', '.join(f'{x:.2f}' for x in ratios)})")
PY
