"""An agent session's own session in its CLI, as the calls see it: the reference a session
keeps (``agent_ref``), the environment the CLI sees from here, the transcript a reference
names, and a new native session carrying a history over (``migrate`` between agent CLIs)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ..model import runner_spec, transcripts
from ..model.transcripts import Found, Said
from ..store import rows
from ..store.sqlite import Tx
from . import history


def agent_ref(row: Any) -> dict[str, Any] | None:
    return json.loads(row["agent_ref"]) if row["agent_ref"] else None


def cli_environment(row: Any) -> dict[str, str]:
    """The environment a session's agent CLI sees from here: this process's, with the
    session's stored settings over it (a setting may move the CLI's home)."""
    return {**os.environ, **(json.loads(row["env"]) if row["env"] else {})}


def followed(ref: Mapping[str, Any]) -> Found:
    """The transcript an agent reference names, as a format reads it."""
    return Found(ref["cli"], ref["id"], ref.get("transcript") or "", ref.get("cwd") or "", 0.0)


def located(ref: Mapping[str, Any], env: Mapping[str, str]) -> Found:
    """``followed``, looked up where the CLI keeps its sessions (under ``env``'s home) when the
    reference names no file yet (a Codex thread before its first run ended). Reads the disk."""
    found = followed(ref)
    return found if found.path else transcripts.format_of(ref["cli"]).find(env, ref["id"])


async def carry_over(tx: Tx, row: Any, spec: runner_spec.RunnerSpec) -> dict[str, Any] | None:
    """``migrate`` to another agent CLI: a native session of that CLI holding the session's
    active context (a fold's summary as a user message saying so), its reference read to its
    end; None when that CLI's format cannot be written (the first run then gives the history
    as its prompt). Written inside the call's transaction, as its last step: a call refused
    later leaves only a session of the CLI's nobody refers to."""
    said = [Said("user", f"(A summary of the earlier conversation)\n{item.content}") if item.fold is not None
            else Said(item.role, item.content, item.meta) for item in await history.context(tx, row["id"])
            if item.role in ("user", "assistant", "tool") or item.fold is not None]
    fmt = transcripts.format_of(spec.kind)
    env = cli_environment(row)
    # a call's body runs on the store's own thread (``Store.atomic``): the files are written there
    ref = fmt.write(said, env, await rows.workdir(tx, row["id"]), spec.target)
    if ref is None:
        return None
    read = fmt.read(followed(ref))
    return {**ref, "position": read.position.as_json()}
