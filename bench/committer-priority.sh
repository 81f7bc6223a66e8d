#!/usr/bin/env bash
# The mount's meta-data rates with the checkpoint committer at normal
# priority, at nice 10 and as SCHED_IDLE (set on its thread after the mount
# starts), and another version's, in turns: 100,000 empty files created,
# stat'ed and unlinked (`core_bench posix-meta`) on a fresh pool of two image
# files for each system and round. One line per system and round.
#
#   bench/committer-priority.sh RUNS BASE_BIN_DIR
#
# (bench/build-base.sh REV makes BASE_BIN_DIR.)
set -euo pipefail
runs=${1:?RUNS}
base=${2:?BASE_BIN_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
bench="$here/target/release/examples/core_bench"
work=$(mktemp -d /var/tmp/committer-priority.XXXXXX)
cleanup() {
    mountpoint -q "$work/mnt" && { umount "$work/mnt" 2>/dev/null || umount -l "$work/mnt"; }
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/mnt"
for r in $(seq 1 "$runs"); do
    for sys in normal nice idle base; do
        bin="$here/target/release"
        [ "$sys" = base ] && bin=$base
        rm -rf "$work/pool"
        "$bin/hurricane" mkfs "$work/pool" --devices 2 --device-size 16G >/dev/null
        "$bin/hurricane" mount "$work/pool" "$work/mnt"
        pid=$(pgrep -f "hurricane mount -f $work/pool" | head -1)
        for t in /proc/"$pid"/task/*; do
            if [ "$(cat "$t/comm")" = hurricane-commi ]; then
                [ "$sys" = nice ] && renice -n 10 -p "$(basename "$t")" >/dev/null
                [ "$sys" = idle ] && chrt -i -p 0 "$(basename "$t")" >/dev/null
            fi
        done
        res=$("$bench" posix-meta "$work/mnt" 100000)
        "$bin/hurricane" umount "$work/mnt"
        echo "$sys $r $res"
    done
done
