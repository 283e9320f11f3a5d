"""Where a shell has seen a workspace's journal to, so that ``procession wait`` sees what the
commands before it caused: ``send 2 q; activate 2; wait 2`` returns at once when the run had
ended before ``wait`` started, and a ``wait`` in a loop does not return the same run twice.

``activate`` and ``send`` put their own journal row here (the earliest since the last wait: a
run the ``send`` woke counts as well as the one ``activate`` queued); ``wait`` with no ``--since``
waits from here, then moves the place to the row that woke it. A shell is its process session
(``getsid``: a script, its subshells and ``$(...)`` are one), told apart from an earlier one with
the same id by its leader's start; each workspace file has its own place. With no place yet (a
new shell), ``wait`` waits from now.

Chosen over "the session's last activation": that would return a run already reported again
and again to a loop of ``wait``, and miss what a trigger started. The files are a few bytes,
under the user's runtime folder; those of shells that are gone are removed as others are written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Final

#: Places kept before those of shells that are gone are looked for and removed.
KEPT: Final = 64


def _folder() -> Path:
    """The user's runtime folder (``$XDG_RUNTIME_DIR``), else their state folder where there is none."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "procession"
    from platformdirs import user_state_dir

    return Path(user_state_dir("procession")) / "shells"


def _shell() -> str:
    """This process's shell: its session's id and its leader's start (0 where unknown)."""
    sid = os.getsid(0)
    try:
        started = Path(f"/proc/{sid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        started = "0"
    return f"{sid}-{started}"


def _path(db: Path | str) -> Path:
    workspace = hashlib.sha256(str(db if isinstance(db, str) else db.resolve()).encode()).hexdigest()[:16]
    return _folder() / f"{_shell()}-{workspace}.json"


def point(db: Path | str) -> int | None:
    """Where this shell has seen the journal of workspace ``db`` to (None: nowhere yet)."""
    try:
        found = json.loads(_path(db).read_text())
        return int(found["at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def caused(db: Path | str, at: int) -> None:
    """A call of this shell wrote journal row ``at``: a wait sees what came after it."""
    _write(db, at, caused=True)


def seen(db: Path | str, at: int) -> None:
    """A wait of this shell was woken by what journal row ``at`` holds (or timed out there)."""
    _write(db, at, caused=False)


def _write(db: Path | str, at: int, *, caused: bool) -> None:
    path = _path(db)
    try:
        before = json.loads(path.read_text())
        if caused and before.get("caused"):  # the earliest of the calls since the last wait
            at = min(at, int(before["at"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    with contextlib.suppress(OSError):  # a place not kept: the next wait waits from now
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}")
        tmp.write_text(json.dumps({"at": at, "caused": caused}))
        tmp.replace(path)
        _tidy(path.parent)


def _tidy(folder: Path) -> None:
    """Remove the places of shells that are gone, once there are more than ``KEPT``."""
    places = list(folder.glob("*.json"))
    if len(places) <= KEPT:
        return
    for place in places:
        sid = place.name.split("-", 1)[0]
        if sid.isdigit() and not Path(f"/proc/{sid}").exists():
            with contextlib.suppress(OSError):
                place.unlink()
