#!/usr/bin/env bash
# The cluster alone, no Hurricane: `rados bench -b 4K` (new 4 KiB objects)
# against bench/rados-overwrite.c (4 KiB into 256 objects of 4 MiB, twice
# 10 s), 16 in flight, on the dev cluster with memstore's objects kept as
# lists of buffers (its default) and as 64 KiB pages, two rounds.
#   OW=PATH (a built rados-overwrite) bench/results/rados/memstore/overwrite.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
work=${BENCH_DIR:-/tmp/rados-overwrite}; export CEPH_DEV_OSD_BYTES=6442450944
ow=${OW:-${CARGO_TARGET_DIR:-target}/rados-overwrite}
[ -x "$ow" ] || cc -O2 -o "$ow" bench/rados-overwrite.c -lrados
trap 'scripts/ceph-dev-cluster.sh stop "$work" >/dev/null 2>&1' EXIT
for round in 1 2; do for ps in false true; do
  scripts/ceph-dev-cluster.sh stop "$work" >/dev/null 2>&1
  conf=$(CEPH_DEV_PAGE_SET=$ps scripts/ceph-dev-cluster.sh start "$work")
  a=$(rados -c "$conf" -p hurricane bench 10 write -b 4K -t 16 --no-cleanup 2>/dev/null | awk '/Average IOPS/ {print $3}')
  b=$("$ow" "$conf" hurricane 256 10 16)
  c=$("$ow" "$conf" hurricane 256 10 16)
  echo "page_set=$ps rados-bench-new-4K=$a overwrite-4K-in-4M: first10s=$b next10s=$c"
done; done
