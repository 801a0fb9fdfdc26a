"""Chat template controls: the sidecar renders a conversation as vLLM's server does, given the
same request fields (its own merge of them, rendered by the same tokenizer), and refuses what
its config does not allow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from shardgate.v1.params import Message, Sampling, Template

from engine_sidecar.backend import ErrorCode, RequestError
from engine_sidecar.backends.common.prompts import UNTRUSTED_TEMPLATE, Limits, prepare, tokenize
from engine_sidecar.backends.common.tokenizer import HfTokenizer
from gateway.api.openai.template import template_of
from tests.engines import require
from tests.requests import engine_request

# A template that shows every control: documents, a variable of its own, the generation prompt.
TEMPLATE = (
    "{% if documents %}{% for d in documents %}[{{ d['title'] }}: {{ d['text'] }}]\n"
    "{% endfor %}{% endif %}"
    "{% if style is defined %}({{ style }})\n{% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
CONVERSATION = [
    {"role": "user", "content": "Name a shard."},
    {"role": "assistant", "content": "A shard of"},
]
MESSAGES = tuple(Message(m["role"], m["content"]) for m in CONVERSATION)

# Request fields, as a chat completion body gives them.
CASES: dict[str, dict[str, Any]] = {
    "none": {},
    "no_generation_prompt": {"add_generation_prompt": False},
    "continue_final_message": {"add_generation_prompt": False, "continue_final_message": True},
    "continue_with_generation_prompt": {"continue_final_message": True},
    "documents": {"documents": [{"title": "t", "text": "glass"}]},
    "kwargs": {"chat_template_kwargs": {"style": "terse", "unused": 1}},
    "kwargs_unset_values": {"chat_template_kwargs": {"style": None}},
    "kwargs_auto": {"chat_template_kwargs": {"style": "auto"}},
    "kwargs_documents": {"chat_template_kwargs": {"documents": [{"title": "k", "text": "v"}]}},
    "kwargs_generation_prompt": {"chat_template_kwargs": {"add_generation_prompt": False}},
    "kwargs_template": {"chat_template_kwargs": {"chat_template": "{{ messages[0]['role'] }}"}},
    "request_template": {"chat_template": "{{ messages | length }} {{ style }}"},
    "broken_template": {"chat_template": "{% for %}"},
}


@pytest.fixture(scope="module")
def hf(tiny_model_dir: Path) -> Any:
    """The tiny model's tokenizer, with TEMPLATE, and a BOS token on its prompts' text."""
    require("transformers")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir), add_bos_token=True)
    tok.chat_template = TEMPLATE
    return tok


def _vllm_text(hf: Any, fields: dict[str, Any]) -> str | None:
    """What vLLM's server renders for these fields (None: it refuses the request)."""
    require("vllm")
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.renderers.hf import resolve_chat_template_kwargs, safe_apply_chat_template

    request = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": CONVERSATION, **fields}
    )
    params = request.build_chat_params(None, "auto").with_defaults(
        {"tools": None, "tokenize": False}
    )
    kwargs = params.get_apply_chat_template_kwargs()
    assert safe_apply_chat_template  # (the function that takes these kwargs, as below)
    template = kwargs.pop("chat_template", None) or hf.chat_template
    tools, tokenize = kwargs.pop("tools", None), kwargs.pop("tokenize", False)
    try:
        kwargs = resolve_chat_template_kwargs(hf, template, kwargs)
        return str(
            hf.apply_chat_template(
                CONVERSATION, tools=tools, chat_template=template, tokenize=tokenize, **kwargs
            )
        )
    except Exception:
        return None


def _ours(hf: Any, fields: dict[str, Any]) -> str | None:
    t = template_of(
        fields.get("chat_template"),
        fields.get("chat_template_kwargs"),
        fields.get("add_generation_prompt"),
        fields.get("continue_final_message"),
        fields.get("documents"),
    )
    try:
        return HfTokenizer(hf).chat_text(MESSAGES, None, t)
    except ValueError:
        return None


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_conversation_renders_as_vllm_renders_it(hf: Any, case: str) -> None:
    theirs = _vllm_text(hf, CASES[case])
    assert _ours(hf, CASES[case]) == theirs
    if case not in ("continue_with_generation_prompt", "broken_template"):
        assert theirs is not None  # (the case shows a rendering, not only a refusal)


def _limits(trusted: bool) -> Limits:
    return Limits("m", 512, templates=True, trust_request_chat_template=trusted)


def _request(template: Template | None, add_special_tokens: bool | None = None, **kw: Any) -> Any:
    if "prompt" not in kw:
        kw["messages"] = MESSAGES
    return engine_request(
        1,
        request_id="r",
        model="m",
        sampling=Sampling(max_tokens=4),
        template=template,
        add_special_tokens=add_special_tokens,
        **kw,
    )


@pytest.mark.parametrize(
    ("template", "field"),
    [
        (Template(chat_template="{{ messages }}"), "chat_template"),
        (Template(kwargs=json.dumps({"chat_template": "{{ messages }}"})), "chat_template_kwargs"),
    ],
)
def test_a_request_s_own_template_needs_a_trusting_sidecar(
    hf: Any, template: Template, field: str
) -> None:
    tok = HfTokenizer(hf)
    with pytest.raises(RequestError) as e:
        prepare(_request(template), _limits(False), tok)
    assert (e.value.code, e.value.field, e.value.message) == (
        ErrorCode.INVALID_ARGUMENT,
        field,
        UNTRUSTED_TEMPLATE,
    )
    text = tok.chat_text(MESSAGES, None, template)
    assert prepare(_request(template), _limits(True), tok).prompt_ids == tok.encode(
        text, add_special_tokens=False
    )


def test_an_engine_without_template_controls_refuses_them_by_name(hf: Any) -> None:
    for template, add, field in [
        (Template(add_generation_prompt=False), None, "add_generation_prompt"),
        (None, True, "add_special_tokens"),
    ]:
        with pytest.raises(RequestError) as e:
            tokenize(_request(template, add), Limits("m", 512), HfTokenizer(hf))
        assert e.value.field == field


def test_a_template_s_refusal_names_the_messages(hf: Any) -> None:
    with pytest.raises(RequestError) as e:
        prepare(_request(Template(continue_final_message=True)), _limits(False), HfTokenizer(hf))
    assert e.value.field == "messages" and "continue_final_message" in e.value.message


@pytest.mark.parametrize(
    ("kw", "add", "bos"),
    [
        ({}, None, False),  # messages: the template writes the special tokens
        ({}, True, True),
        ({"prompt": "a shard"}, None, True),  # a prompt: BOS by default
        ({"prompt": "a shard"}, False, False),
    ],
)
def test_add_special_tokens_as_vllm_defaults_it(
    hf: Any, kw: dict[str, Any], add: bool | None, bos: bool
) -> None:
    ids = tokenize(_request(None, add, **kw), _limits(False), HfTokenizer(hf))
    assert (ids[0] == hf.bos_token_id) is bos
