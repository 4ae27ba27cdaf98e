"""General DTensor layouts: a dimension split unevenly by several mesh
dimensions (DTensor's nested ``torch.chunk``, uneven ``_StridedShard``),
which our types cannot describe, as explicit per-rank boxes
(``verishard.torch.dtensor.layout_boxes``) moved by the verified box schedule
(``core.bplan``: ``Boxes.bplan``/``brounds``, ``Boxesworldproof.brounds_correct``).

The box conversion is checked here without a process group against
DTensor's own ``_compute_local_shape_and_global_offset`` (the function
behind ``compute_local_shape_and_global_offset``, per mesh coordinate) on
random shapes and placements; the redistributions run on 4 gloo processes
(tests/torch_layouts_job.py) and are compared bit for bit with
``DTensor.redistribute`` and ``distribute_tensor``.
"""

from __future__ import annotations

import itertools
import os
import random
import sys
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
from torch.distributed.tensor import Replicate, Shard  # noqa: E402
from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset  # noqa: E402
from torch.distributed.tensor.placement_types import _StridedShard  # noqa: E402

from verishard.torch.dtensor import layout_boxes  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_job import launch  # noqa: E402

NPROCS = 4


def _random_layout(rnd: random.Random):
    mesh = rnd.choice([(2, 2), (2, 3), (3, 2), (2, 2, 2), (4,), (2, 4)])
    ndim = rnd.randint(1, 3)
    shape = tuple(rnd.randint(0, 9) for _ in range(ndim))
    placements = []
    for _ in mesh:
        kind = rnd.random()
        d = rnd.randrange(ndim)
        placements.append(Replicate() if kind < 0.25 else
                          _StridedShard(d, split_factor=rnd.randint(1, 4)) if kind < 0.5 else Shard(d))
    return mesh, shape, tuple(placements)


def test_boxes_are_dtensors_own_local_shapes_and_offsets():
    """On 600 random layouts (meshes of 2-8 ranks, rank-1 to rank-3 shapes of
    0-9 per dimension, Shard, Replicate and _StridedShard of split factor
    1-4 in any order): every rank's local shape is DTensor's, its first box
    in local order starts at DTensor's global offset, its boxes tile its
    local tensor, and every global index is held by exactly as many ranks
    as the mesh dimensions that shard nothing replicate it."""
    rnd = random.Random(33)
    nested = strided_runs = 0
    for _ in range(600):
        mesh, shape, placements = _random_layout(rnd)
        holdings, shapes = layout_boxes(shape, mesh, placements)
        held = Counter()
        for flat, coords in enumerate(itertools.product(*map(range, mesh))):
            want_shape, want_offset = _compute_local_shape_and_global_offset(shape, mesh, list(coords), placements)
            assert shapes[flat] == tuple(want_shape), (mesh, shape, placements, coords)
            mine = [(box, at) for r, box, at in holdings if r == flat]
            strided_runs += len(mine) > 1
            if all(want_shape):
                first = next(box for box, at in mine if not any(at))
                assert tuple(s for s, _ in first) == tuple(want_offset), (mesh, shape, placements, coords)
            assert sum(_vol(box) for box, _ in mine) == \
                _vol(tuple((0, n) for n in want_shape))
            for box, _ in mine:
                for idx in itertools.product(*[range(s, s + n) for s, n in box]):
                    held[idx] += 1
        sharding = {i for i, p in enumerate(placements) if not isinstance(p, Replicate)}
        copies = _prod(n for i, n in enumerate(mesh) if i not in sharding)
        assert all(held[idx] == copies for idx in itertools.product(*map(range, shape))), (mesh, shape, placements)
        assert sum(held.values()) == copies * _prod(shape)
        nested += len({p.dim for p in placements if not isinstance(p, Replicate)}) < len(sharding)
    assert nested > 100 and strided_runs > 20, (nested, strided_runs)


