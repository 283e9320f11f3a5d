"""Calls on a session's life: its birth, its settings, the moves of the lifecycle table."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import os
from collections.abc import Sequence
from typing import Any, Final

from ..model import agents, bounds, environ, hosts, limits, runner_spec, sampling
from ..model.calls import Call
from ..model.errors import ContextTooLarge, InvalidArgument, ProcessionError
from ..model.outcomes import EnvChanged, Migrated, Moved, Niced, Note, Outcome, Recounted, Spawned, Updated
from ..model.records import Fold
from ..model.states import Reason, Restart, State
from ..store import agents as agent_rows
from ..store import rows, sessions, tokens
from . import counting, native, waking, worktrees
from .base import Calls
from .budgets import verdict
from .context import DEFAULT_KEEP_LAST, mask_plan, plan_fold, write_fold, write_masks
from .lineage import remove_folder
from .moving import take_back
from .reads import live_holder
from .syscall import Act, all_or_none, syscall, transition

DEFAULT_WINDOW = 128_000
#: What ``set`` may change, in the order it reports them.
SETTINGS = ("name", "goal", "system", "timeout", "window", "fail_limit", "restart", "quiet", "confine", "net",
            "permissions")
#: The most failed runs in a row a session may be set to bear before it is suspended.
FAIL_LIMIT_MAX = 1000
#: How ``migrate`` may compress a context that does not fit (``compress``'s ways, but the user's own).
EXTRACTIVE, MASK_TOOLS, MODEL = "extractive", "mask-tools", "model"
COMPRESS_METHODS = (EXTRACTIVE, MASK_TOOLS, MODEL)
#: The recent items migrate's compress keeps, most first, until the context fits.
KEEPS = (DEFAULT_KEEP_LAST, 4, 2, 1, 0)


def environment(row: Any) -> tuple[dict[str, str], list[str]]:
    """A session row's stored settings and passed names."""
    return (json.loads(row["env"]) if row["env"] else {}), (json.loads(row["pass_env"]) if row["pass_env"] else [])


def require_cli(spec: runner_spec.RunnerSpec) -> None:
    """An agent CLI runner needs its CLI installed: refused, saying how to install it, if not."""
    if spec.kind == runner_spec.ACP:
        agents.acp_program(spec.cli, spec.acp_command)
    elif spec.agent:
        agents.locate(spec.kind)


