"""Each rank plans only its own part (``Perrank.rank_recv`` / ``rank_send``):
against the world schedule ``Perrank.wplan`` assembled from every target's
receive list (theorems ``Perrankproof.rank_recv_restrict``,
``rank_send_restrict``), against ``Balance.xplan_bal``'s dealt world schedule,
and the balance bound (``Perrankproof.rank_send_balanced``), on random
placements, uneven ones included. Planning only: one process."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from problems import draw_placement
from verishard import ArrayType, Mesh, core
from verishard.crossmesh import crossmesh_rank_plan




@st.composite
def _problem(draw):
    extent = tuple(draw(st.sampled_from([5, 6, 8, 12])) for _ in range(draw(st.integers(1, 2))))
    s_sizes = {"a": draw(st.integers(1, 4)), "b": draw(st.integers(1, 3))}
    d_sizes = {"u": draw(st.integers(1, 4)), "v": draw(st.integers(1, 3))}
    src = ArrayType.parse(draw_placement(draw, s_sizes, "ab", extent, uneven=True),
                          Mesh.parse(f"a={s_sizes['a']},b={s_sizes['b']}"))
    dst = ArrayType.parse(draw_placement(draw, d_sizes, "uv", extent, uneven=True),
                          Mesh.parse(f"u={d_sizes['u']},v={d_sizes['v']}"))
    n1, n2 = src.mesh.num_devices, dst.mesh.num_devices
    r1 = draw(st.permutations(range(n1)))
    overlap = draw(st.integers(0, min(n1, n2)))    # targets that are also sources
    r2 = draw(st.permutations(range(n1 - overlap, n1 - overlap + n2)))
    return src, dst, list(r1), list(r2), draw(st.integers(0, 7)), draw(st.sampled_from([1, 2, 5, 1000]))


@settings(max_examples=80, deadline=None)
@given(_problem())
def test_each_rank_plans_exactly_its_part_of_the_world_schedule(problem):
    src, dst, r1, r2, start, per_cut = problem
    world = core.wplan(src, r1, dst, r2, start)
    assert world is not None
    # the world assembled from the targets' own lists deals as Balance.xplan_bal does
    assert world == core.xplan(src, r1, dst, r2, start)
    sent: dict[int, list] = {}
    for rank in sorted(set(r1) | set(r2)):
        part = crossmesh_rank_plan(src, dst, rank, r1, r2, start=start, per_cut=per_cut)
        if rank in r2:
            j = r2.index(rank)
            assert [p for p, _ in part.recv] == world[j]
            for p, cuts in part.recv:   # moved pieces arrive in cuts that tile them, within the cut size
                assert (cuts == ()) == (p.src == rank)
                if cuts:
                    assert sum(_vol(c) for c in cuts) == _vol(p.box)
                    assert all(_vol(c) <= per_cut or _slices(c, p.box) == 1 for c in cuts)
        else:
            assert part.recv == ()
        sent[rank] = [(j, r, p) for j, r, p, _ in part.send]
        # the sender cuts each piece as its receiver does
        for j, r, p, cuts in part.send:
            other = crossmesh_rank_plan(src, dst, r, r1, r2, start=start, per_cut=per_cut)
            assert (p, cuts) in other.recv
    # what each rank sends: the world's pieces from it to other ranks, in target order
    for rank in sorted(set(r1) | set(r2)):
        want = [(j, r2[j], p) for j, ps in enumerate(world) for p in ps if p.src == rank and r2[j] != rank]
        assert sent[rank] == want


@settings(max_examples=60, deadline=None)
@given(_problem())
def test_each_sender_sends_at_most_its_share_of_its_block_rounded_up(problem):
    src, dst, r1, r2, start, _ = problem
    world = core.wplan(src, r1, dst, r2, start)
    readers: Counter = Counter()
    for j, ps in enumerate(world):
        for p in ps:
            if p.src != r2[j]:
                readers[p.cell] += 1
    holders = Counter(src.blocks(i) for i in range(len(r1)))
    for i, rank in enumerate(r1):
        cell = src.blocks(i)
        part = crossmesh_rank_plan(src, dst, rank, r1, r2, start=start)
        assert len(part.send) <= -(-readers[cell] // holders[cell])
        assert all(p.cell == cell and p.src == rank for _, _, p, _ in part.send)



def _vol(box) -> int:
    n = 1
    for _, length in box:
        n *= length
    return n


def _slices(cut, box) -> int:
    """Indices along the first dimension where the cut's box is cut (a single slice: 1)."""
    d = next((k for k, (_, length) in enumerate(box) if length > 1), 0)
    return cut[d][1]
