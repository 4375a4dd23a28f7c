"""Finding and importing CPython's own test suite as Debian ships it
(``libpython3.11-testsuite``, under ``/usr/lib/python3.11/test``), for the
runners beside this file. Nothing of it is copied into this project: a
temporary directory holds only a symlink named ``test`` to Debian's package
and goes first on ``sys.path`` (the pyenv interpreter ships a partial
``test`` package without these modules, so ours must come first)."""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import shutil
import sys
import tempfile
import types

SUITE_DIR_ENV = "TAUT_CPYTHON_TEST_DIR"
MISSING_EXIT = 3  # a runner's exit status when the Debian suite is absent


def suite_dir() -> str:
    """Where CPython's ``test`` package is: ``$TAUT_CPYTHON_TEST_DIR`` or Debian's."""
    override = os.environ.get(SUITE_DIR_ENV)
    if override:
        return override
    return f"/usr/lib/python{sys.version_info[0]}.{sys.version_info[1]}/test"


def is_debians() -> bool:
    """True unless ``$TAUT_CPYTHON_TEST_DIR`` points at another suite (say,
    a pyenv interpreter's own, whose tests may differ from Debian's)."""
    return not os.environ.get(SUITE_DIR_ENV)


def require(suite: str, entry: str) -> None:
    """Exit with ``MISSING_EXIT``, saying how to install it, unless ``entry``
    (a module file or package directory of the suite) is there."""
    if os.path.exists(os.path.join(suite, entry)):
        return
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    print(
        f"CPython's test suite is not installed: {suite}/{entry} "
        f"not found. Install Debian's libpython{minor}-testsuite "
        f"(apt-get install -y libpython{minor}-testsuite), or point "
        f"{SUITE_DIR_ENV} at a directory holding CPython {minor}'s `test` package.",
        file=sys.stderr,
    )
    sys.exit(MISSING_EXIT)


def make_shim(suite: str) -> str:
    """A fresh directory whose only entry is ``test`` -> Debian's package
    (removed at exit)."""
    shim = tempfile.mkdtemp(prefix="taut-cpysuite-")
    os.symlink(suite, os.path.join(shim, "test"))

    def remove() -> None:
        try:
            os.unlink(os.path.join(shim, "test"))
        finally:
            shutil.rmtree(shim, ignore_errors=True)

    atexit.register(remove)
    return shim


def import_from_shim(shim: str, name: str) -> types.ModuleType:
    """Import ``test.<name>`` through ``shim``, and check that it is the
    suite's module, not one of the interpreter's own ``test`` package."""
    for loaded in [n for n in sys.modules if n == "test" or n.startswith("test.")]:
        del sys.modules[loaded]
    sys.path.insert(0, shim)
    module = importlib.import_module(f"test.{name}")
    origin = os.path.realpath(module.__file__ or "")
    expected = os.path.realpath(os.path.join(shim, "test"))
    if not origin.startswith(expected + os.sep):
        raise RuntimeError(f"imported {module.__file__}, expected it under {expected}")
    return module


def parse_args(doc: str | None, argv: list[str] | None) -> argparse.Namespace:
    """A runner's command line: ``-v``, ``-k PATTERN`` (repeatable) and
    ``--stdlib`` (the baseline: nothing of taut swapped in)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("-k", dest="patterns", action="append", help="only tests matching")
    parser.add_argument(
        "--stdlib", action="store_true", help="baseline: run without swapping taut in"
    )
    return parser.parse_args(argv)
