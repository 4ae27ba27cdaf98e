"""verishard.torch across meshes, whole state dicts and ranks that do not
arrive, on 4 gloo processes (one launch of tests/torch_world_job.py; every
rank reports through a JSON file)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_job import launch  # noqa: E402
from torch_world_job import DEADLINE_S, NPROCS  # noqa: E402


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return launch("torch_world_job.py", tmp_path_factory.mktemp("torch_world_job"), NPROCS, timeout=300)


def records(job, case):
    return [(r, rec) for r, d in sorted(job.items()) for rec in d["records"] if rec["case"] == case]


def test_crossmesh_matches_distribute_tensor_on_the_target(job):
    """Disjoint, overlapping and equal rank sets (sub-meshes among them):
    every target rank holds distribute_tensor's shard of the global tensor,
    every other rank an empty local tensor; placements and mesh are the
    target's."""
    recs = records(job, "crossmesh")
    assert len(recs) == NPROCS * 6
    for r, rec in recs:
        assert "error" not in rec, (r, rec["label"], rec.get("traceback"))
        assert rec["ok"] and rec["placements_ok"], (r, rec)
    members = {rec["label"]: sum(x["member"] for _, x in recs if x["label"] == rec["label"]) for _, rec in recs}
    assert members["disjoint 0,1 -> 2,3"] == 2 and members["overlapping (2,2) -> 3,1,2"] == 3


def test_crossmesh_partial_sources_are_reduced_then_moved(job):
    """A Partial("sum") source on ranks 0,1 and a Partial("max") one on a
    (2, 2) mesh (pending on its first dimension, sharded on its second), moved
    to other rank sets: every target rank holds distribute_tensor's shard of
    the reduced tensor (integers: exact); other ranks an empty local tensor."""
    recs = records(job, "crossmesh_partial")
    assert len(recs) == NPROCS * 2
    for r, rec in recs:
        assert "error" not in rec, (r, rec["label"], rec.get("traceback"))
        assert rec["ok"] and rec["placements_ok"], (r, rec)


CROSS_ERRORS = {
    "partial target": ("NotSupportedYet", "a cross-mesh move delivers plain layouts; make it pending on the target"),
    "ranks disagree": ("RedistributionRefused", "the ranks disagree on the plan: ranks 0-2: "),
    "dim out of range": ("RedistributionRefused", "S(2) on mesh dimension 0 ('b') names no dimension"),
}


@pytest.mark.parametrize("label", sorted(CROSS_ERRORS))
def test_crossmesh_refusals_are_the_same_on_every_rank(job, label):
    cls, part = CROSS_ERRORS[label]
    got = [rec for _, rec in records(job, "crossmesh_error") if rec["label"] == label]
    assert len(got) == NPROCS
    assert {rec["error"]["type"] for rec in got} == {cls} and len({rec["error"]["message"] for rec in got}) == 1
    assert part in got[0]["error"]["message"] and all(rec["ok_after"] for rec in got)


def test_transfer_moves_a_state_dict_exactly(job):
    """9 tensors (bf16, fp16, fp32, fp64; rank 1 to 4; uneven; replicated
    targets; a plain tensor held by rank 0) from 2 FSDP ranks to 2
    tensor-parallel ranks, and one with two shard axes to a (2, 2) mesh over
    all 4 ranks, in rounds of 512 bytes: every tensor bit for bit with
    distribute_tensor's shard, the target's placements and mesh; every rank
    receives exactly the lower bound (its target blocks less what it holds);
    per round no rank sends or receives more than the budget, unless the
    round is one cut."""
    recs = records(job, "transfer")
    assert len(recs) == NPROCS
    for r, rec in recs:
        assert "error" not in rec, (r, rec.get("traceback"))
        assert rec["tensors"] == 9 and rec["rounds"] > 1
        assert sorted(rec["same"]) == rec["names"] and len(rec["names"]) == (9 if r in (2, 3) else 1)
        assert all(rec["same"].values()) and all(rec["specs"].values()), rec
        assert rec["received"] == rec["lower_bound"], rec
        if r in (2, 3):
            assert rec["target_bytes"] == rec["lower_bound"] > 0   # nothing of theirs is there before
        else:  # source and target of moe.w2: rank 0 holds its target block (rows 0-3), rank 1 does not
            assert rec["names"] == ["moe.w2"] and rec["sent"] > 0
            assert rec["lower_bound"] == (0 if r == 0 else rec["target_bytes"]), rec
        for (sent, received), single in zip(rec["loads"], rec["single_cut_rounds"]):
            assert single or (sent <= rec["budget"] and received <= rec["budget"]), rec["loads"]
    assert sum(rec["sent"] for _, rec in recs) == sum(rec["received"] for _, rec in recs)


