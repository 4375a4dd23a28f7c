#!/usr/bin/env bash
# Build the abi3 wheel once and install and smoke-test it on every CPython
# 3.9+ interpreter found on this machine (pyenv versions and the system's).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
maturin build --release --quiet --out "$out" >/dev/null
wheel=$(ls "$out"/taut-*-abi3-*.whl)
echo "wheel: $(basename "$wheel")"
found=0
for py in /root/.pyenv/versions/3.*/bin/python3 /usr/bin/python3.[0-9]*; do
    [ -x "$py" ] || continue
    case "$py" in *-config) continue;; esac
    ok=$("$py" -c 'import sys; print(int(sys.version_info >= (3, 9)))' 2>/dev/null || echo 0)
    [ "$ok" = 1 ] || continue
    env_dir=$(mktemp -d)
    "$py" -m venv "$env_dir" 2>/dev/null || { echo "skip $py: no venv module"; continue; }
    "$env_dir/bin/python" -m pip install -q "$wheel"
    "$env_dir/bin/python" scripts/smoke.py
    # Programs that end with abandoned, queued or running work exit cleanly.
    "$env_dir/bin/python" tests/exit_matrix.py --runs "${TAUT_EXIT_RUNS_EACH:-3}"
    found=$((found + 1))
done
echo "abi3 wheel checked on $found interpreters"
[ "$found" -ge 1 ]

# The whole suite on the oldest and the newest CPython found, from the wheel.
# CPython's own 3.11 test module only runs under 3.11 (covered by scripts/test.sh).
for version in 3.9 3.13; do
    py=$(ls /root/.pyenv/versions/"$version".*/bin/python3 2>/dev/null | head -1 || true)
    [ -n "$py" ] || { echo "no CPython $version here"; continue; }
    env_dir=$(mktemp -d)
    "$py" -m venv "$env_dir"
    "$env_dir/bin/python" -m pip install -q "$wheel[test]"
    echo "--- full test suite on $("$env_dir/bin/python" --version)"
    # The exit matrix ran above on this interpreter; a few runs per case here.
    # CPython's own suites (tests/test_cpython_suite.py) are Debian's 3.11
    # tests: they run on 3.11 only, in the README's test command.
    TAUT_EXIT_RUNS="${TAUT_EXIT_RUNS:-3}" "$env_dir/bin/python" -m pytest -p no:cacheprovider -q tests \
        --deselect tests/test_cpython_suite.py::test_cpython_threadpool_suite_passes_with_taut \
        --deselect tests/test_cpython_suite.py::test_cpython_asyncio_suite_passes_with_taut_as_the_default_executor
done