class LifecycleCalls(Calls):
    async def each(self, call: Call, sids: Sequence[int], **options: Any) -> list[Outcome]:
        """``call`` on every session of ``sids``, all or none: each call's checks, its changes
        and its journal row as they are when made alone, in one transaction. One refused and
        none is done: ``NoneDone`` names every session refused and why (one session given: its
        own refusal, as the call alone raises it). What a call does around its transaction
        (``before``, ``finished``: an attached session's CLI looked for, a fork's folder
        removed) is done for each, before and after."""
        method = _syscall_of(type(self), EACH[call])
        sids = list(dict.fromkeys(sids))
        refused: list[ProcessionError] = []
        for sid in sids:
            try:
                await self.before(call, sid, **options)
            except ProcessionError as exc:
                refused.append(exc)
        made = await all_or_none(self.store, [functools.partial(method, self, sid, **options) for sid in sids],
                                 refused, single=len(sids) == 1)
        return [await self.finished(call, outcome, **options) for outcome in made]

    async def before(self, call: Call, sid: int, **options: Any) -> None:
        """What a call on ``sid`` does before its transaction: a ``cancel`` with ``clean``
        refuses a fork's folder that holds work that would be lost."""
        if call is Call.CANCEL and options.get("clean"):
            async with self.store.snapshot() as tx:
                row = await rows.session(tx, sid)
                record = await rows.worktree(tx, sid)
            if record is not None:
                hosts.refuse_elsewhere(row["host"], f"session {sid}'s own folder {record['path']}")
                unsaved = await asyncio.to_thread(worktrees.unsaved, record)
                if unsaved:
                    what = "uncommitted changes" if record["kind"] == "git" else "changed files"
                    raise ProcessionError(f"session {sid}'s {'worktree' if record['kind'] == 'git' else 'copy'}"
                                          f" {record['path']} holds {what} ({worktrees.named(unsaved)}): commit or"
                                          " discard them, merge the session, or cancel it without --clean")

    async def finished(self, call: Call, outcome: Outcome, **options: Any) -> Outcome:
        """What a call does after its transaction: a ``cancel`` with ``clean`` removes the
        session's own folder, once its step is gone."""
        if call is Call.CANCEL and options.get("clean"):
            notes = await remove_folder(self.store, outcome.sid, wait_s=5.0)
            return dataclasses.replace(outcome, notes=outcome.notes + tuple(Note(n) for n in notes))
        return outcome

    @syscall(Call.SPAWN, session="result", check=None)
    async def spawn(
        self, act: Act, name: str, agent: str, *, system: str = "", goal: str = "", priority: int = 0,
        runner: str = runner_spec.DEFAULT, window: int = DEFAULT_WINDOW, timeout: float | None = None,
        cwd: str | None = None, env: dict[str, str] | None = None, passed: list[str] | None = None,
        confine: str = bounds.BOUND, net: str = bounds.ANY, permissions: str = bounds.BOUND,
        restart: str = Restart.NO, armed: bool = True,
    ) -> Spawned:
        """A new sleeping session for ``agent`` (made on first use), working in ``cwd``, with
        its own environment (``env`` stored, ``passed`` names handed over at run time), its
        bounds (``confine``, ``net``: ``model.bounds``) and what its agent may do unasked
        (``permissions``); ``armed`` false: its runner waits for
        ``approve`` (a scoped MCP client spawned it with what a person has not approved)."""
        require_cli(runner_spec.parse(runner))
        settings, names = environ.merged({}, [], set={k: environ.setting(f"{k}={v}")[1] for k, v in (env or {}).items()},
                                         passes=list(passed or []), unset=[])
        folder = cwd or os.getcwd()
        if not os.path.isabs(folder):
            raise InvalidArgument(f"the session folder must be absolute: {folder!r}")
        if not os.path.isdir(folder):
            raise InvalidArgument(f"the session folder {folder} does not exist")
        system = limits.text(system, "system prompt")
        sid = await rows.insert_session(
            act.tx, self.store.count_tokens(system) if system else 0,
            agent_id=await rows.agent_id(act.tx, limits.name(agent, "agent name")),
            name=limits.name(name, "session name"), system=system, goal=limits.text(goal, "goal"),
            priority=limits.priority(priority), runner=runner, window=limits.window(window),
            timeout=limits.positive(timeout, "timeout"), cwd=folder,
            env=json.dumps(settings) if settings else None, pass_env=json.dumps(names) if names else None,
            spawned_by=self.acting, confine=bounds.confine(confine), net=bounds.net(net), armed=int(armed),
            permissions=bounds.permissions(permissions), restart=_restart(restart),
        )
        if confine != bounds.OFF:
            why = bounds.too_wide(os.path.realpath(folder), os.path.realpath(os.path.expanduser("~")), write=True)
            if why:
                act.note(f"its folder {folder} cannot bound a confined run ({why}): bind a project folder before"
                         " it runs", Call.BIND, sid)
        if not armed:
            act.note("its runner waits for a person's approval", Call.APPROVE, sid)
        await _new_host(act, sid)
        return Spawned(sid)

    @syscall(Call.ENV)
    async def env(self, act: Act, sid: int, *, set: dict[str, str] | None = None, passed: list[str] | None = None,
                  unset: list[str] | None = None) -> EnvChanged:
        """Change a session's environment: ``set`` stores settings, ``passed`` names variables
        whose engine value a run is given (never stored), ``unset`` removes either. The next
        run sees the change."""
        row = act.row
        current, names = environment(row)
        settings = dict(environ.setting(f"{k}={v}") for k, v in (set or {}).items())
        env, names = environ.merged(current, names, set=settings, passes=list(passed or []), unset=list(unset or []))
        await rows.update_session(act.tx, sid, env=json.dumps(env) if env else None,
                                  pass_env=json.dumps(names) if names else None)
        return EnvChanged(sid, env, tuple(names), environ.taken(runner_spec.parse(row["runner"]).cli))

    @syscall(Call.ENV)
    async def sampling(self, act: Act, sid: int, *, max_turns: int | None = None, temperature: float | None = None,
                       max_tokens: int | None = None, fields: dict[str, Any] | None = None) -> EnvChanged:
        """Change what the ``openai:`` runner does for this session: its turn limit, and the
        fields it adds to each request (``fields``: any, null removes one). Stored as session
        settings (``model.sampling``): ``show`` lists them, snapshots keep them."""
        current, names = environment(act.row)
        settings = sampling.changed(current, turns=max_turns, temperature=temperature, max_tokens=max_tokens,
                                    extra=fields)
        if not settings:
            raise InvalidArgument("nothing to change: give a turn limit, a temperature, max tokens or a field")
        env, names = environ.merged(current, names, set=settings, passes=[], unset=[])
        await rows.update_session(act.tx, sid, env=json.dumps(env), pass_env=json.dumps(names) if names else None)
        return EnvChanged(sid, env, tuple(names), environ.taken(runner_spec.parse(act.row["runner"]).cli))

    @syscall(Call.SET)
    async def set_tokenizer(self, act: Act, sid: int, spec: str) -> Recounted:
        """Count the session's context as its model does: ``spec`` is a tokenizer.json file,
        ``tiktoken:ENCODING``, ``auto`` (its model's, when one is at hand offline) or ``none``
        (the workspace's counter). It counts the context once; the server's reports after each
        request refine the figure from there (``store.tokens``)."""
        kept = await counting.recount(act.tx, act.row, counting.chosen(spec.strip(), act.row["runner"]))
        await rows.update_session(act.tx, sid, **kept.columns())
        context = tokens.scaled(act.row["context_tokens"], kept.scale)
        if context > act.row["window"]:
            _over_note(act, sid, context, act.row["window"])
        return Recounted(sid, tokens.describe(self.tokenizer, kept.tokenizer, kept.scale, kept.samples),
                         context, act.row["window"])

    @syscall(Call.SET, check=None)
    async def set(self, act: Act, sid: int | None = None, *, agent: str | None = None, name: str | None = None, goal: str | None = None,
                  system: str | None = None, timeout: float | None = None, window: int | None = None,
                  fail_limit: int | None = None, confine: str | None = None, net: str | None = None,
                  permissions: str | None = None, restart: str | None = None, quiet: bool | None = None,
                  max_turns: int | None = None, temperature: float | None = None, max_tokens: int | None = None,
                  fields: dict[str, Any] | None = None, tokenizer: str | None = None) -> Updated:
        """Change settings given (``None`` leaves one as it is; a ``timeout`` of 0 removes it;
        ``fail_limit`` failed runs in a row suspend the session, 0: never; ``restart``: whether a
        run that ended unfinished runs again (``states.Restart``); ``quiet``: it sends no
        notifications (``engine.notify``); ``confine`` and
        ``net``: how the kernel holds its runs, ``permissions``: what its agent may do unasked,
        ``model.bounds``; the ``openai:`` runner's
        ``max_turns``, ``temperature``, ``max_tokens`` and request ``fields``, as ``sampling``;
        ``tokenizer``, as ``set_tokenizer``), all in one call: it names every one that changed.

        A new window must hold the context as it is (compress it first, or use migrate
        with ``compress``); a running step goes on as it started, the next run sees the change.
        Of an agent (``agent`` instead of ``sid``) only ``quiet`` is set: none of its sessions
        sends notifications, those it spawns later too.
        """
        if (sid is None) == (agent is None):
            raise InvalidArgument("set takes a session, or --agent NAME")
        if agent is not None:
            return await _set_agent(act, agent, quiet, name=name, goal=goal, system=system, timeout=timeout,
                                    window=window, fail_limit=fail_limit, confine=confine, net=net,
                                    permissions=permissions, restart=restart, max_turns=max_turns,
                                    temperature=temperature, max_tokens=max_tokens, fields=fields, tokenizer=tokenizer)
        assert sid is not None
        row = act.row = await rows.session(act.tx, sid)
        act.target = transition(row, Call.SET)
        cols: dict[str, Any] = {}
        if name is not None:
            cols["name"] = limits.name(name, "session name")
        if goal is not None:
            cols["goal"] = limits.text(goal, "goal")
        if timeout is not None:
            cols["timeout"] = None if timeout == 0 else limits.positive(timeout, "timeout")
        context = row["context_tokens"]
        if system is not None:
            cols["system"] = limits.text(system, "system prompt")
            cols["system_tokens"] = self.store.count_tokens(system) if system else 0
            context += cols["system_tokens"] - row["system_tokens"]
            cols["context_tokens"] = context
        if window is not None:
            cols["window"] = limits.window(window)
        if fail_limit is not None:
            if not 0 <= fail_limit <= FAIL_LIMIT_MAX:
                raise InvalidArgument(f"the failure limit must be between 0 (never suspend) and {FAIL_LIMIT_MAX}")
            cols["fail_limit"] = fail_limit
        if confine is not None:
            cols["confine"] = bounds.confine(confine)
        if net is not None:
            cols["net"] = bounds.net(net)
        if permissions is not None:
            cols["permissions"] = bounds.permissions(permissions)
        if restart is not None:
            cols["restart"] = _restart(restart)
        if quiet is not None:
            cols["quiet"] = int(quiet)
        changed = [k for k in SETTINGS if k in cols and cols[k] != row[k]]
        current, names = environment(row)
        settings = sampling.changed(current, turns=max_turns, temperature=temperature, max_tokens=max_tokens,
                                    extra=fields)
        if settings:
            env, names = environ.merged(current, names, set=settings, passes=[], unset=[])
            if env != current:
                cols["env"] = json.dumps(env)
                changed += [k for k, v in (("max_turns", max_turns), ("temperature", temperature),
                                           ("max_tokens", max_tokens), ("request", fields or None)) if v is not None]
                if runner_spec.parse(row["runner"]).kind != "openai":
                    act.note(f"sampling settings are the openai: runner's; this session runs {row['runner']}:"
                             " they are kept, and apply once it is migrated to an openai: model", Call.MIGRATE, sid)
        scale = row["token_scale"]
        if tokenizer is not None:
            kept = await counting.recount(act.tx, {**{k: row[k] for k in row.keys()}, **cols},
                                          counting.chosen(tokenizer.strip(), row["runner"]))
            if kept.tokenizer != row["tokenizer"]:
                changed.append("tokenizer")
            cols.update(kept.columns())
            scale = kept.scale
        new_window = cols.get("window", row["window"])
        context = tokens.scaled(context, scale)
        if context > new_window and (window is not None or system is not None):
            raise ContextTooLarge(
                f"session {sid}'s context would be {context} tokens, over its window of {new_window}:"
                f" compress it first, or migrate it with compress")
        if context > new_window and tokenizer is not None:
            _over_note(act, sid, context, new_window)
        if not changed:
            raise InvalidArgument(f"nothing to change in session {sid}: give a new name, goal, system prompt,"
                                  " timeout, window, failure limit, restart policy, quiet, confinement, network, permissions,"
                                  " sampling or tokenizer")
        await rows.update_session(act.tx, sid, **cols)
        if State(row["state"]) in (State.RUNNING, State.WAITING):
            act.note("the running step goes on as it started; its next run sees the change")
        return Updated(sid, tuple(changed))

    @syscall(Call.ACTIVATE)
    async def activate(self, act: Act, sid: int, cause: dict[str, Any] | None = None) -> Moved:
        """Queue a run: the session becomes ready; the engine starts it when a slot is free."""
        if not act.row["armed"]:
            raise ProcessionError(f"session {sid} is not approved (its runner waits for a person: a snapshot, an"
                                  " adopted transcript or an agent brought it): review it, then approve it")
        await waking.queue(act.tx, act.row, [cause or {"kind": "manual", "by": self.actor}])
        if act.row["not_before"]:  # asked for by hand: no back-off of failed trigger-fired runs
            await rows.update_session(act.tx, sid, not_before=None)
        if (going := await sessions.moving_to(act.tx, sid)) is not None:
            act.note(f"it is moving to host {going}: the run waits, and runs there once the session is (or here, if"
                     f" the move is taken back: move {sid} --to {act.row['host']})")
        elif await live_holder(act.tx, act.row["host"]) is None:
            act.note(f"no engine runs on this workspace for host {act.row['host']} (where its folder is): the run"
                     " waits in the queue until one starts there (`procession run`, or a monitor: `procession`, with"
                     " --engine on a shared workspace)")
        if (over := (await verdict(act.tx, sid, act.now)).over) is not None:
            act.note(over_budget(over), Call.LIMIT, sid)
        return Moved(sid, act.target)

    @syscall(Call.SUSPEND)
    async def suspend(self, act: Act, sid: int) -> Moved:
        """Freeze: a running step is stopped in place; the session remembers where it was."""
        await rows.update_session(act.tx, sid, state=act.target.value, resume_to=act.row["state"], reason=None)
        return Moved(sid, act.target)

    @syscall(Call.RESUME)
    async def resume(self, act: Act, sid: int) -> Moved:
        """Thaw: back to the state it was suspended in; what its triggers kept is delivered
        (a session ``attach`` holds: ``AdoptCalls.resume``)."""
        await rows.update_session(act.tx, sid, state=act.target.value, resume_to=None, reason=None)
        await waking.release_pending(act.tx, sid)
        return Moved(sid, State((await act.reload())["state"]))

    @syscall(Call.INTERRUPT)
    async def interrupt(self, act: Act, sid: int) -> Moved:
        """Stop the current step (or take the session off the queue); it goes back to sleep."""
        await rows.update_session(act.tx, sid, state=act.target.value, queued_at=None, causes=None)
        await rows.withdraw(act.tx, session=sid)
        return Moved(sid, act.target)

    async def cancel(self, sid: int, *, clean: bool = False) -> Moved:
        """Terminate: a running step is killed; the history is kept; triggers stop firing.

        With ``clean``, the session's own folder (``fork --worktree``) is removed too, after its
        step is gone — refused, with nothing changed, while it holds work that would be lost
        (uncommitted changes in a worktree, changed files in a copy). Without, it stays.
        """
        return (await self.each(Call.CANCEL, [sid], clean=clean))[0]  # type: ignore[return-value]

    @syscall(Call.CANCEL)
    async def _cancel(self, act: Act, sid: int, clean: bool = False) -> Moved:
        await rows.update_session(act.tx, sid, state=act.target.value, reason=Reason.CANCELLED.value,
                                  resume_to=None, queued_at=None, causes=None)
        await rows.withdraw(act.tx, session=sid)
        if (move := await take_back(act.tx, sid, act.now)) is not None:
            act.note(f"its move to host {move.target} is taken back: it stays on host {act.row['host']}")
        record = await rows.worktree(act.tx, sid)
        if record is not None and not clean:
            how = f"git worktree remove {record['path']}" if record["kind"] == "git" else f"rm -r {record['path']}"
            act.note(f"its {'worktree' if record['kind'] == 'git' else 'copy'} {record['path']} stays"
                     + (f" (branch {record['branch']})" if record["branch"] else "")
                     + f": cancel with --clean removes it; now, by hand: {how}")
        return Moved(sid, act.target)

    @syscall(Call.NICE)
    async def nice(self, act: Act, sid: int, priority: int, *, relative: bool = False) -> Niced:
        """Set the priority (higher runs first), or move it by ``priority`` when ``relative``."""
        value = limits.priority(act.row["priority"] + priority if relative else priority)
        await rows.update_session(act.tx, sid, priority=value)
        return Niced(sid, value)

    @syscall(Call.MIGRATE)
    async def migrate(self, act: Act, sid: int, runner: str, *, window: int | None = None,
                      compress: bool = False, method: str = EXTRACTIVE, tokenizer: str | None = None,
                      keep_last: int = DEFAULT_KEEP_LAST, summary: str | None = None,
                      expect: tuple[int, int] | None = None) -> Migrated:
        """Move to another runner and window; refuse if the context does not fit, unless
        ``compress`` lets it fold older items by ``method``: ``extractive`` or ``mask-tools``
        (keeping as many recent ones as fit), or ``model`` (the ``summary`` a model wrote of
        the range ``expect`` that keeping ``keep_last`` folds: ``engine.summaries.migrate_by_model``
        asks for it outside any transaction).

        The context is counted as the new model counts it: with ``tokenizer`` (as
        ``set --tokenizer`` takes), else, when the model changes, with its own tokenizer if one
        is at hand offline, else the workspace's counter; a new model's calibration starts anew
        (its server's reports refine it from its first run). The same model keeps its own."""
        row = act.row
        spec = runner_spec.parse(runner)
        require_cli(spec)
        if method not in COMPRESS_METHODS:
            raise InvalidArgument(f"no compress method {method!r}: the methods are {', '.join(COMPRESS_METHODS)}")
        new_window = limits.window(window if window is not None else row["window"])
        old = runner_spec.parse(row["runner"])
        if tokenizer is not None:
            kept = await counting.recount(act.tx, row, counting.chosen(tokenizer.strip(), runner))
        elif (old.kind, old.target) != (spec.kind, spec.target):
            kept = await counting.recount(act.tx, row, counting.model_tokenizer(runner))
        else:
            kept = counting.Counting(row["tokenizer"], row["token_scale"], row["token_samples"])
        counted = tokens.describe(self.tokenizer, kept.tokenizer, kept.scale, kept.samples)
        await rows.update_session(act.tx, sid, **kept.columns())
        stored = row["context_tokens"]
        fold: Fold | None = None
        if tokens.scaled(stored, kept.scale) > new_window:
            if not compress:
                raise ContextTooLarge(
                    f"session {sid}'s context is {tokens.scaled(stored, kept.scale)} tokens ({counted}), over the"
                    f" new window of {new_window}; compress it first or pass --compress"
                )
            fold = await _fit(act, await act.reload(), method, new_window / kept.scale, keep_last, summary, expect)
            if fold is None:
                raise ContextTooLarge(
                    f"session {sid}'s context ({tokens.scaled(stored, kept.scale)} tokens, {counted}) cannot be"
                    f" compressed under {new_window} tokens by {method}: "
                    + ("what must stay (the system prompt, pinned messages, a summary) is larger than that"
                       if method != MASK_TOOLS else "its older tool outputs are not enough; compress it another way")
                )
            stored = stored + fold.summary_tokens - fold.archived_tokens
            act.note(f"older context was compressed to fit ({method}): {fold.archived_count} items behind"
                     f" {'one-line stubs' if method == MASK_TOOLS else 'a summary'} (expand restores them)",
                     Call.EXPAND, sid)
        tokens_now = tokens.scaled(stored, kept.scale)
        held = native.agent_ref(row)
        moved: dict[str, Any] | None = None
        if held and not spec.agent:
            act.note(f"the new runner sees Procession's copy of the history; the agent's own session"
                     f" ({held['id']}) is kept, and resumed if it migrates back")
        elif spec.agent and (held or row["length"]) and (held or {}).get("cli") != spec.cli:
            moved = await self._move_agent(act, held, spec)
        await rows.update_session(act.tx, sid, runner=runner, window=new_window)
        return Migrated(sid, runner, new_window, tokens_now, counted, fold, agent=moved, left=held if moved else None)

    async def _move_agent(self, act: Act, held: dict[str, Any] | None, spec: runner_spec.RunnerSpec) -> dict[str, Any]:
        """To another agent CLI: the conversation so far as that CLI's own session where its
        format can be written, else as the first run's prompt. Returns the new agent reference
        (``{}``: none yet, the prompt way); the one it replaces stays in the journal."""
        title = agents.title(spec.cli)
        ref = await native.carry_over(act.tx, await act.reload(), spec)
        if ref is None:
            await rows.update_session(act.tx, act.row["id"], agent_ref=None, agent_seen=0, agent_context=None,
                                      agent_window=None)
            act.note(f"{title}'s own session cannot be written here: its first run is given the history so far"
                     " as its prompt")
            return {}
        if held:  # what it was, so that adopting the CLI's sessions does not make it again
            ref["was"] = [*held.get("was", []), {"cli": held["cli"], "id": held["id"]}]
        await rows.update_session(act.tx, act.row["id"], agent_ref=json.dumps(ref), agent_seen=act.row["length"],
                                  agent_context=None, agent_window=None)
        act.note(f"the conversation so far is now {title}'s own session {ref['id']}, which its next run resumes"
                 + (f"; the {agents.title(held['cli'])} session {held['id']} is left as it was" if held else ""))
        return ref


