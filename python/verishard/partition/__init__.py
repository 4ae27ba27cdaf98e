"""verishard.partition: map a DNN onto heterogeneous devices (DiviML-style), transfers priced
by verified redistribution plans.

Importing the package imports nothing heavy: each name below loads its
module (torch, scipy, networkx) on first use, so that ``verishard plan``,
which registers the ``partition`` subcommand, starts fast.

>>> from verishard.partition import partition
>>> r = partition("tiny-transformer", "cpu+2gpu", "latency", batch=2)
>>> r.best.method, r.best.latency >= r.lower_bound
('MILP', True)
"""

from __future__ import annotations

import importlib

METHODS = ("milp", "split", "heft", "round-robin", "fastest")
OBJECTIVES = ("latency", "throughput")

# name -> the submodule that defines it
_WHERE = {
    "partition": "api", "Report": "api", "load_graph": "api",
    "OpGraph": "graph", "PartitionError": "graph", "from_fx": "graph", "random_dag": "graph",
    "Result": "heuristics", "exact": "heuristics", "fastest_single": "heuristics", "heft": "heuristics",
    "lower_bound": "heuristics", "modules": "heuristics", "round_robin": "heuristics",
    "split_heuristic": "heuristics",
    "MODELS": "models", "model_graph": "models",
    "Platform": "platform", "load_platform": "platform", "platform_from_json": "platform", "shipped": "platform",
    "Opt": "problem", "Problem": "problem", "brute_force": "problem",
}

__all__ = [*_WHERE, "METHODS", "OBJECTIVES"]


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
