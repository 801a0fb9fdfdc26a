"""Benchmarks: load generation and measurements."""
