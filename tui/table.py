"""The process table: a line-API widget that draws only the rows on screen.

Rows are given as keys (``show``) in the order to show, over a session dictionary the app
keeps up to date; the widget formats a row only
when it is drawn, and caches the strip by the row's revision, so the cost of a refresh
depends on the screen, not on the number of sessions. The cursor and the tags are kept by
session id, never by position: they stay on the same sessions across refreshes, sorts and
filters.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from procession.present import words
from procession.present.words import fit, printable
from procession.model.records import SessionInfo

from procession.present.cells import Column
from .view import Heading, Prefixes

CACHE_ROWS = 512
MIN_FLEX = 12
#: Beyond this, the flexible column (the name) gives its width to growing ones (the runner).
MAX_FLEX = 44
#: Fixed columns are dropped from the right until the flexible one (the name) gets this many cells.
WANT_FLEX = 24


@dataclass(slots=True, frozen=True)
class Layout:
    """The columns drawn, each with its width, and whether there are more to either side:
    scrolled off to the left (``left``), or dropped at the right for want of room (``right``)."""

    cells: list[tuple[Column, int]]
    left: bool
    right: bool


def layout(columns: Sequence[Column], width: int, skip: int = 0) -> Layout:
    """The columns that fit a table width, each with its width: the flexible one takes what
    is left. On a narrow terminal the rightmost fixed columns go (as they would off the edge
    of htop's screen) rather than squeezing the name to nothing; ``skip`` columns are
    scrolled off to the left (Right and Left scroll, as htop's screen does sideways), but
    the ``frozen`` ones (SID, NAME, S: which row this is) stay where they are, in every
    scroll and at every width.

    One cell at the left of every row is kept for the cursor's and the tag's mark (the header's ``‹`` there says
    columns are scrolled off), and one at the right for the header's ``›`` once a column is
    dropped there."""
    scrolled = [c for c in columns if not c.frozen][:skip]
    shown = [c for c in columns if c not in scrolled]

    def spare() -> int:
        marks = 2 if len(shown) + skip < len(columns) else 1
        return width - marks - sum(c.width for c in shown) - (len(shown) - 1)

    want = WANT_FLEX if any(not c.width for c in shown) else 0
    while spare() < want:
        droppable = [i for i, c in enumerate(shown) if c.width and not c.frozen]
        if not droppable:
            break
        del shown[droppable[-1]]
    # the room beyond what the flexible column keeps (all of it where the name is not shown)
    # goes to the growing ones
    room, keep = (max(MIN_FLEX, spare()), MAX_FLEX) if want else (spare(), 0)
    growing = [c for c in shown if c.grow]
    extra = (room - keep) // len(growing) if growing and room > keep else 0
    flex = room - extra * len(growing)
    return Layout([(c, c.width + extra if c.grow else c.width or flex) for c in shown], skip > 0,
                  len(shown) + skip < len(columns))


#: The row's first cell: the cursor's row and tagged rows read without colour (a monochrome
#: terminal, a colour-blind eye); on the cursor's row a tag is said by its bold text.
CURSOR_MARK, TAG_MARK = "▶", "*"


def mark(cursor: bool, tagged: bool) -> str:
    return CURSOR_MARK if cursor else TAG_MARK if tagged else " "


class TableHeader(Widget):
    """The titles of the table's columns, laid out as its rows are (at its width and sideways
    scroll); the sorted one is marked, and ``‹`` / ``›`` at the edges say that columns are
    off to that side. A click asks to sort by that column."""

    DEFAULT_CSS = "TableHeader { height: 1; }"
    COMPONENT_CLASSES = {"header", "header--sorted"}

    class Clicked(Message):
        def __init__(self, column: str) -> None:
            super().__init__()
            self.column = column

    def __init__(self, table: SessionTable, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.table = table
        self.sort_key = "sid"
        self.reverse = False

    def configure(self, sort_key: str, reverse: bool) -> None:
        self.sort_key, self.reverse = sort_key, reverse
        self.refresh()

    def _layout(self) -> Layout:
        return layout(self.table.columns, self.table.size.width or self.size.width, self.table.skip)

    def render_line(self, y: int) -> Strip:
        base = self.get_component_rich_style("header")
        sorted_style = self.get_component_rich_style("header--sorted")
        shown = self._layout()
        segments = [Segment("‹" if shown.left else " ", sorted_style if shown.left else base)]
        for i, (column, width) in enumerate(shown.cells):
            title = column.title
            if column.key == self.sort_key:
                title += "▼" if self.reverse else "▲"
            segments.append(Segment(fit(title, width, column.right), sorted_style if column.key == self.sort_key
                                    else base))
            if i < len(shown.cells) - 1:
                segments.append(Segment(" ", base))
        if not shown.right:
            return Strip(segments).adjust_cell_length(self.size.width, base)
        strip = Strip(segments).adjust_cell_length(self.size.width - 1, base)
        return Strip([*strip, Segment("›", sorted_style)])

    def on_click(self, event: events.Click) -> None:
        x = 1
        for column, width in self._layout().cells:
            if x <= event.x < x + width + 1:
                self.post_message(self.Clicked(column.key))
                return
            x += width + 1


class SessionTable(ScrollView, can_focus=True):
    """The rows of the process table, with a cursor and tags."""

    COMPONENT_CLASSES = {
        "table--cursor", "table--tagged", "table--agent", "row--new", "row--ended",
        "state--R", "state--W", "state--Q", "state--S", "state--T", "state--Z",
        "bar--low", "bar--mid", "bar--high", "bar--empty", "cell--muted", "cell--agent", "cell--warning",
        "outcome--ok", "outcome--bad", "outcome--stopped",
    }
    BINDINGS = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "First", show=False),
        Binding("end", "jump(-1)", "Last", show=False),
        Binding("right", "scroll_columns(1)", "Scroll the columns right", show=False),
        Binding("left", "scroll_columns(-1)", "Scroll the columns left", show=False),
    ]

    class ColumnsScrolled(Message):
        """The columns moved sideways (the header follows)."""

    class Chosen(Message):
        """A row was double-clicked (or Enter pressed on it)."""

        def __init__(self, key: int | str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.keys: list[int | str] = []
        self.sessions: Mapping[int, SessionInfo] = {}
        self.headings: Mapping[str, Heading] = {}
        self.prefixes: Prefixes = Prefixes()
        self.cursor = 0
        self.cursor_key: int | str | None = None
        self.tags: set[int] = set()
        self.highlights: dict[int, str] = {}
        self.columns: list[Column] = []
        self.skip = 0  # columns scrolled off to the left (never a frozen one)
        self.now = 0.0
        self._cache: OrderedDict[tuple[object, ...], Strip] = OrderedDict()
        self._styles: dict[object, Style] = {}
        self._drawn_ages: dict[int, tuple[str, str]] = {}

    # ------------------------------------------------------------------ data

    @property
    def cursor_session(self) -> SessionInfo | None:
        key = self.cursor_key
        return self.sessions.get(key) if isinstance(key, int) else None

    def set_columns(self, columns: Sequence[Column]) -> None:
        self.columns = list(columns)
        self.skip = 0
        self._cache.clear()
        self.refresh()

    def show(self, keys: list[int | str], now: float, *, sessions: Mapping[int, SessionInfo] | None = None,
             headings: Mapping[str, Heading] | None = None, prefixes: Prefixes | None = None) -> None:
        """Show these rows, in this order (the list is kept, not copied, and may have been
        changed in place); the cursor stays on the session it was on."""
        self.keys = keys
        if sessions is not None:
            self.sessions = sessions
        self.headings = headings or {}
        self.prefixes = prefixes if prefixes is not None else Prefixes()
        self.now = now
        index = self.index_of(self.cursor_key) if self.cursor_key is not None else None
        if index is None:
            index = min(self.cursor, len(keys) - 1) if keys else 0
        self.cursor = index
        self.cursor_key = keys[index] if keys else None
        self.virtual_size = Size(self.size.width, len(keys))
        self.refresh()

    def index_of(self, key: int | str) -> int | None:
        """Where a row is (a C-speed scan: well under a millisecond at 100,000 rows)."""
        try:
            return self.keys.index(key)
        except ValueError:
            return None

    def tick(self, now: float) -> None:
        """Redraw for the passing of time: only the rows on screen whose ages read differently."""
        self.now = now
        top = int(self.scroll_offset.y)
        for y, key in enumerate(self.keys[top: top + self.size.height]):
            if isinstance(key, int) and self._drawn_ages.get(key) != self._ages(self.sessions[key]):
                self.refresh_line(y)

    def _ages(self, session: SessionInfo) -> tuple[str, str]:
        """What of a row depends on the clock: its age and its triggers' last firing."""
        return words.age(session.last_active, self.now), words.age(session.last_fired, self.now)

    def move_to(self, key: int | str, *, center: bool = False) -> bool:
        index = self.index_of(key)
        if index is None:
            return False
        self._set_cursor(index, center=center)
        return True

    def _set_cursor(self, index: int, *, center: bool = False) -> None:
        if not self.keys:
            return
        index = max(0, min(index, len(self.keys) - 1))
        old = self.cursor
        self.cursor = index
        self.cursor_key = self.keys[index]
        self._refresh_row(old)
        self._refresh_row(index)
        top = int(self.scroll_offset.y)
        height = self.scrollable_content_region.height or self.size.height
        if center:
            self.scroll_to(y=max(0, index - height // 2), animate=False)
        elif index < top:
            self.scroll_to(y=index, animate=False)
        elif index >= top + height:
            self.scroll_to(y=index - height + 1, animate=False)

    def _refresh_row(self, index: int) -> None:
        y = index - int(self.scroll_offset.y)
        if 0 <= y < self.size.height:
            self.refresh_line(y)

    def refresh_keys(self, keys: Iterable[int | str]) -> None:
        """Redraw these rows if they are on screen (their data changed, not their place)."""
        top = int(self.scroll_offset.y)
        visible = set(self.keys[top: top + self.size.height])
        for key in keys:
            if key in visible:
                index = self.index_of(key)
                if index is not None:
                    self._refresh_row(index)

    # ------------------------------------------------------------------ keys and mouse

    def action_cursor(self, delta: int) -> None:
        self._set_cursor(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self._set_cursor(self.cursor + direction * max(1, self.size.height - 1))

    def action_jump(self, where: int) -> None:
        self._set_cursor(0 if where == 0 else len(self.keys) - 1)

    def action_scroll_columns(self, step: int) -> None:
        """Right / Left: one column further to that side, while there are columns off it."""
        shown = layout(self.columns, self.size.width, self.skip)
        if (step > 0 and not shown.right) or (step < 0 and not shown.left):
            return
        self.skip += step
        self.refresh()
        self.post_message(self.ColumnsScrolled())

    def on_click(self, event: events.Click) -> None:
        index = int(self.scroll_offset.y) + event.y
        if 0 <= index < len(self.keys):
            self._set_cursor(index)
            if event.chain >= 2:
                self.post_message(self.Chosen(self.keys[index]))

    # ------------------------------------------------------------------ drawing

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()
        self._cache.clear()

    def _style(self, name: str) -> Style:
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = self.get_component_rich_style(name) if name else Style()
        return style

    def render_line(self, y: int) -> Strip:
        index = int(self.scroll_offset.y) + y
        width = self.size.width
        if index >= len(self.keys):
            return Strip.blank(width, self.rich_style)
        key = self.keys[index]
        if isinstance(key, str):
            heading = self.headings[key]
            flags = (index == self.cursor, False, "")
            cache_key: tuple[object, ...] = (key, heading.count, heading.tokens, heading.spend, width, flags)
        else:
            session = self.sessions[key]
            flags = (index == self.cursor, key in self.tags, self.highlights.get(key, ""))
            ages = self._drawn_ages[key] = self._ages(session)
            cache_key = (key, session.rev, session.host_lost, self.prefixes.get(key, ""), width, flags,
                         len(self.columns), self.skip, ages)
        strip = self._cache.get(cache_key)
        if strip is None:
            strip = self._render_row(key, width, *flags)
            self._cache[cache_key] = strip
            if len(self._cache) > CACHE_ROWS:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(cache_key)
        return strip

    def _base(self, cursor: bool, tagged: bool, highlight: str) -> Style:
        key = ("", cursor, tagged, highlight)
        style = self._styles.get(key)
        if style is None:
            style = self.rich_style
            if highlight:
                style = style + self._style(f"row--{highlight}")
            if tagged:
                style = style + self._style("table--tagged")
            if cursor:
                style = style + self._style("table--cursor")
            self._styles[key] = style
        return style

    def _part(self, base: Style, name: str, cursor: bool) -> Style:
        """A cell part's style over its row's (the cursor row stays one colour)."""
        if cursor or not name:
            return base
        key = (base, name)
        style = self._styles.get(key)
        if style is None:
            style = self._styles[key] = base + self._style(name)
        return style

    def _render_row(self, key: int | str, width: int, cursor: bool, tagged: bool, highlight: str) -> Strip:
        base = self._base(cursor, tagged, highlight)
        if isinstance(key, str):
            h = self.headings[key]
            spend = "" if h.spend is None else f", spent {min(h.spend, 9.99) * 100:.0f}% of a budget's cap"
            text = f"{printable(h.agent)}  ({words.plural(h.count, 'session')}, {words.count(h.tokens)} tokens{spend})"
            style = self._part(base, "table--agent", cursor)
            return Strip([Segment(mark(cursor, False), base), Segment(fit(text, width - 1), style)]
                         ).adjust_cell_length(width, style)
        session = self.sessions[key]
        prefix = self.prefixes.get(key, "")
        segments = [Segment(mark(cursor, tagged), base)]
        shown = layout(self.columns, width, self.skip).cells
        for i, (column, cell_width) in enumerate(shown):
            parts = column.cell(session, self.now)
            if column.key == "name" and prefix:
                parts = [(prefix, "cell--muted"), *parts]
            segments.extend(self._cell(parts, cell_width, column.right, base, cursor))
            if i < len(shown) - 1:
                segments.append(Segment(" ", base))
        return Strip(segments).adjust_cell_length(width, base)

    def _cell(self, parts: list[tuple[str, str]], width: int, right: bool, base: Style,
              cursor: bool) -> list[Segment]:
        total = sum(cell_len(t) for t, _ in parts)
        if total > width:
            text = fit("".join(t for t, _ in parts), width, right)
            return [Segment(text, self._part(base, parts[0][1] if parts else "", cursor))]
        out = []
        if right and total < width:
            out.append(Segment(" " * (width - total), base))
        for text, style in parts:
            out.append(Segment(text, self._part(base, style, cursor)))
        if not right and total < width:
            out.append(Segment(" " * (width - total), base))
        return out
