"""A fingerprint's layout counts its nodes and ranks once: each list of one entry a node (node_keys,
hosts, ranks_per_node) has ``nodes`` entries, each of one entry a rank (node_of_rank, local_ranks)
``world``, and the integer ranks_per_node (the most a node holds) fits the world; diagnose never
loses a node its layout lists."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.cli import main
from harness.core import fingerprintfile
from harness.diagnose.observe import DiagnoseInputError, run_nodes

RUN = Path(__file__).parent / "fixtures" / "run_mixed"  # a world-2 run
TWO_NODES = {"nodes": 2, "node_keys": ["vm", "vm2"], "ranks_per_node": [1, 1], "node_of_rank": [0, 1],
             "local_ranks": [0, 0], "hosts": ["vm", "vm2"], "uniform": True, "node_major": True}
ONE_NODE = {"nodes": 1, "node_keys": ["vm"], "ranks_per_node": [2], "node_of_rank": [0, 0], "local_ranks": [0, 1],
            "hosts": ["vm"], "uniform": True, "node_major": True}


def _fingerprint(layout: dict, **changes) -> dict:
    return {"world": 2, "layout": {**layout, **changes}}


def test_the_layouts_critpath_writes_are_read():
    fingerprintfile.check(_fingerprint(TWO_NODES))
    fingerprintfile.check(_fingerprint(ONE_NODE))
    fingerprintfile.check({"world": 3, "layout": {"nodes": 2, "ranks_per_node": 2}})  # an import's: 2 + 1 ranks


@pytest.mark.parametrize("layout, changes, says", [
    (TWO_NODES, {"hosts": ["vm"]}, "field layout.hosts: 1 nodes, but field layout.nodes says 2"),
    (ONE_NODE, {"hosts": ["a", "b", "c"]}, "field layout.hosts: 3 nodes, but field layout.nodes says 1"),
    (ONE_NODE, {"node_of_rank": [0] * 5}, "field layout.node_of_rank: 5 ranks, but field world says 2"),
    (ONE_NODE, {"local_ranks": [0, 1, 0, 0, 0]}, "field layout.local_ranks: 5 ranks, but field world says 2"),
    (ONE_NODE, {"ranks_per_node": 5, "local_ranks": [0, 0], "node_of_rank": [0, 0]},
     "field layout.ranks_per_node: 5 ranks on a node, but field world is 2 ranks"),
    ({"nodes": 2}, {"ranks_per_node": 2}, "field layout.ranks_per_node: 2 ranks on a node, but field world is 2 "
                                          "ranks on 2 nodes"),
    ({"nodes": 1}, {"ranks_per_node": 1}, "field layout.ranks_per_node: 1 ranks on a node at most, but 1 nodes"),
    (TWO_NODES, {"node_keys": ["vm", "vm"]}, "field layout.node_keys: 'vm' is given twice"),
], ids=["hosts-short", "hosts-long", "node_of_rank", "local_ranks", "int-too-many", "int-too-many-on-2",
        "int-too-few", "keys-twice"])
def test_a_layout_list_of_the_wrong_length_is_refused_naming_it(layout, changes, says):
    with pytest.raises(fingerprintfile.FingerprintError) as refused:
        fingerprintfile.check(_fingerprint(layout, **changes))
    assert str(refused.value).startswith(says), refused.value


def test_diagnose_refuses_a_run_whose_layout_names_a_host_for_fewer_nodes(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    fp = json.loads((run / "fingerprint.json").read_text())
    fp["layout"] = {**TWO_NODES, "hosts": ["vm"]}
    (run / "fingerprint.json").write_text(json.dumps(fp))
    assert main(["diagnose", str(run)]) == 2
    assert "field layout.hosts: 1 nodes, but field layout.nodes says 2" in capsys.readouterr().err


@pytest.mark.parametrize("changes, says", [
    ({"hosts": ["vm"]}, "field layout.hosts: 1 hosts for the 2 nodes of layout.node_keys"),
    ({"node_keys": ["vm", "vm"]}, "field layout.node_keys: a node key given twice"),
])
def test_diagnose_never_maps_fewer_nodes_than_the_layout_lists(changes, says):
    """However the fingerprint came to it, a node of node_keys left without its host is refused."""
    run = SimpleNamespace(path=Path("r"), fingerprint=_fingerprint(TWO_NODES, **changes))
    with pytest.raises(DiagnoseInputError, match=says):
        run_nodes(run)
    keys, hosts = run_nodes(SimpleNamespace(path=Path("r"), fingerprint=_fingerprint(TWO_NODES)))
    assert keys == ["vm", "vm2"] and hosts == {"vm": "vm", "vm2": "vm2"}
