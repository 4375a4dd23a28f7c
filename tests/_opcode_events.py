"""Probes that raise KeyboardInterrupt at each bytecode of some code in turn
(as a Ctrl-C can land between any two), one fresh run per bytecode.

Imported by the tests and by the probe scripts they run in a fresh
interpreter (``run_probe`` puts this folder on the script's path)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from types import FrameType
from typing import Any, Callable

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


class InterruptAtOpcode:
    """A trace hook, while entered: KeyboardInterrupt at the ``n``-th bytecode
    (from 1) run in the frames ``traced(frame)`` picks; ``where`` is then
    ``(function name, bytecode offset)``."""

    def __init__(self, n: int, traced: Callable[[FrameType], bool]) -> None:
        self.n = n
        self.traced = traced
        self.count = 0
        self.where: tuple[str, int] | None = None

    def _at_opcode(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            self.count += 1
            if self.count == self.n:
                self.where = (frame.f_code.co_name, frame.f_lasti)
                raise KeyboardInterrupt  # CPython drops a hook that raises
        return self._at_opcode

    def _on_call(self, frame: FrameType, event: str, arg: Any) -> Any:
        if not self.traced(frame):
            return None
        # f_trace first: on 3.13, f_trace_opcodes alone takes effect from a
        # code object's second call on.
        frame.f_trace = self._at_opcode
        frame.f_trace_opcodes = True
        return self._at_opcode

    def __enter__(self) -> InterruptAtOpcode:
        sys.settrace(self._on_call)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)


def interrupted_at(
    n: int, traced: Callable[[FrameType], bool], run: Callable[[], object]
) -> tuple[str, int] | None:
    """``run()`` with the hook at bytecode ``n`` of the frames ``traced``
    picks: the KeyboardInterrupt ends it there, as a Ctrl-C ends a program's
    ``run_until_complete``. Where it landed, or None if ``run()`` went
    through without reaching bytecode ``n``."""
    hook = InterruptAtOpcode(n, traced)
    try:
        with hook:
            run()
    except KeyboardInterrupt:
        pass
    return hook.where


def each_bytecode(run_once: Callable[[int], tuple[tuple[str, int] | None, bool]]) -> dict[str, Any]:
    """``run_once(n)`` (the hook at bytecode ``n``; returns where it landed,
    None once it is not reached, and whether the outcome was right) for
    n = 1, 2, ... The functions it landed in, and where the first wrong
    outcome was (``[n, function, offset]``) or None."""
    interrupted_in: list[str] = []
    lost_at = None
    n = 1
    while True:
        where, right = run_once(n)
        if where is None:
            break  # the hook was not reached: the run went through
        interrupted_in.append(where[0])
        if not right:
            lost_at = [n, *where]
            break
        n += 1
    return {"interrupted_in": interrupted_in, "lost_at": lost_at}


@functools.cache
def opcode_events_reach_a_first_call() -> bool:
    # CPython 3.12.0-3.12.1 send no opcode events to a trace function this
    # way: there a probe could interrupt nothing. Only a code object's first
    # call tells (its later calls get them), hence once per process.
    seen: list[str] = []

    def traced() -> int:
        return len(seen)

    def at_opcode(frame: FrameType, event: str, arg: Any) -> Any:
        seen.append(event)
        return at_opcode

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code is traced.__code__:
            frame.f_trace = at_opcode
            frame.f_trace_opcodes = True
            return at_opcode
        return None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        traced()
    finally:
        sys.settrace(previous)
    return "opcode" in seen


def run_probe(script: str, *args: str) -> dict[str, Any]:
    """Run ``script`` in a fresh interpreter and return the JSON its last
    line prints; skip where trace functions get no opcode events."""
    if not opcode_events_reach_a_first_call():
        pytest.skip(f"no opcode events for a trace function on {sys.version}")
    path = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result
