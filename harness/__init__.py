"""critpath: latency of collectives and control messages on the critical path of LLM inference."""

__version__ = "0.1.0"
