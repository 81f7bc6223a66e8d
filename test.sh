#!/usr/bin/env bash
# Runs every check: formatting, lints, and the whole test suite (unit,
# property, crash, FUSE-mount and CLI tests, and the Python binding's).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
# With HURRICANE_CEPH=1 (setup.sh then installs Ceph and librados) the
# workspace is built once with the `rados` device kind, whose tests run
# against a one-node Ceph cluster they start themselves (the device kind
# natively in crates/hurricane/tests/rados.rs, pools through a mount in
# crates/hurricane-cli/tests/fuse_rados.rs).
features=()
if [ "${HURRICANE_CEPH:-0}" = 1 ]; then
    features=(--features hurricane-cli/rados)
fi
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked "${features[@]}" -- -D warnings
cargo test --workspace --locked "${features[@]}"
# The Python binding: its wheel built and its pytest suite run.
bash scripts/python-tests.sh
if [ -x fuzz/run-ci.sh ]; then bash fuzz/run-ci.sh; fi
