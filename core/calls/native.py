"""An agent session's own session in its CLI, as the calls see it: the reference a session
keeps (``agent_ref``), the environment the CLI sees from here, the transcript a reference
names, and a new native session carrying a history over (``migrate`` between agent CLIs)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ..model import agent_homes, environ, runner_spec, transcripts
from ..model.transcripts import Found, Said
from ..store import Tx, rows
from . import history


#: In an agent reference: the run whose prompt its CLI writes into the transcript after the
#: position (set when the run announces the session, before the CLI writes its prompt; gone
#: once what the run stored moves the position past it). That prompt stands for messages the
#: history holds already: a sync leaves it out, and what the run stored after it (``adopt``).
PROMPTED: Final = "prompted"


def agent_ref(row: Any) -> dict[str, Any] | None:
    return json.loads(row["agent_ref"]) if row["agent_ref"] else None


def cli_kind(row: Any) -> str:
    """The agent CLI of the session ``row``: its agent session's, else its runner's."""
    ref = agent_ref(row)
    return str(ref["cli"]) if ref else runner_spec.parse(row["runner"]).cli


def user_environment(row: Any, *, cli: str | None = None, passed: bool = False) -> dict[str, str]:
    """The environment agent CLI ``cli`` (default: ``cli_kind``) is given from here, before
    its state folder is the session's own: what its runner takes of this process's, the
    session's stored settings over it (a setting may name the user's own folder of that CLI),
    and (``passed``: to run the CLI here) the values of the names it passes that this process has."""
    kind = cli or cli_kind(row)
    settings = json.loads(row["env"]) if row["env"] else {}
    names = [n for n in (json.loads(row["pass_env"]) if row["pass_env"] else []) if n in os.environ] if passed else []
    return environ.session_environment(kind, settings, names, os.environ)


def cli_environment(row: Any, workspace: Path | str, *, cli: str | None = None,
                    passed: bool = False) -> dict[str, str]:
    """``user_environment`` as a run has it: its state folder the session's own in ``workspace``
    (``agent_homes``), where its runs keep its transcripts."""
    kind = cli or cli_kind(row)
    return agent_homes.home(workspace, row, kind, user_environment(row, cli=kind, passed=passed))


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
    if spec.cli not in transcripts.CLIS:  # a CLI whose sessions Procession cannot read or write
        return None
    fmt = transcripts.format_of(spec.cli)
    env = cli_environment(row, tx.store.path)
    # a call's body runs on the store's own thread (``Store.atomic``): the files are written there
    ref = fmt.write(said, env, await rows.workdir(tx, row["id"]), spec.target)
    if ref is None:
        return None
    read = fmt.read(followed(ref))
    return {**ref, "position": read.position.as_json()}
