#!/usr/bin/env bash
# The README's test command: build and install taut with its test extras
# into the active Python, then run the Rust tests and the whole pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q ".[test]"
cargo test --quiet
# From a neutral directory, so the installed package is tested, not the tree.
python -m pytest -p no:cacheprovider "$@"
