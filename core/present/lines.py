"""Lines of text about sessions, triggers, memory, runs and the journal, for every face.

The CLI prints these lines and the monitor shows the same ones in its views, so that a
session reads the same wherever it is looked at. Every string that came from a user, a
session or a runner goes through ``printable`` here: no face has to remember to.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from typing import Any

from ..calls.merge import MISSING
from ..model.records import (
    AgentHome,
    ContextItem,
    JournalEntry,
    MoveInfo,
    MergePlan,
    Message,
    Budget,
    Request,
    Resource,
    RunInfo,
    Rule,
    SessionDetail,
    SessionInfo,
    TriggerInfo,
    Waited,
    Worktree,
)
from ..model import agents, allowed, bounds, requests, runner_spec, search, toolcalls
from ..model.agents import ACP, HEADLESS
from ..model.allowed import ToolUse
from ..model.search import Found
from . import words
from .words import one_line, printable


def value(v: Any) -> str:
    """A JSON value as one safe line; an absent one (a merge side without the key) as such."""
    if v is MISSING:
        return "(absent)"
    return printable(json.dumps(v, sort_keys=True, ensure_ascii=False, separators=(",", ":")))


# ---------------------------------------------------------------- triggers


def trigger_label(t: TriggerInfo) -> str:
    """A short human form: ``watch src/**``, ``cron 0 9 1 * *``, ``every 5m``, ``after 3``,
    ``commit /repo --branch main --path src/**`` (the words that would add it again)."""
    spec = t.spec
    match t.kind:
        case "watch":
            text = "watch " + " ".join(spec["paths"])
        case "cron":
            text = f"cron {spec['expr']}"
        case "every":
            text = f"every {spec['text']}"
        case "after":
            text = f"after {spec['session']}"
        case "commit":
            text = " ".join(["commit", spec["repo"], f"--branch {spec['branch']}",
                             *(f"--path {p}" for p in spec["paths"])])
        case _:
            text = t.kind
    return printable(text)


def trigger_kinds(s: SessionInfo) -> str:
    """``cron,watch``; a kind whose triggers are all disarmed (a fork's copies, a loaded
    session's) reads ``watch(off)``, so that nobody waits for a wake that cannot come; a
    commit trigger whose repository or branch is gone reads ``commit(!)``."""
    kinds: dict[str, bool] = {}
    broken: set[str] = set()
    for t in s.triggers:
        kinds[t.kind] = kinds.get(t.kind, False) or (t.armed and s.armed)
        if t.kind == "commit" and t.seen.get("problem"):
            broken.add(t.kind)
    return ",".join(f"{kind}(off)" if not armed else f"{kind}(!)" if kind in broken else kind
                    for kind, armed in kinds.items())


def open_outside(pid: int) -> str:
    """A session its agent's own CLI has open, outside Procession (process ``pid``)."""
    return f"open in its agent's own CLI (pid {pid})"


def trigger_line(t: TriggerInfo, now: float | None = None) -> str:
    state = "armed" if t.armed else "disarmed"
    fired = f", fired {t.fired}x, last {words.ago(t.last_fired, now)}" if t.fired else ""
    pending = ", a firing waits for the session to be idle" if t.pending else ""
    line = f"[{t.id}] {trigger_label(t)} ({state}{fired}{pending})"
    if t.kind == "commit":
        line += commit_seen(t)
    return line


def commit_seen(t: TriggerInfo) -> str:
    """What a commit trigger last saw (``; last commit 1a2b3c4d5e on main: subject``) and its
    problem, if its repository or branch is gone."""
    seen = t.seen
    last = seen.get("last")
    text = f"; last commit {last['id'][:10]} on {last['branch']}: {one_line(last['subject'], 60)}" if last else \
        "; no commit seen yet"
    if seen.get("problem"):
        text += f"; problem: {one_line(seen['problem'], 120)}"
    return printable(text)


# ---------------------------------------------------------------- one session


def memory_line(key: str, v: Any) -> str:
    return f"{printable(key)} = {value(v)}"


def resource_line(r: Resource) -> str:
    return f"[{r.id}] {r.kind} {printable(r.uri)} ({r.mode})"


def state_text(s: SessionInfo) -> str:
    text = f"{s.state}{f' ({s.reason})' if s.reason else ''}"
    if s.merged_into:
        text += f" into {s.merged_into}"
    return text


def title(s: SessionInfo) -> str:
    return f"session {s.id}  {printable(s.name)}  (agent {printable(s.agent)})"


def facts(d: SessionDetail, now: float | None = None) -> list[tuple[str, str]]:
    """What there is to say of a session before its context: ``show`` prints these one a line,
    the detail view lays them out in its header."""
    s = d.info
    out = [
        ("state", state_text(s) + ("" if s.armed else "  [not approved: runner and triggers disarmed]")),
        ("priority", str(s.priority)),
        ("runner", f"{printable(s.runner)}  window {s.context_window}"),
        ("context", f"{s.context_tokens} tokens ("
                    f"{'as the agent reported it' if s.context_source == 'agent' else printable(d.tokenizer)}),"
                    f" {s.messages} items; history {s.length} messages"),
        ("created", f"{words.clock(s.created)}   last active {words.ago(s.last_active, now)}"),
        ("folder", f"{printable(s.cwd)}  on host {printable(s.host)}" + ("  (lost: its engine died)" if s.host_lost else "")),
    ]
    if d.move is not None:
        out.append(({"done": "moved", "failed": "move", "cancelled": "move"}.get(d.move.stage, "moving"),
                    move_text(d.move, now)))
    if s.timeout:
        out.append(("timeout", f"{s.timeout:g} s a run"))
    if d.restart != "no":
        out.append(("restart", f"{d.restart}: a run that did not finish runs again"))
    if d.quiet:
        out.append(("notify", "none: it is quiet (set --quiet off)"))
    elif d.agent_quiet:
        out.append(("notify", f"none: its agent is quiet (set --agent {printable(s.agent)} --quiet off)"))
    out += [("budget", budget_line(b, now)) for b in d.budgets]
    if s.goal:
        out.append(("goal", printable(s.goal)))
    if s.parent:
        out.append(("parent", f"{s.parent} at message {s.fork_seq}"))
    if d.agent_ref:
        ref = d.agent_ref
        said = f"{printable(ref['cli'])} session {printable(str(ref['id']))}"
        if ref.get("fork"):
            said = f"forks {said}{' at ' + printable(str(ref['at'])) if ref.get('at') else ''} on its first run"
        if isinstance(ref.get("acp"), dict):  # the agent that last ran it over ACP, as it named itself
            acp = ref["acp"]
            said += f"  over ACP {acp.get('protocol')}: {printable(str(acp.get('agent')))} {printable(str(acp.get('version')))}"
        out.append(("agent", said + (f"  {printable(str(ref['transcript']))}" if ref.get("transcript") else "")))
    if d.agent_home is not None:
        out.append(("agent home", agent_home_text(d.agent_home)))
    if d.env or d.passed:
        shown = [f"{printable(k)}={printable(v)}" for k, v in sorted(d.env.items())]
        out.append(("env", " ".join(shown + [f"{printable(k)} (passed)" for k in d.passed])))
    out.append(("bounds", bounds_text(s)))
    if s.status:
        out.append(("doing", printable(s.status)))
    if s.worktree:
        out.append(("worktree", worktree_text(s.worktree)))
    return out


def agent_home_text(h: AgentHome) -> str:
    """A session's agent state folder, as ``show`` says it: where, and what its CLI changed there."""
    said = printable(h.folder) + ("" if h.made else "  (made by its first run)")
    if h.changed:
        said += (f"  its {printable(h.cli)} changed its settings there: {', '.join(printable(c) for c in h.changed)}"
                 " (kept to this session; your own are as they were)")
    return said


def move_text(m: MoveInfo, now: float | None = None) -> str:
    """A session's last move, as ``show`` says it."""
    where = f"from host {printable(m.source)} to host {printable(m.target)}"
    if m.stage == "failed":
        return f"{where} failed {words.ago(m.updated, now)}: {printable(m.problem or '')}"
    if m.stage == "cancelled":
        return f"{where} taken back {words.ago(m.updated, now)}"
    if m.stage == "done":
        return f"{where} {words.ago(m.updated, now)}" + (f"; {printable(m.problem)}" if m.problem else "")
    return f"{where}: {m.stage}, since {words.ago(m.created, now)}"


#: What each ``--permissions`` lets an agent do unasked, as ``show`` says it.
PERMITS = {bounds.ASK: "only reads", bounds.BOUND: "what its bounds allow", bounds.ALL: "anything"}


def bounds_text(s: SessionInfo) -> str:
    """How the kernel holds its runs, and what held its last one: ``bound, net any; its last
    run confined (landlock ABI 7)``, or ``...; confinement: none (this kernel has no Landlock)``."""
    if s.confine == bounds.OFF:
        said = f"off: its runs have your own reach (--confine off), net {s.net}"
    else:
        said = f"{s.confine} (its bindings), net {s.net}"
    said += f"; its agent may do {PERMITS[s.permissions]} unasked (--permissions {s.permissions})"
    held = s.confinement or ""
    if held.startswith("landlock"):
        said += f"; its last run was confined ({held})"
    elif held.startswith("none"):
        said += f"; confinement: none ({held.partition(': ')[2]})"
    return printable(said)


def runner_forms() -> str:
    """How each kind of runner is written, for a form's hint: the kinds ``runner_spec`` reads,
    its builtins and every agent CLI of ``agents.CLIS`` named from there, so that a runner
    added there is offered everywhere."""
    builtins = "|".join(runner_spec.BUILTINS)
    return " · ".join(["command:<shell command>", "openai:<model>[@<url>][#KEY_VAR]", f"builtin:<{builtins}>",
                       *(f"{kind}:[<model>]" for kind in HEADLESS),
                       f"acp:<agent>[:<model>] (agents: {', '.join(ACP)})", "acp:command:<program> <args>"])


def agent_lines(found: Sequence[agents.Installed]) -> str:
    """``procession agents``: each agent CLI, the runners it can be, and where it is installed
    here (or how to install it)."""
    width = max(len(f.kind) for f in found)
    out = []
    for f in found:
        runners = ", ".join(f.runners)
        where = [f"{what} {printable(path)}" for what, path in (("at", f.program), ("its ACP adapter at", f.adapter))
                 if path]
        missing = [f"install: {f.install}"] if f.install else []
        out.append(f"{f.kind:<{width}}  {f.title} ({runners}): " + "; ".join(where + missing))
    return "\n".join(out)


def request_line(r: Request, now: float | None = None, width: int = 100) -> str:
    """``  4  12 coder (dev)      3m  Bash: git push origin main``: one request waiting."""
    what = one_line(f"{r.tool}: {requests.summary(r.tool, r.input)}", max(20, width - 42))
    who = words.pad(one_line(f"{r.session} ({r.agent})", 24), 24)
    return printable(f"{r.id:>4} {r.sid:>4} {who} {words.age(r.asked, now):>4}  {what}")


def request_text(r: Request) -> list[str]:
    """One request whole: who asked, when, the tool, its input as the agent gave it, its answer."""
    out = [f"request {r.id}: session {r.sid} {r.session} ({r.agent}), run {r.run or '-'}, asked {words.clock(r.asked)}",
           f"tool: {r.tool}" + (f" (a rule of it: {requests.rule_name(r.tool, r.subject)})" if r.subject else ""),
           "input:", json.dumps(r.input, indent=2, ensure_ascii=False, sort_keys=True)]
    if r.answer:
        out.append(f"answer: {r.answer}" + (f" ({r.why})" if r.why else "")
                   + (f" by {r.answered_by}" if r.answered_by else "")
                   + (f" at {words.clock(r.answered)}" if r.answered else ""))
    return [printable(line) for line in out]


def rule_line(r: Rule, now: float | None = None) -> str:
    """``   3  12  Bash(ls: any arguments)  made 2h ago (request 4)``; an old rule read otherwise
    than it was made says so."""
    said = [f"request {r.request}"] if r.request else []
    if r.reads != r.subject:
        said.append(_reread(r))
    return printable(f"{r.id:>4} {r.sid:>4}  {requests.rule_name(r.tool, r.reads)}  made {words.ago(r.made, now)}"
                     + (f" ({'; '.join(said)})" if said else ""))


def _reread(r: Rule) -> str:
    """Why an old program rule is read as it is now (``requests.reading``)."""
    made = f"made as {requests.rule_name(r.tool, r.subject)}: {r.subject} may run other programs, so"
    if r.reads is None:
        return f"{made} it allows nothing now, its call gone (forget it)"
    return f"{made} it allows only the call it was made from"


def budget_line(b: Budget, now: float | None = None) -> str:
    """``session 3, per day: tokens 1.2M of 2M (60%), cost $1.20 of $5.00 (24%); until 00:00``."""
    parts = [f"{name} {_figure(name, b.spend[name])} of {_figure(name, cap)} ({_part(b.used.get(name, 1))})"
             for name, cap in b.caps.items()]
    until = f"; until {time.strftime('%a %H:%M', time.localtime(b.ends))}" if b.ends else ""
    period = "in total" if b.per == "total" else f"per {b.per}"
    return printable(f"{b.scope} {b.name}, {period}: {', '.join(parts)}{until}")


def _part(used: float) -> str:
    """How much of a cap is spent: a percentage, or ``reached`` for a cap of 0 (spent from
    the start: its part is infinite, and was an ``OverflowError`` as a percentage)."""
    return f"{int(used * 100)}%" if math.isfinite(used) else "reached"


def _figure(name: str, value: float) -> str:
    if name == "cost":
        return f"${value:.2f}"
    if name == "seconds":
        return words.duration(value)
    return words.count(value)


def worktree_text(w: Worktree) -> str:
    """``/repo.forks/review-2 on branch procession/review-2 (from /repo)``, or a copy's."""
    if w.kind == "git":
        return printable(f"{w.path} on branch {w.branch} (a git worktree of {w.source})")
    return printable(f"{w.path} (a copy of {w.source})")


def summary(d: SessionDetail, now: float | None = None) -> list[str]:
    """``show``'s head: the title, then the facts one a line."""
    return [title(d.info), *(f"  {label:<10} {value}" for label, value in facts(d, now))]


def approval(d: SessionDetail) -> list[str]:
    """What approving a session arms, to read before arming it: everything that takes effect —
    its runner, its folder, its bounds, every setting of its environment (flagged when it
    changes what a program runs or loads), every name it passes, every trigger, every bound
    file, folder, database, command and MCP server (its steps get to use them)."""
    s = d.info
    out = [f"{s.id} {printable(s.name)}: runner {printable(s.runner)}", f"    works in {printable(s.cwd)}",
           f"    bounds {bounds_text(s)}"]
    out += [f"    env {printable(k)}={printable(v)}" + ("   <- changes what a program runs or loads"
                                                        if bounds.loads_code(k) else "") for k, v in sorted(d.env.items())]
    out += [f"    passes ${printable(k)} (the engine's own value, given to each run)" for k in d.passed]
    out += [f"    trigger {trigger_label(t)}" for t in s.triggers]
    out += [f"    bound {resource_line(r)}" for r in d.resources]
    return out


def context_line(item: ContextItem, width: int = 90) -> str:
    if item.fold is not None:
        return f"[{item.seq:>5}] ~~ {item.folded} items folded ({item.tokens} tok): {one_line(item.content, width - 20)}"
    pin = "*" if item.pinned else " "
    return f"[{item.seq:>5}]{pin}{item.role:<9} {gist(item.role, item.content, item.meta, width)}"


def gist(role: str, content: str, meta: dict[str, Any] | None, width: int) -> str:
    """A message on one line. A tool call says what it ran and what came of it: its output
    pressed onto the line of its input would read as more of the input."""
    tool = meta.get("tool") if role == "tool" and meta else None
    if not isinstance(tool, dict):
        return one_line(content, width)
    output = tool.get("output")
    if not isinstance(output, str):
        came = "no result"
    elif tool.get("is_error"):
        came = "error: " + (output.strip().splitlines() or [""])[0]
    else:
        lines = output.count("\n") + (not output.endswith("\n")) if output else 0
        came = words.plural(lines, "line") + " of output" if lines else "no output"
    return one_line(f"{tool.get('name')}: {toolcalls.summary(tool.get('input'))} -> {came}", width)


def more_context(shown: int, total: int, tail: str, whole: str) -> str:
    """What a screenful of a context says under its last item: how much it left out, and the
    commands (``tail``: one taking a count N; ``whole``: every message) that show more."""
    return (f"(the last {shown} of {words.plural(total, 'context item')}: {tail} shows the last N,"
            f" {whole} every message whole)")


def history_line(m: Message, *, short: bool = False) -> str:
    """One message of ``history``: whole (continuation lines indented), or on one line. As
    written: the text it goes into is made printable once, whole, where it is printed
    (``cli.terminal``), not a field at a time (a million messages are two million fields)."""
    head = f"[{m.seq:>5}]{'*' if m.pinned else ' '}{m.role:<9} {m.author:<12} "
    if short:
        return head + gist(m.role, m.content, m.meta, 100)
    return head + (m.content.replace("\n", "\n" + " " * len(head)) if "\n" in m.content else m.content)


#: What a search that found nothing says.
FOUND_NONE = "no message holds it"


def found_text(found: Sequence[Found], now: float | None = None) -> str:
    """What ``grep`` found, a hit each two lines, or that nothing holds it."""
    return "\n".join(found_line(f, now) for f in found) if found else FOUND_NONE


def found_title(found: Sequence[Found], shown: int) -> str:
    """The monitor's heading of what a search found."""
    if not found:
        return f"What was said: {FOUND_NONE}"
    best = f", the best {shown} shown" if len(found) >= shown else ""
    return f"What was said: {words.plural(len(found), 'message')}{best}"


def found_at(sid: int, at: int, folded: bool) -> str:
    """What marks, in a session's context, the message a search opened it at."""
    if folded:
        return f"▼ message {at}, found, is archived in this fold (procession history {sid} --range {at}:{at})"
    return f"▼ message {at}, found"


def found_line(f: Found, now: float | None = None) -> str:
    """One hit of ``grep``: where (session, its name, position), who said it and when, the
    forks that share it; then the snippet on one line, each hit between brackets."""
    where = f"{f.session} {one_line(f.name, 24)}, message {f.seq}"
    snippet = " ".join(f.snippet.split()).replace(search.START, "[").replace(search.END, "]")
    tail = "  (archived)" if f.archived else ""
    if f.forks:
        tail += f"  (also in {words.plural(len(f.forks), 'fork')}: {', '.join(map(str, f.forks))})"
    return f"{where:<40} {f.role:<9} {f.agent}@{f.host}  {words.ago(f.created, now)}{tail}\n    {snippet}"


# ---------------------------------------------------------------- merges


def conflict_lines(conflicts: dict[str, tuple[Any, Any, Any]], files: dict[str, str], source: int,
                   target: int) -> list[str]:
    """A merge's conflicts, one a line: memory keys with the three values, files with what
    each side did."""
    out = [f"{printable(key)}: base {value(b)}, ours ({target}) {value(o)}, theirs ({source}) {value(t)}"
           for key, (b, o, t) in sorted(conflicts.items())]
    out += [f"file {printable(path)}: {printable(kind)} (--ours {printable(path)} or --theirs {printable(path)})"
            for path, kind in sorted(files.items())]
    return out


def settled(how: Any) -> str:
    """How a memory conflict was settled: a side kept (``ours``: nothing changes) or a value set."""
    if isinstance(how, dict):
        return f"set to {value(how['value'])}"
    return "ours kept" if how == "ours" else "theirs taken"


def merge_plan(p: MergePlan) -> list[str]:
    """``merge --dry-run``: what the merge would do, or what stops it."""
    out = [f"merge {p.source} into {p.target}" + (" would:" if p.clean else " is stopped by conflicts:"),
           f"  {words.plural(p.messages, 'message')} join {p.target}"
           + (f" (after the history they share with {p.base})" if p.base is not None else " (they share no history)")]
    out += [f"  memory: set {memory_line(k, v)}" for k, v in p.memory_set.items()]
    out += [f"  memory: delete {printable(k)}" for k in p.memory_deleted]
    out += [f"  memory: {printable(k)} settled: {settled(how)}" for k, how in p.resolved.items()]
    f = p.files
    if f is not None:
        where = (f"branch {f.branch} into {f.target_branch} in {f.folder}" if f.kind == "git"
                 else f"the copy {f.worktree} into {f.folder}")
        out.append(printable(f"  files: {where}: {words.plural(len(f.changes), 'file')} would change"))
        out += [f"    {status} {printable(path)}" for status, path in f.changes]
        out += [f"    settled {printable(path)}: {side}" for path, side in f.resolved.items()]
        out.append(printable(f"  then {f.worktree} is removed" + (f" with its branch {f.branch}" if f.branch else "")))
    if not p.clean:
        out.append("  conflicts (nothing is applied until every one is settled):")
        out += [f"    {line}" for line in conflict_lines(p.conflicts, f.conflicts if f else {}, p.source, p.target)]
    return out


# ---------------------------------------------------------------- runs and the journal

RUNS_HEADER = (f"{'RUN':>5} {'SID':>4}  {'OUTCOME':<11} {'STARTED':<19} {'TIME':>7} {'EXIT':>4} {'PID':>7}"
               f" {'TOKENS':>9}  CAUSE")


def causes(r: RunInfo) -> str:
    return printable(",".join(str(c.get("kind", "?")) for c in r.cause))


def run_line(r: RunInfo, now: float | None = None) -> str:
    took = f"{(r.ended or now or time.time()) - r.started:.1f}s"
    line = (f"{r.id:>5} {r.session:>4}  {r.outcome or 'running':<11} {words.clock(r.started):<19}"
            f" {took:>7} {'-' if r.exit_code is None else r.exit_code:>4} {r.pid or '-':>7}"
            f" {r.tokens_in + r.tokens_out:>9}  {causes(r)}")
    if r.error:
        line += f"\n        {one_line(r.error, 100)}"
    return line


def tool_use_line(u: ToolUse) -> str:
    """A tool call of a run, and what let it run (``model.allowed``): who, which rule, or
    nothing asked; how long it waited for a person; what the kernel refused it."""
    how = {allowed.UNASKED: "unasked: its agent's own permissions let it",
           allowed.PERMISSIONS: "allowed by its permissions (all)",
           allowed.RULE: f"allowed by {u.by}", allowed.PERSON: f"allowed by {u.by}",
           allowed.CARRIED: f"allowed by the answer to {u.by} (an earlier run's)",
           allowed.REFUSED: f"refused by {u.by}" + (f": {u.why}" if u.why else ""),
           allowed.WITHDRAWN: "asked, and withdrawn before an answer"}[u.how]
    if u.how in (allowed.PERSON, allowed.REFUSED) and u.asked is not None and u.answered is not None:
        how += f" after {words.duration(u.answered - u.asked)}"
    line = f"  [{u.seq:>5}] {one_line(f'{u.name}: {toolcalls.summary(u.input)}', 60)} — {how}"
    if u.denied:
        line += f"; the kernel refused it: {one_line('; '.join(u.denied), 100)}"
    return line


#: What ended a wait, in words.
WOKE = {"run": "a run ended", "message": "a message arrived", "ended": "it is terminated",
        "waiting": "it waits for your answer (procession pending)", "timeout": "timed out: nothing happened"}


def waited(w: Waited) -> str:
    """The first line of ``wait``: what woke it, the run's outcome, how many messages came."""
    line = f"{w.sid}: {WOKE.get(w.woke, w.woke)}"
    if w.run is not None:
        line += f" (run {w.run.id} {w.run.outcome}" + (f": {one_line(w.run.error, 100)})" if w.run.error else ")")
    if w.messages:
        line += f"; {words.plural(len(w.messages), 'new message')}"
    return line


def journal_line(e: JournalEntry, width: int = 60) -> str:
    """A journal row: when, which face made the call and who (``cli ana@laptop``), the call,
    its session, its arguments and what came of it."""
    session = e.session if e.session is not None else "-"
    return (f"{words.clock(e.ts)}  {words.pad(printable(e.actor), 7)} {words.pad(printable(e.who or '-', lines=False), 14)}"
            f" {printable(e.call):<9} {session:>4}"
            f"  {one_line(json.dumps(e.args, ensure_ascii=False, default=str), width)}"
            f" -> {one_line(json.dumps(e.outcome, ensure_ascii=False, default=str), 40)}")
