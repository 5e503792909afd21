"""A plan's numbered table of upgrades, read the same way for every lesson: version → (what that version added,
the host value a run recorded it by, how an older run's host values give it).

Version 1 is the lesson before the others. A run recorded before its lesson had a plan holds each later part where
it recorded that part's host value, and goes without it elsewhere: `apply` starts from version 1 and takes every
upgrade whose host value the run recorded, in order."""

from __future__ import annotations

from typing import Any, Callable, Mapping

Upgrade = Callable[[dict[str, Any], Mapping[str, Any]], dict[str, Any]]
Table = dict[int, tuple[str, str | None, Upgrade]]


def apply(table: Table, old: Mapping[str, Any]) -> dict[str, Any]:
    """The plan, as plain data, of a run that recorded the host values `old`."""
    plan: dict[str, Any] = {}
    for _, (_, shown_by, upgrade) in sorted(table.items()):
        if shown_by is None or shown_by in old:
            plan = upgrade(plan, old)
    return plan


def shown_by(table: Table) -> list[str]:
    """The host values that show a run recorded a later version's part."""
    return [name for _, name, _ in table.values() if name is not None]
