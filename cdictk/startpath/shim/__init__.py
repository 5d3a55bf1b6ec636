"""``cdictk-runtime`` and podman's precreate hook: an OCI config's GPU requests read, resolved in the
spec cache, trimmed to the driver capabilities asked for and applied."""
