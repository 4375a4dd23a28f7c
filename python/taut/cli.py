"""The ``python -m taut`` command line: ``bench``, ``config {check,schema}`` and
``demo``. Only this module knows argparse; the subcommands call plain
functions of the modules they belong to."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
from collections.abc import Sequence
from typing import Any

from taut._bench import Row
from taut.config import (
    CONCURRENT_BATCH_DEFAULT,
    CONCURRENT_BATCH_KEY,
    SEQUENTIAL_CALL_KEY,
    TautConfig,
    check_config_file,
    load_config,
    resolve_timeout,
)
from taut.demo import LANGUAGES, run_demo

# Benchmark areas, each a module of taut._bench with run(quick) -> list[Row].
BENCH_AREAS = [
    "taut._bench.executor",
    "taut._bench.deadlines",
    "taut._bench.bounded",
    "taut._bench.config",
]


def _format_value(value: float, unit: str) -> str:
    if unit == "s":
        if value < 1e-3:
            return f"{value * 1e6:.2f} µs"
        if value < 1:
            return f"{value * 1e3:.2f} ms"
        return f"{value:.3f} s"
    if unit == "B":
        return f"{value:.0f} B"
    if unit == "/s":
        return f"{value:,.0f}/s"
    return f"{value:.3g} {unit}"


def _table(rows: Sequence[Row]) -> str:
    header = ("case", "baseline", "stdlib / baseline", "taut", "ratio", "target", "met")
    lines = [
        (
            row.case,
            row.baseline_name,
            _format_value(row.baseline, row.unit),
            _format_value(row.taut, row.unit),
            f"{row.ratio:.3f}x",
            row.target,
            "yes" if row.met else "NO",
        )
        for row in rows
    ]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *lines)]
    out = [" | ".join(h.ljust(w) for h, w in zip(header, widths))]
    out.append("-+-".join("-" * w for w in widths))
    out += [" | ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines]
    out += [f"  * {row.case.split(' ')[0]} {row.note}" for row in rows if row.note]
    return "\n".join(out)


def _bench(args: argparse.Namespace) -> int:
    rows: list[Row] = []
    for area in args.area or BENCH_AREAS:
        module = importlib.import_module(area if "." in area else f"taut._bench.{area}")
        area_rows = module.run(quick=args.quick)
        rows.extend(area_rows)
        if not args.json:
            print(_table(area_rows), flush=True)
            print(flush=True)
    machine = (
        f"{platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}"
    )
    if args.json:
        payload = {
            "machine": machine,
            "rows": [dict(vars(r), ratio=r.ratio) for r in rows],
        }
        print(json.dumps(payload, indent=2))
    else:
        missed = [r.case for r in rows if not r.met]
        print(f"machine: {machine}; {len(rows) - len(missed)}/{len(rows)} targets met")
    if args.plot:
        from taut._bench.plot import plot_rows

        plot_rows(rows, args.plot)
    return 0


# --------------------------------------------------------------------------- config
def _config_check(args: argparse.Namespace) -> int:
    failed = False
    for file in args.files:
        problems = check_config_file(file)
        if problems:
            failed = True
            for problem in problems:
                print(problem)
            print(f"{file}: {len(problems)} problem(s)")
        else:
            cfg = load_config(file)
            # What this file alone gives (no environment): the resolved values.
            batch = resolve_timeout(
                CONCURRENT_BATCH_KEY, default=CONCURRENT_BATCH_DEFAULT, config=cfg
            )
            alone = resolve_timeout(SEQUENTIAL_CALL_KEY, default=batch, config=cfg)
            print(
                f"{file}: OK (capacity.tool_workers={cfg.capacity.tool_workers}, "
                f"{CONCURRENT_BATCH_KEY}={_seconds_text(batch)}, "
                f"{SEQUENTIAL_CALL_KEY}={_seconds_text(alone)})"
            )
    return 1 if failed else 0


def _seconds_text(value: float | None) -> str:
    return "no timeout" if value is None else f"{value:g} s"


def _config_schema(args: argparse.Namespace) -> int:
    print(json.dumps(TautConfig.model_json_schema(), indent=2))
    return 0


def _register_config(subparsers: Any) -> None:
    parser = subparsers.add_parser("config", help="check a taut config file, print its schema")
    sub = parser.add_subparsers(dest="config_command", required=True)
    check = sub.add_parser("check", help="report every problem of FILE with its location")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.set_defaults(handler=_config_check)
    schema = sub.add_parser("schema", help="print the JSON schema of the config document")
    schema.set_defaults(handler=_config_schema)


# --------------------------------------------------------------------------- demo
def _print_flush(line: str) -> None:
    print(line, flush=True)


def _demo(args: argparse.Namespace) -> int:
    return run_demo(args.lang, _print_flush)


def _register_demo(subparsers: Any) -> None:
    demo = subparsers.add_parser(
        "demo", help="a live run of one simulated agent turn (a few seconds, no network)"
    )
    demo.add_argument("--lang", choices=LANGUAGES, default="en", help="language of the texts")
    demo.set_defaults(handler=_demo)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m taut")
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="compare taut with the standard library, side by side")
    bench.add_argument("--quick", action="store_true", help="fewer rounds and smaller loads")
    bench.add_argument("--json", action="store_true", help="print the rows as JSON")
    bench.add_argument("--plot", metavar="FILE.png", help="draw the comparison (needs matplotlib)")
    bench.add_argument("--area", action="append", help="only this area (repeatable)")
    bench.set_defaults(handler=_bench)
    _register_config(sub)
    _register_demo(sub)
    args = parser.parse_args(argv)
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
