"""KServe v2 tensors: request inputs from Python values, response outputs as Python values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tritonclient.grpc import InferResult, service_pb2

InputTensor = service_pb2.ModelInferRequest.InferInputTensor


def text(name: str, value: str) -> Any:
    t = InputTensor(name=name, datatype="BYTES", shape=[1])
    t.contents.bytes_contents.append(value.encode())
    return t


def flag(name: str, value: bool, shape: Sequence[int] = (1,)) -> Any:
    t = InputTensor(name=name, datatype="BOOL", shape=list(shape))
    t.contents.bool_contents.append(value)
    return t


def int32s(name: str, values: Sequence[int], shape: Sequence[int]) -> Any:
    t = InputTensor(name=name, datatype="INT32", shape=list(shape))
    t.contents.int_contents.extend(values)
    return t


def fp32(name: str, value: float, shape: Sequence[int] = (1, 1)) -> Any:
    t = InputTensor(name=name, datatype="FP32", shape=list(shape))
    t.contents.fp32_contents.append(value)
    return t


def fp32s(name: str, values: Sequence[float], shape: Sequence[int]) -> Any:
    t = InputTensor(name=name, datatype="FP32", shape=list(shape))
    t.contents.fp32_contents.extend(values)
    return t


def uint64(name: str, value: int, shape: Sequence[int] = (1, 1)) -> Any:
    t = InputTensor(name=name, datatype="UINT64", shape=list(shape))
    t.contents.uint64_contents.append(value)
    return t


class Outputs:
    """The named outputs of one response (absent ones read as None)."""

    def __init__(self, response: Any) -> None:
        self._result = InferResult(response)
        self._names = {o.name for o in response.outputs}

    def _array(self, name: str) -> Any:
        return self._result.as_numpy(name) if name in self._names else None

    def text(self, name: str) -> str | None:
        a = self._array(name)
        if a is None or a.size == 0:
            return None
        v = a.reshape(-1)[0]
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)

    def ints(self, name: str) -> list[int] | None:
        a = self._array(name)
        return None if a is None else [int(x) for x in a.reshape(-1)]

    def int(self, name: str) -> int | None:
        values = self.ints(name)
        return values[0] if values else None
