"""Ranks that disagree on anything that changes the data, and deadlines
(issue 39, parts 3 and 5): 2 gloo processes per case
(tests/agreement_job.py; every wait bounded by a 3 s deadline), and the
deadline checks without processes."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from agreement_job import DEADLINE_S, NPROCS  # noqa: E402
from torch_job import launch  # noqa: E402


def run_case(tmp_path, case: str) -> dict[int, list[dict]]:
    ranks = launch("agreement_job.py", tmp_path, NPROCS, timeout=120, args=[case])
    return {r: d["records"] for r, d in ranks.items()}


def same_error_everywhere(recs: dict[int, list[dict]], label: str) -> dict:
    errs = [next(rec for rec in recs[r] if rec["label"] == label)["error"] for r in range(NPROCS)]
    assert all(e is not None for e in errs), errs
    assert len({(e["type"], e["message"]) for e in errs}) == 1, errs
    return errs[0]


def test_meshes_laid_out_differently_are_refused_on_every_rank(tmp_path):
    """DeviceMesh("cpu", [0, 1]) on rank 0 and [1, 0] on rank 1: with
    check_agreement "first" and "always" every rank refuses, naming the
    device mesh ranks of each."""
    recs = run_case(tmp_path, "mesh_order")
    for label in ("first", "always"):
        err = same_error_everywhere(recs, label)
        assert err["type"] == "RedistributionRefused", err
        assert "disagree on the device mesh ranks: rank 0: [0, 1]; rank 1: [1, 0]" in err["message"], err


def test_transfers_with_different_src_ranks_are_refused_on_every_rank(tmp_path):
    """src_ranks=[0] on rank 0 and [1] on rank 1, to a mesh over both ranks
    and to a mesh over rank 1 alone (whose rank would otherwise agree with
    itself and copy its own tensor): every rank refuses, naming src_ranks."""
    recs = run_case(tmp_path, "src_ranks")
    for label in ("to both ranks", "to rank 1 only"):
        err = same_error_everywhere(recs, label)
        assert err["type"] == "RedistributionRefused", err
        assert "disagree on the source ranks (src_ranks): rank 0: [0]; rank 1: [1]" in err["message"], err


@pytest.mark.parametrize("trial", range(3))
def test_every_rank_gets_the_refusal_when_the_store_host_leaves_at_once(tmp_path, trial):
    """Different targets; each rank leaves its process as soon as it has its
    error (rank 0 hosts the store): rank 1 gets rank 0's refusal, never a
    lost connection or RanksMissing."""
    recs = run_case(tmp_path, "refuse_and_leave")
    err = same_error_everywhere(recs, "different targets")
    assert err["type"] == "RedistributionRefused" and "the ranks disagree on the plan" in err["message"], err


def test_a_cache_cleared_on_one_rank_fails_both_within_the_deadline(tmp_path):
    """A plan agreed on, then cache_clear() on rank 0 only and the same call
    (check_agreement="first"): rank 0 agrees again, rank 1 runs its cached
    plan. Both raise RanksMissing naming rank 1 within the deadline (rank 1
    one poll later), the same message. The next call is refused on both at
    once, naming rank 1's unfinished collective."""
    recs = run_case(tmp_path, "cache_clear")
    assert all(rec["error"] is None for r in recs for rec in recs[r] if rec["label"] == "agreed")
    err = same_error_everywhere(recs, "cache cleared on rank 0")
    assert err["type"] == "RanksMissing" and err["missing"] == [1], err
    assert f"rank 1 did not arrive within {DEADLINE_S:g} s" in err["message"]
    for r in range(NPROCS):
        took = next(rec for rec in recs[r] if rec["label"] == "cache cleared on rank 0")["seconds"]
        assert DEADLINE_S - 0.1 <= took <= DEADLINE_S + 3, (r, took)
    after = same_error_everywhere(recs, "after")   # rank 1 agrees again (its cache is agreed, but it is abandoned)
    assert after["type"] == "RedistributionRefused" and "rank 1: it left a collective unfinished" in after["message"]
    assert all(next(rec for rec in recs[r] if rec["label"] == "after")["seconds"] < DEADLINE_S for r in range(NPROCS))


def test_waiting_in_slices_keeps_results_exact(tmp_path):
    """Rank 1 enters 2.5 s after rank 0 (check_agreement=False), so rank 0
    waits over several POLL_S slices in an all_gather, an all_to_all and a
    transfer's point-to-point rounds: every result exact."""
    recs = run_case(tmp_path, "slow_peer")
    for r in range(NPROCS):
        assert [rec["label"] for rec in recs[r]] == ["all_gather", "all_to_all", "transfer"]
        for rec in recs[r]:
            assert rec["error"] is None and rec["exact"], (r, rec)
    assert min(rec["seconds"] for rec in recs[0]) > 1.0   # rank 0 did wait past one slice


# ---------------------------------------------------------------------------
# deadlines (no processes)


