"""The texts of ``python -m taut demo``, one table per language. Kept apart
from the demo so that the command line can list the languages without
importing the demo (and with it the tool runner and pydantic)."""

from __future__ import annotations

from typing import Any

TEXT: dict[str, dict[str, Any]] = {
    "en": {
        "title": "taut demo: one simulated agent turn (no network)",
        "plan": "planning round {n}: {guidance}",
        "batch": "round {n}: {count} tool calls on {workers} tool workers, "
        "batch deadline {deadline} s",
        "started": "  {call} {tool}: started on {thread}",
        "done": "  {call} {tool}: {status} after {elapsed} s",
        "left": "budget: {used} s used, {left} s left of {total} s",
        "dropped": "  {call} {tool}: no worker before the batch deadline",
        "table": "outcomes",
        "header": ("round", "call", "tool", "status", "started", "elapsed", "worker", "result"),
        "yes": "yes",
        "no": "no",
        "decimal": ".",
        "checks": "checks",
        "check_labels": (
            "hung tool cut off at the batch deadline",
            "the hung tool's loop was stopped on its thread (interrupt=True)",
            "subprocess tree killed at its deadline, grandchild included",
            "nested sub-agent batch ran inline on its worker",
            "results in batch order with their call ids",
            "the other seven round-1 calls succeeded",
            "the budget shrank between the planning rounds",
            "the hung worker was abandoned, the pool kept its ceiling",
        ),
        "ok": "all checks passed",
        "fail": "some checks FAILED",
        "status": {"ok": "ok", "error": "error", "timeout": "timeout"},
        # What the simulated tools return: the model's language.
        "search_docs": "3 passages about {query!r}",
        "read_file": "{size} bytes read",
        "shell": "sh timed out after {elapsed} s; grandchild sleep (pid {pid}) {state}",
        "shell_gone": "killed with it",
        "shell_alive": "STILL ALIVE",
        "sub_agent": "{count} sub-results, inline on {thread}",
        "forecast": "{city}: sunny (simulated)",
        "list_dir": "{count} entries",
        "count_words": "{count} words",
        "report": "report {title!r} written",
        "report_title": "turn 1",
        # None: the table shows the text the model gets from ToolRunner as is.
        "tool_timeout": None,
        "tool_not_started": None,
        "tool_error": None,
    },
    "de": {
        "title": "taut-Demo: ein simulierter Agentenschritt (ohne Netzwerk)",
        "plan": "Planungsrunde {n}: {guidance}",
        "batch": "Runde {n}: {count} Tool-Aufrufe auf {workers} Tool-Bearbeitern, "
        "Frist {deadline} s",
        "started": "  {call} {tool}: gestartet auf {thread}",
        "done": "  {call} {tool}: {status} nach {elapsed} s",
        "left": "Budget: {used} s verbraucht, {left} s übrig von {total} s",
        "dropped": "  {call} {tool}: kein Bearbeiter frei vor der Frist",
        "table": "Ergebnisse",
        "header": (
            "Runde",
            "Aufruf",
            "Tool",
            "Status",
            "gestartet",
            "Dauer",
            "Bearbeiter",
            "Ergebnis",
        ),
        "yes": "ja",
        "no": "nein",
        "decimal": ",",
        "checks": "Prüfungen",
        "check_labels": (
            "hängendes Tool an der Frist des Stapels abgebrochen",
            "die Schleife des hängenden Tools wurde auf seinem Thread gestoppt (interrupt=True)",
            "Prozessbaum an seiner Frist beendet, Enkelprozess eingeschlossen",
            "verschachtelter Subagenten-Stapel lief direkt auf seinem Bearbeiter",
            "Ergebnisse in Stapelreihenfolge mit ihren Aufruf-IDs",
            "die anderen sieben Aufrufe der Runde 1 waren erfolgreich",
            "das Budget schrumpfte zwischen den Planungsrunden",
            "der hängende Bearbeiter wurde aufgegeben, der Pool behielt seine Obergrenze",
        ),
        "ok": "alle Prüfungen bestanden",
        "fail": "einige Prüfungen FEHLGESCHLAGEN",
        "status": {"ok": "ok", "error": "Fehler", "timeout": "Zeitüberschreitung"},
        "search_docs": "3 Textstellen zu {query!r}",
        "read_file": "{size} Bytes gelesen",
        "shell": "sh nach {elapsed} s abgebrochen; Enkelprozess sleep (PID {pid}) {state}",
        "shell_gone": "mit beendet",
        "shell_alive": "LÄUFT NOCH",
        "sub_agent": "{count} Teilergebnisse, direkt auf {thread}",
        "forecast": "{city}: sonnig (simuliert)",
        "list_dir": "{count} Einträge",
        "count_words": "{count} Wörter",
        "report": "Bericht {title!r} geschrieben",
        "report_title": "Schritt 1",
        # ToolRunner's texts for the model are English; the table says the same in German.
        "tool_timeout": "Fehler beim Ausführen von {tool!r}: Zeitüberschreitung nach {seconds} s",
        "tool_not_started": (
            "Fehler beim Ausführen von {tool!r}: kein Bearbeiter frei vor der Frist"
        ),
        "tool_error": "Fehler beim Ausführen von {tool!r}: {reason}",
    },
}

LANGUAGES = tuple(sorted(TEXT))
