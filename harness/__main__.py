"""``python -m harness`` is ``critpath``; torchrun launches it this way (``torchrun ... -m harness run``).

The command line is imported inside a guard: a checkout whose code cannot even be imported (a
syntax error in ``cli.py``, a module it needs missing) is a command that could not run, exit 2
with the file and line, never the exit 1 that CI reads as a regression or a failed case. The
gate runs the candidate's own checkout, so this is what it exits with when that checkout is the
one that is broken.
"""
import sys
import traceback

# harness.core.options.EXIT_USAGE, written out: this must exit 2 when no module of the package
# imports (a syntax error in options.py itself), so it can import none. A test holds the two equal.
EXIT_USAGE = 2


def _where(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"{exc.filename}:{exc.lineno}: {type(exc).__name__}: {exc.msg}"
    frames = traceback.extract_tb(exc.__traceback__)
    at = f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""
    return f"{at}{type(exc).__name__}: {exc}"


def main() -> int:
    try:
        from harness.cli import main as command_line
    except Exception as exc:  # whatever stops the import, the command could not start
        print(f"critpath: error: cannot start: {_where(exc)}", file=sys.stderr)
        return EXIT_USAGE
    return command_line()


if __name__ == "__main__":
    raise SystemExit(main())
