"""cdictk: NVIDIA GPUs in containers through the Container Device Interface (CDI)."""

__version__ = "0.1.0"
