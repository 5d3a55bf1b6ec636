"""Benchmarks: each prints figures and ratios (see README, Benchmarks)."""
