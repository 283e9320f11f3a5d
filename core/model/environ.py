"""A session's own environment: settings stored with it, names passed through at run time,
and the little a run takes of the engine's own.

``--env NAME=VALUE`` is for settings (``ANTHROPIC_BASE_URL``, ``OPENCODE_CONFIG``): the value
is stored, shown by ``show`` and kept in snapshots. ``--pass NAME`` stores only the name: the
engine's own value is handed to the step when it runs, so a secret never reaches the store,
the journal or a snapshot. A name that reads like a secret is refused for ``--env``, pointing
at ``--pass``: the mistake it prevents cannot be undone once the value is journaled.

A run sees nothing else of the engine's environment but ``BASE`` (what any program needs to
run at all: where programs are, the home folder, the language, the terminal) and what its
runner needs (``RUNNER``: an agent CLI's own state folder, where its login is; the proxy and
certificate settings that let it reach its model). A secret exported where the engine runs
reaches no step that was not given its name; ``env SID`` shows these names beside the
session's own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from .agents import CLIS, NETWORK
from .errors import InvalidArgument

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
#: Set by the engine for every step: a session cannot override them (each run has a temporary
#: folder of its own, removed when it ends).
RESERVED: Final = frozenset({"PROCESSION_SESSION", "PROCESSION_DB", "PROCESSION_RUN", "PROCESSION_MCP_RELAYS", "TMPDIR",
                             "TMP", "TEMP"})
#: What every run takes of the engine's environment (and every ``LC_*``).
BASE: Final = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "COLORTERM", "TZ")
#: What each runner kind takes besides: an agent CLI's own state (its login, its sessions), and
#: how it reaches the network (``agents``: each CLI's descriptor); an ``acp:`` run takes its CLI's.
RUNNER: Final[Mapping[str, tuple[str, ...]]] = {**{kind: cli.inherits for kind, cli in CLIS.items()},
                                               "openai": NETWORK, "acp": NETWORK}
VALUE_MAX: Final = 32 * 1024
NAMES_MAX: Final = 100


def name(value: str, *, reserved: bool = False) -> str:
    """A variable's name, checked; ``reserved``: the engine's own names pass (to be removed)."""
    if not _NAME.fullmatch(value) or len(value) > 200:
        raise InvalidArgument(f"{value!r} is not an environment variable name (letters, digits, _)")
    if value in RESERVED and not reserved:
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
        name(key, reserved=True)
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


def inherited(kind: str, engine: Mapping[str, str]) -> dict[str, str]:
    """What a run of runner ``kind`` takes of the engine's environment ``engine``."""
    names = (*BASE, *RUNNER.get(kind, ()))
    found = {k: engine[k] for k in names if k in engine}
    found.update((k, v) for k, v in engine.items() if k.startswith("LC_"))
    return found


def taken(kind: str) -> tuple[str, ...]:
    """The names a run of runner ``kind`` takes of the engine's environment (where it has
    them), as ``env SID`` lists them."""
    return (*BASE, "LC_*", *RUNNER.get(kind, ()))


def session_environment(kind: str, settings: Mapping[str, str], passed: list[str],
                        engine: Mapping[str, str]) -> dict[str, str]:
    """A session's environment as its runner sees it: ``inherited``, its stored settings over
    that, and the engine's own values of the names it passes (refused, in one line, when the
    engine has no such variable)."""
    env = {**inherited(kind, engine), **settings}
    for key in passed:
        if key not in engine:
            raise InvalidArgument(f"the session passes ${key}, which the engine's environment does not have:"
                                  " set it where the engine runs (procession run, or the monitor)")
        env[key] = engine[key]
    return env
