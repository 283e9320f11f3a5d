"""The monitor's settings: a small TOML file in the user config folder.

``theme``, ``interval`` (seconds between refreshes), ``columns`` (keys, in order) and a
``[keys]`` table remapping bindings by id (``"suspend" = "z,ctrl+z"``). A bad value is
reported and replaced by its default; the file is rewritten only when the user changes a
setting in the monitor, keeping what else it holds (the engine's ``[notify]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procession.model import config as config_file
from procession.present import keymap
from procession.present.cells import BY_KEY, DEFAULT

DEFAULT_THEME = "procession"
DEFAULT_INTERVAL = 1.0


@dataclass(slots=True)
class Config:
    theme: str = DEFAULT_THEME
    interval: float = DEFAULT_INTERVAL
    columns: list[str] = field(default_factory=lambda: list(DEFAULT))
    keys: dict[str, str] = field(default_factory=dict)
    path: Path | None = None
    problems: list[str] = field(default_factory=list)

    def save(self) -> None:
        import tomli_w

        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data, _ = config_file.read(self.path)  # what the monitor does not set ([notify]) stays as the user wrote it
        data.update(theme=self.theme, interval=self.interval, columns=self.columns)
        data.pop("keys", None)
        if self.keys:
            data["keys"] = self.keys
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(tomli_w.dumps(data), encoding="utf-8")
        tmp.replace(self.path)


def load(path: Path | None = None) -> Config:
    path = path or config_file.path()
    config = Config(path=path)
    data, problem = config_file.read(path)  # a device, a FIFO or a file too large is not read either
    if problem:
        config.problems.append(f"{problem}; using defaults")
        return config
    config.problems += config_file.unknown_keys(data, keymap.BINDING_IDS, path)  # said, not ignored
    theme = data.get("theme", DEFAULT_THEME)
    if isinstance(theme, str):
        config.theme = theme
    else:
        config.problems.append(f"config {path}: theme must be a name")
    interval = data.get("interval", DEFAULT_INTERVAL)
    if isinstance(interval, (int, float)) and 0.1 <= interval <= 60:
        config.interval = float(interval)
    else:
        config.problems.append(f"config {path}: interval must be 0.1..60 seconds")
    columns = data.get("columns", list(DEFAULT))
    if isinstance(columns, list) and columns and all(c in BY_KEY for c in columns):
        config.columns = list(columns)
    else:
        config.problems.append(f"config {path}: columns must be a list of {', '.join(DEFAULT)}")
    keys = data.get("keys", {})
    if isinstance(keys, dict) and all(isinstance(v, str) for v in keys.values()):
        config.keys = dict(keys)
    else:
        config.problems.append(f"config {path}: [keys] maps binding ids to keys, like suspend = \"z\"")
    return config
