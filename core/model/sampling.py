"""The ``openai:`` runner's settings of a session: its turn limit and its request fields.

They are session settings (its environment), so ``show`` lists them, snapshots keep them and
``env`` can change them like any other: ``PROCESSION_MAX_TURNS`` (model requests a run makes
at most) and ``PROCESSION_SAMPLING`` (a JSON object merged into every request: temperature,
max_tokens, any field the server takes).
"""

from __future__ import annotations

import json
from typing import Any, Final

from .errors import InvalidArgument

#: Model requests one run makes at most, unless the session says.
MAX_TURNS: Final = 20
MAX_TURNS_ENV: Final = "PROCESSION_MAX_TURNS"
SAMPLING_ENV: Final = "PROCESSION_SAMPLING"
#: Request fields the runner sets itself: a session cannot change them.
OWN_FIELDS: Final = frozenset({"model", "messages", "stream", "stream_options", "tools"})


def max_turns(env: dict[str, str]) -> int:
    """The session's turn limit; refused in one line when it is not a positive whole number."""
    raw = env.get(MAX_TURNS_ENV, "").strip()
    if not raw:
        return MAX_TURNS
    if not raw.isdigit() or int(raw) < 1:
        raise InvalidArgument(f"the session setting {MAX_TURNS_ENV} must be a whole number of 1 or more, not {raw[:40]!r}")
    return int(raw)


def fields(env: dict[str, str]) -> dict[str, Any]:
    """The request fields the session adds; refused in one line when they are not a JSON object."""
    raw = env.get(SAMPLING_ENV, "").strip()
    value = _json_object(raw, f"the session setting {SAMPLING_ENV} must be a JSON object, not {raw[:80]!r}")
    return {k: v for k, v in value.items() if k not in OWN_FIELDS}


def changed(env: dict[str, str], *, turns: int | None = None, temperature: float | None = None,
            max_tokens: int | None = None, extra: dict[str, Any] | None = None) -> dict[str, str]:
    """The settings to store for the changes given (a field set to null is removed)."""
    out: dict[str, str] = {}
    if turns is not None:
        if turns < 1:
            raise InvalidArgument("--max-turns must be 1 or more")
        out[MAX_TURNS_ENV] = str(turns)
    new = dict(extra or {})
    if temperature is not None:
        if not 0 <= temperature <= 2:
            raise InvalidArgument("the temperature must be between 0 and 2")
        new["temperature"] = temperature
    if max_tokens is not None:
        if max_tokens < 1:
            raise InvalidArgument("--max-tokens must be 1 or more")
        new["max_tokens"] = max_tokens
    if own := OWN_FIELDS & set(new):
        raise InvalidArgument(f"the runner sets {', '.join(sorted(own))} itself")
    if new:
        merged = {**fields(env), **new}
        out[SAMPLING_ENV] = json.dumps({k: v for k, v in merged.items() if v is not None}, sort_keys=True)
    return out


def request_fields(text: str) -> dict[str, Any]:
    """Request fields typed as one JSON object (blank: none); refused in one line otherwise."""
    return _json_object(text, f"the request fields must be one JSON object, like {{\"top_p\": 0.9}}, not {text[:80]!r}")


def _json_object(text: str, refusal: str) -> dict[str, Any]:
    """``text`` as one JSON object (blank: an empty one), else ``InvalidArgument(refusal)``."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise InvalidArgument(refusal)
    return value


def temperature(text: str) -> float:
    """A temperature as typed; refused in one line when it is not a number."""
    try:
        return float(text.strip())
    except ValueError:
        raise InvalidArgument(f"the temperature is a number between 0 and 2, not {text[:40]!r}") from None
