"""The calls registry of the monitor: for every call of the table, its default keys and its flow.

``FLOWS`` is built from ``procession.model.calls.USER_CALLS``: a call without a flow here stops
the monitor from importing, so a new call cannot be forgotten; a few more flows make a call for
part of what it changes (``sampling``: the ``set`` call's openai: settings, in a form of their own). The keyboard bindings, the
action menu (F9) and the command palette are all generated from it. A flow is a coroutine
run in a worker: it asks what it needs with ``push_screen_wait`` (through the screen's
``Calling`` steps), makes the call, and lets the screen report the outcome.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from procession.model import agents, bounds, budgets, environ, limits, requests, sampling, transcripts
from procession.model.calls import INFO, USER_CALLS, Call
from procession.model.errors import ContextTooLarge, InvalidArgument, MergeConflict, ProcessionError
from procession.model.outcomes import Outcome
from procession.model.records import Request, SessionInfo
from procession.model.states import Restart, State, allowed
from procession.calls.merge import Resolution
from procession.present import lines, parse, results
from procession.present.words import one_line, plural, printable

from .calling import Calling
from .dialogs import FILE, Choice, Conflicts, Field, FieldRefused

Targets = list[SessionInfo]
Run = Callable[[Calling, Targets], Awaitable[None]]
AgentRun = Callable[[Calling, str], Awaitable[None]]


@dataclass(slots=True, frozen=True)
class Flow:
    name: str  # a call's own flow is named as the call is (its one word on every face)
    call: Call
    keys: str  # the default keys (remappable by the flow's name in the config's [keys])
    run: Run
    applies: Callable[[SessionInfo], bool] | None = None  # when the lifecycle table is not the whole story
    says: str = ""  # what the key does, where it is more than the call's summary

    @property
    def title(self) -> str:
        """What the keys, the menu and the palette call it: its name, never a synonym."""
        return self.name.capitalize()

    @property
    def summary(self) -> str:
        return self.says or INFO[self.call].summary


def _who(targets: Targets) -> str:
    return f"session {targets[0].id} ({printable(targets[0].name)})" if len(targets) == 1 else \
        plural(len(targets), "session")


async def _each(ui: Calling, call: Call, targets: Targets) -> None:
    """A call on every target, all or none (``Workspace.each``: one the lifecycle table refuses
    is named, and nothing is done). An agent's row stands for its live sessions the call
    applies to (as kill on a process group), confirmed first; more than one target is
    confirmed when the call ends something."""
    fit = [t for t in targets if allowed(call, t.state)] if ui.targets_are_agent() else list(targets)
    if (len(fit) > 1 and INFO[call].confirm) or (ui.targets_are_agent() and len(fit) > 0):
        body = [f"{t.id} {printable(t.name)} ({t.state})" for t in fit]
        if not await ui.confirm(f"{call.capitalize()} {_who(fit)}?", body):
            return
    await ui.make_all(ui.ws.each(call, [t.id for t in fit]))


def _lifecycle(call: Call) -> Run:
    async def run(ui: Calling, targets: Targets) -> None:
        await _each(ui, call, targets)

    return run


async def _suspend(ui: Calling, targets: Targets) -> None:
    """z: suspend, or resume when every target is suspended already (as htop's T / CONT)."""
    resume = bool(targets) and all(t.state is State.SUSPENDED for t in targets)
    await _each(ui, Call.RESUME if resume else Call.SUSPEND, targets)


async def _cancel(ui: Calling, targets: Targets) -> None:
    fit = [t for t in targets if allowed(Call.CANCEL, t.state)]
    if not fit:
        await ui.make(ui.ws.cancel(targets[0].id))  # refused: the reason is shown
        return
    ends = "It ends for good (its history is kept)" if len(fit) == 1 else "They end for good (their history is kept)"
    if not await ui.confirm(f"Cancel {_who(fit)}? {ends}:",
                            [f"{t.id} {printable(t.name)} ({t.state})" for t in fit]):
        return
    clean = False
    if any(t.worktree for t in fit):
        picked = await ui.choose("Their own folders (made by fork with a worktree):", [
            Choice("keep", "Keep them (they stay on disk, with their branches)"),
            Choice("clean", "Remove them too (refused while one holds uncommitted work)")])
        if picked is None:
            return
        clean = picked == "clean"
    await ui.make_all(ui.ws.each(Call.CANCEL, [t.id for t in fit], clean=clean))


async def _spawn(ui: Calling, targets: Targets) -> None:
    agent = targets[0].agent if targets else ""
    outcome = await ui.form_call("Spawn a new session", [
        Field("name", "Name"), Field("agent", "Agent", agent),
        Field("runner", "Runner", "builtin:digest"), Field("cwd", "Folder", os.getcwd()),
    ], lambda v: ui.ws.spawn(v["name"], v["agent"], runner=v["runner"], cwd=parse.here(v["cwd"])),
        help=f"runners: {lines.runner_forms()}")
    if outcome:
        ui.monitor.move_to(outcome.sid)


async def _load(ui: Calling, targets: Targets) -> None:
    choices = [Choice("file", "A snapshot file…")]
    if len(targets) == 1:
        detail = await ui.ws.show(targets[0].id)
        choices += [Choice(f"cp:{c.name}", f"Checkpoint {printable(c.name)} of {targets[0].id} (message {c.seq})")
                    for c in detail.checkpoints]
    picked = await ui.choose("Load as a new session", choices) if len(choices) > 1 else "file"
    if picked is None:
        return
    if picked == "file":
        outcome = await ui.form_call("Snapshot file to load", [Field("file", "", placeholder="path/to/file.json")],
                                     lambda v: ui.ws.load(parse.here(v["file"])))
    else:
        outcome = await ui.make(ui.ws.load(targets[0].id, picked[3:]))
    if outcome:
        ui.monitor.move_to(outcome.sid)


async def _fork(ui: Calling, targets: Targets) -> None:
    t = targets[0]
    outcome = await ui.form_call(f"Fork session {t.id} ({printable(t.name)})", [
        Field("name", "Name of the fork", placeholder="empty: the parent's name, numbered"),
        Field("at", f"Fork at message (0..{t.length})", str(t.length)),
        Field("folder", "Its folder", "shared", choices=FORK_FOLDERS),
    ], lambda v: ui.ws.fork(t.id, v["name"] or None, at=_int(v, "at", "the fork point"),
                            worktree=v["folder"] != "shared", carry=v["folder"] == "carry"),
        help="its own worktree: a git worktree on a new branch (outside git, a copy of the folder), merged back"
             " with the session and removed then")
    if outcome:
        ui.monitor.move_to(outcome.sid)


#: The fork dialog's choice of folder (``fork --worktree [--carry]``).
FORK_FOLDERS = (("shared", "the parent's, shared"), ("worktree", "its own worktree"),
                ("carry", "its own, with uncommitted changes"))


async def _send(ui: Calling, targets: Targets) -> None:
    async def send(v: dict[str, str]) -> Outcome:
        text = parse.text_message(v["text"])
        outcome: Outcome | None = None
        for t in targets:
            outcome = await ui.ws.send(t.id, text)
        assert outcome is not None
        return outcome

    await ui.form_call(f"Message to {_who(targets)}", [Field("text", "", multiline=True)], send,
                       help="Ctrl+S sends · Esc cancels")


async def _memory(ui: Calling, targets: Targets) -> None:
    t = targets[0]
    memory = (await ui.ws.show(t.id)).memory
    choices = [Choice("set", "Set a key…")] + [Choice(f"del:{k}", f"Delete {lines.memory_line(k, v)}")
                                               for k, v in memory.items()]
    picked = await ui.choose(f"Memory of {_who(targets)}", choices)
    if picked is None:
        return
    if picked.startswith("del:"):
        await ui.make(ui.ws.memory_delete(t.id, picked[4:]))
        return
    def set_key(v: dict[str, str]) -> Awaitable[Outcome]:
        try:
            value = parse.json_value(v["value"])
        except ProcessionError as exc:
            raise FieldRefused("value", exc) from None
        return ui.ws.memory_set(t.id, v["key"], value)

    await ui.form_call(f"Set a memory key of {t.id}", [Field("key", "Key"), Field("value", "Value (JSON)")], set_key)


#: How a model that writes a summary is named (``compress --with``, ``migrate``'s too).
MODEL_SPEC = "openai:MODEL[@URL][#KEY_VAR]"


async def _compress(ui: Calling, targets: Targets) -> None:
    picked = await ui.choose(f"Compress {_who(targets)} (expand restores it exactly)", [
        Choice("extract", "Summarise older messages (built in, no model)"),
        Choice("model", "Summary written by the session's model (an openai: runner)"),
        Choice("mask", "Mask older tool outputs with one-line stubs"),
        Choice("own", "Fold older messages behind a summary of my own…", enabled=len(targets) == 1),
    ])
    if picked == "own":
        t = targets[0]
        await ui.form_call(f"Your summary of the older messages of {t.id}", [Field("summary", "", multiline=True)],
                           lambda v: ui.ws.compress(t.id, summary=v["summary"]),
                           help="Ctrl+S folds · Esc cancels")
    elif picked == "model":
        from procession.engine.summaries import compress_by_model

        async def by_model(v: dict[str, str]) -> Outcome:
            outcome: Outcome | None = None
            for t in targets:
                outcome = await compress_by_model(ui.ws, t.id, spec=v["model"].strip() or None)
            assert outcome is not None
            return outcome

        await ui.form_call(f"Compress {_who(targets)}: a summary by a model", [
            Field("model", "Model that writes it (blank: each session's own openai: runner)", "", MODEL_SPEC),
        ], by_model, help="Enter compresses · Esc cancels · expand restores it exactly")
    elif picked is not None:
        await ui.make_each([ui.ws.compress(t.id, mask_tools=picked == "mask") for t in targets])


async def _expand(ui: Calling, targets: Targets) -> None:
    await ui.make_each([ui.ws.expand(t.id) for t in targets])


async def _set(ui: Calling, targets: Targets) -> None:
    t = targets[0]
    detail = await ui.ws.show(t.id)
    system, fail_limit, quiet = detail.system, str(detail.fail_limit), QUIET[detail.quiet]

    async def change(v: dict[str, str]) -> Outcome:
        return await ui.ws.set(
            t.id, name=v["name"] if v["name"] != t.name else None, goal=v["goal"] if v["goal"] != t.goal else None,
            system=v["system"] if v["system"] != system else None,
            timeout=_float(v, "timeout", "the timeout") if v["timeout"] != _fmt(t.timeout) else None,
            window=_int(v, "window", "the window") if v["window"] != str(t.context_window) else None,
            fail_limit=_int(v, "fail_limit", "the failure limit") if v["fail_limit"] != fail_limit else None,
            restart=v["restart"] if v["restart"] != detail.restart else None,
            quiet=v["quiet"] == QUIET[True] if v["quiet"] != quiet else None,
            tokenizer=v["tokenizer"].strip() or None)

    agent_quiet = f" (its agent {t.agent} is quiet: none are sent)" if detail.agent_quiet else ""
    await ui.form_call(f"Settings of session {t.id}", [
        Field("name", "Name", t.name), Field("goal", "Goal", t.goal),
        Field("system", "System prompt", system, multiline=True),
        Field("timeout", "Timeout of a run, seconds (0: none)", _fmt(t.timeout)),
        Field("window", "Context window, tokens", str(t.context_window)),
        Field("fail_limit", "Failed runs in a row that suspend it (0: never)", fail_limit),
        Field("restart", "Whether a run that did not finish runs again", detail.restart, choices=RESTARTS),
        Field("quiet", f"Notifications{agent_quiet}", quiet, choices=QUIETS),
        Field("tokenizer", f"How its context is counted: now {detail.tokenizer} (blank: as it is)", "",
              "tokenizer.json path · tiktoken:NAME · auto · none"),
    ], change, help="Ctrl+S saves · Tab moves · Esc cancels")


async def _set_agent(ui: Calling, agent: str) -> None:
    """E on an agent's row: the agent's own setting (``set --agent``): whether any of its
    sessions notifies."""
    some = next((s for s in ui.monitor.feed.sessions.values() if s.agent == agent), None)
    quiet = QUIET[some is not None and (await ui.ws.show(some.id, last=0)).agent_quiet]

    async def change(v: dict[str, str]) -> Outcome:
        return await ui.ws.set(agent=agent, quiet=v["quiet"] == QUIET[True])

    await ui.form_call(f"Settings of agent {agent} (each session's own: E on its row)", [
        Field("quiet", "Notifications of all its sessions", quiet, choices=AGENT_QUIETS),
    ], change, help="Ctrl+S saves · Esc cancels")


#: The settings form's choices of ``set --restart`` and ``--quiet``.
RESTARTS = ((Restart.NO, "no"), (Restart.ON_FAILURE, "on-failure: one lost, failed or timed out"),
            (Restart.ALWAYS, "always: one stopped with its engine too"))
QUIET = {False: "off", True: "on"}
QUIETS = ((QUIET[False], "it sends them (the config's notify command)"), (QUIET[True], "quiet: it sends none"))
AGENT_QUIETS = ((QUIET[False], "each session as its own setting says"), (QUIET[True], "quiet: none of them sends any"))


async def _env(ui: Calling, targets: Targets) -> None:
    t = targets[0]
    detail = await ui.ws.show(t.id)
    shown = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(detail.env.items()))
    passed = " ".join(detail.passed)

    async def change(v: dict[str, str]) -> Outcome:
        wanted = dict(environ.setting(w) for w in _words(v["env"]))
        names = _words(v["passed"])
        gone = [k for k in [*detail.env, *detail.passed] if k not in wanted and k not in names]
        outcome: Outcome | None = None
        bounded = {k: v[k] if v[k] != getattr(t, k) else None for k in ("confine", "net", "permissions")}
        if any(bounded.values()):
            outcome = await ui.ws.set(t.id, confine=bounded["confine"], net=bounded["net"],
                                      permissions=bounded["permissions"])
        changes = {k: x for k, x in wanted.items() if detail.env.get(k) != x}
        fresh = [n for n in names if n not in detail.passed]
        if outcome is None or changes or fresh or gone:
            outcome = await ui.ws.env(t.id, set=changes, passed=fresh, unset=gone)
        return outcome

    await ui.form_call(f"Environment and bounds of session {t.id}", [
        Field("env", "Settings stored with it: NAME=VALUE ... (not secrets)", shown),
        Field("passed", "Names passed from the engine's environment at run time (values never stored)", passed),
        Field("confine", "How the kernel holds its runs to its bindings", t.confine, choices=CONFINES),
        Field("net", "Where its runs may connect", t.net, choices=NETS),
        Field("permissions", "What its agent may do unasked (anything else waits for you)", t.permissions,
              choices=PERMISSIONS),
    ], change, help="Ctrl+S saves · Tab moves · Esc cancels · a name left out is removed")


