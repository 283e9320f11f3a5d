"""A session's own environment: settings stored with it, names passed through at run time.

``--env NAME=VALUE`` is for settings (``ANTHROPIC_BASE_URL``, ``OPENCODE_CONFIG``): the value
is stored, shown by ``show`` and kept in snapshots. ``--pass NAME`` stores only the name: the
engine's own value is handed to the step when it runs, so a secret never reaches the store,
the journal or a snapshot. A name that reads like a secret is refused for ``--env``, pointing
at ``--pass``: the mistake it prevents cannot be undone once the value is journaled.
"""

from __future__ import annotations

import re
from typing import Final

from .errors import InvalidArgument

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
#: Set by the engine for every step: a session cannot override them.
RESERVED: Final = frozenset({"PROCESSION_SESSION", "PROCESSION_DB", "PROCESSION_RUN"})
VALUE_MAX: Final = 32 * 1024
NAMES_MAX: Final = 100


def name(value: str) -> str:
    if not _NAME.fullmatch(value) or len(value) > 200:
        raise InvalidArgument(f"{value!r} is not an environment variable name (letters, digits, _)")
    if value in RESERVED:
        raise InvalidArgument(f"{value} is set by the engine for every step; a session cannot set it")
    return value


def setting(text: str) -> tuple[str, str]:
    """``NAME=VALUE``, checked: a name, a printable value, and nothing that reads like a secret."""
    key, sep, value = text.partition("=")
    if not sep:
        raise InvalidArgument(f"{text!r}: give NAME=VALUE (or --pass NAME to pass the engine's own value)")
    name(key)
    if _SECRET.search(key):
        raise InvalidArgument(f"{key} looks like a secret: it would be stored and journaled; use --pass {key}"
                              " to hand the engine's own value to the step at run time")
    if "\x00" in value or len(value) > VALUE_MAX:
        raise InvalidArgument(f"the value of {key} has a NUL character or is over {VALUE_MAX // 1024} KiB")
    return key, value


def merged(env: dict[str, str], passed: list[str], *, set: dict[str, str], passes: list[str],
           unset: list[str]) -> tuple[dict[str, str], list[str]]:
    """A session's environment after an ``env`` call: ``unset`` first, then ``set`` and ``passes``
    (a name is either stored or passed, never both)."""
    env, passed = dict(env), list(passed)
    for key in unset:
        name(key)
        if key not in env and key not in passed:
            raise InvalidArgument(f"{key} is not in the session's environment")
        env.pop(key, None)
        if key in passed:
            passed.remove(key)
    for key, value in set.items():
        env[key] = value
        if key in passed:
            passed.remove(key)
    for key in passes:
        name(key)
        env.pop(key, None)
        if key not in passed:
            passed.append(key)
    if len(env) + len(passed) > NAMES_MAX:
        raise InvalidArgument(f"a session's environment holds at most {NAMES_MAX} names")
    return env, passed
