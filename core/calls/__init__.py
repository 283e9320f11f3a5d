"""The system-call table: every call that reads or changes sessions.

``Workspace`` is the table, one class made of its parts, each in a module named for what
its calls act on: ``reads`` (what faces show), ``context`` (messages, memory, compress),
``lifecycle`` (birth, settings, the lifecycle moves), ``lineage`` (fork, merge), ``files``
(save, load), ``moving`` (a session to another host), ``bindings`` (resources, triggers, approval), ``adopt`` (the agent CLIs' own
sessions: adopt, sync, attach), ``permissions`` (what an agent asks a person), ``agents`` (what an agent
acting as a session reaches, and waiting for an answer) and ``devices`` (the web face's paired devices). Every changing call is one
``BEGIN IMMEDIATE`` transaction made by ``@syscall``: it checks the lifecycle table, runs
the call, writes its journal row, and commits; a refusal raises a ``ProcessionError`` and
the transaction rolls back, so the store is exactly as it was. The CLI, the monitor and the
engine all call these methods; none of them writes to the store any other way.
"""

from __future__ import annotations

from .adopt import AdoptCalls
from .agents import AgentCalls
from .bindings import BindingCalls
from .budgets import BudgetCalls
from .context import ContextCalls
from .devices import DeviceCalls
from .hosts import HostCalls, TeamCalls
from .files import FileCalls
from .lifecycle import LifecycleCalls
from .lineage import LineageCalls
from .moving import MoveCalls
from .permissions import PermissionCalls
from .reads import ReadCalls


class Workspace(ReadCalls, ContextCalls, AdoptCalls, LifecycleCalls, LineageCalls, FileCalls, MoveCalls,
                BindingCalls, AgentCalls, PermissionCalls, BudgetCalls, DeviceCalls, HostCalls,
                TeamCalls):
    """An open workspace and every call that acts on it, on behalf of one actor.

    ``async with await Workspace.open(path) as ws: await ws.spawn("payroll", "hr")``
    """


__all__ = ["Workspace"]