async def _fit(act: Act, row: Any, method: str, budget: float, keep_last: int, summary: str | None,
               expect: tuple[int, int] | None) -> Fold | None:
    """The fold ``method`` makes for the stored context to come under ``budget`` (the new window
    in the workspace's counter), keeping as many recent items as it can; None if it cannot."""
    tokens_now = row["context_tokens"]
    if method == MODEL:
        if summary is None or expect is None:
            raise InvalidArgument("compress by model needs the model's summary and the range it read"
                                  " (migrate --compress model asks for them)")
        plan = await plan_fold(act.tx, row, keep_last, given=limits.text(summary, "the summary"))
        if plan is None or (plan[0].lo, plan[0].hi) != tuple(expect):
            raise ProcessionError(f"the context of session {row['id']} changed while its summary was made; migrate again")
        fits = tokens_now - sum(i.tokens for i in plan[0].archived) + plan[2] <= budget
        return await write_fold(act.tx, row, *plan) if fits else None
    for keep in KEEPS:
        if method == MASK_TOOLS:
            masks = await mask_plan(act.tx, row["id"], keep)
            if masks and tokens_now - sum(i.tokens - t for i, _, t in masks) <= budget:
                return await write_masks(act.tx, row["id"], masks)
            continue
        found = await plan_fold(act.tx, row, keep, budget=max(32, int(budget) // 4))
        if found and tokens_now - sum(i.tokens for i in found[0].archived) + found[2] <= budget:
            return await write_fold(act.tx, row, *found)
    return None


def _over_note(act: Act, sid: int, context: int, window: int) -> None:
    """A tokenizer that counts the context over its window is taken, and says so."""
    act.note(f"counted so, the context ({context} tokens) is over the window ({window}): runs will refuse it"
             " until it fits; compress it, or migrate to a larger window", Call.MIGRATE, sid)


#: The calls ``each`` makes on several sessions, by the name of the method that is the call
#: itself (``@syscall``'s), not a wrapper of it that does more around its transaction.
EACH: Final = {Call.ACTIVATE: "activate", Call.SUSPEND: "suspend", Call.RESUME: "resume",
               Call.INTERRUPT: "interrupt", Call.CANCEL: "_cancel", Call.APPROVE: "approve", Call.NICE: "nice"}


def _syscall_of(cls: type, name: str) -> Any:
    """The method ``name`` that ``@syscall`` made, past any subclass's wrapper of it (what a
    wrapper does around the transaction, ``before`` and ``finished`` do in a batch)."""
    for klass in cls.__mro__:
        method = klass.__dict__.get(name)
        if getattr(method, "call", None) is not None:
            return method
    raise ValueError(f"no system call named {name}")


async def _new_host(act: Act, sid: int) -> None:
    """Say so when a session is spawned on a host the workspace has never seen while it knows
    others (a mistyped ``--host``): nothing runs it until an engine runs there."""
    host = hosts.this()
    if await sessions.host_known(act.tx, host, sid):
        return
    known = await sessions.hosts_known(act.tx, sid)
    if known:
        act.note(f"host {host} is new to this workspace (its hosts: {', '.join(known[:5])}): the session runs once an"
                 f" engine runs for host {host} (procession --host {host} run)")


def _restart(value: str) -> str:
    if value not in tuple(Restart):
        raise InvalidArgument(f"--restart takes {', '.join(Restart)}, not {value!r}")
    return str(value)


async def _set_agent(act: Act, agent: str, quiet: bool | None, **others: Any) -> Updated:
    """``set --agent``: whether the agent's sessions send notifications; a session's other
    settings are its own, refused here."""
    given = sorted(k for k, v in others.items() if v is not None)
    if given:
        raise InvalidArgument(f"an agent has only quiet to set; {', '.join(given)}"
                              f" {'is' if len(given) == 1 else 'are'} each session's own (set SID)")
    if quiet is None:
        raise InvalidArgument(f"nothing to change in agent {agent}: give --quiet on or off")
    agent_id = await rows.known_agent(act.tx, agent)
    if await agent_rows.agent_quiet(act.tx, agent_id) == quiet:
        raise InvalidArgument(f"agent {agent} is already {'quiet' if quiet else 'not quiet'}")
    await agent_rows.set_agent_quiet(act.tx, agent_id, quiet)
    return Updated(0, ("quiet",), agent=agent)


def over_budget(over: str) -> str:
    """What ``activate`` says of a session over a budget (``over``: which, and by how much):
    queued, it is held suspended by the engine rather than run, so ``ready`` alone would
    promise a run that never comes."""
    return f"it is over {over}: it will not run until that budget is raised or cleared"
