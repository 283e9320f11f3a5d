"""Each agent session's own state folder for its CLI: where Claude Code (``CLAUDE_CONFIG_DIR``),
Codex (``CODEX_HOME``) and opencode (its four XDG folders) keep their sessions, login and
settings while Procession runs them.

Why a folder per session: a CLI reads its settings from its state folder at every start, and
they can run programs (Claude Code's hooks, an MCP server in Codex's ``config.toml``, an
opencode plugin). With one folder shared by every session, a run of session A could write a
hook there that session B's next run executes within B's bounds: A would read what only B may
read and write where only B may write. So each session's runs write only their own folder; the
user's own folders are never written by a run, nor read by it (what it needs of them is copied).

- Where: beside the workspace's data, in ``agents/<session uuid>/<cli>`` (an SQLite workspace:
  the folder its file is in; a PostgreSQL one, shared by hosts: this host's user data folder).
  The uuid names a session on every host and in every snapshot: a move places the agent's
  session into the folder of the same name there. A session cancelled keeps it (nothing is
  lost; its transcript is there). A session that migrates to another CLI has one per CLI.
- Seeded, at the session's first run of that CLI, by copying (never linking: a link would let an
  unconfined run write the user's file) the user's login and settings from the folders the
  session's own environment names: Claude Code's ``.credentials.json``, ``settings.json``,
  ``CLAUDE.md``, agents, commands and skills, and ``.claude.json`` with only the projects that
  hold the session's folder; Codex's ``auth.json``, ``config.toml``, ``AGENTS.md`` and prompts;
  opencode's ``auth.json`` and its whole configuration folder. Later runs keep the session's
  copy: a later change of the user's settings does not reach a session that already ran.
- What the CLI changed there is shown (``changed``: ``show`` names the folder and each setting
  whose content differs from the seed), never merged back: the seed's record (``<cli>.seed.json``)
  is beside the folder, where the run cannot rewrite it.
- An agent session that lives elsewhere (a fork's parent's, in the parent's folder; one adopted
  from the user's own folder; one from before this folder existed) is copied in before the run
  that resumes or forks it (``brought``), under its own id: the CLI finds it where it looks, and
  the original is not touched.

Everything Procession points a CLI at stays outside the folder: the model's address and keys in
the environment (or in Codex's ``config.toml``, copied), the MCP configuration and the
permission prompt tool in the run's own temporary files and flags.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from . import transcripts
from .agents import CLIS
from .records import AgentHome
from .transcripts import within
from .transcripts.claude import home as claude_home
from .transcripts.codex import home as codex_home

#: What the CLI's state folder is taken from, per agent CLI: each variable and the subfolder of
#: the session's folder it names ("": the folder itself). From each CLI's descriptor (``agents``).
VARIABLES: Final[Mapping[str, Mapping[str, str]]] = {kind: cli.homes for kind, cli in CLIS.items() if cli.homes}
#: Variables that would point the CLI's state at a file outside the session's folder: dropped.
OUTSIDE: Final = ("OPENCODE_DB",)
#: The settings ``changed`` compares with the seed, per CLI (paths in the session's folder).
SETTINGS: Final[Mapping[str, tuple[str, ...]]] = {kind: cli.settings for kind, cli in CLIS.items()}
#: The folder of every session's folders, under the workspace's own.
AGENTS: Final = "agents"


def root(workspace: Path | str) -> str:
    """Where the sessions' folders are for ``workspace`` (a file, or a ``postgresql://`` address)."""
    if isinstance(workspace, str) and "://" in workspace:
        from platformdirs import user_data_dir

        return os.path.join(user_data_dir("procession"), AGENTS)
    return os.path.join(os.path.dirname(os.path.abspath(workspace)), AGENTS)


def folder(workspace: Path | str, uuid: str, cli: str) -> str:
    """The state folder of the session ``uuid`` for agent CLI ``cli``."""
    if not uuid or "/" in uuid or uuid.startswith("."):
        raise ValueError(f"not a session uuid: {uuid!r}")
    return os.path.join(root(workspace), uuid, cli)


