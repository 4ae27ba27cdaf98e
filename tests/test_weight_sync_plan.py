"""Weight-sync planning: senders dealt over replicas (``Balance.xplan_bal``,
theorem ``Balanceproof.xplan_bal_balanced``), the rounds each rank derives
from its own cuts, planning at real sizes per rank, and the planner's reuse
of schedules. Planning only: one process, no data moves."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from problems import draw_placement
from verishard import ArrayType, Mesh
from verishard.crossmesh import crossmesh_plan




@st.composite
def _problem(draw):
    extent = (draw(st.sampled_from([8, 12, 16])), draw(st.sampled_from([4, 6, 8])))
    s_sizes = {"a": draw(st.integers(1, 4)), "b": draw(st.integers(1, 4))}
    d_sizes = {"u": draw(st.integers(1, 4)), "v": draw(st.integers(1, 3))}
    src = ArrayType.parse(draw_placement(draw, s_sizes, "ab", extent), Mesh.parse(f"a={s_sizes['a']},b={s_sizes['b']}"))
    dst = ArrayType.parse(draw_placement(draw, d_sizes, "uv", extent), Mesh.parse(f"u={d_sizes['u']},v={d_sizes['v']}"))
    n1, n2 = src.mesh.num_devices, dst.mesh.num_devices
    overlap = draw(st.integers(0, min(n1, n2)))       # targets that are also sources
    r2 = list(range(n1 - overlap, n1 - overlap + n2))
    return src, dst, list(range(n1)), r2, draw(st.integers(0, 7))


@settings(max_examples=60, deadline=None)
@given(_problem())
def test_dealt_senders_send_at_most_their_share_rounded_up(problem):
    src, dst, r1, r2, start = problem
    plain = crossmesh_plan(src, dst, r1, r2)
    dealt = crossmesh_plan(src, dst, r1, r2, start=start)
    # the same pieces (blocks and boxes), each sent by a rank holding its block
    for ps, qs in zip(plain.pieces, dealt.pieces):
        assert [(p.cell, p.box) for p in ps] == [(q.cell, q.box) for q in qs]
        assert all(src.blocks(r1.index(q.src)) == q.cell for q in qs)
    moved: Counter = Counter()
    sent: Counter = Counter()
    for j, qs in enumerate(dealt.pieces):
        for q in qs:
            if q.src != r2[j]:
                moved[q.cell] += 1
                sent[q.src] += 1
    holders = Counter(src.blocks(i) for i in range(len(r1)))
    for i, r in enumerate(r1):
        cell = src.blocks(i)
        assert sent[r] <= -(-moved[cell] // holders[cell]), (r, cell, sent[r], moved[cell], holders[cell])
    # the same pieces move: the same traffic per target
    assert [plain.received(j) for j in range(len(r2))] == [dealt.received(j) for j in range(len(r2))]



@st.composite
def _world_cuts(draw):
    """A world's cuts in transfer order ``(key, sender, receiver, box, bytes)``."""
    n = draw(st.integers(2, 9))
    out = []
    for k in range(draw(st.integers(1, 40))):
        a, b = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        length = draw(st.integers(1, 9))
        out.append((f"t{k % 5}", a, b, ((k, length),), length * draw(st.sampled_from([1, 2, 4]))))
    return n, out


@settings(max_examples=200, deadline=None)
@given(_world_cuts(), st.integers(1, 40))
def test_every_rank_derives_the_same_rounds_from_its_own_cuts(world, budget):
    """Each rank numbers the rounds of its own cuts alone (``rank_rounds``):
    both sides of a cut put it in the same round at the same place; a rank
    meets one partner per round, within the budget (or one larger cut)."""
    from verishard.torch.crossmesh import rank_rounds
    n, cuts = world
    parts = {r: dict(zip(*rank_rounds([c for c in cuts if r in c[1:3]], n, budget))) for r in range(n)}
    size = {c[:4]: c[4] for c in cuts}
    for key, a, b, box, _ in cuts:
        if a == b:
            continue
        where = [(t, rd.index((key, a, b, box))) for t, rd in parts[a].items() if (key, a, b, box) in rd]
        assert where and where == [(t, rd.index((key, a, b, box))) for t, rd in parts[b].items()
                                   if (key, a, b, box) in rd]
    for r, rounds in parts.items():
        for rd in rounds.values():
            assert len({(a, b) for _, a, b, _ in rd}) == 1            # one partner, one direction
            load = sum(size[c] for c in rd)
            assert load <= budget or len(rd) == 1
        # every cut of the rank is in exactly one of its rounds
        assert sorted(c for rd in rounds.values() for c in rd) == sorted(c[:4] for c in cuts
                                                                        if r in c[1:3] and c[1] != c[2])


