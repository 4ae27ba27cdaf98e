"""The partitioning problem: placement options, their times, memory and transfer costs.

Every operator chooses one *option*: a single device, or, for an operator that
admits it, a sharding over one of the platform's device groups, either data
parallel (``dp``: output and inputs split on dimension 0) or model parallel
(``mp``: output split on the node's ``mp`` dimension, inputs replicated).
A sharded operator occupies all the group's devices for ``max`` over them of its
time on ``1/k`` of the work.

Transfers are priced under an alpha-beta model (a message of ``b`` bytes over a
link costs ``alpha + b / beta``); every transfer between two layouts on one group
is the verified redistribution plan :func:`verishard.plan` returns for it, each
step costing ``alpha + received * 4 / beta`` (received: the plan's per-device
elements for that step; worst link of the group). Entering or leaving a group
from a single device is point-to-point messages (scatter or send of blocks),
then the plan to the needed layout. Transfers do not contend for links
(latency); for throughput each transfer's time is charged to the *ports* of
the devices that send or receive it.

>>> from verishard.partition.graph import OpGraph
>>> from verishard.partition.platform import load_platform
>>> g = OpGraph.from_spec({"x": {"shape": [8, 1024], "pin": "cpu"},
...                        "a": {"work": {"matmul": 4e10}, "shape": [8, 1024], "dp": 0, "mp": 1}}, [("x", "a")])
>>> pb = Problem(g, load_platform("cpu+2gpu"))
>>> [str(o) for o in pb.opts["a"]]
['cpu', 'v100', 't4', 'dp[v100,t4]', 'mp[v100,t4]']
>>> round(pb.comm[("x", "a")][0][1] * 1e6, 2)  # cpu -> v100: 32 KiB over PCIe 3.0 x16
12.08
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import networkx as nx

from .graph import ELEMENT_BYTES, OpGraph, PartitionError
from .platform import Platform


@dataclass(frozen=True)
class Opt:
    kind: str                 # "dev", "dp" or "mp"
    devs: tuple[str, ...]
    dim: int | None = None    # split dimension of the output (dp: 0, mp: the node's)

    def __str__(self) -> str:
        return self.devs[0] if self.kind == "dev" else f"{self.kind}[{','.join(self.devs)}]"

    @property
    def out_layout(self):
        return ("dev", self.devs[0]) if self.kind == "dev" else ("grp", self.devs, self.dim)

    @property
    def in_layout(self):
        if self.kind == "dev":
            return ("dev", self.devs[0])
        return ("grp", self.devs, 0 if self.kind == "dp" else None)


def _type_text(shape: tuple[int, ...], k: int, dim: int | None) -> str:
    return "[" + ", ".join(f"{s // k}{{g}}{s}" if i == dim else str(s) for i, s in enumerate(shape)) + "]"


@lru_cache(maxsize=65536)
def plan_steps(shape: tuple[int, ...], k: int, src_dim: int | None, dst_dim: int | None) -> tuple[int, ...]:
    """Per-step received elements (per device) of the verified plan between two layouts
    of ``shape`` over a group of ``k`` devices (``dim`` None: replicated).

    >>> plan_steps((8, 64), 2, 0, 1)   # batch-split -> feature-split: one all-to-all, half of 256 kept
    (128,)
    >>> plan_steps((8, 64), 2, 0, None)  # -> replicated: one all-gather
    (256,)
    """
    from .. import plan

    if src_dim == dst_dim:
        return ()
    p = plan(f"g={k}", _type_text(shape, k, src_dim), _type_text(shape, k, dst_dim))
    return tuple(s.received for s in p.steps)


class Problem:
    """Options, times, memory and transfer costs of ``graph`` on ``platform`` (precomputed)."""

    def __init__(self, graph: OpGraph, platform: Platform, sharding: bool = True):
        graph.validate()
        self.graph, self.pf = graph, platform
        self.g = graph.g.copy()  # its own node attributes: "host" pins resolve per platform
        self.order = graph.topo()
        self.edges = list(self.g.edges())
        for n in self.order:
            pin = self.g.nodes[n]["pin"]
            if pin is not None and pin not in platform.kind:
                if pin == "host":
                    self.g.nodes[n]["pin"] = platform.host
                else:
                    raise PartitionError(f"node {n!r} is pinned to {pin!r}, not a device of {platform.name}")
        self.opts = {n: self._options(n, sharding) for n in self.order}
        self.time = {n: [self._opt_time(n, o) for o in self.opts[n]] for n in self.order}
        self.mem = {n: [self._opt_mem(n, o) for o in self.opts[n]] for n in self.order}
        for n in self.order:
            keep = [i for i, o in enumerate(self.opts[n])
                    if all(self.mem[n][i].get(d, 0) <= platform.memory[d] for d in o.devs)]
            if not keep:
                raise PartitionError(f"node {n!r} fits in no device's memory")
            self.opts[n] = [self.opts[n][i] for i in keep]
            self.time[n] = [self.time[n][i] for i in keep]
            self.mem[n] = [self.mem[n][i] for i in keep]
        self.comm, self.ports = {}, {}
        for u, v in self.edges:
            shape = self.g.nodes[u]["shape"]
            cm, pm = [], []
            for ou in self.opts[u]:
                row, prow = [], []
                for ov in self.opts[v]:
                    t, ports = self.transfer(ou.out_layout, ov.in_layout, shape)
                    row.append(t)
                    prow.append(ports)
                cm.append(row)
                pm.append(prow)
            self.comm[(u, v)], self.ports[(u, v)] = cm, pm

    # -- options ------------------------------------------------------------
    def _options(self, n, sharding: bool) -> list[Opt]:
        a = self.g.nodes[n]
        if a["pin"] is not None:
            return [Opt("dev", (a["pin"],))]
        out = [Opt("dev", (d,)) for d in self.pf.devices]
        if not sharding:
            return out
        in_shapes = [self.g.nodes[p]["shape"] for p in self.g.predecessors(n)]
        for grp in self.pf.groups:
            k = len(grp)
            if a["dp"] == 0 and a["shape"][0] % k == 0 and all(s[0] % k == 0 for s in in_shapes):
                out.append(Opt("dp", grp, 0))
            if a["mp"] is not None and a["shape"][a["mp"]] % k == 0:
                out.append(Opt("mp", grp, a["mp"]))
        return out

    def _opt_time(self, n, o: Opt) -> float:
        a = self.g.nodes[n]
        if o.kind == "dev":
            return self.pf.node_time(a, o.devs[0])
        k = len(o.devs)
        worst = 0.0
        for d in o.devs:
            kd = self.pf.kind[d]
            if kd in a.get("time", {}):
                t = a["time"][kd] / k
            else:
                sp = self.pf.speed[kd]
                t = self.pf.launch[kd] * a["kernels"] + sum(w / k / sp[c] for c, w in a["work"].items() if w)
            worst = max(worst, t)
        return worst

    def _opt_mem(self, n, o: Opt) -> dict[str, float]:
        a = self.g.nodes[n]
        out = self.graph.bytes(n)
        if o.kind == "dev":
            return {o.devs[0]: a["params"] + out}
        k = len(o.devs)
        per = a["params"] + out / k if o.kind == "dp" else (a["params"] + out) / k
        return {d: per for d in o.devs}

    # -- transfers ------------------------------------------------------------
    def _p2p(self, a: str, b: str, nbytes: float) -> float:
        if a == b or nbytes == 0:
            return 0.0
        alpha, beta = self.pf.link(a, b)
        return alpha + nbytes / beta

    def _group_link(self, grp) -> tuple[float, float]:
        links = [self.pf.link(a, b) for a, b in itertools.combinations(grp, 2)]
        return max(l[0] for l in links), min(l[1] for l in links)

    def _within(self, grp, shape, src_dim, dst_dim) -> float:
        alpha, beta = self._group_link(grp)
        return sum(alpha + r * ELEMENT_BYTES / beta for r in plan_steps(tuple(shape), len(grp), src_dim, dst_dim) if r)

    def transfer(self, src, dst, shape) -> tuple[float, dict[str, float]]:
        """(latency, busy seconds per device port) of moving a tensor from layout ``src`` to ``dst``."""
        if src == dst:
            return 0.0, {}
        nbytes = math.prod(shape) * ELEMENT_BYTES
        if src[0] == "dev" and dst[0] == "dev":
            t = self._p2p(src[1], dst[1], nbytes)
            return t, {src[1]: t, dst[1]: t}
        if src[0] == "grp" and dst[0] == "grp":
            if src[1] == dst[1]:
                t = self._within(src[1], shape, src[2], dst[2])
                return t, {d: t for d in src[1]}
            mid = ("dev", dst[1][0])
            t1, p1 = self.transfer(src, mid, shape)
            t2, p2 = self.transfer(mid, dst, shape)
            return t1 + t2, {d: p1.get(d, 0) + p2.get(d, 0) for d in set(p1) | set(p2)}
        if src[0] == "dev":
            a, grp, dim = src[1], dst[1], dst[2]
            piece = nbytes / len(grp) if dim is not None else nbytes
            times = {m: self._p2p(a, m, piece) for m in grp if m != a}
            t = sum(times.values())
            ports = dict(times)
            ports[a] = ports.get(a, 0) + t
            return t, ports
        grp, dim, b = src[1], src[2], dst[1]
        if b in grp:
            t = self._within(grp, shape, dim, None)
            return t, {d: t for d in grp}
        if dim is None:
            m = min(grp, key=lambda m: self._p2p(m, b, nbytes))
            t = self._p2p(m, b, nbytes)
            return t, {m: t, b: t}
        times = {m: self._p2p(m, b, nbytes / len(grp)) for m in grp}
        t = sum(times.values())
        ports = dict(times)
        ports[b] = t
        return t, ports

    # -- evaluating a solution -------------------------------------------------
    def simulate(self, assign: dict, order: list | None = None) -> tuple[float, dict]:
        """Makespan and start times of ``assign`` (node -> option index) when every node
        starts as soon as its inputs have arrived and its devices are free, taken in
        ``order`` (a topological order; default the graph's).

        Any schedule of ``assign`` is matched or beaten by this one run in the order
        of its own start times, so a MILP's objective is never below this value for
        its order."""
        order = order or self.order
        free = {d: 0.0 for d in self.pf.devices}
        fin, start = {}, {}
        for v in order:
            i = assign[v]
            o = self.opts[v][i]
            ready = 0.0
            for u in self.g.predecessors(v):
                ready = max(ready, fin[u] + self.comm[(u, v)][assign[u]][i])
            s = max([ready] + [free[d] for d in o.devs])
            start[v], fin[v] = s, s + self.time[v][i]
            for d in o.devs:
                free[d] = fin[v]
        return max(fin.values()), start

    def loads(self, assign: dict) -> dict:
        """Busy seconds per device (compute) and per device port (transfers)."""
        comp = {d: 0.0 for d in self.pf.devices}
        port = {d: 0.0 for d in self.pf.devices}
        for v in self.order:
            i = assign[v]
            for d in self.opts[v][i].devs:
                comp[d] += self.time[v][i]
        for u, v in self.edges:
            for d, t in self.ports[(u, v)][assign[u]][assign[v]].items():
                port[d] += t
        return {"compute": comp, "port": port}

    def period(self, assign: dict) -> float:
        """Pipeline period (seconds per inference): the busiest device or port."""
        ld = self.loads(assign)
        return max(max(ld["compute"].values()), max(ld["port"].values()))

    def memory_use(self, assign: dict) -> dict[str, float]:
        use = {d: 0.0 for d in self.pf.devices}
        for v in self.order:
            for d, m in self.mem[v][assign[v]].items():
                use[d] += m
        return use

    def fits(self, assign: dict) -> bool:
        return all(u <= self.pf.memory[d] * (1 + 1e-9) for d, u in self.memory_use(assign).items())

    def single(self, device: str) -> dict | None:
        """Everything on ``device`` (pinned nodes stay pinned), or None if some node can't go there."""
        out = {}
        for v in self.order:
            idx = [i for i, o in enumerate(self.opts[v]) if o.kind == "dev" and o.devs[0] == device]
            if idx:
                out[v] = idx[0]
            elif self.g.nodes[v]["pin"] is not None:
                out[v] = 0
            else:
                return None
        return out

    def describe(self, assign: dict) -> dict:
        return {v: str(self.opts[v][assign[v]]) for v in self.order}


def brute_force(pb: Problem, objective: str = "latency") -> tuple[float, dict]:
    """The exact optimum by enumeration (small graphs only): every assignment that fits
    in memory, and for latency every topological order, scheduled as soon as possible."""
    nodes = pb.order
    if objective == "latency":
        orders = [list(o) for o in nx.all_topological_sorts(pb.g)]
    best, arg = math.inf, None
    for combo in itertools.product(*[range(len(pb.opts[v])) for v in nodes]):
        assign = dict(zip(nodes, combo))
        if not pb.fits(assign):
            continue
        if objective == "latency":
            val = min(pb.simulate(assign, o)[0] for o in orders)
        else:
            val = pb.period(assign)
        if val < best:
            best, arg = val, assign
    return best, arg


__all__ = ["Opt", "Problem", "brute_force"]
