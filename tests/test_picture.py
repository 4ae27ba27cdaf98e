"""Pictures of plans: the text rendering and the PNG/SVG files."""

from __future__ import annotations

import re

import numpy as np
import pytest

from verishard import AllGather, AllPermute, ArrayType, DynSlice, LimitError, Mesh, ParseError, check, plan
from verishard.picture import device_grid, draw, text_picture, type_grid
from verishard.runtime.layout import box

XY = Mesh.parse("x=2,y=3")


def worked_example():
    T = lambda s: ArrayType.parse(s, XY)  # noqa: E731
    return check(XY, "[3{x}6]", "[2{y}6]", [DynSlice(0, "y"), AllPermute(T("[1{y,x}6]")), AllGather(0, "x")])


def grids(text: str) -> list[dict[tuple[int, int], str]]:
    """Parse a text picture back into {(x, y): range} per step (two-axis meshes)."""
    out, cur, cols = [], None, None
    for line in text.splitlines():
        if line.startswith("step "):
            cur, cols = {}, None
            out.append(cur)
        elif cur is not None and cols is None and "=" in line:
            cols = [int(c.split("=")[1]) for c in line.split()]
        elif cur is not None and re.match(r"\s+x=\d", line):
            label, *cells = line.split()
            x = int(label.split("=")[1])
            for k, y in enumerate(cols):
                cur[(x, y)] = cells[2 * k + 1]   # cells are "A 0..2" pairs
    return out


def test_text_picture_matches_the_spec_worked_example():
    p = worked_example()
    text = text_picture(p)
    steps = grids(text)
    assert len(steps) == 4
    for x in range(2):
        for y in range(3):
            assert steps[0][(x, y)] == ("0..2" if x == 0 else "3..5")     # x=0 holds 0..2, x=1 holds 3..5
            assert steps[1][(x, y)] == str(3 * x + y)                     # device (x,y) holds 3x+y
            assert steps[2][(x, y)] == str(2 * y + x)                     # device (x,y) holds 2y+x
            assert steps[3][(x, y)] == f"{2 * y}..{2 * y + 1}"            # device (x,y) holds 2y..2y+1
    for c in p.collectives:
        assert f"|  {c}" in text
    assert "local size 3" in text and "local size 2" in text


def test_text_picture_agrees_with_boxes():
    # The picture comes from the verified core's block starts; cross-check with ArrayType.box.
    m = Mesh.parse("x=2,y=2*2")
    t = ArrayType.parse("[2{y.1,x}8, 3{y.0}6]", m)
    cells = type_grid(t)
    grid = device_grid(m)
    for row, ranks in zip(cells, grid.cells):
        for (start, _), r in zip(row, ranks):
            assert start == tuple(s.start for s in box(t.mesh, t, r))


def test_device_grid_shapes():
    g = device_grid(Mesh.parse("x=2,y=2,z=3"))
    assert len(g.cells) == 2 and len(g.cells[0]) == 6
    assert g.col_labels[4] == "y,z=1,1" and g.cells[1][4] == 10
    g = device_grid(Mesh.parse("x=4"))
    assert g.cells == ((0, 1, 2, 3),) and g.row_labels == ("",)


def test_text_picture_of_empty_plan_and_one_axis():
    p = check("x=2", "[2{x}4]", "[2{x}4]", [])
    text = text_picture(p)
    assert text.startswith("step 0: source = target [2{x}4], local size 2")
    assert "A 0..1  B 2..3" in text


def test_letters_mark_replicas():
    text = text_picture(check("x=2,y=2", "[4]", "[2{x}4]", [DynSlice(0, "x")]))
    last = text.split("step 1")[1]
    assert last.count("A 0..1") == 2 and last.count("B 2..3") == 2


def test_limits_and_bad_paths(tmp_path):
    big = plan("x=128", "[128{x}16384]", "[16384]")
    assert text_picture(big).count("\n") > 6        # text: any size (grids up to MAX_TEXT_DEVICES)
    huge = plan("x=8192", "[1{x}8192]", "[8192]")
    assert "left out: 8192 devices" in text_picture(huge)
    with pytest.raises(LimitError):
        draw(big, tmp_path / "big.png")
    with pytest.raises(ParseError, match="'.*plan.gif'"):
        draw(worked_example(), tmp_path / "plan.gif")
    with pytest.raises(Exception, match="cannot write picture"):
        draw(worked_example(), tmp_path / "no" / "such" / "dir.png")


def test_png_file(tmp_path):
    path = tmp_path / "plan.png"
    assert draw(worked_example(), path) == 4
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    import matplotlib.image

    img = matplotlib.image.imread(path)
    assert img.shape[1] > 2 * img.shape[0]      # panels side by side
    colours = {tuple(c) for c in np.round(img[..., :3].reshape(-1, 3), 2)[::37]}
    assert len(colours) > 12                    # coloured blocks, not a blank image


@pytest.mark.parametrize("mesh, src, dst, collectives", [
    ("x=2,y=3", "[3{x}6]", "[2{y}6]", None),
    ("x=2,y=2,z=2", "[4{x}8, 2{y,z}8]", "[8, 8]", [AllGather(0, "x"), AllGather(1, ("y", "z"))]),
    ("x=4", "[2{x}8, 8]", "[8, 2{x}8]", [AllGather(0, "x"), DynSlice(1, "x")]),
])
def test_svg_panels(tmp_path, mesh, src, dst, collectives):
    p = worked_example() if collectives is None else check(mesh, src, dst, collectives)
    path = tmp_path / "plan.svg"
    n = draw(p, path)
    svg = path.read_text()
    assert n == len(p.steps) + 1
    assert len(re.findall(r'id="panel-\d+"', svg)) == n
    for c in p.collectives:                      # the collective is written between panels
        assert str(c).split("(")[0] in svg
    assert f"local size {p.dst.size}" in svg
