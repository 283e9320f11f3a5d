"""Notifications by reason, not by turn: a session that needs you (it waits for an answer), one
whose run failed (or that the engine suspended for failing), one whose run finished, one past
80% of a budget or suspended by it.

The engine reads what happened from the journal (the calls ``ask``, ``finish``, and the
engine's ``suspend`` and ``limit``, since it last looked), so a notification is sent once per
event, whichever process made the call (an agent's asking server, a CLI, the engine itself), and none is sent for what happened
before the engine started. Each goes to the desktop, where a desktop session exists (a D-Bus
session bus: ``desktop-notifier``, the freedesktop notification service), and to the user's
command, as ``[notify]`` in the config file (``~/.config/procession/config.toml``) says::

    [notify]
    command = ["my-hook", "--from", "procession"]   # or one line of shell: "my-hook >> ~/asked.log"
    reasons = ["waiting", "failed", "finished", "budget"]
    desktop = true                                  # the default where a desktop session exists
    detail = "program"                              # what of a tool's input the text holds
    push = ["ntfys://ntfy.sh/my-secret-topic", "tgram://BOT_TOKEN/CHAT_ID"]   # to a phone: Apprise URLs
    web = "https://laptop.tail1234.ts.net:8767"     # where the phone reaches `procession web`
    buttons = true                                  # ntfy pushes answer a request: Allow once, Deny

The command runs with the session, the reason and the text in its environment
(``PROCESSION_SID``, ``PROCESSION_SESSION_NAME``, ``PROCESSION_AGENT``, ``PROCESSION_REASON``,
``PROCESSION_TEXT``), the workspace (``PROCESSION_DB``) and, when a session waits, the request
(``PROCESSION_REQUEST``, which ``procession allow`` and ``deny`` take), and the text as its last
argument (a line of shell: as ``$1``). One line is run by ``/bin/sh``, as a user writing a line
expects (a redirection, ``~``, ``$VAR``): split into words as a shell would but run without one,
a line's redirection was a word of the program's, and ``~`` a folder of that name. A waiting
session's text names the tool and, for a shell command, its program (``Bash: git``), no more of
what the agent asked unless ``detail = "input"`` says so (a command line can hold a secret);
``"tool"``: the tool alone.

``push`` sends the same title and text to each service an `Apprise <https://github.com/caronc/apprise>`_
URL names (ntfy, Telegram, Slack, Matrix, e-mail and a hundred more), so a phone hears of a
session that needs you; the text holds what ``detail`` allows, and nothing else of the request
(a push leaves the machine). An URL Apprise does not know is said when the config is read, and
sends nothing. With ``web``, the address at which the phone reaches ``procession web``, a push
ends with the link to what it is about (``…/#request-7``, ``…/#session-12``: no secret, the
page asks the device's own cookie), which an ntfy push opens when tapped. ``buttons`` adds to
an ntfy push of a waiting session **Allow once** and **Deny** buttons: each push's buttons
carry a token of their own that answers that one request once (``devices.answer_token``),
within a day, sent in a header, never in an URL.

None is waited for by the engine's loop: each runs in the background, given up after
``COMMAND_TIMEOUT_S``. A command that cannot start, fails or runs over, a desktop that
cannot show one, and a push a service refused, is said once an engine runs, in its log (``procession run`` prints it) and in
the journal (an engine's ``notify`` row, which the monitor tells as it tells the runs the
engine restarted): a log line alone is read by no one under the monitor. A session set
``--quiet``, or of an agent set so, sends none.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from ..calls.devices import answer_token
from ..model import commands, config, requests
from ..model.calls import Call
from ..model.errors import ProcessionError
from ..model.text import printable
from ..store import Store, Tx, journal, rows
from .reaper import WAITED, starting

log = logging.getLogger("procession.notify")

WAITING, FAILED, FINISHED, BUDGET = "waiting", "failed", "finished", "budget"
REASONS: Final = (WAITING, FAILED, FINISHED, BUDGET)
COMMAND_TIMEOUT_S: Final = 30.0
#: What of a tool's input a waiting session's text holds: the tool alone; and a shell
#: command's program (``Bash: git``); the call in one line (a command line whole).
TOOL, PROGRAM, INPUT = "tool", "program", "input"
DETAILS: Final = (TOOL, PROGRAM, INPUT)
#: What runs a command given as one line (``$0`` is named after us; the text is ``$1``).
SHELL: Final = ("/bin/sh", "-c")
#: The exit statuses by which a shell says it could not run what a line names.
NOT_RUN: Final = (126, 127)
#: A desktop notification's title, by reason.
TITLES: Final = {WAITING: "a session waits for you", FAILED: "a run failed", FINISHED: "a run finished",
                 BUDGET: "a budget"}


@dataclass(slots=True, frozen=True)
class Settings:
    """``[notify]``: the command (none: no command; a line of shell is ``SHELL`` running it),
    whether the desktop shows them, the reasons they are sent for, what of a tool's input a
    waiting session's text holds (``DETAILS``) and the services they are pushed to."""

    command: tuple[str, ...] = ()
    reasons: frozenset[str] = frozenset(REASONS)
    problems: tuple[str, ...] = ()
    desktop: bool = False
    detail: str = PROGRAM
    push: tuple[str, ...] = ()  # Apprise URLs
    web: str = ""  # where the phone reaches the web face: pushes link to it
    buttons: bool = False  # ntfy pushes of a waiting session answer it (through ``web``)

    @property
    def shell(self) -> bool:
        """Whether the command is a line of shell."""
        return self.command[:2] == SHELL


