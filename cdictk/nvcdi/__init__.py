"""Node facts -> a CDI spec: per-GPU, per-MIG and ``all`` devices, common edits, names and hooks."""
