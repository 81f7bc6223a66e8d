#!/bin/bash
# A/B of compression through the mount: BIN is a `hurricane` binary. Makes a
# pool of 2 image files in /tmp/pz, mounts it on /mnt/pz, writes 256 MiB of
# TEXT (JSON log lines) with dd into a compress(algo=zstd,level=3)[stripe(width=2)]
# directory, remounts with the page cache dropped and reads it back.
#   ab.sh BIN TEXT [BS]   (dd block size, default 1M)
set -euo pipefail
H=$1; text=$2; bs=${3:-1M}
gone() { while pgrep -f "mount -f /tmp/pz" >/dev/null; do sleep 0.05; done; }
rm -rf /tmp/pz; mkdir -p /mnt/pz
"$H" mkfs /tmp/pz --devices 2 --device-size 4G >/dev/null
"$H" mount /tmp/pz /mnt/pz
mkdir /mnt/pz/z
setfattr -n user.hurricane.dir_layout -v "compress(algo=zstd,level=3)[stripe(width=2)]" /mnt/pz/z
w=$(dd if="$text" of=/mnt/pz/z/t bs=$bs iflag=count_bytes count=256M conv=fsync 2>&1 | grep -o "[0-9.]* MB/s")
umount /mnt/pz; gone
sync; echo 3 > /proc/sys/vm/drop_caches
"$H" mount /tmp/pz /mnt/pz
r=$(dd if=/mnt/pz/z/t of=/dev/null bs=1M 2>&1 | grep -o "[0-9.]* MB/s")
umount /mnt/pz; gone
echo "$(basename "$H") bs=$bs write $w read $r"
