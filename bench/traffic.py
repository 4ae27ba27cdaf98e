"""Traffic of verishard.plan against the proved transfer lower bound.

For random problems (meshes of 1-3 axes of sizes 1, 2, 3, 4, 6; arrays of
rank 1-3; each axis shards a random dimension with probability 0.6) the plan
returned by the verified pipeline is compared with ``Traffic.lower_bound``,
which no accepted plan beats (``Trafficproof.accepted_traffic_lower_bound``).
Reports the fraction of plans at the bound, the geometric-mean and worst
ratio, and how often the plan needed the fully prime-split mesh. Writes
bench/results/traffic.md. Usage: python bench/traffic.py [--cases N]
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=3000)
    args = ap.parse_args()
    ratios, at, prime = [], 0, 0
    for seed in range(args.cases):
        mesh, src, dst = random_problem(random.Random(seed))
        p = vs.plan(mesh, src, dst)
        lb = p.lower_bound
        assert lb <= p.traffic  # Trafficproof.accepted_traffic_lower_bound
        at += p.traffic == lb
        if lb:
            ratios.append(p.traffic / lb)
        if str(p.mesh) != str(mesh) and str(p.mesh) == str(mesh.refined()):
            prime += 1
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    text = (f"# Traffic against the lower bound\n\n`python bench/traffic.py --cases {args.cases}` "
            f"(seeds 0..{args.cases - 1}; see the script's docstring).\n\n"
            f"| problems | at the lower bound | geomean traffic / bound | worst | plans needing the fully prime-split mesh |\n"
            f"|---:|---:|---:|---:|---:|\n"
            f"| {args.cases} | {at / args.cases:.1%} | {geo:.3f} | {max(ratios):.2f} | {prime} |\n")
    out = Path(__file__).parent / "results" / "traffic.md"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
