"""Exact optimum traffic over the synthesizer's plan class, against our plans.

The class (``Synth.validate``): plans accepted by the verified checker, in
normal form (``Synth.nf_slices``: slices, then all-to-alls and permutes, then
gathers), economical (``Synth.axes_ok``: a slice adds only axes ``dst`` uses,
a gather removes only axes ``dst`` does not use) and with every type within
``max(size(src), size(dst))``. For a problem over a mesh of prime axis sizes
(2 and 3, so the mesh is its own prime refinement and ``verishard.plan``
plans over it) the minimum traffic over that class is found by Dijkstra over
states ``(phase, type)``, phase in {slicing, middle, gathering}; the weight of
an edge is ``Checker.recv`` for that step.

Successors of a type, exactly as ``Rules.apply`` accepts them:

* ``DynSlice(d, xs)`` for every ordered non-empty list ``xs`` of distinct
  axes unused by the type (and, for ``axes_ok``, used by ``dst``) whose group
  size divides the local size of ``d``;
* ``AllGather(d, xs)`` for every non-empty suffix ``xs`` of ``d``'s axes
  (``axes_ok``: none used by ``dst``);
* ``AllToAll(d, e, xs)`` for ``d != e``, every non-empty suffix ``xs`` of
  ``d``'s axes whose group size divides the local size of ``e``;
* ``AllPermute(t2)`` for every well-formed ``t2`` with the same global and
  local shape. These are enumerated per local shape (every way to give each
  dimension axes of the right group-size product, then every order within
  each dimension), once per local shape and problem. A permute from ``t``
  receives ``size(t)`` (or 0 when ``t2 = t``: with no axis of size 1,
  ``Checker.moves`` is false only then), whatever ``t2`` is, so the search
  routes permutes through one hub node per local shape: ``t -> hub(L)``
  costs ``size(t)``, ``hub(L) -> t2`` costs 0 for every ``t2`` of local
  shape ``L``. A path through the hub is exactly one ``AllPermute`` with
  its checker cost, so shortest paths are the same as with the explicit
  ``|class|^2`` permute edges (``--explicit-permutes`` uses those, for
  testing), while the edges are linear in the class.

The bound needs no test of its own: along a normal-form plan the local size
goes down, stays, then goes up (``Synth.normal_form_peak``), so every state
the search reaches is within the bound; it is asserted on the optimal plan
anyway. A gathering-phase state that is not ``dst`` with extra non-``dst``
axes at the minor end of some dimensions cannot reach ``dst`` and is not
generated (pruning only dead ends).

The optimal path is rebuilt as collectives and re-checked with
``verishard.check``: accepted, traffic equal to the search's distance,
normal form, ``axes_ok``, peak within the bound. Then
``lower_bound <= optimum <= ours`` is asserted (a violation of the first
would be a bug in the core's lower bound, of the second a bug here). Our
plan is ``verishard.plan``, computed live.

Usage: python bench/optimality.py [--per-axis N] [--cap S] [--seed K]
       [--axes 2,3,4,5,6] [--pairs-mesh SIZES:SHAPE | --no-pairs]
       [--save-before] [--before JSON] [--report MD] [--worst N]
Writes bench/results/optimality.md; the "before" column comes from
bench/results/optimality_before.json (written on the first run, or with
--save-before), the "after" column is this run (same settings: same
problems, so per-problem changes of our traffic are counted too).
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import itertools
import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import verishard as vs
from verishard import AllGather, AllPermute, AllToAll, DynSlice
from verishard import _core as _core_module
from verishard.optimal import _Space

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
BEFORE_JSON = RESULTS / "optimality_before.json"
REPORT_MD = RESULTS / "optimality.md"

SLICING, MIDDLE, GATHERING, HUB = 0, 1, 2, 3


class CapExceeded(Exception):
    pass


# --- problems ---------------------------------------------------------------


class Problem:
    """A problem over a mesh of axes ``a0..a{k-1}`` of sizes 2/3.

    Types are tuples (one per dimension) of tuples of axis indices, major first.
    """

    def __init__(self, sizes, gshape, src, dst):
        self.sizes = tuple(sizes)
        self.gshape = tuple(gshape)
        self.src = tuple(tuple(d) for d in src)
        self.dst = tuple(tuple(d) for d in dst)
        self.k, self.rank = len(self.sizes), len(self.gshape)
        self.mesh = vs.Mesh(tuple((f"a{i}", s) for i, s in enumerate(self.sizes)))
        self.names = tuple(f"a{i}" for i in range(self.k))
        self.dst_used = frozenset(a for d in self.dst for a in d)

    def group(self, axes) -> int:
        n = 1
        for a in axes:
            n *= self.sizes[a]
        return n

    def lshape(self, t) -> tuple[int, ...]:
        return tuple(g // self.group(d) for g, d in zip(self.gshape, t))

    def size(self, t) -> int:
        return math.prod(self.lshape(t))

    def wf(self, t) -> bool:
        used = [a for d in t for a in d]
        return (len(used) == len(set(used)) and all(0 <= a < self.k for a in used)
                and all(g % self.group(d) == 0 for g, d in zip(self.gshape, t)))

    def atype(self, t) -> vs.ArrayType:
        return vs.ArrayType.from_parts(self.mesh, self.gshape, t)

    def show(self, t) -> str:
        return str(self.atype(t))

    def collective(self, c):
        kind = c[0]
        if kind == "S":
            return DynSlice(c[1], tuple(self.names[a] for a in c[2]))
        if kind == "G":
            return AllGather(c[1], tuple(self.names[a] for a in c[2]))
        if kind == "A":
            return AllToAll(c[1], c[2], tuple(self.names[a] for a in c[3]))
        return AllPermute(self.atype(c[1]))

    def describe(self) -> str:
        return f"{self.mesh}: {self.show(self.src)} -> {self.show(self.dst)}"


def _rand_axes(rng: random.Random, k: int, rank: int, p: float):
    axes = list(range(k))
    rng.shuffle(axes)
    dims = [[] for _ in range(rank)]
    for a in axes:
        if rng.random() < p:
            dims[rng.randrange(rank)].append(a)
    return tuple(tuple(d) for d in dims)


def random_problem(rng: random.Random, k: int) -> Problem:
    """``k`` axes of size 2 or 3, rank 2-4; each axis shards a random dimension
    of src (and, independently, of dst) with probability 0.7, in random order;
    each global size is the least common multiple of the two group sizes times
    1, 2 or 3 (small sizes: divisibility then restricts the moves). src != dst."""
    while True:
        sizes = tuple(rng.choice((2, 3)) for _ in range(k))
        rank = rng.randint(2, 4)
        src, dst = _rand_axes(rng, k, rank, 0.7), _rand_axes(rng, k, rank, 0.7)
        if src == dst:
            continue
        grp = lambda d: math.prod(sizes[a] for a in d)
        gshape = tuple(math.lcm(grp(s), grp(t)) * rng.choice((1, 2, 3)) for s, t in zip(src, dst))
        return Problem(sizes, gshape, src, dst)


def all_types(sizes, gshape):
    """Every well-formed type of global shape ``gshape`` over axes of ``sizes``."""
    k, rank = len(sizes), len(gshape)
    out = []

    def rec(a, dims, rem):
        if a == k:
            for orders in itertools.product(*(itertools.permutations(d) for d in dims)):
                out.append(tuple(orders))
            return
        rec(a + 1, dims, rem)
        for d in range(rank):
            if rem[d] % sizes[a] == 0:
                dims[d].append(a)
                rem[d] //= sizes[a]
                rec(a + 1, dims, rem)
                rem[d] *= sizes[a]
                dims[d].pop()

    rec(0, [[] for _ in range(rank)], list(gshape))
    return out


# --- the legal steps (Rules.apply), with Checker.recv -------------------------


def _sequences(pool, limit_ok):
    """Ordered non-empty lists of distinct elements of ``pool`` whose every
    prefix satisfies ``limit_ok(prefix)`` (the group size divides a local size:
    a prefix divides whenever the whole does)."""
    out = []

    def rec(prefix, rest):
        for i, a in enumerate(rest):
            nxt = prefix + (a,)
            if limit_ok(nxt):
                out.append(nxt)
                rec(nxt, rest[:i] + rest[i + 1:])

    rec((), tuple(pool))
    return out


def slices(P: Problem, t, only_dst: bool):
    ls = P.lshape(t)
    used = {a for d in t for a in d}
    pool = [a for a in range(P.k) if a not in used and (not only_dst or a in P.dst_used)]
    for d in range(P.rank):
        for xs in _sequences(pool, lambda xs, l=ls[d]: l % P.group(xs) == 0):
            t2 = t[:d] + (t[d] + xs,) + t[d + 1:]
            yield ("S", d, xs), t2, 0


def gathers(P: Problem, t, only_non_dst: bool):
    s = P.size(t)
    for d in range(P.rank):
        A = t[d]
        for j in range(1, len(A) + 1):
            xs = A[len(A) - j:]
            if only_non_dst and xs[0] in P.dst_used:
                break  # longer suffixes contain it too
            t2 = t[:d] + (A[:len(A) - j],) + t[d + 1:]
            yield ("G", d, xs), t2, (P.group(xs) - 1) * s


def alltoalls(P: Problem, t):
    s, ls = P.size(t), P.lshape(t)
    for d in range(P.rank):
        A = t[d]
        for j in range(1, len(A) + 1):
            xs = A[len(A) - j:]
            N = P.group(xs)
            for e in range(P.rank):
                if e != d and ls[e] % N == 0:
                    t2 = list(t)
                    t2[d] = A[:len(A) - j]
                    t2[e] = t[e] + xs
                    yield ("A", d, e, xs), tuple(t2), s - s // N


class PermuteClasses:
    """Every well-formed type of a given local shape (same global shape),
    cached: ``verishard.optimal``'s enumeration of a permute's targets."""

    def __init__(self, P: Problem):
        self.P, self.cache, self.enumerated = P, {}, 0
        self.space = _Space(P.sizes, P.gshape, P.dst)

    def of(self, lshape):
        got = self.cache.get(lshape)
        if got is None:
            got = self.space.shape_class(lshape)
            self.cache[lshape] = got
            self.enumerated += len(got)
        return got


def permutes(P: Problem, t, classes: PermuteClasses):
    s = P.size(t)
    for t2 in classes.of(P.lshape(t)):
        yield ("P", t2), t2, (s if t2 != t else 0)


def legal_steps(P: Problem, t, classes: PermuteClasses | None = None):
    """Every collective ``Rules.apply`` accepts from ``t`` (no plan-class filter),
    with the type after it and ``Checker.recv``."""
    classes = classes or PermuteClasses(P)
    yield from slices(P, t, False)
    yield from gathers(P, t, False)
    yield from alltoalls(P, t)
    yield from permutes(P, t, classes)


# --- the search -----------------------------------------------------------------


def _gather_reachable(P: Problem, t) -> bool:
    """Gathers of non-dst axes alone can still turn ``t`` into ``dst``."""
    for A, B in zip(t, P.dst):
        if A[:len(B)] != B or any(a in P.dst_used for a in A[len(B):]):
            return False
    return True


def optimum(P: Problem, cap: float | None = None, explicit_permutes: bool = False):
    """Least traffic over the plan class; returns (traffic, plan as descriptors, stats).
    Raises CapExceeded after ``cap`` seconds."""
    t0 = time.perf_counter()
    classes = PermuteClasses(P)
    start = (SLICING, P.src)
    dist = {start: 0}
    prev = {start: None}
    heap = [(0, 0, start)]
    tick = itertools.count(1)
    settled = 0
    goal = None
    while heap:
        dcur, _, node = heapq.heappop(heap)
        if dcur > dist[node]:
            continue
        settled += 1
        if settled % 256 == 0 and cap is not None and time.perf_counter() - t0 > cap:
            raise CapExceeded
        phase, t = node
        if phase != HUB and t == P.dst:
            goal = node
            break
        if phase == HUB:
            succ = ((None, (MIDDLE, t2), 0) for t2 in classes.of(t))
        else:
            succ = []
            if phase == SLICING:
                succ += [(c, (SLICING, t2), w) for c, t2, w in slices(P, t, True)]
            if phase in (SLICING, MIDDLE):
                succ += [(c, (MIDDLE, t2), w) for c, t2, w in alltoalls(P, t)]
                if explicit_permutes:
                    succ += [(c, (MIDDLE, t2), w) for c, t2, w in permutes(P, t, classes) if t2 != t]
                else:
                    succ.append((None, (HUB, P.lshape(t)), P.size(t)))
            succ += [(c, (GATHERING, t2), w) for c, t2, w in gathers(P, t, True)
                     if _gather_reachable(P, t2)]
        for c, nxt, w in succ:
            nd = dcur + w
            if nd < dist.get(nxt, math.inf):
                dist[nxt] = nd
                prev[nxt] = (node, c)
                heapq.heappush(heap, (nd, next(tick), nxt))
    stats = {"settled": settled, "seen": len(dist), "classes": len(classes.cache),
             "class_types": classes.enumerated, "seconds": time.perf_counter() - t0}
    if goal is None:  # not expected on prime meshes: our own plan is in the class
        return None, None, stats
    plan, node = [], goal
    while prev[node] is not None:
        p, c = prev[node]
        if c is None and p[0] == HUB:
            c = ("P", node[1])
        if c is not None:
            plan.append(c)
        node = p
    plan.reverse()
    return dist[goal], plan, stats


def in_class(P: Problem, plan) -> bool:
    """``Synth.nf_slices`` and ``Synth.axes_ok`` on descriptors."""
    order = {"S": 0, "A": 1, "P": 1, "G": 2}
    ph = [order[c[0]] for c in plan]
    if ph != sorted(ph):
        return False
    for c in plan:
        if c[0] == "S" and not all(a in P.dst_used for a in c[2]):
            return False
        if c[0] == "G" and any(a in P.dst_used for a in c[2]):
            return False
    return True


def check_plan(P: Problem, plan):
    """The verified checker's figures for ``plan`` (descriptors)."""
    return vs.check(P.mesh, P.atype(P.src), P.atype(P.dst), [P.collective(c) for c in plan])