CONFINES = ((bounds.BOUND, "bound: confined where the kernel can"), (bounds.STRICT, "strict: never unconfined"),
            (bounds.OFF, "off: your own reach"))
NETS = ((bounds.ANY, "any"), (bounds.NONE, "none"), (bounds.MODEL, "its model's and MCP servers' ports"))
PERMISSIONS = tuple((p, f"{p}: {lines.PERMITS[p]}") for p in bounds.PERMISSIONS)


async def _sampling(ui: Calling, targets: Targets) -> None:
    t = targets[0]
    env = (await ui.ws.show(t.id)).env
    current, turns = sampling.fields(env), str(sampling.max_turns(env))
    shown = {k: "" if current.get(k) is None else str(current[k]) for k in ("temperature", "max_tokens")}
    extra = {k: v for k, v in current.items() if k not in shown}

    async def change(v: dict[str, str]) -> Outcome:
        fields = sampling.request_fields(v["extra"])
        fields |= {k: None for k in extra if k not in fields}  # a field left out is removed
        typed = {k: v[k].strip() for k in shown if v[k].strip() != shown[k]}
        fields |= {k: None for k, text in typed.items() if not text}  # one left blank too
        return await ui.ws.set(
            t.id, max_turns=_int(v, "max_turns", "the turn limit") if v["max_turns"].strip() != turns else None,
            temperature=sampling.temperature(typed["temperature"]) if typed.get("temperature") else None,
            max_tokens=_int(typed, "max_tokens", "max output tokens") if typed.get("max_tokens") else None,
            fields=fields)

    await ui.form_call(f"Sampling of session {t.id} (its openai: runner's requests)", [
        Field("temperature", "Temperature (0-2; blank: the server's default)", shown["temperature"]),
        Field("max_tokens", "Max output tokens (blank: the server's default)", shown["max_tokens"]),
        Field("extra", "Other request fields, one JSON object (top_p, seed, stop...)",
              json.dumps(extra, sort_keys=True) if extra else "", '{"top_p": 0.9}'),
        Field("max_turns", "Model requests a run makes at most", turns),
    ], change, help="Ctrl+S saves · Esc cancels · a field left blank or out is removed")


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise InvalidArgument(f"cannot read {text!r}: {exc}") from None


