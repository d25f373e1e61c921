"""The computation graph remat plans on: plain data, no torch.

A node is one forward value (the output of one op). ``mem`` is its size (bytes on captured
graphs, any unit on abstract ones), ``cost`` the time to compute it forward, ``inputs`` the
nodes it reads. Graph inputs and parameters are not nodes: as in seed 000 §2 they are always
in memory and do not count towards the activation budget.

``bwd_uses`` says which forward values the backward step of a node reads (autograd's saved
tensors): any of its inputs and itself. ``None`` means the default of abstract graphs, "inputs
and output" (DESIGN.md, memory model). ``grad_alias`` lists the inputs whose gradient
contribution is the node's own gradient buffer, not a new tensor: PyTorch's backward of add,
cat or clone hands the incoming gradient (or a view of it) straight on, allocating nothing.
``requires_grad=False`` marks values no gradient flows into (a dropout mask, an index): their
backward steps do nothing and their consumers' backward steps make no gradient for them.
``saved_mem`` is the part of ``mem`` that the node's own backward keeps when it lists itself in
``bwd_uses``: an op with several outputs whose backward saves only some of them (batch norm
keeps its mean and inverse std, not its output; max pooling keeps its indices). None means all
of ``mem``. Once the rest of a value has no reader left, only ``saved_mem`` of it stays.
``grad_mem`` is the size of the value's gradient when only some of its outputs are
differentiable (max pooling's indices and batch norm's statistics get none); None means ``mem``.
``module`` is the path of the module whose forward produced the value
(``"model.layers.3.mlp.act_fn"``), where capture knows it: per-block solvers find blocks by it.

JSON format ``remat-graph/1``; validation names the offending node in every message.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from numbers import Real
from pathlib import Path
from typing import Any, Iterable, Mapping

import networkx as nx

from .errors import GraphError

FORMAT = "remat-graph/1"


@dataclass(frozen=True)
class Node:
    id: str
    mem: float
    cost: float
    inputs: tuple[str, ...] = ()
    op: str | None = None
    bwd_uses: tuple[str, ...] | None = None
    grad_alias: tuple[str, ...] = ()
    requires_grad: bool = True
    saved_mem: float | None = None
    grad_mem: float | None = None
    module: str | None = None

    @property
    def grad_size(self) -> float:
        """Size of this value's gradient buffer."""
        return self.mem if self.grad_mem is None else self.grad_mem

    @property
    def self_kept(self) -> float:
        """Memory of this value that must stay for its own backward step alone."""
        return self.mem if self.saved_mem is None else self.saved_mem

    @cached_property
    def saved(self) -> tuple[str, ...]:
        """Forward values the backward step of this node reads (computed once: simulations read it
        at every backward step)."""
        if self.bwd_uses is None:
            return tuple(dict.fromkeys((*self.inputs, self.id)))
        return self.bwd_uses


