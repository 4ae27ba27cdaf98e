"""verishard.torch.redistribute on 8 gloo processes (one launch of
tests/torch_job.py; every rank reports its results through a JSON file).

Compared with DTensor's own ``DTensor.redistribute`` (bit for bit, on every
rank: local shard, placements, shard order, device mesh, tensor meta) and with
``distribute_tensor`` of the global tensor to the target layout; Partial
placements against the global tensor the local terms reduce to and against
DTensor's ``full_tensor()``; gradients against DTensor's; the plan cache by
counting planner calls; bad input against the expected error on every rank.
Shapes that do not divide: the same comparisons, every pair running (the
verified box schedule exactly where DTensor's shards are not verishard's
uneven blocks).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_job import launch  # noqa: E402

NPROCS = 8
STANDARD = ("(2,4) x,y", "(2,2,2) x,y,z", "(2,4) x,y in rounds")
PERMUTED = ("(2,4) permuted ranks", "(2,4) permuted ranks in rounds")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    ranks = launch("torch_job.py", tmp_path_factory.mktemp("torch_job"), NPROCS, timeout=400)
    print(f"\ntorch job: {ranks[0]['timing']}")
    return ranks


def records(job, case, rank=None):
    for r, d in sorted(job.items()):
        if rank is not None and r != rank:
            continue
        for rec in d["records"]:
            if rec["case"] == case:
                yield r, rec


def test_every_rank_ran_the_same_cases(job):
    per_rank = [[(rec["case"], rec.get("src"), rec.get("dst"), rec.get("label")) for rec in d["records"]]
                for _, d in sorted(job.items())]
    assert all(p == per_rank[0] for p in per_rank)


def test_sweep_is_bit_identical_to_dtensor_redistribute(job):
    compared = Counter()
    for r, rec in records(job, "sweep"):
        if rec["mesh"] not in STANDARD:
            continue
        where = f"rank {r}, {rec['mesh']} {rec['shape']} {rec['dtype']}: {rec['src']} -> {rec['dst']}"
        assert rec["ours_error"] is None, where + "\n" + rec["ours_error"]
        assert rec["dtensor_error"] is None, where + ": DTensor refused: " + rec["dtensor_error"]
        assert rec["ours_vs_dtensor"], where + ": local shards differ"
        assert rec["spec_vs_dtensor"], where + ": placements, shard order, mesh or tensor meta differ"
        compared[r] += 1
    assert set(compared) == set(range(NPROCS))
    assert min(compared.values()) >= 200, compared
    print(f"\n{compared[0]} placement pairs bit-identical to DTensor.redistribute on each of {NPROCS} ranks")


def test_sweep_covers_strided_shard_and_both_meshes(job):
    recs = [rec for _, rec in records(job, "sweep", rank=0)]
    by_mesh = Counter(rec["mesh"] for rec in recs)
    assert by_mesh["(2,4) x,y"] >= 100 and by_mesh["(2,2,2) x,y,z"] >= 80, by_mesh
    assert by_mesh["(2,4) x,y in rounds"] >= 30, by_mesh
    strided = [rec for rec in recs if "_StridedShard" in rec["src"] + rec["dst"]]
    multi = [rec for rec in recs if rec["src"].count("Shard(dim=0)") >= 2 or rec["dst"].count("Shard(dim=0)") >= 2]
    assert len(strided) >= 50 and len(multi) >= 20
    assert len({rec["dtype"] for rec in recs}) >= 5


def test_sweep_matches_distribute_tensor_on_every_mesh(job):
    """Against DTensor's layout of the global tensor (distribute_tensor with
    src_data_rank=None: every rank chunks by its mesh coordinates)."""
    n = 0
    for r, rec in records(job, "sweep"):
        where = f"rank {r}, {rec['mesh']}: {rec['src']} -> {rec['dst']} ({rec['dtype']})"
        assert rec["ours_error"] is None, where + "\n" + rec["ours_error"]
        assert rec["ours_vs_oracle"], where
        assert rec["placements_vs_oracle"] and rec["mesh_is_input_mesh"] and rec["shape_ok"], where
        n += 1
    assert n >= NPROCS * 250


def test_permuted_rank_layout(job):
    """A DeviceMesh whose ranks are not ascending along a dimension: ours
    follows the mesh coordinates (checked above against distribute_tensor);
    DTensor.redistribute gathers in the sorted order of its process groups and
    disagrees with distribute_tensor on some pairs, reported here."""
    recs = [rec for _, rec in records(job, "sweep", rank=0) if rec["mesh"] in PERMUTED]
    assert len(recs) >= 24 and all(rec["ours_vs_oracle"] for rec in recs)
    off = [f"{rec['src']} -> {rec['dst']}" for rec in recs if rec.get("dtensor_vs_oracle") is False]
    print(f"\npermuted ranks: ours matches distribute_tensor on all {len(recs)} pairs; DTensor.redistribute "
          f"differs from it on {len(off)}" + (f", e.g. {off[0]}" if off else ""))


def test_dtensor_agrees_with_distribute_tensor_on_standard_meshes(job):
    # the two references agree where the ranks are in order, so the sweep's comparison means something
    for r, rec in records(job, "sweep"):
        if rec["mesh"] in STANDARD:
            assert rec["dtensor_vs_oracle"], (r, rec["src"], rec["dst"])


PARTIAL_PAIRS = 112  # torch_job.SAMPLE_PARTIAL (Partial("sum")) + 2 * SAMPLE_PARTIAL_OTHER ("max", "min")


def test_partial_pairs_reduce_to_the_global_tensor(job):
    """112 placement pairs on the (2, 2, 2) mesh with Partial in the source or
    the target (96 with Partial("sum"), 8 with "max", 8 with "min"; sampled
    from the 6063 per op), float32, int32 and int64, 8 x 8 tensors: the
    source is DTensor.from_local of per-rank terms whose reduction is the
    global tensor's block. On every rank our result is the target block
    (a Partial target: the reduction over the rank's pending group of every
    rank's result is the block); float32 sums within rtol=1e-5, atol=1e-5,
    integers and max/min exactly; full_tensor() of our result is the global
    tensor."""
    n = Counter()
    ops = Counter()
    for r, rec in records(job, "partial"):
        where = f"rank {r}: {rec['src']} -> {rec['dst']} ({rec['dtype']})"
        assert rec["ours_error"] is None, where + "\n" + rec["ours_error"]
        assert rec["placements_ok"] and rec["shape_ok"], where
        assert rec["ours_vs_global"], where + ": the result does not reduce to the global tensor's block"
        if "ours_full_vs_global" in rec:
            assert rec["ours_full_vs_global"], where + ": full_tensor() is not the global tensor"
        n[r] += 1
        ops[rec["op"]] += r == 0
    assert set(n) == set(range(NPROCS)) and set(n.values()) == {PARTIAL_PAIRS}, n
    assert ops == {"sum": 96, "max": 8, "min": 8}, ops
    recs = [rec for _, rec in records(job, "partial", rank=0)]
    assert len({rec["dtype"] for rec in recs}) == 3
    assert sum("Partial" in rec["dst"] for rec in recs) >= 40 and sum("Partial" in rec["src"] for rec in recs) >= 40
    assert sum("_StridedShard" in rec["src"] + rec["dst"] for rec in recs) >= 10
    kinds = Counter(c.split("(")[0] for rec in recs for c in rec["plan"])
    assert kinds["AllReduce"] and kinds["ReduceScatter"] and kinds["ToPartial"], kinds
    print(f"\n{PARTIAL_PAIRS} Partial pairs reduce to the global tensor on each of {NPROCS} ranks; "
          f"plan steps used: {dict(kinds)}")


def test_partial_pairs_agree_with_dtensor(job):
    """The same pairs through DTensor (its autograd Function where the target
    is Partial: DTensor.redistribute keeps that for internal use):
    full_tensor() of both results agree (tolerance as above) wherever DTensor
    runs and is itself right. DTensor refuses Shard -> Partial on a mesh
    dimension ("not supported yet"), and its Replicate -> Partial("sum")
    divides by the group size, which floors integer tensors (its result then
    is not the global tensor); both are counted and printed, ours is checked
    against the global tensor on those pairs by the test above."""
    compared, refused, floored, bits = Counter(), [], [], 0
    for r, rec in records(job, "partial"):
        where = f"rank {r}: {rec['src']} -> {rec['dst']} ({rec['dtype']})"
        if rec["dtensor_error"] is not None:
            assert "not supported yet" in rec["dtensor_error"] and "to P(" in rec["dtensor_error"], \
                where + ": " + rec["dtensor_error"]
            refused += [rec] if r == 0 else []
            continue
        if not rec["dtensor_full_vs_global"]:
            assert rec["int_partition"], where + ": DTensor's result is not the global tensor"
            floored += [rec] if r == 0 else []
            continue
        assert rec["full_vs_dtensor"], where + ": full_tensor() differs from DTensor's"
        compared[r] += 1
        bits += r == 0 and rec["locals_bit_identical"]
    assert set(compared) == set(range(NPROCS)) and min(compared.values()) >= 60, compared
    print(f"\nPartial pairs: full_tensor() agrees with DTensor on {compared[0]} (local tensors bit-identical on "
          f"{bits}); DTensor refuses {len(refused)} (Shard -> Partial), e.g. {refused[0]['src'] if refused else ''}"
          f" -> {refused[0]['dst'] if refused else ''}; DTensor's integer Replicate -> Partial(sum) floors on "
          f"{len(floored)}" + (f", e.g. {floored[0]['src']} -> {floored[0]['dst']} ({floored[0]['dtype']})"
                               if floored else ""))
    # DTensor's planner against ours (rank 0 records DTensor's transforms for a quarter of the pairs):
    # communicating steps (DTensor's R -> S and R -> P are local), printed for the record
    comm = ("AllGather", "AllToAll", "AllPermute", "AllReduce", "ReduceScatter")
    steps = Counter()
    for _, rec in records(job, "partial", rank=0):
        if rec["dtensor_error"] is None and "dtensor_program" in rec:
            ours = sum(c.startswith(comm) for c in rec["plan"])
            theirs = sum(not any(f" R -> {k}" in t for k in ("S(", "P(", "_S")) for t in rec["dtensor_program"])
            steps["fewer" if ours < theirs else "as many" if ours == theirs else "more"] += 1
    assert sum(steps.values()) >= 15, steps
    print(f"communicating steps against DTensor's plan on {sum(steps.values())} pairs: ours fewer on "
          f"{steps['fewer']}, as many on {steps['as many']}, more on {steps['more']}")


def test_gradients_through_partial_equal_dtensors(job):
    """Partial -> Shard (one and two Partial mesh dimensions) and Replicate ->
    Partial (the gradient arriving as DTensor's default Replicate, and as
    Partial): the gradient's placements are DTensor's, its values the layout
    of the global gradient and DTensor's (bit for bit where one mesh
    dimension reduces it; within 1e-5 where DTensor reduces two mesh
    dimensions one at a time and our plan once over both)."""
    n = 0
    for r, rec in records(job, "pgrad"):
        where = f"rank {r}: {rec['src']} -> {rec['dst']} (partial gradient: {rec['partial_grad']})"
        assert rec["grad_spec_vs_dtensor"], where + f": {rec['grad_placements']} vs {rec['dtensor_grad_placements']}"
        assert rec["grad_vs_global"], where
        assert rec["grad_close_to_dtensor"], where
        if rec["dst"].count("Partial") < 2:
            assert rec["grad_vs_dtensor"], where
        n += 1
    assert n == NPROCS * 4


def test_gradients_equal_dtensors(job):
    n = 0
    for r, rec in records(job, "grad"):
        where = f"rank {r}, {rec['mesh']}: {rec['src']} -> {rec['dst']}"
        assert rec["grad_vs_dtensor"] and rec["grad_spec_vs_dtensor"] and rec["grad_vs_oracle"], where
        n += 1
    assert n == NPROCS * 12


UNEVEN_MESHES = {"(2,4) x,y": ([5, 7], [7]), "(2,2,2) x,y,z": ([3, 6],)}


def test_uneven_sweep_is_bit_identical_to_dtensor(job):
    """Global shapes that do not divide ((5, 7) and (7,) on the (2, 4) mesh,
    every placement pair; (3, 6) on the (2, 2, 2) mesh, 80 sampled pairs):
    every pair runs and gives, on every rank, distribute_tensor's shard of
    the global tensor in the target layout, DTensor.redistribute's
    placements, shard order, mesh and tensor meta, and DTensor.redistribute's
    local shard (shape and bits) wherever that is itself distribute_tensor's.
    From some uneven _StridedShard sources it is not (the padding of its
    chunks leaks into the result: rank 4 of (_StridedShard(dim=1, sf=4),
    Shard(dim=1), Shard(dim=1)) -> (Shard(dim=1), Shard(dim=0), Replicate())
    of arange(18).reshape(3, 6) gets [[4, 5, 0], [10, 11, 0]] instead of
    [[3, 4, 5], [9, 10, 11]]); those pairs are counted and printed."""
    accepted, dtensor_off, boxes = Counter(), set(), Counter()
    for r, rec in records(job, "uneven"):
        assert list(rec["shape"]) in [list(s) for s in UNEVEN_MESHES[rec["mesh"]]], rec["shape"]
        where = f"rank {r}, {rec['mesh']} {rec['shape']} {rec['dtype']}: {rec['src']} -> {rec['dst']}"
        assert rec["ours_error"] is None, where + "\n" + rec.get("traceback", "")
        assert rec["dtensor_error"] is None, where + ": DTensor refused: " + rec["dtensor_error"]
        assert rec["ours_vs_oracle"] and rec["placements_vs_oracle"] and rec["shape_ok"], where
        assert rec["spec_vs_dtensor"], where + ": placements, shard order, mesh or tensor meta differ"
        if rec["dtensor_vs_oracle"]:
            assert rec["ours_vs_dtensor"], where + ": local shards differ"
        else:
            dtensor_off.add((rec["mesh"], str(rec["shape"]), rec["src"], rec["dst"]))
        accepted[r] += 1
        boxes[r] += rec["plan"] == "BoxPlan"
    assert set(accepted) == set(range(NPROCS)) and len(set(accepted.values())) == 1, accepted
    recs = [rec for _, rec in records(job, "uneven", rank=0)]
    assert accepted[0] == len(recs) == 121 + 25 + 80
    # shards of different lengths on the ranks (empty ones too), strided and nested layouts
    assert {tuple(rec["local_shape"]) for _, rec in records(job, "uneven")} >= \
        {(3, 7), (2, 7), (5, 2), (5, 1), (1,), (0,)}
    assert sum("_StridedShard" in rec["src"] + rec["dst"] for rec in recs) >= 5
    assert sum((rec["src"] + rec["dst"]).count("Shard(dim=0)") >= 2 for rec in recs) >= 20
    assert len(dtensor_off) <= accepted[0] // 10, (accepted[0], len(dtensor_off))
    off = sorted(dtensor_off)
    print(f"\nuneven shapes: all {accepted[0]} placement pairs run, each equal to distribute_tensor's target "
          f"shard on all {NPROCS} ranks and bit-identical to DTensor.redistribute on {accepted[0] - len(off)} "
          f"(on {len(off)} DTensor's own result is not distribute_tensor's" + (f", e.g. {off[0][2]} -> {off[0][3]}"
                                                                            if off else "")
          + f"); {boxes[0]} of them by the box schedule (layouts DTensor splits otherwise than our blocks)")


def test_box_schedule_runs_exactly_the_layouts_that_differ(job):
    """The verified box schedule runs a pair if and only if DTensor's own
    shards of the source or the target (distribute_tensor, gathered from
    every rank) are not verishard's uneven blocks and the placements change
    (unchanged ones keep the local tensor, as DTensor does); the others run
    the plan of collectives."""
    for r, rec in records(job, "uneven"):
        where = f"rank {r}, {rec['mesh']} {rec['shape']}: {rec['src']} -> {rec['dst']}"
        differ = not rec["layouts_agree"] and rec["src"] != rec["dst"]
        assert (rec["plan"] == "BoxPlan") == differ, where + f": {rec['plan']}"
    assert sum(rec["plan"] == "BoxPlan" for _, rec in records(job, "uneven", rank=0)) >= 50
    nested = [rec for _, rec in records(job, "uneven-nested")]
    assert len(nested) == NPROCS and all(rec["ok"] for rec in nested)


def test_uneven_gradients_equal_dtensors(job):
    """Gradients through uneven redistributions (the backward runs the
    reverse plan on padded buffers): DTensor's, bit for bit, with its
    placements, and the layout of the global gradient; and second
    derivatives."""
    n = 0
    for r, rec in records(job, "ugrad"):
        where = f"rank {r}, {rec['mesh']}: {rec['src']} -> {rec['dst']}"
        assert rec["grad_vs_dtensor"] and rec["grad_spec_vs_dtensor"] and rec["grad_vs_oracle"], where
        n += 1
    assert n == NPROCS * 3
    recs = list(records(job, "ugrad2"))
    assert len(recs) == NPROCS * 2 and all(rec["ok"] for _, rec in recs)


def test_twice_differentiable(job):
    recs = list(records(job, "grad2"))
    assert len(recs) == NPROCS * 2 and all(rec["ok"] for _, rec in recs)


def test_second_call_does_no_planning(job):
    for r, rec in records(job, "cache"):
        c = rec["counts"]
        # first forward plans in one core call (Layoutchoice.lplan chooses and plans), its backward once
        # more; no second planning call
        assert c[0] == {"plan": 1, "core": 0} and c[1] == {"plan": 2, "core": 0}, (r, c)
        # the second forward and backward: no planning at all
        assert c[2] == c[1] and c[3] == c[1], (r, c)
        # another dtype is another cache entry
        assert c[4]["plan"] == 3, (r, c)
        assert rec["info"]["hits"] == 2 and rec["info"]["misses"] == 2, rec["info"]


def test_a_new_process_group_does_not_reuse_the_old_ones(job):
    recs = list(records(job, "reinit"))
    assert len(recs) == NPROCS and all(rec["ok"] == [True, True] for _, rec in recs)


def test_a_mesh_over_some_ranks_runs_among_them(job):
    """A DeviceMesh over ranks 0-3 of 8 (DTensor's sub-mesh case): those
    ranks run the plan's collectives among themselves and get the result,
    ranks 4-7 (which call too) DTensor's empty local tensor. A gather over
    both of its dimensions needs a process group the mesh does not have:
    ranks 0-3 make it among themselves (ranks 4-7 make none)."""
    recs = list(records(job, "submesh"))
    assert len(recs) == 2 * NPROCS and all(rec["ok"] for _, rec in recs), recs
    made = {r: rec["local_groups"] for r, rec in recs if "local_groups" in rec}
    assert made == {r: (1 if r < 4 else 0) for r in range(NPROCS)}, made
    recs = list(records(job, "other-mesh"))  # device_mesh= another mesh over the same ranks
    assert len(recs) == NPROCS and all(rec["ok"] for _, rec in recs), recs


def test_no_op_keeps_the_local_tensor_like_dtensor(job):
    for r, rec in records(job, "identity"):
        assert rec["ours_keeps"] and rec["dtensor_keeps"], r


ERRORS = {
    "wrong-length": ("RedistributionRefused", ["ranks 0-7:", "has 1 entries but the DeviceMesh has 2 dimensions"]),
    "dim-out-of-range": ("RedistributionRefused", ["S(2) on mesh dimension 0 ('x') names no dimension of a tensor "
                                                   "of rank 2"]),
    "negative-dim-out-of-range": ("RedistributionRefused", ["S(-3) on mesh dimension 0 ('x') names no dimension"]),
    "not-a-placement": ("RedistributionRefused", ["placement 'R' is not a Placement"]),
    "not-a-dtensor": ("RedistributionRefused", ["expects a DTensor, not Tensor"]),
    "partial-avg": ("NotSupportedYet", ["the source: Partial(avg) on mesh dimension 0 ('x') is not supported",
                                        "sum, max and min"]),
    "partial-mixed": ("RedistributionRefused", ["the target: placements (Partial(sum), Partial(max)) mix "
                                                "reductions", "max on mesh dimension 1 ('y')"]),
    "partial-change-reduction": ("NotSupportedYet", ["the source is pending a sum (on mesh dimension 0 ('x')) and "
                                                     "the target a max"]),
    "one-rank-wrong-length": ("RedistributionRefused", ["\n  rank 5: placements (Shard(dim=0),) has 1 entries"]),
    "ranks-disagree": ("RedistributionRefused", ["the ranks disagree on the plan", "ranks 0-2,4-7:", "rank 3:"]),
    "ranks-disagree-first-use": ("RedistributionRefused", ["the ranks disagree on the plan", "ranks 0-2,4-7:",
                                                           "rank 3:"]),
    "wrong-local-shape": ("RedistributionRefused", ["the DTensor's local tensor has shape (3, 16)", "(4, 16)"]),
}


@pytest.mark.parametrize("label", sorted(ERRORS))
def test_bad_input_is_refused_on_every_rank(job, label):
    cls, parts = ERRORS[label]
    got = {r: rec for r, rec in records(job, "error") if rec["label"] == label}
    assert sorted(got) == list(range(NPROCS))
    messages = set()
    for r, rec in got.items():
        assert rec["error"] is not None, f"rank {r}: no error for {label}"
        assert rec["error"]["type"] == cls, (r, rec["error"])
        for p in parts:
            assert p in rec["error"]["message"], (r, p, rec["error"]["message"])
        assert rec["ok_after"] is True, f"rank {r}: the next good call failed: {rec['ok_after']}"
        messages.add(rec["error"]["message"])
    assert len(messages) == 1, messages  # the same text on every rank
    if cls == "NotSupportedYet":
        assert "NotImplementedError" in got[0]["error"]["mro"]
    assert "ValueError" in got[0]["error"]["mro"]


def test_the_demo_matches_dtensor():
    """``make demo``'s PyTorch part (8 gloo processes)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "verishard.torch.demo"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "all 6 redistributions and the gradient matched DTensor on every rank", lines[-5:]
    assert sum("identical on all 8 ranks" in line for line in lines) == 6
    assert "CPU process group" not in proc.stderr  # DTensor's own warnings are silenced


def test_without_a_process_group_the_error_says_so():
    code = ("import torch, verishard.torch as vt\n"
            "try:\n    vt.redistribute(torch.ones(2), [])\n"
            "except RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "needs an initialized default process group" in out.stdout


def test_exchange_plans_run_on_torch(job):
    """The exchange (one all_to_all_single with split sizes over the mesh) on
    even and uneven types: every rank holds its expected block."""
    recs = list(records(job, "exchange"))
    assert len(recs) >= 8 * 40   # 40 even and up to 40 uneven pairs on each of the 8 ranks
    bad = [(r, rec["src"], rec["dst"]) for r, rec in recs if not rec["ok"]]
    assert not bad, bad[:5]


def test_partial_placements_on_shapes_that_do_not_divide(job):
    """Partial with a dimension that does not divide (all-reduce, exchange,
    make-pending: Puexchangeproof.puexec_correct; where DTensor's nested
    torch.chunk shards are not verishard's blocks: all-reduce, the box
    schedule, make-pending): full_tensor() of the result is the global
    tensor, every pair on every rank."""
    ran = Counter()
    for r, rec in records(job, "partial_uneven"):
        where = f"rank {r}: {rec['src']} -> {rec['dst']}"
        assert rec["error"] is None, where + ": " + rec["error"]
        assert rec["ok"], where + ": the result is not the global tensor"
        ran[r] += 1
    assert set(ran) == set(range(NPROCS)) and set(ran.values()) == {40}, ran
    print(f"\npartial pairs on a 5 x 7 tensor: all {ran[0]} ran and equal the global tensor")