async def _nice(ui: Calling, targets: Targets) -> None:
    async def nice(v: dict[str, str]) -> Outcome:
        outcome: Outcome | None = None
        for t in targets:
            outcome = await ui.ws.nice(t.id, _int(v, "priority", "the priority"))
        assert outcome is not None
        return outcome

    await ui.form_call(f"Priority of {_who(targets)} (higher runs first, -100..100)",
                       [Field("priority", "", str(targets[0].priority))], nice)


#: What the migrate form offers when the context does not fit the new window.
FIT_CHOICES = (("ask", "Ask me"), ("extractive", "Compress: summarise older messages"),
               ("mask-tools", "Compress: mask older tool outputs"),
               ("model", "Compress: a summary by the session's model"))


async def _migrate(ui: Calling, targets: Targets) -> None:
    t = targets[0]

    async def migrate(v: dict[str, str]) -> Outcome:
        window, tokenizer = _int(v, "window", "the window"), v["tokenizer"].strip() or None
        method: str | None = v["fit"]
        if method == "ask":
            try:
                return await ui.ws.migrate(t.id, v["runner"], window=window, tokenizer=tokenizer)
            except ContextTooLarge as exc:
                method = await ui.choose(str(exc), [Choice(k, label) for k, label in FIT_CHOICES[1:]],
                                         help="expand restores it exactly")
                if method is None:
                    raise  # back to the form, with the reason
        if method == "model":
            from procession.engine.summaries import migrate_by_model

            return await migrate_by_model(ui.ws, t.id, v["runner"], window=window, tokenizer=tokenizer,
                                          spec=v["model"].strip() or None)
        return await ui.ws.migrate(t.id, v["runner"], window=window, tokenizer=tokenizer, compress=True,
                                   method=method or "extractive")

    await ui.form_call(f"Migrate session {t.id} to another runner", [
        Field("runner", "Runner", t.runner), Field("window", "Context window, tokens", str(t.context_window)),
        Field("fit", "If the context does not fit", "ask", choices=FIT_CHOICES),
        Field("model", "Model that writes a summary, if one is chosen (blank: the session's or the new runner's)",
              "", MODEL_SPEC),
        Field("tokenizer", "Tokenizer (blank: the new model's own, if at hand)", "", "tokenizer.json path · tiktoken:NAME"),
    ], migrate, help=f"runners: {lines.runner_forms()}")


