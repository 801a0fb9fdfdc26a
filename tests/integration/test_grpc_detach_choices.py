"""gRPC streams of several choices (n > 1) survive their caller as single ones do: kept (each
response with `stream_id` and `seq`), the choices run on for detach_grace_s when the caller
leaves, and Resume gets the rest with no gap and no duplicate, equal to an undisturbed run."""

from __future__ import annotations

import grpc
from shardgate.v1 import gateway_pb2 as pb
from shardgate.v1 import gateway_pb2_grpc as pb_grpc

from tests.integration.cluster import Cluster
from tests.integration.poll import until
from tests.integration.test_cancellation import running
from tests.integration.test_detach_choices import kept

__all__ = ["kept"]  # (the module's cluster: detach_grace_s 3)

MD = (("authorization", "Bearer sk-alpha"),)


def by_choice(responses: list[pb.GenerateResponse], n: int) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(n)]
    for r in responses:
        out[r.index] += r.token_ids
    return out


def test_grpc_n2_stream_dropped_and_resumed_equals_an_undisturbed_run(kept: Cluster) -> None:
    req = pb.GenerateRequest(
        model="sim-llama",
        prompt="three long stories",
        n=2,
        max_tokens=1500,
        seed=11,
        temperature=1.0,
        ignore_eos=True,
    )
    with grpc.insecure_channel(kept.grpc_target) as ch:
        stub = pb_grpc.GatewayStub(ch)
        whole = list(stub.Generate(req, timeout=60, metadata=MD))
        until(lambda: running(kept) == 0, what="an idle engine")
        call = stub.Generate(req, timeout=60, metadata=MD)
        head = [next(call) for _ in range(10)]
        call.cancel()  # the caller leaves mid-way
        sid = head[0].stream_id
        assert sid and [r.seq for r in head] == list(range(1, 11))
        assert {r.stream_id for r in head} == {sid}
        tail = list(
            stub.Resume(pb.ResumeRequest(stream_id=sid, after_seq=10), timeout=60, metadata=MD)
        )
    got = head + tail
    assert [r.seq for r in got] == list(range(1, len(got) + 1))  # every response once
    assert sorted(r.index for r in got if r.finish_reason) == [0, 1]
    assert by_choice(got, 2) == by_choice(whole, 2)
    assert all(len(ids) == 1500 for ids in by_choice(got, 2))
