"""The box schedule's precondition, ``core.bcovers`` (``Cover.bcovers``):
decided exactly (``Coverproof.bcovers_spec``: the source boxes hold every
index of the array and every target box lies in it), and where it holds,
``core.bplan`` gives every target every index of its box exactly once
(``Coverproof.brounds_complete``). The callers refuse layouts it rejects
(``BoxPlan.build``, the checkpoint loader's box schedule)."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from verishard import core
from verishard.errors import CheckpointError, LimitError, PlanError

WIDE = 2**31 + 1


def _indices(box):
    return itertools.product(*[range(s, s + n) for s, n in box])


def _brute(shape, src, dst) -> bool:
    held = {p for _, b in src for p in _indices(b)}
    array = set(_indices([(0, n) for n in shape]))
    return array <= held and all(set(_indices(b)) <= array for _, b in dst)


def _random_layout(rng, shape, n):
    out = []
    for r in range(n):
        box = []
        for g in shape:
            s = rng.randrange(0, g + 2)
            box.append((s, rng.randrange(0, g + 2 - s)))
        out.append((r, tuple(box)))
    return out


def _grid(shape, cuts):
    """A layout of the grid cut at ``cuts`` per dimension, one rank per cell."""
    per_dim = [[(a, b - a) for a, b in zip([0] + c, c + [g])] for g, c in zip(shape, cuts)]
    return [(r, cell) for r, cell in enumerate(itertools.product(*per_dim))]


def test_bcovers_decides_coverage_exactly():
    """Against a brute-force enumeration of indices: random boxes (some
    empty, some past the array) and grids with one cell dropped, or a cell
    grown past the array (2-3 dimensions)."""
    rng = random.Random(41)
    seen = Counter()
    for _ in range(400):
        shape = tuple(rng.randrange(1, 5) for _ in range(rng.choice((1, 2, 3))))
        if rng.random() < 0.5:
            src, dst = _random_layout(rng, shape, rng.randrange(0, 7)), _random_layout(rng, shape, rng.randrange(0, 4))
        else:
            cuts = [sorted(rng.sample(range(1, g), rng.randrange(0, g))) if g > 1 else [] for g in shape]
            src = _grid(shape, cuts) * rng.choice((1, 2))
            rng.shuffle(src)
            if rng.random() < 0.4:
                src.pop(rng.randrange(len(src)))
            dst = _grid(shape, [[] for _ in shape])
            if rng.random() < 0.3:
                r, b = dst[0]
                dst[0] = (r, b[:-1] + ((b[-1][0], b[-1][1] + 1),))
        want = _brute(shape, src, dst)
        assert core.bcovers(shape, src, dst) == want, (shape, src, dst)
        seen[want] += 1
    assert seen[True] > 50 and seen[False] > 50, seen


def test_every_target_gets_its_whole_box_where_bcovers_holds():
    """``brounds_complete``: under ``bcovers`` every index of a target box is
    in exactly one piece of the target's schedule (its own or a cut's)."""
    rng = random.Random(7)
    checked = 0
    for _ in range(150):
        shape = tuple(rng.randrange(1, 6) for _ in range(rng.choice((1, 2, 3))))
        cuts = [sorted(rng.sample(range(1, g), rng.randrange(0, g))) if g > 1 else [] for g in shape]
        src = _grid(shape, cuts) + _random_layout(rng, shape, 2)
        dst = [(r, tuple((s, min(n, g - s)) for (s, n), g in zip(b, shape)))
               for r, b in _random_layout(rng, tuple(g - 1 for g in shape), 4)]
        if not core.bcovers(shape, src, dst):
            continue
        pieces, _ = core.bplan(src, dst, 1 << 20)
        for (r, box), ps in zip(dst, pieces):
            got = Counter(p for q in ps for p in _indices(q.box))
            assert got == Counter(_indices(box)), (shape, src, r, box)
        checked += 1
    assert checked > 100


def test_bcovers_at_full_width():
    """Shapes and boxes past 2^31 cross the bindings whole; past the element
    cap they are refused."""
    assert core.bcovers((WIDE,), [(0, ((0, WIDE),))], [(1, ((5, WIDE - 5),))])
    assert not core.bcovers((WIDE,), [(0, ((0, WIDE - 1),))], [(1, ((0, 1),))])
    assert not core.bcovers((WIDE,), [(0, ((0, WIDE),))], [(1, ((1, WIDE),))])
    assert core.bcovers((2**25, 2**25), [(0, ((0, 2**25), (0, 2**25)))], [(0, ((0, 1), (0, 1)))])
    with pytest.raises(LimitError, match="2\\^50"):
        core.bcovers((2**26, 2**25), [(0, ((0, 2**26), (0, 2**25)))], [])


def test_box_plan_refuses_a_source_that_does_not_cover():
    from verishard.torch.backend import BoxPlan
    src = ((0, ((0, 3),), (0,)), (1, ((4, 2),), (0,)))   # index 3 is held by no rank
    dst = ((0, ((0, 6),), (0,)),)
    with pytest.raises(PlanError, match="does not hold every element of the \\(6,\\) array"):
        BoxPlan.build((6,), src, dst, 4, 1 << 20)
    with pytest.raises(PlanError, match="target box lies outside"):
        BoxPlan.build((5,), ((0, ((0, 5),), (0,)),), ((0, ((2, 4),), (0,)),), 4, 1 << 20)
    plan = BoxPlan.build((6,), src + ((2, ((3, 1),), (0,)),), dst, 4, 1 << 20)
    assert plan.received(0) == 3 and plan.lower_bound(0) == 3


def test_checkpoint_box_schedule_refuses_blocks_that_do_not_cover():
    from verishard.checkpoint.targets import Boxes, box_pieces
    target = Boxes((4, 4), [(((0, 4), (0, 4)), (0, 0))], (4, 4))
    blocks = [((0, 2), (0, 4)), ((2, 2), (0, 2))]          # rows 2-3, columns 2-3 stored nowhere
    with pytest.raises(CheckpointError, match="do not hold every element of the \\(4, 4\\) array"):
        box_pieces(blocks, target)
    pieces = box_pieces(blocks + [((2, 2), (2, 2))], target)
    assert sorted(i for i, _, _ in pieces) == [0, 1, 2]