#: The move form's choice of what travels.
FILES_CHOICES = (("yes", "Its folder's files, made there"), ("no", "No file: its folder is there already"))


async def _move(ui: Calling, targets: Targets) -> None:
    t = targets[0]

    def move(v: dict[str, str]) -> Awaitable[Outcome]:
        mapping = parse.path_map(_words(v["map"]), here_=False)
        return ui.ws.move(t.id, v["host"].strip(), mapping=mapping, files=v["files"] == "yes")

    folder = t.worktree.moves_with if t.worktree else t.cwd
    await ui.form_call(f"Move session {t.id} ({printable(t.name)}) from host {printable(t.host)} to another host", [
        Field("host", "Host", "", "a host whose engine runs: procession --host HOST run"),
        Field("map", f"Where its paths go there (blank: the same paths; its folder is {printable(t.cwd)}"
                     + (f", in a worktree of {printable(folder)}" if folder != t.cwd and t.worktree else "") + ")", "",
              f"{printable(folder)}=NEW …"),
        Field("files", "What travels", "yes", choices=FILES_CHOICES),
    ], move, help="the files go into a new or empty folder there (one holding anything is refused); its engine and"
                  " the new host's do the move, and the HOST column shows it there once it is")


async def _merge(ui: Calling, targets: Targets) -> None:
    source = targets[0]
    await ui.form_call(f"Merge session {source.id} ({printable(source.name)}) into which session?",
                       [Field("target", "", str(source.parent or ""), "SID")],
                       lambda v: _merge_into(ui, source, _int(v, "target", "the target")),
                       help="Three-way: conflicting memory keys are shown for you to settle before anything is"
                            f" applied. Session {source.id} ends (terminated, merged) when the merge is done.")


