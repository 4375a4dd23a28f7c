# Sourced by scripts/check_abi3.sh and scripts/newer_cpython.sh: where pyenv's
# CPythons are, and the abi3 wheel one of them builds (PyO3 targets the
# stable ABI of the interpreter that builds the extension: Cargo.toml).

# pyenv_python VERSION: the newest pyenv CPython whose version starts with
# VERSION ("3.10", or "3" for the newest of all); nothing when there is none.
pyenv_python() {
    ls -d /root/.pyenv/versions/"$1".*/bin/python3 2>/dev/null | sort -V | tail -n 1 || true
}

# build_wheel_on VERSION OUT: build the wheel on pyenv's CPython VERSION into
# OUT and print its path (tagged cpXY-abi3 for VERSION X.Y); fails when
# pyenv has no such CPython.
build_wheel_on() {
    local python
    python=$(pyenv_python "$1")
    [ -n "$python" ] || { echo "no pyenv CPython $1 here to build its wheel" >&2; return 1; }
    maturin build --release --quiet --interpreter "$python" --out "$2" >/dev/null
    ls "$2"/taut-*-cp"${1/./}"-abi3-*.whl
}
