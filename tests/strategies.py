"""Hypothesis strategies shared by the tests: small random DAGs with integer sizes."""

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
