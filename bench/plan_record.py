"""Record what the planner answers on a fixed sample of problems, to check
that a change of the core or of the Python around it leaves every plan as
it was (byte for byte) or to see which ones it changed.

The sample: every pair of types of the exhaustive meshes of
tests/test_synth.py (x=2,y=2,z=2; x=2,y=4; x=2,y=3; x=4,y=2 and their
shapes), then N random problems (rank 2-4 over 2-5 axes, sizes from
{2, 2, 3, 4} or, one in three, {2, 3, 4, 6, 8, 9}; one in ten with pending
axes). Each line: the core's input, its raw answer (`_core.pplan`), and
the user-visible Plan (`verishard.plan` with the plan cache cleared: mesh,
collectives, types, received, peak, guarantee).

Usage: python bench/plan_record.py OUT [--random N]    (default N = 30000)
       python bench/plan_record.py OUT --compare BEFORE  (also: the lines that differ)
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference as ref  # noqa: E402
from planner import random_problem  # noqa: E402  (bench/: this script's directory)
import verishard as vs  # noqa: E402
from verishard import _core  # noqa: E402
from verishard.plan import _planned  # noqa: E402

EXHAUSTIVE = [
    ("x=2,y=2,z=2", [(4, 4), (8, 2)]),
    ("x=2,y=4", [(8,), (4,), (4, 4)]),
    ("x=2,y=3", [(6,), (12,), (6, 4)]),
    ("x=4,y=2", [(4, 4), (8, 2)]),
]


def problems(n_random: int):
    for mesh_text, shapes in EXHAUSTIVE:
        mesh = vs.Mesh.parse(mesh_text)
        for shape in shapes:
            ts = [vs.ArrayType.from_parts(mesh, shape, [a for _, a in t])
                  for t in ref.all_types(mesh.part_sizes, shape)]
            for s in ts:
                for d in ts:
                    yield mesh, s, d
    rng = random.Random(12345)
    for i in range(n_random):
        rank, k = rng.randint(2, 4), rng.randint(2, 5)
        pool = [2, 2, 3, 4] if i % 3 else [2, 3, 4, 6, 8, 9]
        mesh, s, d = random_problem(rng, rank, k, pool)
        if i % 10 == 7:   # pending axes: some of the replicated parts

            def pend(t):
                free = [p for p in range(len(mesh.part_sizes)) if p not in t.used_parts]
                return vs.ArrayType(mesh, t.dims, partial=tuple(sorted(p for p in free if rng.random() < 0.5)))

            s, d = pend(s), pend(d)
        yield mesh, s, d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--random", type=int, default=30000)
    ap.add_argument("--compare", type=Path, help="an earlier recording: report the problems whose lines differ")
    args = ap.parse_args()
    n = 0
    with args.out.open("w") as f:
        for mesh, s, d in problems(args.random):
            ints = mesh.encode() + s.pencode() + d.pencode()
            raw = list(_core.pplan(ints))
            _planned.cache_clear()
            p = vs.plan(mesh, s, d)
            shown = (f"{p.mesh}|{[repr(c) for c in p.collectives]}|{p.types}|{[st.received for st in p.steps]}"
                     f"|{p.peak}|{p.guaranteed}")
            f.write(f"{ints} -> {raw} :: {shown}\n")
            n += 1
    print(f"{n} problems recorded in {args.out}")
    if args.compare:
        before, after = args.compare.read_text().splitlines(), args.out.read_text().splitlines()
        diff = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
        if len(before) != len(after):
            print(f"different numbers of problems: {len(before)} before, {len(after)} now")
        print(f"{len(diff)} of {min(len(before), len(after))} problems answered differently")
        for i in diff[:10]:
            print(f"  before: {before[i][:300]}\n  now:    {after[i][:300]}")
        sys.exit(1 if diff or len(before) != len(after) else 0)


if __name__ == "__main__":
    main()
