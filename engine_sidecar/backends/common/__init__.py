"""Pieces the real-engine backends share: step batching, prompts, usage, detokenisation."""
