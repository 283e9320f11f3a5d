"""The user's config file: ``config.toml`` in the user config folder, one file read by table.

The monitor keeps its settings at the top (``tui.config``) and its remapped keys in
``[keys]``; the engine reads ``[notify]`` (``engine.notify``), ``[prices]``
(``model.prices``) and ``[otel]`` (``engine.tracing``). Each reader takes its own table and says a mistake in it as a one-line
problem, leaving the others working. A key no reader takes (a typo, or a key at the wrong
level) would otherwise be ignored without a word: ``unknown_keys`` names each one, and
every face that reads the file says them (``procession config --check`` lists them all).
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Collection
from pathlib import Path
from typing import Any, Final

from . import user_files
from .errors import InvalidArgument

#: The keys at the top of the file: the monitor's settings, then each reader's table.
TOP_KEYS: Final = ("theme", "interval", "columns", "keys", "notify", "prices", "otel")
#: The keys of ``[notify]``.
NOTIFY_KEYS: Final = ("command", "reasons", "desktop", "detail", "push", "web", "buttons")


def path() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir("procession")) / "config.toml"


def read(where: Path | None = None) -> tuple[dict[str, Any], str | None]:
    """The whole config file (empty when there is none), or the problem that kept it from
    being read (a device, a FIFO or a file over ``user_files.SETTINGS_MAX`` is not read)."""
    where = where or path()
    try:
        return tomllib.loads(user_files.read_file(str(where), user_files.SETTINGS_MAX).decode("utf-8")), None
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, InvalidArgument) as exc:
        return {}, f"config {where}: {exc}"


def table(name: str, where: Path | None = None) -> tuple[Any, str | None]:
    """Table ``name`` of the config file (None when the file or the table is absent), or the
    problem that kept it from being read."""
    data, problem = read(where)
    return data.get(name), problem


def unknown_keys(data: dict[str, Any], bindings: Collection[str], where: Path | None = None) -> list[str]:
    """One line for each key of ``data`` (the config file, as ``read`` gives it) that no reader
    takes: at the top, in ``[notify]``, and in ``[keys]`` a binding id not in ``bindings``
    (the monitor's). Each line names the key as the file places it and, where it can, what
    was meant: a close known name, or the level a known key belongs at."""
    where = where or path()
    said = []
    for key in data:
        if key not in TOP_KEYS:
            said.append(_unknown(where, key, key, TOP_KEYS, NOTIFY_KEYS, "in [notify]"))
    for name, known in (("notify", NOTIFY_KEYS), ("keys", tuple(bindings))):
        found = data.get(name)
        for key in found if isinstance(found, dict) else ():
            if key not in known:
                said.append(_unknown(where, f"{name}.{key}", key, known, TOP_KEYS,
                                     "at the top of the file, before any [table]"))
    return said


def _unknown(where: Path, placed: str, key: str, known: Collection[str], elsewhere: Collection[str],
             there: str) -> str:
    """The line for one unknown key: ``placed`` is how the file places it (``keys.suspnd``)."""
    if key in elsewhere:
        hint = f" (it belongs {there})"
    else:
        close = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"config {where}: unknown key {placed!r}, ignored{hint}"
