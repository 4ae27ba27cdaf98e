"""Cross-check benchmark: our plans, the naive plan, XLA and PyTorch DTensor
on every pair of types (or a deterministic sample) for a few shapes and
meshes, plus known hard cases from the planners' issue trackers.

    .venv/bin/python bench/crosscheck.py            # full run (about 10 minutes on 2 cores)
    .venv/bin/python bench/crosscheck.py --quick    # a few cases, for a smoke test

Writes under bench/results/ (or --out):
  crosscheck.md         the report: summary, known cases, method
  crosscheck_table.md   every (case, planner) row and every timing
  crosscheck_memory.png peak / max(size(src), size(dst)) per case and planner
  crosscheck_time.png   t_xla / t_ours per timed case
  crosscheck_partial.md partial-sum sources (pending sums) against XLA and
                        DTensor, judged by execution (verishard.crosscheck.partial)
  crosscheck_uneven.md  uneven shapes (sizes the shards do not divide) against
                        XLA and DTensor, judged by execution (verishard.crosscheck.uneven)

    .venv/bin/python bench/crosscheck.py --only partial   # the partial-sum part alone
    .venv/bin/python bench/crosscheck.py --only uneven    # the uneven part alone (about 2 minutes)
The summary is computed from the table rows only (harness.summarize), so it
can be recomputed from crosscheck_table.md (harness.read_table).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
if "--xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import numpy as np  # noqa: E402

from verishard.crosscheck import harness  # noqa: E402
from verishard.crosscheck.harness import PLANNERS, Case, grid_cases, known_cases, run_case  # noqa: E402

# (mesh, shape, sample size or None for every pair)
GRID = [
    ("x=8", (16, 16), None),
    ("x=4,y=2", (16, 16), None),
    ("x=2,y=2,z=2", (16, 16), 150),
    ("x=8", (8, 16, 32), None),
    ("x=4,y=2", (8, 16, 32), None),
    ("x=2,y=2,z=2", (8, 16, 32), 150),
    ("x=8", (64, 64, 64), None),
    ("x=4,y=2", (64, 64, 64), 80),
    ("x=2,y=2,z=2", (64, 64, 64), 80),
]
QUICK = [("x=4,y=2", (16, 16), 6), ("x=2,y=2,z=2", (8, 16, 32), 6)]


def build_cases(grid, seed: int) -> tuple[list[Case], list[str]]:
    cases, notes = [], []
    for mesh, shape, limit in grid:
        cs, total = grid_cases(mesh, shape, limit, seed)
        cases += cs
        what = "all" if len(cs) == total else f"a deterministic sample (seed {seed}) of {len(cs)}"
        notes.append(f"| {{{mesh.replace('=', ':')}}} | {'x'.join(map(str, shape))} | "
                     f"{int(round(total ** 0.5))} | {total} | {what} |")
    return cases, notes


def fmt(x, pct=False, digits=3):
    if x is None:
        return "-"
    return f"{100 * x:.1f}%" if pct else f"{x:.{digits}f}"


def plots(rows, timings, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({r.case for r in rows})
    pos = {k: i for i, k in enumerate(cases)}
    names = list(dict.fromkeys(r.planner for r in rows))
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(14, 4.8), gridspec_kw={"width_ratios": [2.2, 1]})
    markers = {"ours": "o", "naive": "x", "xla": "s", "dtensor-greedy": "^", "dtensor-mincost": "v"}
    for j, name in enumerate(names):
        pts = [(pos[r.case], r.peak / r.bound) for r in rows if r.planner == name and r.peak is not None]
        if not pts:
            continue
        lift = 2 ** (0.07 * (j - (len(names) - 1) / 2))  # separate the planners at each level
        ax.scatter([p[0] for p in pts], [p[1] * lift for p in pts], marker=markers.get(name, "o"), s=8,
                   label=name, alpha=0.7)
        vals = np.sort([p[1] for p in pts])
        ax2.step(vals, np.arange(1, len(vals) + 1) / len(vals), where="post", label=name)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("case")
    ax.set_ylabel("peak / max(size(src), size(dst))")
    ax.set_title("Peak memory per device over the bound, per case (1 = optimal)")
    ax.legend(loc="upper left", fontsize=8)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("peak / max(size(src), size(dst))")
    ax2.set_ylabel("fraction of cases at or below")
    ax2.set_title("Distribution")
    ax2.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "crosscheck_memory.png"), dpi=110)
    plt.close(fig)
    if timings:
        ks = sorted(timings)
        ratios = [timings[k][0] / timings[k][1] for k in ks]
        fig, ax = plt.subplots(figsize=(12, 4.5))
        ax.scatter(range(len(ks)), ratios, s=6)
        ax.axhline(1.0, color="gray", lw=0.8)
        g = float(np.exp(np.mean(np.log(ratios))))
        ax.axhline(g, color="tab:red", lw=0.8, ls="--", label=f"geometric mean {g:.2f}x")
        ax.legend(loc="upper left", fontsize=8)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("timed case")
        ax.set_ylabel("t_xla / t_ours  (> 1: ours faster)")
        ax.set_title("Wall time of XLA's reshard over our JAX backend's (8 CPU devices, median of runs)")
        fig.tight_layout()
        fig.savefig(os.path.join(out, "crosscheck_time.png"), dpi=110)
        plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a handful of cases")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=25)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-time", action="store_true", help="skip the wall-time comparison")
    ap.add_argument("--planners", default=",".join(PLANNERS))
    ap.add_argument("--only", choices=("plain", "partial", "uneven"), help="run one part only")
    args = ap.parse_args(argv)
    if args.only in (None, "partial"):
        partial_part(args)
    if args.only in (None, "uneven"):
        uneven_part(args)
    if args.only in ("partial", "uneven"):
        return 0

    import jax
    import torch

    from verishard.crosscheck.timing import time_pair
    planners = [p for p in args.planners.split(",") if p]
    cases, grid_notes = build_cases(QUICK if args.quick else GRID, args.seed)
    known = known_cases()
    all_cases = known + cases
    start = time.time()
    rows, timings, known_results, mem_rows = [], {}, {}, []
    ours_guaranteed = set()
    for k, case in enumerate(all_cases):
        res: dict = {}
        rows += run_case(k, case, planners, results=res)
        if k < len(known):
            known_results[k] = res
        ours = res.get("ours")
        if ours is not None and ours.plan is not None:
            ours_guaranteed.add(ours.extra.get("guaranteed"))
            if not args.no_time:
                t = time_pair(ours.plan, args.repeats, args.warmup)
                timings[k] = (t.xla_seconds, t.ours_seconds)
                mem_rows.append((k, t.xla_memory["total"], t.ours_memory["total"]))
        if k % 50 == 0:
            print(f"[{time.time() - start:6.1f}s] case {k}/{len(all_cases)}", flush=True)
    elapsed = time.time() - start
    summary = harness.summarize(rows, timings)
    os.makedirs(args.out, exist_ok=True)
    table = harness.table_markdown(rows, timings)
    with open(os.path.join(args.out, "crosscheck_table.md"), "w") as f:
        f.write("# Cross-check table\n\nOne row per (case, planner); sizes in bytes per device (float32). "
                "`peak`: the largest array a device holds; `bound`: max(size(src), size(dst)); "
                "`received`: elements received per device, summed over steps (each step's worst device); "
                "`lower bound`: the model's transfer lower bound. Then one row per timed case "
                "(microseconds, median).\n\n")
        f.write(table)
    plots(rows, timings, args.out)
    report = render_report(args, summary, rows, known, known_results, grid_notes, mem_rows, elapsed,
                           jax.__version__, torch.__version__, ours_guaranteed, len(all_cases), timings)
    with open(os.path.join(args.out, "crosscheck.md"), "w") as f:
        f.write(report)
    print(report)
    return 0


# (mesh, shape, sample size) of the partial-sum part
PARTIAL_GRID = [("x=4,y=2", (16, 16), None), ("x=2,y=2,z=2", (16, 16), 200), ("x=4,y=2", (8, 16, 32), 150),
                ("x=2,y=2,z=2", (8, 16, 32), 200)]
PARTIAL_QUICK = [("x=4,y=2", (16, 16), 6), ("x=2,y=2,z=2", (8, 16, 32), 6)]


def _run_grid(kind: str, grid, make_cases, run_one, seed: int):
    """Run ``run_one(k, case)`` on the cases ``make_cases`` draws for every
    (mesh, shape, limit) of ``grid``; the results, the report's sampling
    rows, and the seconds taken."""
    start = time.time()
    results, notes = [], []
    for mesh, shape, limit in grid:
        cs, total = make_cases(mesh, shape, limit, seed)
        what = "all" if len(cs) == total else f"a deterministic sample (seed {seed}) of {len(cs)}"
        notes.append(f"| {{{mesh.replace('=', ':')}}} | {'x'.join(map(str, shape))} | {total} | {what} |")
        for k, c in enumerate(cs):
            results.append((c, run_one(k, c)))
        print(f"[{time.time() - start:6.1f}s] {kind} {mesh} {shape}: {len(cs)} cases", flush=True)
    return results, notes, time.time() - start


def partial_part(args) -> None:
    """Partial-sum sources: every planner's program on one random integer
    representation, judged by the represented value on every device."""
    import jax
    import torch

    from verishard.crosscheck.partial import PLANNERS as PP, partial_cases, run_partial
    results, notes, elapsed = _run_grid("partial", PARTIAL_QUICK if args.quick else PARTIAL_GRID, partial_cases,
                                        lambda k, c: run_partial(c, PP, seed=args.seed + k), args.seed)
    n = len(results)
    L = ["# Cross-check, partial sums: our plans against XLA and PyTorch DTensor", "",
         f"Command: `.venv/bin/python bench/crosscheck.py --only partial` (also part of the full run). "
         f"{n} cases in {elapsed:.0f} s on {os.cpu_count()} CPU cores; JAX {jax.__version__} (`unreduced` "
         f"axes on Explicit meshes), torch {torch.__version__} (DTensor's planner on a fake process group).", "",
         "Each source has at least one mesh axis pending a sum (JAX `unreduced`, DTensor `Partial(\"sum\")`); "
         "each target is any plain or partial type. Every planner's program runs on the same random integer "
         "representation of the global array (`verishard.runtime.split_partial`): ours in the simulator "
         "(the plan accepted by `Pchecker.pcheck`), XLA's compiled HLO in the cross-check's interpreter and "
         "on the devices by XLA itself (the two must agree), DTensor's transforms replayed with DTensor's "
         "data semantics (float64: its Replicate -> Partial(\"sum\") divides by the group size). *correct*: "
         "the value every device represents (the sum over its pending group; its array for a plain target) "
         "is its target block. Only our plans are judged by the checker; the others by that execution. "
         "Peak: the largest array a program holds at a step per device (elements); bound: "
         "max(size(src), size(dst)); received: per step the most any device receives, summed (all-reduce "
         "as a ring, 2(s - s/n); reduce-scatter s - s/n), for every planner. See "
         "`python/verishard/crosscheck/partial.py`.", "",
         "| mesh | shape | pairs | cases |", "|---|---|---|---|", *notes, "",
         "## Summary", "",
         "| planner | cases | correct | wrong data | refused | error | peak > bound | received / ours (geomean, "
         "where both correct) | worse than ours / better | all-reduces | reduce-scatters |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    ours = {id(c): next(r for r in rs if r.planner == "ours") for c, rs in results}
    for name in PP:
        rs = [(c, next(r for r in res if r.planner == name)) for c, res in results]
        st = {k: sum(1 for _, r in rs if r.status == k) for k in ("correct", "wrong_data", "unsupported", "error")}
        over = sum(1 for c, r in rs if r.peak is not None and r.peak > c.bound)
        have = [(c, r) for c, r in rs if r.status == "correct" and ours[id(c)].status == "correct"]
        ratios = [(r.received + 1) / (ours[id(c)].received + 1) for c, r in have]
        geo = float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan")
        worse = sum(1 for c, r in have if r.received > ours[id(c)].received)
        better = sum(1 for c, r in have if r.received < ours[id(c)].received)
        ar = sum(r.kinds.get("AllReduce", 0) + r.kinds.get("all-reduce", 0) for _, r in rs)
        rsc = sum(r.kinds.get("ReduceScatter", 0) + r.kinds.get("reduce-scatter", 0) for _, r in rs)
        L.append(f"| {name} | {n} | {st['correct']} | {st['wrong_data']} | {st['unsupported']} | {st['error']} | "
                 f"{over}/{n} ({100 * over / n:.1f}%) | {geo:.3f} (+1 smoothed) | {worse} / {better} | {ar} | {rsc} |")
    xbad = [(c, r) for c, res in results for r in res if r.planner == "xla" and r.status == "wrong_data"]
    if xbad:
        confirmed = sum(1 for _, r in xbad if "does not give" in r.reason)
        perm = sum(1 for _, r in xbad if any("collective-permute" in p for p in r.program))
        ptarget = sum(1 for c, _ in xbad if c.dst.partial)
        L += ["", f"XLA's program gives a wrong value in {len(xbad)} cases, {ptarget} of them with a partial "
              f"target; XLA's own "
              f"run on the devices agrees with the interpreter in every one, and JAX's own reduction of XLA's "
              f"result (`jax.sharding.reshard` to the target without its unreduced axes) differs from the array "
              f"in {confirmed} of them. {perm} of them move the unreduced terms with a collective-permute that "
              f"sends terms of the same pending index into one pending group: read by hand on "
              f"`[8, 16, 16{{z}}32] partial{{y}}` -> `[8, 16, 16{{x}}32] partial{{y}}` over {{x:2,y:2,z:2}} "
              f"(`tests/test_crosscheck_partial.py`), target devices (0,0,1) and (0,1,1), one group over y, "
              f"receive from (0,1,0) and (1,1,0), which both hold the y = 1 term: the group's sum counts that "
              f"term twice and the y = 0 term not at all."]
    L += ["", "## Cases where a planner is wrong or errs", "",
          "| mesh | src | dst | planner | status | program |", "|---|---|---|---|---|---|"]
    bad = [(c, r) for c, res in results for r in res if r.status in ("wrong_data", "error")]
    for c, r in bad[:40]:
        L.append(f"| {c.mesh} | `{c.src}` | `{c.dst}` | {r.planner} | {r.status}{' (' + r.reason + ')' if r.reason else ''} "
                 f"| {'; '.join(r.program)} |")
    if len(bad) > 40:
        L.append(f"| ... | {len(bad) - 40} more | | | | |")
    L += ["", "## Refusals (first reason per planner)", ""]
    for name in PP:
        why = [r.reason for _, res in results for r in res if r.planner == name and r.status == "unsupported"]
        if why:
            L.append(f"- {name}: {len(why)} refused; e.g. {why[0][:200]}")
    report = "\n".join(L) + "\n"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "crosscheck_partial.md"), "w") as f:
        f.write(report)
    print(report)


# (mesh, shape, sample size or None for every pair) of the uneven part: meshes of 4 and 8 devices
UNEVEN_GRID = [("x=4", (5, 7), None), ("x=2,y=2", (5, 7), None), ("x=2,y=2", (3, 6, 5), 60),
               ("x=8", (5, 12), None), ("x=4,y=2", (5, 7), 80), ("x=2,y=4", (9,), None),
               ("x=2,y=2,z=2", (5, 7), 80), ("x=2,y=2,z=2", (3, 6), 40)]
UNEVEN_QUICK = [("x=2,y=2", (5, 7), 6), ("x=2,y=2,z=2", (3, 6), 6)]


def _geomean(xs) -> float:
    return float(np.exp(np.mean(np.log(xs)))) if xs else float("nan")


def uneven_part(args) -> None:
    """Uneven shapes: every planner's program on the same array, judged by
    execution; peaks over padded blocks against max(size(src), size(dst))."""
    import jax
    import torch

    from verishard.crosscheck.uneven import PLANNERS as UP, run_uneven, uneven_cases
    results, notes, elapsed = _run_grid("uneven", UNEVEN_QUICK if args.quick else UNEVEN_GRID, uneven_cases,
                                        lambda k, c: {r.planner: r for r in run_uneven(c, UP)}, args.seed)
    report = render_uneven(args, results, notes, elapsed, jax.__version__, torch.__version__, UP)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "crosscheck_uneven.md"), "w") as f:
        f.write(report)
    print(report)


def render_uneven(args, results, notes, elapsed, jax_version, torch_version, planners) -> str:
    n = len(results)
    L = ["# Cross-check, uneven shapes: our plans against XLA and PyTorch DTensor", "",
         f"Command: `.venv/bin/python bench/crosscheck.py --only uneven{' --quick' if args.quick else ''}` "
         f"(also part of the full run). {n} cases in {elapsed:.0f} s on {os.cpu_count()} CPU cores; JAX "
         f"{jax_version} on 8 host-platform CPU devices (meshes of 4 and 8), torch {torch_version} (DTensor's "
         f"planner on a fake process group).", "",
         "Every case is a pair of types over whole mesh axes, at least one of them uneven: a dimension of size "
         "`g` split into `n` blocks that `n` does not divide has blocks of `c = ceil(g / n)`, the trailing ones "
         "short or empty (XLA pads every device's buffer to `c`; DTensor keeps `torch.chunk`'s short chunks). "
         "Every planner's program runs on the same array, whose elements carry `1 + their global index`; "
         "*correct* means the valid part of every device's block is its block of the target, compared with "
         "numpy. Only our plans are also judged by the verified checker (`Uchecker`); the others by execution "
         "only. See `python/verishard/crosscheck/uneven.py`.", "",
         "- **ours**: `verishard.plan`'s plan, run by the shared executor on the simulator's backend over padded "
         "buffers (each step an even collective between a local pad and cut, `backend.run_step`).",
         "- **ours-jax**: the same plan through `verishard.jax.reshard(x, sharding, src=...)` under `jax.jit`, "
         "compiled by XLA, run by XLA on the devices and by the cross-check's HLO interpreter (the two must "
         "agree); its compiled collectives are counted against the plan's communicating steps.",
         "- **xla**: XLA's own reshard in the same program (`with_sharding_constraint` to the source, then to "
         "the target), run the same two ways. In JAX 0.10 an array whose shape its sharding does not divide "
         "exists only inside `jax.jit` on Auto axes (`jax.device_put`, a jit's in/out shardings and Explicit-mode "
         "types refuse it), so both XLA programs take the padded global source array (an even array), cut it "
         "to the global shape, constrain it to the source sharding, reshard, and pad the result to the target's "
         "padded global shape; the cut and the pad are local (ours-jax's collectives below equal the plan's).",
         "- **dtensor-greedy / dtensor-mincost**: DTensor's transforms (its planner functions, as in the plain "
         "cross-check) replayed with DTensor's data semantics on its chunked buffers. Where several mesh "
         "dimensions shard one uneven tensor dimension, DTensor chunks each chunk again, which is another layout "
         "than the type's (5 over 2 x 2: 2, 1, 1, 1 against 2, 2, 1, 0): that case is a different problem for "
         "DTensor, reported *unsupported* with the reason (`verishard.torch.dtensor.layout_mismatches`).", "",
         "Figures in elements per device. **Peak**: the largest buffer a program holds. Ours: the executor's "
         "largest array, including a gather's concatenation before its cut and the pad before a slice (the "
         "checker's type-level peak is given apart); ours-jax and xla: the largest data-carrying value of the "
         "compiled program (the HLO interpreter's measure, as in the plain cross-check); DTensor: its local "
         "tensors and the padded buffers it gathers into or exchanges (it pads every chunk to `c` around an "
         "all-gather or all-to-all). **Bound**: `max(size(src), size(dst))` over padded blocks (`local_shape`). "
         "**Received**: per step the most any device receives, summed (padded buffers for ours and DTensor, "
         "what the interpreter sees for XLA's programs).", "",
         "| mesh | shape | pairs with an uneven side | cases |", "|---|---|---|---|", *notes, "",
         "## Summary", "",
         "| planner | cases | correct | wrong data | unsupported | error | peak > bound | largest peak / bound | "
         "received / ours (geomean, where both correct) | more / less than ours | communicating collectives |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in planners:
        rs = [(c, res[name]) for c, res in results]
        st = {k: sum(1 for _, r in rs if r.status == k) for k in ("correct", "wrong_data", "unsupported", "error")}
        measured = [(c, r) for c, r in rs if r.peak is not None]
        over = sum(1 for c, r in measured if r.peak > c.bound)
        worst = max((r.peak / c.bound for c, r in measured), default=float("nan"))
        both = [(c, r, res["ours"]) for c, res in results for r in [res[name]]
                if r.status == "correct" and res["ours"].status == "correct" and r.received is not None]
        geo = _geomean([(r.received + 1) / (o.received + 1) for _, r, o in both])
        more = sum(1 for _, r, o in both if r.received > o.received)
        less = sum(1 for _, r, o in both if r.received < o.received)
        coll = sum(r.collectives or 0 for _, r in rs)
        L.append(f"| {name} | {n} | {st['correct']} | {st['wrong_data']} | {st['unsupported']} | {st['error']} | "
                 f"{over}/{len(measured)} | {worst:.2f} | {geo:.3f} (+1 smoothed) | {more} / {less} | {coll} |")
    ours = [(c, res["ours"]) for c, res in results]
    tover = sum(1 for c, r in ours if r.extra.get("type_peak", 0) > c.bound)
    traffic_same = sum(1 for _, r in ours if r.extra.get("checker_traffic") == r.received)
    bover = [(c, r) for c, r in ours if r.peak is not None and r.peak > c.bound]
    jx = [(c, res["ours-jax"]) for c, res in results]
    match = sum(1 for _, r in jx if r.extra.get("hlo_matches_plan"))
    jover = sum(1 for c, r in jx if r.peak is not None and r.peak > c.bound)
    xr = [(c, res["xla"]) for c, res in results]
    remat = sum(1 for _, r in xr if r.extra.get("remat_warnings"))
    xover = [(c, r) for c, r in xr if r.peak is not None and r.peak > c.bound]
    xover_remat = sum(1 for _, r in xover if r.extra.get("remat_warnings"))
    within = ("the verified planner keeps it within the bound on these uneven problems, where that is not proved"
              if tover == 0 else "on uneven problems the bound is not proved") + " (`Plan.within_bound`)"
    fewer = [(c, res) for c, res in results if res["xla"].status == "correct" and res["ours"].status == "correct"
             and res["xla"].received < res["ours"].received]
    fewer_over = sum(1 for c, res in fewer if res["xla"].peak is not None and res["xla"].peak > c.bound)
    L += ["", "## Reading the summary", "",
          f"- **ours**: the checker's type-level peak is above the bound in {tover} of {n} cases; {within}. The "
          f"checker's traffic equals the received elements the simulator measured in {traffic_same} of {n}. The "
          f"executor's buffers go above the bound in {len(bover)} cases: a gather concatenates `N * c_in` before "
          f"its cut to `c_out`, and a slice pads to `N * c_out` first (`backend.run_step`). In the compiled "
          f"program (ours-jax) XLA fuses the pad into the slice (the interpreter does not count a fusion's "
          f"temporaries), but a gather's concatenation stays a buffer: above the bound in {jover}.",
          f"- **ours-jax**: the compiled program's collectives are exactly the plan's communicating steps (by "
          f"opcode and count) in {match} of {n} cases" + (": the global pad and cut around the plan's `shard_map` "
          "add no communication." if match == n else "."),
          f"- **xla**: peak above the bound in {len(xover)} cases, {xover_remat} of them with XLA's \"involuntary "
          f"full rematerialization\" warning ({remat} warnings in all). Of the {len(fewer)} cases where XLA "
          f"receives less than ours (both correct), XLA's peak is above the bound in {fewer_over}."]
    dt = [r for _, res in results for r in (res["dtensor-greedy"],) if r.status == "unsupported"]
    lay = sum(1 for r in dt if r.reason.startswith("DTensor's layout"))
    L.append(f"- **dtensor**: {len(dt)} cases unsupported for the greedy planner, {lay} of them because DTensor's "
             f"nested chunking is not the type's layout, {len(dt) - lay} for another reason (below).")
    L += ["", "## Cases where a planner is wrong or errs", "",
          "| mesh | src | dst | planner | status | program |", "|---|---|---|---|---|---|"]
    bad = [(c, r) for c, res in results for r in res.values() if r.status in ("wrong_data", "error")]
    for c, r in bad[:40]:
        L.append(f"| {c.mesh} | `{c.src}` | `{c.dst}` | {r.planner} | {r.status}"
                 f"{' (' + r.reason + ')' if r.reason else ''} | {'; '.join(r.program)} |")
    if not bad:
        L.append("| (none) | | | | | |")
    elif len(bad) > 40:
        L.append(f"| ... | {len(bad) - 40} more | | | | |")
    L += ["", "## Largest peaks over the bound", "",
          "Peak / bound; the 12 cases with the largest ratio of any planner, then the 8 with the largest "
          "type-level peak of ours.", "",
          "| mesh | src | dst | bound | ours (buffers, type level) | ours-jax | xla | dtensor-greedy | "
          "dtensor-mincost |", "|---|---|---|---|---|---|---|---|---|"]

    def ratio(c, r):
        return "-" if r.peak is None else f"{r.peak / c.bound:.2f}"

    def worst_of(cr):
        return max((r.peak or 0) / cr[0].bound for r in cr[1].values())
    worst = sorted(results, key=worst_of, reverse=True)[:12]
    worst += [cr for cr in sorted(results, key=lambda cr: cr[1]["ours"].extra.get("type_peak", 0) / cr[0].bound,
                                  reverse=True)[:8] if all(cr is not w for w in worst)]
    for c, res in worst:
        o = res["ours"]
        L.append(f"| {c.mesh} | `{c.src}` | `{c.dst}` | {c.bound} | {ratio(c, o)}, "
                 f"{o.extra.get('type_peak', 0) / c.bound:.2f} | {ratio(c, res['ours-jax'])} | "
                 f"{ratio(c, res['xla'])} | {ratio(c, res['dtensor-greedy'])} | {ratio(c, res['dtensor-mincost'])} |")
    L += ["", "## Refusals (reasons per planner)", ""]
    for name in planners:
        why: dict[str, int] = {}
        for _, res in results:
            r = res[name]
            if r.status == "unsupported":
                key = r.reason.split(":")[0]
                why[key] = why.get(key, 0) + 1
        if why:
            first = next(res[name].reason for _, res in results if res[name].status == "unsupported")
            L.append(f"- {name}: " + "; ".join(f"{k}: {v}" for k, v in why.items()) + f". E.g. {first[:300]}")
    return "\n".join(L) + "\n"


def render_report(args, summary, rows, known, known_results, grid_notes, mem_rows, elapsed, jax_version,
                  torch_version, ours_guaranteed, n_cases, timings=None) -> str:
    import jax
    L = ["# Cross-check: our plans against XLA and PyTorch DTensor", ""]
    L += [f"{n_cases} cases ({len(known)} known hard cases, the rest from the grid below), "
          f"{len(rows)} (case, planner) results, in {elapsed:.0f} s on {os.cpu_count()} CPU cores "
          f"({platform.machine()}). JAX {jax_version} ({'Shardy' if jax.config.jax_use_shardy_partitioner else 'GSPMD'} "
          f"propagation, XLA SPMD partitioner) on 8 host-platform CPU devices; torch {torch_version} "
          f"(DTensor planner on a fake process group). Full table: "
          f"[crosscheck_table.md](crosscheck_table.md).", ""]
    if False in ours_guaranteed:
        L += ["**Read this first.** `verishard.plan` still returns its fallback plan (gather every axis, then "
              "slice; `guaranteed=False`) for the cases marked so in the table: the verified synthesizer is "
              "being written. Until it lands, \"ours\" below measures that fallback, not the paper's "
              "algorithm, and the speedup figures are those of the fallback against XLA.", ""]
    L += ["## Summary", "",
          "| planner | cases | valid (checker accepted) | not expressible | wrong data | other | "
          "peak > max(size(src), size(dst)) | mean received / lower bound |",
          "|---|---|---|---|---|---|---|---|"]
    for name, s in summary["planners"].items():
        st = s["statuses"]
        other = s["cases"] - st.get("valid", 0) - st.get("not_expressible", 0) - st.get("wrong_data", 0)
        L.append(f"| {name} | {s['cases']} | {st.get('valid', 0)} | {st.get('not_expressible', 0)} | "
                 f"{st.get('wrong_data', 0)} | {other} | {s['exceeds']}/{s['measured']} "
                 f"({fmt(s['exceed_fraction'], pct=True)}) | {fmt(s['mean_traffic_ratio'], digits=2)} |")
    sp = summary.get("speedup")
    L.append("")
    by = {(r.case, r.planner): r for r in rows}
    timings = timings or {}
    slow = [k for k, (a, b) in timings.items() if a / b < 0.9]
    fast = [k for k, (a, b) in timings.items() if a / b > 1.1]
    more = sum(1 for k in slow if (by[(k, "ours")].collectives or 0) > (by[(k, "xla")].collectives or 0))
    fast_over = sum(1 for k in fast if by[(k, "xla")].exceeds)
    x = summary["planners"].get("xla")
    if x:
        silent = x["exceeds"] - x["exceeds_with_remat"]
        L += [f"XLA printed its \"involuntary full rematerialization\" warning in {x['remat_warnings']} cases; "
              f"its peak exceeds the bound in {x['exceeds']} cases, {x['exceeds_with_remat']} of them with the "
              f"warning" + (f" and {silent} without it." if silent else ": here, XLA never exceeded the bound "
                            "without saying so."), ""]
    if sp:
        L += [f"Wall time, XLA's reshard against our JAX backend running `verishard.plan`'s plan, same process, "
              f"same input array, {sp['cases']} cases (median of {args.repeats} calls after {args.warmup} "
              f"warm-up calls each): **geometric-mean speedup of ours over XLA {fmt(sp['geomean'])}x, "
              f"maximum {fmt(sp['max'])}x** (minimum {fmt(sp['min'])}x). Split by whether XLA warned of a full "
              f"rematerialization: {fmt(sp['remat']['geomean'])}x over those {sp['remat']['cases']} cases, "
              f"{fmt(sp['no_remat']['geomean'])}x over the other {sp['no_remat']['cases']}. Of the "
              f"{len(slow)} cases where ours is more than 10% slower, ours runs more communicating collectives "
              f"than XLA in {more} (it slices, permutes and gathers where XLA gathers once and discards data, "
              f"to stay within the memory bound); of the {len(fast)} cases where ours is more than 10% faster, "
              f"XLA's peak exceeds the bound in {fast_over}.", ""]
        if mem_rows:
            ratio = [o / x for _, x, o in mem_rows if x > 0]
            L += [f"Compiled memory (XLA's memory analysis, argument + output + temporaries per device): ours / "
                  f"XLA geometric mean {fmt(float(np.exp(np.mean(np.log(ratio)))))}, maximum "
                  f"{fmt(max(ratio))} over the same cases.", ""]
    L += ["The paper reports a 1.22x geometric-mean and 5.7x maximum speedup over XLA on TPUs. What we "
          "measure here is different and smaller in every way: 8 XLA *CPU* devices in one process on a "
          "2-core machine, where a \"collective\" is a memory copy between threads, arrays of at most "
          "64x64x64 float32, and per-call times of tens to hundreds of microseconds dominated by dispatch. "
          "These ratios say how the two programs compare on this simulator, not on accelerators with a "
          "real interconnect.", ""]
    L += ["![memory](crosscheck_memory.png)", "", "![time](crosscheck_time.png)", ""]
    L += ["## Known hard cases", "", "| case | mesh | shape | src | dst | from | " +
          " | ".join(f"{p}: status, peak/bound, collectives" for p in known_results.get(0, {})) + " |",
          "|" + "---|" * (6 + len(known_results.get(0, {})))]
    for k, case in enumerate(known):
        res = known_results.get(k, {})
        cells = []
        for r in res.values():
            ratio = "-" if r.peak_elements is None else f"{r.peak_elements / case.bound:.2g}"
            remat = " (full remat. warning)" if r.extra.get("remat_warnings") else ""
            cells.append(f"{r.status}{remat}, {ratio}, {'-' if r.n_collectives is None else r.n_collectives}")
        L.append(f"| {k} | {case.mesh} | {'x'.join(map(str, case.shape))} | `{case.src}` | `{case.dst}` | "
                 f"{case.origin}: {case.label} | " + " | ".join(cells) + " |")
    L += ["", "Plans of the known cases, in our IR (`-` where the planner's program has none):", ""]
    for k, case in enumerate(known):
        L.append(f"- case {k}, `{case.src}` -> `{case.dst}` on {case.mesh}:")
        for name, r in known_results.get(k, {}).items():
            plan = ", ".join(str(c) for c in r.plan.collectives) if r.plan else f"- ({r.reason})"
            L.append(f"  - {name}: {plan}")
    L += ["", "## Cases", "",
          "Every pair of types over whole axes where it fits the 10-minute budget of the full run; otherwise a "
          "deterministic sample (numpy's default_rng with the seed below, without replacement).", "",
          "| mesh | shape | types | pairs | run |", "|---|---|---|---|---|"] + grid_notes
    L += ["", "## Method", "",
          "- **Validity.** Every planner's program is replayed on an array whose elements carry their global "
          "index: XLA's compiled HLO by our HLO interpreter (checked against XLA's own execution of the same "
          "program), DTensor's transform list with DTensor's data semantics. After each collective, the "
          "elements every device holds must be the blocks of a type over the refined mesh, and consecutive "
          "types must be related by that collective; the resulting plan in our IR goes through the verified "
          "checker. *valid* means the checker accepted it; *not expressible* means the program is correct "
          "but some step has no faithful counterpart in our IR (reason in the table); *wrong data* means "
          "the program does not produce the target layout.",
          "- **Peak** is the largest per-device array a plan holds: the checker's peak for plans in our IR; "
          "for XLA, the largest data-carrying buffer of the compiled entry computation (fused temporaries "
          "are not buffers). XLA's compiled memory analysis is also recorded per case.",
          "- **Received** is elements received from other devices per device, summed over steps (each step's "
          "worst device); all-reduce counts as 2(N-1)/N of its buffer (ring).",
          "- **Collectives** counts communicating collectives (a DynSlice is local).",
          "- **Time** alternates calls of XLA's `jit(identity, out_shardings=dst)` and our jitted "
          "`shard_map` on the same input, takes medians, and reports `t_xla / t_ours`.",
          ""]
    return "\n".join(L)


if __name__ == "__main__":
    sys.exit(main())
