"""Benchmark loaders, metrics and reports."""
