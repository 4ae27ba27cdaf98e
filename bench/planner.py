"""Planning time through Python: the verified planner against DTensor's planner
and a naive gather-all planner, side by side in one run on the same problems.

For array ranks 1-4 and meshes of 1-6 axes (axis sizes 2, 3, 4), plus the
growth cells (rank 4 with 7 and 8 axes, ranks 5 and 6 with 4 axes), random
source/target pairs are planned by:

  synth     the extracted synthesizer alone (`verishard._core.synthesize`) on
            pre-encoded refined inputs: one Python->OCaml call;
  core      the extracted pipeline alone (`verishard._core.pplan`, the call
            `verishard.core.plan` makes) on the pre-encoded user-mesh input:
            pending reductions around refinement, search, re-expression and
            validation, in one call;
  plan()    the public path `verishard.plan(mesh, src, dst)`: encoding, that
            one call and decoding the report into Python objects, with no
            cached answer (the plan cache is cleared before each call; its
            cost is not timed). Its types are already decoded (the problem
            was planned before): the figure for planning a problem again;
  plan() cold  the same, with every answer of the core Python holds
            forgotten before each call (`clear_decoding`: the plan cache and
            the caches of decoded meshes, types, collectives and steps):
            every type and step of the report is decoded anew, as for a
            problem whose steps were never seen (the clearing is not timed);
  plan()1st the first call on each fresh problem (a new mesh and new types:
            the package's caches of decoded types and meshes and the CPU's
            caches cold; one sample per case): the figure for a problem never
            seen;
  naive     a plain-Python gather-every-axis-then-slice planner that builds the
            same collective objects (no checking): the baseline;
  DT greedy DTensor's planner call `_gen_transform_infos_non_cached(src, dst)`
            (torch.distributed.tensor._redistribute) under
            `use_min_cost_redistribution_plan(False)`, on the specs that
            `verishard.torch.dtensor.to_spec` builds on a fake process group (the
            cross-check's adapter); setup is not timed. Torch plans every
            problem with a non-default shard order (an axis order other than
            mesh order) with its graph search whatever the flag;
  DT mincost the same call under `use_min_cost_redistribution_plan(True)`
            (Dijkstra over placements). Where the shard order forces the graph
            search, greedy and min-cost are the same call with the same
            arguments: it is measured once and reported in both columns.

ROUNDS: verishard's columns time each case as the median of REPEAT calls
made in rounds over the cell's cases (case 1, 2, ..., 30, then again), so
that every call follows calls on other problems, as when a program plans
its different reshards. Repeating one problem REPEAT times in a row (the
protocol before) reads much faster, most likely because the CPU's branch
predictor learns that problem's exact path through the core (this virtual
machine has no hardware counters to confirm it): on the headline cell the
core call alone read 12.0 us that way against 23.6 us in rounds, and
plan() 19.4 against 32.3 us. The headline prints both readings.

NOISE: a first call can be timed only once, so the figures read from one
sample per problem (a new problem on a mesh in use, `plan() 1st`) carry
the noise of this shared virtual machine, which the medians of REPEAT
calls filter out. To show how much, a fixed Python workload (the same
instructions every call) is timed once after each new problem's first
call, and the headline prints its median and p99 beside them.

TWO_PASSES: per cell, the verishard columns are timed in a first pass over
the cell's problems and DTensor's in a second. Interleaved (DTensor's calls
of up to 0.3 s of busy CPU right before ours), ours read about 2 us slower on
this shared 2-core machine: on the headline cell plan() median 20.6-21.2 us
against 18.0-18.7 us in a separate pass, the synthesizer alone 12.5-12.7
against 10.0-10.3 us; 0.3 s of a busy Python loop instead of DTensor slowed
the synthesizer alone to 14.1 us. The effect is the machine's state after a
busy spell, not the planner's, so neither planner is timed right after the
other's long calls.

DTensor's columns time each case as the median of REPEAT calls in a row (calls over 1 ms are
repeated only while they fit in DT_BUDGET_US, at least once; calls under 1 ms
get one untimed warm-up). A DTensor call is stopped after --cap seconds of
wall time (SIGALRM; default 0.3 s) and counted as a timeout; a median or p99
that depends on a timeout prints as ">x", x being its value with every timeout
counted at the cap (a lower bound). Once more
than half of a cell's cases timed out for a DTensor planner, its median and
p99 there are known to be > cap, and its remaining cases in that cell are
skipped (counted). Tables report, per cell, the median and p99 over cases
(with few cases the p99 is the maximum), and ratios of medians. Python's
cyclic garbage collector is off during every timed call, ours and DTensor's
(as `timeit` does). Writes
bench/results/planner.md and, with matplotlib, bench/results/planner_growth.png.

Usage: python bench/planner.py [--cases N] [--cap SECONDS] [--quick] [--no-plot]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import math
import os
import platform
import random
import signal
import statistics
import time
from math import prod
from pathlib import Path
from typing import NamedTuple

import verishard as vs
from verishard import AllGather, DynSlice, _core
from verishard import collectives as vs_collectives, core as vs_core, sharding as vs_sharding  # noqa: E402
from verishard.plan import _planned

REPEAT = 15
DT_BUDGET_US = 30_000.0           # repeats of a slow DTensor call, per case and planner
TARGET_MEDIAN_US, TARGET_P99_US = 20.0, 60.0
HEAD = (4, 4)                     # (rank, axes) of the headline cell
GRID = [(r, k) for r in range(1, 5) for k in range(1, 7)]
GROWTH_AXES = [(4, k) for k in range(1, 9)]
GROWTH_RANK = [(r, 4) for r in range(1, 7)]
CELLS = GRID + [c for c in GROWTH_AXES + GROWTH_RANK if c not in GRID]
METHODS = ("synth", "core", "plan", "plan1", "naive", "dtg", "dtm")
LABEL = {"synth": "synth", "core": "core (_core.pplan)", "plan": "plan()", "cold": "plan() cold", "plan1": "plan() 1st",
         "naive": "naive", "dtg": "DT greedy", "dtm": "DT min-cost"}


def random_problem(rng: random.Random, rank: int, k: int, pool=(2, 2, 3, 4), mesh: vs.Mesh | None = None):
    """A random problem: ``k`` axes a0, a1, ... of sizes drawn from ``pool``
    (or the ``k`` axes of ``mesh``), each axis given to a random dimension (or
    none) of the source and of the target, in a random order; every global
    size divisible by both."""
    if mesh is None:
        mesh = vs.Mesh(tuple((f"a{i}", rng.choice(pool)) for i in range(k)))
    names = [name for name, _ in mesh.axes]
    sizes = [prod(fs) for _, fs in mesh.axes]

    def axes():
        assign = [rng.randrange(rank + 1) for _ in range(k)]
        order = list(range(k))
        rng.shuffle(order)
        return [[names[i] for i in order if assign[i] == d] for d in range(rank)]

    sa, da = axes(), axes()
    shape = []
    for d in range(rank):
        a = prod(sizes[names.index(x)] for x in sa[d])
        b = prod(sizes[names.index(x)] for x in da[d])
        shape.append(a * b * rng.choice([1, 2, 3]))
    return mesh, vs.ArrayType.from_axes(mesh, shape, sa), vs.ArrayType.from_axes(mesh, shape, da)


def naive_plan(src: vs.ArrayType, dst: vs.ArrayType):
    steps = [AllGather(d, src.dim_axes(d)) for d in range(src.rank) if src.dim_axes(d)]
    steps += [DynSlice(d, dst.dim_axes(d)) for d in range(dst.rank) if dst.dim_axes(d)]
    return steps


def timed(fn) -> float:
    """Median microseconds of REPEAT calls of ``fn`` in a row (in rounds over one call)."""
    return in_rounds([fn])[0]


def once(fn) -> float:
    with gc_off():
        t0 = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - t0) / 1000.0


@contextlib.contextmanager
def gc_off():
    """Python's cyclic collector off while timing, as `timeit` does: a full
    collection over the process's objects (torch's among them) costs up to
    about 0.1 s, whichever call it happens to fall in."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout


