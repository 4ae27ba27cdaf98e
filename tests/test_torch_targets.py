"""verishard.torch.fused and block_fp8 targets of transfer (inference
engines' layouts), on 4 gloo processes (one launch of
tests/torch_targets_job.py; every rank reports through a JSON file)."""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_job import launch  # noqa: E402
from torch_targets_job import BUDGET, NPROCS, full, reference_fp8  # noqa: E402

FUSED = ("qkv_proj", "gate_up_proj", "linear_qkv", "embed_tokens")
FP8 = ("w8", "w8_2d")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return launch("torch_targets_job.py", tmp_path_factory.mktemp("torch_targets_job"), NPROCS, timeout=300)


def records(job, case):
    return [(r, rec) for r, d in sorted(job.items()) for rec in d["records"] if rec["case"] == case]


def moved(job):
    recs = records(job, "targets")
    assert len(recs) == NPROCS
    for r, rec in recs:
        assert "error" not in rec, (r, rec.get("traceback"))
    return recs


@pytest.mark.parametrize("name", FUSED)
def test_fused_targets_match_the_engines_own_split(job, name):
    """vLLM's QKVParallelLinear (8 q heads, 2 kv heads over TP 4: each kv head
    on 2 ranks), MergedColumnParallelLinear (gate, up), Megatron's interleaved
    QKV (4 query groups) and a vocabulary-padded embedding (50 rows padded to
    64, written into the engine's own parameter, whose padding rows keep
    their values): every rank's local tensor bit for bit with the full
    tensors split as the engine splits them."""
    for r, rec in moved(job):
        assert rec["same"][name], (r, name)
    assert all(rec["out_is_param"] for _, rec in moved(job))


def test_the_schedule_names_each_target(job):
    """plan_transfer's table names every part's fused target and every FP8 conversion."""
    for r, rec in moved(job):
        assert len(rec["text"]) == 14, (r, rec["text"])   # 12 fused parts, 2 FP8 tensors
        assert any("qkv_proj: fused(parts=(('q', 8), ('k', 2), ('v', 2))" in line for line in rec["text"])
        assert any("w8_2d: block_fp8(block=(128, 128)" in line for line in rec["text"])


@pytest.mark.parametrize("name", FP8)
def test_block_fp8_targets_are_the_full_quantization_sharded(job, name):
    """(300, 200) bf16 over TP 4 (every shard cuts 128-row blocks) and
    (260, 300) over a (2, 2) mesh sharded on both dimensions, with an all-zero
    and a small-valued block: every rank's FP8 shard and the scales of the
    blocks it touches bit for bit with a block-by-block quantization of the
    full tensor, sharded; the result a DTensor of the target's placements."""
    for r, rec in moved(job):
        for part in ("", ".scale", ".first_block", ".spec"):
            assert rec["same"][name + part], (r, name + part)


def test_fused_block_fp8_qkv_is_each_part_quantized_then_split(job):
    """fused(..., convert=block_fp8((16, 16))) of q (8 heads of 12 rows: TP
    shards of 24 rows cut 16-row blocks) and k, v (2 heads, replicated): the
    fused FP8 local tensor bit for bit with each full part quantized block by
    block then split as vLLM splits it, and the parts' scales of the blocks
    each shard touches, concatenated."""
    for r, rec in moved(job):
        for part in ("", ".scale", ".first_block"):
            assert rec["same"]["fp8_qkv" + part], (r, part)


def test_every_rank_receives_exactly_what_it_lacks_less_than_the_reference(job):
    """Bytes received: exactly the rank's target boxes (for FP8 its shard
    widened to block boundaries) less what its source blocks hold, and less
    than the vLLM-style reference, which receives every full tensor (less
    its own source shard); per round at most the budget, unless the round is
    one cut."""
    for r, rec in moved(job):
        assert rec["received"] == rec["lower_bound"], (r, rec["received"], rec["lower_bound"])
        assert rec["received"] < rec["reference_received"], r
        for (sent, got), single in zip(rec["loads"], rec["single_cut_rounds"]):
            assert single or (sent <= BUDGET and got <= BUDGET), (r, sent, got)


@pytest.mark.parametrize("label,part", [
    ("heads do not divide", "qkv_proj: part 'k' of extent 8 along dim 0 cannot have 3 equal heads"),
    ("a part in two targets", "k: named by two targets (a source tensor goes to one target; pass a second name"),
    ("out of another shape", "rank 0: q: qkv_proj: out has shape (3, 16) but rank 0's fused local tensor has "
                             "shape (12, 16)"),
    ("fp8 of a 1-D tensor", "b: block_fp8 quantizes 2-D weights")])
def test_bad_targets_are_refused_the_same_on_every_rank(job, label, part):
    got = [rec for _, rec in records(job, "targets_error") if rec["label"] == label]
    assert len(got) == NPROCS
    assert {rec["error"]["type"] for rec in got} == {"RedistributionRefused"}
    assert len({rec["error"]["message"] for rec in got}) == 1 and part in got[0]["error"]["message"]
    assert all(rec["ok_after"] for rec in got)


def test_a_refusal_between_some_ranks_is_agreed_by_every_rank(job):
    """A refused fused transfer whose sides are ranks 0 and 1: every rank of
    the default group (transfer is collective over it) raises the same
    refusal, without waiting until the deadline."""
    got = records(job, "sub_mesh_refusal")
    assert [r for r, _ in got] == [0, 1, 2, 3]
    for r, rec in got:
        assert rec["error"]["type"] == "RedistributionRefused", (r, rec)
        assert "ab: part 'a' of extent 8 along dim 0 cannot have 3 equal heads" in rec["error"]["message"]
        assert rec["seconds"] < 15, (r, rec["seconds"])


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 70), cols=st.integers(1, 70), b0=st.integers(1, 24), b1=st.integers(1, 24),
       data=st.data())
def test_block_quantization_of_a_block_aligned_piece_is_the_same_bits(rows, cols, b0, b1, data):
    """What a block_fp8 target relies on: quantize_block_fp8 is the
    block-by-block recipe, and a piece cut at block boundaries (its end at a
    block boundary or the tensor's end) quantizes to the same bits and scales
    as that piece of the whole tensor's quantization."""
    import torch
    from verishard.torch import quantize_block_fp8
    x = full((rows, cols), seed=rows * 100 + cols)
    q, scale = quantize_block_fp8(x, (b0, b1))
    rq, rscale = reference_fp8(x, (b0, b1))
    assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(scale, rscale)
    nr, nc = scale.shape
    i0, j0 = data.draw(st.integers(0, nr - 1)), data.draw(st.integers(0, nc - 1))
    i1, j1 = data.draw(st.integers(i0 + 1, nr)), data.draw(st.integers(j0 + 1, nc))
    rs, cs = slice(i0 * b0, min(i1 * b0, rows)), slice(j0 * b1, min(j1 * b1, cols))
    pq, pscale = quantize_block_fp8(x[rs, cs], (b0, b1))
    assert torch.equal(pq.view(torch.uint8), q[rs, cs].view(torch.uint8))
    assert torch.equal(pscale, scale[i0:i1, j0:j1])


def test_quantize_block_fp8_refuses_what_is_not_a_matrix():
    import torch
    from verishard.errors import ShardingError
    from verishard.torch import quantize_block_fp8
    with pytest.raises(ShardingError, match="takes a 2-D tensor and two positive block sizes"):
        quantize_block_fp8(torch.zeros(4), (2, 2))
