"""n > 1: n engine requests that share the prompt, merged by choice index.

As vLLM's parallel sampling does it: choice i is its own engine request, with the seed plus i
when a seed is given; the usage counts the prompt once and every choice's tokens. Each choice
is a job of its own (admitted, queued, placed, preempted and resumed alone), so capacity counts
n slots; they share a session, so the router sends them to one replica, whose prefix cache then
serves the prompt to all but the first. Refused as a whole: when any choice is refused (a rate
limit, a full queue), the ones already admitted are dropped and the client gets that refusal.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from gateway import tasks
from gateway.api.openai import encode, token_ids
from gateway.api.openai.answer import Answer, delta_of, message_of
from gateway.api.openai.logprobs import formatter
from gateway.api.openai.sse import KEEPALIVE, SSE_HEADERS, SSEResponse, Tally, response_headers
from gateway.api.openai.template import response_role
from gateway.api.openai.usage_chunks import ChoiceUsage
from gateway.runtime.job import Job
from gateway.runtime.service import Service
from gateway.types import Delta, GatewayError, GenerationRequest, Logprobs, Usage

# One batch of a choice's deltas; an empty one: the choice is done. Or its error.
_Item = tuple[int, list[Delta], GatewayError | None]


class Choices:
    def __init__(
        self,
        service: Service,
        req: GenerationRequest,
        kind: str,
        prompt_ids: list[list[int]] | None = None,
    ) -> None:
        """`prompt_ids`: each prompt's token ids, for a request that asks for token ids."""
        self.req = req
        self.prompt_ids = prompt_ids
        self.kind: encode.ChunkKind = "chat" if kind == "chat" else "completion"
        self.jobs: list[Job] = []
        self._service = service
        self._items: asyncio.Queue[_Item] = asyncio.Queue()
        self._pumps: list[asyncio.Task[None]] = []
        self.tallies = [Tally() for _ in range(req.choices)]
        self.answers = [Answer(req.generation.tools) for _ in range(req.choices)]

    async def submit(self, api_key: str | None) -> None:
        """Admit every choice, or none: the first refusal drops those admitted (`close`)."""
        req = self.req
        session = req.session_id or f"choices:{req.request_id}"
        for i in range(req.choices):
            child = req.child(i)
            child.session_id = session
            self.jobs.append(await self._service.submit(child, api_key))

    def arm(self, deadline: float, first_output_s: float) -> None:
        for job in self.jobs:
            job.arm(deadline, first_output_s)
        loop = asyncio.get_running_loop()
        self._pumps = [
            loop.create_task(self._pump(i, job), name=f"choice-{i}-{self.req.request_id}")
            for i, job in enumerate(self.jobs)
        ]

    async def close(self) -> None:
        for job in self.jobs:
            job.close()
        await tasks.stop_all(self._pumps)

    async def _pump(self, index: int, job: Job) -> None:
        put = self._items.put_nowait
        try:
            while batch := await job.take():
                put((index, batch, None))
        except GatewayError as e:
            put((index, [], e))
            return
        put((index, [], None))

    async def _next(self) -> _Item:
        """The next batch of any choice; raises the first choice error."""
        index, batch, error = await self._items.get()
        if error is not None:
            raise error
        return index, batch, None

    def usage(self) -> Usage:
        """Each prompt counted once (its n choices share it), every choice's completion."""
        firsts = self.tallies[:: self.req.n]
        completion = sum(t.usage().completion_tokens for t in self.tallies)
        return Usage(sum(t.prompt for t in firsts), completion, sum(t.cached for t in firsts))

    async def unary(self) -> web.Response:
        req = self.req
        n = len(self.jobs)
        texts: list[list[str]] = [[j.request.prompt or ""] if req.echo else [] for j in self.jobs]
        lps: list[list[Logprobs]] = [[] for _ in range(n)]
        ids: list[list[int]] = [[] for _ in range(n)]
        left = n
        while left:
            index, batch, _ = await self._next()
            if not batch:
                left -= 1
                continue
            for d in batch:
                self.tallies[index].add(d)
                ids[index] += d.token_ids
                texts[index].append(d.text)
                if d.logprobs:
                    lps[index].extend(d.logprobs)
                if d.parsed:
                    self.answers[index].add(d.parsed)
        choices = []
        chat = self.kind == "chat"
        role = response_role(req.generation)
        for i in range(n):
            fmt = formatter(chat, req.sampling.logprobs)
            logprobs = fmt(lps[i]) if fmt is not None else None
            answer = self.answers[i]
            reason = answer.finish_reason(self.tallies[i].reason, whole=True)
            whole = answer.whole
            message = message_of(whole, role) if chat and whole is not None else None
            choices.append(encode.Choice("".join(texts[i]), reason, logprobs, message, role))
        encoder = encode.encode_chat_completion if self.kind == "chat" else encode.encode_completion
        body = encoder(req.request_id, req.served_model, int(time.time()), choices, self.usage())
        if self.prompt_ids is not None:
            prompts = [self.prompt_ids[i // req.n] for i in range(n)]
            body = token_ids.body_with(body, chat, prompts, ids)
        headers = response_headers(self.jobs[0])
        return web.Response(body=body, content_type="application/json", headers=headers)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """The choices' chunks as they come. The response starts with its first write: a choice
        refused before that (while queued) is the request's error response."""
        req = self.req
        resp = SSEResponse(headers={**SSE_HEADERS, **response_headers(self.jobs[0])})
        created = int(time.time())
        chat = self.kind == "chat"
        encs = [
            encode.ChunkEncoder(
                req.request_id,
                req.served_model,
                created,
                self.kind,
                formatter(chat, req.sampling.logprobs),
                index=i,
                role=response_role(req.generation),
            )
            for i in range(len(self.jobs))
        ]
        prompt = self.prompt_ids
        ids = None
        if prompt is not None:
            ids = [token_ids.StreamIds(self.kind, prompt[i // req.n]) for i in range(len(encs))]
        usage = [ChoiceUsage() for _ in encs] if req.continuous_usage else None
        buf = bytearray()
        began = False
        left = len(encs)
        try:
            while left:
                index, batch, _ = await self._next()
                tally, answer, enc = self.tallies[index], self.answers[index], encs[index]
                if not batch:
                    left -= 1
                    enc.finish_chunk_into(buf, answer.finish_reason(tally.reason, whole=False))
                    if ids is not None:
                        ids[index].add(buf, [])
                    if usage is not None:
                        usage[index].add(buf)
                for d in batch:
                    if (d.token_ids or d.text or d.parsed) and not began:
                        began = True
                        if usage is not None:
                            usage[index].see_prompt([d])
                        self._begin(buf, encs, usage)
                    if usage is not None:
                        usage[index].see(d)
                    if d.token_ids or d.text or d.parsed:
                        if d.parsed:  # an answer its engine parsed: its pieces
                            delta = delta_of(answer.add(d.parsed))
                            if delta is not None:
                                enc.delta_chunk_into(buf, delta, d.logprobs)
                                if ids is not None:
                                    ids[index].add(buf, d.token_ids)
                                if usage is not None:
                                    usage[index].add(buf)
                            elif ids is not None:
                                ids[index].held += d.token_ids  # (nothing to show yet)
                        else:
                            enc.token_chunk_into(buf, d.text, d.logprobs)
                            if ids is not None:
                                ids[index].add(buf, d.token_ids)
                            if usage is not None:
                                usage[index].add(buf)
                    elif not d.finish and not d.prompt_tokens:
                        buf += KEEPALIVE  # queued or preempted: keep the connection alive
                    tally.add(d)
                if buf:
                    if not resp.prepared:
                        await resp.prepare(request)
                    await resp.write(bytes(buf))
                    buf.clear()
        except GatewayError as e:
            if not resp.prepared:
                raise  # nothing was said yet: an error response
            buf += encode.ChunkEncoder.error_event(e.message, e.type, e.status)
        if req.include_usage:
            encs[0].usage_chunk_into(buf, self.usage())
        buf += encode.DONE
        if not resp.prepared:
            await resp.prepare(request)
        await resp.write_eof(bytes(buf))
        return resp

    def _begin(
        self, buf: bytearray, encs: list[encode.ChunkEncoder], usage: list[ChoiceUsage] | None
    ) -> None:
        """Each choice's first chunks, before any choice's tokens (as vLLM sends them); with
        continuous usage, the prompt's tokens are those of the choice that began."""
        if usage is not None:
            prompt = max(u.prompt for u in usage)
            for u in usage:
                u.prompt = u.prompt or prompt
        for i, enc in enumerate(encs):
            chunk = enc.role_chunk()
            if chunk and self.prompt_ids is not None:  # (chat: one prompt)
                chunk = token_ids.role_chunk_with(chunk, self.prompt_ids[0])
            buf += chunk
            if chunk and usage is not None:
                usage[i].add(buf)
        if self.req.echo:
            for i, enc in enumerate(encs):
                enc.token_chunk_into(buf, self.jobs[i].request.prompt or "")
                if usage is not None:
                    usage[i].add(buf)
