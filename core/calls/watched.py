"""Which files a watch trigger covers, and their fingerprint.

A watch holds absolute paths or globs. A path without glob characters covers itself and
everything below it; ``*`` stays within one folder, ``**`` crosses folders. Folders that tools
fill with churn (``.git``, ``node_modules``, virtual environments, caches) are never walked
or watched. A fingerprint (``scan``) is what a trigger remembers of its files, so that an
engine that starts after they changed catches up once.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..model.trigger_spec import IGNORED_DIRS

#: Files a fingerprint lists one by one; above this, a digest stands for them.
FINGERPRINT_FILES = 5_000
_GLOB = re.compile(r"[*?\[]")


def is_glob(pattern: str) -> bool:
    return bool(_GLOB.search(pattern))


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A regular expression matching the absolute paths ``pattern`` covers."""
    if not is_glob(pattern):
        return re.compile(re.escape(pattern.rstrip("/") or "/") + r"(?:/.*)?\Z", re.S)
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append(r"(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(r".*")
            i += 2
        elif pattern[i] == "*":
            out.append(r"[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append(r"[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z", re.S)


def root(pattern: str) -> tuple[Path, bool]:
    """The existing folder to watch for ``pattern``, and whether to watch it recursively."""
    parts = Path(pattern).parts
    fixed = [p for p in _prefix(parts)]
    path = Path(*fixed) if fixed else Path("/")
    recursive = len(fixed) < len(parts) or path.is_dir()
    if not recursive:
        path = path.parent
    while not path.is_dir():
        path, recursive = path.parent, True
    return path, recursive


def _prefix(parts: tuple[str, ...]) -> Iterable[str]:
    for part in parts:
        if is_glob(part):
            return
        yield part


def scan(patterns: Iterable[str]) -> dict[str, Any]:
    """A fingerprint of the files ``patterns`` cover: ``{"files": {path: [mtime_ns, size]}}``,
    or ``{"digest": ..., "count": n}`` when there are too many to list."""
    files: dict[str, list[int]] = {}
    regexes = [compile_pattern(p) for p in patterns]
    for pattern in patterns:
        base, recursive = root(pattern)
        for path in _walk(base, recursive):
            if path not in files and any(r.match(path) for r in regexes):
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                files[path] = [st.st_mtime_ns, st.st_size]
    if len(files) <= FINGERPRINT_FILES:
        return {"files": files}
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(f"{path}\0{files[path][0]}\0{files[path][1]}\n".encode("utf-8", "surrogateescape"))
    return {"digest": h.hexdigest(), "count": len(files)}


def _walk(base: Path, recursive: bool) -> Iterable[str]:
    if not recursive:
        try:
            yield from (e.path for e in os.scandir(base) if e.is_file())
        except OSError:
            return
        return
    for folder, dirs, names in os.walk(base):
        dirs[:] = [d for d in dirs if d not in IGNORED_DIRS]
        for name in names:
            yield os.path.join(folder, name)


def changed(before: dict[str, Any] | None, after: dict[str, Any]) -> list[str] | None:
    """Paths that differ between two fingerprints ([] when too many to list), or None if equal."""
    if before is None:
        return None
    if "files" in before and "files" in after:
        old, new = before["files"], after["files"]
        diff = sorted(p for p in old.keys() | new.keys() if old.get(p) != new.get(p))
        return diff or None
    return None if before == after else []
