"""Benchmarks: each prints figures and ratios (bench/README.md says what each measures)."""
