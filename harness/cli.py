"""The ``critpath`` command line: the parser, and which module owns which command.

Exit codes: 0 every case ran and passed its check; 1 a case failed, timed out or gave a wrong
answer; 2 the command could not run (bad options, unreadable input).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Optional, Sequence

from harness.core.options import EXIT_OK, EXIT_USAGE, CannotRun, UnknownName, os_error_text, print_error
from harness.core.streams import escaped_streams
from harness.run.lifetime import interrupt_signal, stop_signals_unwind


def build_parser(modules: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The parser with the commands of ``modules`` (default: every module)."""
    parser = argparse.ArgumentParser(
        prog="critpath",
        description="Latency of collectives and control messages on the critical path of distributed LLM inference.",
    )
    # Every command in the usage line, whichever modules are loaded: one command's line (an error
    # in `critpath list ...`) loads only its owner, and would list that module's commands alone.
    every = ",".join(command for commands in COMMAND_MODULES.values() for command in commands)
    sub = parser.add_subparsers(dest="command", required=True, metavar=f"{{{every}}}")
    for module in COMMAND_MODULES if modules is None else modules:
        importlib.import_module(module).register(sub)
    return parser


# Each command lives with its concern: a module with register(subparsers), which adds its parser
# with set_defaults(func=handler); a handler takes the parsed args, returns the exit code.
# Keyed by the commands each module registers, so that one command imports only its own module:
# the report's matplotlib and the gate's scipy cost most of a second, which every `critpath run`
# and every gate repeat would otherwise pay (tests/test_project.py keeps this table true). In the
# order `critpath --help` lists them.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "harness.run.command": ("list", "run"),
    "harness.tables.show": ("show",),
    "harness.model.command": ("model",),
    "harness.pipeline.compare": ("pipeline-compare",),
    "harness.moe_a2a.cli": ("moe-sim", "moe-report"),
    "harness.report.cli": ("report",),
    "harness.accept.command": ("accept",),
    "harness.diagnose.cli": ("diagnose",),
    "harness.nccltests.importer": ("import-nccl-tests",),
    "harness.claims.baselines": ("baselines",),
    "harness.gate.cli": ("gate", "compare"),
    "harness.gate.canary": ("canary",),
    "harness.gatepower.power": ("gate-power",),
    "harness.run.rounds": ("worker",),
    "harness.history.campaign": ("history",),
    "harness.tables.export": ("export",),
}


def _modules_for(argv: Sequence[str]) -> tuple[str, ...]:
    """The command modules a command line needs: the one that owns its command, or all of them
    (help, a typo, no command) so argparse can list every choice."""
    command = next((a for a in argv if not a.startswith("-")), None)
    owner = [m for m, commands in COMMAND_MODULES.items() if command in commands]
    return tuple(owner) if owner else tuple(COMMAND_MODULES)


def main(argv: Optional[Sequence[str]] = None) -> int:
    # Every byte a command prints is escaped for the terminal (harness.core.streams), and a
    # SIGTERM or SIGHUP unwinds like Ctrl-C, so temporaries and claims are removed on the way out.
    with escaped_streams(), stop_signals_unwind():
        return _main(list(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]) -> int:
    args = build_parser(_modules_for(argv)).parse_args(argv)
    try:
        return args.func(args)
    except (CannotRun, UnknownName) as exc:
        print_error(args.command, exc)
        return EXIT_USAGE
    except BrokenPipeError:  # `critpath list | head`: the reader left; nothing to report
        # Before OSError, which it is. Point stdout at /dev/null so the interpreter's last flush
        # does not fail on the closed pipe again and print a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:  # a full disk or an unwritable --out: what was written stays valid
        print_error(args.command, os_error_text(exc))
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        signum = interrupt_signal(exc)
        print(f"critpath: interrupted by {signum.name}; records written so far are kept",
              file=sys.stderr)
        return 128 + signum
