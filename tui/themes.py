"""Colour themes as data files: the ones in ``procession.themes`` and the user's own.

A theme file is TOML: a ``name``, ``dark``, Textual's theme colours (``primary``,
``background``...) and an optional ``[variables]`` table. Files in the user's config
folder (``<config>/themes/*.toml``) add to the built-in ones or replace one of the same
name. A file with a mistake is reported — which file, which field — and skipped; it never
stops the monitor.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
from textual.theme import Theme

from procession.model import user_files
from procession.model.errors import InvalidArgument

COLOURS = ("primary", "secondary", "accent", "warning", "error", "success", "foreground", "background",
           "surface", "panel", "boost")
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")


@dataclass(slots=True, frozen=True)
class ThemeProblem:
    file: str
    field: str
    reason: str

    def __str__(self) -> str:
        return f"theme file {self.file}: {self.field}: {self.reason}; skipped"


class _Bad(Exception):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field, self.reason = field, reason


def parse(text: str) -> Theme:
    """A Textual theme from a theme file's text; ``_Bad`` names the faulty field."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _Bad("(file)", f"not valid TOML: {exc}") from None
    name = data.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _Bad("name", "must be lowercase letters, digits and dashes")
    if "primary" not in data:
        raise _Bad("primary", "is required")
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise _Bad("dark", "must be true or false")
    colours: dict[str, Any] = {}
    for field in COLOURS:
        if field in data:
            colours[field] = _colour(field, data[field])
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise _Bad("variables", "must be a table")
    for key, value in variables.items():
        if not isinstance(value, str):
            raise _Bad(f"variables.{key}", "must be a string")
    unknown = set(data) - {"name", "dark", "variables", *COLOURS}
    if unknown:
        raise _Bad(sorted(unknown)[0], "is not a theme field")
    return Theme(name=name, dark=dark, variables=dict(variables), **colours)


def _colour(field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad(field, "must be a colour string like \"#1e90ff\"")
    try:
        Color.parse(value)
    except ColorParseError:
        raise _Bad(field, f"{value!r} is not a colour") from None
    return value


def load_file(path: Path) -> Theme | ThemeProblem:
    try:
        return parse(user_files.read_file(str(path), user_files.SETTINGS_MAX).decode("utf-8"))
    except _Bad as bad:
        return ThemeProblem(str(path), bad.field, bad.reason)
    except (OSError, UnicodeDecodeError, InvalidArgument) as exc:  # a FIFO, a device, too large: not read
        return ThemeProblem(str(path), "(file)", f"cannot be read: {exc}")


def user_folder() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir("procession")) / "themes"


def load_all(folder: Path | None = None) -> tuple[dict[str, Theme], list[ThemeProblem]]:
    """Built-in themes, then the user's (which win on a name clash), and the problems met."""
    themes: dict[str, Theme] = {}
    problems: list[ThemeProblem] = []
    builtin = resources.files("procession.themes")
    files = sorted((p for p in builtin.iterdir() if p.name.endswith(".toml")), key=lambda p: p.name)
    folder = folder or user_folder()
    user = sorted(folder.glob("*.toml")) if folder.is_dir() else []
    for path in [*files, *user]:
        with resources.as_file(path) as real:
            loaded = load_file(Path(real))
        if isinstance(loaded, ThemeProblem):
            problems.append(loaded)
        else:
            themes[loaded.name] = loaded
    return themes, problems
