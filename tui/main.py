"""The main screen: meters, the process table, the search and filter bar, and their keys.

Its bindings are the table's (search, filter, tree, sort, tags, follow, pause, details) and
one per call of the registry; app-wide keys (help, setup, quit, the palette) are the app's.
The rows come from the app's ``Feed``; this screen only shows them and says which sessions
the next call acts on.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Input

from procession.model.records import SessionInfo
from procession.present.cells import BY_KEY

from .calling import Calling, call_bindings
from .dialogs import ActionMenu, Choice
from .meters import Meters
from .said import Said
from .table import SessionTable, TableHeader
from .view import ViewSpec, matches

AGENT = "agent:"


class MainScreen(Calling):
    BINDINGS = [
        Binding("f3,slash", "search", "Search", key_display="F3", id="search"),
        Binding("f4,backslash", "filter", "Filter", key_display="F4", id="filter"),
        Binding("ctrl+f", "said", "Find what was said", show=False, id="said"),
        Binding("f5,t", "toggle_tree", "Tree", key_display="F5", id="tree"),
        Binding("f6", "sort_menu", "Sort", key_display="F6", id="sort"),
        Binding("greater_than_sign,full_stop", "sort_column(1)", "Sort by the next column", show=False,
                id="sort_next"),
        Binding("less_than_sign,comma", "sort_column(-1)", "Sort by the previous column", show=False,
                id="sort_prev"),
        Binding("I", "invert_sort", "Invert the sort", show=False, id="invert"),
        Binding("space", "tag", "Tag (calls act on tagged rows)", show=False, id="tag"),
        Binding("U", "untag_all", "Untag all", show=False, id="untag"),
        Binding("enter", "details", "Details of the session", show=False, id="details"),
        Binding("F", "follow", "Follow the session", show=False, id="follow"),
        Binding("Z", "pause", "Pause the display", show=False, id="pause"),
        Binding("H", "toggle_terminated", "Hide or show ended sessions", show=False, id="terminated"),
        Binding("escape", "clear", "Clear the filter", show=False, id="clear"),
        *call_bindings(),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.table = SessionTable(id="table")
        self.bar_mode = ""
        self.search_text = ""

    def compose(self) -> ComposeResult:
        yield Meters(id="meters")
        yield TableHeader(self.table, id="header")
        yield self.table
        yield Input(id="bar", classes="hidden")
        # F1..F10 fit an 80-column terminal: compact, and Ctrl+P is in the help instead
        yield Footer(compact=True, show_command_palette=False)

    @property
    def spec(self) -> ViewSpec:
        return self.monitor.feed.view.spec

    async def on_mount(self) -> None:
        monitor = self.monitor
        self.table.sessions = monitor.feed.sessions
        meters = self.query_one(Meters)
        meters.tokenizer, meters.clock = monitor.ws.tokenizer, monitor.clock
        self.configure_columns(monitor.settings.columns)
        self.table.focus()
        await monitor.load()

    # ------------------------------------------------------------------ targets

    def targets(self) -> list[SessionInfo]:
        """The tagged sessions (those a filter hides are left alone), else the cursor's; on an
        agent's row of the tree, that agent's live sessions."""
        feed = self.monitor.feed
        if self.table.tags:
            return [feed.sessions[s] for s in sorted(self.table.tags) if s in feed.view.shown]
        key = self.table.cursor_key
        if isinstance(key, str) and key.startswith(AGENT):
            return feed.agent_sessions(key[len(AGENT):])
        session = self.table.cursor_session
        return [session] if session else []

    def agent_row(self) -> str | None:
        key = self.table.cursor_key
        return key[len(AGENT):] if not self.table.tags and isinstance(key, str) and key.startswith(AGENT) else None

    # ------------------------------------------------------------------ showing rows

    def show_rows(self) -> None:
        view = self.monitor.feed.view
        self.table.show(view.keys, self.monitor.clock(), headings=view.headings, prefixes=view.prefixes)
        self.follow()

    def follow(self) -> None:
        """F: the followed session stays under the cursor, in view, wherever it moves."""
        following = self.monitor.following
        if following is not None:
            self.table.move_to(following, center=self.table.cursor_key != following)

    def rebuild(self) -> None:
        """Recompute the order of rows from scratch (after a change of sort, filter or view)."""
        self.monitor.feed.view.rebuild(self.monitor.feed.sessions)
        self.show_rows()

    def configure_columns(self, keys: list[str]) -> None:
        columns = [BY_KEY[k] for k in keys if k in BY_KEY]
        self.table.set_columns(columns)
        if self.spec.sort not in keys:
            self.spec.sort = columns[0].key
        self.query_one(TableHeader).configure(self.spec.sort, self.spec.reverse)

    # ------------------------------------------------------------------ search and filter

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
        """F3 (or /): the next match of the search, as in htop; the bar is shown with the search
        selected, so that typing starts a new one. The first opens an empty bar."""
        if self.bar_mode != "search":
            self._show_bar("search", "search: name, agent or state — F3 next, Enter or Esc closes;"
                           " Ctrl+F: what was said", self.search_text)
        self._next_match(self.search_text, skip=True)

    def action_said(self) -> None:
        """Ctrl+F: find what was said, in every session's messages."""
        self._hide_bar()
        self.app.push_screen(Said())

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
            self.monitor.header_soon()

    @on(Input.Submitted, "#bar")
    def bar_submitted(self, event: Input.Submitted) -> None:
        self._hide_bar()

    def _next_match(self, query: str, *, skip: bool) -> None:
        """Move to the next session matching ``query``. While typing, a miss only turns the bar
        red (a toast per keystroke is noise); F3 with no match says so."""
        keys = self.table.keys
        sessions = self.monitor.feed.sessions
        bar = self.query_one("#bar", Input)
        bar.remove_class("-nomatch")
        if not query or not keys:
            return
        start = self.table.cursor + (1 if skip else 0)
        for offset in range(len(keys)):
            key = keys[(start + offset) % len(keys)]
            if isinstance(key, int) and matches(sessions[key], query):
                self.table.move_to(key)
                return
        bar.add_class("-nomatch")
        if skip:
            self.monitor.notify(f"no session matches {query!r}", severity="warning", timeout=2)

    def action_clear(self) -> None:
        if self.bar_mode == "filter" or (not self.bar_mode and self.spec.filter):
            self.spec.filter = ""
            self.rebuild()
        self._hide_bar()
        self.monitor.header_soon()

    # ------------------------------------------------------------------ tree and sort

    def action_toggle_tree(self) -> None:
        self.spec.tree = not self.spec.tree
        self.rebuild()

    def action_sort_menu(self) -> None:
        columns = list(self.table.columns)

        def done(key: str | None) -> None:
            if key:
                self.sort_by(key)

        self.app.push_screen(ActionMenu("Sort by", [Choice(c.key, f"{c.title:<9} {c.help}") for c in columns]), done)

    def sort_by(self, key: str) -> None:
        if self.spec.sort == key:
            self.spec.reverse = not self.spec.reverse
        else:
            self.spec.sort, self.spec.reverse = key, False
        self.query_one(TableHeader).configure(self.spec.sort, self.spec.reverse)
        self.rebuild()

    def action_sort_column(self, step: int) -> None:
        keys = [c.key for c in self.table.columns]
        index = (keys.index(self.spec.sort) + step) % len(keys) if self.spec.sort in keys else 0
        self.spec.sort, self.spec.reverse = keys[index], False
        self.query_one(TableHeader).configure(self.spec.sort, self.spec.reverse)
        self.rebuild()

    def action_invert_sort(self) -> None:
        self.sort_by(self.spec.sort)

    @on(SessionTable.ColumnsScrolled)
    def columns_scrolled(self) -> None:
        self.query_one(TableHeader).refresh()

    @on(TableHeader.Clicked)
    def header_clicked(self, event: TableHeader.Clicked) -> None:
        self.sort_by(event.column)

    # ------------------------------------------------------------------ tags, details, follow, pause

    def action_tag(self) -> None:
        """Tag the row (an agent's row tags all its live sessions) and move down."""
        key = self.table.cursor_key
        if isinstance(key, str) and key.startswith(AGENT):
            sids = {s.id for s in self.monitor.feed.agent_sessions(key[len(AGENT):])}
            if sids <= self.table.tags:
                self.table.tags -= sids
            else:
                self.table.tags |= sids
            self.table.refresh_keys([key, *sids])
        elif isinstance(key, int):
            self.table.tags ^= {key}
            self.table.refresh_keys([key])
        else:
            return
        self.table.action_cursor(1)

    def action_untag_all(self) -> None:
        tagged = list(self.table.tags)
        self.table.tags.clear()
        self.table.refresh_keys(tagged)

    def action_details(self) -> None:
        session = self.table.cursor_session
        if session is not None:
            self.monitor.open_detail(session.id)

    @on(SessionTable.Chosen)
    def chosen(self, event: SessionTable.Chosen) -> None:
        if isinstance(event.key, int):
            self.monitor.open_detail(event.key)

    def action_follow(self) -> None:
        session = self.table.cursor_session
        self.monitor.following = None if self.monitor.following is not None or session is None else session.id
        self.monitor.header_soon()

    def action_pause(self) -> None:
        self.monitor.paused = not self.monitor.paused
        self.monitor.dirty = True
        self.monitor.header_soon()

    def action_toggle_terminated(self) -> None:
        self.spec.show_terminated = not self.spec.show_terminated
        self.rebuild()
        self.monitor.header_soon()
