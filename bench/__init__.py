"""Benchmarks: ``make bench`` (or ``python -m bench [section ...]``) prints one table per section."""
