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


@pytest.mark.parametrize("fingerprint, says", [
    (_fingerprint(TWO_NODES, node_of_rank=[0, 0]),
     "field layout.ranks_per_node.0: 1 ranks, but field layout.node_of_rank puts 2 on node 0"),
    (_fingerprint(ONE_NODE, local_ranks=[0, 0]),
     "field layout.local_ranks.1: local rank 0 on node 0, as rank 0's"),
    (_fingerprint(ONE_NODE, local_ranks=[1, 1]), "field layout.local_ranks.1: local rank 1 on node 0, as rank 0's"),
    ({"world": 2, "layout": {"nodes": 2, "node_of_rank": [0, 2]}},
     "field layout.node_of_rank.1: node 2, but the layout has 2 nodes (0..1)"),
    ({"world": 2, "layout": {"nodes": 2, "node_of_rank": [1, 1], "local_ranks": [0, 1]}},
     "field layout.node_of_rank: no rank on node 0, but each of the 2 nodes holds a rank or more"),
    ({"world": 3, "layout": {"nodes": 2, "ranks_per_node": 2, "node_of_rank": [0, 0, 0]}},
     "field layout.node_of_rank: 3 ranks on node 0, but field layout.ranks_per_node says a node holds 2 at most"),
    ({"world": 3, "layout": {"node_of_rank": [0, 0, 1], "local_ranks": [0, 2, 0]}},
     "field layout.local_ranks.1: local rank 2, but node 0 holds 2 ranks (local ranks 0..1)"),
    ({"world": 2, "layout": {"nodes": 1, "local_ranks": [0, 0]}},
     "field layout.local_ranks.1: local rank 0 on node 0, as rank 0's"),
    # local_ranks without node_of_rank still counts the ranks of each node
    ({"world": 4, "layout": {"nodes": 2, "local_ranks": [0, 1, 2, 3]}},
     "field layout.local_ranks: 1 ranks of local rank 0, but the layout has 2 nodes"),
    ({"world": 4, "layout": {"nodes": 2, "ranks_per_node": [2, 2], "local_ranks": [0, 1, 2, 3]}},
     "field layout.local_ranks: 1 ranks of local rank 0, but the layout has 2 nodes"),
    ({"world": 4, "layout": {"local_ranks": [0, 1, 1, 2]}},
     "field layout.local_ranks.2: local rank 1 on 2 ranks, but local rank 0 on 1"),
    ({"world": 4, "layout": {"nodes": 3, "local_ranks": [0, 2, 0, 0]}},
     "field layout.local_ranks.1: local rank 2 on 1 ranks, but local rank 1 on 0"),
    ({"world": 4, "layout": {"nodes": 2, "ranks_per_node": [2, 2], "local_ranks": [0, 1, 2, 0]}},
     "field layout.local_ranks: numbers nodes of [3, 1] ranks, but field layout.ranks_per_node says [2, 2]"),
    # uniform and node_major are derived from the lists
    (_fingerprint(TWO_NODES, uniform=False), "field layout.uniform: False, but field layout.ranks_per_node is [1, 1]"),
    (_fingerprint(TWO_NODES, node_major=False),
     "field layout.node_major: False, but field layout.node_of_rank is [0, 1]"),
], ids=["node-without-ranks", "local-twice", "local-twice-not-0", "node-index-past-nodes", "first-node-empty",
        "int-too-many-on-a-node", "local-past-its-node", "one-node-no-node_of_rank", "local-alone-one-node-of-2",
        "local-alone-with-list", "local-alone-2-of-1", "local-alone-gap", "local-alone-other-sizes",
        "uniform-disagrees", "node_major-disagrees"])
def test_a_layout_whose_ranks_are_not_its_nodes_is_refused_naming_the_field(fingerprint, says):
    """Each node holds as many ranks of node_of_rank as ranks_per_node says, one at least, and numbers
    them 0..n-1 in local_ranks, once each."""
    with pytest.raises(fingerprintfile.FingerprintError) as refused:
        fingerprintfile.check(fingerprint)
    assert str(refused.value).startswith(says), refused.value


def test_a_layout_with_ranks_out_of_node_order_is_read():
    """Ranks need not be node-major (node_major false): each node's local ranks are its own; and a
    node of the integer form holds up to that many."""
    fingerprintfile.check({"world": 4, "layout": {"nodes": 2, "ranks_per_node": 3, "node_of_rank": [0, 0, 0, 1]}})
    fingerprintfile.check({"world": 4, "layout": {
        "nodes": 2, "node_keys": ["a", "b"], "hosts": ["a", "b"], "ranks_per_node": [2, 2],
        "node_of_rank": [0, 1, 0, 1], "local_ranks": [1, 0, 0, 1], "uniform": True, "node_major": False}})


@pytest.mark.parametrize("layout, says", [
    ({**TWO_NODES, "node_of_rank": [0, 0]}, "field layout.ranks_per_node.0: 1 ranks, but field layout.node_of_rank "
                                            "puts 2 on node 0"),
    ({**ONE_NODE, "local_ranks": [0, 0]}, "field layout.local_ranks.1: local rank 0 on node 0, as rank 0's"),
], ids=["node-without-ranks", "local-twice"])
def test_diagnose_refuses_a_node_its_layout_puts_no_rank_on(tmp_path, capsys, layout, says):
    """Not "2 healthy": vm2 holds no rank of node_of_rank, so no record speaks of it."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    fp = json.loads((run / "fingerprint.json").read_text())
    fp["layout"] = layout
    (run / "fingerprint.json").write_text(json.dumps(fp))
    assert main(["diagnose", str(run)]) == 2
    err = capsys.readouterr().err
    assert says in err and "healthy" not in err, err
