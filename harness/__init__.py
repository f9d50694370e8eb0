"""critpath: latency of collectives and control messages on the critical path of LLM inference."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # harness.frame / harness.samples_frame without importing pandas at `import harness`.
    if name in ("frame", "samples_frame"):
        from harness.tables import frame as dataframe

        return getattr(dataframe, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
