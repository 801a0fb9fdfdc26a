"""Prompts tokenized at the gateway as their engine tokenizes them (the sidecar's own code), with
a bounded cost, and None wherever the gateway cannot say."""

from __future__ import annotations

from pathlib import Path

from shardgate.v1.params import Generation, Message, Sampling, Template, Tools

from engine_sidecar.backend import EngineRequest
from engine_sidecar.backends.common.tokenizer import HfTokenizer
from engine_sidecar.backends.sim import SimConfig
from engine_sidecar.backends.sim.engine import SimBackend
from engine_sidecar.backends.tiny_model import ensure_tiny_model
from gateway.prompt_tokens import PromptTokens

TEXT = "the quick brown fox jumps over the lazy dog " * 20


def gen(**kw: object) -> Generation:
    return Generation(request_id="r", model="sim-llama", sampling=Sampling(max_tokens=4), **kw)  # type: ignore[arg-type]


CHAT = (Message(role="system", content=TEXT), Message(role="user", content="and then?"))


def test_the_sim_tokenizer_gives_the_sims_own_ids() -> None:
    tokens = PromptTokens(1_000_000)
    tokens.named("sim-llama", "sim")
    backend = SimBackend(SimConfig())
    for g in (gen(prompt=TEXT), gen(messages=CHAT), gen(prompt_token_ids=(5, 6, 7))):
        assert tokens.ids("sim-llama", g) == backend.tokenize(EngineRequest(1, g))


def test_a_hugging_face_tokenizer_renders_the_chat_template_as_the_engine_does(
    tmp_path: Path,
) -> None:
    path = str(ensure_tiny_model(tmp_path / "tiny"))
    tokens = PromptTokens(1_000_000)
    tokens.named("sim-llama", path)  # (no event loop: loads here)
    assert tokens.ready("sim-llama")
    hf = HfTokenizer.from_pretrained(path)
    assert tokens.ids("sim-llama", gen(messages=CHAT)) == hf.encode_chat(list(CHAT))
    assert tokens.ids("sim-llama", gen(prompt=TEXT)) == hf.encode(TEXT)


def test_the_cost_is_bounded_by_max_chars_and_the_ids_before_the_cut_agree() -> None:
    tokens = PromptTokens(100)
    tokens.named("sim-llama", "sim")
    whole = SimBackend(SimConfig()).tokenize(EngineRequest(1, gen(prompt=TEXT)))
    cut = tokens.ids("sim-llama", gen(prompt=TEXT))
    assert cut is not None and 10 < len(cut) < len(whole)
    assert cut[:-1] == whole[: len(cut) - 1]


def test_what_the_gateway_cannot_tokenize_as_the_engine_does_is_none() -> None:
    tokens = PromptTokens(1_000_000, overrides={"b": "sim"})
    assert tokens.ids("unnamed", gen(prompt=TEXT)) is None
    tokens.named("a", "sim")
    tools = Tools(tools="[]")
    assert tokens.ids("a", gen(messages=CHAT, tools=tools)) is None
    assert tokens.ids("a", gen(messages=CHAT, template=Template(chat_template="{{ 1 }}"))) is None
    truncated = Generation(
        request_id="r",
        model="a",
        prompt=TEXT,
        sampling=Sampling(max_tokens=4, truncate_prompt_tokens=8),
    )
    assert tokens.ids("a", truncated) is None
    assert tokens.ids("b", gen(prompt=TEXT)) is not None  # (configured, not named)


def test_a_tokenizer_that_cannot_load_is_tried_once_and_gives_none(tmp_path: Path) -> None:
    tokens = PromptTokens(1_000)
    tokens.named("m", str(tmp_path / "absent"))
    assert not tokens.ready("m")
    assert tokens.ids("m", gen(prompt=TEXT)) is None
    assert tokens.ids("m", gen(prompt=TEXT)) is None  # (and not tried again)


def test_long_texts_are_cut_before_a_word_at_the_same_places_whatever_follows() -> None:
    from gateway.prompt_tokens import chunks

    text = TEXT * 8
    a, b = chunks(text + " one ending"), chunks(text + " another, longer ending")
    assert "".join(a) == text + " one ending"
    assert len(a) > 3 and a[:-1] == b[:-1]
    assert all(p.startswith(" ") and not p[1].isspace() for p in a[1:])


def test_a_shared_prefix_is_encoded_once_and_its_ids_are_the_whole_texts() -> None:
    from engine_sidecar.backends.sim.tokenizer import SimTokenizer
    from gateway.prompt_tokens import ChunkedEncoder

    calls: list[int] = []

    class Counting(SimTokenizer):
        def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
            calls.append(len(text))
            return super().encode(text, add_special_tokens=add_special_tokens)

    enc = ChunkedEncoder(Counting())
    assert enc.piecewise
    text = TEXT * 8
    for ending in (" and so on", " and then some more"):
        assert enc.encode(text + ending, True) == SimTokenizer().encode(text + ending)
    calls.clear()
    enc.encode(text + " a third", True)
    assert len(calls) == 2  # (the first piece, with its special tokens, and the last: new)


def test_a_tokenizer_that_encodes_pieces_otherwise_is_given_whole_texts() -> None:
    from gateway.prompt_tokens import ChunkedEncoder

    class Marking:  # (as a tokenizer that starts every text with a marker, sentencepiece-like)
        def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
            return [9999, *(ord(c) for c in text)]

    enc = ChunkedEncoder(Marking())
    assert not enc.piecewise
    assert enc.encode(TEXT * 8, False) == [9999, *(ord(c) for c in TEXT * 8)]
