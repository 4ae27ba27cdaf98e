"""Exact schedules as mixed-integer linear programs, solved by HiGHS (``scipy.optimize.milp``).

Latency (makespan), in the DiviML style: a binary ``x[v,i]`` picks node v's
option i; ``s[v]`` its start; ``c[u,v]`` the transfer delay of edge (u, v),
``c >= sum_j C[i][j] x[v,j] - M_i (1 - x[u,i])``; precedence
``s[v] >= s[u] + p[u] + c[u,v]`` (``p[u] = sum_i t[u,i] x[u,i]``); for every
pair of nodes with no path between them and every device both may use, a
binary order ``z`` and big-M disjunction keeps them apart when both are on the
device; memory ``sum mem[v,i,d] x[v,i] <= capacity[d]``; minimise ``C >= s[v] + p[v]``.
The big M is an upper bound on the makespan (a greedy schedule's, or the serial horizon).

Throughput: minimise the pipeline period ``T`` with ``T >= `` each device's
compute load and each device port's transfer load (``w[e,d] >= sum_j P_d[i][j] x[v,j] - M (1 - x[u,i])``).

Both take ``nodes`` (the nodes to decide) and ``fixed`` (node -> option, with finish
times and device ready times for latency) so the splitting heuristic can solve a
module in the context of the modules before it.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from .graph import PartitionError
from .problem import Problem


class _Model:
    def __init__(self):
        self.lb, self.ub, self.integ, self.rows, self.lo, self.hi = [], [], [], [], [], []

    def var(self, lb=0.0, ub=math.inf, integer=False) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        self.integ.append(1 if integer else 0)
        return len(self.lb) - 1

    def row(self, coef: dict, lo=-math.inf, hi=math.inf) -> None:
        self.rows.append(coef)
        self.lo.append(lo)
        self.hi.append(hi)

    def solve(self, objective: dict, time_limit: float | None, gap: float = 0.0):
        n = len(self.lb)
        c = np.zeros(n)
        for k, v in objective.items():
            c[k] += v
        r, cc, vv = [], [], []
        for i, coef in enumerate(self.rows):
            for k, v in coef.items():
                if v:
                    r.append(i)
                    cc.append(k)
                    vv.append(v)
        cons = []
        if self.rows:
            A = coo_matrix((vv, (r, cc)), shape=(len(self.rows), n)).tocsr()
            cons = [LinearConstraint(A, np.array(self.lo), np.array(self.hi))]
        opts = {"mip_rel_gap": gap, "disp": False}
        if time_limit is not None:
            opts["time_limit"] = time_limit
        res = milp(c, constraints=cons, integrality=np.array(self.integ), bounds=Bounds(self.lb, self.ub),
                   options=opts)
        if res.status == 4:
            # HiGHS's "Solve error": on some row orders (set iteration follows the hash seed) its
            # optimum violates a big-M row by 1e-6 (microseconds), its MIP feasibility tolerance,
            # and it discards the solution; solve again with that tolerance at 1e-5 (10 ps).
            # scipy passes the option through to HiGHS, with a warning about unknown options.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                res = milp(c, constraints=cons, integrality=np.array(self.integ), bounds=Bounds(self.lb, self.ub),
                           options=dict(opts, mip_feasibility_tolerance=1e-5))
        return res


@dataclass
class Solution:
    assign: dict                      # node -> option index
    value: float                      # the model's objective (makespan or period, seconds)
    optimal: bool
    seconds: float
    start: dict = field(default_factory=dict)
    status: str = ""


TIME_SCALE = 1e6   # the MILPs work in microseconds and gigabytes: HiGHS's tolerances are absolute
MEM_SCALE = 1e-9


class _Scaled:
    """The problem's times, transfers and memory in the MILPs' units."""

    def __init__(self, pb: Problem):
        S = TIME_SCALE
        self.g, self.edges, self.order, self.opts, self.pf = pb.g, pb.edges, pb.order, pb.opts, pb.pf
        self.time = {v: [t * S for t in ts] for v, ts in pb.time.items()}
        self.comm = {e: [[c * S for c in row] for row in m] for e, m in pb.comm.items()}
        self.ports = {e: [[{d: t * S for d, t in cell.items()} for cell in row] for row in m]
                      for e, m in pb.ports.items()}
        self.mem = {v: [{d: b * MEM_SCALE for d, b in cell.items()} for cell in ms] for v, ms in pb.mem.items()}
        self.cap = {d: c * MEM_SCALE for d, c in pb.pf.memory.items()}


def _scaled(pb: Problem) -> _Scaled:
    if getattr(pb, "_milp_scaled", None) is None:
        pb._milp_scaled = _Scaled(pb)
    return pb._milp_scaled


def _add_assignment(m: _Model, pb: Problem, nodes) -> dict:
    x = {}
    for v in nodes:
        x[v] = [m.var(0, 1, True) for _ in pb.opts[v]]
        m.row({k: 1.0 for k in x[v]}, 1, 1)
    return x


def _memory_rows(m: _Model, pb: Problem, nodes, x, fixed) -> None:
    used = {d: 0.0 for d in pb.pf.devices}
    for v, i in fixed.items():
        for d, b in pb.mem[v][i].items():
            used[d] += b
    for d in pb.pf.devices:
        cap = pb.cap[d]
        if not math.isfinite(cap):
            continue
        coef = {}
        for v in nodes:
            for i, k in enumerate(x[v]):
                b = pb.mem[v][i].get(d, 0.0)
                if b:
                    coef[k] = coef.get(k, 0.0) + b
        if coef:
            m.row(coef, -math.inf, cap - used[d])


def _decode(res, x) -> dict:
    return {v: int(np.argmax([res.x[k] for k in ks])) for v, ks in x.items()}


def solve_latency(pb: Problem, nodes=None, fixed=None, fin=None, ready=None, upper: float | None = None,
                  time_limit: float | None = 60.0) -> Solution:
    """Minimise the makespan of ``nodes`` (default all) given ``fixed`` nodes' options and finish
    times ``fin`` and devices' ready times ``ready``. ``upper``: a known makespan (the big M)."""
    t0 = time.perf_counter()
    pb = _scaled(pb)
    SC = TIME_SCALE
    nodes = list(nodes if nodes is not None else pb.order)
    fixed = dict(fixed or {})
    fin = {v: t * SC for v, t in (fin or {}).items()}
    ready = {d: t * SC for d, t in (ready or {}).items()}
    upper = upper * SC if upper is not None else None
    S = set(nodes)
    horizon = max([0.0] + list(fin.values()) + list(ready.values()))
    horizon += sum(max(pb.time[v]) for v in nodes)
    horizon += sum(max(max(r) for r in pb.comm[(u, v)]) for u, v in pb.edges if v in S)
    M = min(horizon, upper) * (1 + 1e-6) + 1e-3 if upper is not None else horizon + 1e-3
    m = _Model()
    x = _add_assignment(m, pb, nodes)
    s = {v: m.var(0, M) for v in nodes}
    C = m.var(0, M)

    def p(v, sign=1.0):
        return {k: sign * pb.time[v][i] for i, k in enumerate(x[v])}

    def add(*ds):
        out = {}
        for d in ds:
            for k, v in d.items():
                out[k] = out.get(k, 0.0) + v
        return out

    for u, v in pb.edges:
        if v not in S:
            continue
        Cm = pb.comm[(u, v)]
        if u in S:
            cv = None
            if any(any(r) for r in Cm):
                cv = m.var(0, M)
                for i, ku in enumerate(x[u]):
                    Mi = max(Cm[i])
                    if Mi > 0:
                        coef = {cv: 1.0, ku: -Mi}
                        for j, kv in enumerate(x[v]):
                            coef[kv] = coef.get(kv, 0.0) - Cm[i][j]
                        m.row(coef, -Mi)
            coef = add({s[v]: 1.0, s[u]: -1.0}, p(u, -1.0), {cv: -1.0} if cv is not None else {})
            m.row(coef, 0.0)
        else:
            i = fixed[u]
            coef = {s[v]: 1.0}
            for j, kv in enumerate(x[v]):
                coef[kv] = coef.get(kv, 0.0) - Cm[i][j]
            m.row(coef, fin[u])
    for v in nodes:
        m.row(add({C: 1.0, s[v]: -1.0}, p(v, -1.0)), 0.0)
        for d, r in ready.items():
            if r > 0:
                coef = {s[v]: 1.0}
                for i, k in enumerate(x[v]):
                    if d in pb.opts[v][i].devs:
                        coef[k] = coef.get(k, 0.0) - r
                if len(coef) > 1:
                    m.row(coef, 0.0)
    # disjunctions between unordered pairs
    sub = pb.g.subgraph(nodes)
    reach = {v: nx.descendants(sub, v) for v in nodes}
    devs = {v: {d for o in pb.opts[v] for d in o.devs} for v in nodes}
    for a_i, u in enumerate(nodes):
        for v in nodes[a_i + 1:]:
            if v in reach[u] or u in reach[v]:
                continue
            common = devs[u] & devs[v]
            if not common:
                continue
            z = m.var(0, 1, True)
            for d in common:
                au = {k: 1.0 for i, k in enumerate(x[u]) if d in pb.opts[u][i].devs}
                av = {k: 1.0 for i, k in enumerate(x[v]) if d in pb.opts[v][i].devs}
                neg = {k: -M * w for k, w in add(au, av).items()}
                m.row(add({s[v]: 1.0, s[u]: -1.0}, p(u, -1.0), {z: -M}, neg), -3 * M)
                m.row(add({s[u]: 1.0, s[v]: -1.0}, p(v, -1.0), {z: M}, neg), -2 * M)
    _memory_rows(m, pb, nodes, x, fixed)
    res = m.solve({C: 1.0}, time_limit)
    dt = time.perf_counter() - t0
    if res.x is None:
        raise PartitionError(f"no feasible schedule (HiGHS: {res.message})")
    assign = _decode(res, x)
    return Solution(assign, float(res.x[C]) / SC, res.status == 0, dt, {v: float(res.x[s[v]]) / SC for v in nodes},
                    res.message)


