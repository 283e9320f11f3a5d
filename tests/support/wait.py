"""Waiting for an event instead of a clock.

A test waits for what it needs (a run ended, a file appeared, a process exited) and goes on
the moment it happens; no verdict may depend on how fast the machine is. A wait still has a
ceiling, `HANG_S`, but only as a hang guard: it ends a test whose event never comes (a CLI
that never exits) with a message saying what was awaited, instead of leaving the suite stuck.

`HANG_S` is fixed, not measured: it is far beyond the slowest step seen on a loaded 2-core
machine (an opencode turn took 45-65 s at load 10), so it is never reached by a slow machine,
only by a hung test. A machine slower than that (an emulated one) multiplies it with
``PROCESSION_TEST_SLOW`` (a factor, default 1), which scales pytest's per-test timeout too
(tests/conftest.py). A measured ceiling (the CLI's start time, taken once) would make the
verdict depend on the load at the moment it was measured, which is the flakiness this removes.
"""

from __future__ import annotations

import os


def slow_factor() -> float:
    """``PROCESSION_TEST_SLOW``: how many times slower than a loaded 2-core machine this one is."""
    try:
        return max(1.0, float(os.environ.get("PROCESSION_TEST_SLOW", "1")))
    except ValueError:
        raise SystemExit(f"PROCESSION_TEST_SLOW must be a number, not {os.environ['PROCESSION_TEST_SLOW']!r}") from None


HANG_S = 300.0 * slow_factor()


async def until(predicate, timeout: float | None = None, interval: float = 0.02):
    """Wait for ``predicate()`` (sync or async) to be truthy; return its value. ``timeout``
    (default `HANG_S`) is a hang guard; a shorter one belongs only to a test whose verdict is
    about time itself."""
    import asyncio
    import inspect
    import time

    limit = HANG_S if timeout is None else timeout
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {limit}s")
        await asyncio.sleep(interval)
