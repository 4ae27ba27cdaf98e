"""The MPI backend under ``mpirun -n 4``, ``-n 6`` and ``-n 8`` (see tests/mpi_job.py).

Each job runs with a timeout; on failure the report lists what every rank
said. Skipped only when Open MPI or mpi4py is missing and not on CI.
"""

from __future__ import annotations

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from mpi_helpers import assert_suites_pass, report, run_job  # noqa: E402

SUITES = ["bad", "movement", "pairs", "random", "partial", "uneven", "exchange"]


@pytest.mark.parametrize("nranks", [4, 6, 8])
def test_mpi_suites(nranks):
    res = run_job(nranks, *SUITES, timeout=300)
    counts = assert_suites_pass(res, nranks, SUITES)
    assert counts["pairs"] >= 100 and counts["random"] >= 100 and counts["movement"] >= 30
    assert counts["bad"] == 11
    assert counts["partial"] >= (0 if nranks == 4 else 400)   # partial pairs on x=2,y=3 and x=2,y=2,z=2
    assert counts["uneven"] >= 100   # uneven pairs on x=2,y=2 / x=2,y=3 (all) and x=2,y=2,z=2 (300)
    assert counts["exchange"] >= 40  # pairs the planner runs as one exchange, whole and in 2 pieces


@pytest.mark.parametrize("nranks", [4, 8])
def test_refused_input_ends_the_job_with_a_message_on_every_rank(nranks):
    res = run_job(nranks, "exit-refused", timeout=120)
    assert not res.timed_out and res.returncode not in (0, None), report(res, nranks)
    for r in range(nranks):
        said = "\n".join(res.rank_lines(r))
        assert "error: redistribution refused before any data moved" in said, report(res, nranks)
        assert "rank 1: the local input has shape (3,), but the source type" in said, report(res, nranks)


@pytest.mark.parametrize("nranks", [4, 6])
def test_wrong_number_of_ranks_is_reported_by_every_rank(nranks):
    res = run_job(nranks, "exit-size", timeout=120)
    assert not res.timed_out and res.returncode not in (0, None), report(res, nranks)
    for r in range(nranks):
        said = "\n".join(res.rank_lines(r))
        assert (f"the plan's mesh {{x:2, y:2, z:3}} has 12 devices but the communicator has {nranks} ranks "
                "(run with mpirun -n 12)") in said, report(res, nranks)


def test_an_exception_on_one_rank_aborts_the_job():
    res = run_job(4, "exit-crash", timeout=120)
    assert not res.timed_out and res.returncode not in (0, None), report(res, 4)
    assert res.failed_ranks() == [2], report(res, 4)
    assert "ValueError: rank 2 could not load its input" in "\n".join(res.rank_lines(2)), report(res, 4)
    assert res.seconds < 60


@pytest.mark.parametrize("job, missing", [("exit-timeout", 1), ("exit-missing", 2), ("exit-missing0", 0)])
def test_a_rank_that_never_arrives_is_named_within_the_deadline(job, missing):
    """A rank that calls redistribute too late, or exits before it: the others
    abort the job within the 3 s deadline (plus rank 0's grace), naming it."""
    res = run_job(4, job, timeout=120)
    assert not res.timed_out and res.returncode not in (0, None), report(res, 4)
    named = f"rank {missing} " + ("(which collects the agreement) " if missing == 0 else "")
    told = [r for r in range(4) if any(named + "did not reach redistribute within 3 s" in s
                                       for s in res.rank_lines(r))]
    assert told and missing not in told, report(res, 4)
    assert res.seconds < 30, report(res, 4)


def test_the_demo_job_matches_numpy():
    import io

    from mpi_helpers import require_mpi

    from verishard.runtime import run_mpi_demo
    require_mpi()
    out = io.StringIO()
    rc = run_mpi_demo(nranks=8, timeout=240, stream=out)
    text = out.getvalue()
    assert rc == 0, text
    assert "all 18 redistributions matched numpy on every rank" in text, text
    assert text.count("[") >= 9 and "lower bound" in text


def test_launcher_timeout_ends_every_rank():
    from mpi_helpers import require_mpi

    from verishard.runtime import mpirun
    require_mpi()
    code = "import os, sys, time; print(f'<rank {os.getpid()}>', flush=True); time.sleep(60)"
    res = mpirun([sys.executable, "-c", code], 2, timeout=5)
    assert res.timed_out and res.returncode is None and res.seconds < 30
    pids = [int(p) for p in re.findall(r"<rank (\d+)>", res.output)]  # the ranks' lines may interleave
    assert len(pids) == 2
    for pid in pids:   # the ranks are gone (or at most zombies awaiting their parent)
        try:
            with open(f"/proc/{pid}/status") as f:
                state = next(line for line in f if line.startswith("State:"))
            assert "Z" in state or "X" in state, state
        except FileNotFoundError:
            pass
