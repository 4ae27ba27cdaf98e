"""The box schedule reads, per target, only the holders whose boxes meet it
(``Boxes.window`` over the tree of holders ``Boxes.bindex``; theorem
``Boxesworldproof.brounds_correct`` through ``Boxesproof.bsched_in_correct``).
These tests check what the binding returns against a brute-force count over
every index, on layouts the index must not get wrong: replicated holders,
empty boxes, holders of very different lengths (the window's reach), boxes
of 1 to 3 dimensions, ranks in any order.
"""

from __future__ import annotations

import itertools
import random

from verishard import core


def _inside(p, box):
    return all(s <= x < s + n for x, (s, n) in zip(p, box))


def _random_layout(rnd: random.Random, shape, n):
    out = []
    for _ in range(n):
        box = []
        for size in shape:
            s = rnd.randrange(size + 1)
            box.append((s, rnd.randrange(size - s + 1)))
        out.append((rnd.randrange(2 * n), tuple(box)))
    return out


def _check(src, dst):
    pieces, rounds = core.bplan(src, dst, 5)
    assert len(pieces) == len(dst)
    cuts = [c for rd in rounds for c in rd]
    for j, ((self, tbox), ps) in enumerate(zip(dst, pieces)):
        for p in itertools.product(*(range(s, s + n) for s, n in tbox)):
            holders = {r for r, b in src if _inside(p, b)}
            got = [q for q in ps if _inside(p, q.box)]
            # every index some rank holds arrives once; from the target itself exactly where it holds it
            assert len(got) == (1 if holders else 0), (src, dst, j, p)
            if got:
                assert got[0].src in holders
                assert (got[0].src == self) == (self in holders)
                moved = [c for c in cuts if c.target == j and _inside(p, c.box)]
                assert len(moved) == (0 if got[0].src == self else 1)
        for q in ps:
            assert any(r == q.src and all(s <= qs and qs + qn <= s + n for (s, n), (qs, qn) in zip(b, q.box))
                       for r, b in src if all(qn > 0 for _, qn in q.box))


def test_random_layouts_match_a_count_over_every_index():
    rnd = random.Random(41)
    for _ in range(300):
        shape = [rnd.randrange(1, 7) for _ in range(rnd.randrange(1, 4))]
        _check(_random_layout(rnd, shape, rnd.randrange(1, 9)), _random_layout(rnd, shape, rnd.randrange(1, 6)))


def test_long_holder_is_found_far_from_its_start():
    # one holder spans the whole dimension, the others hold one element each;
    # a target near the far end takes its own element, then the rest from the
    # long holder, which starts at 0, 60 elements before the target's box
    src = [(0, ((0, 64),))] + [(r, ((r, 1),)) for r in range(1, 64)]
    dst = [(61, ((60, 4),)), (5, ((5, 1),))]
    _check(src, dst)
    pieces, _ = core.bplan(src, dst, 5)
    assert [(q.src, q.box) for q in pieces[0]] == [(61, ((61, 1),)), (0, ((60, 1),)), (0, ((62, 2),))]


def test_grid_of_holders_gives_each_target_its_cells():
    # a 16x16 grid of 4x4 cells to a 4x4 grid of 16x16 blocks: each block from its 16 cells
    src = [(8 * i + j, ((4 * i, 4), (4 * j, 4))) for i in range(16) for j in range(16)]
    dst = [(4 * i + j, ((16 * i, 16), (16 * j, 16))) for i in range(4) for j in range(4)]
    pieces, _ = core.bplan(src, dst, 1 << 20)
    for (_, (a, b)), ps in zip(dst, pieces):
        assert sorted((q.box for q in ps)) == sorted(((4 * i, 4), (4 * j, 4))
                                                     for i in range(a[0] // 4, a[0] // 4 + 4)
                                                     for j in range(b[0] // 4, b[0] // 4 + 4))


def test_replicated_and_empty_holders():
    # every block held by 4 ranks (the same box: the tree cannot split them), plus empty boxes
    src = [(4 * b + r, ((3 * b, 3), (0, 5))) for b in range(8) for r in range(4)] + [(99, ((7, 0), (0, 5)))]
    dst = [(4 * b + 1, ((0, 24), (b % 5, 1))) for b in range(8)] + [(50, ((5, 0), (0, 5)))]
    _check(src, dst)
    pieces, _ = core.bplan(src, dst, 5)
    # a target takes its own block, and each other block from its first holder in the tree's order
    assert all(len(ps) == 8 for ps in pieces[:8]) and pieces[8] == []
