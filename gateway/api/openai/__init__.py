"""The OpenAI-compatible wire layer: request decoding/validation and response encoding.

Pure functions over bytes; the HTTP server that uses them lives elsewhere.
"""