def test_a_repeated_sync_reuses_its_schedule(monkeypatch):
    """The second plan of the same layouts, dtypes and budget builds nothing
    (no tensor planned, no core call, no packing) and carries the new
    tensors; another budget plans afresh."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    import verishard.core
    from verishard.torch import crossmesh as tt
    from verishard.torch.dtensor import fake_process_group

    with fake_process_group(8):
        src = DeviceMesh("cpu", torch.arange(4).reshape(2, 2))
        dst = DeviceMesh("cpu", torch.arange(4, 8).reshape(2, 2))

        def state(fill):
            return {f"w{k}": DTensor.from_local(torch.full((8, 16), float(fill + k)), src, (Replicate(), Shard(0)),
                                                run_check=False, shape=torch.Size((16, 16)), stride=(16, 1))
                    for k in range(3)}
        targets = {f"w{k}": (dst, (Replicate(), Shard(1))) for k in range(3)}
        calls = Counter()
        for owner, name in ((verishard.core, "xrank"), (tt, "rank_rounds"), (tt, "_move")):
            real = getattr(owner, name)
            monkeypatch.setattr(owner, name, lambda *a, _real=real, _name=name, **k: (calls.update([_name]),
                                                                                       _real(*a, **k))[1])
        tt._SCHEDULES.clear()
        first = tt.plan_transfer(state(0), targets, budget_bytes=1 << 20)
        # three tensors of one layout, held by 2 replicas: planned once per rotation of the deal
        assert calls["_move"] == 2 and calls["rank_rounds"] == 1
        # the tensors of one layout and rotation share its part by reference (w0 and w2: rotation 0)
        w = {m.name: m for m in first.moves}
        assert w["w0"].layout is w["w2"].layout and w["w0"].layout is not w["w1"].layout
        assert w["w0"].local is not w["w2"].local and w["w2"].name == "w2"
        # the kept schedule holds the shared parts and no tensor of this call
        (kept,) = tt._SCHEDULES.values()
        assert kept[0].moves == () and kept[1] == tuple(m.layout for m in first.moves)
        assert not any(isinstance(v, torch.Tensor) for v in vars(kept[1][0]).values())
        calls.clear()
        again = state(10)
        second = tt.plan_transfer(again, targets, budget_bytes=1 << 20)
        assert sum(calls.values()) == 0, calls
        assert second.rounds == first.rounds
        assert all(m.local is again[m.name]._local_tensor for m in second.moves)
        tt.plan_transfer(again, targets, budget_bytes=1 << 10)
        assert calls["rank_rounds"] == 1 and calls["_move"] == 2


def test_too_many_pieces_name_the_layouts_not_a_budget():
    """Every moved piece is at least one cut: past MAX_ROUND_CUTS pieces no
    budget helps, and the refusal says what lowers the count."""
    import pytest

    from verishard.errors import LimitError
    from verishard.limits import MAX_ROUND_CUTS
    from verishard.runtime.crossmesh_mpi import rounds
    n1, n2 = 128, 64   # a replicated norm from 128 FSDP shards to 64 ranks: 8192 pieces
    p = crossmesh_plan(f"[{4096 // n1}{{x}}4096]", "[4096]", src_mesh=f"x={n1}", dst_mesh=f"u={n2}")
    assert n1 * n2 > MAX_ROUND_CUTS
    for budget in (2, 1 << 20, 1 << 40):
        with pytest.raises(LimitError, match=r"8192 pieces that move.*no budget lowers the piece count.*sharded") as e:
            rounds(p, 2, budget=budget)
        assert "give a budget" not in str(e.value)


def _dtensor(mesh, placements, shape):
    import torch
    from torch.distributed.tensor import DTensor, Shard
    local = list(shape)
    for p, n in zip(placements, mesh.mesh.shape):
        if isinstance(p, Shard):
            local[p.dim] = -(-local[p.dim] // n)
    return DTensor.from_local(torch.empty(local, device="meta"), mesh, placements, run_check=False,
                              shape=torch.Size(shape), stride=torch.empty(shape, device="meta").stride())


def test_each_rank_plans_exactly_its_part_of_the_world_view():
    """Every rank's own schedule (pieces and numbered rounds) is the world
    view's restricted to its cuts; every target receives what it lacks."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard
    from verishard.torch import crossmesh as tt
    from verishard.torch.dtensor import fake_process_group

    with fake_process_group(8):
        src = DeviceMesh("cpu", torch.arange(4).reshape(2, 2))
        dst = DeviceMesh("cpu", torch.tensor([[2, 3], [4, 5], [6, 7]]))    # ranks 2, 3 on both sides
        layouts = {"a": ((Replicate(), Shard(0)), (Shard(0), Shard(1)), (12, 8)),
                   "b": ((Shard(1), Replicate()), (Replicate(), Shard(0)), (7, 6)),      # uneven
                   "c": ((Replicate(), Replicate()), (Shard(0), Replicate()), (9,)),
                   "d": ((Shard(0), Shard(1)), (Replicate(), Replicate()), (4, 4, 2))}
        state = {k: _dtensor(src, s, shape) for k, (s, _, shape) in layouts.items()}
        targets = {k: (dst, d) for k, (_, d, _) in layouts.items()}
        world = tt.plan_transfer_world(state, targets, budget_bytes=40)
        loads = world.loads()
        for r in range(8):
            part = tt.plan_transfer(state, targets, budget_bytes=40, rank=r)
            mine = [(t, tuple(c for c in rd if r in c[1:3])) for t, rd in zip(world.round_ids, world.rounds)]
            assert list(zip(part.round_ids, part.rounds)) == [(t, rd) for t, rd in mine if rd]
            assert part.loads() == {r: loads[r]}
            assert loads[r][1] == world.lower_bound(r)
            for rd in part.rounds:
                assert len({(a, b) for _, a, b, _ in rd}) == 1
                assert sum(4 * _volume(box) for _, _, _, box in rd) <= 40 or len(rd) == 1


