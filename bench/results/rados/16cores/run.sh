#!/usr/bin/env bash
# bench/rados.sh on a machine with no Ceph installed and no network, from
# the bundle that bundle.sh packs (BUNDLE=PATH, default
# .cephdev/cephdev.tar.xz, relative to the repository root it runs in):
# unpacks it in /opt/cd, puts Ceph's plugins where the daemons look for
# them, and runs `bench/rados.sh SEQ_MIB RUNS QD SECS` (2048 3 16 10) with
# the bundle's `hurricane` and `rados-overwrite`. Results and log.txt go to
# $OUT. The runs in this directory: `RUNS=3 run.sh` (rados.jsonl), and
# `RUNS=2 NOCACHE=0 run.sh` (overwrite/, with the overwrite peer).
exec > >(tee -a "$OUT/log.txt") 2>&1
set -x
uname -r; nproc; free -g | head -2; grep -m1 "model name" /proc/cpuinfo; head -2 /etc/os-release
ls -l /dev/fuse || modprobe fuse; ls -l /dev/fuse || exit 3
command -v python3 /usr/bin/python3 mountpoint flock timeout; python3 --version
[ -x /usr/bin/python3 ] || ln -s "$(command -v python3)" /usr/bin/python3
mkdir -p /opt/cd && tar -xJf "${BUNDLE:-.cephdev/cephdev.tar.xz}" -C /opt/cd || exit 4
mkdir -p /usr/lib/x86_64-linux-gnu
cp -a /opt/cd/plugins/ceph /usr/lib/x86_64-linux-gnu/ceph
cp -a /opt/cd/plugins/rados-classes /usr/lib/x86_64-linux-gnu/rados-classes
export LD_LIBRARY_PATH=/opt/cd/lib:/usr/lib/x86_64-linux-gnu/ceph
export PATH=/opt/cd/bin:$PATH
# bench/rados.sh builds before it runs: the bundle's build stands in.
printf '#!/bin/sh\nexit 0\n' > /opt/cd/bin/cargo; chmod +x /opt/cd/bin/cargo
mkdir -p /opt/cd/target/release; ln -sf /opt/cd/bin/hurricane /opt/cd/target/release/hurricane
export CARGO_TARGET_DIR=/opt/cd/target
command -v uuidgen >/dev/null || { printf "#!/bin/sh\ncat /proc/sys/kernel/random/uuid\n" > /opt/cd/bin/uuidgen; chmod +x /opt/cd/bin/uuidgen; }
for b in /opt/cd/bin/*; do ldd "$b" 2>&1 | grep "not found" && echo "MISSING in $b"; done
ceph-osd --version; hurricane --version; fio --version
set +x
export BENCH_DIR=/tmp/br RESULTS=$OUT RADOS_OVERWRITE=/opt/cd/bin/rados-overwrite
time bash bench/rados.sh "${SEQ_MIB:-2048}" "${RUNS:-3}" "${QD:-16}" "${SECS:-10}"
echo "rc=$?"