def solve_throughput(pb: Problem, nodes=None, fixed=None, time_limit: float | None = 60.0) -> Solution:
    """Minimise the pipeline period of ``nodes`` (default all) given ``fixed`` nodes' options."""
    t0 = time.perf_counter()
    pb = _scaled(pb)
    nodes = list(nodes if nodes is not None else pb.order)
    fixed = dict(fixed or {})
    S = set(nodes)
    m = _Model()
    x = _add_assignment(m, pb, nodes)
    T = m.var(0)
    comp = {d: {} for d in pb.pf.devices}
    comp_const = {d: 0.0 for d in pb.pf.devices}
    for v in nodes:
        for i, k in enumerate(x[v]):
            for d in pb.opts[v][i].devs:
                comp[d][k] = comp[d].get(k, 0.0) + pb.time[v][i]
    for v, i in fixed.items():
        for d in pb.opts[v][i].devs:
            comp_const[d] += pb.time[v][i]
    port = {d: {} for d in pb.pf.devices}
    port_const = {d: 0.0 for d in pb.pf.devices}
    for u, v in pb.edges:
        P = pb.ports[(u, v)]
        if (u not in S and u not in fixed) or (v not in S and v not in fixed):
            continue  # a later module's edge
        if u not in S and v not in S:
            for d, t in P[fixed[u]][fixed[v]].items():
                port_const[d] += t
            continue
        ds = {d for row in P for cell in row for d, t in cell.items() if t > 0}
        for d in ds:
            if u in S and v in S:
                w = m.var(0)
                port[d][w] = 1.0
                for i, ku in enumerate(x[u]):
                    Mi = max(cell.get(d, 0.0) for cell in P[i])
                    if Mi > 0:
                        coef = {w: 1.0, ku: -Mi}
                        for j, kv in enumerate(x[v]):
                            coef[kv] = coef.get(kv, 0.0) - P[i][j].get(d, 0.0)
                        m.row(coef, -Mi)
            elif u in S:  # v fixed
                j = fixed[v]
                for i, ku in enumerate(x[u]):
                    port[d][ku] = port[d].get(ku, 0.0) + P[i][j].get(d, 0.0)
            else:
                i = fixed[u]
                for j, kv in enumerate(x[v]):
                    port[d][kv] = port[d].get(kv, 0.0) + P[i][j].get(d, 0.0)
    for d in pb.pf.devices:
        for loads, const in ((comp[d], comp_const[d]), (port[d], port_const[d])):
            coef = {T: 1.0}
            for k, w in loads.items():
                coef[k] = coef.get(k, 0.0) - w
            m.row(coef, const)
    _memory_rows(m, pb, nodes, x, fixed)
    res = m.solve({T: 1.0}, time_limit)
    dt = time.perf_counter() - t0
    if res.x is None:
        raise PartitionError(f"no feasible placement (HiGHS: {res.message})")
    return Solution(_decode(res, x), float(res.x[T]) / TIME_SCALE, res.status == 0, dt, {}, res.message)


__all__ = ["Solution", "TIME_SCALE", "MEM_SCALE", "solve_latency", "solve_throughput"]
