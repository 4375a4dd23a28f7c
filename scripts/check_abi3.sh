#!/usr/bin/env bash
# Build the two abi3 wheels and install and smoke-test one on every CPython
# 3.9+ interpreter found on this machine (pyenv versions and the system's);
# then the whole suite on the oldest and the newest of them.
#
# PyO3 targets the stable ABI of the interpreter that builds the extension
# (Cargo.toml): the wheel built on 3.9 (cp39-abi3) loads on every 3.9+, the
# one built on 3.10 (cp310-abi3) has fast-call methods and is what pip picks
# on 3.10 and later when both are offered. So 3.9 gets the first, every later
# CPython the second, and the newest also the first (the fallback must load
# there too).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/wheels.sh
. scripts/wheels.sh
out=$(mktemp -d)
wheel_39=$(build_wheel_on 3.9 "$out/3.9")
wheel_310=$(build_wheel_on 3.10 "$out/3.10")
echo "wheels: $(basename "$wheel_39"), $(basename "$wheel_310")"

# The oldest and the newest CPython get the test extras too (for the whole
# suite below); the others only the wheel.
full_suite_versions="3.9 3.13"
declare -A full_suite_python=()
found=0
for py in /root/.pyenv/versions/3.*/bin/python3 /usr/bin/python3.[0-9]*; do
    [ -x "$py" ] || continue
    case "$py" in *-config) continue;; esac
    version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2] if sys.version_info >= (3, 9) else "")' 2>/dev/null || true)
    [ -n "$version" ] || continue
    env_dir=$(mktemp -d)
    "$py" -m venv "$env_dir" 2>/dev/null || { echo "skip $py: no venv module"; continue; }
    wheel=$wheel_310
    [ "$version" != 3.9 ] || wheel=$wheel_39
    if [[ " $full_suite_versions " == *" $version "* ]] && [ -z "${full_suite_python[$version]:-}" ] \
            && [[ "$py" == /root/.pyenv/* ]]; then
        "$env_dir/bin/python" -m pip install -q "$wheel[test]"
        full_suite_python[$version]="$env_dir/bin/python"
    else
        "$env_dir/bin/python" -m pip install -q "$wheel"
    fi
    echo "--- $("$env_dir/bin/python" --version): $(basename "$wheel")"
    "$env_dir/bin/python" scripts/smoke.py
    # Programs that end with abandoned, queued or running work exit cleanly.
    # (Run before the suites below, on a quiet machine: it checks exit times.)
    "$env_dir/bin/python" tests/exit_matrix.py --runs "${TAUT_EXIT_RUNS_EACH:-3}"
    found=$((found + 1))
done
echo "abi3 wheels checked on $found interpreters"
[ "$found" -ge 1 ]
# The 3.9 wheel on the newest CPython: what a 3.10+ user gets where only the
# fallback is offered.
newest_python=$(pyenv_python 3)
fallback_env=$(mktemp -d)
"$newest_python" -m venv "$fallback_env"
"$fallback_env/bin/python" -m pip install -q "$wheel_39"
echo "--- $("$fallback_env/bin/python" --version): $(basename "$wheel_39")"
"$fallback_env/bin/python" scripts/smoke.py

# The whole suite on the oldest and the newest CPython, from the wheel: the
# two run side by side (each is mostly waiting on threads, processes and
# deadlines, and the suite must hold on a busy 2-core machine anyway), which
# halves this step. CPython's own 3.11 test modules run on 3.11 only, in the
# README's test command; each interpreter here runs its own asyncio tests
# instead, where it ships them (pyenv builds do).
full_suite() {
    local python=$1
    echo "--- full test suite on $("$python" --version)"
    # The exit matrix ran above on this interpreter; a few runs per case here.
    TAUT_EXIT_RUNS="${TAUT_EXIT_RUNS:-3}" "$python" -m pytest -p no:cacheprovider -q tests \
        --deselect tests/test_cpython_suite.py::test_cpython_threadpool_suite_passes_with_taut \
        --deselect tests/test_cpython_suite.py::test_cpython_asyncio_suite_passes_with_taut_as_the_default_executor
    local own_tests
    own_tests="$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')/test"
    if [ -d "$own_tests/test_asyncio" ]; then
        echo "--- CPython's own asyncio tests on $("$python" --version), taut as the default executor"
        TAUT_CPYTHON_TEST_DIR="$own_tests" "$python" tests/cpython_suite/run_asyncio_suite.py
    else
        echo "no asyncio tests shipped with $("$python" --version): not run"
    fi
}
logs=$(mktemp -d)
lanes=()
for version in $full_suite_versions; do
    python=${full_suite_python[$version]:-}
    [ -n "$python" ] || { echo "no CPython $version here"; continue; }
    full_suite "$python" > "$logs/$version.txt" 2>&1 &
    lanes+=("$version:$!")
done
failed=0
for lane in "${lanes[@]}"; do
    version=${lane%%:*}
    status=0
    wait "${lane#*:}" || status=$?
    cat "$logs/$version.txt"
    echo "--- CPython $version: exit status $status"
    [ "$status" = 0 ] || failed=1
done
exit "$failed"