async def _merge_into(ui: Calling, source: SessionInfo, target: int) -> Outcome | None:
    """The merge, its plan first for a fork with a folder of its own, its conflicts settled in
    the Conflicts dialog; None when the user gives up (nothing applied), a refusal raised."""
    resolution = Resolution()
    shown = source.worktree is None  # a fork with its own folder: what its files do is shown first
    while True:
        try:
            if not shown:
                plan = await ui.ws.merge_plan(source.id, target, resolution)
                if plan.clean:
                    if not await ui.confirm(f"Merge session {source.id} into {target}?", lines.merge_plan(plan)[1:]):
                        ui.monitor.notify("merge cancelled: nothing was applied", timeout=3)
                        return None
                    shown = True
            return await ui.ws.merge(source.id, target, resolution)
        except MergeConflict as exc:
            choices = await ui.app.push_screen_wait(Conflicts(source.id, target, exc.conflicts, exc.files))
            if choices is None:
                ui.monitor.notify("merge cancelled: nothing was applied", timeout=3)
                return None
            keys = {k: v for k, v in choices.items() if not k.startswith(FILE)}
            resolution = Resolution(None, {k: side for k, (side, _) in keys.items() if side in ("ours", "theirs")},
                                    {k: value for k, (side, value) in keys.items() if side == "set"},
                                    {k[len(FILE):]: side for k, (side, _) in choices.items() if k.startswith(FILE)})


