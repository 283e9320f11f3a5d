"""The table's order, kept incrementally, is always the order a fresh sort gives."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from procession.model.records import SessionInfo
from procession.model.states import State
from procession.present.cells import COLUMNS
from procession.tui.view import View, ViewSpec

STATES = list(State)


def session(sid: int, tokens: int, state: State, name: str, agent: str, parent: int | None, rev: int) -> SessionInfo:
    return SessionInfo(sid, f"u{sid}", name, agent, "", state, None, tokens % 7, parent, 0, None, "builtin:digest",
                       1000, tokens, tokens % 13, 0, 0.0, float(tokens), True, None, "/", rev)


sessions_st = st.lists(st.tuples(st.integers(0, 5000), st.sampled_from(STATES), st.sampled_from(["a", "bb", "ab"]),
                                 st.sampled_from(["hr", "docs"])), min_size=0, max_size=60)
changes_st = st.lists(st.lists(st.tuples(st.integers(1, 80), st.integers(0, 5000), st.sampled_from(STATES)),
                               max_size=90), max_size=6)


@settings(max_examples=150, deadline=None)
@given(initial=sessions_st, rounds=changes_st, sort=st.sampled_from([c.key for c in COLUMNS]),
       reverse=st.booleans(), tree=st.booleans(), show_terminated=st.booleans(),
       filter=st.sampled_from(["", "a", "hr", "S", "sleeping"]))
def test_incremental_order_equals_a_fresh_sort(initial, rounds, sort, reverse, tree, show_terminated, filter):
    sessions = {}
    for i, (tokens, state, name, agent) in enumerate(initial, start=1):
        parent = (i // 2) if i > 2 and i % 3 == 0 else None
        sessions[i] = session(i, tokens, state, name, agent, parent, 1)
    spec = ViewSpec(sort=sort, reverse=reverse, tree=tree, show_terminated=show_terminated, filter=filter)
    view = View(spec)
    view.rebuild(sessions)
    rev = 1
    for changes in rounds:
        rev += 1
        before = {}
        for sid, tokens, state in changes:
            before.setdefault(sid, sessions.get(sid))
            old = sessions.get(sid) or session(sid, 0, State.SLEEPING, "new", "hr", None, rev)
            sessions[sid] = dataclasses.replace(old, context_tokens=tokens, state=state, last_active=float(tokens),
                                                rev=rev)
        view.update(sessions, list(before), before)
        fresh = View(dataclasses.replace(spec))
        fresh.rebuild(sessions)
        assert view.keys == fresh.keys
        assert view.prefixes == fresh.prefixes
        assert {k: (h.count, h.tokens) for k, h in view.headings.items()} == \
            {k: (h.count, h.tokens) for k, h in fresh.headings.items()}
