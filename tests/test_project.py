"""Project-level promises: the README's commands are what CI runs, and asv can load the suite."""
import re
import subprocess
import sys

from conftest import ROOT


def _readme_commands():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_opens_with_run_and_test_commands():
    run_cmd, test_cmd = _readme_commands()[:2]
    assert run_cmd.endswith("critpath run")
    assert "pytest" in test_cmd
    # Never a bare torch requirement: on a CPU box that pulls a multi-GB CUDA build.
    assert "torch==" in run_cmd and "torch==" in test_cmd


def test_ci_runs_the_readme_test_command():
    test_cmd = _readme_commands()[1]
    assert test_cmd in (ROOT / ".ci" / "run").read_text()


def test_ci_runs_the_slow_tier_that_the_readme_command_leaves_out():
    import tomllib

    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "-m 'not slow and not alone'" in addopts
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^\.venv/bin/python -m pytest -m slow$", ci, re.MULTILINE)
    assert re.search(r"^\.venv/bin/python -m pytest -n 0 -m alone$", ci, re.MULTILINE)
    assert ci.index("pytest -m slow") > ci.index(_readme_commands()[1])
    assert ci.index("pytest -n 0 -m alone") > ci.index("pytest -m slow")


def test_asv_check_passes():
    proc = subprocess.run(
        [sys.executable, "-m", "asv", "check", "-E", "existing:same"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No problems found" in proc.stdout


def _subcommands(parser) -> set:
    import argparse

    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(action.choices)


def test_each_command_module_registers_exactly_the_commands_the_cli_table_names():
    from harness import cli

    assert _subcommands(cli.build_parser(())) == set()  # every command is a module's
    for module, commands in cli.COMMAND_MODULES.items():
        assert _subcommands(cli.build_parser((module,))) == set(commands), module


def test_a_command_imports_only_its_own_module():
    # `critpath run` and the gate's worker must not pay for the report's matplotlib or the
    # gate's scipy: each is most of a second per process on a small machine.
    code = ("import sys; from harness import cli; cli.build_parser(cli._modules_for(['run', '--help'])); "
            "print(sorted(m for m in ('matplotlib', 'scipy', 'torch', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
    from harness import cli

    assert cli._modules_for(["gate", "--base", "main"]) == ("harness.gate.cli",)
    assert cli._modules_for(["--help"]) == tuple(cli.COMMAND_MODULES)
    assert cli._modules_for(["no-such-command"]) == tuple(cli.COMMAND_MODULES)


def test_commands_that_measure_nothing_import_no_torch_scipy_or_matplotlib():
    # Start-up of these is a benchmark (docs/start-up in README: "Start-up"); this keeps the
    # imports that dominated it (torch ~1.5 s, scipy.stats ~1.2 s, pyplot ~0.7 s here) out of them.
    code = ("import sys, contextlib, io; from harness import cli; from harness.core import registry\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try: cli.main(['--help'])\n"
            "    except SystemExit: pass\n"
            "    cli.main(['list'])\n"
            "[f.table_columns() for f in registry.FAMILIES.values()]\n"
            "print(sorted(m for m in ('matplotlib', 'scipy.stats', 'scipy.optimize', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr


def test_domain_packages_never_import_from_families():
    # The arrow runs from a family to its domain (moe/, pipeline/, gate/ ...), never back.
    offenders = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        rel = path.relative_to(ROOT / "harness")
        if rel.parts[0] in ("families",) or rel.name == "registry.py":
            continue
        if re.search(r"^\s*(from harness\.families|import harness\.families|from harness import families)",
                     path.read_text(), re.MULTILINE):
            offenders.append(str(rel))
    assert offenders == []


def test_the_fingerprint_names_every_runtime_library_with_its_installed_version():
    """The report's "libraries" row comes from pyproject's own dependency list, not a copy."""
    import importlib.metadata

    import tomllib

    from harness.run.fingerprint import library_versions

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.match(r"[A-Za-z0-9._-]+", d).group(0) for d in deps} - {"torch"}
    found = library_versions()
    assert set(found) == names
    assert found["numpy"] == importlib.metadata.version("numpy") and "pytest" not in found
