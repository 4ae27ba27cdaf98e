"""Launching the MPI test job from pytest: a timeout, and a report of every
rank's failure when the job does not end as expected."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from verishard.runtime.launch import LaunchResult, mpirun

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "mpi_job.py")
ROOT = os.path.dirname(HERE)


def require_mpi() -> None:
    """Skip when Open MPI or mpi4py is missing, except on CI (where that is a failure)."""
    missing = []
    if shutil.which("mpirun") is None:
        missing.append("mpirun")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        missing.append("mpi4py")
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the MPI tests but {', '.join(missing)} is missing")
        pytest.skip(f"{', '.join(missing)} not installed")


def report(res: LaunchResult, nranks: int) -> str:
    """Every rank's ``[rank r]`` lines, then the tail of the whole output."""
    lines = [f"{' '.join(res.command)}: " + ("TIMED OUT" if res.timed_out else f"exit status {res.returncode}")
             + f" after {res.seconds:.1f} s"]
    for r in range(nranks):
        said = res.rank_lines(r)
        lines.append(f"rank {r}: " + ("(nothing)" if not said else f"{len(said)} line(s)"))
        lines += ["    " + s for s in said[:20]]
    lines.append("--- output tail ---")
    lines.append(res.output[-4000:])
    return "\n".join(lines)


def run_job(nranks: int, *args: str, timeout: float = 300) -> LaunchResult:
    require_mpi()
    return mpirun([sys.executable, JOB, *args], nranks, timeout=timeout, cwd=ROOT)


def assert_suites_pass(res: LaunchResult, nranks: int, suites: list[str]) -> dict[str, int]:
    """The job ended in time with status 0 and every suite printed OK; returns case counts."""
    assert not res.timed_out and res.returncode == 0, report(res, nranks)
    counts = {}
    for line in res.output.splitlines():
        if line.startswith("SUITE "):
            _, name, status, cases, _ = line.split()
            assert status == "OK", report(res, nranks)
            counts[name] = int(cases.split("=")[1])
    assert sorted(counts) == sorted(suites), report(res, nranks)
    return counts
