"""verishard.torch where training runs: PyTorch's own test Transformer under
TP+SP and TP + FSDP2 with enable(), redistribute on a sub-mesh, DTensor's
keywords (forward_dtype, backward_dtype, async_op) and torch.compile, on 4
gloo processes (and the signature and compile cases on 2); one launch of
tests/torch_train_job.py per process count, every rank reporting through a
JSON file."""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _launch(tmp_path_factory, nprocs, cases=""):
    """Run the job on ``nprocs`` processes (torch's test helpers need the
    expecttest package: requirements.txt, the ``test`` extra)."""
    import json
    import subprocess
    out = tmp_path_factory.mktemp(f"torch_train_job{nprocs}")
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "torch_train_job.py"), str(out), str(nprocs), cases],
                          env=env, capture_output=True, text=True, timeout=300)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    ranks = {}
    for r in range(nprocs):
        with open(os.path.join(str(out), f"rank{r}.json")) as f:
            ranks[r] = json.load(f)
    crashes = [rec["traceback"] for d in ranks.values() for rec in d["records"] if rec["case"] == "crash"]
    assert not crashes, crashes[0]
    return ranks


@pytest.fixture(scope="module")
def job4(tmp_path_factory):
    return _launch(tmp_path_factory, 4)


@pytest.fixture(scope="module")
def job2(tmp_path_factory):
    return _launch(tmp_path_factory, 2, "signature,compile,compile-enable")


def records(job, case):
    return [(r, rec) for r, d in sorted(job.items()) for rec in d["records"] if rec["case"] == case]


def test_test_transformer_trains_bit_identical_with_every_redistribution_routed(job4):
    """PyTorch's test Transformer, 2 steps of Adam with clip_grad_norm_,
    under TP+SP on 4 ranks and under TP on the tp sub-mesh then FSDP2 over
    dp on a (2, 2) mesh: the losses and every parameter equal DTensor's own
    run bit for bit, and every redistribution was routed through verified
    plans (the tp sub-mesh's among its two ranks; _MaskPartial of the
    vocabulary-parallel embedding and _NormPartial of clip_grad_norm_ with
    DTensor's own local steps), none fell back."""
    recs = records(job4, "train")
    assert len(recs) == 4 * 2
    for r, rec in recs:
        assert rec["losses_same"] and all(rec["params_same"]) and rec["nparams"] == 17, (r, rec)
        assert rec["info"]["fallbacks"] == 0 and rec["info"]["routed"] >= 50, (r, rec["label"], rec["info"])
        assert rec["restored"], (r, rec)


def test_redistribute_on_a_sub_mesh_runs_among_its_ranks(job4):
    """The tp sub-mesh of a (2, 2) mesh, each pair of ranks calling on its
    own: DTensor.redistribute's result and placements."""
    recs = records(job4, "submesh")
    assert len(recs) == 4 * 2 and all(rec["same"] and rec["placements"] for _, rec in recs), recs


def test_each_sub_mesh_agrees_among_its_own_ranks(job4):
    """The first tp pair (ranks 0, 1) asks for a dimension out of range
    while the second (ranks 2, 3) makes a good call: the first pair's two
    ranks raise the same RedistributionRefused naming both, the second pair
    gets DTensor's result; a good call works on every rank after."""
    recs = records(job4, "submesh-refusal")
    assert len(recs) == 4
    for r, rec in recs:
        assert rec["after"], (r, rec)
        if r < 2:
            assert rec["row"] == 0 and rec["error"]["type"] == "RedistributionRefused", (r, rec)
            assert rec["error"]["message"].startswith("redistribution refused before any data moved:\n  ranks 0-1: "
                                                      "S(2) on mesh dimension 0 ('tp') names no dimension"), rec
        else:
            assert rec["row"] == 1 and rec["error"] is None and rec["same"], (r, rec)


