"""What an operator says of a shared workspace: that a host's engine is dead; who its people are.

From another machine an engine that stopped beating cannot be told dead from cut off: its
runs may be going on there. So no engine takes a host over from an engine of another machine
by itself (``Ledger.acquire`` refuses); a person who knows says ``procession host HOST --dead``,
which gives that lease up. The engine it named, should it come back, is fenced: its lease is no
longer its own, and each of its writes is refused (``store.base.fenced``).
"""

from __future__ import annotations

import re

from ..model import hosts
from ..model.calls import Call
from ..model.errors import InvalidArgument, NotFound
from ..model.outcomes import Dead, Teamed
from ..model.records import Holder
from ..store import engines, roles, rows
from .base import Calls
from .reads import process_alive
from .syscall import Act, syscall


class HostCalls(Calls):
    @syscall(Call.HOST, session=None, check=None)
    async def dead(self, act: Act, host: str) -> Dead:
        """Give up ``host``'s lease: its engine is dead, says the operator. Refused while it is
        heard (its heartbeat fresh by the workspace's clock), or, on its own machine, while
        its process lives: a live engine is stopped, not declared dead."""
        host = hosts.check(host)
        row = await rows.lease(act.tx, host)
        if row is None:
            raise NotFound(f"host {host} has no engine's lease: nothing to declare dead")
        holder = Holder(*row)
        silent = await act.tx.clock() - holder.heartbeat
        if silent <= hosts.ENGINE_STALE_S or holder.machine == hosts.machine() and process_alive(holder.pid,
                                                                                           holder.proc_start):
            raise InvalidArgument(f"host {host}'s engine (pid {holder.pid} on machine {holder.machine}) is alive:"
                                  f" it beat {max(silent, 0):.0f}s ago; stop it (SIGTERM) rather than declare it dead")
        await engines.drop_lease(act.tx, holder.token)
        return Dead(0, host, holder.pid, holder.machine, silent)


#: A role's name as ``team`` takes it: PostgreSQL's plain identifiers (never quoted, never
#: needing to be), and never one of the server's own.
_ROLE = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class TeamCalls(Calls):
    """People on a shared workspace: one database role each, so that the journal names them
    (``store.base.JOURNAL``: the role the server authenticated) whatever a caller says."""

    @syscall(Call.TEAM, session=None, check=None)
    async def team_add(self, act: Act, name: str, *, read_only: bool = False) -> Teamed:
        """A login role ``name`` that may use this workspace: every call (``read_only``: read
        only, as a viewer); the journal to read and append to, never to change (no role but its
        owner's may change a row of it). Its password or certificate is the operator's to give
        (``ALTER ROLE name PASSWORD …``, or the server's ``pg_hba.conf``)."""
        role = _role(act, name)
        if await roles.role_exists(act.tx, role):
            raise InvalidArgument(f"a role {role} exists already in this database: give another name, or grant it"
                                  " yourself")
        await roles.add_role(act.tx, role, await _schema(act), read_only)
        return Teamed(0, role, True, read_only)

    @syscall(Call.TEAM, session=None, check=None)
    async def team_remove(self, act: Act, name: str) -> Teamed:
        """Take ``name``'s role off this workspace (its privileges here revoked; the role
        itself is left to the operator, who may use it elsewhere)."""
        role = _role(act, name)
        if not await roles.role_exists(act.tx, role):
            raise NotFound(f"no role {role} in this database")
        await roles.revoke_role(act.tx, role, await _schema(act))
        return Teamed(0, role, False)

    async def team(self) -> list[tuple[str, bool]]:
        """The roles that may use this workspace, other than its owner's: each name, and
        whether it may only read."""
        if self.store.dialect != "postgresql":
            return []
        async with self.store.snapshot() as tx:
            found = await roles.team(tx)
        return [(r["name"], bool(r["read_only"])) for r in found]


def _role(act: Act, name: str) -> str:
    """``name`` as a role of this workspace's database, or a one-line refusal."""
    if act.tx.store.dialect != "postgresql":
        raise InvalidArgument("a file's workspace has no people of its own (its journal names the machine's user):"
                              " a team needs a shared, PostgreSQL workspace")
    if not _ROLE.fullmatch(name) or name.startswith("pg_"):
        raise InvalidArgument(f"{name[:70]!r} cannot name a role: use up to 63 lower-case letters, digits and"
                              " underscores, beginning with a letter or an underscore (not pg_)")
    return name


async def _schema(act: Act) -> str:
    """The workspace's schema (its tables'), as a name DDL can hold."""
    found = await roles.workspace_schema(act.tx)
    if not _ROLE.fullmatch(found):
        raise InvalidArgument(f"the workspace's schema {found[:70]!r} is not a plain name: grant roles on it yourself")
    return found
