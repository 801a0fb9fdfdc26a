"""What vLLM honours of the optional sampling fields (no vLLM import: the `openai` backend, in
front of vLLM's own server, announces the same)."""

from __future__ import annotations

# The optional sampling fields this backend passes to vLLM (announced as its capabilities).
# spaces_between_special_tokens is not among them: vLLM applies it with slow tokenizers only,
# and a resumed request's text is made by the sidecar (vllm/text.py), which does not.
CAPABILITIES = frozenset(
    {
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "min_p",
        "logit_bias",
        "stop_token_ids",
        "min_tokens",
        "bad_words",
        "allowed_token_ids",
        "structured",
        "logprobs",
        "prompt_logprobs",
        "logprob_token_ids",
        "truncate_prompt_tokens",
        "truncation_side",
        "include_stop_str_in_output",
        "skip_special_tokens",
    }
)
