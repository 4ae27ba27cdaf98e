"""Partial types: the verified partial pipeline's plans against the plan that
reduces first (all-reduce every pending axis, then the plain pipeline's
plan, then make the target's axes pending: Ppipeline.pfallback), over every
pair of partial types of small meshes. Both plans' traffic and peak are the
verified checker's figures (``verishard.check``), measured in the same run.

    python bench/partial.py            # prints the table, writes bench/results/partial.md
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))

import mpi_cases as mc  # noqa: E402
import verishard as vs  # noqa: E402
from verishard import AllReduce, ToPartial  # noqa: E402

CASES = [("x=2,y=2,z=2", (4, 4)), ("x=2,y=2,z=2", (8, 2)), ("x=2,y=3", (6, 6)), ("x=4,y=2", (8, 4))]


def reduce_first(mesh: vs.Mesh, src: vs.ArrayType, dst: vs.ArrayType) -> vs.Plan | None:
    """All-reduce, the plain plan, make pending; None when the plain plan needs a split mesh."""
    inner = vs.plan(mesh, src.plain, dst.plain)
    if inner.mesh != mesh:
        return None
    steps = ([AllReduce(mesh.names(src.partial))] if src.partial else []) + list(inner.collectives)
    steps += [ToPartial(mesh.names(dst.partial))] if dst.partial else []
    return vs.check(mesh, src, dst, steps)


def main() -> None:
    lines = ["# Partial types: the verified pipeline against reducing first", "",
             "Every pair of partial types (pending sums; source or target partial) of each mesh and shape;",
             "traffic and peak are the verified checker's figures for both plans. Command: `python bench/partial.py`.",
             "", "| mesh | shape | pairs | ours < reduce-first | equal | ours > | geomean traffic ratio | "
                 "ours reduce-scatter | ours peak = bound |", "|---|---|---|---|---|---|---|---|---|"]
    for mesh_text, shape in CASES:
        mesh = vs.Mesh.parse(mesh_text)
        types = mc.partial_types(mesh, shape)
        less = same = more = rs = at_bound = n = 0
        logs = []
        for src in types:
            for dst in types:
                if not (src.partial or dst.partial):
                    continue
                base = reduce_first(mesh, src, dst)
                if base is None:
                    continue
                ours = vs.plan(mesh, src, dst)
                n += 1
                less += ours.traffic < base.traffic
                same += ours.traffic == base.traffic
                more += ours.traffic > base.traffic
                rs += any(isinstance(c, vs.ReduceScatter) for c in ours.collectives)
                at_bound += ours.peak == ours.bound
                if base.traffic:
                    logs.append(math.log(max(ours.traffic, 1) / base.traffic))
        g = math.exp(sum(logs) / len(logs)) if logs else 1.0
        lines.append(f"| {mesh_text} | {shape} | {n} | {less} | {same} | {more} | {g:.3f} | {rs} | {at_bound} |")
        print(lines[-1], flush=True)
    out = ROOT / "bench" / "results" / "partial.md"
    os.makedirs(out.parent, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