def environment(cli: str, env: Mapping[str, str], home: str) -> dict[str, str]:
    """``env`` with the CLI's state folder at ``home`` (unchanged for a runner that is no agent CLI)."""
    if cli not in VARIABLES:
        return dict(env)
    kept = {k: v for k, v in env.items() if k not in OUTSIDE}
    return {**kept, **{name: os.path.join(home, sub) if sub else home for name, sub in VARIABLES[cli].items()}}


def home(workspace: Path | str, row: Any, cli: str, env: Mapping[str, str]) -> dict[str, str]:
    """The environment agent CLI ``cli`` of the session ``row`` (its ``uuid``) sees from here:
    ``env`` (the session's own, ``environ.session_environment``) with the session's folder."""
    return environment(cli, env, folder(workspace, str(row["uuid"]), cli))


# ------------------------------------------------------------------------------ seeding


def _sources(cli: str, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """What seeds the session's folder of ``cli``: (the user's file or folder, where it goes)."""
    user_home = env.get("HOME") or os.path.expanduser("~")
    if cli == "claude":
        mine = claude_home(env)
        names = (".credentials.json", "settings.json", "CLAUDE.md", "agents", "commands", "skills")
        config = os.path.join(mine if env.get("CLAUDE_CONFIG_DIR") else user_home, ".claude.json")
        return [(os.path.join(mine, n), n) for n in names] + [(config, ".claude.json")]
    if cli == "codex":
        codex = str(codex_home(env))
        return [(os.path.join(codex, n), n) for n in ("auth.json", "config.toml", "AGENTS.md", "prompts", "rules")]
    if cli != "opencode":  # a generic one: its descriptor's seeds, from the user's folder of it
        variable, under = CLIS[cli].seed_from
        mine = env.get(variable, "") if variable else ""
        base = mine or os.path.join(user_home, under)
        rel = "" if mine or CLIS[cli].homes != {"HOME": ""} else under  # under the session's folder as under a home
        return [(os.path.join(base, n), os.path.join(rel, n)) for n in CLIS[cli].seeds]
    data = env.get("XDG_DATA_HOME") or os.path.join(user_home, ".local", "share")
    config = env.get("XDG_CONFIG_HOME") or os.path.join(user_home, ".config")
    return [(os.path.join(data, "opencode", "auth.json"), "data/opencode/auth.json"),
            (os.path.join(config, "opencode"), "config/opencode")]


def _copy(source: str, target: str, cwd: str) -> None:
    """A copy of the user's file or folder (what links name, never a link); ``.claude.json``
    with only the projects the session's folder ``cwd`` is in (the others are not its business)."""
    if os.path.isdir(source):
        shutil.copytree(source, target, ignore_dangling_symlinks=True)
    elif os.path.basename(target) == ".claude.json":
        config = json.loads(Path(source).read_text("utf-8"))
        if isinstance(config, dict) and isinstance(config.get("projects"), dict):
            config["projects"] = {k: v for k, v in config["projects"].items() if within(cwd, k)}
        with open(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
            json.dump(config, out)
    else:
        shutil.copy(source, target)


def _digest(path: str) -> str | None:
    """What a setting holds (a file's bytes, a folder's files with their names); None: absent."""
    if os.path.isfile(path):
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    if not os.path.isdir(path):
        return None
    summed = hashlib.sha256()
    for top, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(top, name)
            summed.update(f"{os.path.relpath(full, path)}\0{_digest(full)}\0".encode())
    return summed.hexdigest()


def _record(home: str) -> str:
    """The seed's record: beside the folder, out of its runs' reach."""
    return f"{home}.seed.json"


def seed(cli: str, env: Mapping[str, str], home: str, cwd: str) -> bool:
    """Make the session's folder ``home`` for ``cli`` if it is not there yet, seeded from the
    user's folders ``env`` names (what is missing or unreadable there is left out: the CLI asks
    for what it needs). Whole or not at all: made aside, then renamed into place. Whether it
    was made now."""
    if os.path.isdir(home) or cli not in VARIABLES:
        return False
    os.makedirs(os.path.dirname(home), mode=0o700, exist_ok=True)
    making = f"{home}.making-{os.getpid()}-{time.monotonic_ns()}"
    os.mkdir(making, 0o700)
    try:
        copied = []
        for source, rel in _sources(cli, env):
            target = os.path.join(making, rel)
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            try:
                _copy(source, target, cwd)
            except (OSError, ValueError, shutil.Error):
                continue
            copied.append(source)
        for sub in VARIABLES[cli].values():
            os.makedirs(os.path.join(making, sub), mode=0o700, exist_ok=True)
        settings = {rel: _digest(os.path.join(making, rel)) for rel in SETTINGS[cli]}
        with open(_record(home), "w", encoding="utf-8") as out:
            json.dump({"seeded": time.time(), "from": copied, "settings": settings}, out)
        os.rename(making, home)
    except OSError:
        shutil.rmtree(making, ignore_errors=True)
        if not os.path.isdir(home):  # not another process's seeding that won the race
            raise
        return False
    return True


def changed(cli: str, home: str) -> tuple[str, ...]:
    """The settings the session's CLI changed in its folder since it was seeded (added,
    changed or removed), by path in the folder."""
    try:
        seeded = json.loads(Path(_record(home)).read_text("utf-8")).get("settings") or {}
    except (OSError, ValueError, AttributeError):
        seeded = {}
    return tuple(rel for rel in SETTINGS.get(cli, ()) if _digest(os.path.join(home, rel)) != seeded.get(rel))


def accept(cli: str, home: str) -> None:
    """The settings as they are now, taken as the session's own: ``changed`` compares with
    them from now on (a person read them and opens its CLI on them: ``attach --accept``)."""
    record = Path(_record(home))
    try:
        kept = json.loads(record.read_text("utf-8"))
    except (OSError, ValueError):
        kept = {}
    kept = kept if isinstance(kept, dict) else {}
    kept["settings"] = {rel: _digest(os.path.join(home, rel)) for rel in SETTINGS.get(cli, ())}
    aside = record.with_name(record.name + ".new")
    aside.write_text(json.dumps(kept), "utf-8")
    aside.replace(record)


def shown(workspace: Path | str, uuid: str, cli: str) -> AgentHome:
    """The folder of the session ``uuid`` for ``cli``, as ``show`` says it. Reads the disk."""
    home = folder(workspace, uuid, cli)
    made = os.path.isdir(home)
    return AgentHome(cli, home, made, changed(cli, home) if made else ())


# ------------------------------------------------------------------------------ its agent session


def brought(ref: Mapping[str, Any], env: Mapping[str, str], cwd: str) -> dict[str, Any] | None:
    """The agent session ``ref`` resumes or forks, copied into the session's folder (``env``
    names it) when it lives elsewhere (a fork's parent's folder, the user's own), under its own
    id and folder; the reference to it there (None: nothing was copied). The original is not
    touched. ``Differs`` when the folder holds another history under that id."""
    path = ref.get("transcript")
    homes = [env[name] for name in VARIABLES[str(ref["cli"])]]
    if not isinstance(path, str) or not os.path.exists(path) or any(within(path, h) for h in homes):
        return None
    fmt = transcripts.format_of(str(ref["cli"]))
    carried = fmt.carry(ref, env)
    if carried is None:
        return None
    return fmt.place(carried, env, str(ref.get("cwd") or cwd), {})


def seeded(cli: str, env: Mapping[str, str], workspace: Path | str, row: Any, cwd: str) -> dict[str, str]:
    """``home``, the session's folder made first if it is not there (``seed``: from the user's
    folders ``env`` names; ``cwd``: the session's folder). Reads and writes the disk."""
    home = folder(workspace, str(row["uuid"]), cli)
    seed(cli, env, home, cwd)
    return environment(cli, env, home)


def prepared(cli: str, env: Mapping[str, str], workspace: Path | str, row: Any, cwd: str) -> dict[str, str]:
    """The environment of a run of agent CLI ``cli`` for the session ``row`` (its ``uuid`` and
    ``agent_ref``), from the session's own (``env``): ``seeded``, holding the agent session the
    run resumes or forks (``brought``; an opencode session copied in starts ``opencode import``)."""
    own = seeded(cli, env, workspace, row, cwd)
    ref = json.loads(row["agent_ref"]) if row["agent_ref"] else None
    if ref and ref.get("cli") == cli:
        brought(ref, own, cwd)
    return own
