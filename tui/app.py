"""The monitor: an htop for agent sessions.

The app embeds the engine when no other process holds the workspace (or shows which one
does), polls the store's change signal every ``POLL_S`` and redraws only the sessions whose
revision moved. Every call goes through ``Workspace``; a refusal is shown as a
notification with the engine's one-line reason. Nothing here blocks the event loop on the
store or a runner: reads and writes are aiosqlite calls, the engine's steps are child
processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import shlex
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import App, ComposeResult, ScreenStackError, SystemCommand
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Footer, Input

from procession import ContextTooLarge, MergeConflict, ProcessionError, Resolution, State, Workspace
from procession.errors import EngineBusy
from procession.humanize import plural
from procession.states import allowed
from procession.records import SessionInfo

from . import config as config_mod
from . import themes as themes_mod
from .columns import BY_KEY, COLUMNS
from .detail import Detail
from .dialogs import Action, ActionMenu, Confirm, Conflicts, Help, Prompt, Setup
from .meters import Meters
from .table import SessionTable, TableHeader
from .view import View, ViewSpec, matches

POLL_S = 0.1
HIGHLIGHT_S = 3.0
#: Sessions read before the first paint, then per page while the rest loads.
FIRST_PAGE = 200
PAGE = 5_000

#: The calls of the action menu and the palette: id, label, the lifecycle call it needs.
CALLS: tuple[tuple[str, str, str | None], ...] = (
    ("activate", "Activate (queue a run)", "activate"),
    ("suspend", "Suspend", "suspend"),
    ("resume", "Resume", "resume"),
    ("interrupt", "Interrupt the running step", "interrupt"),
    ("cancel", "Cancel (terminate)", "cancel"),
    ("fork", "Fork…", "fork"),
    ("merge", "Merge into…", "merge-from"),
    ("compress", "Compress the context", "compress"),
    ("expand", "Expand the last compress", "expand"),
    ("send", "Send a message…", "send"),
    ("migrate", "Migrate to another runner…", "migrate"),
    ("nice_up", "Priority up", "nice"),
    ("nice_down", "Priority down", "nice"),
    ("save", "Save a checkpoint…", "save"),
    ("export", "Export a snapshot file…", "save"),
    ("approve", "Approve (arm runner and triggers)", "approve"),
    ("set_priority", "Set the priority…", "nice"),
    ("set_memory", "Set or delete a memory key…", "memory"),
    ("bind", "Bind a resource…", "bind"),
    ("add_trigger", "Add a trigger…", "trigger"),
    ("spawn", "Spawn a new session…", None),
    ("load", "Load a snapshot file as a new session…", None),
)
#: Calls that make a new session: they need no session at the cursor.
NEW_SESSION = {"spawn", "load"}
MUTATING = {c[0] for c in CALLS} | {"suspend_resume"}
#: Keys of the table view, off in the detail view.
TABLE_KEYS = {"search", "filter", "toggle_tree", "sort_menu", "sort_column", "invert_sort", "tag", "untag_all",
              "details", "follow", "pause", "toggle_terminated", "clear"}


def _unapproved(session: SessionInfo) -> bool:
    """A runner or a trigger is disarmed (a loaded session, or a fork's copied triggers)."""
    return not session.armed or any(not t.armed for t in session.triggers)


class SessionCommands(Provider):
    """The command palette: every system call, for the sessions the next call would act on."""

    def _commands(self) -> list[tuple[str, str, str]]:
        app = self.app
        assert isinstance(app, ProcessionApp)
        targets = app.targets()
        label = f"session {targets[0].id} ({targets[0].name})" if len(targets) == 1 else f"{len(targets)} sessions"
        return [(action, text.rstrip("…") if action in NEW_SESSION else f"{text.rstrip('…')}: {label}", text)
                for action, text, _ in CALLS if app.applies(action)]

    async def discover(self) -> Hits:
        """With nothing typed yet, the palette lists the calls that apply."""
        for action, title, text in self._commands():
            yield DiscoveryHit(title, lambda a=action: self.app.run_action(a), help=text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for action, title, text in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), lambda a=action: self.app.run_action(a), help=text)


