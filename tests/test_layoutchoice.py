"""The verified choice of path between two layouts given as boxes
(``core.lplan``: ``Layoutchoice.lplan``, ``Layoutchoiceproof.lplan_spec``):
the type planner where the proposed types describe exactly the boxes, else
the box schedule."""
import itertools

import numpy as np
import pytest

from verishard import ArrayType, Mesh, core
from verishard.errors import ShardingError

MESH = Mesh.parse("x=2,y=2")
# even and uneven types on one mesh, pairs of one global shape
TYPES = {(6, 4): ["[3{x}6, 2{y}4]", "[6, 1{x,y}4]", "[2{x,y}6, 4]", "[6, 4]", "[3{y}6, 2{x}4]"],
         (5, 3): ["[3{x}5, 2{y}3]", "[2{x,y}5, 3]", "[5, 3]", "[3{y}5, 3]", "[5, 1{x,y}3]"]}
PAIRS = [(ArrayType.parse(a, MESH), ArrayType.parse(b, MESH))
         for ts in TYPES.values() for a, b in itertools.permutations(ts, 2)]


def _assemble(layout, rounds, shape):
    """Each target rank's box filled from the global array ``arange``: what it
    holds itself, then the cuts addressed to it; unfilled indices stay -1."""
    a = np.arange(int(np.prod(shape))).reshape(shape)
    held = {r: b for r, b in layout[0]}
    out = []
    for j, (r, box) in enumerate(layout[1]):
        got = np.full(tuple(l for _, l in box), -1)
        own = held.get(r)
        for idx in itertools.product(*(range(s, s + l) for s, l in box)):
            if own is not None and all(s <= i < s + l for i, (s, l) in zip(idx, own)):
                got[tuple(i - s for i, (s, _) in zip(idx, box))] = a[idx]
        for c in (c for rd in rounds for c in rd if c.target == j):
            assert c.dst == r
            sl = tuple(slice(s - b, s - b + l) for (s, l), (b, _) in zip(c.box, box))
            assert (got[sl] == -1).all(), "an index received twice or held and received"
            got[sl] = a[tuple(slice(s, s + l) for s, l in c.box)]
        out.append(got)
    return a, out


@pytest.mark.parametrize("s,d", PAIRS, ids=str)
def test_types_describing_the_boxes_take_the_type_planner(s, d):
    got = core.lplan(MESH, core.type_layout(s), core.type_layout(d), 1 << 20, (s, d))
    assert isinstance(got, core.PlanReport)
    want = core.eplan(MESH, s, d)
    assert (got.collectives, got.received, got.peak) == (want.collectives, want.received, want.peak)


@pytest.mark.parametrize("s,d", PAIRS[::4], ids=str)
def test_other_layouts_take_the_box_schedule(s, d):
    ls, lt = core.type_layout(s), core.type_layout(d)
    # the target's ranks renumbered: the types no longer describe it
    moved = [((r + 1) % MESH.num_devices, b) for r, b in lt]
    for types, target in [((s, d), moved), (None, lt), ((d, s), lt)]:
        if types == (d, s) and s == d:
            continue
        got = core.lplan(MESH, ls, target, 7, types)
        assert got == core.bplan(ls, target, 7)[1]
        a, blocks = _assemble((ls, target), got, s.global_shape)
        for (_, box), blk in zip(target, blocks):
            assert (blk == a[tuple(slice(b, b + l) for b, l in box)]).all()


def test_empty_trailing_blocks_match_the_core():
    m = Mesh.parse("x=4")
    s, d = ArrayType.parse("[2{x}5]", m), ArrayType.parse("[5]", m)
    assert core.type_layout(s)[3][1][0][1] == 0
    got = core.lplan(m, core.type_layout(s), core.type_layout(d), 100, (s, d))
    assert isinstance(got, core.PlanReport)
    # DTensor's boxes leave empty shards out: the same non-empty boxes still take the types
    held = [h for h in core.type_layout(s) if h[1][0][1]]
    assert isinstance(core.lplan(m, held, core.type_layout(d), 100, (s, d)), core.PlanReport)
    # a non-empty box that differs does not
    other = held[:-1] + [(3, ((4, 1),))]
    assert core.lplan(m, other, core.type_layout(d), 100, (s, d)) == core.bplan(other, core.type_layout(d), 100)[1]


def test_bad_input_is_refused():
    s = ArrayType.parse("[3{x}6, 4]", MESH)
    with pytest.raises(ShardingError, match="dimensions"):
        core.lplan(MESH, core.type_layout(s), [(0, ((0, 2),))], 10, (s, s))
    with pytest.raises(ShardingError):
        core.lplan(MESH, core.type_layout(s), core.type_layout(s), 10, (s, ArrayType.parse("[3{u}6, 4]", "u=2")))


def test_type_path_takes_the_exchange_where_it_receives_less():
    s, d = ArrayType.parse("[1{x,y}4, 4, 2]", MESH), ArrayType.parse("[4, 1{y,x}4, 2]", MESH)
    got = core.lplan(MESH, core.type_layout(s), core.type_layout(d), 100, (s, d))
    assert [type(c).__name__ for c in got.collectives] == ["Exchange"]
    assert got.received == core.eplan(MESH, s, d).received
