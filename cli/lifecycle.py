"""Commands of a session's life: spawn, set, the lifecycle moves, nice, migrate."""

from __future__ import annotations

import argparse
import asyncio
import json
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from procession.calls import Workspace
from procession.calls.lifecycle import COMPRESS_METHODS, DEFAULT_WINDOW, EXTRACTIVE, MODEL
from procession.model import bounds, environ, runner_spec
from procession.model.calls import Call
from procession.model.errors import ProcessionError
from procession.model.outcomes import Moved
from procession.model.states import Restart, State
from procession.present import parse, results
from procession.present.words import printable

from . import cursor
from .terminal import UsageError, done, each, emit, read_text
from .registry import SID, SIDS, Arg, arg, command, sid_type
from .settings import note_unknown_keys

RUNNER_HELP = "command:CMD | openai:MODEL[@URL][#KEY_VAR] | builtin:NAME | claude:[MODEL] | codex:[MODEL] | opencode:[P/MODEL]"

ENV_ARGS = [
    arg("--env", action="append", default=[], metavar="NAME=VALUE",
        help="a setting stored with the session and given to its runs (not for secrets: see --pass)"),
    arg("--pass", dest="passed", action="append", default=[], metavar="NAME",
        help="give runs the engine's own $NAME (the value is never stored)"),
]
#: How the kernel holds a session's runs (spawn's defaults; set's none: unchanged).
CONFINE_HELP = ("how the kernel holds its runs to its bindings: bound (confined where the kernel can; the"
                " default), strict (never run unconfined), off")
NET_HELP = "where its runs may connect: any (the default), none, or model (its model's and MCP servers' ports)"
RESTART_HELP = ("whether a run that did not finish runs again: no (the default), on-failure (lost when its engine"
                " died, failed, timed out), always (also stopped with its engine)")
PERMISSIONS_HELP = ("what its agent may do unasked: ask (read only), bound (what its bindings and confinement allow;"
                    " the default), all; anything else waits for you (procession pending)")


def bounds_args(defaults: bool) -> list[Arg]:
    return [arg("--confine", choices=bounds.CONFINES, default=bounds.BOUND if defaults else None, help=CONFINE_HELP),
            arg("--net", choices=bounds.NETS, default=bounds.ANY if defaults else None, help=NET_HELP),
            arg("--permissions", choices=bounds.PERMISSIONS, default=bounds.BOUND if defaults else None,
                help=PERMISSIONS_HELP)]


