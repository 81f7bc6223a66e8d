set -e
W=/tmp/rp; HC=/work/target-check/release/hurricane
cd /work/main
export CEPH_DEV_OSD_BYTES=8589934592
scripts/ceph-dev-cluster.sh stop $W/ceph >/dev/null 2>&1 || true
conf=$(scripts/ceph-dev-cluster.sh start $W/ceph)
rm -rf $W/pool $W/mnt; mkdir -p $W/mnt
devs=(); for _ in 1 2 3 4; do devs+=(--device "rados:hurricane?conf=$conf"); done
$HC mkfs $W/pool "${devs[@]}" --device-size 8G --layout 'stripe(width=4)' --name rp$RANDOM >/dev/null
$HC mount $W/pool $W/mnt
fio --name=w --directory=$W/mnt --rw=write --bs=4M --size=128M --numjobs=16 --ioengine=psync --end_fsync=1 --group_reporting --output-format=terse >/dev/null
for mode in buffered direct buffered direct; do
$HC umount $W/mnt; sync; echo 3 > /proc/sys/vm/drop_caches; $HC mount $W/pool $W/mnt
d=0; [ $mode = direct ] && d=1
fio --name=w --directory=$W/mnt --rw=read --bs=4M --size=128M --numjobs=16 --ioengine=psync --direct=$d --group_reporting --output-format=json | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print("'$mode' read MiB/s", round(j["read"]["bw"]/1024))'
done
$HC umount $W/mnt
for i in 1 2; do
rados -c $conf -p hurricane bench 5 write -b 4M -t 16 --no-cleanup --max-objects 512 >/dev/null 2>&1
sync; echo 3 > /proc/sys/vm/drop_caches
rados -c $conf -p hurricane bench 5 seq -t 16 2>/dev/null | grep -i "bandwidth"
rados -c $conf -p hurricane cleanup >/dev/null 2>&1
done
scripts/ceph-dev-cluster.sh stop $W/ceph >/dev/null
