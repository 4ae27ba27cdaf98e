"""Planning time through Python, against a naive gather-all planner in the same run.

For array ranks 1-4 and meshes of 1-6 axes (axis sizes 2, 3, 4), random
source/target pairs are planned three ways:

  core     the extracted synthesizer through the binding, on pre-encoded
           refined inputs (`verishard._core.synthesize`): the verified planner's
           own cost plus one Python->OCaml call;
  plan()   the full public path `verishard.plan(mesh, src, dst)`: one call
           into the verified pipeline (`Pipeline.plan_problem`: refinement,
           synthesis, re-expression over the coarsest mesh, validation) and
           decoding its report into Python objects;
  naive    a plain-Python gather-every-axis-then-slice planner that builds the
           same collective objects (no checking): the baseline.

Each case is timed as the median of REPEAT calls; the table reports the median
and p99 over cases, and ratios to the naive planner. Writes
bench/results/planner.md. Usage: python bench/planner.py [--cases N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from math import prod
from pathlib import Path

import verishard as vs
from verishard import AllGather, DynSlice, _core

REPEAT = 15


def random_problem(rng: random.Random, rank: int, k: int):
    sizes = [rng.choice([2, 2, 3, 4]) for _ in range(k)]
    names = [f"a{i}" for i in range(k)]
    mesh = vs.Mesh(tuple(zip(names, sizes)))

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
    samples = []
    for _ in range(REPEAT):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1000.0   # microseconds


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=60, help="random cases per (rank, axes) cell")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "planner.md"))
    args = ap.parse_args()
    rng = random.Random(20261202)
    rows = []
    header = ("| rank | axes | core median us | core p99 us | plan() median us | plan() p99 us "
              "| naive median us | core/naive | plan()/naive |")
    print(header)
    print("|" + "---|" * 9)
    lines = [header, "|" + "---|" * 9]
    for rank in range(1, 5):
        for k in range(1, 7):
            core_t, full_t, naive_t = [], [], []
            for _ in range(args.cases):
                mesh, src, dst = random_problem(rng, rank, k)
                fine = mesh.refined()
                ints = fine.encode() + src.refined().encode() + dst.refined().encode()
                core_t.append(timed(lambda: _core.synthesize(ints)))
                full_t.append(timed(lambda: vs.plan(mesh, src, dst)))
                naive_t.append(timed(lambda: naive_plan(src, dst)))
            cm, fm, nm = (statistics.median(x) for x in (core_t, full_t, naive_t))
            row = (f"| {rank} | {k} | {cm:.1f} | {p99(core_t):.1f} | {fm:.1f} | {p99(full_t):.1f} "
                   f"| {nm:.1f} | {cm / nm:.2f} | {fm / nm:.2f} |")
            print(row, flush=True)
            lines.append(row)
            rows.append((rank, k, cm, fm, nm))
    target = [r for r in rows if r[0] == 4 and r[1] == 4][0]
    summary = (f"\nTarget (rank 4, 4 axes): core synthesizer median {target[2]:.1f} us "
               f"(target < 20 us: {'met' if target[2] < 20 else 'NOT met'}); full verishard.plan() "
               f"median {target[3]:.1f} us; naive Python planner {target[4]:.1f} us.")
    print(summary)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        "# Planner benchmark\n\nCommand: `make bench` (= `.venv/bin/python bench/planner.py`); "
        f"{args.cases} random cases per cell, each timed as the median of {REPEAT} calls; "
        "times in microseconds on this machine (2 cores).\n\n" + "\n".join(lines) + "\n" + summary + "\n")


if __name__ == "__main__":
    main()
