"""asv history for real: ``critpath history`` over two real commits of a copy of this project,
a tiny case subset of every default family, then the offline view drawn from asv's own results.

The second commit bumps the rpc family's definition version, so the same run shows the reset
rule: rpc's history restarts, every other family's carries on. The first invocation is stopped
with a real SIGTERM while it measures the second commit, and must keep the first."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core import registry
from harness.cli import main
from harness.core.figures import supports
from harness.core.store import load_records
from harness.history.view import load_history, plot_name, resets
from test_html_browser import BROWSER, render

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.integration, pytest.mark.slow]

# One quick case of every default family, and one that fails on purpose.
CASES = {
    "allreduce": "allreduce/algo=native,backend=gloo,dtype=float32,size_bytes=8,world=2",
    "sendrecv": "sendrecv/backend=gloo,size_bytes=4096,world=2",
    "pipeline": "pipeline/act_bytes=65536,backend=gloo,compute=sleep,compute_us=3000,microbatches=8,rtt_us=400,"
                "scenario=a0_pipeline_barrier,schedule=sync,world=4",
    "moe_a2a": "moe_a2a/backend=gloo,bytes_per_elem=4,compute=sleep,expert_bytes=262144,experts_per_rank=8,hidden=256,"
               "mitigation=none,ns_per_token=20000.0,seed=0,skew=0.0,tokens=256,top_k=2,workload=uniform,world=4",
    "rpc": "rpc/codec=raw,mode=pingpong,payload_bytes=64,transport=tcp_nodelay",
    "kv_alloc": "kv_alloc/allocator=caching,block_tokens=16,budget_gb=80,model=7b,policy=reserve_max,requests=300,"
                "speedup=4.0,trace=azure_conv",
}
FAILING = "selftest/fault_rank=0,mode=raise,world=1"
HEADLINE = {"allreduce": ["busbw_gbps"], "sendrecv": ["busbw_gbps"],
            "pipeline": ["microbatches_per_s", "bubble_idle_share"], "moe_a2a": ["tokens_per_s", "dropped_fraction"],
            "rpc": ["msgs_per_s"], "kv_alloc": ["fragmentation_mean", "decode_ooms"]}


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@localhost"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _copy_project(dest: Path) -> None:
    """This checkout's tracked files as they are on disk (edits included), as a new repository."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True, capture_output=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "start")