def _vol(box) -> int:
    return _prod(n for _, n in box)


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def test_box_schedule_receives_exactly_what_a_rank_lacks():
    """The extracted schedule on DTensor's nested layouts of a 5 x 3 x 7
    tensor on a (2, 2) mesh: every target box is covered exactly once by its
    pieces, every piece lies in its sender's box, and a rank receives from
    others exactly its target size less what it holds (the lower bound)."""
    from verishard.torch.backend import BoxPlan
    S, R = Shard, Replicate
    layouts = [(S(0), S(0)), (S(2), S(2)), (S(0), S(2)), (R(), S(0)), (_StridedShard(0, split_factor=2), S(0)),
               (S(1), S(1)), (R(), R())]
    for src, dst in itertools.permutations(layouts, 2):
        s, _ = layout_boxes((5, 3, 7), (2, 2), src)
        d, _ = layout_boxes((5, 3, 7), (2, 2), dst)
        plan = BoxPlan.build((5, 3, 7), s, d, 4, 1 << 20)
        for (r, box, _), ps in zip(d, plan.pieces):
            cover = Counter()
            for p in ps:
                assert any(q == p.src and all(b <= a and a + m <= b + n for (a, m), (b, n) in zip(p.box, qb))
                           for q, qb, _ in s), (src, dst, p)
                for idx in itertools.product(*[range(a, a + m) for a, m in p.box]):
                    cover[idx] += 1
            assert cover == Counter(itertools.product(*[range(a, a + m) for a, m in box])), (src, dst, r)
        for rank in range(4):
            assert plan.received(rank) == plan.lower_bound(rank), (src, dst, rank)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return launch("torch_layouts_job.py", tmp_path_factory.mktemp("torch_layouts"), NPROCS, timeout=300)


def _records(job, case):
    for r, d in sorted(job.items()):
        for rec in d["records"]:
            if rec["case"] == case:
                yield r, rec


def test_formerly_refused_layouts_run_bit_identical_to_dtensor(job):
    """Every pair of placements of a (5, 3, 7) and a (3, 6, 5) tensor on a
    (2, 2) mesh in which the source or the target was refused before (a
    dimension split unevenly by both mesh dimensions): on every rank the
    result is DTensor.redistribute's (local shard bits, placements, shard
    order, mesh, tensor meta) and distribute_tensor's target shard, by the
    box schedule."""
    n, nested, strided = Counter(), 0, 0
    for r, rec in _records(job, "uneven"):
        where = f"rank {r}, {rec['shape']} {rec['dtype']}: {rec['src']} -> {rec['dst']}"
        assert rec["ours_error"] is None, where + "\n" + rec.get("traceback", "")
        assert rec["dtensor_error"] is None, where + ": " + rec["dtensor_error"]
        # chosen as refused before (from_spec), and DTensor's own shards (gathered) are not our blocks
        assert not rec["layouts_agree"], where
        assert rec["plan"] == "BoxPlan", where
        assert rec["ours_vs_oracle"] and rec["placements_vs_oracle"] and rec["shape_ok"], where
        assert rec["dtensor_vs_oracle"] and rec["ours_vs_dtensor"] and rec["spec_vs_dtensor"], where
        n[r] += 1
        if r == 0:
            strided += "_StridedShard" in rec["src"] + rec["dst"]
            nested += any(pl.count(f"Shard(dim={d})") == 2 for pl in (rec["src"], rec["dst"]) for d in range(3))
    assert set(n) == set(range(NPROCS)) and len(set(n.values())) == 1 and n[0] >= 200, n
    assert strided >= 50 and nested >= 50, (strided, nested)
    print(f"\n{n[0]} formerly refused pairs on (2, 2): all bit-identical to DTensor.redistribute "
          f"({strided} with _StridedShard, {nested} nested torch.chunk)")


def test_box_redistribution_gradients_equal_dtensors(job):
    recs = list(_records(job, "grad"))
    assert len(recs) == 2 * NPROCS
    assert all(rec["grad_equal"] and rec["grad_spec"] for _, rec in recs), recs


