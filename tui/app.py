"""The monitor: an htop for agent sessions.

``ProcessionApp`` is opened on a workspace that is already open (``run_monitor`` opens it
first), so it always has one. It holds what is app-wide: the theme and settings, the data
feed (``Feed``), the engine it runs when no other process does (``EngineHost``; on a shared
workspace only when asked, ``runs_engine``), the keys that work on every screen (help, setup,
quit, the palette), and the poll that notices the store's changes every ``POLL_S`` and redraws
only the sessions whose revision moved. The table and its keys are the ``MainScreen``; the
calls are the registry in ``calls``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, ScreenStackError, SystemCommand
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.css.query import NoMatches
from textual.screen import Screen

from procession.calls import Workspace
from procession.model import hosts
from procession.model.calls import INFO, Call
from procession.model.errors import ProcessionError, WorkspaceError
from procession.present.cells import BY_KEY, COLUMNS, shown
from procession.present import engines, results
from procession.present.words import plural, printable
from procession.store import is_url

from . import config as config_mod
from . import themes as themes_mod
from .attention import Attention
from .calling import Calling
from .calls import FLOWS, ON_AGENT
from .detail import Detail
from .dialogs import ActionMenu, Choice, Confirm, Help, Setup
from .feed import Feed
from .host import EngineHost, runs_engine
from .main import MainScreen
from .meters import Meters

POLL_S = 0.1
#: Allocations between two collections of the youngest generation once the workspace is read
#: (Python's default is 700).
GC_YOUNG = 20_000
#: Keys the help names by name, not by Textual's symbol.
KEY_NAMES = {"space": "Space", "enter": "Enter", "escape": "Esc"}
#: How often the monitor looks for agent CLIs running its sessions outside Procession.
OUTSIDE_S = 3.0


def _help_order(keys: list[str]) -> int:
    """The help lists the F-keys first, by number, as htop's does; the rest keep their order after."""
    return int(keys[0][1:]) if keys and re.fullmatch(r"F[0-9]{1,2}", keys[0]) else 100


class CallCommands(Provider):
    """The command palette: every call of the registry, for the sessions the next call acts on;
    its title is the call's name and whom it acts on, its description the call's summary."""

    def _commands(self) -> list[tuple[str, str, str]]:
        screen = self.screen
        if not isinstance(screen, Calling):
            return []
        targets, agent = screen.targets(), screen.agent_row()
        who = (f"session {targets[0].id} ({printable(targets[0].name)})" if len(targets) == 1
               else f"{len(targets)} sessions")
        return [(name, flow.title if INFO[flow.call].target == "none" else
                 f"{flow.title} agent {printable(agent)}" if agent is not None and name in ON_AGENT else
                 f"{flow.title} {who}", flow.summary) for name, flow in FLOWS.items() if screen.applies(name)]

    async def discover(self) -> Hits:
        """With nothing typed yet, the palette lists the calls that apply."""
        for name, title, text in self._commands():
            yield DiscoveryHit(title, self._runner(name), help=text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, title, text in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), self._runner(name), help=text)

    def _runner(self, name: str) -> Callable[[], None]:
        screen = self.screen
        assert isinstance(screen, Calling)
        return lambda: screen.action_call(name)


