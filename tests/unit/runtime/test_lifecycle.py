"""The request state machine's table: every allowed move, and every other one refused."""

from __future__ import annotations

import pytest

from gateway.runtime.lifecycle import LIVE, TABLE, TERMINAL, IllegalMove, Move, State, next_state

S, M = State, Move

ALLOWED = [
    (S.QUEUED, M.PLACE, S.PLACED),
    (S.QUEUED, M.END, S.FAILED),
    (S.PLACED, M.TOKEN, S.STREAMING),
    (S.PLACED, M.FINISH, S.DONE),
    (S.PLACED, M.PREEMPT, S.PREEMPTED),
    (S.PLACED, M.FAIL, S.MIGRATING),
    (S.PLACED, M.END, S.FAILED),
    (S.STREAMING, M.FINISH, S.DONE),
    (S.STREAMING, M.PREEMPT, S.PREEMPTED),
    (S.STREAMING, M.FAIL, S.MIGRATING),
    (S.STREAMING, M.END, S.FAILED),
    (S.PREEMPTED, M.PLACE, S.PLACED),
    (S.PREEMPTED, M.END, S.FAILED),
    (S.MIGRATING, M.PLACE, S.PLACED),
    (S.MIGRATING, M.END, S.FAILED),
]


@pytest.mark.parametrize(("state", "move", "to"), ALLOWED)
def test_allowed_moves(state: State, move: Move, to: State) -> None:
    assert next_state(state, move) is to


def test_the_table_is_exactly_the_allowed_moves() -> None:
    assert {(s, m): t for s, m, t in ALLOWED} == TABLE


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("move", list(Move))
def test_every_other_move_is_illegal(state: State, move: Move) -> None:
    if (state, move) in TABLE:
        return
    with pytest.raises(IllegalMove, match=f"{state.name} cannot {move.name}"):
        next_state(state, move)


def test_ended_requests_move_no_more_and_every_live_one_can_end() -> None:
    assert not [k for k in TABLE if k[0] in TERMINAL]
    assert all(next_state(s, M.END) is S.FAILED for s in LIVE)