def test_partial_next_to_a_nested_layout_reduces_to_the_global_tensor(job):
    """Partial sources and targets (sum, max, min) next to a dimension split
    unevenly by both mesh dimensions: the source is reduced first, the
    target made pending after, around the box schedule; full_tensor() of the
    result is the global tensor on every rank."""
    recs = list(_records(job, "partial"))
    assert len(recs) == NPROCS * 24
    for r, rec in recs:
        where = f"rank {r}, {rec['op']}: {rec['src']} -> {rec['dst']}"
        assert rec["error"] is None, where + "\n" + rec.get("traceback", "")
        assert rec["plan"] == "BoxPlan" and rec["ok"], where
    assert all(rec["is_box"] for _, rec in _records(job, "boxplan"))


def test_crossmesh_box_layouts_match_distribute_tensor(job):
    """Across meshes (overlapping rank sets, a permuted 2 x 2 mesh, a
    sub-mesh of 2 or 3 ranks): a nested or strided uneven layout on either
    side runs the box schedule over world ranks; every target rank holds
    distribute_tensor's shard, every other rank an empty local tensor."""
    recs = list(_records(job, "crossmesh"))
    assert len(recs) == NPROCS * 4
    for r, rec in recs:
        assert "error" not in rec, (r, rec["label"], rec.get("traceback"))
        assert rec["ok"], (r, rec["label"])


def test_transfer_rounds_box_layouts_with_the_others(job):
    """transfer() of a dict with a nested and a strided uneven layout (box
    schedules) next to a plain one, in rounds of 64 bytes: every target rank
    holds distribute_tensor's shard of each, and receives exactly the bytes
    it lacks (the lower bound, from the layouts)."""
    recs = list(_records(job, "transfer_boxes"))
    assert len(recs) == NPROCS
    for r, rec in recs:
        assert "error" not in rec, (r, rec.get("traceback"))
        assert rec["ok"] and rec["received"] == rec["lower_bound"], (r, rec)
        assert rec["kinds"] == ["BoxPlan", "BoxPlan", "RankPlan"] and rec["rounds"] > 3, rec


def test_enable_routes_nested_layouts(job):
    """Under ``verishard.torch.enabled()``, DTensor's own redistribute to a
    nested uneven layout runs the box schedule (routed, no fallback) and
    gives DTensor's own local shard."""
    recs = list(_records(job, "enabled"))
    assert len(recs) == NPROCS
    for r, rec in recs:
        assert rec["same"] and rec["info"]["routed"] == 1 and rec["info"]["fallbacks"] == 0, (r, rec)


def test_docs_page_runs():
    import doctest
    result = doctest.testfile(os.path.join(HERE, "..", "docs", "torch.md"), module_relative=False,
                              optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 9 and result.failed == 0


def test_core_bplan_refuses_bad_input():
    """The binding refuses what the theorem does not cover: boxes of another
    number of dimensions (Python), a budget or an index past 2**50 (the glue)."""
    from verishard import core
    from verishard.errors import LimitError, ShardingError
    one = [(0, ((0, 4),))]
    with pytest.raises(ShardingError, match="has 1 dimensions, not 2"):
        core.bplan(one, [(1, ((0, 2), (0, 2)))], 10)
    with pytest.raises(LimitError, match="budget"):
        core.bplan(one, one, 2**50 + 1)
    with pytest.raises(LimitError, match="2\\^50"):
        core.bplan([(0, ((2**50 + 1, 1),))], one, 10)
    pieces, rounds = core.bplan(one, [(1, ((1, 2),)), (0, ((0, 0),))], 1)
    assert [[(p.src, p.box) for p in ps] for ps in pieces] == [[(0, ((1, 2),))], []]
    assert [[(c.src, c.dst, c.box) for c in rd] for rd in rounds] == [[(0, 1, ((1, 1),))], [(0, 1, ((2, 1),))]]
