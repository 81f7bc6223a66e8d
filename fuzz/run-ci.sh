#!/bin/sh
# Runs every fuzz target for FUZZ_SECONDS (default 20) each, seeded with the
# checked-in corpus, when a nightly toolchain and cargo-fuzz are installed;
# otherwise says so and exits 0 (`cargo test` replays the corpora on stable
# either way: crates/hurricane/tests/hostile.rs, fuzz_corpus_replay).
# New inputs go to a scratch directory; crashes to fuzz/artifacts/<target>/.
set -eu
cd "$(dirname "$0")"
secs=${FUZZ_SECONDS:-20}
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "fuzz: no nightly toolchain: skipped (install: rustup toolchain install nightly --profile minimal)"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz not installed: skipped (install: cargo install cargo-fuzz)"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for t in $(cargo +nightly fuzz list); do
    mkdir -p "$work/$t" "corpus/$t"
    echo "fuzz: $t for ${secs}s"
    # -rss_limit_mb / -malloc_limit_mb: unbounded allocation is a failure;
    # -timeout: so is an input that runs for seconds.
    if ! cargo +nightly fuzz run "$t" "$work/$t" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 -print_final_stats=1; then
        echo "fuzz: $t FAILED (see fuzz/artifacts/$t/)"
        status=1
    fi
done
exit $status
