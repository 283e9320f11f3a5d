"""Calls on a session's context: messages in, working memory, compress and expand."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence, Sized
from typing import Any

from ..model import limits
from ..model.calls import Call
from ..model.errors import InvalidArgument, NotFound, ProcessionError
from ..model.outcomes import Compressed, Expanded, MemoryChanged, Sent
from ..model.records import ContextItem, Fold
from ..store import Row, Tx, rows
from ..store.tokens import scaled
from . import history, waking
from .base import Calls
from .summarise import summarise
from .syscall import Act, syscall

DEFAULT_KEEP_LAST = 8
#: Messages an inbox trigger's cause carries (the newest), and how much of each text.
CAUSE_MESSAGES = 20
CAUSE_TEXT = 2_000
#: The keys a sent message may have (``send_many``).
MESSAGE_KEYS = frozenset(("role", "content", "author", "pinned", "meta", "created", "seq", "tokens"))
Progress = Callable[[int, int], None]
FoldPlan = tuple[history.FoldPlan, str, int]


class ContextCalls(Calls):
    @syscall(Call.SEND, other="sender")
    async def send(self, act: Act, sid: int, text: str, *, role: str = "user", sender: int | None = None,
                   pin: bool = False) -> Sent:
        """Append one message; ``sender`` is the session it comes from (else the user)."""
        author = await _author(act.tx, sid, sender)
        message = (limits.role(role), limits.text(text, "message"), author, pin, None)
        seq = await deliver(act.tx, act.row, [message], author)
        return Sent(sid, seq, 1)

    @syscall(Call.SEND, other="sender")
    async def send_many(self, act: Act, sid: int, messages: Iterable[dict[str, Any]], *, sender: int | None = None,
                        progress: Progress | None = None) -> Sent:
        """Append a transcript (``{"role", "content"[, "author"][, "pinned"][, "meta"][,
        "created"]}`` objects) in one transaction. A message's ``author`` says who wrote it
        (default: the sender, else the user), so that a transcript's replies are not taken for
        the user's words; ``meta`` (an object) is kept with it, as a runner keeps a tool call's;
        ``created`` is its own time (default: now). ``seq`` and ``tokens``, which ``history
        --json`` prints, are taken and made anew here (its place in this session, this session's
        count), so that one session's messages can be sent to another. Any other key is refused,
        not dropped: what it said would be lost unseen. ``messages`` may be an iterator (a file
        parsed as it is read): it is taken a batch at a time, and a bad message, however far
        in, refuses the whole transcript."""
        author = await _author(act.tx, sid, sender)
        total = len(messages) if isinstance(messages, Sized) else 0
        now = act.tx.now

        def checked() -> Iterable[tuple[str, str, str, bool, Any, float]]:
            for n, m in enumerate(messages, start=1):
                limits.json_shape(m, f"message {n}")  # its content's size is limits.text's
                if not isinstance(m, dict) or not isinstance(m.get("content"), str) or "role" not in m:
                    raise InvalidArgument(f"message {n}: needs a role and a content string")
                if m["role"] not in limits.ROLES:
                    raise InvalidArgument(f"message {n}: bad role {m['role']!r}; roles are {', '.join(limits.ROLES)}")
                if len(m) > 2 and not MESSAGE_KEYS.issuperset(m):
                    raise InvalidArgument(f"message {n}: unknown key {sorted(m.keys() - MESSAGE_KEYS)[0]!r};"
                                          f" a message has {', '.join(sorted(MESSAGE_KEYS))}")
                meta = m.get("meta")
                if not isinstance(meta, dict | None):  # null: none, as history prints it
                    raise InvalidArgument(f"message {n}: meta must be a JSON object")
                if meta and not isinstance(meta.get("tool", {}), dict):
                    raise InvalidArgument(f"message {n}: meta's tool must be an object (a tool call: id, name,"
                                          " input, output, is_error)")
                created = m.get("created")
                if created is None:
                    created = now
                elif (isinstance(created, bool) or not isinstance(created, int | float) or not math.isfinite(created)
                      or created < 0):
                    raise InvalidArgument(f"message {n}: created must be a time in seconds since the epoch")
                pinned = m.get("pinned", False)
                if not isinstance(pinned, bool):  # "false" is a string, and true
                    raise InvalidArgument(f"message {n}: pinned must be true or false")
                by = limits.name(m["author"], f"message {n} author") if "author" in m else author
                yield m["role"], limits.text(m["content"], f"message {n}"), by, pinned, meta or None, float(created)

        start = act.row["length"]
        seq = await deliver(act.tx, act.row, checked(), author, total, progress)
        if seq == start:
            raise InvalidArgument("the transcript holds no message")
        return Sent(sid, seq, seq - start)

    @syscall(Call.MEMORY)
    async def memory_set(self, act: Act, sid: int, key: str, value: Any) -> MemoryChanged:
        limits.name(key, "memory key", limits.KEY_MAX)
        text = limits.json_value(value, f"the value of memory key {key!r}")
        await rows.put_memory(act.tx, sid, {key: text})
        await act.tx.touch(sid)
        return MemoryChanged(sid, set=(key,))

    @syscall(Call.MEMORY)
    async def memory_set_many(self, act: Act, sid: int, values: dict[str, Any]) -> MemoryChanged:
        """Set many keys in one call: all of them, or (a bad key or value, named) none."""
        if not isinstance(values, dict) or not values:
            raise InvalidArgument("setting memory takes an object of at least one key and its value")
        texts = {limits.name(key, "memory key", limits.KEY_MAX):
                 limits.json_value(value, f"the value of memory key {key!r}") for key, value in values.items()}
        await rows.put_memory(act.tx, sid, texts)
        await act.tx.touch(sid)
        return MemoryChanged(sid, set=tuple(texts))

    @syscall(Call.MEMORY)
    async def memory_delete(self, act: Act, sid: int, key: str) -> MemoryChanged:
        if not await rows.delete_memory(act.tx, sid, [key]):
            raise NotFound(f"session {sid} has no memory key {key!r}")
        await act.tx.touch(sid)
        return MemoryChanged(sid, deleted=(key,))

    @syscall(Call.COMPRESS)
    async def compress(self, act: Act, sid: int, keep_last: int = DEFAULT_KEEP_LAST, *, summary: str | None = None,
                       mask_tools: bool = False, expect: tuple[int, int] | None = None) -> Compressed:
        """Fold all but the last ``keep_last`` context items behind one summary: the built-in
        extractive one, or ``summary`` (the user's own, or a model's: ``expect`` is the range
        it was made for, and the call is refused if the context has changed since). With
        ``mask_tools``, each older tool call's output is folded alone behind a one-line stub
        instead, and the rest of the conversation stays as it was.

        System and pinned messages stay in place. The archived messages stay in the history;
        ``expand`` restores the context exactly (a masking as a whole).
        """
        if keep_last < 0:
            raise InvalidArgument("--keep-last must be 0 or more")
        if mask_tools:
            return await _mask(act, sid, keep_last)
        if summary is not None:
            summary = limits.text(summary, "the summary")
            if not summary.strip():
                raise InvalidArgument("the summary is empty")
        plan = await plan_fold(act.tx, act.row, keep_last, given=summary)
        if plan is None:
            raise ProcessionError(
                f"nothing to compress in session {sid}: all but the last {keep_last} context items are"
                " pinned or system messages, or there are none"
            )
        if expect is not None and (plan[0].lo, plan[0].hi) != tuple(expect):
            raise ProcessionError(f"the context of session {sid} changed while its summary was made; compress again")
        fold = await write_fold(act.tx, act.row, *plan)
        return _compressed(act, sid, fold, await act.reload())

    async def fold_plan(self, sid: int, keep_last: int = DEFAULT_KEEP_LAST) -> history.FoldPlan:
        """What ``compress`` would archive now (a read: for a summary made outside a transaction)."""
        async with self.store.snapshot() as tx:
            await rows.session(tx, sid)
            in_force = await history.folds(tx, sid)
            plan = history.plan_fold(history.active(await history.read(tx, sid), in_force), in_force, keep_last)
        if plan is None:
            raise ProcessionError(f"nothing to compress in session {sid}: all but the last {keep_last} context"
                                  " items are pinned or system messages, or there are none")
        return plan

    @syscall(Call.EXPAND)
    async def expand(self, act: Act, sid: int) -> Expanded:
        """Undo the newest compress: its archived items come back exactly as they were (all the
        stubs of a ``--mask-tools``: the folds one call made share its time)."""
        in_force = await history.folds(act.tx, sid)
        if not in_force:
            raise ProcessionError(f"nothing to expand in session {sid}: it has no compressed range")
        group = [f for f in in_force if f.created == in_force[-1].created]
        for fold in group:
            await rows.expand_fold(act.tx, fold.id)
        whole = _together(group)
        tokens = act.row["context_tokens"] - whole.summary_tokens + whole.archived_tokens
        await rows.update_session(act.tx, sid, context_tokens=tokens,
                                  context_count=act.row["context_count"] - len(group) + whole.archived_count)
        return Expanded(sid, whole, scaled(tokens, act.row["token_scale"]), len(group), len(in_force) - len(group))


def _compressed(act: Act, sid: int, fold: Fold, row: Row, masked: int = 0) -> Compressed:
    context = scaled(row["context_tokens"], row["token_scale"])
    if context > row["window"]:
        act.note(f"the context ({context} tokens) is still over the window ({row['window']});"
                 " runs will refuse it until it fits: keep fewer items, or migrate to a larger window",
                 Call.MIGRATE, sid)
    if row["agent_ref"]:
        act.note(f"this folds Procession's copy of the history; the agent's own context"
                 f"{' (' + str(row['agent_context']) + ' tokens)' if row['agent_context'] else ''} is in its"
                 " session, unchanged: its CLI compacts that itself")
    return Compressed(sid, fold, context, row["window"], masked)


def _together(folds: Sequence[Fold]) -> Fold:
    """Folds made by one call, as one (their counts summed, the range they span)."""
    if len(folds) == 1:
        return folds[0]
    return Fold(folds[-1].id, min(f.lo for f in folds), max(f.hi for f in folds), "",
                sum(f.summary_tokens for f in folds), sum(f.archived_count for f in folds),
                sum(f.archived_tokens for f in folds), folds[-1].created)


def mask_stub(item: ContextItem) -> str:
    """The one line an older tool output is folded behind: what was called, how much it said."""
    tool = (item.meta or {}).get("tool")
    tool = tool if isinstance(tool, dict) else {}  # a snapshot's meta may say anything
    head = item.content.split("\n", 1)[0]
    size = tool.get("output_size", len(item.content.encode("utf-8", "replace")))
    failed = " (it failed)" if tool.get("is_error") else ""
    return f"[tool call {head[:200]} — its output of {size} bytes masked{failed}; expand restores it]"


async def mask_plan(tx: Tx, sid: int, keep_last: int) -> list[tuple[ContextItem, str, int]]:
    """The tool outputs older than the last ``keep_last`` items that a stub would shorten:
    each with its stub and the stub's tokens."""
    count = tx.store.count_tokens
    items = history.active(await history.read(tx, sid), await history.folds(tx, sid))
    out = []
    for item in items[: max(len(items) - keep_last, 0)]:
        if item.role != "tool" or item.fold is not None or item.protected:
            continue
        stub = mask_stub(item)
        tokens = count(stub)
        if tokens < item.tokens:
            out.append((item, stub, tokens))
    return out