async def _save(ui: Calling, targets: Targets) -> None:
    t = targets[0]
    picked = await ui.choose(f"Save session {t.id}", [Choice("checkpoint", "A checkpoint in the store…"),
                                                      Choice("file", "A snapshot file…")])
    if picked == "checkpoint":
        await ui.form_call(f"Checkpoint name for session {t.id}", [Field("name", "", time.strftime("cp-%Y%m%d-%H%M%S"))],
                           lambda v: ui.ws.save(t.id, v["name"]))
    elif picked == "file":
        slug = "".join(ch if ch.isalnum() else "-" for ch in t.name).strip("-") or "session"

        async def save(v: dict[str, str]) -> Outcome:
            path = parse.here(v["file"])
            replace = os.path.exists(path) and await ui.confirm(f"{path} exists. Replace it?",
                                                                 ["The file there is lost."])
            return await ui.ws.save(t.id, file=path, replace=replace)

        await ui.form_call(f"Write session {t.id} to a snapshot file", [Field("file", "", f"{slug}-{t.id}.json")], save)


async def _approve(ui: Calling, targets: Targets) -> None:
    fit = [t for t in targets if t.unapproved]
    if not fit:
        ui.monitor.notify("nothing to approve: the runner and every trigger are armed already", severity="warning")
        return
    body = [line for t in fit for line in lines.approval(await ui.ws.show(t.id))]
    if await ui.confirm("Approve? These will be allowed to run:", body):
        await ui.make_all(ui.ws.each(Call.APPROVE, [t.id for t in fit]))


async def _bind(ui: Calling, targets: Targets) -> None:
    t = targets[0]
    await ui.form_call(f"Bind a resource to {t.id}", [Field("kind", "Kind", "folder"), Field("uri", "Path or URI")],
                       lambda v: ui.ws.bind(t.id, v["kind"], parse.local_paths(v["kind"], [v["uri"]])[0]),
                       help=f"kinds: {', '.join(limits.RESOURCE_KINDS)} (paths are read against this monitor's folder)")


async def _unbind(ui: Calling, targets: Targets) -> None:
    t = targets[0]
    resources = (await ui.ws.show(t.id)).resources
    if not resources:
        ui.monitor.notify(f"session {t.id} has no resource bound", severity="warning")
        return
    picked = await ui.choose(f"Unbind from {t.id}", [Choice(str(r.id), lines.resource_line(r)) for r in resources])
    if picked is not None:
        await ui.make(ui.ws.unbind(t.id, picked))


async def _request(ui: Calling, targets: Targets) -> Request | None:
    """The request a flow answers: the one the screen points at (the queue view's), else the
    session's only one, else the one picked from its list."""
    chosen = ui.chosen_request()
    if chosen is not None:
        try:
            return await ui.ws.request(chosen)
        except ProcessionError as exc:
            ui.monitor.notify(str(exc), severity="error", timeout=8)
            return None
    t = targets[0]
    found = await ui.ws.pending([t.id])
    if not found:
        ui.monitor.notify(f"session {t.id} waits for no answer", severity="warning")
        return None
    if len(found) == 1:
        return found[0]
    picked = await ui.choose(f"What {_who(targets)} asks", [Choice(str(r.id), lines.request_line(r, width=70))
                                                             for r in found])
    return next((r for r in found if str(r.id) == picked), None)


async def _allow(ui: Calling, targets: Targets) -> None:
    r = await _request(ui, targets)
    if r is None:
        return
    how = await ui.choose(f"Allow request {r.id} of session {r.sid}?", [
        Choice("once", f"Allow once: {one_line(requests.summary(r.tool, r.input), 50)}"),
        Choice("always", f"Allow {requests.rule_name(r.tool, r.subject)} from now on, for this session")],
        help="\n".join(lines.request_text(r)))
    if how is not None:
        await ui.make(ui.ws.allow(r.id, always=how == "always"))


async def _deny(ui: Calling, targets: Targets) -> None:
    r = await _request(ui, targets)
    if r is None:
        return
    await ui.form_call(f"Deny request {r.id} of session {r.sid}", [Field("why", "Why (the agent is told)")],
                       lambda v: ui.ws.deny(r.id, why=v["why"]), help="\n".join(lines.request_text(r)))


