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
from ..model import runner_spec
from ..model.errors import InvalidArgument
from ..model.outcomes import Compressed
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
    runner = spec or (await ws.info(sid)).runner
    parsed = runner_spec.parse(runner)
    if parsed.kind != "openai":
        raise InvalidArgument(f"session {sid} runs on {runner}, which is not a model Procession can ask:"
                              " name one with --with openai:MODEL[@URL][#KEY_VAR]")
    plan = await ws.fold_plan(sid, keep_last)
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
    summary = f"[summary of {plural(len(plan.archived), 'earlier message')}, by {parsed.target}]\n{text}"
    return await ws.compress(sid, keep_last, summary=summary, expect=(plan.lo, plan.hi))
