#!/usr/bin/env bash
# The main job on the embedded default: builds Hurricane, makes a pool of four
# image files, mounts it, copies a real directory tree in with ordinary tools,
# gives a directory a striped default layout, shows per-file layouts, unmounts.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
cargo build --release --locked -p hurricane-cli
hc="$PWD/target/release/hurricane"
pool="${POOL:-$PWD/demo-pool}"
mnt="${MNT:-/tmp/hurricane-demo}"

echo "== mkfs: 4 devices of 512 MiB (sparse image files) in $pool"
if mountpoint -q "$mnt" 2>/dev/null; then "$hc" umount "$mnt" || fusermount3 -u "$mnt"; fi
rm -rf "$pool"
"$hc" mkfs "$pool" --devices 4 --device-size 512M
mkdir -p "$mnt"
"$hc" mount "$pool" "$mnt"
trap '"$hc" umount "$mnt" 2>/dev/null || fusermount3 -u "$mnt" 2>/dev/null || true' EXIT

echo "== copy a real tree in (cp -a), then compare"
cp -a crates "$mnt/src"
diff -r crates "$mnt/src" && echo "tree copied and identical"

echo "== a directory with a striped default layout (64 KiB units over 3 devices)"
mkdir "$mnt/striped"
"$hc" layout set "$mnt/striped" "stripe(unit=64K,width=3)"
dd if=/dev/urandom of="$mnt/striped/big.bin" bs=1M count=8 status=none
"$hc" layout get "$mnt/striped/big.bin"

echo "== per-file layouts: replicated, regions, inline"
touch "$mnt/replicated.bin" "$mnt/regions.bin"
setfattr -n user.hurricane.layout -v "replicate(copies=2)[stripe(width=2),stripe(width=2)]" "$mnt/replicated.bin"
"$hc" layout set "$mnt/regions.bin" "regions(size=1M,width=4)"
dd if=/dev/urandom of="$mnt/replicated.bin" bs=1M count=4 status=none
dd if=/dev/urandom of="$mnt/regions.bin" bs=1M count=4 status=none
echo "small" > "$mnt/small.txt"
for f in replicated.bin regions.bin small.txt src/hurricane/Cargo.toml; do
    printf '%-28s %s\n' "$f" "$(getfattr --absolute-names --only-values -n user.hurricane.layout "$mnt/$f")"
done

echo "== usage per device"
df -h "$mnt"
"$hc" stats "$mnt"

echo "== unmount and check"
"$hc" umount "$mnt"
trap - EXIT
"$hc" fsck "$pool"
"$hc" df "$pool"
