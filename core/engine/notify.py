"""Notifications by reason, not by turn: a session that needs you (it waits for an answer), one
whose run failed (or that the engine suspended for failing), one whose run finished, one past
80% of a budget or suspended by it.

The engine reads what happened from the journal (the calls ``ask``, ``finish``, and the
engine's ``suspend`` and ``limit``, since it last looked), so a notification is sent once per event, whichever process made the
call (an agent's asking server, a CLI, the engine itself), and none is sent for what happened
before the engine started. Each goes to the desktop, where a desktop session exists (a D-Bus
session bus: ``desktop-notifier``, the freedesktop notification service), and to the user's
command, as ``[notify]`` in the config file (``~/.config/procession/config.toml``) says::

    [notify]
    command = ["my-hook", "--from", "procession"]   # or one string, split as a shell would
    reasons = ["waiting", "failed", "finished", "budget"]
    desktop = true                                  # the default where a desktop session exists

The command runs with the session, the reason and the text in its environment
(``PROCESSION_SID``, ``PROCESSION_SESSION_NAME``, ``PROCESSION_AGENT``, ``PROCESSION_REASON``,
``PROCESSION_TEXT``) and the text as its last argument. Neither is waited for by the engine's
loop: each runs in the background, given up after ``COMMAND_TIMEOUT_S``. A session set
``--quiet``, or of an agent set so, sends none.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..model import config, requests
from ..model.text import printable
from ..store import Store

log = logging.getLogger("procession.notify")

WAITING, FAILED, FINISHED, BUDGET = "waiting", "failed", "finished", "budget"
REASONS: Final = (WAITING, FAILED, FINISHED, BUDGET)
COMMAND_TIMEOUT_S: Final = 30.0
#: A desktop notification's title, by reason.
TITLES: Final = {WAITING: "a session waits for you", FAILED: "a run failed", FINISHED: "a run finished",
                 BUDGET: "a budget"}


@dataclass(slots=True, frozen=True)
class Settings:
    """``[notify]``: the command (none: no command), whether the desktop shows them, and the
    reasons they are sent for."""

    command: tuple[str, ...] = ()
    reasons: frozenset[str] = frozenset(REASONS)
    problems: tuple[str, ...] = ()
    desktop: bool = False


@dataclass(slots=True, frozen=True)
class Notice:
    sid: int
    name: str
    agent: str
    reason: str
    text: str


def load(path: Path | None = None) -> Settings:
    """``[notify]`` of the config file; a mistake in it is said (``problems``) and sends nothing."""
    desktop = bool(os.environ.get("DBUS_SESSION_BUS_ADDRESS"))  # a desktop session is there
    table, problem = config.table("notify", path)
    if problem:
        return Settings(problems=(f"{problem}; no notifications",))
    if table is None:
        return Settings(desktop=desktop)
    given = table if isinstance(table, dict) else {"command": None}
    command, reasons = given.get("command", []), given.get("reasons", list(REASONS))
    if isinstance(command, str):
        command = shlex.split(command)
    wanted = given.get("desktop", desktop)
    if (not isinstance(command, list) or not all(isinstance(w, str) for w in command)
            or not isinstance(reasons, list) or not set(reasons) <= set(REASONS) or not isinstance(wanted, bool)):
        return Settings(problems=(f"config {path or config.path()}: [notify] takes command (a list of words, or one"
                                  f" line), reasons (of {', '.join(REASONS)}) and desktop (true or false);"
                                  " no notifications",))
    return Settings(tuple(command), frozenset(reasons), desktop=wanted and desktop)


@dataclass(slots=True)
class Notifier:
    """Turns journal rows into notices and sends them (``poll``, from the engine's loop)."""

    store: Store
    settings: Settings
    seen: int = 0
    running: set[asyncio.Task[None]] = field(default_factory=set)
    desktop: Any = None  # the desktop's notifier (``desktop_notifier.DesktopNotifier``), made when first used
    desktop_failed: bool = False  # said once: the desktop could not show one

    async def start(self) -> None:
        """From now on: what happened before the engine started was the last engine's to say."""
        for problem in self.settings.problems:
            log.warning("%s", problem)
        async with self.store.snapshot() as tx:
            self.seen = int(await tx.value("SELECT COALESCE(MAX(id), 0) FROM journal"))

    async def poll(self) -> list[Notice]:
        """Send what happened since the last look; returns what was sent."""
        if not self.settings.command and not self.settings.desktop:
            return []
        async with self.store.snapshot() as tx:
            found = await tx.all(
                "SELECT j.id, j.call, j.actor, j.session_id, j.args, j.outcome, s.name, a.name AS agent,"
                " s.quiet OR a.quiet AS quiet"
                " FROM journal j JOIN sessions s ON s.id = j.session_id JOIN agents a ON a.id = s.agent_id"
                " WHERE j.id > ? AND j.call IN ('ask', 'finish', 'suspend', 'limit') ORDER BY j.id", (self.seen,))
        notices = []
        for row in found:
            self.seen = max(self.seen, row["id"])
            notice = _notice(row)
            if notice is not None and notice.reason in self.settings.reasons and not row["quiet"]:
                notices.append(notice)
                self._send(notice)
        return notices

    def _send(self, notice: Notice) -> None:
        works = [self._run(notice)] if self.settings.command else []
        if self.settings.desktop:
            works.append(self._show(notice))
        for work in works:
            task = asyncio.ensure_future(work)
            self.running.add(task)
            task.add_done_callback(self.running.discard)

    async def _show(self, n: Notice) -> None:
        """On the desktop: a title by reason, the text as its body."""
        try:
            if self.desktop is None:  # the library and its D-Bus backend, imported on a thread
                self.desktop = await asyncio.to_thread(_desktop_notifier)
            await asyncio.wait_for(self.desktop.send(title=f"Procession: {TITLES[n.reason]}",
                                                     message=printable(n.text)), COMMAND_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a desktop that cannot show it: said once, nothing else stops
            if not self.desktop_failed:
                self.desktop_failed = True
                log.warning("the desktop could not show a notification: %s: %s", type(exc).__name__, exc)

    async def _run(self, n: Notice) -> None:
        # printable: names and what an agent asked are others' words, with no escape sequence
        env = {**os.environ, "PROCESSION_SID": str(n.sid), "PROCESSION_SESSION_NAME": printable(n.name),
               "PROCESSION_AGENT": printable(n.agent), "PROCESSION_REASON": n.reason,
               "PROCESSION_TEXT": printable(n.text)}
        try:
            proc = await asyncio.create_subprocess_exec(*self.settings.command, env["PROCESSION_TEXT"], env=env,
                                                        stdin=asyncio.subprocess.DEVNULL,
                                                        stdout=asyncio.subprocess.DEVNULL,
                                                        stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
        except (OSError, ValueError) as exc:  # ValueError: a NUL in what an agent asked
            log.warning("the notify command %s cannot start: %s", self.settings.command[0], exc)
            return
        try:
            await asyncio.wait_for(proc.wait(), COMMAND_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            log.warning("the notify command ran over %g s; killed", COMMAND_TIMEOUT_S)

    async def close(self) -> None:
        if self.running:
            await asyncio.wait(list(self.running), timeout=COMMAND_TIMEOUT_S + 1)


def _notice(row: Any) -> Notice | None:
    """The notice a journal row stands for, if any."""
    args, outcome = json.loads(row["args"] or "{}"), json.loads(row["outcome"] or "null")
    sid, name, agent = row["session_id"], row["name"], row["agent"]
    if row["call"] == "ask" and isinstance(outcome, dict) and outcome.get("answer") is None:
        tool = str(args.get("tool", ""))
        return Notice(sid, name, agent, WAITING, f"session {sid} ({name}) waits for you: its agent asks to use {tool}"
                                                 f" ({requests.summary(tool, args.get('input'))[:200]})")
    if row["call"] == "finish":
        ran = args.get("outcome")
        if ran in ("failed", "timeout"):
            held = isinstance(outcome, dict) and outcome.get("state") == "suspended"
            return Notice(sid, name, agent, FAILED, f"session {sid} ({name}): its run {ran}"
                                                    + ("; it is suspended: its runs keep failing" if held else ""))
        if ran == "ok":
            return Notice(sid, name, agent, FINISHED, f"session {sid} ({name}) finished a run")
    if row["call"] == "suspend" and row["actor"] == "engine" and "budget" in str(args.get("why", "")):
        return Notice(sid, name, agent, BUDGET, f"session {sid} ({name}) is suspended: over {args['why']}")
    if row["call"] == "limit" and row["actor"] == "engine" and isinstance(outcome, dict) and outcome.get("warned"):
        return Notice(sid, name, agent, BUDGET, f"session {sid} ({name}) has spent {'; '.join(outcome['warned'])}")
    return None


def _desktop_notifier() -> Any:
    from desktop_notifier import DesktopNotifier

    return DesktopNotifier(app_name="Procession")
