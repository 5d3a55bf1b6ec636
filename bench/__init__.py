"""Benchmarks: each prints figures and ratios (see docs/development.md, Benchmarks)."""
