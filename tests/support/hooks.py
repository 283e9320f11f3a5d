"""A ``[notify]`` command as a user writes one in the config file, and what it received."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from procession.engine.notify import REASONS, Settings, load


@dataclass(frozen=True)
class Notified:
    """One line the hook ``hooked`` wrote."""

    request: str
    reason: str
    db: str
    text: str


def configured(tmp_path: Path, command: str | list[str], reasons: tuple[str, ...] = REASONS) -> Settings:
    """``[notify]`` as a user writes it, read from a config file."""
    path = tmp_path / "config.toml"
    given = f"'''{command}'''" if isinstance(command, str) else json.dumps(command)
    path.write_text(f"[notify]\ncommand = {given}\nreasons = {json.dumps(list(reasons))}\ndesktop = false\n")
    settings = load(path)
    assert not settings.problems, settings.problems
    return settings


def hooked(tmp_path: Path, log: Path) -> Settings:
    """Waiting notifications to a command given as one line of shell (a redirection,
    variables, ``$1`` the text), which appends a line to ``log`` for each."""
    return configured(tmp_path, "printf '%s|%s|%s|%s\\n' \"$PROCESSION_REQUEST\" \"$PROCESSION_REASON\""
                                f" \"$PROCESSION_DB\" \"$1\" >> {shlex.quote(str(log))}", ("waiting",))


def notified(log: Path) -> list[Notified]:
    return [Notified(*line.split("|", 3)) for line in log.read_text().splitlines()] if log.exists() else []
