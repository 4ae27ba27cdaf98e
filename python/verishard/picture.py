"""Pictures of a plan: one panel per step showing which block of the global
array every device holds, as plain text for terminals or as PNG/SVG.

Which block a device holds always comes from the verified core
(:func:`verishard.core.block_starts`), never from a Python re-derivation.

The device grid has the first mesh axis as rows and the remaining axes
(row-major) as columns; a one-axis mesh is a single row. A cell shows the
device's global index range per dimension (inclusive, ``0..2``); devices
holding the same block get the same letter (text) or colour (image).

>>> from verishard import check, DynSlice, AllPermute, AllGather, ArrayType, Mesh
>>> m = Mesh.parse("x=2,y=3")
>>> p = check(m, "[3{x}6]", "[2{y}6]",
...           [DynSlice(0, "y"), AllPermute(ArrayType.parse("[1{y,x}6]", m)), AllGather(0, "x")])
>>> print(text_picture(p))
step 0: source [3{x}6], local size 3
          y=0     y=1     y=2
  x=0  A 0..2  A 0..2  A 0..2
  x=1  B 3..5  B 3..5  B 3..5
    |  DynSlice(0, y)
    v
step 1: [1{x,y}6], local size 1
       y=0  y=1  y=2
  x=0  A 0  B 1  C 2
  x=1  D 3  E 4  F 5
    |  AllPermute([1{y,x}6])
    v
step 2: [1{y,x}6], local size 1
       y=0  y=1  y=2
  x=0  A 0  C 2  E 4
  x=1  B 1  D 3  F 5
    |  AllGather(0, x)
    v
step 3: target [2{y}6], local size 2
          y=0     y=1     y=2
  x=0  A 0..1  B 2..3  C 4..5
  x=1  A 0..1  B 2..3  C 4..5
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from . import core
from .errors import LimitError, ParseError, VerishardError, show
from .mesh import Mesh
from .sharding import ArrayType

__all__ = ["MAX_PICTURE_DEVICES", "MAX_TEXT_DEVICES", "Grid", "device_grid", "type_grid", "text_picture", "draw",
           "block_colours"]

MAX_PICTURE_DEVICES = 64  # an image stays legible up to about this many cells a panel
MAX_TEXT_DEVICES = 4096  # the text grid is drawn up to this many devices; above, a line says it is left out
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


@dataclass(frozen=True)
class Grid:
    """Where each device sits in a picture: ``cells[row][col]`` is a rank.

    ``row_labels`` and ``col_labels`` name the coordinates (``"x=1"``,
    ``"y,z=0,1"``); a one-axis mesh has one unlabelled row.

    >>> device_grid(Mesh.parse("x=2,y=2,z=2"))  # doctest: +NORMALIZE_WHITESPACE
    Grid(cells=((0, 1, 2, 3), (4, 5, 6, 7)), row_labels=('x=0', 'x=1'),
         col_labels=('y,z=0,0', 'y,z=0,1', 'y,z=1,0', 'y,z=1,1'))
    """

    cells: tuple[tuple[int, ...], ...]
    row_labels: tuple[str, ...]
    col_labels: tuple[str, ...]


def device_grid(mesh: Mesh) -> Grid:
    """The device grid of ``mesh`` over its whole axes.

    >>> g = device_grid(Mesh.parse("x=2,y=3"))
    >>> g.cells, g.row_labels, g.col_labels
    (((0, 1, 2), (3, 4, 5)), ('x=0', 'x=1'), ('y=0', 'y=1', 'y=2'))
    >>> device_grid(Mesh.parse("x=2,y=2*2")).col_labels
    ('y=0', 'y=1', 'y=2', 'y=3')
    >>> device_grid(Mesh.parse("x=3")).cells
    ((0, 1, 2),)
    """
    if not isinstance(mesh, Mesh):
        raise ParseError(f"expected a Mesh, not {type(mesh).__name__}")
    names, sizes = mesh.axis_names, mesh.axis_sizes
    if len(names) == 1:
        return Grid((tuple(range(sizes[0])),), ("",), tuple(f"{names[0]}={i}" for i in range(sizes[0])))
    ncols = mesh.num_devices // sizes[0]
    cells = tuple(tuple(r * ncols + c for c in range(ncols)) for r in range(sizes[0]))
    rest = names[1:]
    col_labels = []
    for c in range(ncols):
        digits, k = [], c
        for s in reversed(sizes[1:]):
            digits.append(k % s)
            k //= s
        digits.reverse()
        col_labels.append(f"{','.join(rest)}={','.join(map(str, digits))}")
    return Grid(cells, tuple(f"{names[0]}={r}" for r in range(sizes[0])), tuple(col_labels))


def _check_small(mesh: Mesh, limit: int) -> None:
    if mesh.num_devices > limit:
        raise LimitError(f"mesh {mesh} has {mesh.num_devices} devices; pictures are drawn for at most {limit}")


def _ranges(starts: Sequence[int], local: Sequence[int]) -> tuple[str, ...]:
    return tuple(str(s) if l == 1 else f"{s}..{s + l - 1}" for s, l in zip(starts, local))


def type_grid(t: ArrayType, limit: int = MAX_PICTURE_DEVICES) -> list[list[tuple[tuple[int, ...], tuple[str, ...]]]]:
    """For every cell of :func:`device_grid`: the device's block start (per
    dimension, from the verified core) and its index range per dimension.

    >>> g = type_grid(ArrayType.parse("[3{x}6, 4]", "x=2,y=2"))
    >>> g[1][0]
    ((3, 0), ('3..5', '0..3'))
    """
    if not isinstance(t, ArrayType):
        raise ParseError(f"expected an ArrayType, not {type(t).__name__}")
    _check_small(t.mesh, limit)
    grid = device_grid(t.mesh)
    if t.uneven:  # blocks of ceil(g / n); a device shows its valid part ("-" for an empty block)
        return [[(t.block_starts(r), tuple("-" if v == 0 else r_ for r_, v in zip(
                  _ranges(t.block_starts(r), t.valid_shape(r)), t.valid_shape(r)))) for r in row]
                for row in grid.cells]
    starts = core.block_starts(t)
    local = t.local_shape
    return [[(tuple(int(v) for v in starts[r]), _ranges(starts[r], local)) for r in row] for row in grid.cells]


def _panels(plan) -> list[tuple[str, ArrayType, str | None]]:
    """``(title, type, collective_before)`` for every panel of ``plan``."""
    types = list(plan.types)
    out = []
    for i, t in enumerate(types):
        if i == 0:
            title = f"step 0: source {t}"
        elif i == len(types) - 1:
            title = f"step {i}: target {t}"
        else:
            title = f"step {i}: {t}"
        out.append((title, t, None if i == 0 else str(plan.collectives[i - 1])))
    if len(types) == 1:
        out[0] = (f"step 0: source = target {types[0]}", types[0], None)
    return out


def _letters(cells) -> dict[tuple[int, ...], str]:
    blocks = sorted({start for row in cells for start, _ in row})
    return {b: (_LETTERS[i] if i < len(_LETTERS) else f"#{i}") for i, b in enumerate(blocks)}


def text_picture(plan, limit: int = MAX_TEXT_DEVICES) -> str:
    """A plain-text rendering of ``plan`` (a :class:`~verishard.plan.Plan`):
    one grid per step, the collective between grids; over ``limit`` devices,
    one line saying the grids are left out (the plan itself prints at any
    size).

    Letters name the distinct blocks of a step in order of their position
    in the global array; devices with the same letter hold the same data.

    >>> from verishard import check, AllGather
    >>> print(text_picture(check("x=2", "[2{x}4]", "[4]", [AllGather(0, "x")])))
    step 0: source [2{x}4], local size 2
         x=0     x=1
      A 0..1  B 2..3
        |  AllGather(0, x)
        v
    step 1: target [4], local size 4
         x=0     x=1
      A 0..3  A 0..3
    """
    if plan.mesh.num_devices > limit:  # the plan text says everything; a grid this large says nothing more
        return (f"(the device grids are left out: {plan.mesh.num_devices} devices, drawn for at most {limit}; "
                f"verishard.picture.MAX_TEXT_DEVICES)")
    grid = device_grid(plan.mesh)
    lines: list[str] = []
    for title, t, coll in _panels(plan):
        if coll is not None:
            lines += [f"    |  {coll}", "    v"]
        cells = type_grid(t, limit)
        letters = _letters(cells)
        text = [[f"{letters[start]} {','.join(ranges)}" for start, ranges in row] for row in cells]
        lw = max(len(s) for s in grid.row_labels)
        cw = max(max(len(s) for row in text for s in row), max(len(s) for s in grid.col_labels))
        lines.append(f"{title}, local size {t.size}")
        lead = (lambda label: "  " + label.ljust(lw) + "  ") if lw else (lambda label: "  ")
        lines.append(lead("") + "  ".join(s.rjust(cw) for s in grid.col_labels))
        for label, row in zip(grid.row_labels, text):
            lines.append(lead(label) + "  ".join(s.rjust(cw) for s in row))
    return "\n".join(line.rstrip() for line in lines)


def block_colours(n: int) -> list[tuple[float, float, float, float]]:
    """``n`` colours for ``n`` blocks, each far from the one before it: hues
    step by the golden angle (so neighbours in the list differ by about 0.38
    of the colour wheel), with lightness alternating in three levels.

    >>> cs = block_colours(3)
    >>> len(cs), all(len(c) == 4 for c in cs), len(set(cs))
    (3, True, 3)
    """
    import colorsys
    out = []
    for i in range(n):
        hue = (0.08 + i * 0.6180339887) % 1.0
        light = (0.55, 0.72, 0.40)[i % 3]
        out.append(colorsys.hls_to_rgb(hue, light, 0.75) + (1.0,))
    return out


def draw(plan, path: str | os.PathLike, limit: int = MAX_PICTURE_DEVICES) -> int:
    """Draw ``plan`` to ``path`` (``.png`` or ``.svg``, matplotlib's Agg
    backend) and return the number of panels (steps + 1).

    Each panel is the device grid of one type; a cell's colour is its block
    (the same block has the same colour in every panel) and its text the
    device's global index range. The collective is drawn between panels;
    each panel's axes carry the SVG id ``panel-<i>``.

    >>> import os, tempfile
    >>> from verishard import check, AllGather
    >>> path = os.path.join(tempfile.mkdtemp(), "p.svg")
    >>> draw(check("x=2", "[2{x}4]", "[4]", [AllGather(0, "x")]), path)
    2
    >>> open(path).read().count('id="panel-')
    2
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".png", ".svg"):
        raise ParseError(f"picture file {show(path, 200)} must end in .png or .svg")
    _check_small(plan.mesh, limit)

    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    grid = device_grid(plan.mesh)
    nrows, ncols = len(grid.cells), len(grid.cells[0])
    panels = _panels(plan)
    n = len(panels)
    fig_rows = (n + 3) // 4
    per_row = (n + fig_rows - 1) // fig_rows
    ndims = plan.src.rank
    cell_w = 0.75 + 0.32 * max(ndims, 1)
    cell_h = 0.55 + 0.16 * max(ndims, 1)
    panel_w = max(2.2, ncols * cell_w + 0.6)
    arrow_w = 1.5
    panel_h = nrows * cell_h + 1.2
    fig_h = fig_rows * panel_h + 0.9
    fig = plt.figure(figsize=(per_row * (panel_w + arrow_w), fig_h))
    widths = []
    for _ in range(per_row):
        widths += [arrow_w, panel_w]
    gs = fig.add_gridspec(fig_rows, 2 * per_row, width_ratios=widths, wspace=0.05, hspace=0.6,
                          top=1 - 0.8 / fig_h, bottom=0.35 / fig_h, left=0.01, right=0.99)
    # one colour per distinct block (start and extent) across all panels, in order of first appearance:
    # a block keeps its colour from panel to panel, and the blocks of one panel all differ
    grids = [type_grid(t, limit) for _, t, _ in panels]
    keys: dict = {}
    for (_, t, _), cells in zip(panels, grids):
        for row in cells:
            for start, ranges in row:
                keys.setdefault((start, ranges), len(keys))
    palette = block_colours(len(keys))

    for i, (title, t, coll) in enumerate(panels):
        r, c = divmod(i, per_row)
        if coll is not None:
            aax = fig.add_subplot(gs[r, 2 * c])
            aax.set_axis_off()
            aax.set_xlim(0, 1)
            aax.set_ylim(0, 1)
            aax.annotate("", xy=(0.95, 0.45), xytext=(0.05, 0.45),
                         arrowprops=dict(arrowstyle="-|>", lw=1.5, color="0.25"))
            label = coll.replace("(", "(\n", 1) if len(coll) > 16 else coll
            aax.text(0.5, 0.55, label, ha="center", va="bottom", fontsize=8, family="monospace")
        ax = fig.add_subplot(gs[r, 2 * c + 1])
        ax.set_gid(f"panel-{i}")
        cells = grids[i]
        letters = _letters(cells)
        for y, row in enumerate(cells):
            for x, (start, ranges) in enumerate(row):
                rgba = palette[keys[(start, ranges)]]
                ax.add_patch(Rectangle((x, y), 1, 1, facecolor=rgba, edgecolor="white", lw=2))
                lum = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2]
                text = letters[start] + "\n" + "\n".join(f"d{d}: {rg}" for d, rg in enumerate(ranges))
                ax.text(x + 0.5, y + 0.5, text, ha="center", va="center", fontsize=7,
                        color="black" if lum > 0.5 else "white", family="monospace")
        ax.set_xlim(0, ncols)
        ax.set_ylim(nrows, 0)
        ax.set_aspect("auto")
        ax.set_xticks([k + 0.5 for k in range(ncols)], grid.col_labels, fontsize=7)
        ax.set_yticks([k + 0.5 for k in range(nrows)], grid.row_labels, fontsize=7)
        ax.tick_params(length=0)
        ax.xaxis.tick_top()
        for side in ax.spines.values():
            side.set_visible(False)
        ax.set_title(title, fontsize=9, pad=14)
        ax.set_xlabel(f"local size {t.size}; cells: block, then index range of each dimension d0, d1, ...",
                      fontsize=7)

    fig.suptitle(f"plan on {plan.mesh}: {plan.src} -> {plan.dst}    peak {plan.peak} elements/device, "
                 f"bound {plan.bound}", fontsize=10, y=1 - 0.15 / fig_h, va="top")
    try:
        with matplotlib.rc_context({"svg.fonttype": "none"}):   # SVG text stays text
            fig.savefig(path, dpi=120, bbox_inches="tight")
    except OSError as e:
        raise VerishardError(f"cannot write picture {show(path, 200)}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return n