BAD_SECONDS = [math.inf, -math.inf, math.nan, 0, -1, -0.5, True, "5", [1], 1e300, 10**400]


@pytest.mark.parametrize("value", BAD_SECONDS, ids=repr)
def test_bad_seconds_are_one_error_naming_the_value_and_range(value):
    from verishard.errors import PlanError
    from verishard.limits import check_seconds
    with pytest.raises(PlanError, match=r"is not a valid number of seconds: give a number greater than 0 and at "
                                        r"most 1e\+08"):
        check_seconds(value, "deadline_s")


@pytest.mark.parametrize("value", [math.inf, math.nan, 0, -1, "abc", True], ids=repr)
def test_redistribute_and_transfer_refuse_a_bad_deadline_at_the_call(value):
    """deadline_s is checked before any communication (no process group is
    needed to see the refusal)."""
    from verishard.torch.backend import RedistributionRefused
    from verishard.torch import _policy
    with pytest.raises(RedistributionRefused, match=r"deadline_s .* is not a valid number of seconds"):
        _policy(True, value)
    assert _policy(True, 2) == ("first", 2.0)


@pytest.mark.parametrize("text", ["abc", "-1", "0", "inf", "nan", ""])
def test_a_bad_environment_deadline_fails_the_call_that_waits(monkeypatch, text):
    import verishard.torch.backend as rt
    monkeypatch.setenv("VERISHARD_DEADLINE_S", text)
    with pytest.raises(rt.RedistributionRefused, match="VERISHARD_DEADLINE_S"):
        rt.deadline()
    with pytest.raises(rt.RedistributionRefused, match="VERISHARD_DEADLINE_S"):
        rt.agree(1, {"errors": []})   # before it touches the (absent) process group
    old = rt.set_deadline(2.5)   # an explicit setting wins over the environment
    try:
        assert rt.deadline() == 2.5
    finally:
        rt.set_deadline(old)
    monkeypatch.setenv("VERISHARD_DEADLINE_S", "7.5")
    assert rt.deadline() == 7.5
    with pytest.raises(rt.RedistributionRefused, match="set_deadline"):
        rt.set_deadline(-1)


@pytest.mark.parametrize("timeout", [math.nan, -1, 0, math.inf, "5"], ids=repr)
def test_a_bad_mpi_timeout_is_refused_not_waited_on(timeout):
    """One process (mpi4py's singleton): the timeout is this rank's problem,
    refused by the agreement at once, naming it."""
    pytest.importorskip("mpi4py")
    from mpi4py import MPI

    from verishard.runtime.mpi import RedistributionRefused, agree
    with pytest.raises(RedistributionRefused, match=r"rank 0: timeout .* is not a valid number of seconds"):
        agree(MPI.COMM_WORLD, {"errors": []}, timeout)
    agree(MPI.COMM_WORLD, {"errors": []}, None)   # None: wait forever (here: nothing to wait for)


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -1])
def test_a_bad_barrier_timeout_is_refused_before_main_runs(timeout):
    pytest.importorskip("mpi4py")
    from verishard.errors import PlanError
    from verishard.runtime.mpi import guarded
    ran = []
    with pytest.raises(PlanError, match="barrier_timeout .* is not a valid number of seconds"):
        guarded(lambda: ran.append(1), barrier_timeout=timeout)
    assert not ran


@pytest.mark.parametrize("timeout", [math.nan, 0, -5])
def test_a_bad_mpirun_timeout_is_refused_before_the_job_starts(timeout):
    from verishard.errors import PlanError
    from verishard.runtime.launch import mpirun
    with pytest.raises(PlanError, match="timeout .* is not a valid number of seconds"):
        mpirun([sys.executable, "-c", "print('started')"], 1, timeout=timeout)


@pytest.mark.parametrize("text", ["abc", "-1"])
def test_a_bad_environment_deadline_does_not_break_import(text):
    env = dict(os.environ, VERISHARD_DEADLINE_S=text)
    code = "import verishard, verishard.torch, verishard.torch.backend; print('imported')"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr[-2000:]


# ---------------------------------------------------------------------------
# blocks of another shape than the layout's (no processes)


def test_a_whole_array_passed_as_a_cross_mesh_block_is_refused():
    import numpy as np

    from verishard.crossmesh import crossmesh_plan
    from verishard.errors import ShardingError
    p = crossmesh_plan("[4{x}8, 4]", "[8, 2{u}4]", [0, 1], [2, 3], src_mesh="x=2", dst_mesh="u=2", world_size=4)
    A = np.arange(32).reshape(8, 4)
    got = p.simulate({0: A[:4], 1: A[4:]})
    assert np.array_equal(got[2], A[:, :2]) and np.array_equal(got[3], A[:, 2:])
    with pytest.raises(ShardingError, match=r"source rank 1: its local block has shape \(8, 4\), the source layout "
                                            r"gives it \(4, 4\)"):
        p.simulate({0: A[:4], 1: A})
    with pytest.raises(ShardingError, match="source rank 1: no local block given"):
        p.simulate({0: A[:4]})
