"""Graph building, JSON round trip, and every validation error naming its problem."""

import json

import pytest

from remat import Graph, GraphError


def diamond() -> Graph:
    g = Graph(name="diamond")
    g.add_node("a", 1, 1)
    g.add_node("b", 2, 1, ["a"])
    g.add_node("c", 3, 1, ["a"])
    g.add_node("d", 4, 1, ["b", "c"], op="add")
    return g


def test_json_round_trip_keeps_every_field(tmp_path):
    g = diamond()
    g.add_node("e", 5, 2, ["d"], op="relu", bwd_uses=["e"], saved_mem=1, grad_mem=4)
    path = tmp_path / "g.json"
    g.save(path)
    h = Graph.from_json(path)
    assert h.to_json() == g.to_json()
    assert h["e"].saved == ("e",)
    assert h["d"].saved == ("b", "c", "d")
    assert Graph.from_json(json.dumps(g.to_json())).to_json() == g.to_json()


def test_nodes_may_come_in_any_order():
    data = {"format": "remat-graph/1", "name": "x", "nodes": [
        {"id": "y", "mem": 1, "cost": 1, "inputs": ["x"]}, {"id": "x", "mem": 1, "cost": 1}]}
    g = Graph.from_json(data)
    assert g.order == ("x", "y")
    assert g.succ["x"] == ("y",)


@pytest.mark.parametrize("nodes, message", [
    ([{"id": "a", "mem": 1, "cost": 1}, {"id": "a", "mem": 1, "cost": 1}], "duplicate node id 'a'"),
    ([{"id": "a", "mem": 1, "cost": 1, "inputs": ["zz"]}], "unknown input 'zz'"),
    ([{"id": "a", "mem": -1, "cost": 1}], "node 'a': mem must be >= 0"),
    ([{"id": "a", "mem": 1, "cost": "fast"}], "node 'a': cost must be a finite number"),
    ([{"id": "a", "mem": True, "cost": 1}], "node 'a': mem must be a finite number"),
    ([{"id": "a", "mem": 1}], "node 'a' is missing cost"),
    ([], "is empty"),
    ([{"id": "a", "mem": 1, "cost": 1, "saved_mem": 2}], "saved_mem 2 exceeds mem 1"),
    ([{"id": "a", "mem": 1, "cost": 1, "grad_mem": -2}], "node 'a': grad_mem must be >= 0"),
    ([{"id": "a", "mem": 1, "cost": 1, "inputs": ["b"]}, {"id": "b", "mem": 1, "cost": 1, "inputs": ["a"]}],
     "cycle through node"),
])
def test_rejected_graphs_name_the_problem(nodes, message):
    with pytest.raises(GraphError, match=message):
        Graph.from_json({"format": "remat-graph/1", "name": "bad", "nodes": nodes})


def test_wrong_format_and_missing_file():
    with pytest.raises(GraphError, match="expected format"):
        Graph.from_json({"format": "other", "nodes": []})
    with pytest.raises(GraphError, match="does not exist"):
        Graph.from_json("/nonexistent/graph.json")


def test_bwd_uses_must_be_inputs_or_self():
    g = Graph()
    g.add_node("a", 1, 1)
    with pytest.raises(GraphError, match="neither its inputs nor itself"):
        g.add_node("b", 1, 1, ["a"], bwd_uses=["zz"])


def test_topological_order_and_queries():
    g = diamond()
    assert g.order == ("a", "b", "c", "d")
    assert g.sinks == ("d",)
    assert g.mem(["b", "c"]) == 5 and g.total_cost() == 4


def test_with_costs_prices_a_copy_and_keeps_the_rest():
    g = Graph.chain(3, mem=2, cost=5)
    g.pinned = frozenset({g.order[0]})  # an attribute capture sets
    priced = g.with_costs({g.order[1]: 0.5})
    assert [priced[v].cost for v in priced.order] == [5, 0.5, 5]
    assert [g[v].cost for v in g.order] == [5, 5, 5]
    assert [(priced[v].mem, priced[v].inputs) for v in priced.order] == [(g[v].mem, g[v].inputs) for v in g.order]
    assert priced.pinned == g.pinned
    with pytest.raises(GraphError, match="cost must be >= 0"):
        g.with_costs({g.order[0]: -1.0})
