"""Heuristics: the modularity split (DiviML), HEFT, fastest-device-only, round-robin; the lower bound.

Every result is evaluated the same way (:meth:`Problem.simulate` in its start
order for latency, :meth:`Problem.period` for throughput), so MILP, heuristic
and baselines are compared on one cost model.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from scipy.optimize import linprog

from .graph import PartitionError
from .milp import Solution, solve_latency, solve_throughput
from .problem import Problem


@dataclass
class Result:
    method: str
    assign: dict | None               # node -> option index (None: infeasible)
    latency: float = math.inf         # seconds per inference (simulated)
    period: float = math.inf          # pipeline seconds per inference
    seconds: float = 0.0              # solve time
    optimal: bool = False             # proved optimal by the solver
    order: list = field(default_factory=list)
    note: str = ""

    @property
    def throughput(self) -> float:
        return 1.0 / self.period if self.period > 0 else math.inf


def evaluate(pb: Problem, method: str, assign: dict | None, seconds: float = 0.0, optimal: bool = False,
             start: dict | None = None, note: str = "") -> Result:
    if assign is None or not pb.fits(assign):
        return Result(method, None, seconds=seconds, note=note or "does not fit in memory")
    order = pb.order
    if start:
        pos = {v: i for i, v in enumerate(pb.order)}
        order = sorted(pb.order, key=lambda v: (start.get(v, 0.0), pos[v]))
        order = _topo_fix(pb, order)
    lat, _ = pb.simulate(assign, order)
    return Result(method, assign, lat, pb.period(assign), seconds, optimal, order, note)


def _topo_fix(pb: Problem, order: list) -> list:
    """``order`` made topological (start-time ties between a node and its zero-time predecessor)."""
    rank = {v: i for i, v in enumerate(order)}
    return list(nx.lexicographical_topological_sort(pb.g, key=lambda v: rank[v]))


# ---------------------------------------------------------------------------
# baselines


def fastest_single(pb: Problem, objective: str = "latency") -> Result:
    """Everything on the one device that is best for ``objective`` (among those it fits on)."""
    t0 = time.perf_counter()
    best = None
    for d in pb.pf.devices:
        a = pb.single(d)
        r = evaluate(pb, f"fastest device only", a)
        if r.assign is None:
            continue
        r.note = d
        key = r.latency if objective == "latency" else r.period
        if best is None or key < (best.latency if objective == "latency" else best.period):
            best = r
    if best is None:
        return Result("fastest device only", None, note="the model fits on no single device")
    best.seconds = time.perf_counter() - t0
    return best


def round_robin(pb: Problem) -> Result:
    """Nodes in topological order dealt to the devices in turn (pinned nodes stay)."""
    t0 = time.perf_counter()
    a, k = {}, 0
    for v in pb.order:
        if pb.g.nodes[v]["pin"] is not None:
            a[v] = 0
            continue
        d = pb.pf.devices[k % len(pb.pf.devices)]
        k += 1
        a[v] = next(i for i, o in enumerate(pb.opts[v]) if o.kind == "dev" and o.devs[0] == d)
    return evaluate(pb, "round-robin", a, time.perf_counter() - t0)


def heft(pb: Problem, single_only: bool = False) -> Result:
    """HEFT (Topcuoglu et al. 2002): upward ranks from mean option times and mean transfer
    costs, then each node in rank order to the option with the earliest finish time
    (appending after the device's last task; no gap insertion), within memory."""
    t0 = time.perf_counter()
    got = eft(pb, pb.order, single_only=single_only)
    if got is None:
        return Result("HEFT", None, seconds=time.perf_counter() - t0, note="does not fit in memory")
    assign, start, _ = got
    return evaluate(pb, "HEFT", assign, time.perf_counter() - t0, start=start)


def eft(pb: Problem, nodes, fixed=None, fin=None, ready=None, single_only: bool = False):
    """HEFT's list scheduling of ``nodes`` after ``fixed`` nodes (finish times ``fin``, device
    ready times ``ready``): (assignment of nodes, starts, finishes incl. fixed) or None."""
    nodes = list(nodes)
    S = set(nodes)
    fixed, fin = dict(fixed or {}), dict(fin or {})
    free = {d: 0.0 for d in pb.pf.devices}
    free.update(ready or {})
    allowed = {v: [i for i, o in enumerate(pb.opts[v]) if not single_only or o.kind == "dev"] for v in nodes}
    rank = {}
    for v in reversed(pb.order):
        if v not in S:
            continue
        w = float(np.mean([pb.time[v][i] for i in allowed[v]]))
        succ = [rank[s] + float(np.mean(pb.comm[(v, s)])) for s in pb.g.successors(v) if s in S]
        rank[v] = w + max(succ, default=0.0)
    used = {d: 0.0 for d in pb.pf.devices}
    for v, i in fixed.items():
        for d, b in pb.mem[v][i].items():
            used[d] += b
    assign, start = dict(fixed), {}
    pos = {v: i for i, v in enumerate(pb.order)}
    for v in sorted(nodes, key=lambda v: (-rank[v], pos[v])):
        best = None
        for i in allowed[v]:
            o = pb.opts[v][i]
            if any(used[d] + pb.mem[v][i].get(d, 0) > pb.pf.memory[d] for d in o.devs):
                continue
            ready_t = max([fin[u] + pb.comm[(u, v)][assign[u]][i] for u in pb.g.predecessors(v)], default=0.0)
            s = max([ready_t] + [free[d] for d in o.devs])
            f = s + pb.time[v][i]
            if best is None or f < best[0] - 1e-15:
                best = (f, s, i)
        if best is None:
            return None
        f, s, i = best
        assign[v], start[v], fin[v] = i, s, f
        for d in pb.opts[v][i].devs:
            free[d] = f
            used[d] += pb.mem[v][i].get(d, 0)
    return {v: assign[v] for v in nodes}, start, fin


# ---------------------------------------------------------------------------
# the modularity split


def modules(pb: Problem, max_size: int = 10) -> list[list]:
    """Modules of the graph: greedy modularity communities (networkx, edge weight = tensor
    bytes) of the undirected graph, communities above ``max_size`` split again by
    modularity (or cut in topological order when that does not split them), then, while
    the modules depend on each other in a cycle, the largest module on the cycle halved in
    topological order; listed in a topological order of the modules."""
    ug = nx.Graph()
    ug.add_nodes_from(pb.order)
    for u, v in pb.edges:
        ug.add_edge(u, v, weight=float(pb.graph.bytes(u)) + 1.0)
    pos = {v: i for i, v in enumerate(pb.order)}
    todo = [set(c) for c in nx.community.greedy_modularity_communities(ug, weight="weight")]
    parts = []
    while todo:
        c = todo.pop()
        if len(c) <= max_size:
            parts.append(c)
            continue
        sub = [set(x) for x in nx.community.greedy_modularity_communities(ug.subgraph(c), weight="weight")]
        if len(sub) > 1:
            todo += sub
        else:
            ordered = sorted(c, key=pos.get)
            todo += [set(ordered[i:i + max_size]) for i in range(0, len(ordered), max_size)]
    while True:  # where modules depend on each other in a cycle, halve the largest in topological order
        owner = {v: k for k, c in enumerate(parts) for v in c}
        q = nx.DiGraph()
        q.add_nodes_from(range(len(parts)))
        q.add_edges_from((owner[u], owner[v]) for u, v in pb.edges if owner[u] != owner[v])
        try:
            cycle = nx.find_cycle(q)
        except nx.NetworkXNoCycle:
            break
        k = max((a for a, _ in cycle), key=lambda a: len(parts[a]))
        ordered = sorted(parts[k], key=pos.get)
        half = len(ordered) // 2
        parts[k] = set(ordered[:half])
        parts.append(set(ordered[half:]))
    order = nx.lexicographical_topological_sort(q, key=lambda k: min(pos[v] for v in parts[k]))
    return [sorted(parts[k], key=pos.get) for k in order]


def split_heuristic(pb: Problem, objective: str = "latency", max_size: int = 10,
                    time_limit: float | None = 20.0, refine: bool = True) -> Result:
    """DiviML's splitting heuristic: solve each module exactly (MILP) in topological order of
    the modules, the earlier modules' placement and schedule fixed, and stitch. For
    throughput (unless ``refine=False``) one more pass re-solves each module with all the
    others fixed, which undoes the first modules' greedy grab of the fastest device."""
    t0 = time.perf_counter()
    mods = modules(pb, max_size)
    fixed, fin, ready, start = {}, {}, {d: 0.0 for d in pb.pf.devices}, {}
    optimal, kept_greedy = True, 0
    for mod in mods:
        if objective == "latency":
            greedy = eft(pb, mod, fixed, fin, ready)
            upper = max(greedy[2][v] for v in mod) if greedy is not None else None
            try:
                sol = solve_latency(pb, mod, fixed, fin, ready, upper=upper, time_limit=time_limit)
            except PartitionError:
                if greedy is None:
                    raise
                # HiGHS can fail on a module ("Solve error"); its list schedule is feasible
                kept_greedy += 1
                sol = Solution({v: greedy[0][v] for v in mod}, upper, False, 0.0,
                               {v: greedy[1][v] for v in mod}, "greedy list schedule (MILP failed)")
            for v in mod:
                i = sol.assign[v]
                start[v] = sol.start[v]
                fin[v] = sol.start[v] + pb.time[v][i]
                for d in pb.opts[v][i].devs:
                    ready[d] = max(ready[d], fin[v])
        else:
            sol = solve_throughput(pb, mod, fixed, time_limit=time_limit)
        optimal &= sol.optimal
        fixed.update(sol.assign)
    if objective == "throughput" and refine:
        # one pass of block coordinate descent: each module re-solved with every other module
        # fixed (its current placement is feasible there, so the period never grows)
        for mod in mods:
            others = {v: i for v, i in fixed.items() if v not in set(mod)}
            sol = solve_throughput(pb, mod, others, time_limit=time_limit)
            cand = dict(others, **sol.assign)
            if pb.period(cand) <= pb.period(fixed):
                fixed = cand
    r = evaluate(pb, "modularity split", fixed, time.perf_counter() - t0, start=start or None,
                 note=f"{len(mods)} modules" + (f", {kept_greedy} kept their list schedule" if kept_greedy else ""))
    r.optimal = False
    return r


def exact(pb: Problem, objective: str = "latency", time_limit: float | None = 60.0) -> Result:
    """The MILP over the whole graph (HEFT's makespan as the big M)."""
    t0 = time.perf_counter()
    try:
        if objective == "latency":
            ub = min([r.latency for r in (heft(pb), fastest_single(pb)) if r.assign is not None], default=None)
            sol = solve_latency(pb, upper=ub, time_limit=time_limit)
            r = evaluate(pb, "MILP", sol.assign, time.perf_counter() - t0, sol.optimal, start=sol.start)
        else:
            sol = solve_throughput(pb, time_limit=time_limit)
            r = evaluate(pb, "MILP", sol.assign, time.perf_counter() - t0, sol.optimal)
    except PartitionError as e:  # no solution (infeasible, or none found within the time limit)
        return Result("MILP", None, seconds=time.perf_counter() - t0, note=str(e))
    r.note = "optimal" if sol.optimal else f"time limit {time_limit:g} s: best found"
    return r


# ---------------------------------------------------------------------------
# lower bound


def lower_bound(pb: Problem, objective: str = "latency") -> float:
    """DiviML's bound: no schedule beats the compute-only work over the devices' aggregate
    speed, nor (latency) the critical path with every node at its fastest option and free
    transfers. With speeds per op class the aggregate-speed term is the small LP
    ``min T: sum_d y[v,d] = 1, sum_v y[v,d] t[v,d] <= T`` (fractional work per device;
    for one op class it equals total work / sum of speeds)."""
    nodes = pb.order
    devs = list(pb.pf.devices)
    tv = {v: {d: pb.pf.node_time(pb.g.nodes[v], d) for d in devs} for v in nodes}
    for v in nodes:  # a sharded option is a split of the work: never below its share
        for i, o in enumerate(pb.opts[v]):
            if o.kind != "dev":
                for d in o.devs:
                    tv[v][d] = min(tv[v][d], pb.time[v][i] * len(o.devs))
    nv, nd = len(nodes), len(devs)
    nvar = nv * nd + 1
    c = np.zeros(nvar)
    c[-1] = 1.0
    A_eq = np.zeros((nv, nvar))
    b_eq = np.ones(nv)
    bounds = [(0, 1)] * (nv * nd) + [(0, None)]
    for a, v in enumerate(nodes):
        pin = pb.g.nodes[v]["pin"]
        for b, d in enumerate(devs):
            A_eq[a, a * nd + b] = 1.0
            if pin is not None and d != pin:
                bounds[a * nd + b] = (0, 0)
    A_ub = np.zeros((nd, nvar))
    for b, d in enumerate(devs):
        for a, v in enumerate(nodes):
            A_ub[b, a * nd + b] = tv[v][d]
        A_ub[b, -1] = -1.0
    res = linprog(c, A_ub=A_ub, b_ub=np.zeros(nd), A_eq=A_eq, b_eq=b_eq, bounds=bounds, method="highs")
    if res.status != 0:
        raise PartitionError(f"lower bound LP failed: {res.message}")
    work = float(res.fun) * (1 - 1e-9)
    if objective != "latency":
        return work
    best = {v: min(pb.time[v]) for v in nodes}
    cp = {}
    for v in nodes:
        cp[v] = best[v] + max((cp[u] for u in pb.g.predecessors(v)), default=0.0)
    return max(work, max(cp.values()))


__all__ = ["Result", "evaluate", "fastest_single", "round_robin", "heft", "eft", "modules", "split_heuristic",
           "exact", "lower_bound"]
