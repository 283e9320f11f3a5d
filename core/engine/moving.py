"""Moving a session to another host (``move``): the engines' part at either end.

The call (``calls.moving``) only records the move. The source host's engine packs the
session's folder (``packing``; a fork's worktree with its branch, ``branches``) and its agent
CLI's own session into the move's row; the target host's engine unpacks the folder where the
session will work, places the agent's session where that host's CLI finds it, and takes the
session in one call (``placed``: its host, folder, bound paths and watches change together);
then the source's engine removes the folder it left, if nothing in it changed since it was
packed, and keeps it, saying so, if something did (``cleared``). The hosts reach each other
through the store only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
from typing import TYPE_CHECKING, Any, Final

from ..calls.files import carried
from ..calls.moving import step_paths
from ..model import hosts, transcripts
from ..model.errors import NotFound, ProcessionError, StoreBusy
from . import branches
from .packing import CARRIED_MAX, MoveFailed, Packed, clear, pack, unpack

if TYPE_CHECKING:
    from .ledger import Ledger

log = logging.getLogger("procession.engine")

#: What a worktree's folder holds that is not carried: its link to its repository's git folder.
GIT: Final = frozenset({".git"})


async def step(ledger: Ledger) -> None:
    """Do this host's part of every move that waits for it: pack what leaves, place what
    arrives, clear what left. A step that cannot be done ends its move failed, in one line
    (the session staying where it was); a store out of reach leaves it to the next look."""
    for move in await ledger.moves_waiting(hosts.this()):
        sid = move["session_id"]
        try:
            if move["stage"] == "packing":
                packed = await _pack(ledger, sid, move)
                log.info("session %d: packed for host %s (%d files)", sid, move["target"], packed.files)
            elif move["stage"] == "placing":
                await _place(ledger, sid, move)
                log.info("session %d: placed here from host %s, in %s", sid, move["source"], move["folder"])
            elif move["stage"] == "clearing":
                kept = await asyncio.to_thread(_clear, move) if move["files"] else None
                await ledger.cleared(sid, kept)
                log.info("session %d: moved to host %s%s", sid, move["target"], f"; {kept}" if kept else "")
        except (StoreBusy, NotFound):  # out of reach: again at the next look; taken back: nothing to do
            continue
        except Exception as exc:  # noqa: BLE001 - a step that cannot be done ends its move, never hangs it
            said = str(exc) if isinstance(exc, ProcessionError) else f"{type(exc).__name__}: {exc}"
            log.warning("session %d: the move to host %s failed: %s", sid, move["target"], said)
            with contextlib.suppress(ProcessionError):
                await ledger.move_failed(sid, said)


async def _pack(ledger: Ledger, sid: int, move: Any) -> Packed:
    """The folder packed (a fork's worktree without its ``.git``, its branch bundled beside)."""
    row, tree = await ledger.leaving(sid)
    if not move["files"]:
        packed = Packed()
    elif tree is not None and tree["kind"] == "git":
        packed = await asyncio.to_thread(pack, move["was"], CARRIED_MAX, GIT)
        packed.bundle, packed.tip = await asyncio.to_thread(branches.bundle, tree["repo"], tree["branch"],
                                                            CARRIED_MAX - packed.size)
    else:
        packed = await asyncio.to_thread(pack, move["was"])
    await ledger.packed(sid, packed, await carried(row, ledger.path))
    return packed


async def _place(ledger: Ledger, sid: int, move: Any) -> None:
    folder = move["folder"]
    tree = json.loads(move["tree"]) if move["tree"] else None
    repo, made = None, False
    if tree is not None and tree["kind"] == "git":
        repo = transcripts.remap(tree["repo"], step_paths(move))
        data, bundle = await ledger.move_pack(sid)
        made = await asyncio.to_thread(branches.place, bundle, data, repo, tree["branch"], tree["tip"], folder)
    elif move["files"]:
        await asyncio.to_thread(unpack, (await ledger.move_pack(sid))[0], folder)
    elif not os.path.isdir(folder):
        raise MoveFailed(f"{folder} is not a folder on host {move['target']} (moved with --no-files: it must be"
                         " there already)")
    try:
        await ledger.placed(sid, repo)
    except ProcessionError:
        if move["files"] and await _not_placed(ledger, sid):  # taken back meanwhile, or refused: it goes
            if repo is not None and tree is not None:
                await asyncio.to_thread(branches.take_back, repo, tree["branch"] if made else None, tree["tip"], folder)
            else:
                await asyncio.to_thread(shutil.rmtree, folder, True)
        raise


def _clear(move: Any) -> str | None:
    """The old folder removed if unchanged (a worktree's branch then too, if still where it was)."""
    tree = json.loads(move["tree"]) if move["tree"] else None
    git = tree is not None and tree["kind"] == "git"
    kept = clear(move["was"], json.loads(move["manifest"] or "[]"), GIT if git else frozenset(), placed=move["folder"])
    if kept is None and tree is not None:
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(move["was"]))  # the forks' folder beside the repository, if now empty
        if git:
            return branches.let_go(tree["repo"], tree["branch"], tree["tip"])
    return kept


async def _not_placed(ledger: Ledger, sid: int) -> bool:
    """Whether the store says the session was not placed here (a commit cut off may have
    happened: then, or when the store cannot say, the folder made here is kept)."""
    try:
        found = await ledger.move_info(sid)
    except ProcessionError:
        return False
    return found is not None and found.stage in ("placing", "cancelled", "failed")