@dataclass(slots=True, frozen=True)
class Notice:
    sid: int
    name: str
    agent: str
    reason: str
    text: str
    request: int | None = None  # waiting: the request it waits on


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
        command = [*SHELL, command, "procession"] if command.strip() else []
    wanted, detail, push = given.get("desktop", desktop), given.get("detail", PROGRAM), given.get("push", [])
    web, buttons = given.get("web", ""), given.get("buttons", False)
    if isinstance(push, str):
        push = [push]
    if (not isinstance(command, list) or not all(isinstance(w, str) for w in command)
            or not isinstance(reasons, list) or not set(reasons) <= set(REASONS) or not isinstance(wanted, bool)
            or detail not in DETAILS or not isinstance(push, list) or not all(isinstance(u, str) for u in push)
            or not isinstance(web, str) or web and not _site(web) or not isinstance(buttons, bool)
            or buttons and not web):
        return Settings(problems=(f"config {path or config.path()}: [notify] takes command (a list of words, or one"
                                  f" line of shell), reasons (of {', '.join(REASONS)}), desktop (true or false),"
                                  f" detail (one of {', '.join(DETAILS)}), push (Apprise URLs), web (the web face's"
                                  " address, http(s)://host:port) and buttons (true or false, with web);"
                                  " no notifications",))
    unknown = _unknown_services(push)
    if unknown:
        return Settings(problems=(f"config {path or config.path()}: [notify] push: {unknown} is no service Apprise"
                                  " knows (see its wiki for the URL of each); no notifications",))
    return Settings(tuple(command), frozenset(reasons), desktop=wanted and desktop, detail=detail, push=tuple(push),
                    web=web.rstrip("/"), buttons=buttons)


def _site(url: str) -> bool:
    """Whether ``url`` names a site alone (``https://host:port``), as the web face is served."""
    scheme, _, rest = url.rstrip("/").partition("://")
    return scheme in ("http", "https") and bool(rest) and not any(c in rest for c in "/?#@ ")


def _unknown_services(urls: list[str]) -> str | None:
    """The first of ``urls`` Apprise cannot send to, as it may be said (its scheme alone: the
    rest of an URL holds a token); None when it knows them all."""
    if not urls:
        return None
    import apprise  # only where pushes are configured: it loads a hundred plugins

    for url in urls:
        if not apprise.Apprise().add(url):
            return repr(url.split("://", 1)[0] + "://…")
    return None


