#!/usr/bin/env bash
# Builds another version's release binaries for an A/B run of bench/core.sh
# or bench/mount.sh, and prints the directory to pass as BASE:
#   BASE=$(bench/build-base.sh HEAD~3) bench/mount.sh 1024 20000 3
# The version is checked out in a worktree under target/base/REV.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$(git rev-parse --short "${1:?usage: bench/build-base.sh REV}")
tree=$PWD/target/base/$rev
[ -d "$tree" ] || git worktree add --detach -q "$tree" "$rev"
(cd "$tree" && cargo build --release --locked -p hurricane-cli >&2 && cargo build --release --locked -p hurricane --example core_bench >&2)
mkdir -p "$tree/bin"
cp "$tree/target/release/hurricane" "$tree/target/release/examples/core_bench" "$tree/bin/"
echo "$tree/bin"
