"""The agent CLIs running sessions outside Procession: a person used ``claude --resume ID``,
``codex resume ID`` or ``opencode -s ID`` in a terminal of their own, and the session is
live although no engine started it.

A process is taken for a session's CLI when its command line names the CLI's own session id,
or when it holds the session's transcript open (Codex keeps its rollout open while it runs;
opencode's shared database names no session, so only its command line counts); never when it
is a run of Procession's own (its environment carries the engine's ``PROCESSION_SESSION``: a
fork's first run names its parent's session, which is not open anywhere else). Read with
psutil; CPU needs two looks at a process, so a ``Looker`` keeps the processes it has seen.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..model import transcripts
from ..model.records import SessionInfo

if TYPE_CHECKING:
    import psutil

#: The words that make a process worth a closer look (its name, or a script on its command line):
#: the CLIs whose own sessions Procession reads.
_CLIS = transcripts.CLIS


@dataclass(slots=True, frozen=True)
class Live:
    pid: int
    cpu: float | None
    rss: int


@dataclass(slots=True)
class Looker:
    """Finds, each time it is asked, which of the given sessions a CLI runs outside."""

    seen: dict[int, psutil.Process] = field(default_factory=dict)

    def look(self, refs: Mapping[int, Mapping[str, Any]]) -> dict[int, Live]:
        """``refs``: session -> its agent reference. Sessions found -> their CLI's process."""
        import psutil  # here: every command imports the calls, few look

        by_id = {str(ref["id"]): sid for sid, ref in refs.items() if ref.get("id")}
        by_file = {str(ref["transcript"]): sid for sid, ref in refs.items()
                   if ref.get("transcript") and ref.get("cli") != "opencode"}
        found: dict[int, Live] = {}
        alive: set[int] = set()
        if not by_id and not by_file:  # nothing to look for: no process is read
            self.seen.clear()
            return found
        me = os.getpid()
        for proc in psutil.process_iter(["pid", "name", "cmdline"]):
            info = proc.info
            words = info.get("cmdline") or []
            if info["pid"] == me or not _is_cli(info.get("name") or "", words):
                continue
            sid = next((by_id[w] for w in words if w in by_id), None)
            if sid is None and by_file:
                try:
                    sid = next((by_file[f.path] for f in proc.open_files() if f.path in by_file), None)
                except psutil.Error:
                    continue
            if sid is None or sid in found or _procession_s(proc):
                continue
            alive.add(info["pid"])
            known = self.seen.get(info["pid"])
            try:
                if known is None:  # the first look only starts its CPU clock
                    known = self.seen[info["pid"]] = proc
                    cpu = known.cpu_percent(None) and None
                else:
                    cpu = known.cpu_percent(None)
                found[sid] = Live(info["pid"], cpu, known.memory_info().rss)
            except psutil.Error:
                continue
        for pid in set(self.seen) - alive:
            del self.seen[pid]
        return found


def _procession_s(proc: psutil.Process) -> bool:
    """Whether a process is a step of one of Procession's runs (the engine marks each)."""
    import psutil

    try:
        return "PROCESSION_SESSION" in proc.environ()
    except psutil.Error:
        return False


def _is_cli(name: str, words: list[str]) -> bool:
    if any(cli in name for cli in _CLIS):
        return True
    return bool(words) and any(cli in os.path.basename(w) for w in words[:2] for cli in _CLIS)


def marked(info: SessionInfo, live: Live | None) -> SessionInfo:
    """``info`` as a table shows it: with its CLI's process (pid, CPU, RSS) while that runs it
    outside and no step of Procession's does, without it once it stopped."""
    if live is not None and info.pid is None:
        return dataclasses.replace(info, outside=live.pid, cpu=live.cpu, rss=live.rss)
    if live is None and info.outside is not None:
        return dataclasses.replace(info, outside=None, cpu=None, rss=None)
    return info
