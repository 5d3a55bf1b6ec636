"""Facts about an NVIDIA node, every function given its roots (driver, dev, proc, sys)."""
