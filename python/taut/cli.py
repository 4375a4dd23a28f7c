"""The ``python -m taut`` command line: ``bench``, ``config {check,schema}`` and
``demo``. Only this module knows argparse; the subcommands call plain
functions of the modules they belong to."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import io
import json
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from taut._bench import Row, check_keys, machine_line
from taut._cli_output import guarded_stdout
from taut._demo_text import LANGUAGES

# Benchmark areas: the name ``--area`` takes, and the module of taut._bench
# with run(quick) -> list[Row] behind it.
BENCH_AREAS = {
    "executor": "taut._bench.executor",
    "deadlines": "taut._bench.deadlines",
    "bounded": "taut._bench.bounded",
    "config": "taut._bench.config",
    "gateway": "taut._bench.gateway",
}


def _area_names() -> list[str]:
    return list(BENCH_AREAS)


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


def _format_spread(row: Row) -> str:
    spread = row.spread
    if spread is None:
        return "n/a"
    return f"{spread[0]:.3g}-{spread[1]:.3g}x"


def _table(rows: Sequence[Row]) -> str:
    header = (
        "case",
        "baseline",
        "baseline (median)",
        "taut (median)",
        "ratio",
        "spread (IQR)",
        "rounds",
        "taut is",
        "target",
        "met",
    )
    lines = [
        (
            row.case,
            row.baseline_name,
            _format_value(row.baseline, row.unit),
            _format_value(row.taut, row.unit),
            f"{row.ratio:.3f}x",
            _format_spread(row),
            str(row.rounds) if row.rounds else "-",
            row.verdict,
            row.target,
            row.status,
        )
        for row in rows
    ]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *lines)]
    out = [" | ".join(h.ljust(w) for h, w in zip(header, widths))]
    out.append("-+-".join("-" * w for w in widths))
    out += [" | ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines]
    out += [f"  * {row.key}: {row.note}" for row in rows if row.note]
    return "\n".join(out)


_LEGEND = (
    "ratio = median of the per-round taut / baseline ratios "
    "(below 1 is better where lower is better); "
    "spread = interquartile range of the per-round ratios (n/a: fewer than 2 paired rounds); "
    "'inconclusive' = the spread straddles 1.0, the rounds disagree on which side is better; "
    "met = target checked (yes/NO) or info (no target, not counted)."
)


def summary(rows: Sequence[Row]) -> str:
    """The closing line: only rows with a real target count."""
    checked = [r for r in rows if r.met is not None]
    met = sum(1 for r in checked if r.met)
    info = len(rows) - len(checked)
    noisy = sum(1 for r in rows if r.inconclusive)
    return (
        f"{met}/{len(checked)} targets met ({info} informational rows not counted); "
        f"{noisy} of {len(rows)} rows inconclusive"
    )


def _json_row(row: Row) -> dict[str, object]:
    spread = row.spread
    return {
        "case": row.case,
        "baseline_name": row.baseline_name,
        "unit": row.unit,
        "better": row.better,
        "baseline": row.baseline,
        "taut": row.taut,
        "ratio": row.ratio,
        "rounds": row.rounds,
        "ratios": list(row.ratios),
        "spread_iqr": list(spread) if spread is not None else None,
        "inconclusive": row.inconclusive,
        "verdict": row.verdict,
        "target": row.target,
        "met": row.met,
        "note": row.note,
    }


def _bench(args: argparse.Namespace) -> int:
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        # Before the run, not after minutes of measuring.
        print(
            "python -m taut bench: --plot needs matplotlib: pip install 'taut[plot]'",
            file=sys.stderr,
        )
        return 2
    machine = machine_line()
    if not args.json:
        print(f"machine: {machine}{' (quick)' if args.quick else ''}", flush=True)
        print(_LEGEND, flush=True)
        print(flush=True)
    rows: list[Row] = []
    for area in args.area or _area_names():
        module = importlib.import_module(BENCH_AREAS[area])
        area_rows = module.run(quick=args.quick)
        rows.extend(area_rows)
        check_keys(rows)
        if not args.json:
            print(_table(area_rows), flush=True)
            print(flush=True)
    if args.json:
        payload = {
            "machine": machine,
            "quick": args.quick,
            "summary": summary(rows),
            "rows": {r.key: _json_row(r) for r in rows},
        }
        print(json.dumps(payload, indent=2))
    else:
        print(f"machine: {machine}; {summary(rows)}")
    if args.plot:
        from taut._bench.plot import plot_rows

        plot_rows(rows, args.plot, title=machine)
    return 0


# --------------------------------------------------------------------------- config
PRECEDENCE = (
    "Where each value comes from, first match wins:\n"
    "  1. the config file (in a program: the one passed as config=, else the one\n"
    "     named by $TAUT_CONFIG);\n"
    "  2. the key's environment variable, if it has one (tools.concurrent_batch:\n"
    "     $TAUT_CONCURRENT_TOOL_TIMEOUT_S);\n"
    "  3. the built-in default (tools.concurrent_batch: 420 s; tools.sequential_call:\n"
    "     the tools.concurrent_batch value; capacity.tool_workers: 32).\n"
    "Timeouts are seconds or ISO-8601 durations (PT5M); 0 disables a timeout.\n"
    "capacity.tool_workers: 0 means no ceiling."
)
PRECEDENCE_LINE = (
    "precedence: config file, then environment variable, then default "
    "(python -m taut config check --help)"
)


def _config_check(args: argparse.Namespace) -> int:
    from taut.config import check_config_file

    failed = False
    for file in args.files:
        found = check_config_file(file, include_warnings=True)
        errors = [p for p in found if p.severity == "error"]
        warned = [p for p in found if p.severity != "error"]
        for problem in found:
            print(problem)
        if errors:
            failed = True
            print(f"{file}: {len(errors)} problem(s)" + _count(warned, ", {} warning(s)"))
            continue
        effective, environment_warnings = _effective(file)
        for message in environment_warnings:
            print(f"environment: warning: {message}")
        all_warnings = [*warned, *environment_warnings]
        failed = failed or bool(args.strict and all_warnings)
        print(f"{file}: OK" + _count(all_warnings, " with {} warning(s)") + " " + effective)
    print(PRECEDENCE_LINE)
    return 1 if failed else 0


def _count(items: Sequence[object], text: str) -> str:
    return text.format(len(items)) if items else ""


def _effective(file: str) -> tuple[str, list[str]]:
    """The values that apply with this file and the current environment, and
    where each comes from; and the problems of the environment's values (an
    ignored ``$TAUT_CONCURRENT_TOOL_TIMEOUT_S``), as lines of the report rather
    than a raw ``ConfigWarning`` on stderr."""
    from taut.config import (
        CONCURRENT_BATCH_DEFAULT,
        CONCURRENT_BATCH_ENV,
        CONCURRENT_BATCH_KEY,
        SEQUENTIAL_CALL_KEY,
        ConfigWarning,
        load_config,
        resolve_timeout,
    )
    from taut.config.models import _MISSING, _parse_env

    def in_file(key: str) -> bool:
        value = cfg.timeout_value(key)
        return value is not None and value is not _MISSING

    with warnings.catch_warnings():
        # config check has reported every problem already; no second copy on stderr
        warnings.simplefilter("ignore", ConfigWarning)
        cfg = load_config(file)
    env_text = os.environ.get(CONCURRENT_BATCH_ENV)
    env_valid = bool(env_text and env_text.strip()) and _parse_env(env_text or "")[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        batch = resolve_timeout(
            CONCURRENT_BATCH_KEY,
            default=CONCURRENT_BATCH_DEFAULT,
            env_var=CONCURRENT_BATCH_ENV,
            config=cfg,
        )
    environment_warnings = []
    for caught_warning in caught:
        if issubclass(caught_warning.category, ConfigWarning):
            environment_warnings.append(str(caught_warning.message))
        else:  # not ours to turn into a report line: shown as it would have been
            warnings.warn_explicit(
                caught_warning.message,
                caught_warning.category,
                caught_warning.filename,
                caught_warning.lineno,
                source=caught_warning.source,
            )
    alone = resolve_timeout(SEQUENTIAL_CALL_KEY, default=batch, config=cfg)
    if in_file(CONCURRENT_BATCH_KEY):
        over = f", overrides ${CONCURRENT_BATCH_ENV}" if env_valid else ""
        batch_from = "this file" + over
    elif env_valid:
        batch_from = f"${CONCURRENT_BATCH_ENV}"
    else:
        batch_from = "default"
    if in_file(SEQUENTIAL_CALL_KEY):
        alone_from = "this file"
    else:
        alone_from = f"the {CONCURRENT_BATCH_KEY} value"
    workers_set = "tool_workers" in cfg.capacity.model_fields_set
    workers_from = "this file" if workers_set else "default"
    effective = (
        f"(capacity.tool_workers={cfg.capacity.tool_workers} [{workers_from}], "
        f"{CONCURRENT_BATCH_KEY}={_seconds_text(batch)} [{batch_from}], "
        f"{SEQUENTIAL_CALL_KEY}={_seconds_text(alone)} [{alone_from}])"
    )
    return effective, environment_warnings


def _seconds_text(value: float | None) -> str:
    return "no timeout" if value is None else f"{value:g} s"


def _config_schema(args: argparse.Namespace) -> int:
    from taut.config import TautConfig

    print(json.dumps(TautConfig.model_json_schema(), indent=2))
    return 0


def _register_config(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "config",
        help="check a taut config file, print its schema",
        description="Check a taut config file (YAML, TOML or JSON), or print its schema.",
        epilog=PRECEDENCE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="config_command", required=True)
    check = sub.add_parser(
        "check",
        help="report every problem of FILE with its location",
        description=(
            "Report every problem of each FILE with its line, warn about keys taut\n"
            "does not read (naming the key each most likely means), and print the\n"
            "values that apply with the file and the current environment."
        ),
        epilog=PRECEDENCE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--strict", action="store_true", help="fail (exit status 1) on warnings too")
    check.set_defaults(handler=_config_check)
    schema = sub.add_parser("schema", help="print the JSON schema of the config document")
    schema.set_defaults(handler=_config_schema)


# --------------------------------------------------------------------------- demo
def _print_flush(line: str) -> None:
    print(line, flush=True)


def _demo(args: argparse.Namespace) -> int:
    from taut.demo import run_demo

    return run_demo(args.lang, _print_flush)


def _register_demo(subparsers: Any) -> None:
    demo = subparsers.add_parser(
        "demo", help="a live run of one simulated agent turn (a few seconds, no network)"
    )
    demo.add_argument("--lang", choices=LANGUAGES, default="en", help="language of the texts")
    demo.set_defaults(handler=_demo)


def main(argv: Sequence[str] | None = None) -> int:
    from taut import __version__

    parser = argparse.ArgumentParser(prog="python -m taut")
    parser.add_argument("--version", action="version", version=f"taut {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="compare taut with the standard library, side by side")
    bench.add_argument("--quick", action="store_true", help="fewer rounds and smaller loads")
    bench.add_argument("--json", action="store_true", help="print the rows as JSON")
    bench.add_argument("--plot", metavar="FILE.png", help="draw the comparison (needs matplotlib)")
    bench.add_argument(
        "--area",
        action="append",
        choices=_area_names(),
        help=f"only this area, one of {', '.join(_area_names())} (repeatable)",
    )
    bench.set_defaults(handler=_bench)
    _register_config(sub)
    _register_demo(sub)
    if sys.stdout is None:  # started with its descriptor closed (`>&-`)
        return _without_stdout(parser, argv)
    result: int = 1
    parser_exit: SystemExit | None = None
    with guarded_stdout(stop=True) as output:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:
            # --help, --version: argparse ignores a failed write, the guard
            # does not; the exit waits until the output is flushed.
            parser_exit = exit_
        else:
            output.stop = args.command != "demo"
            result = args.handler(args)
    failure = output.failure
    if failure is not None:
        # The reader leaving (`| head -1`) needs no word; anything else does.
        if not isinstance(failure, BrokenPipeError):
            reason = failure.strerror or str(failure)
            _tell(f"python -m taut: cannot write the output: {reason}")
        return 1
    if parser_exit is not None:
        raise parser_exit
    return result


def _without_stdout(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Started with stdout closed: a command line argparse refuses keeps its
    usage message (on stderr) and status 2; any other command would write
    to stdout, which one line on stderr says it cannot."""
    sys.stdout = io.StringIO()  # what --help or --version print goes nowhere
    try:
        parser.parse_args(argv)
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            raise
    finally:
        sys.stdout = None  # as it was
    _tell("python -m taut: cannot write the output: stdout is closed")
    return 1


def _tell(line: str) -> None:
    """One line on stderr, if stderr takes it: there is nobody else to tell."""
    if sys.stderr is None:
        return
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