def _commit(repo: Path, message: str, edit=None) -> str:
    if edit:
        edit(repo)
    else:
        (repo / "CHANGES.txt").write_text(message + "\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    time.sleep(1.1)  # asv orders commits by their date, in seconds
    return _git(repo, "rev-parse", "HEAD")


def _bump_rpc(repo: Path) -> None:
    path = repo / "harness" / "families" / "rpc.py"
    text = path.read_text()
    v = registry.get("rpc").version
    assert text.count(f"    version={v},") == 1
    path.write_text(text.replace(f"    version={v},", f"    version={v + 1},"))


def _history(repo: Path, out: Path, results: Path) -> list[str]:
    args = [sys.executable, "-m", "harness", "history", "--repo", str(repo), "--out", str(out), "--results",
            str(results), "--machine", "ci-history", "--timeout", "120"]
    for case_id in (*CASES.values(), FAILING):
        args += ["--case", case_id]
    return args


def _values(results: Path, sha: str) -> dict:
    """benchmark -> (version, {case: value}) of one commit, as asv filed it."""
    from asv.results import iter_results_for_machine_and_hash

    out = {}
    for result in iter_results_for_machine_and_hash(str(results), "ci-history", sha):
        for key in result.get_all_result_keys():
            params = result.get_result_params(key)
            values = result.get_result_value(key, params)
            out[key] = (result.benchmark_version[key], {p.strip("'\""): v for p, v in zip(params[0], values)})
    return out


@pytest.mark.timeout(1200)
def test_history_of_two_real_commits_is_recorded_interrupted_resumed_and_drawn(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _copy_project(repo)
    start = _git(repo, "rev-parse", "HEAD")
    first = _commit(repo, "a change that touches no family")
    second = _commit(repo, "rpc: a new definition", _bump_rpc)
    out, results = tmp_path / "history", tmp_path / "results"
    argv = _history(repo, out, results) + [f"{start}..{second}"]

    # A real SIGTERM while the second commit is being measured.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    while not (out / "runs" / second).exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    text = proc.communicate(timeout=120)[0]
    assert proc.returncode == 128 + signal.SIGTERM, text[-3000:]
    assert "interrupted by SIGTERM" in text
    assert _values(results, first), "the commit filed before the interruption was lost"
    assert not _values(results, second)
    assert json.loads((out / "runs" / second / "run.json").read_text())["state"] == "interrupted"

    # The same command carries on: the first commit is skipped, the second measured in full.
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert f"{first[:10]}" in done.stdout and "skipped, asv holds it already" in done.stdout
    assert list((out / "runs").glob(f"{second}.interrupted-*")), "the cut-short run was not kept"

    rpc_v = registry.get("rpc").version
    drawable = set()  # (family, figure) with a number at some commit: each gets a history plot
    for sha, rpc_version in ((first, f"rpc-v{rpc_v}"), (second, f"rpc-v{rpc_v + 1}")):
        filed = _values(results, sha)
        samples = {r.case_id: len(r.samples_ns) for r in load_records(out / "runs" / sha)}
        assert not supports("p99_us", samples[CASES["pipeline"]]), "no case here shows the n/a p99"
        for family, case_id in CASES.items():
            cls = f"bench_families.{''.join(w.title() for w in family.split('_'))}"
            for figure in ["p50_us", "p99_us", *HEADLINE[family]]:
                version, values = filed[f"{cls}.track_{figure}"]
                value = values[case_id]
                # A percentile is a number only where the samples support it, else asv's n/a (NaN).
                if supports(figure, samples[case_id]):
                    assert isinstance(value, float) and math.isfinite(value), (sha[:8], family, figure, value)
                    drawable.add((family, figure))
                else:
                    assert isinstance(value, float) and math.isnan(value), (sha[:8], family, figure, value)
                assert version == (rpc_version if family == "rpc" else f"{family}-v{registry.get(family).version}")
        # The failed case is asv's "failed" (None), and the reason is in asv's output.
        assert filed["bench_families.Selftest.track_p50_us"][1][FAILING] is None
        log = (out / "logs" / f"{sha}.log").read_text()
        assert f"critpath: {FAILING}: failed: " in log and "injected failure on rank 0" in log

    # Drawn from those results: rpc restarts at the second commit, allreduce carries on.
    series = load_history(results)
    rpc = [s for s in series if s.benchmark == "bench_families.Rpc.track_p50_us"]
    assert sorted((s.version, [p.commit for p in s.points]) for s in rpc) == [(f"rpc-v{rpc_v}", [first]),
                                                                             (f"rpc-v{rpc_v + 1}", [second])]
    assert resets(rpc) == {f"rpc-v{rpc_v + 1}": second}  # where the plot marks "history reset"
    allreduce = [s for s in series if s.benchmark == "bench_families.Allreduce.track_busbw_gbps"]
    assert [[p.commit for p in s.points] for s in allreduce] == [[first, second]]
    assert allreduce[0].unit == "GB/s"
    kv = next(s for s in series if s.benchmark == "bench_families.KvAlloc.track_fragmentation_mean")
    assert kv.unit == "fraction (simulated)"

    report = tmp_path / "report"
    assert main(["report", "--asv-results", str(results), "--out", str(report)]) == 0
    md = (report / "report.md").read_text()
    assert f"| rpc-v{rpc_v} |" in md and f"| rpc-v{rpc_v + 1} |" in md
    plots = {p.name for p in (report / "plots").glob("*.png")}
    for family in CASES:
        cls = "".join(w.title() for w in family.split("_"))
        for figure in ["p50_us", "p99_us", *HEADLINE[family]]:
            name = plot_name("ci-history", f"bench_families.{cls}.track_{figure}") + ".png"
            assert (name in plots) == ((family, figure) in drawable), name
    html = (report / "report.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "the page loads something from a network"
    if BROWSER is not None:
        dom, probe = render(report / "report.html", tmp_path)
        assert f"<h1>critpath history: {results}</h1>" in dom
        assert probe == f"images={len(plots)} broken=0"
