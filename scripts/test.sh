#!/usr/bin/env bash
# The README's test command: build and install taut with its test extras
# into the active Python, then run the Rust tests and the whole pytest suite.
# CPython's own ThreadPoolExecutor and asyncio tests come from Debian's
# libpython3.11-testsuite; it is installed here when we can (root with apt),
# and tests/test_cpython_suite.py fails, saying so, when it is missing.
# The PostgresJournal tests need a server: without TAUT_TEST_POSTGRES_DSN this
# starts a throw-away one (scripts/postgres.sh) for the run and stops it after;
# where no PostgreSQL can be started they skip, saying why (under CI=true they
# fail instead).
set -euo pipefail
cd "$(dirname "$0")/.."
suite=/usr/lib/python3.11/test
if ! [ -e "$suite/test_concurrent_futures.py" ] && ! [ -d "$suite/test_concurrent_futures" ] \
    && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libpython3.11-testsuite >/dev/null
fi
# Outside a virtualenv, make one (system Pythons may refuse pip installs).
if [ -z "${VIRTUAL_ENV:-}" ]; then
    python3 -m venv .venv-test
    # shellcheck disable=SC1091
    . .venv-test/bin/activate
    python -m pip install -q --upgrade pip
fi
python -m pip install -q ".[test]"
cargo test --quiet
if [ -n "${TAUT_TEST_POSTGRES_DSN:-}" ]; then
    python -m pytest -p no:cacheprovider "$@"
elif [ "${CI:-}" = true ] || [ "$(id -u)" = 0 ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
        || command -v initdb >/dev/null; then
    bash scripts/postgres.sh run python -m pytest -p no:cacheprovider "$@"
else
    echo "scripts/test.sh: no PostgreSQL server binaries: the PostgresJournal tests will skip" >&2
    python -m pytest -p no:cacheprovider "$@"
fi
