"""A run's events are committed by a flusher; ending it never cuts a flush under way (the
events that flush had taken would be lost with its transaction)."""

from __future__ import annotations

import asyncio

from procession.engine.ledger import Emitted
from procession.engine.running import LiveRun


class SlowLedger:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.emitted: list[str] = []

    async def emit(self, sid, run, events):
        self.started.set()
        await asyncio.sleep(0.05)  # the transaction under way when the step ends
        self.emitted += [text for _, text, _ in events.messages]
        return Emitted(sid, run, len(events.messages), [])

    async def log(self, run, chunks):
        return list(range(len(chunks)))


async def test_ending_the_flusher_lets_the_flush_under_way_finish():
    ledger = SlowLedger()
    live = LiveRun(ledger, 1, 1, step=None, tracker=None, timeout=None)  # type: ignore[arg-type]
    live.sink("out", b'{"type": "message", "role": "assistant", "content": "said just before the end"}\n')
    flusher = asyncio.ensure_future(live.flusher())
    await asyncio.wait_for(ledger.started.wait(), 5)
    live.stop_flushing()
    await asyncio.wait_for(flusher, 5)
    assert ledger.emitted == ["said just before the end"]