async def _forget(ui: Calling, targets: Targets) -> None:
    t = targets[0]
    found = await ui.ws.rules(t.id)
    if not found:
        ui.monitor.notify(f"session {t.id} has no rules (allow --always makes them)", severity="warning")
        return
    picked = await ui.choose(f"Forget a rule of {_who(targets)}: its calls ask again",
                             [Choice(str(r.id), lines.rule_line(r)) for r in found])
    if picked is not None:
        await ui.make(ui.ws.forget(int(picked)))


async def _limit(ui: Calling, targets: Targets) -> None:
    t = targets[0]
    found = [b for b in await ui.ws.budgets(t.id) if b.scope == "session"]
    caps = found[0].caps if found else {}

    def shown(key: str) -> str:
        value = caps.get(key)
        return "" if value is None else f"{value:g}"

    async def made(v: dict[str, str]) -> Outcome:
        given = {k: v[k].strip() for k in ("tokens", "cost", "time", "runs")}
        return await ui.ws.limit(
            t.id, tokens=budgets.amount(given["tokens"], "tokens") if given["tokens"] else None,
            cost=budgets.amount(given["cost"], "cost") if given["cost"] else None,
            seconds=budgets.seconds(given["time"]) if given["time"] else None,
            runs=int(budgets.amount(given["runs"], "runs")) if given["runs"] else None, per=v["per"] or None)

    await ui.form_call(f"Budget of {_who(targets)}", [
        Field("tokens", "Tokens (500k, 2M)", shown("tokens")), Field("cost", "Cost (US$)", shown("cost")),
        Field("time", "Running time (90m, 2h)", f"{caps['seconds']:g}s" if "seconds" in caps else ""),
        Field("runs", "Runs", shown("runs")),
        Field("per", "Per", found[0].per if found else "day", choices=tuple((p, p) for p in budgets.PERIODS))],
        made, help="\n".join([*(lines.budget_line(b) for b in await ui.ws.budgets(t.id)),
                               "a cap left empty is kept; procession limit SID --clear removes the limit"]))


async def _trigger(ui: Calling, targets: Targets) -> None:
    t = targets[0]
    choices = [Choice("add", "Add a trigger…")] + [Choice(str(x.id), f"Remove {lines.trigger_line(x)}")
                                                   for x in t.triggers]
    picked = await ui.choose(f"Triggers of {_who(targets)}", choices)
    if picked is None:
        return
    if picked != "add":
        await ui.make(ui.ws.trigger_remove(t.id, int(picked)))
        return

    async def add(v: dict[str, str]) -> Outcome:
        kind, *words = parse.words(v["trigger"]) or [""]
        found = parse.trigger_options(words)
        return await ui.ws.trigger_add(t.id, kind, parse.local_paths(kind, found.args), debounce_ms=found.debounce_ms,
                                       branch=found.branch, paths=found.paths)

    await ui.form_call(f"Add a trigger to {t.id}", [Field("trigger", "", placeholder='every 5m')], add,
                       help='watch PATH… · cron "0 9 1 * *" · every 5m · inbox · after SID'
                            " · commit [REPO] [--branch B] [--path GLOB]… · --debounce MS (watch, commit)")


async def _adopt(ui: Calling, targets: Targets) -> None:
    adoption = await ui.form_call("Adopt an agent CLI's own sessions", [
        Field("cli", "Whose", "claude", choices=tuple((c, agents.CLIS[c].title) for c in transcripts.CLIS)),
        Field("ident", "Session id or transcript file", placeholder="empty: every one it keeps here"),
    ], lambda v: ui.ws.adopt(v["cli"], v["ident"].strip() or None, every=not v["ident"].strip()),
        help="Ctrl+S adopts · Tab moves · Esc cancels · each becomes a sleeping session; one adopted before is"
             " not made again",
        report=lambda a: results.adoption(a, brief=True))
    made = [r for r in adoption.results if not r.already] if adoption else []
    if made:
        ui.monitor.move_to(made[0].sid)


async def _sync(ui: Calling, targets: Targets) -> None:
    await ui.make_all(ui.ws.sync_all([t.id for t in targets]))


