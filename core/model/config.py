"""The user's config file: ``config.toml`` in the user config folder, one file read by table.

The monitor keeps its settings at the top (``tui.config``); the engine reads ``[notify]``
(``engine.notify``) and ``[prices]`` (``model.prices``). Each reader takes its own table and
says a mistake in it as a one-line problem, leaving the others working.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from . import user_files
from .errors import InvalidArgument


def path() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir("procession")) / "config.toml"


def table(name: str, where: Path | None = None) -> tuple[Any, str | None]:
    """Table ``name`` of the config file (None when the file or the table is absent), or the
    problem that kept it from being read."""
    where = where or path()
    try:
        return tomllib.loads(user_files.read_file(str(where), user_files.SETTINGS_MAX).decode("utf-8")).get(name), None
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, InvalidArgument) as exc:
        return None, f"config {where}: {exc}"
