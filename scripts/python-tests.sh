#!/usr/bin/env bash
# Builds the Python binding's wheel (crates/hurricane-py) and runs its
# pytest suite against the installed wheel, in a virtual environment of its
# own under target/ (made on first use; maturin, NumPy and pytest come from
# PyPI). The wheel is built unoptimized, reusing the workspace's debug build
# of the engine; `pip install ./crates/hurricane-py` builds the optimized one.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
venv="$target/py-venv"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.9,<2" "numpy>=1.24" "pytest>=7"
rm -rf "$target/wheels"
"$venv/bin/maturin" build --locked --profile dev -m crates/hurricane-py/Cargo.toml -i "$venv/bin/python" -o "$target/wheels"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$target"/wheels/hurricane-*.whl
cd crates/hurricane-py
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests
