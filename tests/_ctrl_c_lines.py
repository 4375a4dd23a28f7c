"""A Ctrl-C landing at each line of some code, for the tests that cut a
scope's entry or exit short there (another signal handler's exception can
land at any bytecode; taut's own signal waits, that one does not)."""

from __future__ import annotations

import dis
from types import CodeType, FrameType
from typing import Any, Callable


def lines_of(functions: dict[str, CodeType]) -> list[tuple[str, int]]:
    """Every line of each function's code, by the function's name."""
    return [
        (name, line)
        for name, code in functions.items()
        for line in sorted({line for _, line in dis.findlinestarts(code) if line is not None})
    ]


def ctrl_c_at(code: CodeType, line: int, landed: list[bool], during: str) -> Callable[..., Any]:
    """A trace function that raises KeyboardInterrupt once, as ``line`` of
    ``code`` is about to run (``landed`` says it did)."""

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code is not code:
            return None

        def local(frame: FrameType, event: str, arg: object) -> Any:
            if event == "line" and frame.f_lineno == line and not landed:
                landed.append(True)
                raise KeyboardInterrupt(f"a Ctrl-C during the {during}")
            return local

        return local

    return tracer
