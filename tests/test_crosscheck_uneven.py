"""The uneven cross-check: ours, our plan through JAX, XLA's reshard and DTensor's planner on shapes
the shardings do not divide, judged by execution (verishard.crosscheck.uneven)."""

from __future__ import annotations

import numpy as np
import pytest

from jax_devices import jax_or_skip

jax = jax_or_skip()
torch = pytest.importorskip("torch")

from verishard import ArrayType, Mesh  # noqa: E402
from verishard.crosscheck.torch_dtensor import chunk  # noqa: E402
from verishard.crosscheck.harness import Case  # noqa: E402
from verishard.crosscheck.uneven import PLANNERS, run_uneven, uneven_cases  # noqa: E402

XY = Mesh.parse("x=2,y=2")


def case(mesh, a, b):
    return Case(mesh, ArrayType.parse(a, mesh), ArrayType.parse(b, mesh))


def test_cases_have_an_uneven_side():
    cases, total = uneven_cases(XY, (5, 7))
    assert total == len(cases) == 120
    assert all(c.src.uneven or c.dst.uneven for c in cases)
    sample, total = uneven_cases("x=2,y=2,z=2", (3, 6), 10, seed=3)
    assert len(sample) == 10 and total == 2385 and sample == uneven_cases("x=2,y=2,z=2", (3, 6), 10, seed=3)[0]


def test_chunk_is_dtensors_split():
    from torch.distributed.tensor import Shard
    for L in range(0, 10):
        for n in (1, 2, 3, 4, 8):
            x = np.arange(L)
            theirs, _ = Shard(0)._split_tensor(torch.arange(L), n, with_padding=False)
            assert [chunk(x, n, k, 0).tolist() for k in range(n)] == [t.tolist() for t in theirs], (L, n)


def test_every_planner_on_a_few_cases():
    by = {}
    for c in (case(XY, "[3{x}5, 4{y}7]", "[5, 4{y}7]"),        # one gather, the same for everyone
              case(XY, "[2{x,y}5, 7]", "[3{y}5, 4{x}7]"),        # nested uneven source: not DTensor's layout
              case(Mesh.parse("x=4"), "[2{x}5, 7]", "[5, 2{x}7]")):
        rs = {r.planner: r for r in run_uneven(c)}
        assert list(rs) == list(PLANNERS)
        by[str(c.src)] = rs
        for name in ("ours", "ours-jax", "xla"):
            assert rs[name].status == "correct", (c, rs[name])
        assert rs["ours-jax"].extra["hlo_matches_plan"], c
        # the same plan measured twice: the simulator and XLA's compiled program receive the same
        assert rs["ours"].received == rs["ours-jax"].received == rs["ours"].extra["checker_traffic"]
    g = by["[3{x}5, 4{y}7]"]
    # a gather of blocks of 3 over 2 devices: a buffer of 6 rows before the cut to 5 (bound 5 x 4 = 20)
    assert [g[n].peak for n in PLANNERS] == [24] * 5 and g["ours"].extra["type_peak"] == 20
    assert [g[n].received for n in PLANNERS] == [12] * 5
    nested = by["[2{x,y}5, 7]"]
    for name in ("dtensor-greedy", "dtensor-mincost"):
        assert nested[name].status == "unsupported"
        assert "torch.chunk of each chunk" in nested[name].reason and "[0:2] [2:3] [3:4] [4:5]" in nested[name].reason
    # XLA gathers everything there (5 x 8 of 14 padded elements per device), ours stays within reach of the bound
    assert nested["xla"].peak == 56 and nested["ours"].extra["type_peak"] == 14
    four = by["[2{x}5, 7]"]
    assert all(four[n].status == "correct" for n in PLANNERS)


def test_dtensor_counts_its_padded_buffers():
    """DTensor pads the chunks of 5 over 4 devices (2, 2, 1, 0) to 2 before gathering: a buffer of 8."""
    c = case(Mesh.parse("x=4"), "[2{x}5]", "[5]")
    rs = {r.planner: r for r in run_uneven(c, ("ours", "dtensor-greedy"))}
    assert rs["dtensor-greedy"].status == "correct" and rs["dtensor-greedy"].program == ("mesh dim 0: S(0) -> R",)
    assert (rs["dtensor-greedy"].peak, rs["dtensor-greedy"].received) == (8, 6)
    assert (rs["ours"].peak, rs["ours"].received, rs["ours"].extra["type_peak"]) == (8, 6, 5)
