"""Random even redistribution problems for hypothesis tests (test_exchange,
test_optimal): a mesh of axes of the given sizes and two types of the same
global shape, each dimension sharded by some of the axes, in any order."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from verishard import ArrayType, Mesh


def draw_problem(data, sizes_from=(2, 3), max_axes=4, ranks=(2, 3)) -> tuple[Mesh, ArrayType, ArrayType]:
    """Mesh, source and target drawn with hypothesis's ``data``: 1 to
    ``max_axes`` axes of sizes from ``sizes_from``, a rank from ``ranks``,
    each dimension's global size the lcm of its two block counts, times 1 or 2."""
    sizes = data.draw(st.lists(st.sampled_from(list(sizes_from)), min_size=1, max_size=max_axes))
    names = "xyzw"[:len(sizes)]
    mesh = Mesh.parse(",".join(f"{n}={s}" for n, s in zip(names, sizes)))
    rank = data.draw(st.integers(*ranks))
    axes = list(range(len(sizes)))

    def draw_type():
        order = data.draw(st.permutations(axes))
        cut = sorted(data.draw(st.lists(st.integers(0, len(axes)), min_size=rank - 1, max_size=rank - 1)))
        bounds = [0] + cut + [len(axes)]
        used = [order[bounds[i]:bounds[i + 1]] for i in range(rank)]
        return [[a for a in u if data.draw(st.booleans())] for u in used]

    shape = []
    s_axes, d_axes = draw_type(), draw_type()
    for d in range(rank):
        n1 = int(np.prod([sizes[a] for a in s_axes[d]]))
        n2 = int(np.prod([sizes[a] for a in d_axes[d]]))
        shape.append(int(np.lcm(n1, n2)) * data.draw(st.sampled_from([1, 2])))
    fmt = lambda ax: ", ".join(
        f"{g // int(np.prod([sizes[a] for a in u]))}{{{','.join(names[a] for a in u)}}}{g}" if u else f"{g}"
        for u, g in zip(ax, shape))
    return mesh, ArrayType.parse(f"[{fmt(s_axes)}]", mesh), ArrayType.parse(f"[{fmt(d_axes)}]", mesh)