def test_transfer_rounds_overlap_within_two_rounds_of_buffers(job):
    """The same transfer, counted where it runs (the bytes run_rounds hands
    to isend / irecv): every rank sends and receives exactly what the
    schedule says (received = the lower bound) in every round of it; round
    k+1 is posted before round k is waited for, so the round buffers alive
    at once peak at exactly the largest sum of two consecutive rounds' bytes
    (sent and received) of this rank, which exceeds one round's somewhere
    (the overlap is there) and stays within 2 x budget sent plus 2 x budget
    received where no round is a single larger slice."""
    recs = records(job, "transfer")
    overlapped = False
    for r, rec in recs:
        assert "error" not in rec, (r, rec.get("traceback"))
        c, loads = rec["counted"], [a + b for a, b in rec["loads"]]
        assert (c["sent"], c["received"], c["rounds"]) == (rec["sent"], rec["lower_bound"], rec["rounds"]), (r, c)
        pairs = [loads[0]] + [x + y for x, y in zip(loads, loads[1:])]
        assert c["peak_buffer_bytes"] == max(pairs), (r, c, loads)
        overlapped |= c["peak_buffer_bytes"] > max(loads)
        if not any(rec["single_cut_rounds"]):
            assert c["peak_buffer_bytes"] <= 4 * rec["budget"], (r, c)
    assert overlapped


def test_cached_calls_agree_once(job):
    """Per-call cost: a plan's first use agrees (one store round trip), the
    cached calls after it make no agreement (DTensor's argument order
    included, the same entry), "always" agrees on every call, False never;
    one plan made in all."""
    for r, rec in records(job, "overhead"):
        assert rec["counts"] == {"first call": 1, "5 cached calls": 0, "5 cached calls, DTensor's order": 0,
                                 "5 calls, always": 5, "5 calls, False": 0}, (r, rec)
        assert rec["plans"] == 1 and rec["same_order"], (r, rec)


def test_a_rank_that_does_not_arrive_fails_the_others_within_the_deadline(job):
    """Rank 3 does not call; ranks 0-2 raise RanksMissing naming rank 3
    after the deadline (3 s) and well before gloo's own timeout."""
    for r, rec in records(job, "deadline"):
        if r == 3:
            continue
        err = rec["error"]
        assert err is not None and err["type"] == "RanksMissing" and "RedistributionRefused" in err["mro"], rec
        assert "rank 3 did not arrive within 3 s" in err["message"] and rec["missing"] == [3], err
        assert DEADLINE_S - 0.1 <= rec["seconds"] <= DEADLINE_S + 5, rec["seconds"]


def test_enable_routes_dtensor_redistributions_with_identical_results(job):
    """A tensor-parallel MLP forward and backward under
    verishard.torch.enabled() equals DTensor's own run bit for bit (output
    and every gradient); redistributions were routed through verified plans,
    the fallbacks counted with their reason; leaving the block restores
    torch's function."""
    recs = records(job, "enable")
    assert len(recs) == NPROCS * 2
    for r, rec in recs:
        assert all(rec["same"]) and len(rec["same"]) == 5, (r, rec)
        assert rec["info"]["routed"] >= 1 and rec["restored"], (r, rec)
        assert sum(rec["info"]["reasons"].values()) == rec["info"]["fallbacks"]
    assert any(rec["info"]["routed"] >= 2 for _, rec in recs)


def test_the_entry_point_enable_patches_is_where_torch_keeps_it():
    """Fails loudly when torch moves or changes redistribute_local_tensor
    (then enable() would route nothing): every module DTensor calls it from
    holds the same function, with the parameters enable() passes on."""
    import torch
    import verishard.torch as vt
    fn = vt.check_entry_point()
    assert fn.__name__ == "redistribute_local_tensor", fn
    assert any(torch.__version__.startswith(v) for v in vt.TESTED_TORCH), (torch.__version__, vt.TESTED_TORCH)
    import torch.distributed.tensor.experimental._tp_transform as tp_transform   # imports it by name too
    vt.enable()
    try:
        import torch.distributed.tensor._dispatch as d
        assert d.redistribute_local_tensor is not fn and vt.check_entry_point() is fn
        assert tp_transform.redistribute_local_tensor is d.redistribute_local_tensor
        holders = [m.__name__ for m in vt._holders(d.redistribute_local_tensor)]
        assert {"torch.distributed.tensor._redistribute", "torch.distributed.tensor._dispatch",
                "torch.distributed.tensor._api", "torch.distributed.tensor.experimental._tp_transform"} <= set(holders)
    finally:
        vt.disable()
    assert d.redistribute_local_tensor is fn and tp_transform.redistribute_local_tensor is fn


def test_a_moved_entry_point_is_refused_before_anything_is_patched(monkeypatch):
    import torch.distributed.tensor._api as api
    import verishard.torch as vt
    monkeypatch.delattr(api, "redistribute_local_tensor")
    with pytest.raises(vt.EntryPointMoved, match="_api has no redistribute_local_tensor"):
        vt.enable()
    assert vt._ROUTING["depth"] == 0


def test_the_docs_tour_runs_with_torchrun(tmp_path):
    """docs/torch.md's example across meshes (cross-mesh, transfer,
    enable()) under torchrun with 4 processes prints what the page says."""
    import re
    page = open(os.path.join(HERE, "..", "docs", "torch.md")).read()
    tour = page[page.index("## An example across meshes"):]
    code = re.search(r"```python\n(.*?)```", tour, re.S).group(1)
    printed = re.search(r"Rank 0 prints:\n\n```\n(.*?)\n```", tour, re.S).group(1)
    script = tmp_path / "verishard_torch_tour.py"
    script.write_text(code)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                           str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert printed in proc.stdout.splitlines(), proc.stdout[-2000:]