def sample_recv_check(P: Problem, rng: random.Random, n: int = 40) -> int:
    """Compare our ``recv`` with the checker's on ``n`` random legal single steps
    from random types; returns the number compared."""
    classes = PermuteClasses(P)
    types = all_types(P.sizes, P.gshape)
    done = 0
    for _ in range(n):
        t = rng.choice(types)
        steps = list(legal_steps(P, t, classes))
        c, t2, w = rng.choice(steps)
        ok = vs.core.check(P.mesh, P.atype(t), P.atype(t2), [P.collective(c)])
        assert ok.received == (w,), (P.describe(), c, ok.received, w)
        assert ok.types[-1] == P.atype(t2)
        done += 1
    return done


# --- one problem ------------------------------------------------------------------


def solve(P: Problem, cap: float):
    ours = vs.plan(P.mesh, P.atype(P.src), P.atype(P.dst))
    assert str(ours.mesh) == str(P.mesh), (P.describe(), str(ours.mesh))
    lb = ours.lower_bound
    rec = {"problem": P.describe(), "lb": lb, "ours": ours.traffic,
           "ours_plan": [str(c) for c in ours.collectives], "opt": None}
    try:
        opt, plan, stats = optimum(P, cap)
    except CapExceeded:
        rec["capped"] = True
        return rec
    rec.update(capped=False, stats=stats)
    assert plan is not None, P.describe()
    r = check_plan(P, plan)
    bound = max(P.size(P.src), P.size(P.dst))
    assert r.traffic == opt and r.peak <= bound and in_class(P, plan), (P.describe(), plan)
    assert lb <= opt, f"lower bound above the optimum (bug in the core): {P.describe()} lb {lb} opt {opt}"
    assert opt <= ours.traffic, f"our plan beats the optimum (bug in this search): {P.describe()}"
    rec["opt"] = opt
    rec["opt_plan"] = [str(c) for c in r.collectives]
    return rec


