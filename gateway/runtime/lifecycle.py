"""A request's life as one explicit state machine: its states, the moves between them, and the
one function that makes a move.

    QUEUED ──place──> PLACED ──token──> STREAMING ──finish──> DONE
      │                 │  ▲               │
      │                 │  └───place───┐   │
      │              preempt / fail    │  preempt / fail
      │                 ▼              │   ▼
      │            PREEMPTED, MIGRATING ───┘
      └──── end (refused, expired, client gone, out of time, error) ──> FAILED

Every non-terminal state can `end`. A request that ended ignores what still arrives for it (a
late failure of an attempt already replaced, a client that leaves after the last token): those
are `stale`, never an error. Any other move that the table does not allow is a bug, raised as
`IllegalMove` and handled by the scheduler as the end of that one request.
"""

from __future__ import annotations

import enum
from typing import Final


class State(enum.IntEnum):
    QUEUED = 0  # waiting in its model pool's queue, never placed
    PLACED = 1  # submitted to an engine; no output from this attempt yet
    STREAMING = 2  # tokens are flowing from the engine
    PREEMPTED = 3  # aborted for a higher class: back in the queue with its tokens
    MIGRATING = 4  # its replica failed it: moving to another (retry before a token, after)
    DONE = 5  # the engine finished it (stop or length)
    FAILED = 6  # ended otherwise: refused, expired, client gone, out of time, error


class Move(enum.IntEnum):
    PLACE = 0  # submitted to a replica
    TOKEN = 1  # the first output of the attempt
    FINISH = 2  # the engine's last delta
    PREEMPT = 3  # a higher class takes its slot; it resumes later
    FAIL = 4  # its attempt failed; it may move elsewhere
    END = 5  # it ends without finishing


TERMINAL: Final = frozenset({State.DONE, State.FAILED})
LIVE: Final = frozenset(State) - TERMINAL
# Where the engine holds it: the states in which an engine request exists.
ON_ENGINE: Final = frozenset({State.PLACED, State.STREAMING})

S, M = State, Move
TABLE: Final[dict[tuple[State, Move], State]] = {
    (S.QUEUED, M.PLACE): S.PLACED,
    (S.PLACED, M.TOKEN): S.STREAMING,
    (S.PLACED, M.FINISH): S.DONE,
    (S.PLACED, M.PREEMPT): S.PREEMPTED,
    (S.PLACED, M.FAIL): S.MIGRATING,
    (S.STREAMING, M.FINISH): S.DONE,
    (S.STREAMING, M.PREEMPT): S.PREEMPTED,
    (S.STREAMING, M.FAIL): S.MIGRATING,
    (S.PREEMPTED, M.PLACE): S.PLACED,
    (S.MIGRATING, M.PLACE): S.PLACED,
    **{(s, M.END): S.FAILED for s in (S.QUEUED, S.PLACED, S.STREAMING, S.PREEMPTED, S.MIGRATING)},
}
del S, M


class IllegalMove(RuntimeError):
    def __init__(self, state: State, move: Move) -> None:
        super().__init__(f"a request in state {state.name} cannot {move.name}")
        self.state = state
        self.move = move


def stale(state: State) -> bool:
    """Whatever arrives for a request that ended is ignored."""
    return state in TERMINAL


def next_state(state: State, move: Move) -> State:
    """The state after `move`; raises IllegalMove when the table has no such move."""
    to = TABLE.get((state, move))
    if to is None:
        raise IllegalMove(state, move)
    return to
