"""How a screen of the monitor makes calls: the part the table and the detail view share.

A screen that mixes in ``Calling`` says which sessions the next call acts on (``targets``)
and gets, from the calls registry (``calls.FLOWS``), a binding for every call, the action
that runs its flow in a worker, and the small steps flows are written with: ask with a form,
confirm, choose, make the call (a refusal becomes a notification with the core's one-line
reason, and the form it came from opens again with what was typed), report its outcome
and notes in the present layer's words.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from textual.binding import Binding
from textual.screen import Screen

from procession.calls import Workspace
from procession.model.calls import INFO, Call
from procession.model.errors import IllegalTransition, NoneDone, ProcessionError
from procession.model.outcomes import Outcome
from procession.model.records import SessionInfo
from procession.model.states import allowed, reason
from procession.present import results

from .dialogs import ActionMenu, Choice, Confirm, Field, FieldRefused, Form

if TYPE_CHECKING:
    from .app import ProcessionApp

O = TypeVar("O", bound=Outcome)


class Calling(Screen[Any]):
    """A screen that makes calls on its ``targets``."""

    def targets(self) -> list[SessionInfo]:
        raise NotImplementedError

    def chosen_request(self) -> int | None:
        """The request the screen points at (the queue view's cursor), for allow and deny."""
        return None

    def agent_row(self) -> str | None:
        """The agent whose row the cursor is on, nothing tagged (the tree view), else None."""
        return None

    def targets_are_agent(self) -> bool:
        """Whether the targets are an agent's sessions picked by its row (calls then confirm)."""
        return self.agent_row() is not None

    @property
    def monitor(self) -> ProcessionApp:
        from .app import ProcessionApp

        assert isinstance(self.app, ProcessionApp)
        return self.app

    @property
    def ws(self) -> Workspace:
        return self.monitor.ws

    # ------------------------------------------------------------------ which calls apply

    def applies(self, name: str) -> bool:
        """Whether the flow ``name`` (a call's, or another of the registry's) can act on at least
        one target (the menu and the palette grey out the rest; a key still makes the call, so
        that its refusal says why)."""
        from .calls import FLOWS, ON_AGENT

        if self.monitor.readonly:
            return False
        flow = FLOWS[name]
        if INFO[flow.call].target == "none" or (name in ON_AGENT and self.agent_row() is not None):
            return True
        targets = self.targets()
        if flow.applies is not None:
            return any(flow.applies(t) for t in targets)
        return any(allowed(flow.call, t.state) for t in targets)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A read-only monitor hides every call."""
        if action in ("call", "nice") and self.monitor.readonly:
            return False
        return True

    def action_call(self, name: str) -> None:
        """Run the flow ``name`` on the targets, in a worker (flows wait for dialogs)."""
        from .calls import FLOWS, ON_AGENT

        flow = FLOWS[name]
        agent = self.agent_row()
        if agent is not None and name in ON_AGENT:  # the agent's own, not its sessions'
            self.run_worker(ON_AGENT[name](self, agent), group="call", exclusive=True)
            return
        targets = self.targets()
        if INFO[flow.call].target != "none" and not targets:
            self.monitor.notify("no session here to act on", severity="warning")
            return
        if INFO[flow.call].target == "one" and len(targets) > 1:
            self.monitor.notify(f"{flow.call} acts on one session: untag all (U) or put the cursor on one",
                                severity="warning")
            return
        if flow.applies is None and targets and not any(allowed(flow.call, t.state) for t in targets):
            # refused before any dialog opens, in the words of the core's refusal
            t = targets[0]
            self.monitor.notify(str(IllegalTransition(flow.call, t.id, t.state, reason(flow.call, t.state))),
                                severity="error", timeout=8)
            return
        self.run_worker(flow.run(self, targets), group="call", exclusive=True)

    async def action_nice(self, step: int) -> None:
        """F7 / F8: one step up or down, on every target."""
        await self.make_all(self.ws.each(Call.NICE, [t.id for t in self.targets()], priority=step, relative=True))

    # ------------------------------------------------------------------ the steps of a flow

    async def confirm(self, title: str, body: Sequence[str]) -> bool:
        yes: bool = await self.app.push_screen_wait(Confirm(title, body))
        return bool(yes)

    async def choose(self, title: str, choices: Sequence[Choice], help: str = "") -> str | None:
        return await self.app.push_screen_wait(ActionMenu(title, choices, help))

    async def make(self, call: Awaitable[O], *, quiet: bool = False) -> O | None:
        """Make one call; its outcome and notes are shown (unless ``quiet``); a refusal is
        shown and gives None. The table shows the change before the next key is read."""
        try:
            outcome = await call
        except ProcessionError as exc:
            self.monitor.notify(str(exc), severity="error", timeout=8)
            return None
        if not quiet:
            self.report(outcome)
        await self.monitor.refresh_data()
        return outcome

    async def make_all(self, making: Awaitable[Sequence[Outcome]]) -> list[Outcome]:
        """A call on several sessions (``Workspace.each``'s, ``sync_all``'s), all or none,
        reported in one notification; a refusal names each session refused, and that nothing
        was done."""
        try:
            done = list(await making)
        except NoneDone as exc:
            self.monitor.notify("\n".join([*exc.refusals, exc.NOTHING]), severity="error", timeout=8)
            return []
        except ProcessionError as exc:
            self.monitor.notify(str(exc), severity="error", timeout=8)
            return []
        if done:
            self.report(*done)
        await self.monitor.refresh_data()
        return done

    async def make_each(self, calls: Sequence[Awaitable[Outcome]]) -> list[Outcome]:
        """Several calls (one per target), reported in one notification; each refusal in its own."""
        done = [o for o in [await self.make(c, quiet=True) for c in calls] if o is not None]
        if done:
            self.report(*done)
        return done

    async def form_call(self, title: str, fields: list[Field], call: Any, *, help: str = "",
                        report: Callable[[Any], str] | None = None) -> Any:
        """Ask with a form and make ``call(values)``; a refusal opens the form again with what
        was typed and the reason in it, and the cursor in the field refused (a ``FieldRefused``
        names it; else the one it was in). None when the user gives up, here or in a later step of
        the call (which then returns None). What the call returns is reported (``report``: in
        those words, for what is not one outcome)."""
        error, focus, cursor = "", "", ""
        while True:
            form = Form(title, fields, help=help, error=error, focus=focus, cursor=cursor)
            answer: dict[str, str] | None = await self.app.push_screen_wait(form)
            if answer is None:
                return None
            try:
                outcome = await call(answer)
            except ProcessionError as exc:
                error, cursor = str(exc), form.submitted_from
                focus = exc.field if isinstance(exc, FieldRefused) else ""
                fields = [dataclasses.replace(f, value=answer.get(f.key, f.value)) for f in fields]
                continue
            if outcome is None:
                return None
            if report is not None:
                self.monitor.notify(report(outcome), timeout=6)
            else:
                self.report(outcome)
            await self.monitor.refresh_data()
            return outcome

    def report(self, *outcomes: Outcome) -> None:
        """What the calls did, and their notes, in the present layer's words: one notification."""
        text = [results.describe(o) for o in outcomes]
        notes = [results.note(n, self.monitor.how) for o in outcomes for n in o.notes]
        self.monitor.notify("\n".join([*text, *notes]), severity="warning" if notes else "information",
                            timeout=8 if notes else 4)


def call_bindings() -> list[Binding]:
    """A binding for every call of the registry (its id is the call's name, for remapping),
    and the priority steps F7/F8."""
    from .calls import FLOWS

    bindings = [Binding(flow.keys, f"call('{name}')", flow.title, show=False, id=name)
                for name, flow in FLOWS.items() if flow.keys]
    bindings += [
        Binding("f7,right_square_bracket", "nice(1)", "Priority up", show=False, key_display="F7", id="nice_up"),
        Binding("f8,left_square_bracket", "nice(-1)", "Priority down", show=False, key_display="F8", id="nice_down"),
    ]
    return bindings
