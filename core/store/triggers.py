"""Triggers as the engine reads them to decide which fire, and what they remember between
firings (``set_trigger_state``); a call's own trigger rows are ``rows``'."""

from __future__ import annotations

import json
from typing import Any

from .base import Tx


async def set_trigger_state(tx: Tx, trigger: int, state: dict[str, Any]) -> None:
    await tx.execute("UPDATE triggers SET state = ? WHERE id = ?", (json.dumps(state), trigger))
