"""The planning sentence of :meth:`taut.PlanningConstraints.guidance`, in each
language it speaks ("You have 30 minutes and 3 available agents.")."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import NamedTuple

from taut._checks import describe

__all__ = ["planning_sentence"]


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


_UNITS = {
    "en": (("hour", "hours"), ("minute", "minutes"), ("second", "seconds")),
    "de": (("Stunde", "Stunden"), ("Minute", "Minuten"), ("Sekunde", "Sekunden")),
}


_SHORT_BY_AT_MOST = 0.01


def _duration_text(seconds: float, lang: str) -> str:
    (h1, hn), (m1, mn), (s1, sn) = _UNITS[lang]
    # Rounded down: a planner told of more time than it has plans past its
    # deadline (1.5 s is "1 second", 59.9 s "59 seconds", not "1 minute").
    # Less than 10 ms short of a whole second counts as that second: a live
    # budget read just after its start of 3 s still has "3 seconds".
    total = math.floor(seconds + _SHORT_BY_AT_MOST)
    if total == 0:
        return "less than a second" if lang == "en" else "weniger als eine Sekunde"
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    parts = []
    if h:
        parts.append(_plural(h, h1, hn))
    if m:
        parts.append(_plural(m, m1, mn))
    if s:
        parts.append(_plural(s, s1, sn))
    # "1 hour 30 minutes", not "1 hour and 30 minutes": the sentence's own "and"
    # joins the time and the agents.
    return " ".join(parts)


def _norm_lang(lang: str) -> str:
    if not isinstance(lang, str):
        # str() of anything would pass (and may raise its own error).
        raise TypeError(f"lang must be a language code such as 'en', got {describe(lang)}")
    base = lang.lower().replace("_", "-").split("-")[0]
    if base not in _UNITS:
        raise ValueError(
            "lang must be one of 'en', 'de' (or a regional variant), "
            f"got {describe(lang, limit=60)}"
        )
    return base


def _num(value: float, lang: str = "en") -> str:
    text = f"{value:g}"
    return text.replace(".", ",") if lang == "de" else text


def _pairs(values: Mapping[str, float], lang: str) -> str:
    return ", ".join(f"{k} {_num(v, lang)}" for k, v in values.items())


class _GuidanceText(NamedTuple):
    no_time_limit: str
    no_time_left: str
    no_agent_limit: str
    agents: Callable[[int], str]
    sentence: str  # {time} and {agents}
    budgets: str  # {0}: the cost budgets
    weights: str  # {0}: the weights


_GUIDANCE = {
    "en": _GuidanceText(
        "no time limit",
        "no time left",
        "no limit on the number of agents",
        lambda n: _plural(n, "available agent", "available agents"),
        "You have {time} and {agents}.",
        " Do not exceed these budgets: {0}.",
        " Preferences (weights): {0}.",
    ),
    "de": _GuidanceText(
        "kein Zeitlimit",
        "keine Zeit mehr",
        "keine Begrenzung der Anzahl der Agenten",
        lambda n: "einen verfügbaren Agenten" if n == 1 else f"{n} verfügbare Agenten",
        "Du hast {time} und {agents}.",
        " Überschreite diese Budgets nicht: {0}.",
        " Präferenzen (Gewichte): {0}.",
    ),
}


def planning_sentence(
    lang: str,
    budget: float | None,
    max_agents: int | None,
    cost_budgets: Mapping[str, float],
    weights: Mapping[str, float],
) -> str:
    """The sentence for a time ``budget`` in seconds (None: no limit) and
    ``max_agents`` (None: no limit); cost budgets and weights add one sentence
    each. ``lang``: 'en' or 'de', or a regional variant ('de-AT')."""
    lang = _norm_lang(lang)
    text = _GUIDANCE[lang]
    if budget is None:
        time_part = text.no_time_limit
    elif budget <= 0:
        time_part = text.no_time_left
    else:
        time_part = _duration_text(budget, lang)
    agents = text.no_agent_limit if max_agents is None else text.agents(max_agents)
    out = text.sentence.format(time=time_part, agents=agents)
    if cost_budgets:
        out += text.budgets.format(_pairs(cost_budgets, lang))
    if weights:
        out += text.weights.format(_pairs(weights, lang))
    return out
