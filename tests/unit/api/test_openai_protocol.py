"""Decoding and validation of OpenAI request bodies (gateway.api.openai.protocol)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2
import openai
import pytest
from shardgate.v1.params import Structured, Template, template_asked

from gateway.api.openai.protocol import decode_chat, decode_completion
from gateway.api.openai.template import response_role
from gateway.types import GenerationRequest, InvalidRequest, Message, Sampling, UnknownFields

USER = {"role": "user", "content": "hi"}


def chat(**fields: Any) -> bytes:
    body: dict[str, Any] = {"model": "m", "messages": [USER]}
    body.update(fields)
    return json.dumps(body).encode()


def completion(**fields: Any) -> bytes:
    body: dict[str, Any] = {"model": "m", "prompt": "Once upon a time"}
    body.update(fields)
    return json.dumps(body).encode()


def without(body: bytes, key: str) -> bytes:
    obj = json.loads(body)
    del obj[key]
    return json.dumps(obj).encode()


# --- validation ------------------------------------------------------------------------------

# (body, expected param) for fields both endpoints share, built with either body factory.
COMMON_CASES: list[tuple[dict[str, Any], str]] = [
    ({"model": 1}, "model"),
    ({"model": ""}, "model"),
    ({"model": None}, "model"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": 1.5}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"max_tokens": "5"}, "max_tokens"),
    ({"max_tokens": 2**31}, "max_tokens"),
    ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ({"max_completion_tokens": "x"}, "max_completion_tokens"),
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": 2.01}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_p": -1}, "top_p"),
    ({"top_k": -2}, "top_k"),
    ({"top_k": 1.5}, "top_k"),
    ({"top_k": 2**31}, "top_k"),
    ({"seed": -1}, "seed"),
    ({"seed": 2**64}, "seed"),
    ({"seed": "42"}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"stop": 5}, "stop"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stop": [1]}, "stop"),
    ({"stop": ["ok", None]}, "stop"),
    ({"stop": ""}, "stop"),
    ({"stop": ["a", ""]}, "stop"),
    ({"stream": "yes"}, "stream"),
    ({"stream": 1}, "stream"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": False, "stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": True, "stream_options": 5}, "stream_options"),
    ({"stream": True, "stream_options": {"include_usage": "x"}}, "stream_options.include_usage"),
    ({"n": 129}, "n"),
    ({"n": 2, "temperature": 0}, "n"),
    ({"n": 0}, "n"),
    ({"n": "1"}, "n"),
    ({"ignore_eos": 1}, "ignore_eos"),
    ({"user": 5}, "user"),
    ({"priority": 1.5}, "priority"),
    ({"priority": 2**31}, "priority"),
    ({"echo": "no"}, "echo"),
    ({"best_of": 2}, "best_of"),
    ({"best_of": 0}, "best_of"),
]

CHAT_CASES: list[tuple[dict[str, Any], str]] = [
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": None}, "messages"),
    ({"messages": {"role": "user"}}, "messages"),
    ({"messages": [1]}, "messages[0]"),
    ({"messages": [{"content": "hi"}]}, "messages[0].role"),
    ({"messages": [USER, {"role": "bot", "content": "x"}]}, "messages[1].role"),
    ({"messages": [{"role": 1, "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": {"text": "x"}}]}, "messages[0].content"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ({"messages": [USER, {"role": "system", "content": None}]}, "messages[1].content"),
    ({"messages": [{"role": "user", "content": [1]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"text": "x"}]}]}, "messages[0].content[0].type"),
    (
        {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
        "messages[0].content[0].text",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]},
        "messages[0].content[0].text",
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this?"},
                        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                    ],
                }
            ]
        },
        "messages[0].content[1].type",
    ),
    ({"messages": [{"role": "user", "content": "x", "name": 5}]}, "messages[0].name"),
    ({"logprobs": 5}, "logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": -2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": "2"}, "top_logprobs"),
]

COMPLETION_CASES: list[tuple[dict[str, Any], str]] = [
    ({"prompt": 5}, "prompt"),
    ({"prompt": None}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [-1, 2]}, "prompt"),
    ({"prompt": [1, "a"]}, "prompt"),
    ({"prompt": [1.5]}, "prompt"),
    ({"prompt": [True]}, "prompt"),
    ({"prompt": {"text": "x"}}, "prompt"),
    ({"logprobs": True}, "logprobs"),
    ({"logprobs": -2}, "logprobs"),
    ({"prompt_logprobs": -2}, "prompt_logprobs"),
    ({"prompt_logprobs": "1"}, "prompt_logprobs"),
    ({"prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
    ({"prompt_logprobs": 1, "n": 2, "temperature": 1.0}, "prompt_logprobs"),
    ({"echo": True, "logprobs": 1, "n": 2, "temperature": 1.0}, "echo"),
    ({"prompt": ["a", "b"], "echo": True, "logprobs": 1}, "echo"),
    ({"prompt": ["a", "b"], "prompt_logprobs": 0}, "prompt_logprobs"),
    ({"truncate_prompt_tokens": -2}, "truncate_prompt_tokens"),
    ({"truncate_prompt_tokens": "8"}, "truncate_prompt_tokens"),
    ({"truncation_side": "middle"}, "truncation_side"),
]


def _assert_invalid(decode: Callable[[bytes, str], GenerationRequest], body: bytes) -> str | None:
    with pytest.raises(InvalidRequest) as info:
        decode(body, "rid")
    err = info.value
    assert err.status == 400
    assert err.type == "invalid_request_error"
    assert err.message and err.message == str(err)
    return err.param


@pytest.mark.parametrize(("fields", "param"), COMMON_CASES + CHAT_CASES)
def test_chat_invalid(fields: dict[str, Any], param: str) -> None:
    assert _assert_invalid(decode_chat, chat(**fields)) == param


@pytest.mark.parametrize(("fields", "param"), COMMON_CASES + COMPLETION_CASES)
def test_completion_invalid(fields: dict[str, Any], param: str) -> None:
    assert _assert_invalid(decode_completion, completion(**fields)) == param


@pytest.mark.parametrize(
    ("decode", "body", "param"),
    [
        (decode_chat, without(chat(), "model"), "model"),
        (decode_chat, without(chat(), "messages"), "messages"),
        (decode_completion, without(completion(), "model"), "model"),
        (decode_completion, without(completion(), "prompt"), "prompt"),
        (decode_chat, chat(messages=[{"content": "x"}]), "messages[0].role"),
    ],
)
def test_missing_field(
    decode: Callable[[bytes, str], GenerationRequest], body: bytes, param: str
) -> None:
    with pytest.raises(InvalidRequest) as info:
        decode(body, "rid")
    assert info.value.param == param
    assert info.value.message == f"Missing required parameter: '{param}'."


VALID_FOR_BOTH = b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "prompt": "p"}'


@pytest.mark.parametrize("decode", [decode_chat, decode_completion])
@pytest.mark.parametrize(
    "body",
    [b"", b"{", b'{"model": "m",}', b"\xff\xfe", b"nope", VALID_FOR_BOTH + b" trailing"],
)
def test_malformed_json(decode: Callable[[bytes, str], GenerationRequest], body: bytes) -> None:
    with pytest.raises(InvalidRequest) as info:
        decode(body, "rid")
    assert info.value.status == 400
    assert info.value.param is None
    assert "not valid JSON" in info.value.message


@pytest.mark.parametrize("decode", [decode_chat, decode_completion])
@pytest.mark.parametrize(
    ("field", "opener", "leaf", "closer"),
    [
        ("unknown_field", b"[", b"", b"]"),
        ("unknown_field", b'{"a":', b"1", b"}"),
        ("prompt", b"[", b'"x"', b"]"),  # a list of Any to the decoder
    ],
)
def test_too_deeply_nested_body_is_400(
    decode: Callable[[bytes, str], GenerationRequest],
    field: str,
    opener: bytes,
    leaf: bytes,
    closer: bytes,
) -> None:
    n = 10_000
    nested = opener * n + leaf + closer * n
    body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "%s": ' % field.encode()
    with pytest.raises(InvalidRequest) as info:
        decode(body + nested + b"}", "rid")
    assert info.value.status == 400
    assert info.value.param is None
    assert "too deeply" in info.value.message


def test_nesting_the_decoder_takes_is_served() -> None:
    """Depth alone is no error: 100 levels of an unknown field decode."""
    body = VALID_FOR_BOTH[:-1] + b', "extra": ' + b"[" * 100 + b"]" * 100 + b"}"
    assert decode_chat(body, "rid").model == "m"


@pytest.mark.parametrize("decode", [decode_chat, decode_completion])
@pytest.mark.parametrize("body", [b"[]", b'"hello"', b"42", b"null", b"true", b'[{"model": "m"}]'])
def test_body_not_an_object(decode: Callable[[bytes, str], GenerationRequest], body: bytes) -> None:
    with pytest.raises(InvalidRequest) as info:
        decode(body, "rid")
    assert info.value.status == 400
    assert info.value.param is None
    assert "must be a JSON object" in info.value.message


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_tokens": 0}, "Invalid value for 'max_tokens': must be an integer greater than 0"),
        ({"temperature": 3}, "Invalid value for 'temperature': must be a number between 0 and 2"),
        ({"n": 300}, "Invalid value for 'n': must be between 1 and 128"),
        ({"top_logprobs": 2}, "Invalid value for 'top_logprobs': needs logprobs set to true"),
        ({"best_of": 3}, "only best_of=1 is supported"),
        ({"stream_options": {"include_usage": True}}, "only allowed when 'stream' is enabled"),
        (
            {"messages": [{"role": "bot", "content": "x"}]},
            "Invalid value for 'messages[0].role': must be one of 'system', 'user'",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "only 'text' content parts are supported, got 'image_url'",
        ),
    ],
)
def test_messages_are_human(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        decode_chat(chat(**fields), "rid")
    assert message in info.value.message
    assert "$." not in info.value.message and "`" not in info.value.message


# --- accepted and ignored ----------------------------------------------------------------------

IGNORED: dict[str, Any] = {
    "response_format": {"type": "text"},
    "add_special_tokens": None,
    "tool_choice": "none",
    "parallel_tool_calls": True,
    "metadata": {"k": "v"},
    "store": False,
    "service_tier": "auto",
    "user": "alice",
    "some_future_field": {"nested": [1, 2, 3]},
    "echo": False,
    "best_of": 1,
    "n": 1,
}


def test_chat_ignores_unknown_and_unsupported_but_harmless_fields() -> None:
    req = decode_chat(chat(**IGNORED, logprobs=False), "rid")
    assert req.unknown_fields == UnknownFields(("some_future_field",), 1)  # (only it: named)
    req.unknown_fields = None
    assert req == decode_chat(chat(), "rid")


def test_completion_ignores_unknown_and_unsupported_but_harmless_fields() -> None:
    req = decode_completion(completion(**IGNORED, logprobs=None), "rid")
    # (parallel_tool_calls is chat's: vLLM's completions declare none either)
    assert req.unknown_fields == UnknownFields(("parallel_tool_calls", "some_future_field"), 2)
    req.unknown_fields = None
    assert req == decode_completion(completion(), "rid")


def test_logprob_token_ids_need_logprobs_and_travel_with_them() -> None:
    for decode, body, with_logprobs in (
        (decode_chat, chat, {"logprobs": True}),
        (decode_completion, completion, {"logprobs": 0}),
    ):
        with pytest.raises(InvalidRequest, match="`logprobs` must be set") as e:
            decode(body(logprob_token_ids=[5]), "rid")
        assert e.value.param == "logprob_token_ids"
        s = decode(body(logprob_token_ids=[5, 9], **with_logprobs), "rid").sampling
        assert (s.logprobs, s.logprob_token_ids) == (0, (5, 9))
        s = decode(body(logprob_token_ids=[], **with_logprobs), "rid").sampling
        assert s.logprob_token_ids is None
        with pytest.raises(InvalidRequest) as e:
            decode(body(logprob_token_ids=[-1], **with_logprobs), "rid")
        assert e.value.param == "logprob_token_ids"


@pytest.mark.parametrize(
    ("fields", "want", "asked"),
    [
        ({}, None, []),
        ({"add_generation_prompt": True, "continue_final_message": False}, None, []),
        (
            {"chat_template": "{{ messages }}"},
            Template(chat_template="{{ messages }}"),
            ["chat_template"],
        ),
        (
            {"chat_template_kwargs": {"enable_thinking": False}},
            Template(kwargs='{"enable_thinking":false}'),
            ["chat_template_kwargs"],
        ),
        (
            {"documents": [{"title": "t", "text": "x"}]},
            Template(documents='[{"title":"t","text":"x"}]'),
            ["documents"],
        ),
        (
            {"add_generation_prompt": False},
            Template(add_generation_prompt=False),
            ["add_generation_prompt"],
        ),
        (
            {"add_generation_prompt": False, "continue_final_message": True},
            Template(add_generation_prompt=False, continue_final_message=True),
            ["add_generation_prompt", "continue_final_message"],
        ),
        # (vLLM's check is of the fields given: the template itself refuses this one)
        (
            {"continue_final_message": True},
            Template(continue_final_message=True),
            ["continue_final_message"],
        ),
    ],
)
def test_chat_template_controls_travel_in_the_generation(
    fields: dict[str, Any], want: Template | None, asked: list[str]
) -> None:
    g = decode_chat(chat(**fields), "rid").generation
    assert g.template == want
    assert template_asked(g) == asked


@pytest.mark.parametrize(("value", "want"), [(None, None), (False, None), (True, True)])
def test_chat_add_special_tokens_is_set_only_off_its_default(value: Any, want: Any) -> None:
    g = decode_chat(chat(add_special_tokens=value), "rid").generation
    assert g.add_special_tokens is want
    assert template_asked(g) == (["add_special_tokens"] if want is not None else [])


@pytest.mark.parametrize(("value", "want"), [(None, None), (True, None), (False, False)])
def test_completion_add_special_tokens_is_set_only_off_its_default(value: Any, want: Any) -> None:
    g = decode_completion(completion(add_special_tokens=value), "rid").generation
    assert g.add_special_tokens is want


def test_continue_final_message_and_add_generation_prompt_are_exclusive() -> None:
    body = chat(continue_final_message=True, add_generation_prompt=True)
    with pytest.raises(InvalidRequest, match="Cannot set both") as e:
        decode_chat(body, "rid")
    assert e.value.param == "continue_final_message"


@pytest.mark.parametrize("documents", [["x"], [{"title": 1}], {"title": "t"}])
def test_documents_must_be_objects_of_strings(documents: Any) -> None:
    with pytest.raises(InvalidRequest) as e:
        decode_chat(chat(documents=documents), "rid")
    assert e.value.param is not None and e.value.param.startswith("documents")


@pytest.mark.parametrize(
    ("fields", "role"),
    [
        ({}, "assistant"),
        ({"add_generation_prompt": True}, "assistant"),
        ({"add_generation_prompt": False}, "user"),
        (
            {
                "add_generation_prompt": False,
                "messages": [USER, {"role": "assistant", "content": "Hel"}],
            },
            "assistant",
        ),
    ],
)
def test_the_answer_role_is_the_continued_message_s_without_a_generation_prompt(
    fields: dict[str, Any], role: str
) -> None:
    assert response_role(decode_chat(chat(**fields), "rid").generation) == role


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("suffix", "the end"),
        ("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),
        ("tool_choice", "auto"),
        ("tool_choice", "required"),
    ],
)
def test_completion_refuses_what_it_does_not_serve_by_name(field: str, value: Any) -> None:
    with pytest.raises(InvalidRequest, match=f"^{field} is not supported") as e:
        decode_completion(completion(**{field: value}), "rid")
    assert e.value.param == field


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        (
            {"response_format": {"type": "json_object"}},
            Structured(field="response_format", json_object=True),
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "object"}},
                }
            },
            Structured(field="response_format", json='{"type":"object"}'),
        ),
        (
            {"structured_outputs": {"choice": ["a", "b"]}},
            Structured(field="structured_outputs", choice=("a", "b")),
        ),
        (
            {"structured_outputs": {"regex": "[a-z]+"}},
            Structured(field="structured_outputs", regex="[a-z]+"),
        ),
        (
            {"structured_outputs": {"grammar": "root ::= 'a'"}},
            Structured(field="structured_outputs", grammar="root ::= 'a'"),
        ),
        (
            {"guided_json": {"type": "object"}},
            Structured(field="guided_json", json='{"type":"object"}'),
        ),
        ({"guided_choice": ["a"]}, Structured(field="guided_choice", choice=("a",))),
        ({"response_format": {"type": "text"}}, None),
    ],
)
def test_structured_outputs_are_decoded_for_the_engine(
    fields: dict[str, Any], want: Structured | None
) -> None:
    assert decode_chat(chat(**fields), "rid").sampling.structured == want
    assert decode_completion(completion(**fields), "rid").sampling.structured == want


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        ({"structured_outputs": {"choice": []}}, "structured_outputs"),
        ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs"),
        ({"structured_outputs": {"structural_tag": "x"}}, "structured_outputs.structural_tag"),
        ({"structured_outputs": {"json_object": False}}, "structured_outputs"),
        ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex"),
    ],
)
def test_bad_structured_outputs_are_refused_by_name(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        decode_chat(chat(**fields), "rid")
    assert e.value.param == param


def test_completions_echo_their_prompt() -> None:
    assert decode_completion(completion(prompt="Say", echo=True), "rid").echo
    assert not decode_completion(completion(prompt="Say"), "rid").echo
    assert decode_completion(completion(prompt=[1, 2], echo=True), "rid").echo  # (their text)
    # with token ids returned, as in vLLM, the ids take the text's place
    assert not decode_completion(
        completion(prompt=[1, 2], echo=True, return_token_ids=True), "rid"
    ).echo


def test_a_completion_prompt_of_token_ids_goes_to_the_engine_as_ids() -> None:
    req = decode_completion(completion(prompt=[1, 2, 3]), "rid")
    assert req.prompt_token_ids == (1, 2, 3) and req.prompt is None
    assert decode_completion(completion(prompt=[7]), "rid").prompt_token_ids == (7,)


@pytest.mark.parametrize(
    ("prompt", "batch"),
    [
        (["a", "b"], ("a", "b")),
        ([[1, 2], [3]], ((1, 2), (3,))),
        ([[1, 2]], ((1, 2),)),
    ],
)
def test_a_batch_of_prompts_is_one_choice_per_prompt_and_n(
    prompt: list[Any], batch: tuple[Any, ...]
) -> None:
    req = decode_completion(completion(prompt=prompt, n=2, seed=10, temperature=1.0), "rid")
    assert req.batch == batch and req.choices == 2 * len(batch)
    # Choice p * n + i runs prompt p, with the seed of its place among that prompt's n.
    for index in range(req.choices):
        child = req.child(index)
        p, i = divmod(index, 2)
        given = child.prompt if isinstance(batch[p], str) else child.prompt_token_ids
        assert given == batch[p]
        assert child.sampling.seed == 10 + i and not child.batch and child.choices == 1


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"prompt": [[1], []]}, "prompt[1]"),
        ({"prompt": [[1], [-1]]}, "prompt[1]"),
        ({"prompt": ["a", 5]}, "prompt"),
        ({"prompt": ["a", [4, 5]]}, "prompt"),  # (vLLM's too: strings or ids, not both)
        ({"prompt": [[1], [2]], "echo": True}, "echo"),
        ({"prompt": ["a"] * 65, "n": 2, "temperature": 1.0}, "prompt"),
    ],
)
def test_bad_batches_name_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        decode_completion(completion(**fields), "rid")
    assert e.value.param == param


def test_sampling_fields_beyond_the_base_are_decoded_for_the_engine() -> None:
    req = decode_chat(
        chat(
            max_tokens=9,
            presence_penalty=0.5,
            frequency_penalty=-0.5,
            repetition_penalty=1.2,
            min_p=0.05,
            logit_bias={"50": -100, "7": 2.5},
            stop_token_ids=[2, 3],
            include_stop_str_in_output=True,
            min_tokens=4,
            skip_special_tokens=False,
            spaces_between_special_tokens=False,
            bad_words=["no"],
            allowed_token_ids=[5, 6],
        ),
        "rid",
    )
    assert req.sampling == Sampling(
        max_tokens=9,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        repetition_penalty=1.2,
        min_p=0.05,
        logit_bias={50: -100.0, 7: 2.5},
        stop_token_ids=(2, 3),
        include_stop_str_in_output=True,
        min_tokens=4,
        skip_special_tokens=False,
        spaces_between_special_tokens=False,
        bad_words=("no",),
        allowed_token_ids=(5, 6),
    )


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"min_p": 1.5}, "min_p"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"logit_bias": {"5": 101}}, "logit_bias"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"min_tokens": 10, "max_tokens": 5}, "min_tokens"),
        ({"allowed_token_ids": []}, "allowed_token_ids"),
        ({"bad_words": "no"}, "bad_words"),
    ],
)
def test_bad_sampling_values_are_refused_by_name(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        decode_chat(chat(**fields), "rid")
    assert e.value.param == param


@pytest.mark.parametrize("decode, make", [(decode_chat, chat), (decode_completion, completion)])
def test_explicit_nulls_mean_not_given(
    decode: Callable[[bytes, str], GenerationRequest], make: Callable[..., bytes]
) -> None:
    nulls = dict.fromkeys(
        [
            "max_tokens",
            "max_completion_tokens",
            "temperature",
            "top_p",
            "top_k",
            "seed",
            "stop",
            "stream",
            "stream_options",
            "n",
            "ignore_eos",
            "user",
            "priority",
            "logprobs",
            "echo",
            "best_of",
        ]
    )
    assert decode(make(**nulls), "rid") == decode(make(), "rid")


# --- happy paths -------------------------------------------------------------------------------


def test_chat_maps_every_field() -> None:
    body = chat(
        model="llama-3-8b",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": "hi", "name": "alice"},
            {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "tool", "content": "42", "tool_call_id": "call_1"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "line one"}, {"type": "text", "text": "two"}],
            },
        ],
        max_completion_tokens=77,
        temperature=0.7,
        top_p=0.9,
        top_k=40,
        seed=2**63,
        stop=["\n\n", "END"],
        stream=True,
        stream_options={"include_usage": True},
        ignore_eos=True,
        user="alice",
        priority=-3,
    )
    req = decode_chat(body, "req-1", default_max_tokens=999)
    assert req == GenerationRequest(
        request_id="req-1",
        model="llama-3-8b",
        sampling=Sampling(
            max_tokens=77,
            temperature=0.7,
            top_p=0.9,
            top_k=40,
            seed=2**63,
            stop=("\n\n", "END"),
            ignore_eos=True,
        ),
        prompt=None,
        messages=(
            Message("system", "Be brief."),
            Message("system", "Answer in French."),
            Message("user", "hi"),
            Message("assistant", ""),
            Message("tool", "42", tool_call_id="call_1"),
            Message("user", "line one\ntwo"),
        ),
        stream=True,
        include_usage=True,
        priority=-3,
    )


def test_completion_maps_every_field() -> None:
    body = completion(
        model="llama-3-8b",
        prompt=["The capital of France is"],
        max_tokens=5,
        temperature=0,
        top_p=1,
        top_k=-1,
        seed=0,
        stop="\n",
        stream=True,
        stream_options={"include_usage": False},
        ignore_eos=False,
        priority=7,
    )
    req = decode_completion(body, "req-2")
    assert req == GenerationRequest(
        request_id="req-2",
        model="llama-3-8b",
        sampling=Sampling(
            max_tokens=5,
            temperature=0.0,
            top_p=1.0,
            top_k=0,
            seed=0,
            stop=("\n",),
            ignore_eos=False,
        ),
        prompt="The capital of France is",
        messages=None,
        stream=True,
        include_usage=False,
        priority=7,
    )
    assert isinstance(req.sampling.temperature, float)


def test_chat_defaults() -> None:
    req = decode_chat(chat(), "rid")
    assert req == GenerationRequest(
        request_id="rid",
        model="m",
        sampling=Sampling(max_tokens=256),
        messages=(Message("user", "hi"),),
    )
    assert decode_chat(chat(), "rid", default_max_tokens=1000).sampling.max_tokens == 1000


def test_completion_defaults() -> None:
    req = decode_completion(completion(), "rid")
    assert req == GenerationRequest(
        request_id="rid",
        model="m",
        sampling=Sampling(max_tokens=16),
        prompt="Once upon a time",
    )
    assert decode_completion(completion(), "rid", default_max_tokens=64).sampling.max_tokens == 64


@pytest.mark.parametrize("decode, make", [(decode_chat, chat), (decode_completion, completion)])
@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"max_tokens": 10}, 10),
        ({"max_completion_tokens": 20}, 20),
        ({"max_tokens": 10, "max_completion_tokens": 20}, 20),
        ({"max_tokens": 2**31 - 1}, 2**31 - 1),
    ],
)
def test_max_tokens_either_field(
    decode: Callable[[bytes, str], GenerationRequest],
    make: Callable[..., bytes],
    fields: dict[str, Any],
    expected: int,
) -> None:
    assert decode(make(**fields), "rid").sampling.max_tokens == expected


@pytest.mark.parametrize(("top_k", "expected"), [(-1, 0), (0, 0), (1, 1), (50, 50)])
def test_top_k_off_values(top_k: int, expected: int) -> None:
    assert decode_chat(chat(top_k=top_k), "rid").sampling.top_k == expected


@pytest.mark.parametrize(
    ("fields", "stream", "include_usage"),
    [
        ({}, False, False),
        ({"stream": False}, False, False),
        ({"stream": True}, True, False),
        ({"stream": True, "stream_options": {}}, True, False),
        ({"stream": True, "stream_options": {"include_usage": True}}, True, True),
        ({"stream": True, "stream_options": {"include_usage": False}}, True, False),
        ({"stream": False, "stream_options": None}, False, False),
    ],
)
def test_stream_flags(fields: dict[str, Any], stream: bool, include_usage: bool) -> None:
    req = decode_chat(chat(**fields), "rid")
    assert (req.stream, req.include_usage) == (stream, include_usage)


def test_stop_up_to_four() -> None:
    stop = ["a", "b", "c", "d"]
    assert decode_completion(completion(stop=stop), "rid").sampling.stop == tuple(stop)
    assert decode_chat(chat(stop=[]), "rid").sampling.stop == ()


def test_non_ascii_content() -> None:
    text = "héllo 👋 \u2028 \x00"
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]})
    assert decode_chat(body.encode(), "rid").messages == (Message("user", text),)


# --- what the official SDK actually sends ------------------------------------------------------


def _sdk_body(call: Callable[[openai.OpenAI], object]) -> bytes:
    """The request body the openai SDK sends for `call` (through a mock transport, no sockets)."""
    sent: list[bytes] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.content)
        return httpx2.Response(400, json={"error": {"message": "stop here", "type": "x"}})

    client = openai.OpenAI(
        base_url="http://gateway.invalid/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    with pytest.raises(openai.BadRequestError):
        call(client)
    client.close()
    assert len(sent) == 1
    return sent[0]


def test_sdk_chat_request_decodes() -> None:
    body = _sdk_body(
        lambda c: c.chat.completions.create(
            model="llama",
            messages=[
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "bob"},
            ],
            max_completion_tokens=12,
            temperature=0.2,
            top_p=0.5,
            seed=7,
            stop=["</s>"],
            stream=True,
            stream_options={"include_usage": True},
            n=1,
            user="bob",
            frequency_penalty=0.1,
            presence_penalty=0.1,
            logprobs=False,
            metadata={"a": "b"},
            extra_body={"top_k": 5, "ignore_eos": True, "priority": 2},
        )
    )
    req = decode_chat(body, "rid")
    assert req.messages == (Message("system", "Be brief."), Message("user", "hi"))
    assert req.sampling == Sampling(
        max_tokens=12,
        temperature=0.2,
        top_p=0.5,
        top_k=5,
        seed=7,
        stop=("</s>",),
        ignore_eos=True,
        frequency_penalty=0.1,
        presence_penalty=0.1,
    )
    assert (req.stream, req.include_usage, req.priority) == (True, True, 2)


def test_sdk_completion_request_decodes() -> None:
    body = _sdk_body(
        lambda c: c.completions.create(
            model="llama",
            prompt="Say this is a test",
            max_tokens=7,
            temperature=0,
            stop="\n",
            echo=False,
            best_of=1,
            suffix=None,
        )
    )
    req = decode_completion(body, "rid")
    assert req.prompt == "Say this is a test"
    assert req.sampling == Sampling(max_tokens=7, temperature=0.0, stop=("\n",))
    assert not req.stream


def test_sdk_n_is_decoded() -> None:
    body = _sdk_body(
        lambda c: c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], n=3, seed=7
        )
    )
    req = decode_chat(body, "rid")
    assert req.n == 3
    children = [req.child(i) for i in range(3)]
    # As vLLM's parallel sampling: ids of their own, the seed plus the index.
    assert [c.request_id for c in children] == ["0_rid", "1_rid", "2_rid"]
    assert [c.sampling.seed for c in children] == [7, 8, 9]
    assert all(c.n == 1 and c.messages == req.messages for c in children)


# What a request asks of its prompt: its logprobs (the field, or echo's with logprobs: vLLM's
# rule), and its truncation.
@pytest.mark.parametrize(
    ("decode", "fields", "want"),
    [
        ("completion", {}, (None, None, "")),
        ("completion", {"prompt_logprobs": 0}, (0, None, "")),
        ("completion", {"prompt_logprobs": 0, "stream": True}, (0, None, "")),
        ("completion", {"echo": True}, (None, None, "")),
        ("completion", {"echo": True, "logprobs": 3}, (3, None, "")),
        ("completion", {"echo": True, "logprobs": 3, "prompt_logprobs": 1}, (1, None, "")),
        ("completion", {"logprobs": 3}, (None, None, "")),
        ("completion", {"truncate_prompt_tokens": 5}, (None, 5, "")),
        (
            "completion",
            {"truncate_prompt_tokens": -1, "truncation_side": "left"},
            (None, -1, "left"),
        ),
        ("chat", {"prompt_logprobs": 2}, (2, None, "")),
        ("chat", {"echo": True}, (None, None, "")),
        ("chat", {"echo": True, "logprobs": True, "top_logprobs": 4}, (4, None, "")),
        ("chat", {"echo": True, "logprobs": True}, (None, None, "")),
        ("chat", {"truncate_prompt_tokens": 7, "truncation_side": "right"}, (None, 7, "right")),
    ],
)
def test_what_a_request_asks_of_its_prompt(
    decode: str, fields: dict[str, Any], want: tuple[int | None, int | None, str]
) -> None:
    req = (
        decode_chat(chat(**fields), "rid")
        if decode == "chat"
        else decode_completion(completion(**fields), "rid")
    )
    s = req.sampling
    assert (s.prompt_logprobs, s.truncate_prompt_tokens, s.truncation_side) == want


def test_include_reasoning_false_hides_the_reasoning_and_gives_no_tokens_that_show_it() -> None:
    assert decode_chat(chat(include_reasoning=False), "rid").hide_reasoning
    assert not decode_chat(chat(include_reasoning=True), "rid").hide_reasoning
    assert not decode_chat(chat(), "rid").hide_reasoning
    for field, value in (("logprobs", True), ("return_token_ids", True)):
        with pytest.raises(InvalidRequest) as e:
            decode_chat(chat(include_reasoning=False, **{field: value}), "rid")
        assert e.value.param == field
