"""Compress with a model: the session's own model (or another) writes the summary a fold keeps.

The model is asked outside any transaction (a request can take a minute); the fold is then
written by ``compress`` for the range the model read, refused if the context moved on
meanwhile. Like every fold it is reversible: ``expand`` gives back the exact original, and a
poor summary costs nothing but the tokens it took.
"""

from __future__ import annotations

import os
from typing import Final

from ..calls import Workspace
from ..calls.context import DEFAULT_KEEP_LAST
from ..calls.history import FoldPlan
from ..calls.lifecycle import KEEPS, MODEL
from ..model import runner_spec
from ..model.errors import ContextTooLarge, InvalidArgument, ProcessionError
from ..model.outcomes import Compressed, Migrated
from ..model.text import plural
from .runners import http

PROMPT: Final = (
    "You summarise an earlier part of a conversation so that the one carrying it on loses nothing it"
    " needs. Keep every decision made and why, every open task or question, every file path, name,"
    " number, amount and date it relies on, and what each tool call found (not its raw output). Drop"
    " greetings, repetition and output that no longer matters. Write short plain lines, at most about"
    " {budget} words. Answer with the summary only."
)
#: How much of each message, and of the whole range, the model is given to read.
MESSAGE_CHARS: Final = 4_000
TRANSCRIPT_CHARS: Final = 200_000


async def compress_by_model(ws: Workspace, sid: int, keep_last: int = DEFAULT_KEEP_LAST, *,
                            spec: str | None = None) -> Compressed:
    """Fold all but the last ``keep_last`` items behind a summary made by the session's model
    (an ``openai:`` runner), or by ``spec``'s; refused in one line when there is no such model."""
    parsed = _model(sid, spec or (await ws.info(sid)).runner)
    plan = await ws.fold_plan(sid, keep_last)
    return await ws.compress(sid, keep_last, summary=await _summary(parsed, plan), expect=(plan.lo, plan.hi))


async def migrate_by_model(ws: Workspace, sid: int, runner: str, *, window: int | None = None,
                           tokenizer: str | None = None, spec: str | None = None) -> Migrated:
    """``migrate`` whose compress, when the context does not fit, is a summary by a model:
    ``spec``'s, else the session's (an ``openai:`` runner), else the new runner's. Each try
    keeps fewer recent items, as migrate's other methods do, and asks again; the last
    refusal stands, with nothing changed."""
    try:
        return await ws.migrate(sid, runner, window=window, tokenizer=tokenizer)
    except ContextTooLarge as exc:
        refused = exc
    current = (await ws.info(sid)).runner
    parsed = _model(sid, spec or (current if runner_spec.parse(current).kind == "openai" else runner))
    for keep in KEEPS:
        try:
            plan = await ws.fold_plan(sid, keep)
        except ProcessionError:
            continue
        try:
            return await ws.migrate(sid, runner, window=window, tokenizer=tokenizer, compress=True, method=MODEL,
                                    keep_last=keep, summary=await _summary(parsed, plan), expect=(plan.lo, plan.hi))
        except ContextTooLarge as exc:
            refused = exc
    raise refused


def _model(sid: int, runner: str) -> runner_spec.RunnerSpec:
    parsed = runner_spec.parse(runner)
    if parsed.kind != "openai":
        raise InvalidArgument(f"session {sid} runs on {runner}, which is not a model Procession can ask:"
                              " name one with --with openai:MODEL[@URL][#KEY_VAR]")
    return parsed


async def _summary(parsed: runner_spec.RunnerSpec, plan: FoldPlan) -> str:
    """The model's summary of what ``plan`` archives, marked as its."""
    parts, used = [], 0
    for item in plan.archived:
        text = item.content if len(item.content) <= MESSAGE_CHARS else item.content[:MESSAGE_CHARS] + " […]"
        used += len(text)
        if used > TRANSCRIPT_CHARS:
            parts.append("[… the rest of the range is not shown]")
            break
        parts.append(f"{item.role}: {text}")
    archived_tokens = sum(i.tokens for i in plan.archived)
    budget = max(40, min(400, archived_tokens // 6))
    text, _ = await http.complete(parsed, [{"role": "system", "content": PROMPT.format(budget=budget)},
                                           {"role": "user", "content": "\n\n".join(parts)}], dict(os.environ))
    return f"[summary of {plural(len(plan.archived), 'earlier message')}, by {parsed.target}]\n{text}"