class ProcessionApp(App[str]):
    """``ProcessionApp(ws).run()`` opens the monitor on an open workspace. ``engine``: whether
    it runs its host's engine (True, False), or None, as ``runs_engine`` decides for the
    workspace (``--engine`` gives True)."""

    CSS_PATH = "app.tcss"
    TITLE = "procession"
    COMMANDS = App.COMMANDS | {CallCommands}  # App's: the system commands, Procession's own (below)
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = [
        Binding("f1,question_mark", "help", "Help", key_display="F1", id="help"),
        Binding("f2", "setup", "Setup", key_display="F2", id="setup"),
        Binding("f9,k", "actions", "Actions", key_display="F9", id="actions"),
        Binding("W", "attention", "Needs you", show=False, id="attention"),
        Binding("f10,q", "quit", "Quit", key_display="F10", id="quit"),
    ]

    def __init__(self, ws: Workspace, *, readonly: bool = False, theme: str | None = None,
                 config: config_mod.Config | None = None, engine: bool | None = None, slots: int = 2,
                 clock: Callable[[], float] = time.time, user_themes: Path | None = None) -> None:
        super().__init__()
        self.ws = ws.as_actor("tui")
        self.readonly = readonly or ws.store.readonly  # a viewer's database role: nothing it may change
        self.settings = config or config_mod.load()
        self.theme_override = theme
        self.clock = clock
        self.user_themes = user_themes
        self.own_themes: set[str] = set()  # the shipped themes and the user's: the only ones offered
        self.feed = Feed(self.ws, clock)
        self.shared = is_url(ws.path)  # a PostgreSQL workspace: several machines' sessions, an engine for each
        self.here = hosts.this()  # the host whose engine this monitor would run
        self.host = EngineHost(ws.path, slots) if runs_engine(self.shared, engine) and not self.readonly else None
        self.main = MainScreen()
        self.seen_version: int | None = None
        self.dirty = True
        self.paused = False
        self.following: int | None = None
        self._last_tick = 0.0
        self._last_look = 0.0

    def notify(self, message: str, *, title: str = "", severity: Any = "information", timeout: float | None = None,
               markup: bool = False) -> None:
        """Notifications carry session names, paths and the core's refusals, which quote user
        text as given: plain text unless asked, and never a control sequence."""
        super().notify(printable(message), title=printable(title, lines=False), severity=severity, timeout=timeout,
                       markup=markup)

    # ------------------------------------------------------------------ the parts tests and screens reach

    @property
    def table(self) -> Any:
        """The table, whatever screen is on top (workers reach it while a dialog is open)."""
        return self.main.table

    @property
    def loaded(self) -> bool:
        return self.feed.loaded

    def keys(self) -> dict[str, tuple[list[str], str]]:
        """Binding id -> (every key of it as shown, its description), as the keymap has them
        now: read from the main screen's binding chain (its bindings and the app's, with the
        user's remaps applied, as Textual dispatches them). Each key is named for itself: a
        binding's ``key_display`` (the footer's F-key) would name its letter alternates too."""
        by_id: dict[str, tuple[list[str], str]] = {}
        for _, bindings_map in self.main._binding_chain:
            for key, bindings in bindings_map.key_to_bindings.items():
                for binding in bindings:
                    if binding.id is None:
                        continue
                    keys, _ = by_id.setdefault(binding.id, ([], binding.description))
                    display = self.get_key_display(Binding(key, ""))
                    if display not in keys:
                        keys.append(display)
        return by_id

    def get_key_display(self, binding: Binding) -> str:
        """F-keys as the keyboard prints them (F1), Space, Enter and Esc by name."""
        if binding.key_display:
            return binding.key_display
        if re.fullmatch(r"f[0-9]{1,2}", binding.key):
            return binding.key.upper()
        return KEY_NAMES.get(binding.key) or super().get_key_display(binding)

    def how(self, call: Call, sid: int | None) -> str:
        """How to make ``call`` here: its key, as the keymap has it now."""
        keys = self.keys().get(call.value)
        return f"key {keys[0][0]}" if keys and keys[0] else f"{call} in the action menu (F9)"

    def move_to(self, sid: int) -> None:
        self.main.table.move_to(sid)

    def open_detail(self, sid: int, *, at: int | None = None) -> None:
        """The session's detail view (at message ``at`` of its context, when given)."""
        self.feed.seen(sid)
        self.push_screen(Detail(sid, at=at))

    def action_attention(self) -> None:
        """The attention queue: what waits for you, what fails, what finished."""
        if not isinstance(self.screen, Attention):
            self.push_screen(Attention())

    # ------------------------------------------------------------------ life

    def get_default_screen(self) -> MainScreen:
        return self.main

    async def on_mount(self) -> None:
        """Themes, keys and the engine; the main screen starts the data when it is composed."""
        self._load_themes()
        if self.settings.keys:
            self.set_keymap(self.settings.keys)
        for problem in self.settings.problems:
            self.notify(problem, severity="warning", timeout=8)
        if self.host is not None:
            await self.host.start()
            if self.host.problem:
                self.notify(self.host.problem, severity="error")
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        self._watch_themes()

    async def on_unmount(self) -> None:
        # Textual has asked the workers to stop; let them (a poll tick above all) finish
        # before the connection closes under them.
        for worker in list(self.workers):
            worker.cancel()
            with contextlib.suppress(Exception):
                await worker.wait()
        if self.host is not None:
            await self.host.stop()

    # ------------------------------------------------------------------ themes and settings

    def _load_themes(self) -> None:
        """The shipped themes and the user's; Textual's own are not offered (Setup lists
        ``own_themes``, and a theme asked for by name must be one of them)."""
        loaded, problems = themes_mod.load_all(self.user_themes)
        for theme in loaded.values():
            self.register_theme(theme)
        self.own_themes = set(loaded)
        for problem in problems:
            self.notify(str(problem), severity="warning", timeout=10)
        wanted = self.theme_override or self.settings.theme
        if wanted in self.own_themes:
            self.theme = wanted
        else:
            self.notify(f"no theme named {wanted!r}; using {config_mod.DEFAULT_THEME}", severity="warning")
            self.theme = config_mod.DEFAULT_THEME

    def _theme_changed(self, theme: Any) -> None:
        if isinstance(self.screen, Setup):
            return  # a preview: Setup saves the theme on Save, and puts the old one back on Cancel
        if self.theme_override is None and self.settings.theme != self.theme and not self.readonly:
            self.settings.theme = self.theme
            with contextlib.suppress(OSError):
                self.settings.save()

    @work(exclusive=True, group="themes")
    async def _watch_themes(self) -> None:
        """Reload an edited theme file live; a broken edit is reported and the old one kept."""
        from watchfiles import awatch

        folder = self.user_themes or themes_mod.user_folder()
        if not folder.is_dir():
            return
        async for changes in awatch(folder, debounce=100, step=20):
            for _, path in changes:
                if not path.endswith(".toml") or not Path(path).exists():
                    continue
                loaded = themes_mod.load_file(Path(path))
                if isinstance(loaded, themes_mod.ThemeProblem):
                    self.notify(str(loaded), severity="warning", timeout=10)
                    continue
                self.register_theme(loaded)
                self.own_themes.add(loaded.name)
                if loaded.name == self.theme:
                    self.refresh_css(animate=False)
                self.notify(f"theme {loaded.name} reloaded", timeout=2)

    # ------------------------------------------------------------------ data

    async def load(self) -> None:
        """Paint the first screenful before anything else; a bigger workspace then loads in
        the background (``_load_rest``)."""
        after = await self.feed.load_first()
        self.main.show_rows()
        if after:
            self._load_rest(after)
        else:
            await self._loaded()

    @work(exclusive=True, group="load")
    async def _load_rest(self, after: int) -> None:
        """Read the rest a page at a time, yielding to the event loop between pages."""
        while after:
            after, moved = await self.feed.load_more(after)
            if moved:
                self.main.show_rows()
            await self.refresh_header()
        await self._loaded()

    async def _loaded(self) -> None:
        gc.freeze()  # the sessions read so far live as long as the app: keep them out of GC passes
        # A tick makes a record for each changed session (thousands in a busy workspace): a young
        # generation of 700 objects ran a collection every few hundred of them, ~5 ms a tick.
        gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
        await self.refresh_data()
        self._poll()

    @work(exclusive=True, group="poll")
    async def _poll(self) -> None:
        """Forever: notice changes (cheaply) and redraw what changed. Ticks never overlap."""
        while self.is_running:
            try:
                await self.tick()
            except ProcessionError as exc:
                self.notify(str(exc), severity="error")
            except (NoMatches, ScreenStackError):
                if not self._exiting():
                    raise
                return  # quitting: Textual removes the screens before it stops this worker
            await asyncio.sleep(POLL_S)

    def _exiting(self) -> bool:
        return not self.is_running

    async def tick(self) -> None:
        moved = self.ws.store.same_file()  # two stat calls
        if moved:  # what is drawn is no longer the workspace at its path: stop, and say why
            self.exit(f"the monitor stopped: {moved}", return_code=1)
            return
        version = await self.ws.store.data_version()
        now = self.clock()
        if (version != self.seen_version or self.dirty) and not self.paused and self.feed.loaded:
            self.seen_version = version
            self.dirty = False
            await self.refresh_data()
        if now - self._last_look >= OUTSIDE_S and self.feed.loaded and not self.paused:
            self._last_look = now
            self.main.table.refresh_keys(await self.feed.look_outside())
        if now - self._last_tick >= self.settings.interval:
            self._last_tick = now
            await self.refresh_header()
            if not self.paused:
                self._expire_highlights()
                self.main.table.tick(now)

    async def refresh_data(self) -> None:
        """Fetch the sessions changed since the last revision and redraw them."""
        if self.paused:
            self.dirty = True
            return
        before, moved = await self.feed.refresh()
        table = self.main.table
        for sid in before:
            if sid in self.feed.highlights:
                table.highlights[sid] = self.feed.highlights[sid][0]
        if moved:
            self.main.show_rows()
        elif before:
            table.refresh_keys(before)
            self.main.follow()
        while self.feed.failing:
            self.notify(results.failing(self.feed.failing.pop(0)), severity="error", timeout=12)
        while self.feed.restarted:
            entry = self.feed.restarted.pop(0)
            known = self.feed.sessions.get(entry.session or 0)
            self.notify(results.restarted(entry, known.name if known else "?"), severity="warning", timeout=12)
        while self.feed.moves_over:
            if (move := await self.ws.move_info(self.feed.moves_over.pop(0))) is not None:
                self.notify(results.moved(move), severity="error" if move.stage == "failed" else "information",
                            timeout=12)
        if self.feed.asking:
            self.bell()
        while self.feed.asking:
            self.notify(results.asking(self.feed.asking.pop(0), self.how(Call.ALLOW, None)), severity="warning",
                        timeout=12)
        await self.refresh_header()
        if isinstance(self.screen, Detail) and self.screen.sid in before:
            await self.screen.reload()
        if isinstance(self.screen, Attention) and before:
            await self.screen.reload()

    def _expire_highlights(self) -> None:
        done = self.feed.expire_highlights()
        for sid in done:
            self.main.table.highlights.pop(sid, None)
        self.main.table.refresh_keys(done)

    async def refresh_header(self) -> None:
        header = await self.feed.header()
        engine = header.engine
        if self.host is not None:
            self.host.saw(engine)
        if engine is None and self.host is not None and await self.host.take_over():
            self.notify(f"{self.host.took_over} stopped: this monitor runs the engine now", severity="warning",
                        timeout=10)
            header = await self.feed.header()
            engine = header.engine
        mine = self.host if self.host is not None and self.host.running else None
        label = engines.header(engine, header.engines, self.feed.by_host, here=self.here,
                               several_hosts=header.several_hosts, mine=mine is not None,
                               after=mine.took_over if mine is not None else "", readonly=self.readonly,
                               shared=self.shared)
        slots = engine["slots"] if engine else 0
        if changed := self.feed.mark_lost(header.engines):
            self.main.table.refresh_keys(changed)
        if header.several_hosts and all(c.key != "host" for c in self.main.table.columns):
            self.main.configure_columns(shown(self.settings.columns, True))
        spec = self.feed.view.spec
        notes = ["READ-ONLY"] if self.readonly else []
        if not self.feed.loaded:
            notes.append(f"loading {len(self.feed.sessions):,}")
        if self.paused:
            notes.append("PAUSED (Z)")
        if self.following is not None:
            notes.append(f"following {self.following} (F)")
        if spec.filter:
            notes.append(f"filter: {spec.filter} (Esc clears)")
        if not spec.show_terminated:
            notes.append("ended hidden (H)")
        self.main.query_one(Meters).show(header, label, slots, "  ".join(notes))

    def header_soon(self) -> None:
        """Redraw the header's notes now rather than at the next interval."""
        self.run_worker(self.refresh_header(), group="header")

    # ------------------------------------------------------------------ app-wide keys

    def action_help(self) -> None:
        """Every key with its alternates, as the keymap has them now (a remapped key shows as
        remapped); a call's row says what the call does in the core's words."""
        hidden = set(FLOWS) | {"nice_up", "nice_down"} if self.readonly else set()
        shown = [(keys, description, FLOWS[id_].summary if id_ in FLOWS else "")
                 for id_, (keys, description) in self.keys().items() if id_ not in hidden]
        shown.sort(key=lambda row: _help_order(row[0]))
        rows = [(" ".join(keys), title, text) for keys, title, text in shown]
        rows += [("↑ ↓ PgUp PgDn", "Move the cursor", ""), ("Home End", "First, last row", ""),
                 ("← →", "Scroll the columns", "when they do not all fit (‹ › in the header say so)"),
                 ("Ctrl+P", "Command palette", "every call, searchable"),
                 ("click a title", "Sort by that column", "")]
        self.push_screen(Help(rows, self.readonly))

    def action_setup(self) -> None:
        shown = self.settings.columns
        columns = [(c.key, f"{c.title:<9} {c.help}", c.key in shown) for c in COLUMNS]

        def done(result: dict[str, Any] | None) -> None:
            if result is None:
                self.theme = self.settings.theme if self.theme_override is None else self.theme_override
                return
            order = {k: i for i, k in enumerate(BY_KEY)}
            self.settings.columns = sorted(result["columns"], key=order.__getitem__)
            self.settings.interval = result["interval"]
            self.settings.theme = result["theme"]
            with contextlib.suppress(OSError):
                self.settings.save()
            self.main.configure_columns(self.settings.columns)
            self.main.rebuild()

        self.push_screen(Setup(columns, sorted(self.own_themes), self.theme, self.settings.interval), done)

    def action_actions(self) -> None:
        """F9: every call of the registry, greyed where it would be refused, with its key."""
        screen = self.screen
        if not isinstance(screen, Calling):
            return
        if self.readonly:
            self.notify("read-only monitor: no call can be made from here", severity="warning")
            return
        targets, agent = screen.targets(), screen.agent_row()
        keys = self.keys()
        choices = [Choice(name, f"{' '.join(keys.get(name, ([], ''))[0]):<4} {flow.title} — {flow.summary}",
                          screen.applies(name)) for name, flow in FLOWS.items()]
        title = (f"Agent {printable(agent)} ({plural(len(targets), 'live session')})" if agent is not None else
                 f"Session {targets[0].id} ({printable(targets[0].name)})" if len(targets) == 1
                 else f"{len(targets)} sessions" if targets else "No session selected")

        def done(picked: str | None) -> None:
            if picked:
                screen.action_call(picked)

        self.push_screen(ActionMenu(title, choices), done)

    async def action_quit(self) -> None:
        """Quit; the steps this monitor's engine is running are interrupted, so ask first."""
        running = self.host.live_steps if self.host is not None else 0
        if not running:
            self.exit()
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.exit()

        self.push_screen(Confirm(f"Quit? {plural(running, 'step')} running in this monitor's engine will be"
                                 " interrupted (their partial output is kept).",
                                 ["Another engine (`procession run`) can keep sessions running without a monitor."]),
                         confirmed)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """The palette's app-wide commands: Procession's own keys, not Textual's (whose theme
        picker offers themes Procession does not ship, and whose key panel is not the help)."""
        yield SystemCommand("Help", "Every key with its alternates, and what each call does (F1)", self.action_help)
        yield SystemCommand("Setup", "The columns shown, the theme, the refresh interval (F2)", self.action_setup)
        yield SystemCommand("Quit", "Leave the monitor; asks first when its engine is running steps (F10)",
                            self.action_quit)
        yield SystemCommand("Tree view", "Show agents, sessions and forks as a tree (F5)", self.main.action_toggle_tree)
        yield SystemCommand("Hide or show ended sessions", "Toggle terminated sessions (H)",
                            self.main.action_toggle_terminated)


async def run_monitor(db: Path | str | None, **options: Any) -> int:
    """Open the workspace, then the monitor on it (``options`` as ``ProcessionApp`` takes
    them); returns when the user quits."""
    ws = await Workspace.open(db, actor="tui", create=True)
    try:
        stopped = await ProcessionApp(ws, **options).run_async()
    finally:
        await ws.close()
    if stopped:
        raise WorkspaceError(stopped)
    return 0
