"""``python -m taut demo``: a live, self-explaining run of one simulated agent turn.

Eight tool calls share three tool workers, so five of them wait and their queue
notices are printed as they happen. One tool hangs and is cut off at the batch
deadline; one runs a shell whose grandchild would outlive it, and the whole
process tree is killed at the tool's own deadline; one starts a sub-agent whose
nested batch runs inline on its worker. A planning budget shrinks across two
rounds: the second round is planned with only what the first left. The run
ends with a table of outcomes and timings, and checks its own claims (exit
status 1 if one of them did not hold). A few seconds, no network.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from taut._demo_text import TEXT as _TEXT
from taut.tools import QueueNotice, ToolCall, ToolResult, ToolRunner

__all__ = ["main", "run_demo"]

BUDGET_S = 3.0
BATCH_DEADLINE_S = 1.2
SHELL_DEADLINE_S = 0.5
WORKERS = 3



@dataclass
class _Row:
    round: int
    result: ToolResult
    thread: str = ""
    deadline: float = 0.0  # the effective deadline of the call's group


class _Console:
    """Timestamped, thread-safe lines: notices arrive from worker threads."""

    def __init__(self, write: Callable[[str], object]) -> None:
        self._write = write
        self._t0 = time.monotonic()
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self._t0

    def line(self, text: str = "", stamp: bool = True) -> None:
        with self._lock:
            self._write(f"[{self.now():5.2f}s] {text}" if stamp else text)


def _pid_gone(pid: int, wait_s: float = 2.0) -> bool:
    """True once ``pid`` is gone or a zombie (killed, not yet reaped by init)."""
    import psutil

    end = time.monotonic() + wait_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.02)


def run_demo(lang: str = "en", write: Callable[[str], object] = print) -> int:
    """Run the demo, writing lines through ``write``; 0 if every check held."""
    # Imported here so that registering the subcommand stays cheap.
    from taut.constraints import PlanningConstraints
    from taut.process import run_process

    text: dict[str, Any] = _TEXT[lang]
    status: dict[str, str] = text["status"]
    con = _Console(write)
    de = lang == "de"

    def num(value: float, digits: int = 2) -> str:
        # German writes a decimal comma.
        out = f"{value:.{digits}f}"
        return out.replace(".", ",") if de else out

    threads: dict[str, str] = {}
    facts: dict[str, Any] = {}

    def tracked(call_id: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(**kwargs: Any) -> Any:
            threads[call_id] = threading.current_thread().name
            return fn(**kwargs)

        return run

    # -- the tools (simulated; none touches the network) ----------------------

    def search_docs(query: str) -> str:
        time.sleep(0.35)
        return str(text["search_docs"].format(query=query))

    def read_file(path: str) -> str:
        time.sleep(0.15)
        with open(path, "rb") as fh:
            return str(text["read_file"].format(size=len(fh.read())))

    def hang() -> str:
        # A tool stuck in a loop; the batch deadline cuts it off and
        # interrupt=True stops the loop on its worker thread.
        try:
            while True:
                time.sleep(0.01)
        except BaseException:
            facts["hang_stopped_at"] = con.now()
            raise

    def shell() -> str:
        # The shell starts a grandchild that would outlive it and hold its pipes.
        result = run_process(
            ["sh", "-c", "sleep 30 & echo $!; wait"], timeout=SHELL_DEADLINE_S, text=True
        )
        pid = int((result.stdout or "0").split()[0] or 0)
        gone = pid > 0 and _pid_gone(pid)
        facts["shell"] = (result.timed_out, pid, gone, result.elapsed_s)
        state = text["shell_gone"] if gone else text["shell_alive"]
        return str(text["shell"].format(elapsed=num(result.elapsed_s), pid=pid, state=state))

    def sub_agent(topic: str) -> str:
        # A tool that starts a sub-agent: its batch runs inline on this worker.
        inner = runner.run(
            [ToolCall("lookup", lambda i=i: f"{topic}-{i}", read_only=True) for i in range(3)]
        )
        where = threading.current_thread().name
        facts["sub_agent"] = ([r.status for r in inner], where)
        return str(text["sub_agent"].format(count=len(inner), thread=where))

    def fetch_forecast(city: str) -> str:
        time.sleep(0.25)
        return str(text["forecast"].format(city=city))

    def list_dir(path: str) -> str:
        return str(text["list_dir"].format(count=len(os.listdir(path))))

    def count_words(words: str) -> str:
        time.sleep(0.05)
        return str(text["count_words"].format(count=len(words.split())))

    def write_report(title: str) -> str:
        time.sleep(0.1)
        return str(text["report"].format(title=title))

    # -- round 1 ---------------------------------------------------------------

    con.line(text["title"], stamp=False)
    constraints = PlanningConstraints(time_budget=timedelta(seconds=BUDGET_S), max_agents=WORKERS)
    budget = constraints.start()
    con.line(text["plan"].format(n=1, guidance=budget.guidance(lang)))

    def on_notice(n: QueueNotice) -> None:
        if n.kind == "started":
            # Delivered on the worker that picked the call up.
            thread = threading.current_thread().name
            con.line(text["started"].format(call=n.call_id, tool=n.name, thread=thread))
        elif n.kind == "dropped":
            con.line(text["dropped"].format(call=n.call_id, tool=n.name))
        else:
            con.line(f"  {n.call_id} {n.name}: {n.text}")

    runner = ToolRunner(
        constraints=budget.constraints(),
        concurrent_batch_timeout=BATCH_DEADLINE_S,
        sequential_call_timeout=BATCH_DEADLINE_S,
        on_notice=on_notice,
        language=lang,
        interrupt=True,
    )
    here = os.path.dirname(os.path.abspath(__file__))
    plan: list[tuple[str, str, Callable[..., Any], dict[str, Any]]] = [
        ("t1", "search_docs", search_docs, {"query": "deadlines"}),
        ("t2", "read_file", read_file, {"path": os.path.abspath(__file__)}),
        ("t3", "hang", hang, {}),
        ("t4", "shell", shell, {}),
        ("t5", "sub_agent", sub_agent, {"topic": "pools"}),
        ("t6", "fetch_forecast", fetch_forecast, {"city": "Hannover"}),
        ("t7", "list_dir", list_dir, {"path": here}),
        ("t8", "count_words", count_words, {"words": "deadlines that really fire"}),
    ]
    calls = [
        ToolCall(name, tracked(cid, fn), args, read_only=True, call_id=cid)
        for cid, name, fn, args in plan
    ]
    deadline = _batch_deadline(budget.remaining())
    con.line(
        text["batch"].format(n=1, count=len(calls), workers=WORKERS, deadline=num(deadline, 1))
    )
    rows: list[_Row] = []
    t_batch = time.monotonic()
    results = runner.run(calls, timeout=deadline)
    batch_s = time.monotonic() - t_batch
    for r in results:
        con.line(
            text["done"].format(
                call=r.call_id, tool=r.name, status=status[r.status], elapsed=num(r.elapsed_s)
            )
        )
        rows.append(_Row(1, r, threads.get(r.call_id, "-"), deadline))
    used = budget.elapsed()
    con.line(
        text["left"].format(
            used=num(used), left=num(budget.remaining() or 0.0), total=num(BUDGET_S, 1)
        )
    )

    # -- round 2: planned with only what remains -------------------------------

    remaining_plan = budget.constraints()
    con.line(text["plan"].format(n=2, guidance=remaining_plan.guidance(lang)))
    calls2 = [
        ToolCall(
            "write_report",
            tracked("t9", write_report),
            {"title": text["report_title"]},
            call_id="t9",
        ),
        ToolCall(
            "count_words",
            tracked("t10", count_words),
            {"words": "done and dusted"},
            read_only=True,
            call_id="t10",
        ),
    ]
    deadline2 = _batch_deadline(budget.remaining())
    con.line(
        text["batch"].format(n=2, count=len(calls2), workers=WORKERS, deadline=num(deadline2, 1))
    )
    for r in runner.run(calls2, timeout=deadline2):
        con.line(
            text["done"].format(
                call=r.call_id, tool=r.name, status=status[r.status], elapsed=num(r.elapsed_s)
            )
        )
        rows.append(_Row(2, r, threads.get(r.call_id, "-"), deadline2))
    con.line(
        text["left"].format(
            used=num(budget.elapsed()), left=num(budget.remaining() or 0.0), total=num(BUDGET_S, 1)
        )
    )
    stats = runner.executor.stats()
    runner.shutdown(wait=False)
    stop_wait = time.monotonic() + 2.0
    while "hang_stopped_at" not in facts and time.monotonic() < stop_wait:
        time.sleep(0.01)

    # -- the table and the checks ----------------------------------------------

    con.line(stamp=False)
    con.line(text["table"], stamp=False)
    con.line(_table(rows, text), stamp=False)
    con.line(stamp=False)
    by_id = {row.result.call_id: row.result for row in rows}
    shell_timed_out, grandchild, gone, shell_s = facts.get("shell", (False, 0, False, 0.0))
    nested = facts.get("sub_agent", ([], ""))
    t3 = by_id["t3"]
    stopped_at = num(facts.get("hang_stopped_at", float("nan")))
    planned = num(remaining_plan.time_budget_s or 0)
    checks = [
        (
            t3.timed_out and batch_s < deadline + 1.0,
            f"Zeitüberschreitung nach {num(t3.elapsed_s)} s, Stapel dauerte {num(batch_s)} s "
            f"(Frist {num(deadline, 1)} s)"
            if de
            else f"timeout after {num(t3.elapsed_s)} s, batch took {num(batch_s)} s "
            f"(deadline {num(deadline, 1)} s)",
        ),
        (
            "hang_stopped_at" in facts,
            f"bei {stopped_at} s" if de else f"at {stopped_at} s",
        ),
        (
            bool(shell_timed_out and gone),
            f"sh nach {num(shell_s)} s beendet (Frist {num(SHELL_DEADLINE_S, 1)} s), "
            f"Enkelprozess {grandchild} {'beendet' if gone else 'LÄUFT NOCH'}"
            if de
            else f"sh killed after {num(shell_s)} s (deadline {num(SHELL_DEADLINE_S, 1)} s), "
            f"grandchild pid {grandchild} {'gone' if gone else 'STILL ALIVE'}",
        ),
        (
            nested[0] == ["ok"] * 3 and str(nested[1]).startswith("agent-tool-worker_"),
            f"{[status.get(s, s) for s in nested[0]]} {'auf' if de else 'on'} {nested[1]}",
        ),
        (
            [r.call_id for r in results] == [c.call_id for c in calls],
            "",
        ),
        (
            all(by_id[f"t{i}"].status == "ok" for i in (1, 2, 4, 5, 6, 7, 8)),
            "",
        ),
        (
            (remaining_plan.time_budget_s or 0) < BUDGET_S - batch_s + 0.5
            and (remaining_plan.time_budget_s or 0) < BUDGET_S,
            f"Runde 2 geplant mit {planned} s von {num(BUDGET_S, 1)} s"
            if de
            else f"round 2 planned with {planned} s of {num(BUDGET_S, 1)} s",
        ),
        (
            stats.abandoned >= 1 and stats.max_workers == WORKERS,
            f"{stats.abandoned} aufgegeben, Obergrenze {stats.max_workers}"
            if de
            else f"{stats.abandoned} abandoned, ceiling {stats.max_workers}",
        ),
    ]
    con.line(text["checks"], stamp=False)
    for label, (ok, detail) in zip(text["check_labels"], checks):
        mark = "ok  " if ok else "FAIL"
        con.line(f"  [{mark}] {label}" + (f": {detail}" if detail else ""), stamp=False)
    all_ok = len(checks) == len(text["check_labels"]) and all(ok for ok, _ in checks)
    con.line(text["ok"] if all_ok else text["fail"], stamp=False)
    return 0 if all_ok else 1


def _batch_deadline(remaining: float | None) -> float:
    """The batch deadline: what remains of the budget, at most BATCH_DEADLINE_S.
    A used-up budget (0.0) is no time at all, never "no limit"."""
    return BATCH_DEADLINE_S if remaining is None else min(BATCH_DEADLINE_S, remaining)


def _table(rows: Sequence[_Row], text: dict[str, Any]) -> str:
    header = tuple(text["header"])
    lines = [
        (
            str(row.round),
            row.result.call_id,
            row.result.name,
            text["status"][row.result.status],
            text["yes"] if row.result.started else text["no"],
            f"{row.result.elapsed_s:.2f} s".replace(".", text["decimal"]),
            row.thread,
            _short(_result_text(row, text), 76),
        )
        for row in rows
    ]
    widths = [max(len(c) for c in col) for col in zip(header, *lines)]
    out = [" | ".join(h.ljust(w) for h, w in zip(header, widths))]
    out.append("-+-".join("-" * w for w in widths))
    out += [" | ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines]
    return "\n".join(out)


def _result_text(row: _Row, text: dict[str, Any]) -> str:
    """The result column: what the tool returned (already in the demo's
    language), or its error in the demo's language."""
    r = row.result
    if r.status == "ok":
        return r.text
    if r.status == "timeout":
        if not r.started and text["tool_not_started"]:
            return str(text["tool_not_started"].format(tool=r.name))
        if text["tool_timeout"]:
            seconds = f"{row.deadline:.1f}".replace(".", text["decimal"])
            return str(text["tool_timeout"].format(tool=r.name, seconds=seconds))
    elif text["tool_error"]:
        reason = str(r.error) or type(r.error).__name__
        return str(text["tool_error"].format(tool=r.name, reason=reason))
    return r.text


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"



if __name__ == "__main__":  # python -m taut.demo [--lang de]
    from taut.cli import main

    sys.exit(main(["demo", *sys.argv[1:]]))
