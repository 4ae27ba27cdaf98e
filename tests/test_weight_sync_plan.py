"""Weight-sync planning: senders dealt over replicas (``Balance.xplan_bal``,
theorem ``Balanceproof.xplan_bal_balanced``) and the planner's reuse of
schedules. Planning only: one process, no data moves."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from verishard import ArrayType, Mesh
from verishard.crossmesh import crossmesh_plan


def _placement(draw, mesh_sizes, names, extent):
    """A random even type of a 2-d array on a mesh: each dimension sharded by
    at most one axis that divides it, the rest replicated."""
    axes = list(names)
    dims = []
    for n in extent:
        ax = draw(st.sampled_from([None] + axes))
        if ax is not None and n % mesh_sizes[ax] == 0:
            dims.append(f"{n // mesh_sizes[ax]}{{{ax}}}{n}")
            axes.remove(ax)
        else:
            dims.append(str(n))
    return "[" + ", ".join(dims) + "]"


@st.composite
def _problem(draw):
    extent = (draw(st.sampled_from([8, 12, 16])), draw(st.sampled_from([4, 6, 8])))
    s_sizes = {"a": draw(st.integers(1, 4)), "b": draw(st.integers(1, 4))}
    d_sizes = {"u": draw(st.integers(1, 4)), "v": draw(st.integers(1, 3))}
    src = ArrayType.parse(_placement(draw, s_sizes, "ab", extent), Mesh.parse(f"a={s_sizes['a']},b={s_sizes['b']}"))
    dst = ArrayType.parse(_placement(draw, d_sizes, "uv", extent), Mesh.parse(f"u={d_sizes['u']},v={d_sizes['v']}"))
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
        assert all(_block(src, r1.index(q.src)) == q.cell for q in qs)
    moved: Counter = Counter()
    sent: Counter = Counter()
    for j, qs in enumerate(dealt.pieces):
        for q in qs:
            if q.src != r2[j]:
                moved[q.cell] += 1
                sent[q.src] += 1
    holders = Counter(_block(src, i) for i in range(len(r1)))
    for i, r in enumerate(r1):
        cell = _block(src, i)
        assert sent[r] <= -(-moved[cell] // holders[cell]), (r, cell, sent[r], moved[cell], holders[cell])
    # the same pieces move: the same traffic per target
    assert [plain.received(j) for j in range(len(r2))] == [dealt.received(j) for j in range(len(r2))]


def _block(t: ArrayType, i: int) -> tuple[int, ...]:
    """The block (block number per dimension) source device ``i`` of type ``t`` holds."""
    return tuple(s // n for s, n in zip(t.block_starts(i), t.local_shape))


def _first_fit_from_the_first_round(per_tensor, budget):
    """The packing's specification: each tensor round into the first packed
    round where all its senders and receivers stay within the budget."""
    packed, loads = [], []
    for name, itemsize, rounds in per_tensor:
        for rd in rounds:
            send, recv = Counter(), Counter()
            for a, b, _, box in rd:
                if a != b:
                    n = itemsize
                    for _, length in box:
                        n *= length
                    send[a] += n
                    recv[b] += n
            cuts = [(name, a, b, box) for a, b, _, box in rd]
            for k, (s, r) in enumerate(loads):
                if all(s[a] + v <= budget for a, v in send.items()) and all(r[b] + v <= budget for b, v in recv.items()):
                    packed[k].extend(cuts)
                    s.update(send)
                    r.update(recv)
                    break
            else:
                packed.append(cuts)
                loads.append((send, recv))
    return packed


@st.composite
def _tensor_rounds(draw):
    out = []
    for t in range(draw(st.integers(1, 12))):
        rounds = []
        for _ in range(draw(st.integers(1, 4))):
            rounds.append([(draw(st.integers(0, 5)), draw(st.integers(0, 5)), 0, ((0, draw(st.integers(1, 9))),))
                           for _ in range(draw(st.integers(1, 4)))])
        out.append((f"t{t}", draw(st.sampled_from([1, 2, 4])), rounds))
    return out


@settings(max_examples=200, deadline=None)
@given(_tensor_rounds(), st.integers(1, 40))
def test_pack_is_first_fit_from_the_first_round(per_tensor, budget):
    from verishard.torch.crossmesh import pack
    assert pack(per_tensor, budget) == _first_fit_from_the_first_round(per_tensor, budget)


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
        for owner, name in ((verishard.core, "xplan"), (verishard.core, "xrounds"), (tt, "pack"), (tt, "_move")):
            real = getattr(owner, name)
            monkeypatch.setattr(owner, name, lambda *a, _real=real, _name=name, **k: (calls.update([_name]),
                                                                                       _real(*a, **k))[1])
        tt._SCHEDULES.clear()
        first = tt.plan_transfer(state(0), targets, budget_bytes=1 << 20)
        assert calls["_move"] == 3 and calls["pack"] == 1
        calls.clear()
        again = state(10)
        second = tt.plan_transfer(again, targets, budget_bytes=1 << 20)
        assert sum(calls.values()) == 0, calls
        assert second.rounds == first.rounds
        assert all(m.local is again[m.name]._local_tensor for m in second.moves)
        tt.plan_transfer(again, targets, budget_bytes=1 << 10)
        assert calls["pack"] == 1 and calls["_move"] == 3


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
