"""What a run's tokens cost when its runner does not say: the user's price table.

Claude Code and opencode report what each run cost, and that figure is kept; Codex and the
``openai:`` loop report tokens only, so a cost budget could not hold them. ``[prices]`` in the
config file (``model.config``) names a price per million tokens by model, or by runner kind
for a CLI's default model::

    [prices."gpt-5.1"]
    input = 1.25          # US dollars per million tokens in
    output = 10.0         # ... out
    cache_read = 0.125    # optional: cached input read (default 0)
    cache_write = 0.0     # optional: input written to the cache (default 0)

    [prices.codex]        # a codex: session that names no model
    input = 1.25
    output = 10.0

There is no built-in table: prices change, and a stale figure would pass for a true one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from . import config
from .errors import ProcessionError
from .runner_spec import parse

PER: Final = 1_000_000
FIELDS: Final = ("input", "output", "cache_read", "cache_write")


@dataclass(slots=True, frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0

    def of(self, tokens_in: int, tokens_out: int, cache_read: int = 0, cache_write: int = 0) -> float:
        return (tokens_in * self.input + tokens_out * self.output + cache_read * self.cache_read
                + cache_write * self.cache_write) / PER


@dataclass(slots=True, frozen=True)
class Prices:
    by_name: dict[str, Price] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    def find(self, runner: str) -> Price | None:
        """The price of a run of ``runner``: its model's, else (no model named) its kind's."""
        try:
            spec = parse(runner)
        except ProcessionError:
            return None
        if spec.kind != "openai" and not spec.agent:  # a command's tokens are its own to price
            return None
        return self.by_name.get(spec.target) if spec.target else self.by_name.get(spec.kind)


def load(where: Path | None = None) -> Prices:
    """``[prices]`` of the config file; an entry that is not a price is said and left out."""
    found, problem = config.table("prices", where)
    if problem:
        return Prices(problems=(f"{problem}; no prices",))
    if found is None:
        return Prices()
    if not isinstance(found, dict):
        return Prices(problems=(f"config {where or config.path()}: [prices] must be a table of models",))
    prices, problems = {}, []
    for name, entry in found.items():
        numbers = entry if isinstance(entry, dict) else {}
        ok = (isinstance(entry, dict) and {"input", "output"} <= set(numbers) and set(numbers) <= set(FIELDS)
              and all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e6
                      for v in numbers.values()))
        if not ok:
            problems.append(f"config: [prices.{name!r}] takes input and output (dollars per million tokens),"
                            " and cache_read, cache_write; left out")
            continue
        prices[name] = Price(**{k: float(v) for k, v in numbers.items()})
    return Prices(prices, tuple(problems))
