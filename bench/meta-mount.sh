#!/usr/bin/env bash
# Meta-data rates through the mount against the previous version, and ext4:
# COUNT empty files created in one directory, each stat'ed, each unlinked
# (`core_bench posix-meta`, std::fs calls, a sync after the creates and after
# the unlinks), on a fresh pool of 2 image files mounted by each version's
# `hurricane mount`, and on ext4 over a loop device, in turns, RUNS times.
#
#   bench/meta-mount.sh OLD_DIR [COUNT] [RUNS]     (defaults 100000 3)
#
# OLD_DIR holds the previous version's `hurricane` (bench/build-base.sh REV
# makes one). One JSON line per system and run on stdout.
#
# HOLD=1 also records how long each checkpoint held every writer (the
# journal gate closed while it takes its cut): each mount then writes its
# debug log, and a version's line gets `checkpoint_hold_ms`, one number per
# checkpoint, from its "changes held X ms" lines (empty for a version that
# logs none).
set -euo pipefail
old=${1:?OLD_DIR}
count=${2:-100000}
runs=${3:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
new="$here/target/release"
work=$(mktemp -d /var/tmp/meta-mount.XXXXXX)
loop=
cleanup() {
    mountpoint -q "$work/mnt" && { "$new/hurricane" umount "$work/mnt" 2>/dev/null || umount -l "$work/mnt"; }
    [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/mnt"

hurricane() { # NAME BIN_DIR RUN
    local pool="$work/pool"
    rm -rf "$pool" "$work/log"
    "$2/hurricane" mkfs "$pool" --devices 2 --device-size 16G >/dev/null
    if [ "${HOLD:-0}" = 1 ]; then
        RUST_LOG=hurricane=debug "$2/hurricane" mount "$pool" "$work/mnt" -o "log=$work/log"
    else
        "$2/hurricane" mount "$pool" "$work/mnt"
    fi
    local out hold=
    out=$("$new/examples/core_bench" posix-meta "$work/mnt" "$count")
    "$2/hurricane" umount "$work/mnt"
    if [ "${HOLD:-0}" = 1 ]; then
        hold=",\"checkpoint_hold_ms\":[$(sed 's/\x1b\[[0-9;]*m//g' "$work/log" \
            | grep -o 'checkpoint (changes held [0-9.]* ms' | awk '{print $4}' | paste -sd, -)]"
    fi
    echo "{\"system\":\"$1\",\"run\":$3,\"files\":$count,\"result\":$out$hold}"
    rm -rf "$pool"
}

ext4() { # RUN
    truncate -s 16G "$work/ext4.img"
    mkfs.ext4 -q -F "$work/ext4.img"
    loop=$(losetup -f --show "$work/ext4.img")
    mount "$loop" "$work/mnt"
    local out
    out=$("$new/examples/core_bench" posix-meta "$work/mnt" "$count")
    umount "$work/mnt"
    losetup -d "$loop"; loop=
    rm -f "$work/ext4.img"
    echo "{\"system\":\"ext4\",\"run\":$1,\"files\":$count,\"result\":$out}"
}

for r in $(seq 1 "$runs"); do
    hurricane hurricane "$new" "$r"
    hurricane hurricane-previous "$old" "$r"
    ext4 "$r"
done