def settings(pairs: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` arguments as a dict (each checked by the call)."""
    found = {}
    for pair in pairs:
        key, value = environ.setting(pair)
        found[key] = value
    return found



@command(Call.SPAWN, creates=True, args=[
    arg("name"), arg("--agent", required=True), arg("--system", default="", help="system prompt"),
    arg("--goal", default=""), arg("--priority", type=int, default=0),
    arg("--runner", default=runner_spec.DEFAULT, help=RUNNER_HELP),
    arg("--window", type=int, default=DEFAULT_WINDOW, help="context window in tokens"),
    arg("--timeout", type=float, help="seconds a run may take"),
    arg("--cwd", help="the session's working folder (default: here)"),
    *ENV_ARGS, *bounds_args(defaults=True), arg("--restart", choices=list(Restart), default=Restart.NO.value,
                                                 help=RESTART_HELP),
])
async def spawn(ws: Workspace, args: argparse.Namespace) -> int:
    outcome = await ws.spawn(args.name, args.agent, system=args.system, goal=args.goal, priority=args.priority,
                             runner=args.runner, window=args.window, timeout=args.timeout,
                             cwd=str(Path(args.cwd).resolve()) if args.cwd else None,
                             env=settings(args.env), passed=args.passed, confine=args.confine, net=args.net,
                             permissions=args.permissions, restart=args.restart)
    return done(args, outcome, str(outcome.sid))


@command(Call.ENV, args=[
    SID, arg("settings", nargs="*", metavar="NAME=VALUE", help="settings to store"),
    arg("--pass", dest="passed", action="append", default=[], metavar="NAME",
        help="give runs the engine's own $NAME (the value is never stored)"),
    arg("--unset", action="append", default=[], metavar="NAME", help="remove a setting or a passed name"),
])
async def env(ws: Workspace, args: argparse.Namespace) -> int:
    """With nothing to change, shows the environment."""
    return done(args, await ws.env(args.sid, set=settings(args.settings), passed=args.passed, unset=args.unset))


@command(Call.SET, args=[
    arg("sid", type=sid_type, nargs="?", help="the session (or --agent NAME --quiet on|off)"),
    arg("--agent", metavar="NAME", help="set the agent's own setting (--quiet: none of its sessions notifies)"),
    arg("--name"), arg("--goal"), arg("--system", help="the new system prompt"),
    arg("--system-file", metavar="FILE", help="read the new system prompt from FILE (- for standard input)"),
    arg("--timeout", type=float, help="seconds a run may take (0: no limit)"),
    arg("--window", type=int, help="context window in tokens (the context must fit it)"),
    arg("--fail-limit", type=int, metavar="N", help="failed runs in a row that suspend it (0: never; default 3)"),
    arg("--restart", choices=list(Restart), help=RESTART_HELP),
    arg("--quiet", choices=("on", "off"), help="on: it sends no notifications (the [notify] command of the config)"),
    arg("--max-turns", type=int, metavar="N", help="model requests an openai: run makes at most (default 20)"),
    arg("--temperature", type=float, help="the openai: runner's sampling temperature"),
    arg("--max-tokens", type=int, metavar="N", help="the most tokens an openai: reply may have"),
    arg("--request", action="append", default=[], metavar="FIELD=JSON",
        help="a field the openai: runner adds to each request (null removes it); repeatable"),
    arg("--tokenizer", metavar="SPEC", help="count the context as the model does: a tokenizer.json file,"
        " tiktoken:ENCODING, auto (the model's, if at hand offline) or none"),
    *bounds_args(defaults=False),
])
async def set_(ws: Workspace, args: argparse.Namespace) -> int:
    system = args.system
    if args.system_file is not None:
        if system is not None:
            raise UsageError("give either --system or --system-file, not both")
        system = read_text(args.system_file)
    fields = {key: json.loads(value) for key, value in (parse.key_json(pair, "--request") for pair in args.request)}
    if args.sid is not None and args.agent is not None:
        raise UsageError("give a session or --agent NAME, not both")
    return done(args, await ws.set(args.sid, agent=args.agent, name=args.name, goal=args.goal, system=system, timeout=args.timeout,
                                   window=args.window, fail_limit=args.fail_limit, confine=args.confine,
                                   net=args.net, permissions=args.permissions, restart=args.restart,
                                   quiet=None if args.quiet is None else args.quiet == "on",
                                   max_turns=args.max_turns, temperature=args.temperature,
                                   max_tokens=args.max_tokens, fields=fields or None, tokenizer=args.tokenizer))


def _lifecycle(call: Call) -> None:
    async def handler(ws: Workspace, args: argparse.Namespace) -> int:
        await each(args, ws.each(call, args.sids))
        return 0

    command(call, args=[SIDS])(handler)


for _call in (Call.SUSPEND, Call.RESUME, Call.INTERRUPT):
    _lifecycle(_call)


@command(Call.CANCEL, args=[
    SIDS, arg("--clean", action="store_true",
              help="also remove the folder of its own a fork --worktree gave it (refused while it holds unsaved work)"),
])
async def cancel(ws: Workspace, args: argparse.Namespace) -> int:
    await each(args, ws.each(Call.CANCEL, args.sids, clean=args.clean))
    return 0


@command(Call.ACTIVATE, args=[
    SIDS, arg("--now", action="store_true", help="with no engine running, run it here in the foreground"),
])
async def activate(ws: Workspace, args: argparse.Namespace) -> int:
    from procession.engine.ledger import Ledger

    if not args.now or await Ledger(ws.store).holder() is not None:
        made = await each(args, ws.each(Call.ACTIVATE, args.sids), text=results.waitable)
        cursor.caused(ws.path, min(o.row for o in made))
        return 0
    infos = [await ws.info(sid) for sid in args.sids]
    before = {info.id: info.length for info in infos}  # to show what the runs added
    queued = [Moved(info.id, State.READY) for info in infos if info.state is State.READY]  # queued already
    async with foreground_engine(ws, set(args.sids)) as idle:
        made = queued + await each(args, ws.each(Call.ACTIVATE, [i.id for i in infos if i.state is not State.READY]),
                                   report_json=False)
        await idle()
    report = []
    for outcome in made:
        run = (await ws.runs(outcome.sid, limit=1))[-1]
        new = await ws.history(outcome.sid, before[outcome.sid])
        report.append({"sid": outcome.sid, "run": run.id, "outcome": run.outcome, "error": run.error,
                       "messages": [{"seq": m.seq, "role": m.role, "content": m.content} for m in new]})
        if not args.json:
            print(f"{outcome.sid}: run {run.id} {run.outcome}" + (f": {printable(run.error)}" if run.error else ""))
            for m in new:
                print(f"  [{m.seq}] {m.role}: {printable(m.content)}")
    if args.json:
        emit(args, report, "")
    return 0 if all(r["outcome"] == "ok" for r in report) else 1


class Stopped(ProcessionError):
    """``activate --now`` was stopped by a signal (its terminal closed, a ``kill``): its step
    was interrupted and its run recorded, as Ctrl-C does; the exit status says which signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}: the step was interrupted and its run recorded")
        self.exit_code = 128 + signum


#: What stops a foreground engine as Ctrl-C does (SIGINT is asyncio's own).
STOPPING = (signal.SIGTERM, signal.SIGHUP)


@contextlib.asynccontextmanager
async def foreground_engine(ws: Workspace, sids: set[int]) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """An engine in this process for these sessions only; ``await idle()`` waits until none of
    them is queued or running. SIGTERM and SIGHUP (the terminal closing) stop it as Ctrl-C
    does: the engine interrupts the step and records its run before the process ends, so no
    step is left running unsupervised (``Stopped``)."""
    from procession.engine import Engine

    note_unknown_keys()
    engine = Engine(ws.path, slots=max(1, len(sids)), only=sids, triggers=False)
    stop = asyncio.Event()
    await engine.start()
    serving = asyncio.ensure_future(engine.serve(stop))
    loop, me, got = asyncio.get_running_loop(), asyncio.current_task(), []

    def stopping(signum: int) -> None:
        got.append(signum)
        stop.set()
        if me is not None:
            me.cancel()

    for sig in STOPPING:
        loop.add_signal_handler(sig, stopping, sig)

    async def idle() -> None:
        while not serving.done():
            states = [(await ws.info(sid)).state for sid in sids]
            if all(s not in (State.READY, State.RUNNING) for s in states):
                return
            await asyncio.sleep(0.05)

    try:
        yield idle
    except asyncio.CancelledError:
        if not got:
            raise
    finally:
        stop.set()
        await asyncio.shield(serving)
        for sig in STOPPING:
            loop.remove_signal_handler(sig)
    if got:
        raise Stopped(got[0])


@command(Call.NICE, args=[
    SID, arg("priority", type=int, help="the priority (higher runs first)"),
    arg("--relative", action="store_true", help="move the priority by this much"),
])
async def nice(ws: Workspace, args: argparse.Namespace) -> int:
    return done(args, await ws.nice(args.sid, args.priority, relative=args.relative))


@command(Call.MIGRATE, args=[
    SID, arg("--runner", required=True, help=RUNNER_HELP), arg("--window", type=int),
    arg("--compress", nargs="?", const=EXTRACTIVE, choices=COMPRESS_METHODS, metavar="METHOD",
        help="compress the context if it does not fit: extractive (the default), mask-tools, or model"),
    arg("--with", dest="with_spec", metavar="SPEC",
        help="with --compress model: the model to ask (default: the session's, else the new one)"),
    arg("--tokenizer", metavar="SPEC", help="count the context with this tokenizer (as set --tokenizer takes;"
        " default: the new model's own when at hand offline)"),
])
async def migrate(ws: Workspace, args: argparse.Namespace) -> int:
    if args.with_spec and args.compress != MODEL:
        raise UsageError("--with names the model of --compress model")
    if args.compress == MODEL:
        from procession.engine.summaries import migrate_by_model

        return done(args, await migrate_by_model(ws, args.sid, args.runner, window=args.window,
                                                 tokenizer=args.tokenizer, spec=args.with_spec))
    return done(args, await ws.migrate(args.sid, args.runner, window=args.window, compress=bool(args.compress),
                                       method=args.compress or EXTRACTIVE, tokenizer=args.tokenizer))
