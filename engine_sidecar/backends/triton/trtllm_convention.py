"""TensorRT-LLM: `input_ids` + `request_output_len` + `streaming` -> streamed `output_ids`.

Token ids in and out: the sidecar tokenises (applying the chat template) and detokenises, so a
request resumed from prompt + generated ids continues exactly where it stopped.
"""

from __future__ import annotations

from typing import Any

from shardgate.v1.params import Sampling

from engine_sidecar.backend import EngineRequest, ErrorCode, RequestError
from engine_sidecar.backends.common.detokenizer import IncrementalDetokenizer
from engine_sidecar.backends.common.prompts import Limits, prepare
from engine_sidecar.backends.common.tokenizer import HfTokenizer
from engine_sidecar.backends.triton import tensors
from engine_sidecar.backends.triton.job import Job, Step, refuse_unannounced

_NO_END = -1  # an end id that never occurs: generation ignores EOS

# The optional sampling fields mapped to the inputs of TensorRT-LLM's model (announced as the
# convention's capabilities): its penalties, `min_length`, and `embedding_bias` (a bias per
# vocabulary entry) for logit_bias.
CAPABILITIES = frozenset(
    {"presence_penalty", "frequency_penalty", "repetition_penalty", "min_tokens", "logit_bias"}
)


class TrtllmConvention:
    name = "trtllm"

    def __init__(self, limits: Limits, tokenizer: HfTokenizer) -> None:
        self._limits = limits
        self._tok = tokenizer

    def prepare(self, request: EngineRequest) -> Job:
        p = prepare(request, self._limits, self._tok)
        s = request.sampling
        refuse_unannounced(s, CAPABILITIES, self.name)
        if s.stop:
            raise RequestError(
                ErrorCode.INVALID_ARGUMENT,
                "stop strings are not supported by the trtllm convention",
                "stop",
            )
        ids = p.engine_ids
        eos = self._tok.eos_token_id
        end_id = _NO_END if s.ignore_eos or eos is None else eos
        inputs = [
            tensors.int32s("input_ids", ids, (1, len(ids))),
            tensors.int32s("input_lengths", [len(ids)], (1, 1)),
            tensors.int32s("request_output_len", [p.max_tokens], (1, 1)),
            tensors.flag("streaming", True, (1, 1)),
            tensors.int32s("end_id", [end_id], (1, 1)),
            tensors.int32s("pad_id", [eos if eos is not None else 0], (1, 1)),
            tensors.flag("exclude_input_in_output", True, (1, 1)),
        ]
        if s.temperature == 0:
            inputs.append(tensors.int32s("runtime_top_k", [1], (1, 1)))  # greedy
        else:
            inputs.append(tensors.fp32("temperature", s.temperature))
            inputs.append(tensors.fp32("runtime_top_p", s.top_p))
            if s.top_k > 0:
                inputs.append(tensors.int32s("runtime_top_k", [s.top_k], (1, 1)))
        if s.seed is not None:
            inputs.append(tensors.uint64("random_seed", s.seed & 0xFFFFFFFFFFFFFFFF))
        inputs.extend(self._optional(s, p.resumed))
        return Job(request, inputs, p.max_tokens, p.resumed, len(p.prompt_ids), ids)

    def _optional(self, s: Sampling, resumed: int) -> list[Any]:
        out = []
        if s.repetition_penalty != 1.0:
            out.append(tensors.fp32("repetition_penalty", s.repetition_penalty))
        if s.presence_penalty:
            out.append(tensors.fp32("presence_penalty", s.presence_penalty))
        if s.frequency_penalty:
            out.append(tensors.fp32("frequency_penalty", s.frequency_penalty))
        # What an earlier run generated counts, as for max_tokens.
        min_length = max(0, s.min_tokens - resumed)
        if min_length:
            out.append(tensors.int32s("min_length", [min_length], (1, 1)))
        if s.logit_bias:
            vocab = self._tok.vocab_size
            bias = [0.0] * vocab
            for token, b in s.logit_bias.items():
                if not 0 <= token < vocab:
                    raise RequestError(
                        ErrorCode.INVALID_ARGUMENT,
                        f"logit_bias: token {token} is not in the vocabulary of {vocab} tokens",
                        "logit_bias",
                    )
                bias[token] = b
            out.append(tensors.fp32s("embedding_bias", bias, (1, vocab)))
        return out

    def reader(self, job: Job) -> _Reader:
        return _Reader(IncrementalDetokenizer(self._tok, job.context))


class _Reader:
    def __init__(self, detokenizer: IncrementalDetokenizer) -> None:
        self._detok = detokenizer

    def read(self, response: Any) -> Step:
        ids = tensors.Outputs(response).ints("output_ids") or []
        return Step(token_ids=ids, text=self._detok.add(ids), count=len(ids))
