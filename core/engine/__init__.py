"""The engine: one per workspace, it runs steps, fires triggers and obeys the store.

``Engine`` is imported on first use, so that a step started as ``python -m
procession.engine.runners.builtin`` does not pay for the engine and its dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import Engine, next_due

__all__ = ["Engine", "next_due"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'procession.engine' has no attribute {name!r}")
