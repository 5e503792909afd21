"""Parts of a lesson that moved to a lesson of their own, and how a run recorded before follows them.

Speculative decoding was the end of lesson 5 (`05_generating_text`) until it became lesson 5b
(`05b_speculative_decoding`). A run recorded before holds it inside lesson 5's result and recording:
its tables, measurements, plot and notes, its settings `speculative`, the host values it measured
(the engine's support, the models' files) and the exchanges with its own servers (labelled
`spec-…`, which lesson 5's other requests never are). `split` cuts such a result in two, by those
names, so that `load_run` (check, compare, report) and `load_replay` see the two lessons a run
makes now. The exchanges stay in the one recording: a replay of either lesson asks only for its own.
`scripts/split_speculative_lesson.py` writes the two lessons' files into a run folder once, from a
replay of its recordings.
"""

from __future__ import annotations

import copy
from typing import Any

FROM = "05_generating_text"
TO = "05b_speculative_decoding"
TO_TITLE = "Speculative decoding"
# What lesson 5b records under its own names; `identity`, `repeat` and `server_facts` it shares with
# lesson 5's run, and `client_clock` gates the streamed requests of both (a run recorded before lesson 5
# streamed has neither lesson's streams).
MOVED_HOST_VALUES = ("server_facts", "speculation_support")
SHARED_HOST_VALUES = ("identity", "repeat", "client_clock")


def _moved_host_value(name: str) -> bool:
    return name in MOVED_HOST_VALUES or name.startswith("spec_model_")


def has_moved_part(data: dict[str, Any]) -> bool:
    """Whether a lesson 5 result (as JSON) still holds speculative decoding."""
    hosts = data.get("host_values") or {}
    return ("speculation_support" in hosts or any(k.startswith("spec_model_") for k in hosts)
            or "speculative" in (data.get("settings") or {})
            or any(str(n).startswith("Speculative decoding") for n in data.get("notes") or []))


def split(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A lesson 5 result recorded before lesson 5b existed, as (lesson 5, lesson 5b) results; the
    second is None when it holds no speculative decoding (a result of now, or from before it was measured)."""
    if data.get("lesson_id") != FROM or not has_moved_part(data):
        return data, None
    rest, part = copy.deepcopy(data), copy.deepcopy(data)

    def moved_table(t: dict) -> bool:
        return str(t.get("name", "")).startswith("speculative_")

    def moved_note(n: str) -> bool:
        return n.startswith("Speculative decoding")  # "… was not measured: …", "… (illustrative, not run): …"

    rest["tables"] = [t for t in data.get("tables", []) if not moved_table(t)]
    part["tables"] = [t for t in data.get("tables", []) if moved_table(t)]
    rest["measurements"] = [m for m in data.get("measurements", []) if not str(m.get("name", "")).startswith("spec_")]
    part["measurements"] = [m for m in data.get("measurements", []) if str(m.get("name", "")).startswith("spec_")]
    rest["plots"] = [p for p in data.get("plots", []) if not moved_table(p)]
    part["plots"] = [p for p in data.get("plots", []) if moved_table(p)]
    rest["notes"] = [n for n in data.get("notes", []) if not moved_note(n)]
    part["notes"] = [n for n in data.get("notes", []) if moved_note(n)]
    settings = dict(data.get("settings") or {})
    part["settings"] = {"speculative": settings.pop("speculative")} if "speculative" in settings else {}
    rest["settings"] = settings
    hosts = data.get("host_values") or {}
    rest["host_values"] = {k: v for k, v in hosts.items() if not _moved_host_value(k)}
    part["host_values"] = {k: v for k, v in hosts.items() if _moved_host_value(k) or k in SHARED_HOST_VALUES}
    part.pop("facts", None)
    part.update({"lesson_id": TO, "title": TO_TITLE})
    return rest, part


def own_exchanges(lesson_id: str, exchanges: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The exchanges of the one recording that lesson `lesson_id` makes now: lesson 5b's servers are its own."""
    def speculative(e: dict[str, Any]) -> bool:
        return str(e.get("server", "main")).startswith("spec-")

    return [e for e in exchanges if speculative(e) == (lesson_id == TO)]
