"""Waiting for a condition instead of sleeping."""

from __future__ import annotations


async def until(predicate, timeout: float = 10.0, interval: float = 0.02):
    """Wait for ``predicate()`` (sync or async) to be truthy; return its value or fail."""
    import asyncio
    import inspect
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)