def _check_number(node_id: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise GraphError(f"node {node_id!r}: {name} must be a finite number, got {value!r}")
    if value < 0:
        raise GraphError(f"node {node_id!r}: {name} must be >= 0, got {value!r}")
    return value


@dataclass
class Graph:
    """A DAG of forward values. Build with ``add_node`` or ``Graph.from_json``.

    Derived views (topological order, successor sets) are computed lazily and dropped on every
    mutation, so a Graph is cheap to query many times while a solver runs.
    """

    name: str = "graph"
    _nodes: dict[str, Node] = field(default_factory=dict)

    # ---- building -------------------------------------------------------------------------
    def add_node(
        self,
        id: str,
        mem: float,
        cost: float,
        inputs: Iterable[str] = (),
        op: str | None = None,
        bwd_uses: Iterable[str] | None = None,
        grad_alias: Iterable[str] = (),
        requires_grad: bool = True,
        saved_mem: float | None = None,
        grad_mem: float | None = None,
        module: str | None = None,
    ) -> Node:
        """Add one value. Inputs may name nodes added later; ``validate`` checks them."""
        if not isinstance(id, str) or not id:
            raise GraphError(f"node id must be a non-empty string, got {id!r}")
        if id in self._nodes:
            raise GraphError(f"duplicate node id {id!r}")
        inputs = tuple(inputs)
        if len(set(inputs)) != len(inputs):
            inputs = tuple(dict.fromkeys(inputs))
        if id in inputs:
            raise GraphError(f"node {id!r} lists itself as an input (a cycle)")
        if bwd_uses is not None:
            bwd_uses = tuple(dict.fromkeys(bwd_uses))
            stray = [u for u in bwd_uses if u != id and u not in inputs]
            if stray:
                raise GraphError(f"node {id!r}: bwd_uses {stray} are neither its inputs nor itself")
        grad_alias = tuple(dict.fromkeys(grad_alias))
        if any(u not in inputs for u in grad_alias):
            raise GraphError(f"node {id!r}: grad_alias {list(grad_alias)} must be among its inputs")
        mem = _check_number(id, "mem", mem)
        if saved_mem is not None:
            saved_mem = _check_number(id, "saved_mem", saved_mem)
            if saved_mem > mem:
                raise GraphError(f"node {id!r}: saved_mem {saved_mem} exceeds mem {mem}: it is the part of "
                                 f"the value its own backward keeps")
        if grad_mem is not None:
            grad_mem = _check_number(id, "grad_mem", grad_mem)
        if module is not None and not isinstance(module, str):
            raise GraphError(f"node {id!r}: module must be a module path string or None, got {module!r}")
        node = Node(id, mem, _check_number(id, "cost", cost), inputs, op,
                    bwd_uses, grad_alias, bool(requires_grad), saved_mem, grad_mem, module)
        self._nodes[id] = node
        self._invalidate()
        return node

    def _invalidate(self) -> None:
        # floors: remat.judge; executed: solvers.selective
        for key in ("order", "succ", "index", "_validated", "_remat_floors", "_remat_executed"):
            self.__dict__.pop(key, None)

    # ---- access ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def __getitem__(self, node_id: str) -> Node:
        return self._nodes[node_id]

    def __iter__(self):
        return iter(self.order)

    @property
    def nodes(self) -> Mapping[str, Node]:
        return self._nodes

    def mem(self, ids: Iterable[str]) -> float:
        """M(S): total memory of a set of nodes."""
        return sum(self._nodes[v].mem for v in ids)

    def cost(self, ids: Iterable[str]) -> float:
        """T(S): total forward cost of a set of nodes."""
        return sum(self._nodes[v].cost for v in ids)

    @cached_property
    def _validated(self) -> bool:
        self.validate()
        return True

    @cached_property
    def order(self) -> tuple[str, ...]:
        """A topological order (stable: ties broken by insertion order)."""
        self._validated
        return tuple(nx.lexicographical_topological_sort(self.to_networkx(), key=self.index_of))

    @cached_property
    def index(self) -> dict[str, int]:
        """Insertion index of each node, the tie-breaker everywhere an order is chosen."""
        return {v: i for i, v in enumerate(self._nodes)}

    def index_of(self, node_id: str) -> int:
        return self.index[node_id]

    @cached_property
    def succ(self) -> dict[str, tuple[str, ...]]:
        """Consumers of each node, in topological order."""
        out: dict[str, list[str]] = {v: [] for v in self._nodes}
        for v in self.order:
            for u in self._nodes[v].inputs:
                out[u].append(v)
        return {v: tuple(ws) for v, ws in out.items()}

    def pred(self, node_id: str) -> tuple[str, ...]:
        return self._nodes[node_id].inputs

    @property
    def sinks(self) -> tuple[str, ...]:
        return tuple(v for v in self.order if not self.succ[v])

    def total_mem(self) -> float:
        return self.mem(self._nodes)

    def total_cost(self) -> float:
        return self.cost(self._nodes)

    def with_costs(self, costs: Mapping[str, float]) -> "Graph":
        """A copy whose nodes named in ``costs`` cost that instead; everything else (memory, edges,
        attributes capture sets such as ``pinned``) as it is: one graph priced another way."""
        out = copy.copy(self)
        out._nodes = {v: dataclasses.replace(n, cost=_check_number(v, "cost", costs[v])) if v in costs else n
                      for v, n in self._nodes.items()}
        out._invalidate()
        return out

    def to_networkx(self) -> nx.DiGraph:
        g = nx.DiGraph()
        g.add_nodes_from(self._nodes)
        g.add_edges_from((u, v) for v, n in self._nodes.items() for u in n.inputs)
        return g

    # ---- validation -----------------------------------------------------------------------
    def validate(self) -> None:
        """Raise GraphError for an empty graph, an unknown input or a cycle."""
        if not self._nodes:
            raise GraphError(f"graph {self.name!r} is empty: add at least one node")
        for v, n in self._nodes.items():
            for u in n.inputs:
                if u not in self._nodes:
                    raise GraphError(f"node {v!r} has unknown input {u!r}: add that node or drop the edge")
        g = self.to_networkx()
        if nx.is_directed_acyclic_graph(g):  # linear; find_cycle alone is quadratic in practice
            return
        cycle = nx.find_cycle(g)
        path = " -> ".join([e[0] for e in cycle] + [cycle[0][0]])
        raise GraphError(f"graph has a cycle through node {cycle[0][0]!r}: {path}")

    # ---- JSON -----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        nodes = []
        for n in self._nodes.values():
            d: dict[str, Any] = {"id": n.id, "mem": n.mem, "cost": n.cost, "inputs": list(n.inputs)}
            if n.op is not None:
                d["op"] = n.op
            if n.bwd_uses is not None:
                d["bwd_uses"] = list(n.bwd_uses)
            if n.grad_alias:
                d["grad_alias"] = list(n.grad_alias)
            if not n.requires_grad:
                d["requires_grad"] = False
            if n.saved_mem is not None:
                d["saved_mem"] = n.saved_mem
            if n.grad_mem is not None:
                d["grad_mem"] = n.grad_mem
            if n.module is not None:
                d["module"] = n.module
            nodes.append(d)
        return {"format": FORMAT, "name": self.name, "nodes": nodes}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))

    @classmethod
    def from_json(cls, source: str | Path | Mapping[str, Any]) -> "Graph":
        """Load from a dict, a JSON string, or a path to a JSON file."""
        if isinstance(source, Mapping):
            data = source
        else:
            text = str(source)
            if not text.lstrip().startswith("{"):
                path = Path(text)
                if not path.is_file():
                    problem = "is a folder" if path.is_dir() else "does not exist"
                    raise GraphError(f"graph file {text!r} {problem}: give the path of a {FORMAT} JSON file "
                                     f"(Graph.save writes one)")
                text = path.read_text()
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise GraphError(f"graph JSON is malformed: {e}: give a {FORMAT} JSON file "
                                 f"(Graph.save writes one)") from None
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            got = data.get("format") if isinstance(data, Mapping) else f"a JSON {type(data).__name__}"
            raise GraphError(f"expected format {FORMAT!r}, got {got!r}: a graph file is an object "
                             f"{{\"format\": \"{FORMAT}\", \"nodes\": [...]}} (Graph.save writes one)")
        if not isinstance(data.get("nodes"), list):
            raise GraphError("graph JSON needs a 'nodes' list")
        g = cls(name=str(data.get("name", "graph")))
        for i, d in enumerate(data["nodes"]):
            if not isinstance(d, Mapping) or "id" not in d:
                raise GraphError(f"node #{i} has no 'id'")
            missing = [k for k in ("mem", "cost") if k not in d]
            if missing:
                raise GraphError(f"node {d['id']!r} is missing {', '.join(missing)}")
            g.add_node(d["id"], d["mem"], d["cost"], d.get("inputs", ()), d.get("op"), d.get("bwd_uses"),
                       d.get("grad_alias", ()), d.get("requires_grad", True), d.get("saved_mem"),
                       d.get("grad_mem"), d.get("module"))
        g.validate()
        return g

    # ---- constructors for tests and examples -----------------------------------------------
    @classmethod
    def chain(cls, n: int, mem: float = 1, cost: float = 1, name: str = "chain") -> "Graph":
        """x1 -> x2 -> ... -> xn."""
        g = cls(name=name)
        for i in range(1, n + 1):
            g.add_node(f"x{i}", mem, cost, [f"x{i-1}"] if i > 1 else [])
        return g