@pytest.mark.parametrize("nprocs", [2, 4])
def test_forward_dtype_backward_dtype_and_async_op_are_dtensors(nprocs, job2, job4):
    """DTensor's keywords: the result (values, dtype, placements) and the
    gradient (values, dtype: the input's, placements) equal
    DTensor.redistribute's with the same keywords, bit for bit."""
    recs = records({2: job2, 4: job4}[nprocs], "signature")
    assert len(recs) == nprocs * 4
    for r, rec in recs:
        assert rec["out"] and rec["placements"] and rec["grad"] and rec["grad_placements"], (r, rec)
        assert rec["dtypes"][1] == "torch.float32", (r, rec)   # the gradient comes back as the input's dtype
    dtypes = {rec["label"]: rec["dtypes"][0] for _, rec in recs}
    assert dtypes["forward_dtype=bfloat16"] == "torch.bfloat16" and dtypes["async_op=True"] == "torch.float32"


@pytest.mark.parametrize("nprocs", [2, 4])
def test_compiled_redistribute_matches_compiled_dtensor(nprocs, job2, job4):
    """torch.compile with backend "eager" and "aot_eager", with and without
    fullgraph=True: a function calling verishard.torch.redistribute twice
    gives DTensor's compiled output and gradient bit for bit, with no graph
    break and no warning while compiling; the AOT graphs hold the cached
    plans' collectives as functional collectives (an all-to-all and an
    all-gather forward, the all-to-all back)."""
    job = {2: job2, 4: job4}[nprocs]
    recs = records(job, "compile")
    assert sorted((rec["backend"], rec["fullgraph"]) for _, rec in recs) == sorted(
        [(b, f) for b in ("eager", "aot_eager") for f in (False, True)] * nprocs)
    for r, rec in recs:
        assert rec["out"] and rec["grad"], (r, rec)
        assert rec["breaks"] == 0 and rec["warnings"] == [], (r, rec)
    for r, rec in records(job, "compile-graphs"):
        forward, backward = rec["ops"]
        assert {"torch.ops._c10d_functional.all_to_all_single.default",
                "torch.ops._c10d_functional.all_gather_into_tensor.default"} <= set(forward), (r, rec)
        assert "torch.ops._c10d_functional.all_to_all_single.default" in backward, (r, rec)


def test_compiled_box_layouts_break_the_graph_or_are_refused_with_the_reason(job4):
    """A layout only explicit boxes describe moves point to point, which a
    graph cannot hold: compiled without fullgraph it runs eagerly (Dynamo
    breaks the graph there), equal to DTensor's; with fullgraph=True
    torch.compile fails, our reason among the causes."""
    recs = {(r, rec["fullgraph"]): rec for r, rec in records(job4, "compile-boxes")}
    assert len(recs) == 8
    for (r, fullgraph), rec in recs.items():
        if not fullgraph:
            assert rec["error"] is None and rec["same"], (r, rec)
        else:
            assert any(c.startswith("NotSupportedYet: redistribution refused while torch.compile traces")
                       for c in rec["error"]), (r, rec)


def test_compiled_plans_of_every_kind_match_dtensor(job4):
    """Plans with a reduce-scatter, an all-reduce (Partial sources), an
    all-to-all, an all-gather (an uneven (7, 6) tensor among them) and an
    AllPermute (an all-to-all with split sizes), compiled with aot_eager and
    fullgraph=True on a (2, 2) mesh: each result equals DTensor's compiled
    one and our eager one bit for bit, and the forward graph holds the
    plan's functional collectives."""
    recs = records(job4, "compile-pairs")
    assert len(recs) == 4 * 7
    for r, rec in recs:
        assert rec["dtensor"] and rec["eager"] and rec["ops"], (r, rec)
    ops = {op for _, rec in recs for op in rec["ops"]}
    assert ops == {"reduce_scatter_tensor", "all_reduce", "all_to_all_single", "all_gather_into_tensor"}, ops


@pytest.mark.parametrize("nprocs", [2, 4])
def test_enable_routes_inside_compiled_regions(nprocs, job2, job4):
    """A tensor-parallel MLP compiled with eager and aot_eager
    (fullgraph=True) under enable(): output and every gradient equal
    DTensor's compiled run bit for bit, every redistribution routed (planned
    while tracing, functional collectives in the AOT graphs), none fell back."""
    recs = records({2: job2, 4: job4}[nprocs], "compile-enable")
    assert len(recs) == nprocs * 4
    for r, rec in recs:
        assert all(rec["same"]) and len(rec["same"]) == 5, (r, rec)
        assert rec["info"]["routed"] >= 2 and rec["info"]["fallbacks"] == 0, (r, rec)