def _volume(box) -> int:
    n = 1
    for _, length in box:
        n *= length
    return n


def test_a_rank_plans_its_part_at_real_sizes_without_a_cut_cap():
    """8B FSDP 128 -> 64: a replicated norm reaches every target in 128
    pieces (8192 in the world, once refused by a cut cap); each rank plans
    its own 128 or 64 pieces, and the tensors of one layout share one plan."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Replicate, Shard
    import verishard.core
    from verishard.torch import crossmesh as tt
    from verishard.torch.dtensor import fake_process_group

    with fake_process_group(192) as _:
        src = DeviceMesh("cpu", torch.arange(128))
        dst = DeviceMesh("cpu", torch.arange(128, 192).reshape(8, 8))
        state = {f"layers.{i}.norm": _dtensor(src, (Shard(0),), (4096,)) for i in range(4)}
        targets = {k: (dst, (Replicate(), Replicate())) for k in state}
        calls = Counter()
        real = verishard.core.xrank
        verishard.core.xrank = lambda *a, **k: (calls.update(["xrank"]), real(*a, **k))[1]
        try:
            for rank in (0, 128):
                tt._SCHEDULES.clear()
                part = tt.plan_transfer(state, targets, budget_bytes=64 << 20, rank=rank)
                sent, received = part.loads()[rank]
                if rank == 0:     # every target reads rank 0's block
                    assert sent == 4 * 64 * 32 * 4 and received == 0
                else:
                    assert received == part.lower_bound(rank) == 4 * 4096 * 4
                    assert sum(len(rd) for rd in part.rounds) == 4 * 128
        finally:
            verishard.core.xrank = real
        assert calls["xrank"] <= 2     # one layout (one rotation: no replicas) per rank
