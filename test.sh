#!/usr/bin/env bash
# Runs every check: formatting, lints, and the whole test suite (unit,
# property, crash, FUSE-mount and CLI tests, and the Python binding's).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# The rados device kind against a one-node Ceph cluster: only with
# HURRICANE_CEPH=1 (setup.sh then installs Ceph and librados).
if [ "${HURRICANE_CEPH:-0}" = 1 ]; then
    cargo clippy -p hurricane-cli -p hurricane --features hurricane-cli/rados --all-targets --locked -- -D warnings
    cargo test -p hurricane --features rados --locked --test rados
    cargo test -p hurricane-cli --features rados --locked --test fuse_rados
fi
# The Python binding: its wheel built and its pytest suite run.
bash scripts/python-tests.sh
if [ -x fuzz/run-ci.sh ]; then bash fuzz/run-ci.sh; fi
