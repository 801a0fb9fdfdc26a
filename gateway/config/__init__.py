"""Typed configuration: schema and loader."""
