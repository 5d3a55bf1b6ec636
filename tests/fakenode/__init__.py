"""A fake NVIDIA GPU node for tests: driver files, device nodes and an NVML that answers from a config."""
