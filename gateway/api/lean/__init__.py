"""A lean HTTP/1.1 path for the streaming routes, in front of aiohttp on the same socket
(`gateway.lean_http`): docs/operations.md "The lean HTTP path"."""
