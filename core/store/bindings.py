"""The questions the binding and forking calls ask of what wakes sessions: their triggers'
specs (the other rows of triggers are ``rows``')."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .base import Row, Tx, said


async def woken_after(tx: Tx, sids: Sequence[int]) -> list[Row]:
    """``session_id, waker`` of the ``after`` triggers by which a session wakes when one of
    ``sids`` (its ``waker``) runs."""
    mark = said(tx, {"sqlite": "?", "postgresql": "CAST(? AS TEXT)"})  # (a JSON value read as text there)
    return await tx.all(
        "SELECT session_id, CAST(json_extract(spec, '$.session') AS INTEGER) AS waker FROM triggers"
        f" WHERE kind = 'after' AND json_extract(spec, '$.session') IN ({', '.join([mark] * len(sids))})",
        sids,
    )


async def set_trigger_spec(tx: Tx, trigger: int, spec: dict[str, Any]) -> None:
    await tx.execute("UPDATE triggers SET spec = ? WHERE id = ?", (json.dumps(spec), trigger))
