"""Runs one request as one streamed call to the server; every delta goes to `emit`.

A request that resumes (from tokens an earlier run generated) goes to /v1/completions as token
ids: the prompt's (the server's /tokenize of it, or the request's own ids) followed by the
generated ones, with max_tokens reduced by their number. On vLLM that continues exactly, and
its text is the sidecar's own, made from the token ids (vLLM's would repeat or lose some at a
cut inside a character, or where stop strings held text back; see vllm/text.py). A server that
sends no token ids resumes from text: the prompt and the text generated so far.

A chat request whose answer the sidecar parses (tools, reasoning) or that asks for logprobs
goes there as token ids too (local.py): its parsed pieces and logprobs are made here, from the
token ids, as the vllm backend makes them, on every run alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from engine_sidecar.backend import EngineDelta, ErrorCode, Finish
from engine_sidecar.backends.common.detokenizer import whole_text
from engine_sidecar.backends.common.prompts import truncated
from engine_sidecar.backends.common.tokenizer import HfTokenizer
from engine_sidecar.backends.common.usage import Usage
from engine_sidecar.backends.openai.body import request_body
from engine_sidecar.backends.openai.chunks import Chunk, finish_of, read_chunk
from engine_sidecar.backends.openai.client import EngineClient, ServerRefused
from engine_sidecar.backends.openai.errors import status_code
from engine_sidecar.backends.openai.job import Job
from engine_sidecar.backends.openai.local import Local, structured_outputs
from engine_sidecar.backends.openai.logprobs import Position, to_logprobs
from engine_sidecar.backends.openai.sse_conn import DONE, MORE, STOP
from engine_sidecar.backends.openai.tokens import prompt_ids
from engine_sidecar.backends.vllm.text import OwnText, own_text

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Server:
    """What the backend learnt of its server at start."""

    client: EngineClient
    model: str
    token_ids: bool  # it takes vLLM's return_token_ids
    priority: bool
    tokenizer: HfTokenizer | None
    local: Local | None = None  # vLLM here, in front of a server that takes token ids
    logprobs: bool = False  # it gives logprobs as token ids
    max_model_len: int = 0  # (a prompt's truncation to "as many as the model takes")


class RequestStream:
    def __init__(
        self,
        server: Server,
        job: Job,
        emit: Callable[[EngineDelta], None],
        on_unreachable: Callable[[], None],
    ) -> None:
        self._server = server
        self._job = job
        self._emit = emit
        self._unreachable = on_unreachable
        self.usage = Usage(job.request.key, job.prompt_tokens, job.resumed)
        self.generated = 0  # tokens this run produced (the server's count)
        self._text: OwnText | None = None
        self._held: Chunk | None = None  # the chunk with the finish reason, until usage comes
        self._ended = False  # a chunk ended the request
        self._lp_texts: Any = None  # the logprobs' token decoder (vllm/logprobs.py TokenTexts)
        self.on_tokens: Callable[[int], None] = lambda n: None

    async def run(self) -> None:
        usage = self.usage
        try:
            path, body = await self._body()
            if self._job.max_tokens == 0:  # resumed with all its tokens already
                self._emit(self._delta([], "", Finish.LENGTH))
                return
            await self._server.client.stream(path, body, self._on_data)
            if self._ended:
                return
            if self._held is not None:
                self._emit(self._final(self._held, None))
            else:
                message = "the engine server ended the stream before the request finished"
                self._emit(usage.error(ErrorCode.UNAVAILABLE, message))
        except asyncio.CancelledError:
            raise
        except ServerRefused as e:
            field = e.param or ("messages" if self._job.request.messages is not None else "")
            self._emit(usage.error(status_code(e.status), e.message, field))
        except TimeoutError:
            self._emit(usage.error(ErrorCode.UNAVAILABLE, "the engine server stopped responding"))
        except (aiohttp.ClientError, OSError) as e:  # (connection refused, reset, ...)
            if isinstance(e, aiohttp.ClientConnectorError | ConnectionRefusedError):
                self._unreachable()  # nothing listens there: dead now
            message = f"the engine server failed the stream: {type(e).__name__}: {e}"
            self._emit(usage.error(ErrorCode.UNAVAILABLE, message))
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            self._emit(usage.error(ErrorCode.INTERNAL, f"the engine server sent garbage: {e}"))
        except Exception as e:  # (vLLM's parser of the answer, say): this request ends
            r = self._job.request  # (its id: the gateway's, as its answer's x-request-id)
            log.exception("request %s (key %d) failed", r.request_id, r.key)
            self._emit(usage.error(ErrorCode.INTERNAL, f"{type(e).__name__}: {e}"))

    async def _body(self) -> tuple[str, dict[str, Any]]:
        s, job = self._server, self._job
        r, chat = job.request, job.chat
        ids: list[int] | None = None
        if job.resumed and not s.token_ids:
            return self._text_resume()
        keep_special = chat is not None and chat.request.skip_special_tokens is False
        if job.as_ids:
            resume = list(r.resume_token_ids)
            prompt = await prompt_ids(s.client, s.model, r)
            if r.sampling.truncate_prompt_tokens is not None and s.tokenizer is not None:
                # (vLLM's server loads a generating model's tokenizer to truncate on the left)
                side = r.sampling.truncation_side or "left"
                keep = r.sampling.truncate_prompt_tokens
                prompt = truncated(prompt, keep, side, s.max_model_len)
            self.usage.prompt_tokens = len(prompt)
            ids = prompt + resume
            sampling = r.sampling
            if keep_special:  # (the parser reads its markers' text, as in the vllm backend)
                sampling = msgspec.structs.replace(sampling, skip_special_tokens=False)
            if s.tokenizer is not None:
                self._text = own_text(s.tokenizer, prompt, resume, sampling)
            if s.local is not None:
                if chat is not None:
                    s.local.start_parse(chat, prompt, resume, sampling.skip_special_tokens)
                if sampling.logprobs is not None:
                    self._lp_texts = s.local.token_texts(resume)
        return request_body(
            r,
            s.model,
            job.max_tokens,
            token_ids=s.token_ids,
            priority=s.priority,
            prompt_ids=ids,
            stop=self._text is None,
            structured=structured_outputs(chat) if chat is not None else None,
            keep_special_tokens=keep_special,
        )

    def _text_resume(self) -> tuple[str, dict[str, Any]]:
        """Text in, text out: go on from the prompt's text and the text generated so far."""
        s, job = self._server, self._job
        r, tok = job.request, s.tokenizer
        if tok is None:
            message = "resuming on a server without token ids needs openai.tokenizer"
            raise ServerRefused(400, message, "resume_token_ids")
        if r.messages is not None:
            text = tok.chat_text(r.messages)
        else:
            text = r.prompt if r.prompt is not None else tok.decode(r.prompt_token_ids or ())
        _, body = request_body(r, s.model, job.max_tokens, token_ids=False, priority=s.priority)
        body.pop("messages", None)
        body["prompt"] = text + whole_text(tok, r.resume_token_ids)
        return "/v1/completions", body

    def _on_data(self, data: bytes) -> int:
        """One event's payload, where it arrives (sse_conn.py): MORE, or how the request
        ended."""
        verdict = self._step(read_chunk(data))
        if verdict:
            self._ended = True
        return verdict

    def _step(self, chunk: Chunk) -> int:
        """Emit what one chunk brings; MORE, DONE when the server ended the request, STOP when
        it ends here (a stop string of the sidecar's own)."""
        if chunk.error is not None:
            self._emit(self.usage.error(ErrorCode.INTERNAL, chunk.error, chunk.error_param))
            return DONE
        usage = self.usage
        if chunk.prompt_token_ids is not None and not self._job.resumed:
            usage.prompt_tokens = len(chunk.prompt_token_ids)
        if self._held is not None:  # the finish came; this is the usage chunk
            self._emit(self._final(self._held, chunk.usage))
            return DONE
        ids = chunk.token_ids
        if ids is None:
            tok = self._server.tokenizer
            ids = tok.encode(chunk.text, add_special_tokens=False) if tok and chunk.text else []
        text, lps = chunk.text, chunk.logprobs
        if self._text is not None:
            ids, text, stopped = self._text.add(ids, chunk.finish_reason is not None)
            if lps is not None:
                lps = lps[: len(ids)]  # (those of tokens after a stop string are dropped)
            if stopped:
                self._count(ids)
                d = self._delta(ids, text, Finish.STOP, logprobs=lps)
                d.stop_sequence = self._text.matched
                self._emit(d)
                return STOP
        self._count(ids)
        if chunk.finish_reason is not None:
            self._held = Chunk(
                text=text,
                token_ids=ids,
                finish_reason=chunk.finish_reason,
                stop_sequence=chunk.stop_sequence,
                logprobs=lps,
            )
            if chunk.usage is not None:
                self._emit(self._final(self._held, chunk.usage))
                return DONE
            return MORE
        if ids or text:
            self._emit(self._delta(ids, text, Finish.NONE, logprobs=lps))
        return MORE

    def _count(self, ids: list[int]) -> None:
        self.generated += len(ids)
        self.on_tokens(len(ids))

    def _final(self, held: Chunk, counts: tuple[int, int, int] | None) -> EngineDelta:
        finish = finish_of(held.finish_reason)
        completion = None
        if counts is not None:
            prompt, generated, _ = counts
            if not self._job.resumed and prompt:
                self.usage.prompt_tokens = prompt
            completion = self._job.resumed + generated
        d = self._delta(held.token_ids or [], held.text, finish, completion, held.logprobs)
        d.stop_sequence = held.stop_sequence if finish is Finish.STOP else ""
        return d

    def _delta(
        self,
        ids: list[int],
        text: str,
        finish: Finish,
        completion: int | None = None,
        logprobs: list[Position] | None = None,
    ) -> EngineDelta:
        """The delta, with its logprobs and parsed pieces where the request asks for them."""
        if finish is not Finish.NONE and completion is None:
            completion = self._job.resumed + self.generated
        lps = None
        if self._lp_texts is not None:
            lps = to_logprobs((logprobs or [])[: len(ids)], self._lp_texts.decode)
        d = self.usage.delta(ids, text, finish, completion_tokens=completion, logprobs=lps)
        chat = self._job.chat
        if chat is not None:
            d.parsed = chat.feed(text, ids, finish is not Finish.NONE)
        return d
