"""Certified optimality of our plans over ALL plans within the memory bound.

For random problems (bench/optimality.py's ``random_problem``: meshes of k
axes of size 2 or 3, arrays of rank 2-4; with the same seed the first
``--per-axis`` problems of that script for each k) our plan
(``verishard.plan``) is handed to the branch and bound of
``verishard.optimal.search`` with ``T`` = its traffic and the cap
``max(size(src), size(dst))``. The search either certifies that no plan
the checker accepts with every type within the cap receives less (a
certificate for ``Certify.certify``), or finds the cheapest plan, re-checked
here with ``verishard.check`` (traffic as found, peak within the cap) and
certified optimal by the same search.

With ``--core``, each certificate also goes to the verified checker
(``verishard.core.certify(src, dst, cap, entries, traffic)``, ``Certify.certify_traffic``) when the
core has it; without it that column says so. With ``--normal-form`` the
optimum over ``Synth.validate``'s normal-form class (bench/optimality.py's
exact search) is computed too, to count the problems where the best plan
within the bound is outside that class.

Usage: python bench/certify.py [--per-axis N] [--axes 2,3,4,5,6] [--seed K]
       [--max-seconds S] [--max-states N] [--core] [--normal-form] [--report MD]
Writes bench/results/certify.md (the command at the top).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import random
import sys
import time
from pathlib import Path

import verishard as vs
from verishard import core
from verishard.optimal import search

HERE = Path(__file__).resolve().parent
REPORT_MD = HERE / "results" / "certify.md"


def _optimality():
    """bench/optimality.py as a module (its problems and its normal-form search)."""
    mod = sys.modules.get("bench_optimality")
    if mod is None:
        spec = importlib.util.spec_from_file_location("bench_optimality", HERE / "optimality.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["bench_optimality"] = mod
        spec.loader.exec_module(mod)
    return mod


def verified_check(use_core: bool):
    """The verified certificate checker, or None when not asked for or not in the core yet."""
    return getattr(core, "certify", None) if use_core else None


def solve(P, args, certify) -> dict:
    """Plan, search at our traffic, re-check what the search returns."""
    p = vs.plan(P.mesh, P.atype(P.src), P.atype(P.dst))
    rec = {"problem": P.describe(), "lb": p.lower_bound, "ours": p.traffic,
           "ours_plan": [str(c) for c in p.collectives]}
    r = search(p.mesh, p.src, p.dst, p.traffic, p.bound, max_states=args.max_states,
               max_seconds=args.max_seconds)
    rec.update(settled=r.settled, seconds=r.seconds, gave_up=r.gave_up)
    if r.gave_up:
        return rec
    rec.update(opt=r.certified, entries=len(r.entries), work=r.steps_to_check)
    if r.better is not None:
        ok = vs.check(p.mesh, p.src, p.dst, list(r.better))
        assert ok.traffic == r.better_traffic < p.traffic and ok.peak <= p.bound, (P.describe(), r.better)
        rec["opt_plan"] = [str(c) for c in r.better]
    assert p.lower_bound <= r.certified <= p.traffic, P.describe()
    if certify is not None:
        t0 = time.perf_counter()
        rec["core_ok"] = bool(certify(p.src, p.dst, p.bound, list(r.entries), r.certified))
        rec["core_seconds"] = time.perf_counter() - t0
    if args.normal_form:
        O = _optimality()
        try:
            nf, _, _ = O.optimum(P, args.max_seconds)
        except O.CapExceeded:
            nf = None
        rec["nf"] = nf
        if nf is not None:
            assert r.certified <= nf <= p.traffic, P.describe()
    return rec


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def summarize(recs) -> dict:
    done = [r for r in recs if not r["gave_up"]]
    cheaper = [r for r in done if r["opt"] < r["ours"]]
    gains = [r["ours"] / r["opt"] for r in cheaper if r["opt"] > 0]
    core_runs = [r for r in done if "core_ok" in r]
    nf = [r for r in done if r.get("nf") is not None]
    n = len(recs)
    return {
        "problems": n,
        "at_lb": sum(r["ours"] == r["lb"] for r in recs) / n,
        "certified": sum(r["opt"] == r["ours"] for r in done) / n,
        "cheaper": len(cheaper) / n,
        "geo_gain": geomean(gains) if gains else None,
        "max_gain": max(gains, default=None),
        "opt_at_lb": sum(r["opt"] == r["lb"] for r in done) / len(done) if done else None,
        "gave_up": n - len(done),
        "mean_entries": sum(r["entries"] for r in done) / len(done) if done else None,
        "max_entries": max((r["entries"] for r in done), default=None),
        "mean_work": sum(r["work"] for r in done) / len(done) if done else None,
        "max_work": max((r["work"] for r in done), default=None),
        "mean_settled": sum(r["settled"] for r in done) / len(done) if done else None,
        "max_settled": max((r["settled"] for r in done), default=None),
        "mean_seconds": sum(r["seconds"] for r in recs) / n,
        "max_seconds": max(r["seconds"] for r in recs),
        "core": f"{sum(r['core_ok'] for r in core_runs)}/{len(core_runs)}" if core_runs else None,
        "core_median_seconds": (sorted(r["core_seconds"] for r in core_runs)[len(core_runs) // 2]
                                if core_runs else None),
        "core_max_seconds": max((r["core_seconds"] for r in core_runs), default=None),
        "nf_outside": f"{sum(r['opt'] < r['nf'] for r in nf)}/{len(nf)}" if nf else None,
    }


ROWS = [
    ("problems", "problems", "{:d}"),
    ("at_lb", "ours at the lower bound", "{:.0%}"),
    ("certified", "ours certified optimal within the bound", "{:.0%}"),
    ("cheaper", "cheaper plan found (checked, certified optimal)", "{:.0%}"),
    ("geo_gain", "geomean ours / optimum, where cheaper", "{:.3f}"),
    ("max_gain", "max ours / optimum", "{:.2f}"),
    ("opt_at_lb", "optimum at the lower bound", "{:.0%}"),
    ("gave_up", "gave up", "{:d}"),
    ("mean_entries", "mean certificate entries", "{:.1f}"),
    ("max_entries", "max certificate entries", "{:d}"),
    ("mean_work", "mean steps the checker tries", "{:.0f}"),
    ("max_work", "max steps the checker tries", "{:d}"),
    ("mean_settled", "mean states settled", "{:.0f}"),
    ("max_settled", "max states settled", "{:d}"),
    ("mean_seconds", "mean search seconds", "{:.3f}"),
    ("max_seconds", "max search seconds", "{:.2f}"),
    ("core", "accepted by core.certify", "{}"),
    ("core_median_seconds", "median core.certify seconds", "{:.4f}"),
    ("core_max_seconds", "max core.certify seconds", "{:.2f}"),
    ("nf_outside", "optimum below the normal-form optimum", "{}"),
]


def table(groups, summ) -> str:
    lines = ["| | " + " | ".join(groups) + " |", "|---|" + "---:|" * len(groups)]
    for key, label, spec in ROWS:
        cells = [("–" if summ[g][key] is None else spec.format(summ[g][key])) for g in groups]
        if all(c == "–" for c in cells):
            continue
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def examples(recs, n) -> str:
    cheaper = sorted((r for r in recs if not r["gave_up"] and r["opt"] < r["ours"]),
                     key=lambda r: (-r["ours"] / max(r["opt"], 1), -(r["ours"] - r["opt"])))
    out = []
    for r in cheaper[:n]:
        nf = f", normal-form optimum {r['nf']}" if r.get("nf") is not None else ""
        out.append(f"- `{r['problem']}`: ours {r['ours']}, optimum {r['opt']}{nf}, lower bound {r['lb']}\n"
                   f"  - ours: `{'; '.join(r['ours_plan']) or '(empty)'}`\n"
                   f"  - optimum: `{'; '.join(r['opt_plan']) or '(empty)'}`")
    return "\n".join(out) if out else "(none)"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-axis", type=int, default=100, help="random problems per number of mesh axes")
    ap.add_argument("--axes", default="2,3,4,5,6", help="numbers of mesh axes, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=30.0, help="search time per problem before giving up")
    ap.add_argument("--max-states", type=int, default=200_000, help="settled states per problem before giving up")
    ap.add_argument("--core", action="store_true", help="also run verishard.core.certify on each certificate")
    ap.add_argument("--normal-form", action="store_true",
                    help="also compute the normal-form optimum (bench/optimality.py)")
    ap.add_argument("--examples", type=int, default=3, help="largest improvements listed per group")
    ap.add_argument("--report", type=Path, default=REPORT_MD)
    args = ap.parse_args(argv)
    axes = [int(x) for x in args.axes.split(",")]
    cmd = " ".join(["python bench/certify.py", *(sys.argv[1:] if argv is None else argv)])
    certify = verified_check(args.core)
    if args.core and certify is None:
        print("note: verishard.core has no certify yet; the verified check is skipped", flush=True)
    O = _optimality()
    t_start = time.perf_counter()
    groups, results = [], {}
    for k in axes:
        g = f"{k} axes"
        recs = [solve(O.random_problem(random.Random(f"{args.seed}:{k}:{i}"), k), args, certify)
                for i in range(args.per_axis)]
        groups.append(g)
        results[g] = recs
        s = summarize(recs)
        print(f"{g}: certified {s['certified']:.0%}, cheaper {s['cheaper']:.0%}, gave up {s['gave_up']}, "
              f"max {s['max_seconds']:.2f} s, {time.perf_counter() - t_start:.0f} s", flush=True)
    elapsed = time.perf_counter() - t_start
    summ = {g: summarize(results[g]) for g in groups}
    core_note = ("each certificate was also checked by `verishard.core.certify`" if certify is not None else
                 "`verishard.core.certify` " + ("is not in the core yet: the verified check was skipped"
                                                 if args.core else "was not run (`--core`)"))
    lines = [
        "# Certified optimality within the memory bound\n",
        f"`{cmd}` ({elapsed:.0f} s on this machine).\n",
        "Per problem (bench/optimality.py's random problems: k axes of size 2 or 3, rank 2-4, the "
        f"first {args.per_axis} per k for seed {args.seed}), our plan's traffic `T` is given to "
        "`verishard.optimal.search` with the cap `max(size(src), size(dst))`. "
        "Certified optimal: no plan the checker accepts with every type within the cap receives less "
        "(a certificate for `Certify.certify`). Otherwise the search returns the least-traffic plan "
        "within the cap, re-checked with `verishard.check`, and a certificate of its figure. "
        f"Each search gives up after {args.max_seconds:g} s or {args.max_states} settled states; "
        f"{core_note}.\n",
        table(groups, summ), "",
        "## Largest improvements\n",
    ]
    for g in groups:
        lines += [f"### {g}\n", examples(results[g], args.examples), ""]
    text = "\n".join(lines)
    args.report.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
