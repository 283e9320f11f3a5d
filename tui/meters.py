"""The header meters, as htop has: sessions by state, run slots, context, firings, engine."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.widget import Widget

from procession import humanize

from .columns import bar

STATES = (("R", "running"), ("Q", "ready"), ("S", "sleeping"), ("T", "suspended"), ("Z", "terminated"))


class Meters(Widget):
    """Two lines of meters; ``show`` hands them new figures."""

    DEFAULT_CSS = "Meters { height: 2; }"
    COMPONENT_CLASSES = {"meter--label", "meter--value", "meter--paused",
                         "state--R", "state--Q", "state--S", "state--T", "state--Z",
                         "bar--low", "bar--mid", "bar--high", "bar--empty"}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stats: dict[str, Any] = {}
        self.engine = "none"
        self.slots = 0
        self.note = ""
        self.tokenizer = ""
        self.clock = time.time

    def show(self, stats: dict[str, Any], engine: str, slots: int, note: str = "") -> None:
        self.stats, self.engine, self.slots, self.note = stats, engine, slots, note
        self.refresh()

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
        states = stats.get("states", {})
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append("Sessions[", label)
        for letter, name in STATES:
            line.append(f"{letter} ", self.get_component_rich_style(f"state--{letter}"))
            line.append(f"{states.get(name, 0)}  ", value)
        line.append("]  ", label)
        running = stats.get("running", 0)
        slots = max(self.slots, 1)
        self._bar(line, "Slots", running / slots, f"{running}/{self.slots}" if self.slots else f"{running}/-", 10)
        tokens, windows = stats.get("context_tokens", 0), stats.get("context_windows", 0)
        self._bar(line, "Context", tokens / windows if windows else 0.0,
                  f"{humanize.count(tokens)}/{humanize.count(windows)}")
        line.append("\n")
        line.append("Fired(1m) ", label)
        line.append(f"{stats.get('fired', 0):<5}", value)
        line.append("Engine ", label)
        line.append(f"{self.engine:<30}", value)
        if self.tokenizer:
            line.append("Tokens ", label)
            line.append(f"{self.tokenizer:<10}", value)
        if self.note:
            line.append(f" {self.note} ", self.get_component_rich_style("meter--paused"))
        line.append(f"  {time.strftime('%H:%M:%S', time.localtime(self.clock()))}", value)
        return line
