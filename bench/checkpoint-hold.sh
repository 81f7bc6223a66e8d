#!/usr/bin/env bash
# How long each checkpoint holds every writer (the journal gate closed while
# it takes its cut), through the mount: COUNT empty files created in one
# directory, each stat'ed, each unlinked (`core_bench posix-meta`), on a
# fresh pool of 2 image files, by this version and by OLD_DIR's, in turns,
# RUNS times. The mount's debug log names each checkpoint's hold
# ("changes held X ms").
#
#   bench/checkpoint-hold.sh OLD_DIR [COUNT] [RUNS]     (defaults 100000 3)
#
# OLD_DIR holds the other version's `hurricane` (bench/build-base.sh REV).
# Per run: the rates, then the hold of each checkpoint in milliseconds.
set -euo pipefail
old=${1:?OLD_DIR}
count=${2:-100000}
runs=${3:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
new="$here/target/release"
work=$(mktemp -d /var/tmp/checkpoint-hold.XXXXXX)
cleanup() {
    mountpoint -q "$work/mnt" && { "$new/hurricane" umount "$work/mnt" 2>/dev/null || umount -l "$work/mnt"; }
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/mnt"

one() { # NAME BIN_DIR
    rm -rf "$work/pool" "$work/log"
    "$2/hurricane" mkfs "$work/pool" --devices 2 --device-size 16G >/dev/null
    RUST_LOG=hurricane=debug "$2/hurricane" mount "$work/pool" "$work/mnt" -o "log=$work/log"
    local out
    out=$("$new/examples/core_bench" posix-meta "$work/mnt" "$count")
    "$2/hurricane" umount "$work/mnt"
    echo "$1 $out"
    echo "$1 held: $(sed 's/\x1b\[[0-9;]*m//g' "$work/log" | grep -o 'checkpoint (changes held [0-9.]* ms' | awk '{print $4}' | tr '\n' ' ')"
}

for _ in $(seq 1 "$runs"); do
    one previous "$old"
    one this "$new"
done
