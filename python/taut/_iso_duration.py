"""The one check of ISO-8601 duration text, shared by config timeouts and
``PlanningConstraints.time_budget``: both parse with pydantic's timedelta
parser, which sums whatever parts it finds (``PT1H1H`` is two hours,
``PT1S1H`` one hour and a second), so text must pass this shape first."""

from __future__ import annotations

import re

__all__ = ["ISO_DURATION", "ISO_PARTS", "ISO_SHAPE", "iso_duration_problem"]

# Text that means to be an ISO-8601 duration (and not seconds).
ISO_DURATION = re.compile(r"^[+-]?P", re.IGNORECASE)
# Years and months have no fixed length; a timeout must mean one exact duration.
_AMBIGUOUS = re.compile(r"^[+-]?P(?:[^T]*[YM])", re.IGNORECASE)
_NUMBER = r"\d+(?:[.,]\d+)?"
# The shape the parser reads exactly, years and months aside: weeks, days,
# then T and hours, minutes, seconds; each at most once and in that order, at
# least one, designators in capitals (the parser refuses "pt5m"). A T with
# nothing after it (P1DT) or a bare decimal point (PT1.S) the parser reads,
# but ISO-8601 does not allow, and in a config they are likelier a part left
# out than meant: refused too.
ISO_SHAPE = re.compile(
    rf"^[+-]?P(?=\d|T\d)(?:{_NUMBER}W)?(?:{_NUMBER}D)?"
    rf"(?:T(?=\d)(?:{_NUMBER}H)?(?:{_NUMBER}M)?(?:{_NUMBER}S)?)?$",
    re.ASCII,  # digits 0-9 only: the parser reads no others
)
# The same shape, by part.
ISO_PARTS = re.compile(
    rf"^[+-]?P(?:(?P<W>{_NUMBER})W)?(?:(?P<D>{_NUMBER})D)?"
    rf"(?:T(?:(?P<H>{_NUMBER})H)?(?:(?P<M>{_NUMBER})M)?(?:(?P<S>{_NUMBER})S)?)?$",
    re.ASCII,
)

AMBIGUOUS_REASON = "years and months have no fixed length; use days (P30D) or hours"
SHAPE_REASON = (
    "not a valid ISO-8601 duration: each unit at most once, in the order W, D, T, H, M, S, "
    "a fraction only in the last (as in P1DT2H30.5M)"
)


def iso_duration_problem(text: str) -> str | None:
    """Why stripped duration ``text`` is refused before it is parsed, or
    ``None`` for the shape the parser then reads exactly."""
    if _AMBIGUOUS.match(text):
        return AMBIGUOUS_REASON
    parts = ISO_PARTS.match(text)
    if parts is None or not ISO_SHAPE.match(text):
        return SHAPE_REASON
    given = [part for part in parts.groups() if part is not None]
    if any(not part.isdigit() for part in given[:-1]):
        return SHAPE_REASON  # ISO-8601 allows a fraction only in the smallest unit
    return None
