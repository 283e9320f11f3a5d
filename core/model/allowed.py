"""How each tool call of a run came to run: what decided it, and what the kernel refused it.

A tool call is in a session's history as a ``tool`` message (``toolcalls.tool_message``: its
``meta`` names the run, the tool, its id, input and output). A call the agent asked about is
a request (``requests`` table): answered by the session's permissions (``all``), by a rule,
by an answer carried over from an earlier run, or by a person (whose, from the journal row
of their ``allow`` or ``deny``), or withdrawn. A call with no request ran unasked: its agent
CLI's own permissions let it (Procession's bounds still held it). Matched by run, tool and
input, each request to the first call it fits, in order.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from . import requests
from .records import fields_of

#: How a call came to run (or not).
UNASKED: Final = "unasked"  # its agent CLI did not ask: its own permissions let it
PERMISSIONS: Final = "permissions"  # asked, and the session's permissions (all) said yes
RULE: Final = "rule"  # asked, and a rule of the session's said yes (``by``: which)
PERSON: Final = "person"  # asked, and a person said yes (``by``: who)
CARRIED: Final = "carried"  # asked again after a run ended waiting: the answer given then
REFUSED: Final = "refused"  # asked, and refused (``by``: who; ``why``)
WITHDRAWN: Final = "withdrawn"  # asked, and its asker stopped waiting before an answer
#: What a process says when the kernel refuses it (a confined run's bounds).
DENIED: Final = re.compile(r"[^\n]*(?:Permission denied|Operation not permitted)[^\n]*")
DENIALS_KEPT: Final = 5


@dataclass(slots=True, frozen=True)
class ToolUse:
    """One tool call of a run and how it came to run."""

    run: int | None
    seq: int
    call_id: str
    name: str
    input: Any
    is_error: bool
    created: float
    how: str
    by: str | None = None  # the rule (``rule 3``), the person, the request carried
    why: str | None = None  # a refusal's reason
    request: int | None = None
    asked: float | None = None
    answered: float | None = None
    denied: tuple[str, ...] = ()  # what the kernel refused it, as its output says

    def to_json(self) -> dict[str, Any]:
        return fields_of(self)


def denials(text: str) -> list[str]:
    """The lines of ``text`` saying the kernel refused something (at most ``DENIALS_KEPT``)."""
    out: list[str] = []
    for line in DENIED.findall(text):
        if line.strip()[:300] not in out and len(out) < DENIALS_KEPT:
            out.append(line.strip()[:300])
    return out


def uses(calls: Sequence[tuple[int, dict[str, Any], float]], asked: Sequence[Any],
         who: Mapping[float, str]) -> list[ToolUse]:
    """Each tool call (``(seq, meta, created)`` of a ``tool`` message) with how it came to run,
    from the requests of its run (rows of ``requests``) and who answered at each time
    (``who``: a journal ``allow`` or ``deny`` row's time, its person)."""
    open_requests = [{k: r[k] for k in r.keys()} for r in asked]
    out = []
    for seq, meta, created in calls:
        tool = meta.get("tool") or {}
        run, name, given = meta.get("run"), str(tool.get("name") or "tool"), tool.get("input")
        text = json.dumps(given, ensure_ascii=False, sort_keys=True)
        match = next((r for r in open_requests if r["run_id"] == run and r["tool"] == name and r["input"] == text), None)
        output = tool.get("output")
        use = ToolUse(run, seq, str(tool.get("id") or ""), name, given, bool(tool.get("is_error")), created, UNASKED,
                      denied=tuple(denials(output)) if isinstance(output, str) else ())
        if match is not None:
            open_requests.remove(match)
            how, by = _decided(match, who)
            use = dataclasses.replace(use, how=how, by=by, why=match["why"], request=match["id"], asked=match["asked"],
                                      answered=match["answered"])
        out.append(use)
    return out


def by_run(used: Sequence[ToolUse]) -> dict[int | None, list[ToolUse]]:
    """Tool calls by the run that made them, each run's in order."""
    out: dict[int | None, list[ToolUse]] = {}
    for u in used:
        out.setdefault(u.run, []).append(u)
    return out


def _decided(request: dict[str, Any], who: Mapping[float, str]) -> tuple[str, str | None]:
    by = request["answered_by"] or ""
    if request["answer"] in (None, requests.WITHDRAWN) or by == "its asker left":
        return WITHDRAWN, None
    if request["answer"] != requests.ALLOW:
        return REFUSED, who.get(request["answered"], by)
    if by.startswith("its permissions"):
        return PERMISSIONS, by
    if by.startswith("rule"):
        return RULE, by
    if by.startswith("request "):
        return CARRIED, by
    return PERSON, who.get(request["answered"], by)
