"""Graphs shared by the tests: hypothesis strategies for small random DAGs, and hand-sized ones."""

from __future__ import annotations

from hypothesis import strategies as st

from remat import Graph


@st.composite
def dags(draw, min_nodes: int = 1, max_nodes: int = 7, max_mem: int = 5, max_cost: int = 5,
         single_sink: bool = False) -> Graph:
    """A random DAG: node i may read any earlier node; sizes and costs are small integers."""
    n = draw(st.integers(min_nodes, max_nodes))
    g = Graph(name="random")
    for i in range(n):
        inputs = [f"v{j}" for j in range(i) if draw(st.booleans())] if i else []
        if single_sink and i == n - 1 and i:
            inputs = sorted(set(inputs) | {f"v{j}" for j in range(i)}, key=lambda s: int(s[1:]))
        g.add_node(f"v{i}", draw(st.integers(1, max_mem)), draw(st.integers(1, max_cost)), inputs)
    return g


def residual(blocks: int) -> Graph:
    """s -> [a_i -> c_i -> b_i = c_i + b_{i-1}] * blocks -> loss, unit mem and cost (b_0 = s)."""
    g = Graph(name="residual")
    g.add_node("s", 1, 1)
    prev = "s"
    for i in range(1, blocks + 1):
        g.add_node(f"a{i}", 1, 1, [prev])
        g.add_node(f"c{i}", 1, 1, [f"a{i}"])
        g.add_node(f"b{i}", 1, 1, [f"c{i}", prev])
        prev = f"b{i}"
    g.add_node("loss", 1, 1, [prev])
    return g


def skip_block() -> Graph:
    """x -> f1 -> f2 -> y = f2 + x -> z, sizes 2 (z: 1), unit costs: one residual block."""
    g = Graph(name="residual")
    g.add_node("x", 2, 1)
    g.add_node("f1", 2, 1, ["x"])
    g.add_node("f2", 2, 1, ["f1"])
    g.add_node("y", 2, 1, ["f2", "x"])
    g.add_node("z", 1, 1, ["y"])
    return g


def figure1() -> Graph:
    """Seed 004 Figure 1: <A,B,C,D,E> needs 4 units, <A,B,C,D,A,E> needs 3."""
    g = Graph(name="figure1")
    g.add_node("A", 1, 1)
    g.add_node("B", 1, 1, ["A"])
    g.add_node("C", 1, 1, ["B"])
    g.add_node("D", 1, 1, ["B", "C"])
    g.add_node("E", 1, 1, ["A", "D"])
    return g


def branches(width: int = 3, length: int = 14) -> Graph:
    """``width`` parallel chains of ``length`` from one source to a join: (length + 1) ** width
    lower sets (3378 for 3 x 14, under dp-exact's cap), a dp-exact sweep of seconds without a
    time limit and a floor search (a bisection of sweeps) of many."""
    g = Graph(name="branches")
    g.add_node("s", 4, 1)
    for b in range(width):
        prev = "s"
        for i in range(length):
            g.add_node(f"b{b}_{i}", 2 + (i + b) % 3, 1 + (i * b) % 4, [prev])
            prev = f"b{b}_{i}"
    g.add_node("join", 4, 1, [f"b{b}_{length - 1}" for b in range(width)])
    g.add_node("loss", 1, 1, ["join"])
    return g
