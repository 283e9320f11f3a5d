#!/usr/bin/env python3
"""A coordinator that hands out work to narrow sessions of other agents, over Procession's MCP server.

A Procession ``command:`` runner with two roles, by the session's agent:

- ``lead`` (the coordinator): given a task, it connects to its own Procession MCP server
  (the one its ``bind SID mcp procession`` stands for, started as that binding says, scoped
  to this session), spawns a ``researcher`` and a ``critic`` session with its own runner,
  sends each its part of the task, activates them, waits for each one's run to end, merges
  both into itself (their findings join its memory, their messages its history, with
  provenance) and answers with a report built from the merged memory.
- any other agent (a helper): reads its part, writes its findings into working memory
  (``findings.<agent>``), answers, and sends a one-line summary back to the session that
  asked (``asked_by`` in memory).

Deterministic and offline: the "analysis" is plain word work, so the example runs anywhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections import Counter
from typing import Any

STOP = set("a an and are as at be before by for from has have in is it its must never no nobody of on or should "
           "the to twice use uses when with".split())


def emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def helper(doc: dict[str, Any]) -> None:
    part = next((m["content"] for m in reversed(doc["messages"]) if m["role"] == "user"), "")
    if doc["session"]["agent"] == "researcher":
        words = Counter(w for w in re.findall(r"[a-z]+", part.lower()) if w not in STOP and len(w) > 3)
        findings = [w for w, _ in words.most_common(5)]
        summary = "key terms: " + ", ".join(findings)
    else:
        findings = [s.strip() for s in re.split(r"(?<=[.;])\s+", part) if re.search(r"\b(must|never|always)\b", s)]
        summary = f"{len(findings)} hard constraints"
    emit(type="memory", set={f"findings.{doc['session']['agent']}": findings})
    emit(type="message", role="assistant", content=summary)
    asked_by = doc["memory"].get("asked_by")
    if isinstance(asked_by, int):
        emit(type="send", to=asked_by, text=f"{doc['session']['agent']}: {summary}")


async def lead(doc: dict[str, Any]) -> None:
    from mcp import Client, StdioServerParameters
    from mcp.types import TextContent

    from procession.model import mcp_binding

    me, db = int(os.environ["PROCESSION_SESSION"]), os.environ["PROCESSION_DB"]
    bound = next((r for r in doc["resources"] if mcp_binding.is_procession(r["kind"], r["uri"])), None)
    if bound is None:
        emit(type="message", role="assistant", content=f"bind me first: procession bind {me} mcp procession")
        return
    task = next((m["content"] for m in reversed(doc["messages"]) if m["role"] == "user"), "")
    config = mcp_binding.client_config(db, me, uri=bound["uri"], mode=bound["mode"])

    async with Client(StdioServerParameters(command=config["command"], args=config["args"])) as server:
        async def call(tool: str, **args: Any) -> Any:
            result = await server.call_tool(tool, args)
            if result.is_error:  # the refusal's line(s), on stderr: the run fails, saying why
                raise SystemExit(f"{tool}: " + " ".join(c.text for c in result.content if isinstance(c, TextContent)))
            return result.structured_content

        runner = (await call("show", sid=me, last=1))["runner"]
        helpers = {}
        for agent, part in (("researcher", task), ("critic", task)):
            sid = (await call("spawn", name=f"{agent} for {me}", agent=agent, runner=runner,
                              goal=f"the {agent}'s part of session {me}'s task"))["sid"]
            await call("memory_set", sid=sid, key="asked_by", value=me)
            await call("send", sid=sid, text=part)
            await call("activate", sids=[sid])
            helpers[agent] = sid
        for agent, sid in helpers.items():
            woke = await call("wait", sid=sid, timeout=60)
            if woke["woke"] != "run" or woke["run"]["outcome"] != "ok":
                raise SystemExit(f"{agent} (session {sid}) did not finish: {woke['woke']}")
            await call("merge", source=sid, target=me)
        memory = (await call("show", sid=me, last=1))["memory"]
    terms = ", ".join(memory.get("findings.researcher", []))
    rules = memory.get("findings.critic", [])
    report = [f"report on: {task.splitlines()[0] if task else '(no task)'}", f"key terms: {terms}",
              f"hard constraints ({len(rules)}):", *(f"- {r}" for r in rules)]
    emit(type="message", role="assistant", content="\n".join(report))


def main() -> None:
    doc = json.load(sys.stdin)
    if doc["session"]["agent"] == "lead":
        asyncio.run(lead(doc))
    else:
        helper(doc)


if __name__ == "__main__":
    main()
