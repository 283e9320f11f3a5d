"""The header meters, as htop has: sessions by state, run slots, context, firings, engine."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.widget import Widget

from procession.present import words

from procession.present.cells import bar

from .feed import Header

STATES = (("R", "running"), ("W", "waiting"), ("Q", "ready"), ("S", "sleeping"), ("T", "suspended"),
          ("Z", "terminated"))


class Meters(Widget):
    """Two lines of meters; ``show`` hands them new figures."""

    DEFAULT_CSS = "Meters { height: 2; }"
    COMPONENT_CLASSES = {"meter--label", "meter--value", "meter--paused",
                         "state--R", "state--W", "state--Q", "state--S", "state--T", "state--Z",
                         "bar--low", "bar--mid", "bar--high", "bar--empty"}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stats = Header({}, 0, 0, 0, 0, None)
        self.engine = "none"
        self.slots = 0
        self.note = ""
        self.tokenizer = ""
        self.clock = time.time
        self._shown: tuple[Any, ...] = ()

    def show(self, stats: Header, engine: str, slots: int, note: str = "") -> None:
        """Redrawn only when what they show changed: the figures, or the clock's second (a tick
        that changed no figure of theirs costs no render)."""
        shown = (stats, engine, slots, note, int(self.clock()))
        if shown != self._shown:
            self._shown = shown
            self.stats, self.engine, self.slots, self.note = stats, engine, slots, note
            self.refresh()

    def counted_by(self) -> str:
        """Who counted the context the header sums: the workspace's counter (``bytes/4`` is an
        estimate) for the sessions Procession counts, the agents for those whose agent CLI
        reports its own context; both when both are among the live sessions."""
        counted = self.stats.counted
        if not counted.get("agent"):
            return self.tokenizer
        return f"{self.tokenizer} + agents' own" if counted.get("procession") else "agents' own"

    def _bar(self, text: Text, label: str, fraction: float, value: str, cells: int = 16) -> None:
        text.append(f"{label}[", self.get_component_rich_style("meter--label"))
        for part, style in bar(fraction, cells):
            text.append(part, self.get_component_rich_style(style))
        text.append(f" {value}", self.get_component_rich_style("meter--value"))
        text.append("]  ", self.get_component_rich_style("meter--label"))

    def render(self) -> Text:
        label = self.get_component_rich_style("meter--label")
        value = self.get_component_rich_style("meter--value")
        stats = self.stats
        states = stats.states
        width = max(self.content_region.width, 20)
        first = Text()
        first.append("Sessions[", label)
        for i, (letter, name) in enumerate(STATES):
            quiet = letter == "W" and not states.get(name)  # it calls for attention only when someone waits
            first.append(f"{letter} ", label if quiet else self.get_component_rich_style(f"state--{letter}"))
            first.append(f"{states.get(name, 0)}" + ("  " if i < len(STATES) - 1 else ""), value)
        first.append("]  ", label)
        running = stats.running
        slots = max(self.slots, 1)
        slot_text = f"{running}/{self.slots}" if self.slots else f"{running}/-"
        tokens, windows = stats.context_tokens, stats.context_windows
        context_text = f"{words.count(tokens)}/{words.count(windows)}"
        # The bars shrink on a narrow terminal so that the first line never wraps into the second.
        room = width - first.cell_len - len("Slots[ ]  Context[ ]") - len(slot_text) - len(context_text)
        slot_cells, context_cells = max(0, min(10, room * 2 // 5)), max(0, min(16, room - room * 2 // 5))
        self._bar(first, "Slots", running / slots, slot_text, slot_cells)
        self._bar(first, "Context", tokens / windows if windows else 0.0, context_text, context_cells)
        first.rstrip()
        first.truncate(width, overflow="ellipsis")
        second = Text()
        second.append("Fired(1m) ", label)
        second.append(f"{stats.fired:<5}", value)
        second.append("Engine ", label)
        second.append(f"{self.engine}  ", value)
        second.append("Tokens ", label)
        second.append(f"{self.counted_by()}  ", value)
        if self.note:
            second.append(f" {self.note} ", self.get_component_rich_style("meter--paused"))
        # the clock keeps its place at the right edge; what does not fit before it is cut
        clock = time.strftime("%H:%M:%S", time.localtime(self.clock()))
        second.truncate(width - len(clock) - 1, overflow="ellipsis", pad=True)
        second.append(f" {clock}", value)
        return Text("\n").join([first, second])