async def write_masks(tx: Tx, sid: int, plan: Sequence[tuple[ContextItem, str, int]]) -> Fold:
    """Fold each of ``plan``'s outputs behind its stub; the folds as one (they share their time)."""
    folds = [await write_fold(tx, await rows.session(tx, sid), history.FoldPlan(item.seq, item.seq, (item,)),
                              stub, tokens) for item, stub, tokens in plan]
    return _together(folds)


async def _mask(act: Act, sid: int, keep_last: int) -> Compressed:
    plan = await mask_plan(act.tx, sid, keep_last)
    if not plan:
        raise ProcessionError(f"nothing to mask in session {sid}: no tool output older than the last {keep_last}"
                              " context items is longer than its stub")
    return _compressed(act, sid, await write_masks(act.tx, sid, plan), await act.reload(), len(plan))


async def _author(tx: Tx, sid: int, sender: int | None) -> str:
    if sender is None:
        return "user"
    if sender == sid:
        raise InvalidArgument("a session cannot send to itself")
    await rows.session(tx, sender)
    return f"session:{sender}"


async def deliver(tx: Tx, row: Row, messages: Iterable[tuple[Any, ...]], author: str,
                  total: int = 1, progress: Progress | None = None) -> int:
    """Append messages into a session's inbox and fire its inbox triggers; returns the last seq.

    The cause an inbox trigger hands to the run carries the messages themselves (the newest
    ``CAUSE_MESSAGES``, each text cut at ``CAUSE_TEXT`` characters), so a step knows what
    arrived without reading the whole context.
    """
    kept: deque[tuple[str, str]] = deque(maxlen=CAUSE_MESSAGES)

    def remember(items: Iterable[tuple[Any, ...]]) -> Iterable[tuple[Any, ...]]:
        for item in items:
            kept.append((item[0], item[1]))
            yield item

    start = int(row["length"])
    n = await rows.append(tx, row, remember(messages), tx.store.count_tokens, progress, total)
    inbox = await rows.triggers(tx, row["id"], "inbox") if row["inbox"] else ()
    if inbox:
        first = start + n - len(kept) + 1
        cause = {"from": author, "count": n, "messages": [
            {"seq": first + i, "author": author, "role": role, "text": text[:CAUSE_TEXT],
             **({"cut": len(text)} if len(text) > CAUSE_TEXT else {})}
            for i, (role, text) in enumerate(kept)]}
        for trig in inbox:
            await waking.wake(tx, await rows.session(tx, row["id"]), trig, cause)
    return start + n


