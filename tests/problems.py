"""Random redistribution problems for hypothesis tests: even problems on one
mesh (test_exchange, test_optimal: each dimension sharded by some of the
axes, in any order) and placements for cross-mesh problems (test_perrank,
test_weight_sync_plan: each dimension sharded by at most one axis)."""

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


def draw_placement(draw, sizes: dict, names, extent, uneven: bool = False) -> str:
    """A random type (as text) of an array of shape ``extent`` on a mesh of
    axes ``names`` with ``sizes``: each dimension split by at most one axis,
    the rest replicated; an axis splits a dimension it divides, or with
    ``uneven`` any dimension at least its size (the last block short)."""
    axes, dims = list(names), []
    for n in extent:
        ax = draw(st.sampled_from([None] + axes))
        if ax is not None and (sizes[ax] <= n if uneven else n % sizes[ax] == 0):
            dims.append(f"{-(-n // sizes[ax])}{{{ax}}}{n}")
            axes.remove(ax)
        else:
            dims.append(str(n))
    return "[" + ", ".join(dims) + "]"