class ProcessionApp(App[int]):
    """``ProcessionApp(db).run()`` opens the monitor on a workspace."""

    CSS_PATH = "app.tcss"
    TITLE = "procession"
    COMMANDS = App.COMMANDS | {SessionCommands}
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = [
        Binding("f1,question_mark", "help", "Help", key_display="F1", id="help"),
        Binding("f2", "setup", "Setup", key_display="F2", id="setup"),
        Binding("f3,slash", "search", "Search", key_display="F3", id="search"),
        Binding("f4,backslash", "filter", "Filter", key_display="F4", id="filter"),
        Binding("f5,t", "toggle_tree", "Tree", key_display="F5", id="tree"),
        Binding("f6", "sort_menu", "Sort", key_display="F6", id="sort"),
        Binding("greater_than_sign,full_stop", "sort_column(1)", "Sort next", show=False, id="sort_next"),
        Binding("less_than_sign,comma", "sort_column(-1)", "Sort previous", show=False, id="sort_prev"),
        Binding("I", "invert_sort", "Invert sort", show=False, id="invert"),
        Binding("f7,right_square_bracket", "nice_up", "Priority up", show=False, key_display="F7", id="nice_up"),
        Binding("f8,left_square_bracket", "nice_down", "Priority down", show=False, key_display="F8", id="nice_down"),
        Binding("f9,k", "actions", "Actions", key_display="F9", id="actions"),
        Binding("f10,q", "quit", "Quit", key_display="F10", id="quit"),
        Binding("space", "tag", "Tag", show=False, id="tag"),
        Binding("U", "untag_all", "Untag all", show=False, id="untag"),
        Binding("enter", "details", "Details", show=False, id="details"),
        Binding("F", "follow", "Follow", show=False, id="follow"),
        Binding("Z", "pause", "Pause display", show=False, id="pause"),
        Binding("H", "toggle_terminated", "Hide/show ended", show=False, id="terminated"),
        Binding("a", "activate", "Activate", show=False, id="activate"),
        Binding("z", "suspend_resume", "Suspend/resume", show=False, id="suspend"),
        Binding("i", "interrupt", "Interrupt", show=False, id="interrupt"),
        Binding("f", "fork", "Fork", show=False, id="fork"),
        Binding("m", "merge", "Merge", show=False, id="merge"),
        Binding("c", "compress", "Compress", show=False, id="compress"),
        Binding("x", "expand", "Expand", show=False, id="expand"),
        Binding("w", "send", "Send", show=False, id="send"),
        Binding("g", "migrate", "Migrate", show=False, id="migrate"),
        Binding("S", "save", "Checkpoint", show=False, id="save"),
        Binding("e", "export", "Export", show=False, id="export"),
        Binding("A", "approve", "Approve", show=False, id="approve"),
        Binding("escape", "clear", "Clear", show=False, id="clear"),
    ]

    def __init__(self, db: Path | str | None = None, *, readonly: bool = False, theme: str | None = None,
                 config: config_mod.Config | None = None, engine: bool = True, slots: int = 2,
                 clock: Callable[[], float] = time.time, user_themes: Path | None = None) -> None:
        super().__init__()
        self.db = db
        self.readonly = readonly
        self.settings = config or config_mod.load()
        self.theme_override = theme
        self.want_engine = engine and not readonly
        self.slots = slots
        self.clock = clock
        self.user_themes = user_themes
        self.ws: Workspace | None = None
        self._table = SessionTable(id="table")
        self.sessions: dict[int, SessionInfo] = {}
        self.view = View()
        self.by_state: dict[str, int] = {s.value: 0 for s in State}
        self.tokens = 0
        self.windows = 0
        self.rev = 0
        self.seen_version: int | None = None
        self.dirty = True
        self.loaded = False
        self.paused = False
        self.following: int | None = None
        self.search_text = ""
        self.bar_mode = ""
        self.highlight_until: dict[int, float] = {}
        self._engine: Any = None
        self._engine_stop = asyncio.Event()
        self._engine_task: asyncio.Task[None] | None = None
        self._last_tick = 0.0

    def notify(self, message: str, *, title: str = "", severity: Any = "information", timeout: float | None = None,
               markup: bool = False) -> None:
        """Notifications carry session names, paths and reasons: plain text unless asked."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Meters(id="meters")
        yield TableHeader(id="header")
        yield self._table
        yield Input(id="bar", classes="hidden")
        # F1..F10 fit an 80-column terminal: compact, and Ctrl+P is in the help instead
        yield Footer(compact=True, show_command_palette=False)

    @property
    def table(self) -> SessionTable:
        """The table, whatever screen is on top (workers reach it while a dialog is open)."""
        return self._table

    @property
    def spec(self) -> ViewSpec:
        return self.view.spec

    async def on_mount(self) -> None:
        self._load_themes()
        self.ws = await Workspace.open(self.db, actor="tui")
        self.query_one(Meters).tokenizer = self.ws.tokenizer
        self.query_one(Meters).clock = self.clock
        self._apply_columns()
        if self.settings.keys:
            self.set_keymap(self.settings.keys)
        for problem in self.settings.problems:
            self.notify(problem, severity="warning", timeout=8)
        if self.want_engine:
            await self._start_engine()
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        self.table.focus()
        self.table.sessions = self.sessions
        await self._load()
        self._watch_themes()

    async def on_unmount(self) -> None:
        # Textual has asked the workers to stop; let them (a poll tick above all) finish
        # before the connection closes under them.
        for worker in list(self.workers):
            worker.cancel()
            with contextlib.suppress(Exception):
                await worker.wait()
        try:
            await self._stop_engine()
        finally:
            if self.ws is not None:
                await self.ws.close()

    # ------------------------------------------------------------------ themes and settings

    def _load_themes(self) -> None:
        loaded, problems = themes_mod.load_all(self.user_themes)
        for theme in loaded.values():
            self.register_theme(theme)
        for problem in problems:
            self.notify(str(problem), severity="warning", timeout=10)
        wanted = self.theme_override or self.settings.theme
        if wanted in self.available_themes:
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
                if loaded.name == self.theme:
                    self.refresh_css(animate=False)
                self.notify(f"theme {loaded.name} reloaded", timeout=2)

    def _apply_columns(self) -> None:
        columns = [BY_KEY[k] for k in self.settings.columns if k in BY_KEY]
        self.table.set_columns(columns)
        if self.spec.sort not in self.settings.columns:
            self.spec.sort = columns[0].key
        self.query_one(TableHeader).configure(columns, self.spec.sort, self.spec.reverse)

    # ------------------------------------------------------------------ the engine

    async def _start_engine(self) -> None:
        from procession.engine import Engine

        engine = Engine(self.db, slots=self.slots)
        try:
            await engine.start()
        except EngineBusy:
            return
        except ProcessionError as exc:
            self.notify(f"cannot run the engine here: {exc}", severity="error")
            return
        self._engine = engine
        self._engine_task = asyncio.ensure_future(engine.serve(self._engine_stop))

    async def _stop_engine(self) -> None:
        if self._engine_task is not None:
            self._engine_stop.set()
            with contextlib.suppress(Exception):
                await self._engine_task
            self._engine_task = None

    # ------------------------------------------------------------------ data

    @work(exclusive=True, group="poll")
    async def _poll(self) -> None:
        """Forever: notice changes (cheaply) and redraw what changed. Ticks never overlap."""
        while self.is_running:
            try:
                await self.tick()
            except ProcessionError as exc:
                self.notify(str(exc), severity="error")
            except (NoMatches, ScreenStackError):
                if self.is_running:
                    raise
                return  # quitting: Textual removes the screens before it stops this worker
            await asyncio.sleep(POLL_S)

    async def tick(self) -> None:
        assert self.ws is not None
        version = await self.ws.store.data_version()
        now = self.clock()
        if (version != self.seen_version or self.dirty) and not self.paused and self.loaded:
            self.seen_version = version
            self.dirty = False
            await self.refresh_data()
        if now - self._last_tick >= self.settings.interval:
            self._last_tick = now
            await self._refresh_header()
            if not self.paused:
                self._expire_highlights(now)
                self.table.tick(now)

    async def _load(self) -> None:
        """Paint the first screenful before anything else; a bigger workspace then loads in
        the background (``_load_rest``)."""
        assert self.ws is not None
        self.rev, page = await self.ws.changes(0, limit=FIRST_PAGE)
        self._absorb(page, highlight=False)
        self.rebuild()
        if len(page) == FIRST_PAGE:
            self._load_rest(page[-1].id)
        else:
            await self._loaded()

    @work(exclusive=True, group="load")
    async def _load_rest(self, after: int) -> None:
        """Read the rest a page at a time, yielding to the event loop between pages."""
        assert self.ws is not None
        page: list[SessionInfo] = []
        while after:
            _, page = await self.ws.changes(0, after=after, limit=PAGE)
            before = self._absorb(page, highlight=False)
            if self.view.update(self.sessions, [s.id for s in page], before):
                self._show()
            await self._refresh_header()
            after = page[-1].id if len(page) == PAGE else 0
        await self._loaded()

    async def _loaded(self) -> None:
        self.loaded = True
        gc.freeze()  # the sessions read so far live as long as the app: keep them out of GC passes
        await self.refresh_data()
        self._poll()

    def _absorb(self, changed: list[SessionInfo], *, highlight: bool) -> dict[int, SessionInfo | None]:
        """Take fresh records in; keep the header's totals by difference; return the old ones."""
        now = self.clock()
        before: dict[int, SessionInfo | None] = {}
        for info in changed:
            old = self.sessions.get(info.id)
            before[info.id] = old
            if old is not None:
                self._count(old, -1)
                if highlight and old.state is not State.TERMINATED and info.state is State.TERMINATED:
                    self._highlight(info.id, "ended", now)
            elif highlight:
                self._highlight(info.id, "new", now)
            self._count(info, 1)
            self.sessions[info.id] = info
        return before

    def _count(self, info: SessionInfo, sign: int) -> None:
        self.by_state[info.state.value] += sign
        if info.state is not State.TERMINATED:
            self.tokens += sign * info.context_tokens
            self.windows += sign * info.context_window

    async def refresh_data(self) -> None:
        """Fetch sessions changed since the last revision and redraw them."""
        assert self.ws is not None
        rev, changed = await self.ws.changes(self.rev)
        before = self._absorb(changed, highlight=True)
        self.rev = max(self.rev, rev)
        if changed:
            if self.view.update(self.sessions, list(before), before):
                self._show()
            else:
                self.table.refresh_keys(before)
                self._follow()
        await self._refresh_header()
        if isinstance(self.screen, Detail) and self.screen.sid in before:
            await self.screen.reload()

    def rebuild(self) -> None:
        """Recompute the order of rows from scratch (after a change of sort, filter or view)."""
        self.view.rebuild(self.sessions)
        self._show()

    def _show(self) -> None:
        self.table.show(self.view.keys, self.clock(), headings=self.view.headings, prefixes=self.view.prefixes)
        self._follow()

    def _follow(self) -> None:
        """F: the followed session stays under the cursor, in view, wherever it moves."""
        if self.following is not None:
            self.table.move_to(self.following, center=self.table.cursor_key != self.following)

    async def _refresh_header(self) -> None:
        assert self.ws is not None
        stats = await self.ws.activity()
        stats.update(states=self.by_state, context_tokens=self.tokens, context_windows=self.windows)
        if self._engine_task is not None and not self._engine_task.done():
            label = f"this process (pid {stats['engine']['pid']})" if stats["engine"] else "this process"
        elif stats["engine"]:
            label = f"pid {stats['engine']['pid']} on {stats['engine']['host']}"
        else:
            label = "none (read-only)" if self.readonly else "none"
        slots = stats["engine"]["slots"] if stats["engine"] else 0
        notes = ["READ-ONLY"] if self.readonly else []
        if not self.loaded:
            notes.append(f"loading {len(self.sessions):,}")
        if self.paused:
            notes.append("PAUSED (Z)")
        if self.following is not None:
            notes.append(f"following {self.following} (F)")
        if self.spec.filter:
            notes.append(f"filter: {self.spec.filter} (Esc clears)")
        if not self.spec.show_terminated:
            notes.append("ended hidden (H)")
        self.query_one(Meters).show(stats, label, slots, "  ".join(notes))

    def _header_soon(self) -> None:
        """Redraw the header's notes now rather than at the next interval."""
        self.run_worker(self._refresh_header(), group="header")

    def _highlight(self, sid: int, kind: str, now: float) -> None:
        self.table.highlights[sid] = kind
        self.highlight_until[sid] = now + HIGHLIGHT_S

    def _expire_highlights(self, now: float) -> None:
        done = [sid for sid, until in self.highlight_until.items() if until <= now]
        for sid in done:
            del self.highlight_until[sid]
            self.table.highlights.pop(sid, None)
        self.table.refresh_keys(done)

    # ------------------------------------------------------------------ targets and checks

    def targets(self) -> list[SessionInfo]:
        """The sessions the next call acts on: the detail view's, else the tagged ones, else the cursor's."""
        if isinstance(self.screen, Detail):
            info = self.sessions.get(self.screen.sid)
            return [info] if info else []
        if self.table.tags:  # tagged sessions a filter hides are left alone
            return [self.sessions[s] for s in sorted(self.table.tags) if s in self.view.shown]
        session = self.table.cursor_session
        return [session] if session else []

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A read-only monitor hides every changing call. Otherwise a key always makes its
        call, so that a refusal says why instead of the key doing nothing; the action menu
        and the palette grey out what would be refused (``applies``)."""
        if action in MUTATING and self.readonly:
            return False
        if action in TABLE_KEYS and isinstance(self.screen, Detail):
            return False  # they would act on the table hidden under the detail view
        return True

    def applies(self, action: str) -> bool:
        """Whether the lifecycle table lets ``action`` act on at least one of the targets."""
        if self.readonly and action in MUTATING:
            return False
        if action in NEW_SESSION:
            return True
        needs = {c[0]: c[2] for c in CALLS}.get(action)
        targets = self.targets()
        if action == "suspend_resume":
            return any(allowed("suspend", t.state) or allowed("resume", t.state) for t in targets)
        if action == "approve":
            return any(_unapproved(t) and allowed("approve", t.state) for t in targets)
        return bool(targets) and needs is not None and any(allowed(needs, t.state) for t in targets)

    async def call(self, label: str, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        """Make one call; a refusal becomes a notification with its one-line reason."""
        try:
            result = await fn(*args, **kwargs)
        except ProcessionError as exc:
            self.notify(str(exc), title=label, severity="error", timeout=6)
            return None
        self.dirty = True
        if not self.paused:
            await self.refresh_data()  # show it now: the next key must see the new state
        return result

    async def each(self, label: str, call: str, done: str) -> None:
        """A lifecycle call on every target; one notification says how it went."""
        assert self.ws is not None
        targets = self.targets()
        ok = 0
        for target in targets:
            if await self.call(label, getattr(self.ws, call), target.id) is not None:
                ok += 1
        if ok:
            self.notify(f"{done} {plural(ok, 'session')}" if len(targets) > 1
                        else f"{done} {targets[0].id} ({targets[0].name})", timeout=3)

    # ------------------------------------------------------------------ view keys

    def action_help(self) -> None:
        rows = []
        for binding in self.BINDINGS:
            assert isinstance(binding, Binding)
            if self.readonly and binding.action.split("(")[0] in MUTATING:
                continue
            keys = ", ".join(self.get_key_display(Binding(k, "")) for k in binding.key.split(","))
            rows.append((keys, binding.description))
        rows += [("↑ ↓ PgUp PgDn", "move the cursor"), ("Home End", "first, last row"),
                 ("Ctrl+P", "command palette: every call"), ("click a title", "sort by that column")]
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
            self._apply_columns()
            self.rebuild()

        self.push_screen(Setup(columns, sorted(self.available_themes), self.theme, self.settings.interval), done)

    def _show_bar(self, mode: str, placeholder: str, value: str) -> None:
        bar = self.query_one("#bar", Input)
        self.bar_mode = mode
        bar.placeholder = placeholder
        bar.border_title = "Search (F3 next)" if mode == "search" else "Filter (Esc clears)"
        bar.value = value
        bar.remove_class("hidden")
        bar.focus()

    def _hide_bar(self) -> None:
        self.query_one("#bar", Input).add_class("hidden")
        self.bar_mode = ""
        self.table.focus()

    def action_search(self) -> None:
        if self.bar_mode == "search":
            self._next_match(self.search_text, skip=True)
            return
        # Reopened with the last search selected: F3 again finds the next match, typing starts a new one.
        self._show_bar("search", "search: name, agent or state — F3 next, Enter or Esc closes", self.search_text)

    def action_filter(self) -> None:
        self._show_bar("filter", "filter: name, agent or state — Enter keeps, Esc clears", self.spec.filter)

    @on(Input.Changed, "#bar")
    def bar_changed(self, event: Input.Changed) -> None:
        if self.bar_mode == "search":
            self.search_text = event.value
            self._next_match(event.value, skip=False)
        elif self.bar_mode == "filter":
            self.spec.filter = event.value
            self.rebuild()
            self._header_soon()

    @on(Input.Submitted, "#bar")
    def bar_submitted(self, event: Input.Submitted) -> None:
        self._hide_bar()

    def _next_match(self, query: str, *, skip: bool) -> None:
        """Move to the next session matching ``query``. While typing, a miss only turns the bar
        red (a toast per keystroke is noise); F3 with no match says so."""
        keys = self.table.keys
        bar = self.query_one("#bar", Input)
        bar.remove_class("-nomatch")
        if not query or not keys:
            return
        start = self.table.cursor + (1 if skip else 0)
        for offset in range(len(keys)):
            key = keys[(start + offset) % len(keys)]
            if isinstance(key, int) and matches(self.sessions[key], query):
                self.table.move_to(key)
                return
        bar.add_class("-nomatch")
        if skip:
            self.notify(f"no session matches {query!r}", severity="warning", timeout=2)

    def action_clear(self) -> None:
        if self.bar_mode == "filter" or (not self.bar_mode and self.spec.filter):
            self.spec.filter = ""
            self.rebuild()
        self._hide_bar()
        self._header_soon()

    def action_toggle_tree(self) -> None:
        self.spec.tree = not self.spec.tree
        self.rebuild()

    def action_sort_menu(self) -> None:
        columns = [BY_KEY[k] for k in self.settings.columns]

        def done(key: str | None) -> None:
            if key:
                self._sort_by(key)

        self.push_screen(ActionMenu("Sort by", [Action(c.key, f"{c.title:<9} {c.help}") for c in columns]), done)

    def _sort_by(self, key: str) -> None:
        if self.spec.sort == key:
            self.spec.reverse = not self.spec.reverse
        else:
            self.spec.sort, self.spec.reverse = key, False
        self.query_one(TableHeader).configure(self.table.columns, self.spec.sort, self.spec.reverse)
        self.rebuild()

    def action_sort_column(self, step: int) -> None:
        keys = [c.key for c in self.table.columns]
        index = (keys.index(self.spec.sort) + step) % len(keys) if self.spec.sort in keys else 0
        self.spec.sort, self.spec.reverse = keys[index], False
        self.query_one(TableHeader).configure(self.table.columns, self.spec.sort, self.spec.reverse)
        self.rebuild()

    def action_invert_sort(self) -> None:
        self._sort_by(self.spec.sort)

    @on(TableHeader.Clicked)
    def header_clicked(self, event: TableHeader.Clicked) -> None:
        self._sort_by(event.column)

    def action_tag(self) -> None:
        session = self.table.cursor_session
        if session is None:
            return
        self.table.tags ^= {session.id}
        self.table.refresh_keys([session.id])
        self.table.action_cursor(1)

    def action_untag_all(self) -> None:
        tagged = list(self.table.tags)
        self.table.tags.clear()
        self.table.refresh_keys(tagged)

    def action_details(self) -> None:
        session = self.table.cursor_session
        if session is not None and self.ws is not None:
            self.push_screen(Detail(self.ws, session.id))

    @on(SessionTable.Chosen)
    def chosen(self, event: SessionTable.Chosen) -> None:
        if isinstance(event.key, int) and self.ws is not None:
            self.push_screen(Detail(self.ws, event.key))

    def action_follow(self) -> None:
        session = self.table.cursor_session
        self.following = None if self.following is not None or session is None else session.id
        self._header_soon()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.dirty = True
        self._header_soon()

    def action_toggle_terminated(self) -> None:
        self.spec.show_terminated = not self.spec.show_terminated
        self.rebuild()
        self._header_soon()

    # ------------------------------------------------------------------ calls

    async def action_activate(self) -> None:
        await self.each("activate", "activate", "queued")

    async def action_suspend_resume(self) -> None:
        targets = self.targets()
        if targets and all(t.state is State.SUSPENDED for t in targets):
            await self.each("resume", "resume", "resumed")
        else:
            await self.each("suspend", "suspend", "suspended")

    async def action_suspend(self) -> None:
        await self.each("suspend", "suspend", "suspended")

    async def action_resume(self) -> None:
        await self.each("resume", "resume", "resumed")

    async def action_interrupt(self) -> None:
        await self.each("interrupt", "interrupt", "interrupted")

    async def action_compress(self) -> None:
        assert self.ws is not None
        for target in self.targets():
            fold = await self.call("compress", self.ws.compress, target.id)
            if fold:
                self.notify(f"{target.id}: folded {fold.archived_count} items ({fold.archived_tokens} tokens)"
                            f" into a {fold.summary_tokens}-token summary", timeout=4)

    async def action_expand(self) -> None:
        assert self.ws is not None
        for target in self.targets():
            fold = await self.call("expand", self.ws.expand, target.id)
            if fold:
                self.notify(f"{target.id}: restored {fold.archived_count} items", timeout=4)

    async def _nice(self, step: int) -> None:
        assert self.ws is not None
        for target in self.targets():
            await self.call("nice", self.ws.nice, target.id, step, relative=True)

    async def action_nice_up(self) -> None:
        await self._nice(1)

    async def action_nice_down(self) -> None:
        await self._nice(-1)

    def _ask(self, title: str, value: str, then: Callable[[str], Awaitable[None]], help: str = "") -> None:
        async def done(answer: str | None) -> None:
            if answer is not None and answer.strip():
                await then(answer.strip())

        self.push_screen(Prompt(title, value, help=help), done)

    def _single(self, what: str) -> SessionInfo | None:
        targets = self.targets()
        if len(targets) != 1:
            self.notify(f"{what} acts on one session: untag all (U) or put the cursor on one", severity="warning")
            return None
        return targets[0]

    def action_fork(self) -> None:
        assert self.ws is not None
        target = self._single("fork")
        if target is None:
            return

        async def fork(name: str) -> None:
            sid = await self.call("fork", self.ws.fork, target.id, name)
            if sid:
                armed = "; its triggers are copied disarmed (A arms them)" if target.triggers else ""
                self.notify(f"forked {target.id} into {sid} ({name}){armed}", timeout=5)
                await self.refresh_data()
                self.table.move_to(sid)

        self._ask(f"Fork session {target.id}: name of the fork", f"{target.name} fork", fork)

    def action_merge(self) -> None:
        assert self.ws is not None
        source = self._single("merge")
        if source is None:
            return

        async def merge(answer: str) -> None:
            if not answer.isdigit():
                self.notify("give the SID of the session to merge into", severity="error")
                return
            await self._merge(source.id, int(answer), Resolution())

        parent = str(source.parent) if source.parent else ""
        self._ask(f"Merge session {source.id} ({source.name}) into which session? (SID)", parent, merge,
                  help="Three-way: conflicting memory keys are shown for you to settle before anything is applied.")

    async def _merge(self, source: int, target: int, resolution: Resolution) -> None:
        assert self.ws is not None
        try:
            result = await self.ws.merge(source, target, resolution)
        except MergeConflict as exc:
            def settled(choices: dict[str, tuple[str, str]] | None) -> None:
                if choices is None:
                    self.notify("merge cancelled: nothing was applied", timeout=3)
                    return
                picks = {k: side for k, (side, _) in choices.items() if side in ("ours", "theirs")}
                values = {k: value for k, (side, value) in choices.items() if side == "set"}
                self.run_worker(self._merge(source, target, Resolution(None, picks, values)))

            self.push_screen(Conflicts(source, target, exc.conflicts), settled)
            return
        except ProcessionError as exc:
            self.notify(str(exc), title="merge", severity="error", timeout=6)
            return
        self.dirty = True
        unrelated = "" if result.base is not None else " (they shared no history)"
        self.notify(f"merged {source} into {target}{unrelated}: {plural(result.messages, 'message')} joined,"
                    f" {plural(len(result.memory_changed), 'memory key')} changed", timeout=5)

    def action_send(self) -> None:
        assert self.ws is not None
        targets = self.targets()
        if not targets:
            return

        async def send(text: str) -> None:
            for target in targets:
                await self.call("send", self.ws.send, target.id, text)
            self.notify(f"sent to {', '.join(str(t.id) for t in targets)}", timeout=3)

        names = ", ".join(str(t.id) for t in targets)
        self._ask(f"Message to {names}", "", send)

    def action_migrate(self) -> None:
        assert self.ws is not None
        target = self._single("migrate")
        if target is None:
            return

        async def runner(spec: str) -> None:
            async def window(text: str) -> None:
                if not text.isdigit():
                    self.notify("the window is a number of tokens", severity="error")
                    return
                await self._migrate(target, spec, int(text))

            self._ask(f"Context window of {target.id} on {spec} (tokens)", str(target.context_window), window)

        self._ask(f"Migrate session {target.id}: runner", target.runner, runner,
                  help="command:<shell command> · openai:<model>[@<url>][#KEY_VAR] · builtin:<name>")

    async def _migrate(self, target: SessionInfo, spec: str, window: int) -> None:
        assert self.ws is not None
        try:
            out = await self.ws.migrate(target.id, spec, window=window)
        except ContextTooLarge as exc:
            async def confirmed(yes: bool | None) -> None:
                if yes:
                    done = await self.call("migrate", self.ws.migrate, target.id, spec, window=window, compress=True)
                    if done:
                        self.notify(f"{target.id} compressed and migrated to {spec}", timeout=4)

            self.push_screen(Confirm(f"{exc}", ["Compress older context to fit (reversible with x)?"]), confirmed)
            return
        except ProcessionError as exc:
            self.notify(str(exc), title="migrate", severity="error", timeout=6)
            return
        self.dirty = True
        self.notify(f"{target.id} now runs on {out['runner']} ({out['context_tokens']}/{out['window']} tokens)",
                    timeout=4)

    def action_save(self) -> None:
        assert self.ws is not None
        target = self._single("save")
        if target is None:
            return

        async def save(name: str) -> None:
            cp = await self.call("save", self.ws.save, target.id, name)
            if cp:
                self.notify(f"checkpoint {name!r} of {target.id} at message {cp.seq}", timeout=4)

        self._ask(f"Checkpoint name for session {target.id}", time.strftime("cp-%Y%m%d-%H%M%S"), save)

    def action_export(self) -> None:
        assert self.ws is not None
        target = self._single("export")
        if target is None:
            return

        async def write(path: str) -> None:
            out = await self.call("export", self.ws.export, target.id, path)
            if out:
                self.notify(f"wrote {out['file']} ({plural(out['messages'], 'message')})", timeout=5)

        async def export(answer: str) -> None:
            path = str(Path(answer).expanduser())
            if not Path(path).exists():
                await write(path)
                return

            async def confirmed(yes: bool | None) -> None:
                if yes:
                    await write(path)

            self.push_screen(Confirm(f"{path} exists. Replace it?", ["The file there is lost."]), confirmed)

        slug = "".join(ch if ch.isalnum() else "-" for ch in target.name).strip("-") or "session"
        self._ask(f"Export session {target.id} to a snapshot file", f"{slug}-{target.id}.json", export)

    def action_approve(self) -> None:
        assert self.ws is not None
        targets = [t for t in self.targets() if _unapproved(t)]
        if not targets:
            self.notify("nothing to approve: the runner and every trigger are armed already", severity="warning")
            return

        async def confirmed(yes: bool | None) -> None:
            if yes:
                for t in targets:
                    await self.call("approve", self.ws.approve, t.id)

        lines = [f"{t.id} {t.name}: runner {t.runner}; triggers: "
                 f"{', '.join(x.label for x in t.triggers) or 'none'}" for t in targets]
        self.push_screen(Confirm("Approve? These will be allowed to run:", lines), confirmed)

    def action_cancel(self) -> None:
        assert self.ws is not None
        targets = [t for t in self.targets() if allowed("cancel", t.state)]
        if not targets:
            self.notify("nothing to cancel: it has ended already", severity="warning")
            return

        async def confirmed(yes: bool | None) -> None:
            if yes:
                await self.each("cancel", "cancel", "cancelled")

        self.push_screen(Confirm(f"Cancel {len(targets)} session(s)? They end for good (history is kept):",
                                 [f"{t.id} {t.name} ({t.state})" for t in targets]), confirmed)

    def action_actions(self) -> None:
        targets = self.targets()
        if not targets:
            return
        keys: dict[str, str] = {}  # the key of each call, as the keymap has it, shown beside it
        for key, active in self.screen_stack[0].active_bindings.items():
            keys.setdefault(active.binding.action, self.get_key_display(Binding(key, "")))
        keys["suspend"] = keys["resume"] = keys.get("suspend_resume", "")
        actions = [Action(action, f"{label:<36}{keys.get(action, '')}", self.applies(action))
                   for action, label, _ in CALLS if self.check_action(action, ()) is not False]
        if not actions:
            self.notify("read-only monitor: no call can be made from here", severity="warning")
            return
        title = (f"Session {targets[0].id} ({targets[0].name})" if len(targets) == 1
                 else f"{len(targets)} tagged sessions")

        def done(action: str | None) -> None:
            if action:
                self.run_action_sync(action)

        self.push_screen(ActionMenu(title, actions), done)

    def run_action_sync(self, action: str) -> None:
        self.run_worker(self.run_action(action))

    def action_spawn(self) -> None:
        assert self.ws is not None
        agent = self.targets()[0].agent if self.targets() else ""

        async def named(name: str) -> None:
            async def spawn(agent_name: str) -> None:
                sid = await self.call("spawn", self.ws.spawn, name, agent_name)
                if sid:
                    self.notify(f"spawned {sid} ({name}) for {agent_name}", timeout=4)
                    await self.refresh_data()
                    self.table.move_to(sid)

            self._ask(f"Agent of {name}", agent, spawn)

        self._ask("Name of the new session", "", named)

    def action_load(self) -> None:
        assert self.ws is not None

        async def load(path: str) -> None:
            sid = await self.call("load", self.ws.load, os.path.abspath(os.path.expanduser(path)))
            if sid:
                self.notify(f"loaded as {sid}: its runner and triggers stay disarmed until you approve it (A)",
                            timeout=6)
                await self.refresh_data()
                self.table.move_to(sid)

        self._ask("Snapshot file to load", "", load)

    def action_set_priority(self) -> None:
        assert self.ws is not None
        target = self._single("priority")
        if target is None:
            return

        async def nice(text: str) -> None:
            try:
                value = int(text)
            except ValueError:
                self.notify("the priority is a whole number (-100..100)", severity="error")
                return
            await self.call("nice", self.ws.nice, target.id, value)

        self._ask(f"Priority of {target.id} (higher runs first)", str(target.priority), nice)

    def action_set_memory(self) -> None:
        assert self.ws is not None
        target = self._single("memory")
        if target is None:
            return

        async def memory(text: str) -> None:
            if text.startswith("-") and "=" not in text:
                if await self.call("memory", self.ws.memory_delete, target.id, text[1:]) is not None:
                    self.notify(f"{target.id}: deleted {text[1:]}", timeout=3)
                return
            key, sep, raw = text.partition("=")
            try:
                value = json.loads(raw) if sep else None
            except ValueError:
                self.notify(f"{key}: the value is not JSON (quote text: {key}=\"text\")", severity="error")
                return
            if not sep:
                self.notify("write KEY=JSON to set, -KEY to delete", severity="error")
                return
            if await self.call("memory", self.ws.memory_set, target.id, key.strip(), value) is not None:
                self.notify(f"{target.id}: {key.strip()} set", timeout=3)

        self._ask(f"Memory of {target.id}: KEY=JSON sets, -KEY deletes", "", memory)

    def action_bind(self) -> None:
        assert self.ws is not None
        target = self._single("bind")
        if target is None:
            return

        async def bind(text: str) -> None:
            kind, _, uri = text.partition(" ")
            uri = uri.strip()
            if kind in ("file", "folder", "db"):
                uri = os.path.abspath(os.path.expanduser(uri))
            if await self.call("bind", self.ws.bind, target.id, kind, uri) is not None:
                self.notify(f"{target.id}: {kind} {uri} bound", timeout=3)

        self._ask(f"Bind to {target.id}: KIND URI", "folder ", bind,
                  help="kinds: file, folder, db (paths are read against this monitor's folder), mcp, tool, url")

    def action_add_trigger(self) -> None:
        assert self.ws is not None
        target = self._single("trigger")
        if target is None:
            return

        async def trigger(text: str) -> None:
            try:
                kind, *words = shlex.split(text)
            except ValueError as exc:
                self.notify(f"cannot read that: {exc}", severity="error")
                return
            if kind == "watch":
                words = [os.path.abspath(os.path.expanduser(w)) for w in words]
            if await self.call("trigger", self.ws.trigger_add, target.id, kind, words) is not None:
                self.notify(f"{target.id}: {text} added", timeout=3)

        self._ask(f"Trigger for {target.id}", "", trigger,
                  help='watch PATH… · cron "0 9 1 * *" · every 5m · inbox · after SID')

    async def action_quit(self) -> None:
        """Quit; the steps this monitor's engine is running are interrupted, so ask first."""
        running = len(self._engine.live) if self._engine is not None and self._engine_task is not None else 0
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

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Tree view", "Show agents, sessions and forks as a tree (F5)", self.action_toggle_tree)
        yield SystemCommand("Hide or show ended sessions", "Toggle terminated sessions (H)",
                            self.action_toggle_terminated)


async def run_monitor(db: Path | str | None, *, readonly: bool = False, theme: str | None = None) -> int:
    """Open the monitor on a workspace; returns when the user quits."""
    app = ProcessionApp(db, readonly=readonly, theme=theme)
    await app.run_async()
    return 0
