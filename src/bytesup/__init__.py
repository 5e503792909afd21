"""bytesup: the companion code of the course *LLM Basics*."""

__version__ = "0.1.0"
