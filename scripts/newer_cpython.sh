#!/usr/bin/env bash
# The abi3 wheel on CPython versions this machine does not have: Debian
# unstable's interpreters (3.14 and 3.15 as of 2026-12), in a chroot made
# with debootstrap. Builds the wheel here, then on each interpreter: the
# smoke test, the exit matrix, the whole suite (less the two tests that run
# Debian's 3.11 test modules), and that interpreter's own thread-pool and
# asyncio tests with taut swapped in (tests/cpython_suite/).
#
#   sudo bash scripts/newer_cpython.sh            # 3.14 and 3.15
#   TAUT_NEWER_PYTHONS="3.15" sudo bash scripts/newer_cpython.sh
#
# Needs root (debootstrap, chroot, bind mounts) on a Debian host whose apt
# mirror serves unstable. Not part of .ci/run: the chroot and the four
# suites take about 20 minutes on 2 cores. The chroot is kept in
# $TAUT_NEWER_ROOT (default /tmp/taut-sid) and reused by later runs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${TAUT_NEWER_ROOT:-/tmp/taut-sid}
versions=${TAUT_NEWER_PYTHONS:-"3.14 3.15"}
mirror=${TAUT_NEWER_MIRROR:-http://deb.debian.org/debian}

log() { echo "newer_cpython.sh: $*" >&2; }

if ! [ -x "$root/usr/bin/apt-get" ]; then
    command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    log "making a Debian unstable chroot in $root"
    debootstrap --variant=minbase sid "$root" "$mirror" >/dev/null
fi
# This machine's name resolution and certificate authorities (a proxy that
# re-signs TLS needs its own CA inside too).
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/etc/ssl/certs"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"

mounted=()
unmount() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[i]}" || true; done
}
trap unmount EXIT
for dir in proc sys dev dev/shm dev/pts; do
    if ! mountpoint -q "$root/$dir"; then
        mount --bind "/$dir" "$root/$dir"
        mounted+=("$root/$dir")
    fi
done

in_root() { chroot "$root" env -u PIP_FIND_LINKS DEBIAN_FRONTEND=noninteractive "$@"; }

packages=(ca-certificates procps)
for v in $versions; do packages+=("python$v" "python$v-venv" "libpython$v-testsuite"); done
in_root apt-get update -qq
in_root apt-get install -y -qq "${packages[@]}" >/dev/null

log "building the abi3 wheel"
rm -rf "$root/taut-wheel" "$root/taut-src"
maturin build --release --quiet --out "$root/taut-wheel" >/dev/null
# The tests and their helpers, as committed (plus uncommitted edits).
mkdir -p "$root/taut-src"
git ls-files -z | xargs -0 cp --parents -t "$root/taut-src"

failed=0
for v in $versions; do
    log "CPython $v"
    if ! in_root bash -c "
        set -uo pipefail
        cd /taut-src
        rm -rf /taut-venv$v
        python$v -m venv /taut-venv$v
        py=/taut-venv$v/bin/python
        \$py -m pip install -q --upgrade pip
        \$py -m pip install -q \"\$(ls /taut-wheel/taut-*.whl)[test]\" || exit 10
        status=0
        \$py scripts/smoke.py || status=1
        \$py tests/exit_matrix.py --runs 3 || status=1
        TAUT_EXIT_RUNS=3 \$py -m pytest -p no:cacheprovider -q -rfs tests \
            --deselect tests/test_cpython_suite.py::test_cpython_threadpool_suite_passes_with_taut \
            --deselect tests/test_cpython_suite.py::test_cpython_asyncio_suite_passes_with_taut_as_the_default_executor \
            || status=1
        \$py tests/cpython_suite/run_threadpool_suite.py || status=1
        \$py tests/cpython_suite/run_asyncio_suite.py || status=1
        exit \$status
    "; then
        log "CPython $v: FAILED"
        failed=1
    else
        log "CPython $v: passed"
    fi
done
exit "$failed"
