#!/usr/bin/env bash
# What reading a small file costs at the least through the mount, beside
# ext4: Seltzer's 10,000 files of 1 KiB in 100 directories (co-located on
# Hurricane), read from Python with os.open/os.read/os.close, cold (caches
# dropped, the mount restarted) and warm (read again at once); then one
# round trip alone (fstat of an open file with attr_timeout=0, and an
# open+close) on each.
#   bench/small-file-floor.sh HURRICANE_BIN [RUNS]     (default 3)
# BENCH_DIR=DIR holds the images (default /var/tmp). Microseconds per file.
set -euo pipefail
h=$1 runs=${2:-3}
work=${BENCH_DIR:-/var/tmp}/small-file-floor
rm -rf "$work"; mkdir -p "$work/mnt" "$work/ext4"
trap 'umount "$work/mnt" "$work/ext4" 2>/dev/null || true' EXIT
cat >"$work/files.py" <<'EOF'
import os, sys, time
root, phase = sys.argv[1], sys.argv[2]
t = time.perf_counter()
for d in range(100):
    if phase == "mkdirs":
        os.mkdir(f"{root}/d{d}")
        continue
    for i in range(100):
        p = f"{root}/d{d}/f{i}"
        if phase == "create":
            fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            os.write(fd, bytes([i]) * 1024)
        else:
            fd = os.open(p, os.O_RDONLY)
            assert os.read(fd, 4096) == bytes([i]) * 1024
        os.close(fd)
print("%.1f" % ((time.perf_counter() - t) / 10000 * 1e6))
EOF
cat >"$work/rt.py" <<'EOF'
import os, statistics, sys, time
p = sys.argv[1]
fd = os.open(p, os.O_RDONLY)
def per(n, f):
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e6
def oc():
    os.close(os.open(p, os.O_RDONLY))
print("fstat %.1f open_close %.1f" % (statistics.median(per(20000, lambda: os.fstat(fd)) for _ in range(5)),
                                     statistics.median(per(5000, oc) for _ in range(5))))
EOF
py() { python3 "$work/$1" "${@:2}"; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
"$h" mkfs "$work/pool" -n 1 -s 512M >/dev/null
"$h" mount "$work/pool" "$work/mnt"
py files.py "$work/mnt" mkdirs >/dev/null
for d in $(seq 0 99); do setfattr -n user.hurricane.dir_layout -v colocate "$work/mnt/d$d"; done
py files.py "$work/mnt" create >/dev/null
"$h" umount "$work/mnt"
truncate -s 512M "$work/ext4.img"; mkfs.ext4 -q -F "$work/ext4.img"
mount -o loop "$work/ext4.img" "$work/ext4"
py files.py "$work/ext4" mkdirs >/dev/null; py files.py "$work/ext4" create >/dev/null
umount "$work/ext4"
for r in $(seq "$runs"); do
    drop; mount -o loop "$work/ext4.img" "$work/ext4"
    ec=$(py files.py "$work/ext4" read); ew=$(py files.py "$work/ext4" read); umount "$work/ext4"
    drop; "$h" mount "$work/pool" "$work/mnt"
    mc=$(py files.py "$work/mnt" read); mw=$(py files.py "$work/mnt" read); "$h" umount "$work/mnt"
    echo "run $r: ext4 cold $ec warm $ew; mount cold $mc warm $mw"
done
"$h" mount "$work/pool" "$work/mnt" -o attr_timeout=0
echo "mount round trip: $(py rt.py "$work/mnt/d0/f0")"; "$h" umount "$work/mnt"
mount -o loop "$work/ext4.img" "$work/ext4"
echo "ext4 call: $(py rt.py "$work/ext4/d0/f0")"; umount "$work/ext4"
rm -rf "$work"
