"""Three-way merge of working memory, and where two sessions' histories part.

``three_way`` is pure: given the base (the common ancestor's memory), ours (the target's)
and theirs (the source's), it returns what to change in ours and what conflicts. Values
are compared as canonical JSON text, so ``{"a":1,"b":2}`` and ``{"b":2,"a":1}`` are equal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# the one text form of a JSON value that memory stores and merges compare (kept importable here)
from ..model.limits import canonical as canonical
from ..model.records import MISSING as MISSING, _Missing




@dataclass(slots=True, frozen=True)
class Resolution:
    """How to settle conflicts: a side for all keys (and files), per-key picks or values, and
    per-file picks."""

    side: str | None = None  # "ours" | "theirs"
    picks: dict[str, str] | None = None  # key -> "ours" | "theirs"
    values: dict[str, str] | None = None  # key -> canonical JSON text
    files: dict[str, str] | None = None  # a fork's file (path in its folder) -> "ours" | "theirs"


def three_way(
    base: dict[str, str], ours: dict[str, str], theirs: dict[str, str], resolution: Resolution = Resolution()
) -> tuple[dict[str, str | _Missing], dict[str, tuple[Any, Any, Any]], dict[str, Any]]:
    """Changes to apply to ours, unresolved conflicts, and how each conflict was resolved
    (``"ours"``, ``"theirs"``, or ``{"value": V}`` for a value given).

    Every map holds canonical JSON text. A key changed on one side only takes that side's
    value; changed on both sides to the same value, it is left alone; changed on both sides
    differently, it is a conflict unless ``resolution`` settles it.
    """
    changes: dict[str, str | _Missing] = {}
    conflicts: dict[str, tuple[Any, Any, Any]] = {}
    resolved: dict[str, Any] = {}
    picks, values = resolution.picks or {}, resolution.values or {}
    for key in sorted(base.keys() | ours.keys() | theirs.keys()):
        b, o, t = base.get(key, MISSING), ours.get(key, MISSING), theirs.get(key, MISSING)
        if o == t or t == b:
            continue
        if o == b:
            changes[key] = t
            continue
        if key in values:
            changes[key] = values[key]
            resolved[key] = {"value": json.loads(values[key])}  # not a side's name: a value may be "ours"
        elif picks.get(key, resolution.side) == "theirs":
            changes[key] = t
            resolved[key] = "theirs"
        elif picks.get(key, resolution.side) == "ours":
            resolved[key] = "ours"
        else:
            conflicts[key] = (_decode(b), _decode(o), _decode(t))
    return changes, conflicts, resolved


def _decode(text: str | _Missing) -> Any:
    return text if isinstance(text, _Missing) else json.loads(text)


@dataclass(slots=True, frozen=True)
class Link:
    """One step up a session's ancestry: the session, where it forked, the memory it started
    from and the moment that memory was taken (a fork's creation, a checkpoint's save)."""

    session: int
    fork_seq: int
    length: int
    base_memory: dict[str, str] | None
    base_at: float
    #: whether it reads its parent's memory copy-on-write: its base is then read from the store
    inherits: bool = False


@dataclass(slots=True, frozen=True)
class Ancestor:
    """The point two histories share: positions 1..``seq`` of ``session``'s history."""

    session: int | None
    seq: int
    memory: dict[str, str]
    #: the copy-on-write fork whose base ``memory`` is (to be read: ``rows.fork_base``), if any
    base_of: int | None = None


def common_ancestor(source: list[Link], target: list[Link]) -> Ancestor:
    """Where ``source`` and ``target`` (each listed from itself up to its root) part.

    The shared history ends at the earlier of the two points where the paths leave the
    deepest common session; the base memory is the older of the two memories the branches
    started from (by the moment each was taken: a later fork at an earlier message still
    carries the memory of its later moment, a branch restored from a checkpoint the memory
    of the checkpoint's moment). Unrelated sessions share nothing: seq 0, empty memory.
    """
    in_source = {link.session: i for i, link in enumerate(source)}
    for j, link in enumerate(target):
        i = in_source.get(link.session)
        if i is None:
            continue
        # the children through which each path leaves the common session (None: it is the end)
        via_source = source[i - 1] if i > 0 else None
        via_target = target[j - 1] if j > 0 else None
        point_source = via_source.fork_seq if via_source else link.length
        point_target = via_target.fork_seq if via_target else link.length
        forks = [c for c in (via_source, via_target) if c is not None]
        # memory has no positions, only a past: the base is what the earlier fork copied
        earliest = min(forks, key=lambda c: c.base_at) if forks else None
        memory = (earliest.base_memory or {}) if earliest else {}
        base_of = earliest.session if earliest and earliest.inherits else None
        return Ancestor(link.session, min(point_source, point_target), memory, base_of)
    return Ancestor(None, 0, {})
