#!/usr/bin/env bash
# The abi3 wheel on CPython versions this machine does not have: Debian
# unstable's interpreters (3.14 and 3.15 as of 2026-12), in a chroot made
# with debootstrap. Builds the wheel here, then on each interpreter: the
# smoke test, the exit matrix, the whole suite (less the two tests that run
# Debian's 3.11 test modules), and that interpreter's own thread-pool and
# asyncio tests with taut swapped in (tests/cpython_suite/).
#
#   bash scripts/newer_cpython.sh                       # as root: 3.14 and 3.15
#   sudo env "PATH=$PATH" TAUT_NEWER_PYTHONS=3.15 bash scripts/newer_cpython.sh
#
# Needs root (debootstrap, chroot, bind mounts), maturin on PATH, and a
# Debian host whose apt mirror serves unstable. Not part of .ci/run: about
# 13 minutes on 2 cores (6 per interpreter), plus a few for a new chroot.
# The chroot is kept in $TAUT_NEWER_ROOT (default /tmp/taut-sid) and reused
# by later runs; one run at a time uses it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${TAUT_NEWER_ROOT:-/tmp/taut-sid}
versions=${TAUT_NEWER_PYTHONS:-"3.14 3.15"}
mirror=${TAUT_NEWER_MIRROR:-http://deb.debian.org/debian}

log() { echo "newer_cpython.sh: $*" >&2; }

# The bind mounts below live in a mount namespace of this run's own: they
# go away with it, however it ends, so none is left under $root (where an
# `rm -rf` of the chroot would reach the host's /dev).
if [ -z "${TAUT_NEWER_UNSHARED:-}" ]; then
    exec unshare --mount --propagation private env TAUT_NEWER_UNSHARED=1 bash "$0" "$@"
fi
command -v maturin >/dev/null || { log "maturin is not on PATH (pip install maturin)"; exit 2; }
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock -n 9 || { log "another run is using $root ($root.lock)"; exit 2; }

# debootstrap removes $root/debootstrap when it has finished: a chroot that
# still has it was interrupted, and is made again.
if ! [ -x "$root/usr/bin/apt-get" ] || [ -d "$root/debootstrap" ]; then
    command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    log "making a Debian unstable chroot in $root"
    # Mounts an older run left (seen here only in this namespace) first.
    for dir in dev/pts dev/shm dev sys proc; do
        if mountpoint -q "$root/$dir"; then umount -l "$root/$dir"; fi
    done
    rm -rf --one-file-system "$root"
    debootstrap --variant=minbase sid "$root" "$mirror" >/dev/null
fi
# This machine's name resolution and certificate authorities (a proxy that
# re-signs TLS needs its own CA inside too). The bundle gets a path of its
# own: installing ca-certificates in the chroot rewrites the usual one.
cp /etc/resolv.conf "$root/etc/resolv.conf"
host_ca=/etc/ssl/host-ca-certificates.crt
mkdir -p "$root/etc/ssl"
cp "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$root$host_ca"

for dir in proc sys dev dev/shm dev/pts; do
    mountpoint -q "$root/$dir" || mount --bind "/$dir" "$root/$dir"
done

in_root() {
    chroot "$root" env -u PIP_FIND_LINKS -u SSL_CERT_DIR DEBIAN_FRONTEND=noninteractive \
        SSL_CERT_FILE="$host_ca" PIP_CERT="$host_ca" REQUESTS_CA_BUNDLE="$host_ca" "$@"
}

packages=(ca-certificates procps)
for v in $versions; do packages+=("python$v" "python$v-venv" "libpython$v-testsuite"); done
# A mirror that serves a snapshot of unstable has a Release file past its
# Valid-Until date (seen here: 26 days); the snapshot is still what we want.
apt_options=(-o Acquire::Check-Valid-Until=false)
in_root apt-get "${apt_options[@]}" update -qq
in_root apt-get "${apt_options[@]}" install -y -qq "${packages[@]}" >/dev/null

log "building the abi3 wheel"
rm -rf "$root/taut-wheel" "$root/taut-src"
# The wheel CPython 3.10 and later get (scripts/check_abi3.sh): built on 3.10
# where pyenv has one, else on maturin's choice of interpreter.
# shellcheck source=scripts/wheels.sh
. scripts/wheels.sh
build_wheel_on 3.10 "$root/taut-wheel" >/dev/null \
    || maturin build --release --quiet --out "$root/taut-wheel" >/dev/null
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