# --- figures -----------------------------------------------------------------------


def ratio(a: int, b: int) -> float:
    if b == 0:
        return 1.0 if a == 0 else math.inf
    return a / b


def geomean(xs) -> float:
    xs = [x for x in xs if math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def summarize(recs) -> dict:
    solved = [r for r in recs if r["opt"] is not None]
    capped = sum(1 for r in recs if r.get("capped"))
    o_opt = [ratio(r["ours"], r["opt"]) for r in solved]
    o_lb = [ratio(r["ours"], r["lb"]) for r in recs]
    opt_lb = [ratio(r["opt"], r["lb"]) for r in solved]
    n = len(recs)
    st = [r["stats"] for r in solved]
    return {
        "problems": n, "solved": len(solved), "capped": capped,
        "ours_at_lb": sum(r["ours"] == r["lb"] for r in recs) / n if n else float("nan"),
        "ours_at_opt": sum(r["ours"] == r["opt"] for r in solved) / len(solved) if solved else float("nan"),
        "opt_at_lb": sum(r["opt"] == r["lb"] for r in solved) / len(solved) if solved else float("nan"),
        "geo_ours_opt": geomean(o_opt), "max_ours_opt": max(o_opt, default=float("nan")),
        "geo_ours_lb": geomean(o_lb), "max_ours_lb": max(o_lb, default=float("nan")),
        "geo_opt_lb": geomean(opt_lb), "max_opt_lb": max(opt_lb, default=float("nan")),
        "opt_lb_ours_not": sum(1 for r in solved if r["opt"] == r["lb"] < r["ours"]),
        "inf": sum(1 for x in o_lb + opt_lb if not math.isfinite(x)),
        "max_settled": max((s["settled"] for s in st), default=0),
        "mean_settled": sum(s["settled"] for s in st) / len(st) if st else 0,
        "max_class_types": max((s["class_types"] for s in st), default=0),
        "max_seconds": max((s["seconds"] for s in st), default=0),
    }


ROWS = [
    ("problems", "problems", "{:d}"),
    ("solved", "solved exactly", "{:d}"),
    ("capped", "hit the time cap", "{:d}"),
    ("ours_at_lb", "ours at the lower bound", "{:.1%}"),
    ("ours_at_opt", "ours at the optimum (solved)", "{:.1%}"),
    ("opt_at_lb", "optimum at the lower bound", "{:.1%}"),
    ("opt_lb_ours_not", "optimum at the lower bound, ours above it", "{:d}"),
    ("geo_ours_opt", "geomean ours / optimum", "{:.3f}"),
    ("max_ours_opt", "max ours / optimum", "{:.2f}"),
    ("geo_ours_lb", "geomean ours / lower bound", "{:.3f}"),
    ("max_ours_lb", "max ours / lower bound", "{:.2f}"),
    ("geo_opt_lb", "geomean optimum / lower bound", "{:.3f}"),
    ("max_opt_lb", "max optimum / lower bound", "{:.2f}"),
    ("mean_settled", "mean states settled", "{:.0f}"),
    ("max_settled", "max states settled", "{:d}"),
    ("max_class_types", "max permute-class types enumerated", "{:d}"),
    ("max_seconds", "max search seconds (solved)", "{:.2f}"),
]


def fmt(spec, v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and not math.isfinite(v):
        return "inf" if v > 0 else "–"
    return spec.format(v)


def table(groups, after: dict, before: dict | None, before_label: str, after_label: str) -> str:
    cols = []
    for g in groups:
        if before is not None:
            cols += [(g, "before"), (g, "after")]
        else:
            cols += [(g, "now")]
    head = "| | " + " | ".join(f"{g} {w}" for g, w in cols) + " |"
    sep = "|---|" + "---:|" * len(cols)
    lines = [head, sep]
    for key, label, spec in ROWS:
        cells = []
        for g, w in cols:
            src = before if w == "before" else after
            s = (src or {}).get(g)
            cells.append(fmt(spec, s.get(key)) if s else "–")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def worst(recs, n=6):
    solved = [r for r in recs if r["opt"] is not None and r["ours"] > r["opt"]]
    solved.sort(key=lambda r: (-ratio(r["ours"], r["opt"]), -(r["ours"] - r["opt"])))
    out = []
    for r in solved[:n]:
        out.append(f"- `{r['problem']}`: ours {r['ours']}, optimum {r['opt']}, lower bound {r['lb']}\n"
                   f"  - ours: `{'; '.join(r['ours_plan']) or '(empty)'}`\n"
                   f"  - optimum: `{'; '.join(r['opt_plan']) or '(empty)'}`")
    return "\n".join(out) if out else "(none: ours is at the optimum on every solved problem)"


def problems_digest(recs) -> str:
    return hashlib.sha256("\n".join(r["problem"] for r in recs).encode()).hexdigest()[:16]


def version() -> dict:
    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=HERE.parent, capture_output=True, text=True).stdout.strip()
        except OSError:
            return "?"
    so = Path(_core_module.__file__) if getattr(_core_module, "__file__", None) else None  # the core imported
    digest = hashlib.sha256(so.read_bytes()).hexdigest()[:12] if so else "?"
    dirty = bool(git("status", "--porcelain", "--", "python", "coq", "bindings"))
    return {"commit": git("rev-parse", "--short", "HEAD"), "core_sha256": digest, "dirty": dirty}


def label(v: dict) -> str:
    out = (f"commit {v['commit']}{' (working tree modified)' if v.get('dirty') else ''}, "
           f"_core sha256 {v['core_sha256']}")
    if v.get("changed_during_run"):
        out += f"; during the run the tree changed to {label(v['changed_during_run'])}"
    return out


# --- main -------------------------------------------------------------------------------


PAIRS_DEFAULT = "2,2,3,3:36,36"  # every src/dst pair over this mesh and global shape


def parse_pairs(text: str):
    sizes, shape = text.split(":")
    return tuple(int(x) for x in sizes.split(",")), tuple(int(x) for x in shape.split(","))


def run(args):
    groups, results, t_start = [], {}, time.perf_counter()
    rng_sample = random.Random(args.seed + 1)
    sampled = 0
    for k in args.axes:
        g, recs = f"{k} axes", []
        for i in range(args.per_axis):
            P = random_problem(random.Random(f"{args.seed}:{k}:{i}"), k)
            if i < 2:
                sampled += sample_recv_check(P, rng_sample, 25)
            recs.append(solve(P, args.cap))
        groups.append(g)
        results[g] = recs
        s = summarize(recs)
        print(f"{g}: {s['solved']}/{s['problems']} solved, {s['capped']} capped, "
              f"ours at opt {s['ours_at_opt']:.1%}, {time.perf_counter() - t_start:.0f}s", flush=True)
    if args.pairs:
        sizes, gshape = parse_pairs(args.pairs_mesh)
        types = all_types(sizes, gshape)
        recs = []
        for a in types:
            for b in types:
                if a != b:
                    recs.append(solve(Problem(sizes, gshape, a, b), args.cap))
        g = "all pairs"
        groups.append(g)
        results[g] = recs
        s = summarize(recs)
        print(f"{g}: {s['solved']}/{s['problems']} solved, {time.perf_counter() - t_start:.0f}s", flush=True)
    return groups, results, sampled, time.perf_counter() - t_start


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-axis", type=int, default=300, help="random problems per number of mesh axes")
    ap.add_argument("--cap", type=float, default=3.0, help="seconds per problem for the exact search")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--axes", default="2,3,4,5,6", help="numbers of mesh axes, comma-separated")
    ap.add_argument("--pairs-mesh", default=PAIRS_DEFAULT,
                    help="'SIZES:SHAPE': also solve every ordered pair of distinct types of global shape "
                         "SHAPE over axes of SIZES (default %(default)s)")
    ap.add_argument("--no-pairs", dest="pairs", action="store_false", help="skip the all-pairs group")
    ap.add_argument("--before", type=Path, default=BEFORE_JSON, help="the saved 'before' figures (JSON)")
    ap.add_argument("--report", type=Path, default=REPORT_MD, help="where to write the report")
    ap.add_argument("--worst", type=int, default=3, help="worst cases listed per group")
    ap.add_argument("--save-before", action="store_true",
                    help="write this run as the 'before' figures (--before), even if they exist")
    args = ap.parse_args(argv)
    args.axes = [int(x) for x in args.axes.split(",")]
    cmd = " ".join(["python bench/optimality.py", *(sys.argv[1:] if argv is None else argv)])

    v = version()  # the code this run measures: read before it starts
    groups, results, sampled, elapsed = run(args)
    v_end = version()
    if v_end != v:
        v["changed_during_run"] = v_end
    summ = {g: summarize(results[g]) for g in groups}
    settings = {"per_axis": args.per_axis, "cap": args.cap, "seed": args.seed, "axes": args.axes,
                "pairs": args.pairs_mesh if args.pairs else None}
    per_problem = {g: {"problems_sha256": problems_digest(results[g]),
                       "ours": [r["ours"] for r in results[g]]} for g in groups}
    payload = {"version": v, "settings": settings, "command": cmd, "seconds": round(elapsed, 1),
               "summary": summ, "per_problem": per_problem}

    before = None
    if args.before.exists() and not args.save_before:
        before = json.loads(args.before.read_text())
        if before.get("settings") != settings:
            print(f"note: {args.before} was made with {before.get('settings')}, not {settings}; "
                  "showing it anyway (problems differ)")
    else:
        args.before.write_text(json.dumps(payload, sort_keys=True, separators=(",", ":")) + "\n")

    pairs_text = ""
    if args.pairs:
        sizes, gshape = parse_pairs(args.pairs_mesh)
        m = Problem(sizes, gshape, ((),) * len(gshape), ((),) * len(gshape)).mesh
        pairs_text = (f"\"all pairs\": every ordered pair of distinct types of global shape "
                      f"{gshape} over {m}. ")
    lines = ["# Exact optimum traffic over the plan class\n",
             f"`{cmd}` ({elapsed:.0f} s on this machine; see the script's docstring for the search). "
             "Per problem: the least traffic over every plan in `Synth.validate`'s class (checker-accepted, "
             "normal form, `axes_ok`, within the bound), found by Dijkstra and re-checked with "
             "`verishard.check`; `lower_bound <= optimum <= ours` asserted on every solved problem. "
             f"Our `recv` formula was also compared with the checker's on {sampled} random single steps.\n",
             "Random problems: mesh of k axes of size 2 or 3 (the mesh is its own prime refinement), "
             "arrays of rank 2-4, each axis sharding a random dimension of src (and of dst) with "
             "probability 0.7, global sizes lcm(src group, dst group) x {1,2,3}; "
             f"{args.per_axis} per k, cap {args.cap:g} s per search. " + pairs_text + "A ratio with a zero denominator "
             "counts as 1 when the numerator is 0 too (inf otherwise, left out of the geomean).\n"]
    if before is not None:
        lines.append(f"## Before ({label(before['version'])}) and after ({label(v)})\n")
        lines.append(f"Before: `{before.get('command')}`; after: `{cmd}`.\n")
        lines.append(table(groups, summ, before["summary"], label(before["version"]), label(v)))
        lines.append("")
        # per-problem changes where the problems are the same
        for g in groups:
            old = before.get("per_problem", {}).get(g)
            if not old or old["problems_sha256"] != per_problem[g]["problems_sha256"]:
                lines.append(f"- {g}: other problems than before, no per-problem comparison")
                continue
            pairs = list(zip(old["ours"], per_problem[g]["ours"]))
            better = sum(1 for a, b in pairs if b < a)
            worse = sum(1 for a, b in pairs if b > a)
            lines.append(f"- {g}: ours improved on {better}, got worse on {worse} of {len(pairs)} problems")
        lines.append("")
    else:
        lines.append(f"## Before: {label(v)}\n")
        lines.append(table(groups, summ, None, "", ""))
        lines.append("")
    lines.append("## Where ours exceeds the optimum most\n")
    lines.append(f"Per group, the {args.worst} problems with the largest ours / optimum (then the largest "
                 "difference); plans as `verishard.plan` and the search return them.\n")
    for g in groups:
        lines.append(f"### {g}\n")
        lines.append(worst(results[g], args.worst))
        lines.append("")
    if any(s["inf"] for s in summ.values()):
        lines.append("Some ratios had a zero denominator and a positive numerator (shown as inf).\n")
    text = "\n".join(lines)
    args.report.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
