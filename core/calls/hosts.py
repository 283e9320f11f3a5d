"""What an operator says of a host of a shared workspace: that its engine is dead.

From another machine an engine that stopped beating cannot be told dead from cut off: its
runs may be going on there. So no engine takes a host over from an engine of another machine
by itself (``Ledger.acquire`` refuses); a person who knows says ``procession host HOST --dead``,
which gives that lease up. The engine it named, should it come back, is fenced: its lease is no
longer its own, and each of its writes is refused (``store.base.fenced``).
"""

from __future__ import annotations

from ..model import hosts
from ..model.calls import Call
from ..model.errors import InvalidArgument, NotFound
from ..model.outcomes import Dead
from ..model.records import Holder
from ..store import rows
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
        await rows.drop_lease(act.tx, holder.token)
        return Dead(0, host, holder.pid, holder.machine, silent)
