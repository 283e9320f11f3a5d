"""A session's history and its active context, read through copy-on-write lineage.

A session owns only the messages written to it after it was forked; positions (``seq``)
run on from its parent's fork point. Its history is therefore a chain of *segments*: for
each session on the way up to the root, the range of that session's rows between the
fork point below and the fork point above. Reading a fork of a fork of a 300,000-message
session reads the same rows its root would, and forking copies none of them.

The active context is the history seen through the session's folds (``compress``): each
fold, applied in the order it was made, hides the unprotected items in its range and puts
its summary in their place. Folds nest or stay disjoint, never overlap partially, so that
undoing the newest one (``expand``) gives back exactly what it hid.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from ..model.records import ContextItem, Fold, Message
from ..store import Tx, messages, sessions


#: Rows fetched from SQLite at a time while streaming.
BATCH = 2000


_new = tuple.__new__


def _message(r: Sequence[Any]) -> Message:
    """A row of ``messages.COLUMNS`` as a ``Message``, made as a tuple is (no Python ``__new__``)."""
    return _new(Message, (r[0], r[1], r[2], r[3], r[4], bool(r[5]), r[6], json.loads(r[7]) if r[7] else None))


async def batches(tx: Tx, sid: int, lo: int = 0, hi: int | None = None, *, size: int = BATCH,
                  protected: bool = False) -> AsyncGenerator[list[Message], None]:
    """History positions ``lo < seq <= hi`` of ``sid`` (all of it by default), in order, in
    lists of at most ``size`` (only its protected messages with ``protected``): memory stays
    flat in the history length, and the read is one statement whatever the lineage's depth
    (``messages.history_pages``)."""
    async with aclosing(messages.history_pages(tx, sid, lo, hi, size=size, protected=protected)) as found:
        async for rows in found:
            yield [_message(r) for r in rows]


async def read(tx: Tx, sid: int, lo: int = 0, hi: int | None = None, *, protected: bool = False) -> list[Message]:
    """History positions ``lo < seq <= hi`` of ``sid`` (all of it by default), in order."""
    return [m async for batch in batches(tx, sid, lo, hi, size=10_000, protected=protected) for m in batch]


def _outermost(in_force: Sequence[Fold]) -> list[tuple[int, int]]:
    """The ranges ``(lo, hi)`` the folds cover, merged: folds nest or stay disjoint."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted((f.lo, f.hi) for f in in_force):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


async def context(tx: Tx, sid: int, in_force: Sequence[Fold] | None = None, *,
                  last: int | None = None) -> list[ContextItem]:
    """The active context (its ``last`` items only, when given), reading only what it shows:
    the messages outside every fold and the protected ones inside; a compressed
    million-message session costs its context, not its history, and the last items of a
    long one cost those items. Equal to ``active(read(tx, sid), in_force)[-last:]``."""
    if in_force is None:
        in_force = await folds(tx, sid)
    length = await sessions.history_length(tx, sid)
    if last is not None:
        if last <= 0:
            return []
        folded = max((f.hi for f in in_force), default=0)
        if length - folded >= last:  # the last items are all after every fold
            return active(await read(tx, sid, length - last), ())
    seen: list[Message] = []
    upto = 0
    for lo, hi in _outermost(in_force):
        seen += await read(tx, sid, upto, lo - 1)
        seen += await read(tx, sid, max(upto, lo - 1), hi, protected=True)
        upto = max(upto, hi)
    seen += await read(tx, sid, upto)
    items = active(seen, in_force)
    return items if last is None else items[-last:]


async def cum_tokens(tx: Tx, sid: int, seq: int) -> int:
    """Sum of the tokens of history positions 1..``seq``: one indexed lookup in the session
    that wrote position ``seq``, found by going up the lineage only as far as it (a fork at
    the end of a deep chain reads its own row, whatever the depth)."""
    if seq <= 0:
        return 0
    value = await messages.cum_tokens(tx, sid, seq)
    if value is None:
        raise ValueError(f"session {sid} has no position {seq}")
    return value


async def folds(tx: Tx, sid: int) -> list[Fold]:
    """The session's folds in force, oldest first."""
    return await messages.folds_in_force(tx, sid)


def apply_fold(items: list[ContextItem], fold: Fold) -> list[ContextItem]:
    """``items`` with the unprotected ones in ``fold``'s range replaced by its summary."""
    positions = [i.seq for i in items]
    start = bisect.bisect_left(positions, fold.lo)
    stop = bisect.bisect_right(positions, fold.hi)
    inside = items[start:stop]
    kept = [i for i in inside if i.protected]
    summary = ContextItem(fold.lo, "system", fold.summary, fold.summary_tokens, author="compress",
                          fold=fold.id, folded=fold.archived_count)
    return items[:start] + [summary] + kept + items[stop:]


def active(history: Sequence[Message], in_force: Sequence[Fold]) -> list[ContextItem]:
    """The active context: ``history`` seen through ``in_force`` folds."""
    items = [_new(ContextItem, (m[0], m[1], m[2], m[3], m[4], m[5], None, 0, m[7])) for m in history]
    for fold in in_force:
        items = apply_fold(items, fold)
    return items


@dataclass(slots=True, frozen=True)
class FoldPlan:
    lo: int
    hi: int
    archived: tuple[ContextItem, ...]


def plan_fold(items: Sequence[ContextItem], in_force: Sequence[Fold], keep_last: int) -> FoldPlan | None:
    """Which items a new fold keeping the last ``keep_last`` items would archive, or None.

    The range is widened to cover whole any older fold whose summary it swallows, so that
    folds always nest.
    """
    candidates = items[: max(len(items) - keep_last, 0)]
    archived = tuple(i for i in candidates if not i.protected)
    if not archived:
        return None
    lo, hi = archived[0].seq, archived[-1].seq
    swallowed = {i.fold for i in archived if i.fold is not None}
    for fold in in_force:
        if fold.id in swallowed:
            lo, hi = min(lo, fold.lo), max(hi, fold.hi)
    return FoldPlan(lo, hi, archived)
