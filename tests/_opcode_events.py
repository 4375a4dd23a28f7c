"""Whether this interpreter sends opcode events to a trace function: the
probes that raise KeyboardInterrupt at each bytecode in turn need them."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import pytest


def opcode_events_reach_a_first_call() -> bool:
    # CPython 3.12.0-3.12.1 send no opcode events to a trace function this
    # way: there a probe could interrupt nothing.
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


needs_opcode_events = pytest.mark.skipif(
    not opcode_events_reach_a_first_call(),
    reason=f"no opcode events for a trace function on {sys.version}",
)
