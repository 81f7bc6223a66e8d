#!/bin/bash
# The meta-data store against the previous version and ext4, natively:
# create COUNT empty files in one directory, then look each up
# (`core_bench meta`), with the peak resident memory of the process, the
# meta-data bytes the pool's images hold afterwards, and the time to open
# the pool again after a clean close (`hurricane df`).
#
#   bench/meta-store.sh COUNT OLD_DIR [RUNS]
#
# OLD_DIR holds the previous version's release binaries (`hurricane` and
# `examples/core_bench`, as in target/release); the current ones come from
# this tree's target/release. ext4 runs on a loop device over an image in
# the same directory. One JSON line per run on stdout.
set -euo pipefail
count=${1:?COUNT}
old=${2:?OLD_DIR}
runs=${3:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
new="$here/target/release"
work=$(mktemp -d /var/tmp/meta-store.XXXXXX)
trap 'umount "$work/mnt" 2>/dev/null || true; [ -n "${loop:-}" ] && losetup -d "$loop" 2>/dev/null; rm -rf "$work"' EXIT

one() { # NAME BIN_DIR
    local name=$1 bin=$2 pool="$work/pool-$1"
    rm -rf "$pool"
    "$bin/hurricane" mkfs "$pool" --devices 2 --device-size 16G >/dev/null
    local used0 out rss secs used1 open
    used0=$(du -sk "$pool" | cut -f1)
    out=$( { /usr/bin/time -f "TIME %M %e" "$bin/examples/core_bench" meta "$pool" "$count"; } 2>&1 )
    rss=$(echo "$out" | awk '/^TIME/ {printf "%.0f", $2 * 1024}')
    secs=$(echo "$out" | awk '/^TIME/ {print $3}')
    used1=$(du -sk "$pool" | cut -f1)
    open=$( { /usr/bin/time -f "%e" "$bin/hurricane" df "$pool" >/dev/null; } 2>&1 | tail -1)
    local json
    json=$(echo "$out" | grep '^{')
    echo "{\"engine\":\"$name\",\"files\":$count,\"rss_bytes\":$rss,\"run_s\":$secs,\"meta_bytes\":$(( (used1 - used0) * 1024 )),\"open_s_clean\":$open,\"run\":$json}"
    rm -rf "$pool"
}

ext4() {
    truncate -s 32G "$work/ext4.img"
    mkfs.ext4 -q -F "$work/ext4.img"
    loop=$(losetup -f --show "$work/ext4.img")
    mkdir -p "$work/mnt"
    mount "$loop" "$work/mnt"
    local w0 w1 out
    w0=$(awk '{print $7}' "/sys/block/$(basename "$loop")/stat")
    out=$("$new/examples/core_bench" posix-meta "$work/mnt" "$count")
    sync
    w1=$(awk '{print $7}' "/sys/block/$(basename "$loop")/stat")
    echo "{\"engine\":\"ext4\",\"files\":$count,\"written_bytes\":$(( (w1 - w0) * 512 )),\"run\":$out}"
    umount "$work/mnt"
    losetup -d "$loop"
    loop=
    rm -f "$work/ext4.img"
}

for r in $(seq "$runs"); do
    one previous "$old"
    one store "$new"
    ext4
done
