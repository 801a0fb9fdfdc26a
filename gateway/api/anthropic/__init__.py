"""Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

An edge like the OpenAI one: its bodies decode into the core's `GenerationRequest`
(protocol.py), go through the same service entry point as chat completions (serving.py), and
the generation comes back as Anthropic's Message object or its SSE events (encode.py); every
error leaves in Anthropic's JSON shape (errors.py).
"""