async def _attach(ui: Calling, targets: Targets) -> None:
    """o: the agent's own CLI on the session, in this terminal; the table comes back when it exits."""
    from procession.engine.runners.agents import interactive

    t = targets[0]
    if t.outside is not None and not await ui.confirm(
            f"Session {t.id} is open in its agent's own CLI already (pid {t.outside}). Open it a second time?",
            ["Two CLIs on one session write one transcript: each sees only its own turns."]):
        return
    attached = await ui.make(ui.ws.attach(t.id), quiet=True)
    if attached is None:
        return
    try:
        with ui.app.suspend():
            interactive(attached)
    finally:
        await ui.make(ui.ws.detach(attached))


def _int(values: dict[str, str], key: str, what: str) -> int:
    """The whole number in the form field ``key``; a refusal puts the cursor back in it."""
    try:
        return int(values[key].strip())
    except ValueError:
        raise FieldRefused(key, ProcessionError(f"{what} is a whole number, not {values[key]!r}")) from None


def _float(values: dict[str, str], key: str, what: str) -> float:
    """The number of seconds in the form field ``key``; a refusal puts the cursor back in it."""
    try:
        return float(values[key].strip())
    except ValueError:
        raise FieldRefused(key, ProcessionError(f"{what} is a number of seconds, not {values[key]!r}")) from None


def _fmt(value: float | None) -> str:
    return "0" if value is None else f"{value:g}"


_FLOWS: dict[Call, tuple[Any, ...]] = {
    Call.SPAWN: ("n", _spawn, None),
    Call.LOAD: ("L", _load, None),
    Call.FORK: ("f", _fork, None),
    Call.SEND: ("w", _send, None),
    Call.MEMORY: ("M", _memory, None),
    Call.COMPRESS: ("c", _compress, None),
    Call.EXPAND: ("x", _expand, None),
    Call.ACTIVATE: ("a", _lifecycle(Call.ACTIVATE), None),
    Call.SUSPEND: ("z", _suspend, lambda s: allowed(Call.SUSPEND, s.state) or allowed(Call.RESUME, s.state),
                   "suspend (a running step is stopped in place), or resume what is suspended"),
    Call.RESUME: ("r", _lifecycle(Call.RESUME), None),
    Call.INTERRUPT: ("i", _lifecycle(Call.INTERRUPT), None),
    Call.CANCEL: ("C", _cancel, None),
    Call.SET: ("E", _set, None),
    Call.ENV: ("V", _env, None),
    Call.NICE: ("N", _nice, None),
    Call.MIGRATE: ("g", _migrate, None),
    Call.MOVE: ("G", _move, None),
    Call.MERGE: ("m", _merge, None),
    Call.SAVE: ("S", _save, None),
    Call.ADOPT: ("O", _adopt, None),
    Call.SYNC: ("y", _sync, lambda s: s.runner.split(":")[0] in transcripts.CLIS and allowed(Call.SYNC, s.state)),
    Call.ATTACH: ("o", _attach, lambda s: s.runner.split(":")[0] in transcripts.CLIS and allowed(Call.ATTACH, s.state),
                  "open the agent's own CLI on the session, here (the table comes back when it exits)"),
    Call.APPROVE: ("A", _approve, lambda s: s.unapproved and allowed(Call.APPROVE, s.state)),
    Call.BIND: ("b", _bind, None),
    Call.UNBIND: ("B", _unbind, lambda s: allowed(Call.UNBIND, s.state)),
    Call.TRIGGER: ("T", _trigger, None),
    Call.ALLOW: ("Y", _allow, None),
    Call.DENY: ("D", _deny, None),
    Call.FORGET: ("R", _forget, None),
    Call.LIMIT: ("dollar_sign", _limit, None),
}
_missing = [c for c in USER_CALLS if c not in _FLOWS]
if _missing:
    raise RuntimeError(f"the monitor has no flow for {', '.join(_missing)}: add one to procession.tui.calls")
#: Flows of a call that are not its own flow: a form for part of what the call changes.
_MORE: dict[str, tuple[Any, ...]] = {
    "sampling": (Call.SET, "P", _sampling, lambda s: s.runner.startswith("openai:") and allowed(Call.SET, s.state),
                 "the openai: runner's sampling: turn limit, temperature, max output tokens, request fields"),
}
#: Every flow by its name (a call's own is the call's name): what keys, the menu and the palette run.
FLOWS: dict[str, Flow] = {call.value: Flow(call.value, call, *_FLOWS[call]) for call in USER_CALLS} | {
    name: Flow(name, *flow) for name, flow in _MORE.items()}
#: Flows that, on an agent's row of the tree, make their call on the agent itself (not on its sessions).
ON_AGENT: dict[str, AgentRun] = {Call.SET.value: _set_agent}
