"""Multi-node through torchrun: two agents on this machine act as two nodes (separate node
ranks, one c10d rendezvous on loopback), each starting 2 ranks; rank 0 writes one run directory
with the node layout in its fingerprint."""
import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import free_port
from harness.collectives import pairs
from harness.collectives.layout import NodeLayout
from harness.run.fingerprint import node_layout
from harness.core.store import load_records

pytestmark = pytest.mark.slow

AGENT_TIMEOUT_S = 90
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
               "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NODEID", "TORCHELASTIC_RUN_ID")


def _agents(tmp_path, run_args, nodes=2, nproc=2, env_of=lambda node: {}):
    """``nodes`` torchrun agents of ``nproc`` ranks on loopback, one c10d rendezvous; agent i gets
    ``env_of(i)`` on top of the environment. Which GROUP_RANK an agent gets is the rendezvous's
    choice, not its --node-rank."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env["OMP_NUM_THREADS"] = "1"
    procs = []
    for node_rank in range(nodes):
        log = open(tmp_path / f"agent{node_rank}.log", "w")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node", str(nproc),
               "--node-rank", str(node_rank), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
               "--rdzv-id", f"critpath-test-{port}", "-m", "harness", "run", *run_args]
        procs.append((subprocess.Popen(cmd, env={**env, **env_of(node_rank)}, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True), log))
    codes = []
    try:
        for proc, _ in procs:
            codes.append(proc.wait(timeout=AGENT_TIMEOUT_S))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the agent and the ranks it started
                proc.wait()
            log.close()
    logs = "\n".join((tmp_path / f"agent{r}.log").read_text()[-3000:] for r in range(nodes))
    return codes, logs


@pytest.mark.integration
def test_two_torchrun_agents_merge_into_one_run(tmp_path):
    out = tmp_path / "run"
    codes, logs = _agents(tmp_path, ["--families", "allreduce,allreduce_tiers,p2p_tiers", "--sizes", "8,4K",
                                     "--iters", "20", "--warmup", "2", "--timeout", "60", "--out", str(out)])
    assert codes == [0, 0], logs

    layout = json.loads((out / "fingerprint.json").read_text())["layout"]
    assert layout["nodes"] == 2
    assert layout["ranks_per_node"] == [2, 2]
    assert layout["node_of_rank"] == [0, 0, 1, 1]
    assert layout["local_ranks"] == [0, 1, 0, 1]
    assert layout["node_major"] and layout["uniform"]
    assert [r["node_rank"] for r in layout["ranks"]] == [0, 0, 1, 1]
    assert len(layout["hosts"]) == 2 and all(layout["hosts"])

    records = load_records(out)
    assert len(records) == 6 + 6 + 6  # allreduce; intra, inter and pairs at 2 sizes for each tier family
    assert all(r.ok and r.world == 4 and r.reduction == "max_over_ranks" for r in records), logs
    by_family = {}
    for r in records:
        by_family.setdefault(r.family, []).append(r)
    for r in by_family["allreduce"]:
        assert len(r.extra["rank_reports"]) == 4  # every rank's report reached rank 0
        assert r.check.checked == 4 * (r.params["size_bytes"] // 4)  # every rank checked its buffer
    keys = layout["node_keys"]
    for r in by_family["allreduce_tiers"]:
        if r.params["tier"] == "pairs":  # two nodes: one round, one group of both nodes' ranks
            measured = pairs.measurements(r.extra["rank_reports"])
            assert [(m.group, m.nodes) for m in measured] == [((0, 1, 2, 3), tuple(keys))]
            assert r.metrics["pairs"] == 1.0 and r.metrics["rounds"] == 1.0
            continue
        groups = sorted({tuple(rep["members"]) for rep in r.extra["rank_reports"]})
        assert groups == ([(0, 1), (2, 3)] if r.params["tier"] == "intra" else [(0, 2), (1, 3)])
        assert r.metrics["group_size"] == 2.0 and r.metrics["nodes"] == 2.0
    for r in by_family["p2p_tiers"]:
        if r.params["tier"] == "pairs":  # both rails of the one node pair at once, each with its samples
            measured = pairs.measurements(r.extra["rank_reports"])
            assert [(m.group, m.rail, m.nodes) for m in measured] == [((0, 2), 0, tuple(keys)),
                                                                      ((1, 3), 1, tuple(keys))]
            assert all(len(m.samples_ns) == r.plan["iters"] for m in measured)
            assert r.check.checked == 2 * r.params["size_bytes"] // 4
            continue
        pair = r.extra["rank_reports"][0]["pair"]
        assert pair == ([0, 1] if r.params["tier"] == "intra" else [0, 2])
        assert r.check.checked == r.params["size_bytes"] // 4


def test_tiers_on_one_node_fail_with_a_reason(tmp_path):
    import datetime

    import torch
    import torch.distributed as dist

    from harness.families import allreduce_tiers, p2p_tiers
    from harness.core.family import RankContext

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=30))
    try:
        from harness.core.case import Case, CaseIdError

        ctx = RankContext(0, 1, 0, "gloo", torch.device("cpu"), dist.group.WORLD)
        for family, message in ((allreduce_tiers, "tier inter has no group of 2"), (p2p_tiers, "no inter-node pair")):
            params = dict(tier="inter", backend="gloo", size_bytes=64, world=1)
            with pytest.raises(CaseIdError, match="world must be >= 2"):
                family.FAMILY.case(**params)  # one rank holds no tier: refused before anything runs
            # A layout without the tier (here: one node) is only known once the ranks meet.
            with pytest.raises(ValueError, match=message):
                family.setup(ctx, Case(family.FAMILY.name, params))
    finally:
        dist.destroy_process_group()


def test_tier_groups_and_layout():
    layout = NodeLayout((0, 0, 0, 1, 1, 1))
    assert layout.tier_groups("intra") == [[0, 1, 2], [3, 4, 5]]
    assert layout.tier_groups("inter") == [[0, 3], [1, 4], [2, 5]]
    uneven = NodeLayout((0, 0, 1))
    assert uneven.tier_groups("inter") == [[0, 2], [1]]
    with pytest.raises(ValueError):
        layout.tier_groups("rack")
    ids = [{"rank": r, "local_rank": r % 2, "host": "h", "node": f"h#{r // 2}"} for r in range(4)]
    ids[1], ids[2] = dict(ids[1], node="h#1"), dict(ids[2], node="h#0")  # ranks not node-major
    got = node_layout(ids)
    assert got["nodes"] == 2 and got["node_of_rank"] == [0, 1, 0, 1] and not got["node_major"]
