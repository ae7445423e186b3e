"""Benchmarks (scripts, not tests): run them with ``python bench/<name>.py``."""
