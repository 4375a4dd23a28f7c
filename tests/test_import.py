"""A light ``import taut``: the executor without the agent layer.

Each check runs a fresh interpreter, so modules loaded by other tests cannot
hide an eager import. The checks read which modules were imported (from
``python -X importtime``), never how long they took: timing on a shared
machine is noise, the module list is not.
"""

from __future__ import annotations

import ast
import concurrent.futures
import os
import pickle
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import taut

# What a gateway that imports taut for its executor must not pay for. asyncio
# is on the list because "no more than import asyncio" is only guaranteed if
# asyncio itself is not part of the import.
HEAVY = ("pydantic", "pydantic_core", "yaml", "psutil", "asyncio")


def run_python(code: str, *options: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("TAUT_CONFIG", None)
    return subprocess.run(
        [sys.executable, *options, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def imported_by(code: str) -> set[str]:
    """Top-level package names of every module ``code`` imports (-X importtime)."""
    proc = run_python(code, "-X", "importtime")
    assert proc.returncode == 0, proc.stderr
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            module = line.rsplit("|", 1)[1].strip()
            names.add(module.split(".")[0])
    assert "taut" in names, proc.stderr[-2000:]  # the parse works
    return names


def test_import_taut_loads_none_of_the_agent_layer_dependencies() -> None:
    loaded = imported_by("import taut")
    assert sorted(set(HEAVY) & loaded) == []


def test_the_executor_works_without_loading_them() -> None:
    loaded = imported_by(
        "import taut\n"
        "with taut.ThreadPoolExecutor(2) as ex:\n"
        "    assert ex.submit(pow, 2, 10).result() == 1024\n"
        "    assert list(ex.map(abs, [-1, -2])) == [1, 2]\n"
    )
    assert sorted(set(HEAVY) & loaded) == []


def test_the_command_lines_version_loads_none_of_them() -> None:
    loaded = imported_by(
        "import sys\n"
        "from taut.cli import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit as end:\n"
        "    assert end.code in (0, None), end.code\n"
    )
    assert sorted(set(HEAVY) & loaded) == []


def test_import_taut_imports_no_typing() -> None:
    # `typing` made `import taut` a sixth slower, and `import taut` is meant
    # to cost what `import concurrent.futures` costs (README).
    # Using the executor, its futures and their run-time subscripts
    # (`taut.Future[int]`, in annotations evaluated at run time) needs none;
    # only `stats()` loads it, with its PoolStats (a typing.NamedTuple).
    startup = run_python("import sys; print('typing' in sys.modules)")
    if startup.stdout.strip() != "False":  # a .pth file or sitecustomize imports it
        pytest.skip(f"this interpreter imports typing at startup: {startup.stdout}{startup.stderr}")
    loaded = imported_by(
        "import taut\n"
        "with taut.ThreadPoolExecutor(2) as ex:\n"
        "    future = ex.submit(pow, 2, 10)\n"
        "    assert future.result() == 1024\n"
        "    assert list(ex.map(abs, [-1, -2])) == [1, 2]\n"
        "assert taut.Future[int].__origin__ is taut.Future\n"
    )
    assert "typing" not in loaded


def test_pool_stats_and_run_time_subscripts_are_what_typing_gave() -> None:
    """``PoolStats`` loads on first use, and taut's TypeVars exist for type
    checkers only: what users see at run time is what it was when
    ``import taut`` imported typing."""
    stats = taut.PoolStats(*range(9))
    assert type(stats).__mro__ == (taut.PoolStats, tuple, object)
    fields = "max_workers workers idle running queued completed failed cancelled abandoned"
    assert taut.PoolStats._fields == tuple(fields.split())
    assert repr(stats) == (
        "PoolStats(max_workers=0, workers=1, idle=2, running=3, queued=4, completed=5,"
        " failed=6, cancelled=7, abandoned=8)"
    )
    assert (taut.PoolStats.__doc__ or "").startswith("A snapshot of one executor's pool.\n")
    assert taut.PoolStats.__module__ == "taut._pool_stats"
    again = pickle.loads(pickle.dumps(stats))
    assert type(again) is taut.PoolStats and again == stats
    assert typing.get_type_hints(taut.PoolStats) == dict.fromkeys(taut.PoolStats._fields, int)

    # Subscripts of the executor's types in annotations evaluated at run time.
    def handler(
        pool: taut.ThreadPoolExecutor, pending: taut.Future[int]
    ) -> concurrent.futures.Future[taut.PoolStats]:
        raise NotImplementedError

    assert typing.get_type_hints(handler) == {
        "pool": taut.ThreadPoolExecutor,
        "pending": taut.Future[int],
        "return": concurrent.futures.Future[taut.PoolStats],
    }
    assert typing.get_args(taut.Future[int]) == (int,)
    assert typing.get_origin(taut.Future[int]) is taut.Future
    assert taut.Future.__mro__ == (taut.Future, concurrent.futures.Future, object)


def test_the_agent_layer_loads_on_first_use() -> None:
    # The check itself must be able to fail: first use does load pydantic.
    assert "pydantic" in imported_by("import taut; taut.PlanningConstraints")
    assert "pydantic" in imported_by("import taut; taut.ToolRunner")


@pytest.mark.parametrize(
    "code",
    [
        "import taut; taut.ToolRunner",
        "import taut; taut.PlanningConstraints(time_budget='PT30M').guidance()",
        "import taut; taut.kill_process_tree; taut.run_process",
        "import taut; taut.resolve_timeout('tools.concurrent_batch', default=1)",
    ],
)
def test_psutil_is_loaded_only_where_it_is_used(code: str) -> None:
    assert "psutil" not in imported_by(code)


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in taut.__all__:
        assert getattr(taut, name) is not None, name
    assert set(taut.__all__) <= set(dir(taut))
    assert len(taut.__all__) == len(set(taut.__all__))
    with pytest.raises(AttributeError, match="module 'taut' has no attribute 'no_such_name'"):
        taut.no_such_name  # noqa: B018


def test_lazy_names_are_the_objects_of_their_modules() -> None:
    from taut import config, constraints, deadline, tools

    assert taut.ToolRunner is tools.ToolRunner
    assert taut.PlanningConstraints is constraints.PlanningConstraints
    assert taut.resolve_timeout is config.resolve_timeout
    assert taut.fail_after is deadline.fail_after
    for name, module in taut._LAZY.items():
        assert getattr(taut, name) is getattr(sys.modules[module], name), name


def test_star_import_in_a_fresh_interpreter() -> None:
    proc = run_python(
        "from taut import *\n"
        "import taut\n"
        "missing = [n for n in taut.__all__ if n not in globals()]\n"
        "assert not missing, missing\n"
        "assert callable(gather) and callable(stats)\n"
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", ["gather", "stats"])
def test_a_function_keeps_its_name_when_its_module_is_imported_first(name: str) -> None:
    # The import system binds a submodule on its package: without care,
    # `from taut.gather import X` before the first `taut.gather` would leave
    # `taut.gather` pointing at the module.
    proc = run_python(
        f"import importlib, types, taut\n"
        f"module = importlib.import_module('taut.{name}')\n"
        f"assert isinstance(module, types.ModuleType)\n"
        f"assert not isinstance(taut.{name}, types.ModuleType), taut.{name}\n"
        f"assert taut.{name} is module.{name}\n"
        f"from taut import {name} as f\n"
        f"assert f is module.{name}\n"
    )
    assert proc.returncode == 0, proc.stderr


def test_the_package_is_a_plain_module_again_once_those_modules_are_bound() -> None:
    # While taut.gather or taut.stats loads, taut is a module subclass that
    # refuses the binding; after, a plain module again, whose attributes
    # are found sooner (on 3.13 a third fewer instructions per `taut.X`).
    proc = run_python(
        "import types, taut\n"
        "assert type(taut) is types.ModuleType\n"
        "from taut.gather import Scheduler\n"
        "assert type(taut) is types.ModuleType, type(taut)\n"
        "import taut.stats\n"
        "assert type(taut) is types.ModuleType, type(taut)\n"
        "assert not isinstance(taut.gather, types.ModuleType)\n"
        "assert not isinstance(taut.stats, types.ModuleType)\n"
    )
    assert proc.returncode == 0, proc.stderr


def test_type_checkers_see_every_lazy_name() -> None:
    """The ``if TYPE_CHECKING`` imports and the lazy table name the same things
    from the same modules, and every public name is either eager or lazy."""
    source = Path(taut.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source)
    checked: dict[str, str] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module
                if stmt.module == "typing":
                    continue  # for annotations (`import taut` imports no typing)
                for alias in stmt.names:
                    checked[alias.asname or alias.name] = stmt.module
    assert checked == taut._LAZY
    eager = {n for n in taut.__all__ if n not in taut._LAZY}
    assert eager == {
        "Future",
        "QueueFull",
        "ThreadPoolExecutor",
        "__version__",
        "default_executor",
    }
    assert set(taut._LAZY) <= set(taut.__all__)


def test_stats_loads_pool_stats_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Loaded on first use, then kept: a lazy load on every call cost stats()
    # seven times its own work.
    from taut import executor

    with taut.ThreadPoolExecutor(1) as ex:
        first = ex.stats()

        def load_from(name: str, attribute: str) -> object:
            raise AssertionError(f"loaded {name}.{attribute} again")

        monkeypatch.setattr(executor._lazy_import, "load_from", load_from)
        again = ex.stats()
    assert type(again) is type(first) is taut.PoolStats


def test_pool_stats_is_still_found_where_it_was() -> None:
    # It moved from taut.executor to a module of its own, loaded on first
    # use: imports from the old place, and pickles naming it, still work.
    from taut.executor import PoolStats

    assert PoolStats is taut.PoolStats
    old = pickle.dumps(taut.PoolStats(*range(9)), protocol=0)
    assert b"taut._pool_stats" in old
    moved = old.replace(b"taut._pool_stats", b"taut.executor")
    assert pickle.loads(moved) == taut.PoolStats(*range(9))
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        taut.executor.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
