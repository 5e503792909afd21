"""A plan's numbered table of upgrades, read the same way for every lesson: version → (what that version added,
the host value a run recorded it by, how an older run's host values give it).

Version 1 is the lesson before the others. A run recorded before its lesson had a plan holds each later part where
it recorded that part's host value, and goes without it elsewhere: `apply` starts from version 1 and takes every
upgrade whose host value the run recorded, in order."""

from __future__ import annotations

from typing import Any, Callable, Mapping, TypeVar

from pydantic import BaseModel, ValidationError

from bytesup.errors import RunFolderError

P = TypeVar("P", bound=BaseModel)
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


def recorded(table: Mapping[int, tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]],
             stored: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded plan, as plain data, brought to this version: each version's upgrade in `table` (version → (what it
    added, how a plan recorded before it gives it)) applied, in order, where the plan's `version` is below it."""
    plan = dict(stored)
    for version, (_, upgrade) in sorted(table.items()):
        if isinstance(plan.get("version"), int) and plan["version"] < version:
            plan = upgrade(plan)
    return plan


def plan_of(model: type[P], data: Mapping[str, Any], lesson: str) -> P:
    """`data` as the plan `model`; a recorded plan (or older host values) of another shape is refused in one paragraph."""
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the plan"
        raise RunFolderError(
            f"The plan lesson {lesson} recorded (its host value `plan`, or the host values an older run recorded) is "
            f"not one this version of bytesup reads: {where}: {first['msg'].lower()}. Nothing was replayed from it. "
            "Replay the run with the version of bytesup that recorded it, or record the lesson again.") from None
