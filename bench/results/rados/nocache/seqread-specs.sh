#!/usr/bin/env bash
# Sequential reads through the mount under several open policies, in one
# run on one cluster: 16 fio jobs of 4 MiB reads over files of 128 MiB (2
# GiB), cold (remount, page cache dropped) before each; "default" is no
# policy, "direct" fio's O_DIRECT, the rest the policy set on the root.
#   SPECLIST='default|direct|cache=none,prefetch=none' seqread-specs.sh
set -euo pipefail
cd "$(dirname "$0")/../../../.."
hc=${HC:-${CARGO_TARGET_DIR:-target}/release/hurricane}
work=${BENCH_DIR:-/tmp/bench-exp}
export CEPH_DEV_OSD_BYTES=6442450944
scripts/ceph-dev-cluster.sh stop $work/ceph >/dev/null 2>&1 || true
rm -rf $work; mkdir -p $work/mnt
conf=$(scripts/ceph-dev-cluster.sh start $work/ceph)
trap 'mountpoint -q $work/mnt && $hc umount $work/mnt; scripts/ceph-dev-cluster.sh stop $work/ceph' EXIT
devs=(); for _ in 1 2 3 4; do devs+=(--device "rados:hurricane?conf=$conf"); done
$hc mkfs $work/pool "${devs[@]}" --device-size 16G --layout 'stripe(width=4)' >/dev/null
$hc mount $work/pool $work/mnt
fioj() { fio --name=seq --directory=$work/mnt --rw=$1 --bs=4M --size=128M --ioengine=psync --numjobs=16 --group_reporting --output-format=json "${@:2}" | python3 -c '
import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):])["jobs"][0]; print(round((j["read"]["bw"]+j["write"]["bw"])/1024,1))'; }
fioj write --end_fsync=1
for rep in 1 2; do
IFS="|" read -r -a SPECS <<< "$SPECLIST"
for spec in "${SPECS[@]}"; do
  $hc umount $work/mnt; sync; echo 3 > /proc/sys/vm/drop_caches; $hc mount $work/pool $work/mnt
  extra=()
  case "$spec" in direct) extra=(--direct=1);; default) ;; *) python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.hurricane.open", sys.argv[2].encode())' $work/mnt "$spec";; esac
  echo "$spec $(fioj read "${extra[@]}") reads=$($hc stats --json $work/mnt | python3 -c "import json,sys; j=json.load(sys.stdin); print(j[\"ops\"][\"read\"][\"count\"])")"
  python3 -c 'import os,sys
try: os.removexattr(sys.argv[1], "user.hurricane.open")
except OSError: pass' $work/mnt
done
done
