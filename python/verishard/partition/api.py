"""The partitioner's entry point: :func:`partition` and its :class:`Report`
(re-exported by :mod:`verishard.partition`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import METHODS, OBJECTIVES
from .graph import OpGraph, PartitionError
from .heuristics import Result, exact, fastest_single, heft, lower_bound, round_robin, split_heuristic
from .models import MODELS, model_graph
from .platform import Platform, load_platform
from .problem import Problem

__all__ = ["partition", "Report", "load_graph"]


@dataclass
class Report:
    problem: Problem
    objective: str
    best: Result
    results: dict            # method name -> Result (the chosen one and the baselines)
    lower_bound: float

    def value(self, r: Result) -> float:
        return r.latency if self.objective == "latency" else r.period

    def gap(self, r: Result) -> float:
        """How far ``r`` is above the lower bound (0.25: 25 % above)."""
        return self.value(r) / self.lower_bound - 1 if self.lower_bound > 0 else math.inf


def load_graph(model, batch: int = 8) -> OpGraph:
    if isinstance(model, OpGraph):
        return model
    if isinstance(model, str) and model.endswith(".json"):
        import json
        from pathlib import Path

        p = Path(model)
        if not p.exists():
            raise PartitionError(f"no such graph file {model!r}")
        try:
            doc = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise PartitionError(f"{p.name}: not JSON: {e}") from None
        if not isinstance(doc, dict) or set(doc) - {"name", "nodes", "edges"} or "nodes" not in doc:
            raise PartitionError(f"{p.name}: a graph file is an object with 'nodes' and 'edges'")
        return OpGraph.from_spec(doc["nodes"], [tuple(e) for e in doc.get("edges", [])], doc.get("name", p.stem))
    if isinstance(model, str):
        return model_graph(model, batch)
    raise PartitionError(f"a model is a name ({', '.join(MODELS)}), a graph JSON file or an OpGraph")


def partition(model, platform, objective: str = "latency", method: str = "milp", batch: int = 8,
              time_limit: float = 60.0, max_module: int = 10, sharding: bool = True) -> Report:
    """Partition ``model`` (a name in ``MODELS``, a graph JSON file or an :class:`OpGraph`) onto
    ``platform`` (a shipped name, a JSON path or a :class:`Platform`) for ``objective``
    with ``method``; the report holds the baselines and the lower bound too."""
    if objective not in OBJECTIVES:
        raise PartitionError(f"unknown objective {objective!r} (latency or throughput)")
    if method not in METHODS:
        raise PartitionError(f"unknown method {method!r} (known: {', '.join(METHODS)})")
    pf = platform if isinstance(platform, Platform) else load_platform(platform)
    pb = Problem(load_graph(model, batch), pf, sharding=sharding)
    results = {
        "fastest": fastest_single(pb, objective),
        "round-robin": round_robin(pb),
        "heft": heft(pb),
    }
    if method == "split":
        results["split"] = split_heuristic(pb, objective, max_module, time_limit)
    elif method == "milp":
        results["milp"] = exact(pb, objective, time_limit)
    best = results[method]
    return Report(pb, objective, best, results, lower_bound(pb, objective))
