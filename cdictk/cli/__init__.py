"""Thin click front-ends: parse flags, call the packages, print."""