def capped(fn, cap_s: float) -> float | None:
    """Wall microseconds of one call of ``fn``, or None if it ran past ``cap_s``
    seconds of wall time (the unit of every figure here, so a finite figure is
    never above the cap; on a loaded machine more calls time out)."""
    try:
        with gc_off():
            signal.setitimer(signal.ITIMER_REAL, cap_s)
            try:
                t0 = time.perf_counter_ns()
                fn()
                t = time.perf_counter_ns() - t0
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    except _Timeout:
        return None
    return t / 1000.0


class DTensor:
    """DTensor's planning call on our problems: setup (not timed) and timing."""

    def __init__(self):
        from torch.distributed.tensor import _redistribute as R
        from torch.distributed.tensor._dtensor_spec import DTensorSpec

        from verishard.torch.dtensor import planning_mesh, to_spec
        self.R, self.Spec, self.planning_mesh, self.to_spec = R, DTensorSpec, planning_mesh, to_spec
        logging.getLogger(R.__name__).setLevel(logging.ERROR)  # its "flatten mesh dimensions" advice
        signal.signal(signal.SIGALRM, _alarm)

    def specs(self, mesh, src, dst):
        dm = self.planning_mesh(mesh)
        s, d = self.to_spec(src, dm), self.to_spec(dst, dm)
        # torch's own condition (_gen_transform_infos_non_cached) for always using the graph search
        forced = not all(self.Spec.is_default_device_order(o) for o in (s.shard_order, d.shard_order))
        return s, d, forced

    def time(self, s, d, min_cost: bool, cap_s: float) -> float | None:
        """Median microseconds of the planning call, None on timeout; raises if torch refuses."""
        call = lambda: self.R._gen_transform_infos_non_cached(s, d)
        with self.R.use_min_cost_redistribution_plan(min_cost):
            first = capped(call, cap_s)
            if first is None:
                return None
            if first < 1000.0:
                samples = [capped(call, cap_s) for _ in range(REPEAT)]
            else:
                samples = [first] + [capped(call, cap_s) for _ in range(min(REPEAT - 1, int(DT_BUDGET_US // first)))]
        samples = [x for x in samples if x is not None]
        return statistics.median(samples) if samples else None


def median(xs):
    return statistics.median(xs) if xs else math.nan


def p99(xs):
    if not xs:
        return math.nan
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


class Stat(NamedTuple):
    """A median or p99 over cases; ``bound``: some cases timed out, so ``v`` is
    a lower bound (the statistic with every timeout counted at the cap)."""

    v: float
    bound: bool


def stat(xs, f, cap_us: float) -> Stat:
    v = f(xs)
    if math.isinf(v):
        return Stat(f([min(x, cap_us) for x in xs]), True)
    return Stat(v, False)


def fmt(x: Stat) -> str:
    if math.isnan(x.v):
        return "n/a"
    num = f"{x.v:.1f}" if x.v < 1000 else f"{x.v:.0f}"
    return ">" + num if x.bound else num


def ratio(a: Stat, b: Stat) -> str:
    if math.isnan(a.v) or math.isnan(b.v):
        return "n/a"
    r = a.v / b.v
    num = f"{r:.2f}" if r < 10 else f"{r:.0f}"
    return ">" + num if a.bound else num


NEW_WARM, NEW_TIMED = 200, 200


def new_problems(rng: random.Random, rank: int, k: int) -> tuple[list[float], list[float]]:
    """First-call microseconds of NEW_TIMED problems never planned before, on
    one random mesh over which NEW_WARM other problems were planned first:
    a new problem in a process that has been planning (its new types and
    steps decoded, the user's types encoded for the first time). Each first
    call can be timed only once, so its p99 carries the machine's noise
    (NOISE): after each, the fixed workload `fixed_work` is timed once the
    same way, and its samples are returned too."""
    mesh = random_problem(rng, rank, k)[0]
    seen, problems = set(), []
    while len(problems) < NEW_WARM + NEW_TIMED:
        _, s, d = random_problem(rng, rank, k, mesh=mesh)
        if (s, d) not in seen:
            seen.add((s, d))
            problems.append((s, d))
    for s, d in problems[:NEW_WARM]:
        vs.plan(mesh, s, d)
    new, fixed = [], []
    for s, d in problems[NEW_WARM:]:
        new.append(once(lambda: vs.plan(mesh, s, d)))
        fixed.append(once(fixed_work))
    return new, fixed


def fixed_work(n: int = 2000) -> int:
    """NOISE: the same deterministic Python work every call (about 70 us
    here, near a new problem's plan()), timed as single samples beside the
    first calls: its spread is the machine's, since the work never varies."""
    x = 0
    for i in range(n):
        x += i * i
    return x


def clear_decoding(mesh: vs.Mesh) -> None:
    """Forget every answer of the core Python holds: the plan cache and the
    caches of decoded meshes, types, collectives and steps."""
    _planned.cache_clear()
    mesh.__dict__.pop("_reports", None)
    for f in (vs_core._caches, vs_core._refinement, vs_sharding._raw_dim,
              vs_sharding._raw_type, vs_collectives._decoded_step):
        f.cache_clear()


def in_rounds(calls, setups=None) -> list[float]:
    """Median microseconds of each of ``calls``, timed in REPEAT rounds over
    all of them (ROUNDS), ``setups[i]()`` untimed before each call of
    ``calls[i]``."""
    samples = [[] for _ in calls]
    with gc_off():
        for _ in range(REPEAT):
            for i, fn in enumerate(calls):
                if setups:
                    setups[i]()
                t0 = time.perf_counter_ns()
                fn()
                samples[i].append(time.perf_counter_ns() - t0)
    return [statistics.median(x) / 1000.0 for x in samples]


def run_cell(rng, rank, k, cases, dt: DTensor, cap_s):
    """Time a cell's problems: verishard's planners in a first pass over them,
    in rounds (ROUNDS), DTensor's in a second (see TWO_PASSES)."""
    t = {m: [] for m in METHODS + ("hit", "cold")}
    n = {"forced": 0, "unexpressible": 0, "refused_g": 0, "refused_m": 0, "timeout_g": 0, "timeout_m": 0,
         "skipped_g": 0, "skipped_m": 0, "core_rejected": 0}
    inf = math.inf
    problems = [random_problem(rng, rank, k) for _ in range(cases)]
    for mesh, src, dst in problems:
        t["plan1"].append(once(lambda: vs.plan(mesh, src, dst)))   # first call on this problem
    synth_in = [m.refined().encode() + s.refined().encode() + d.refined().encode() for m, s, d in problems]
    plan_in = [m.encode() + s.pencode() + d.pencode() for m, s, d in problems]
    n["core_rejected"] = sum(_core.pplan(x)[0] == 1 for x in plan_in)
    planning = [lambda m=m, s=s, d=d: vs.plan(m, s, d) for m, s, d in problems]
    t["synth"] = in_rounds([lambda x=x: _core.synthesize(x) for x in synth_in])
    t["core"] = in_rounds([lambda x=x: _core.pplan(x) for x in plan_in])
    t["plan"] = in_rounds(planning, [_planned.cache_clear] * cases)
    t["cold"] = in_rounds(planning, [lambda m=m: clear_decoding(m) for m, _, _ in problems])
    for p in planning:
        p()
    t["hit"] = in_rounds(planning)
    t["naive"] = in_rounds([lambda s=s, d=d: naive_plan(s, d) for _, s, d in problems])
    if (rank, k) == HEAD:   # the old protocol, for comparison: one problem REPEAT times in a row
        t["repeated"] = [timed(lambda: (_planned.cache_clear(), p())) for p in planning]
        t["repeated_core"] = [timed(lambda: _core.pplan(x)) for x in plan_in]
    for mesh, src, dst in problems:
        try:
            s, d, forced = dt.specs(mesh, src, dst)
        except Exception:
            n["unexpressible"] += 1
            continue
        n["forced"] += forced
        res = {}
        for mc, key in ((False, "g"), (True, "m")):
            if 2 * n[f"timeout_{key}"] > cases:   # the cell's median is already > cap
                res[key] = "skipped"
            elif mc and forced and res["g"] != "skipped":   # the same call as the greedy one
                res[key] = res["g"]
            else:
                try:
                    res[key] = dt.time(s, d, mc, cap_s)
                except Exception:
                    res[key] = "refused"
        for key, col in (("g", "dtg"), ("m", "dtm")):
            if res[key] == "skipped":
                n[f"skipped_{key}"] += 1
            elif res[key] == "refused":
                n[f"refused_{key}"] += 1
            elif res[key] is None:
                n[f"timeout_{key}"] += 1
                t[col].append(inf)
            else:
                t[col].append(res[key])
    return t, n


def plot(stats, cap_us, path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return False
    fig, axs = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    styles = {"synth": ("tab:green", "o"), "core": ("tab:blue", "s"), "plan": ("tab:purple", "D"),
              "dtg": ("tab:orange", "^"), "dtm": ("tab:red", "v")}
    for ax, cells, xi, xlabel in ((axs[0], GROWTH_AXES, 1, "mesh axes (array rank 4)"),
                                  (axs[1], GROWTH_RANK, 0, "array rank (4 mesh axes)")):
        for m, (color, marker) in styles.items():
            xs = [c[xi] for c in cells]
            med = [stats[c][0][m][0] for c in cells]
            q = [stats[c][0][m][1] for c in cells]
            ok = [(x, y.v) for x, y in zip(xs, med) if not y.bound]
            if ok:
                ax.plot(*zip(*ok), color=color, marker=marker, label=f"{LABEL[m]} median")
            okq = [(x, y.v) for x, y in zip(xs, q) if not y.bound]
            if okq:
                ax.plot(*zip(*okq), color=color, linestyle=":", alpha=0.6)
            over = [(x, y.v) for x, y in zip(xs, med) if y.bound]
            if over:
                ax.scatter(*zip(*over), color=color, marker=marker, facecolors="none",
                           s=70, label=f"{LABEL[m]} median: lower bound (timeouts)")
        ax.axhline(cap_us, color="grey", linestyle="--", linewidth=0.8)
        ax.axhline(TARGET_MEDIAN_US, color="black", linestyle="-.", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylim(top=cap_us * 3)
        ax.set_xlabel(xlabel)
        ax.grid(True, which="both", alpha=0.3)
    axs[0].set_ylabel("planning time per call (us, log); dotted: p99")
    axs[0].text(5.6, cap_us * 0.55, f"DTensor cap {cap_us / 1e6:g} s", color="grey", fontsize=8)
    axs[0].text(1, TARGET_MEDIAN_US * 1.15, "20 us target", fontsize=8)
    h, lab = axs[1].get_legend_handles_labels()
    h0, lab0 = axs[0].get_legend_handles_labels()
    seen = dict(zip(lab, h)) | dict(zip(lab0, h0))
    fig.legend(seen.values(), seen.keys(), loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("Planning time growth: verishard vs DTensor (bench/planner.py)")
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> None:
    t_start = time.perf_counter()
    load0 = os.getloadavg()[0]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=None, help="random cases per (rank, axes) cell (default 30; 8 with --quick)")
    ap.add_argument("--cap", type=float, default=None, help="wall seconds per DTensor call before it counts as a timeout "
                    "(default 0.3; 0.1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="fewer cases and a shorter DTensor cap")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "planner.md"))
    args = ap.parse_args()
    cases = args.cases if args.cases is not None else (8 if args.quick else 30)
    cap_s = args.cap if args.cap is not None else (0.1 if args.quick else 0.3)
    cap_us = cap_s * 1e6
    import torch
    dt = DTensor()
    rng = random.Random(20261202)

    cols = ["synth", "core", "plan", "cold", "plan1", "naive", "dtg", "dtm"]
    header = ("| rank | axes | " + " | ".join(f"{LABEL[m]} med / p99" for m in cols)
              + " | plan()/core | plan()/naive | DT greedy/plan() | DT min-cost/plan() "
              + "| DT forced graph | DT timeouts g / mc | DT skipped g / mc | DT refused | not expressible |")
    sep = "|" + "---|" * (header.count("|") - 1)
    print(header)
    print(sep, flush=True)
    lines = [header, sep]
    stats = {}
    timings = {}
    tot = {"cases": 0}
    for rank, k in CELLS:
        t, n = run_cell(rng, rank, k, cases, dt, cap_s)
        s = {m: (stat(t[m], median, cap_us), stat(t[m], p99, cap_us)) for m in METHODS + ("cold",)}
        stats[(rank, k)] = (s, n)
        timings[(rank, k)] = t
        tot["cases"] += cases
        for key in n:
            tot[key] = tot.get(key, 0) + n[key]
        pm = s["plan"][0]
        row = (f"| {rank} | {k} | " + " | ".join(f"{fmt(s[m][0])} / {fmt(s[m][1])}" for m in cols)
               + f" | {ratio(pm, s['core'][0])} | {ratio(pm, s['naive'][0])}"
               + f" | {ratio(s['dtg'][0], pm)} | {ratio(s['dtm'][0], pm)}"
               + f" | {n['forced']} | {n['timeout_g']} / {n['timeout_m']} | {n['skipped_g']} / {n['skipped_m']}"
               + f" | {n['refused_g'] + n['refused_m']}"
               + f" | {n['unexpressible']} |")
        if (rank, k) not in GRID:
            row = row.replace(f"| {rank} | {k} |", f"| {rank} | {k} (growth) |", 1)
        print(row, flush=True)
        lines.append(row)

    growth = []
    gcols = ["synth", "core", "plan", "dtg", "dtm"]
    for title, cells, key in (("Growth with mesh axes (array rank 4)", GROWTH_AXES, "axes"),
                              ("Growth with array rank (4 mesh axes)", GROWTH_RANK, "rank")):
        gh = f"| {key} | " + " | ".join(f"{LABEL[m]} med / p99" for m in gcols) + " | DT timeouts g / mc | DT skipped g / mc |"
        growth += ["", f"{title}, us:", "", gh, "|" + "---|" * (gh.count("|") - 1)]
        for c in cells:
            s, n = stats[c]
            x = c[1] if key == "axes" else c[0]
            growth.append(f"| {x} | " + " | ".join(f"{fmt(s[m][0])} / {fmt(s[m][1])}" for m in gcols)
                          + f" | {n['timeout_g']} / {n['timeout_m']} | {n['skipped_g']} / {n['skipped_m']} |")
    print("\n".join(growth))

    s, n = stats[HEAD]
    th = timings[HEAD]
    s_hit, s_rep, s_repc = th["hit"], th["repeated"], th["repeated_core"]
    s_new, s_fixed = new_problems(random.Random(20261203), *HEAD)
    pm, pq = s["plan"][0].v, s["plan"][1].v
    verdict = lambda ok: "met" if ok else "NOT met"
    head = (f"\nHeadline (rank {HEAD[0]}, {HEAD[1]} axes, {cases} cases): verishard.plan() with the plan cache "
            f"cleared (the problem planned again, in rounds over the cell's problems) median {pm:.1f} us "
            f"(target <= {TARGET_MEDIAN_US:.0f} us: {verdict(pm <= TARGET_MEDIAN_US)}), p99 {pq:.1f} us "
            f"(target <= {TARGET_P99_US:.0f} us: {verdict(pq <= TARGET_P99_US)}). "
            f"The same problem planned {REPEAT} times in a row (the earlier protocol; most likely the branch "
            f"predictor learns it): median {median(s_rep):.1f} us, p99 {p99(s_rep):.1f} us; the core call so: median "
            f"{median(s_repc):.1f} us. "
            f"With every decoded answer forgotten before each call (plan() cold): median {fmt(s['cold'][0])} us, "
            f"p99 {fmt(s['cold'][1])} us. "
            f"A problem never planned before, on a mesh {NEW_WARM} other problems were planned on first "
            f"(the first call of each of {NEW_TIMED} such problems): median {median(s_new):.1f} us, p99 "
            f"{p99(s_new):.1f} us (targets there: median {verdict(median(s_new) <= TARGET_MEDIAN_US)}, p99 "
            f"{verdict(p99(s_new) <= TARGET_P99_US)}); a fixed workload timed once after each of those calls "
            f"(NOISE: the same work every time) read median {median(s_fixed):.1f} us, p99 {p99(s_fixed):.1f} us, so "
            f"single samples on this machine reach {p99(s_fixed) / median(s_fixed):.1f}x their median at the p99 "
            f"without any change in the work. "
            f"First call on a problem never seen (new mesh and types, caches cold): median {fmt(s['plan1'][0])} "
            f"us, p99 {fmt(s['plan1'][1])} us (targets there: median {verdict(s['plan1'][0].v <= TARGET_MEDIAN_US)}, "
            f"p99 {verdict(s['plan1'][1].v <= TARGET_P99_US)}). "
            f"Core call alone (_core.pplan): median {fmt(s['core'][0])} us, p99 {fmt(s['core'][1])} us; "
            f"synthesizer alone: median {fmt(s['synth'][0])} us. "
            f"DTensor greedy: median {fmt(s['dtg'][0])} us, p99 {fmt(s['dtg'][1])} us; "
            f"min-cost: median {fmt(s['dtm'][0])} us, p99 {fmt(s['dtm'][1])} us "
            f"({n['forced']} of {cases} forced to the graph search, timeouts {n['timeout_g']} / {n['timeout_m']}). "
            f"Naive Python planner: median {fmt(s['naive'][0])} us. "
            f"A plan-cache hit (the same problem again): median {statistics.median(s_hit):.1f} us.")
    dtc = tot["cases"] - tot["unexpressible"]
    counts = (f"DTensor: {dtc} of {tot['cases']} problems expressible as DTensorSpecs "
              f"({tot['unexpressible']} not); {tot['forced']} had a non-default shard order (graph search "
              f"whatever the flag); timeouts (> {cap_s:g} s) greedy {tot['timeout_g']}, min-cost {tot['timeout_m']}; "
              f"not run once a cell's median was already > cap (more than half its cases timed out): greedy "
              f"{tot['skipped_g']}, min-cost {tot['skipped_m']}; "
              f"refused by torch: greedy {tot['refused_g']}, min-cost {tot['refused_m']}. "
              f"Core rejections of the pre-encoded problem: {tot['core_rejected']}.")
    elapsed = time.perf_counter() - t_start
    footer = (f"Total run time {elapsed:.0f} s (torch {torch.__version__}, Python {platform.python_version()}); "
              f"1-minute load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
              f"({os.cpu_count()} cores, shared).")
    print(head)
    print(counts)
    out = Path(args.out)
    png = out.parent / "planner_growth.png"
    plotted = False if args.no_plot else plot(stats, cap_us, png)
    if plotted:
        print(f"plot: {png}")
    print(footer)
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = "`make bench` (= `.venv/bin/python bench/planner.py`)"
    if args.quick or args.cases is not None or args.cap is not None:
        cmd = "`.venv/bin/python bench/planner.py" + (" --quick" if args.quick else "") + \
              (f" --cases {args.cases}" if args.cases is not None else "") + \
              (f" --cap {args.cap:g}" if args.cap is not None else "") + "`"
    out.write_text(
        "# Planner benchmark\n\n"
        f"Command: {cmd}; {cases} random cases per (rank, axes) cell, the same problems for every "
        f"planner, verishard's timed in a first pass over a cell's problems and DTensor's in a second (see TWO_PASSES "
        f"in the script: interleaved, DTensor's long calls slowed the timings that followed them by about 2 us), "
        f"Python's garbage collector off during every timed call (as `timeit` does); each case timed as the median of {REPEAT} calls, "
        f"verishard's made in rounds over the cell's cases so that each call follows calls on other problems (see ROUNDS in the script: "
        f"one problem repeated in a row most likely trains the branch predictor on it, and reads 50-60% of the time), "
        f"DTensor's in a row (calls over 1 ms: as many as fit "
        f"in {DT_BUDGET_US / 1000:.0f} ms, at least one; each DTensor call capped at {cap_s:g} s wall time, a median or p99 "
        "that depends on a timeout prints as `>x`, x being its value with timeouts counted at the cap; once more than half of a cell's cases timed out for a DTensor planner, "
        "its median and p99 are known to be > cap and its remaining cases are skipped, counted as such); per cell the median / p99 over cases (with this many cases the "
        "p99 is the maximum); times in microseconds on this machine (2 shared cores). Ratios are of medians. "
        "Columns: `synth` = `_core.synthesize` on pre-encoded refined inputs; `core` = `_core.pplan` (what `plan()` calls) on the "
        "pre-encoded user-mesh problem (the one call into the verified pipeline); `plan()` = "
        "`verishard.plan(mesh, src, dst)` with the plan cache cleared, the problem planned again (its types decoded); "
        "`plan() cold` = the same with every decoded answer forgotten before each call (not timed) "
        "(the problem's types and steps decoded anew); `plan() 1st` = its first call on each fresh problem, new mesh and types (one sample); "
        "`naive` = gather-all-then-slice in Python; `DT greedy` / `DT min-cost` = torch's "
        "`_gen_transform_infos_non_cached` on the `DTensorSpec`s of the problem, under "
        "`use_min_cost_redistribution_plan(False/True)`, setup excluded; on a non-default shard order torch "
        "always runs its graph search, so both columns are that one call (`DT forced graph` counts them). "
        "See the script's docstring.\n\n"
        + "\n".join(lines) + "\n" + "\n".join(growth) + "\n" + head + "\n\n" + counts + "\n\n"
        + (f"![growth](planner_growth.png)\n\n" if plotted else "") + footer + "\n")


if __name__ == "__main__":
    main()
