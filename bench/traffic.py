"""Traffic of verishard.plan against the proved transfer lower bound.

For random problems (meshes of 1-3 axes of sizes 1, 2, 3, 4, 6; arrays of
rank 1-3; each axis shards a random dimension with probability 0.6) the plan
returned by the verified pipeline is compared with ``Traffic.lower_bound``,
which no accepted plan beats (``Trafficproof.accepted_traffic_lower_bound``).
Reports the fraction of plans at the bound, the geometric-mean and worst
ratio, and how often the plan needed the fully prime-split mesh; then the
same with ``plan(..., minimal=True)`` (the least traffic within the bound,
certified by ``Certify.certify_split``), where its search finishes. Writes bench/results/traffic.md.
Usage: python bench/traffic.py [--cases N]
"""

from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

import verishard as vs


def random_problem(rng: random.Random):
    k = rng.randint(1, 3)
    sizes = [rng.choice([1, 2, 3, 4, 6]) for _ in range(k)]
    mesh = vs.Mesh(tuple((f"a{i}", s) for i, s in enumerate(sizes)))
    rank = rng.randint(1, 3)
    total = math.prod(sizes)

    def rand_type(shape):
        axes = list(range(k))
        rng.shuffle(axes)
        dims = [[] for _ in range(rank)]
        for a in axes:
            if rng.random() < 0.6:
                dims[rng.randrange(rank)].append(a)
        return [(g, tuple(mesh.resolve(f"a{a}")[0] for a in d)) for g, d in zip(shape, dims)]

    shape = [rng.choice([1, 2, 3]) * total for _ in range(rank)]
    return mesh, vs.ArrayType(mesh, rand_type(shape)), vs.ArrayType(mesh, rand_type(shape))


def with_free_dim(src, dst, size: int = 4):
    """The same problem with one more dimension that neither type shards."""
    mesh = src.mesh
    extra = [(size, ())]
    return (vs.ArrayType(mesh, [(g, src.dim_parts(d)) for d, g in enumerate(src.global_shape)] + extra),
            vs.ArrayType(mesh, [(g, dst.dim_parts(d)) for d, g in enumerate(dst.global_shape)] + extra))


def sweep(problems, exchange: bool):
    """(at the bound, ratios, exchanges taken, plans on the fully prime-split mesh)."""
    ratios, at, taken, prime = [], 0, 0, 0
    for mesh, src, dst in problems:
        p = vs.plan(mesh, src, dst, exchange=exchange)
        lb = p.lower_bound
        assert lb <= p.traffic  # Trafficproof.accepted_traffic_lower_bound; Exchangeproof.exchange_lower_bound
        at += p.traffic == lb
        taken += p.exchange
        if lb:
            ratios.append(p.traffic / lb)
        if str(p.mesh) != str(mesh) and str(p.mesh) == str(mesh.refined()):
            prime += 1
    return at, ratios, taken, prime


def minimal_sweep(problems):
    """``plan(..., minimal=True)`` where it certifies, else the plain plan:
    (at the bound, ratios, exchanges taken, certified as ours, of those at the bound, cheaper found, refused)."""
    ratios, at, taken, same, same_at, cheaper, refused = [], 0, 0, 0, 0, 0, 0
    for mesh, src, dst in problems:
        p = vs.plan(mesh, src, dst)
        try:
            q = vs.plan(mesh, src, dst, minimal=True)
        except vs.PlanError:
            q, refused = p, refused + 1
        else:
            assert q.lower_bound <= q.traffic <= p.traffic and q.peak <= q.bound
            taken += q.exchange
            same += q.traffic == p.traffic
            same_at += p.traffic == p.lower_bound
            cheaper += q.traffic < p.traffic
        at += q.traffic == q.lower_bound
        if q.lower_bound:
            ratios.append(q.traffic / q.lower_bound)
    return at, ratios, taken, same, same_at, cheaper, refused


def row(label: str, n: int, at: int, ratios, taken: int, prime: int) -> str:
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else 1.0
    worst = max(ratios) if ratios else 1.0
    return f"| {label} | {n} | {at / n:.1%} | {geo:.3f} | {worst:.2f} | {taken} | {prime} |\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=3000)
    args = ap.parse_args()
    base = [random_problem(random.Random(seed)) for seed in range(args.cases)]
    free = [(m,) + with_free_dim(s, d) for m, s, d in base]
    text = (f"# Traffic against the lower bound\n\n`python bench/traffic.py --cases {args.cases}` "
            f"(seeds 0..{args.cases - 1}; see the script's docstring). Each problem is planned with the "
            f"four collectives (`verishard.plan`) and with the exchange allowed (`plan(..., exchange=True)`, "
            f"`Exchange.eplan_problem`: taken only when it receives strictly less and a dimension neither "
            f"type shards lets it run in pieces); the second pair of rows adds to every problem one more "
            f"dimension of size 4 that neither type shards.\n\n"
            f"| planner | problems | at the lower bound | geomean traffic / bound | worst | exchanges taken "
            f"| plans needing the fully prime-split mesh |\n"
            f"|---|---:|---:|---:|---:|---:|---:|\n")
    for label, probs in (("collectives", base), ("exchange allowed", base),
                         ("collectives, + free dim", free), ("exchange allowed, + free dim", free)):
        text += row(label, len(probs), *sweep(probs, "exchange" in label))
    at, ratios, taken, same, same_at, cheaper, refused = minimal_sweep(base)
    text += row("minimal=True (the exchange compared)", len(base), at, ratios, taken, 0).replace(" 0 |\n", " - |\n")
    text += (f"\nWith `minimal=True` the least traffic within the bound, of the plans of collectives and the "
             f"exchange where a free dimension lets it run in pieces (`Eminimalproof.emplan_least`), was "
             f"certified on {same + cheaper} of {len(base)} problems: the pipeline's plan was least on {same} "
             f"({same_at} of them at the lower bound, where `Pipelineproof.plan_traffic_optimal` says so without "
             f"a search), a cheaper plan found on {cheaper} (the exchange on {taken} of them); "
             f"its search gave up on {refused} (their plain plans are counted in the row).\n")
    out = Path(__file__).parent / "results" / "traffic.md"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
