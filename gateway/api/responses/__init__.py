"""OpenAI's Responses API: `POST /v1/responses`, `GET /v1/responses/{id}` and
`POST /v1/responses/{id}/cancel`.

An edge like the chat one: its bodies decode into the core's `GenerationRequest`
(protocol.py), go through the same service entry point (serving.py), and come back as the
Response object or its streaming events (encode.py, run.py); stored and background responses
live in a small bounded store of this process (store.py).
"""
