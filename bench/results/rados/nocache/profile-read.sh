#!/usr/bin/env bash
# A cold sequential read (16 jobs of 4 MiB reads, 4 GiB) through the mount
# with cache=none,prefetch=none, under `perf record -a`.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
hc=${HC:-${CARGO_TARGET_DIR:-target}/release/hurricane}
work=/tmp/bench-prof
export CEPH_DEV_OSD_BYTES=6442450944
scripts/ceph-dev-cluster.sh stop $work/ceph >/dev/null 2>&1 || true
rm -rf $work; mkdir -p $work/mnt
conf=$(scripts/ceph-dev-cluster.sh start $work/ceph)
trap 'mountpoint -q $work/mnt && $hc umount $work/mnt; scripts/ceph-dev-cluster.sh stop $work/ceph' EXIT
devs=(); for _ in 1 2 3 4; do devs+=(--device "rados:hurricane?conf=$conf"); done
$hc mkfs $work/pool "${devs[@]}" --device-size 16G --layout 'stripe(width=4)' >/dev/null
$hc mount $work/pool $work/mnt
python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.hurricane.open", b"cache=none,prefetch=none")' $work/mnt
fio --name=seq --directory=$work/mnt --rw=write --bs=4M --size=256M --ioengine=psync --numjobs=16 --group_reporting --end_fsync=1 >/dev/null
$hc umount $work/mnt; sync; echo 3 > /proc/sys/vm/drop_caches; $hc mount $work/pool $work/mnt
perf record -a -F 999 -o ${PERF_OUT:-perf-nocache.data} -- fio --name=seq --directory=$work/mnt --rw=read --bs=4M --size=256M --ioengine=psync --numjobs=16 --group_reporting 2>&1 | grep -E "READ:" 