async def plan_fold(tx: Tx, row: Row, keep_last: int, budget: int | None = None,
                    given: str | None = None) -> FoldPlan | None:
    """What a compress keeping the last ``keep_last`` items would archive, and its summary
    (``given``, else the extractive one); None when it would hide nothing or save nothing."""
    count = tx.store.count_tokens
    in_force = await history.folds(tx, row["id"])
    items = history.active(await history.read(tx, row["id"]), in_force)
    plan = history.plan_fold(items, in_force, keep_last)
    if plan is None:
        return None
    archived_tokens = sum(i.tokens for i in plan.archived)
    budget = min(budget or 512, max(32, archived_tokens // 4))
    summary = given if given is not None else summarise([(i.role, i.content) for i in plan.archived], budget, count)
    summary_tokens = count(summary)
    if summary_tokens >= archived_tokens and given is None:  # a summary the user gives is theirs to judge
        return None
    return plan, summary, summary_tokens


async def write_fold(tx: Tx, row: Row, plan: history.FoldPlan, summary: str, summary_tokens: int) -> Fold:
    """Hide ``plan``'s items behind ``summary``; the session's totals move by the difference."""
    return await write_counted_fold(tx, row, plan.lo, plan.hi, summary, summary_tokens, len(plan.archived),
                                    sum(i.tokens for i in plan.archived))


async def write_counted_fold(tx: Tx, row: Row, lo: int, hi: int, summary: str, summary_tokens: int,
                             archived_count: int, archived_tokens: int, created: float | None = None) -> Fold:
    """``write_fold`` of a range whose hidden items were counted without reading them (a load's,
    at the time the snapshot gives it: the folds one compress made share one)."""
    created = tx.now if created is None else float(created)
    fid = await rows.insert_fold(tx, row["id"], lo, hi, summary, summary_tokens, archived_count, archived_tokens,
                                 created)
    await rows.update_session(
        tx, row["id"],
        context_tokens=row["context_tokens"] + summary_tokens - archived_tokens,
        context_count=row["context_count"] + 1 - archived_count,
    )
    return Fold(fid, lo, hi, summary, summary_tokens, archived_count, archived_tokens, created)