@dataclass(slots=True)
class Notifier:
    """Turns journal rows into notices and sends them (``poll``, from the engine's loop)."""

    store: Store
    settings: Settings
    seen: int = 0
    running: set[asyncio.Task[None]] = field(default_factory=set)
    desktop: Any = None  # the desktop's notifier (``desktop_notifier.DesktopNotifier``), made when first used
    said: set[str] = field(default_factory=set)  # the kinds of problem said already (``_say``): each once

    async def start(self) -> None:
        """From now on: what happened before the engine started was the last engine's to say."""
        for problem in self.settings.problems:
            log.warning("%s", problem)
        async with self.store.snapshot() as tx:
            self.seen = await journal.tip(tx)

    async def poll(self) -> list[Notice]:
        """Send what happened since the last look; returns what was sent."""
        if not self.settings.command and not self.settings.desktop and not self.settings.push:
            return []
        async with self.store.snapshot() as tx:
            found = await journal.notable(tx, self.seen)
            asked = await _requests(tx, [r for r in map(_waits_on, found) if r is not None])
        notices = []
        for row in found:
            self.seen = max(self.seen, row["id"])
            notice = _notice(row, asked, self.settings.detail)
            if notice is not None and notice.reason in self.settings.reasons and not row["quiet"]:
                notices.append(notice)
                self._send(notice)
        return notices

    def _send(self, notice: Notice) -> None:
        works = [self._run(notice)] if self.settings.command else []
        if self.settings.desktop:
            works.append(self._show(notice))
        if self.settings.push:
            works.append(self._push(notice))
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
            await self._say("desktop", n, f"the desktop could not show a notification: {type(exc).__name__}: {exc}")

    async def _push(self, n: Notice) -> None:
        """To each service of ``push``, through Apprise (its own HTTP calls, on a thread); with
        the link to the page, and for a request, the buttons that answer it once."""
        token = None
        if self.settings.buttons and n.request is not None and any(u.startswith("ntfy") for u in self.settings.push):
            request = n.request
            token = await self.store.atomic(lambda tx: answer_token(tx, request))
        try:
            sent = await asyncio.wait_for(asyncio.to_thread(_pushed, self.settings, n, token), COMMAND_TIMEOUT_S)
        except TimeoutError:
            sent = False
        if not sent:
            await self._say("push", n, "a push was not taken by every service [notify] push names (Apprise's log"
                                       " says which, and why)")

    async def _run(self, n: Notice) -> None:
        # printable: names and what an agent asked are others' words, with no escape sequence
        env = {**os.environ, "PROCESSION_SID": str(n.sid), "PROCESSION_SESSION_NAME": printable(n.name),
               "PROCESSION_AGENT": printable(n.agent), "PROCESSION_REASON": n.reason,
               "PROCESSION_TEXT": printable(n.text), "PROCESSION_DB": str(self.store.path)}
        if n.request is not None:
            env["PROCESSION_REQUEST"] = str(n.request)
        named = _named(self.settings)
        with tempfile.TemporaryFile() as errors:  # a file, not a pipe: a child it leaves behind holds no read open
            try:
                with starting():  # in a session of its own: no reaper of steps' orphans takes it for one
                    proc = await asyncio.create_subprocess_exec(*self.settings.command, env["PROCESSION_TEXT"],
                                                                env=env, stdin=asyncio.subprocess.DEVNULL,
                                                                stdout=asyncio.subprocess.DEVNULL, stderr=errors,
                                                                start_new_session=True)
                    WAITED.add(proc.pid)
            except (OSError, ValueError) as exc:  # ValueError: a NUL in what an agent asked
                await self._say("start", n, f"the notify command {named} cannot start: {exc}")
                return
            try:
                status = await asyncio.wait_for(proc.wait(), COMMAND_TIMEOUT_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
                await self._say("timeout", n, f"the notify command {named} ran over {COMMAND_TIMEOUT_S:g} s; killed")
                return
            finally:
                WAITED.discard(proc.pid)
            if status in NOT_RUN and self.settings.shell:
                await self._say("start", n, f"the notify command {named} cannot start: {_last_line(errors)}")
            elif status:
                await self._say("exit", n, f"the notify command {named} exited {status}: {_last_line(errors)}")

    async def _say(self, kind: str, n: Notice, problem: str) -> None:
        """Say a problem of one ``kind`` the first time only, in the log and the journal (an
        engine's ``notify`` row, about the session whose notification it was)."""
        if kind in self.said:
            return
        self.said.add(kind)
        said = printable(problem, lines=False)
        log.warning("%s", said)

        async def note(tx: Tx) -> int:
            return await tx.journal("engine", Call.NOTIFY, n.sid, {"reason": n.reason}, {"problem": said})

        try:
            await self.store.atomic(note)
        except ProcessionError as exc:
            log.warning("the notify problem could not be journaled: %s", exc)

    async def close(self) -> None:
        if self.running:
            await asyncio.wait(list(self.running), timeout=COMMAND_TIMEOUT_S + 1)


def _waits_on(row: Any) -> int | None:
    """The request a journal row made a session wait on, if it did (an ``ask`` left unanswered)."""
    outcome = json.loads(row["outcome"] or "null")
    if row["call"] == "ask" and isinstance(outcome, dict) and outcome.get("answer") is None:
        return int(outcome["request"])
    return None


async def _requests(tx: Tx, ids: list[int]) -> dict[int, Any]:
    """The requests ``ids``, by id."""
    if not ids:
        return {}
    return {r["id"]: r for r in await rows.asked(tx, ids)}


def asked_for(request: Any, detail: str) -> str:
    """What a waiting session's text says its agent asks for, holding of the tool's input no
    more than ``detail`` allows: ``Bash: git`` (a simple command's program, whether a rule would
    take it with any arguments or exactly); ``Bash: a command line`` for a line of several, or
    one with shell syntax or an assignment first, whose first word may be anything; ``Write`` (a tool with no program);
    or the call in one line."""
    tool: str = request["tool"]
    subject: str = request["subject"]
    if detail == INPUT:
        return f"{tool}: {requests.summary(tool, json.loads(request['input']))[:200]}"
    if detail == TOOL or not subject:
        return tool
    if not subject.startswith(requests.EXACT):
        return f"{tool}: {subject}"
    found = commands.divide(subject[len(requests.EXACT):])  # a command exactly: its program, if it is one
    one = found[0].words if found and len(found) == 1 else ()
    return f"{tool}: {one[0] if one and '=' not in one[0] else 'a command line'}"


def _notice(row: Any, asked: dict[int, Any], detail: str) -> Notice | None:
    """The notice a journal row stands for, if any (``asked``: the requests it may name)."""
    args, outcome = json.loads(row["args"] or "{}"), json.loads(row["outcome"] or "null")
    sid, name, agent = row["session_id"], row["name"], row["agent"]
    request = _waits_on(row)
    if request is not None and request in asked:
        return Notice(sid, name, agent, WAITING, f"session {sid} ({name}) waits for you: its agent asks to use"
                                                 f" {asked_for(asked[request], detail)}", request)
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


def _named(settings: Settings) -> str:
    """The command as a problem names it: its program, or its line of shell."""
    return settings.command[len(SHELL)] if settings.shell else settings.command[0]


def _last_line(errors: IO[bytes]) -> str:
    """The last line a command wrote on its standard error (read from its end), which says
    why it failed; or that it said nothing."""
    errors.seek(max(0, errors.seek(0, os.SEEK_END) - 4096))
    lines = errors.read().decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "it said nothing"


def link(web: str, n: Notice) -> str:
    """The page of what ``n`` is about, on the web face at ``web`` (no secret: the page asks
    the device's cookie)."""
    return f"{web}/#request-{n.request}" if n.request is not None else f"{web}/#session-{n.sid}"


def buttons(web: str, n: Notice, token: str) -> str:
    """An ntfy push's buttons (its ``X-Actions``, as JSON): open the page; answer the request
    once, its token in a header of the call they make (an URL is logged and shown; a header is not)."""
    answer = {"action": "http", "url": f"{web}/api/button", "method": "POST",
              "headers": {BUTTON_HEADER: token}, "clear": True}
    return json.dumps([{"action": "view", "label": "Open", "url": link(web, n)},
                       {**answer, "label": "Allow once", "body": "allow"},
                       {**answer, "label": "Deny", "body": "deny"}])


#: The header in which a push's button sends its token to the web face.
BUTTON_HEADER: Final = "X-Procession-Button"


def _pushed(settings: Settings, n: Notice, token: str | None) -> bool:
    """Whether every service of ``settings.push`` took the notice (blocking: Apprise's own HTTP
    calls): with the link to the page when ``web`` is set (ntfy opens it when the push is tapped)
    and, where ``token`` is given, an ntfy push's buttons that answer with it."""
    import apprise
    from apprise.plugins.ntfy import NotifyNtfy

    services = apprise.Apprise()
    body = printable(n.text)
    if settings.web:
        body += f"\n{link(settings.web, n)}"
    for url in settings.push:
        service = apprise.Apprise.instantiate(url)
        if settings.web and isinstance(service, NotifyNtfy):  # its own options, as its URL would give them
            given = NotifyNtfy.parse_url(url) or {}  # type: ignore[no-untyped-call]
            given["click"] = link(settings.web, n)
            if token is not None:
                given["actions"] = buttons(settings.web, n, token)
            service = NotifyNtfy(**given)  # type: ignore[no-untyped-call]
        services.add(service if service is not None else url)
    return bool(services.notify(title=f"Procession: {TITLES[n.reason]}", body=body))


def _desktop_notifier() -> Any:
    from desktop_notifier import DesktopNotifier

    return DesktopNotifier(app_name="Procession")
