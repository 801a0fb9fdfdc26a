"""What keeping and replaying a stream's events costs the stream store, per event.

Streams of `--events` chat chunks each: the direct writer's way (each token given as its text,
in the stream's given shape: `add_own`), the handler's way (whole events checked against a
learned shape: `add`), and a replay of a whole stream (`tail`). Prints nanoseconds an event;
compare two trees by running it under each (`PYTHONPATH=TREE`), alternated:

    python -m bench.store_events --streams 6000 --events 64
"""

from __future__ import annotations

import argparse
import time

from gateway.streams.compact import Events

HEAD = (
    b'data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":'
)
TAIL = b'},"logprobs":null,"finish_reason":null}]}\n\n'
ID_PREFIX = b"id: abcdefgh:"


def measure(streams: int, events: int) -> dict[str, float]:
    """Nanoseconds an event for each way of keeping them, and for a replay."""
    owns = [b'" tok%d"' % (i % 10) for i in range(events)]
    wholes = [ID_PREFIX + b"%d\n" % i + HEAD + o + TAIL for i, o in enumerate(owns, 1)]
    n = streams * events
    t = time.perf_counter()
    for _ in range(streams):
        ev = Events(ID_PREFIX)
        k = ev.given_shape(HEAD, TAIL)
        for own in owns:
            ev.add_own(own, k, 200)
    add_own = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(streams):
        ev = Events(ID_PREFIX)
        for seq, whole in enumerate(wholes, 1):
            ev.add(whole, seq)
    add = time.perf_counter() - t
    replays = max(1, streams // 10)
    t = time.perf_counter()
    for _ in range(replays):
        ev.tail(events, 1)
    tail = time.perf_counter() - t
    return {
        "add_own_ns": add_own / n * 1e9,
        "add_ns": add / n * 1e9,
        "tail_ns": tail / (replays * events) * 1e9,
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.store_events", description=__doc__)
    p.add_argument("--streams", type=int, default=6000)
    p.add_argument("--events", type=int, default=64)
    args = p.parse_args()
    r = measure(args.streams, args.events)
    print(" ".join(f"{k} {v:.0f}" for k, v in r.items()))


if __name__ == "__main__":
    main()
