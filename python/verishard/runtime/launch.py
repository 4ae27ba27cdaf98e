"""Launching SPMD jobs with ``mpirun``: streaming output, a timeout, and a
report of what every rank said.

>>> cmd = mpirun_command(4, ["python", "job.py"])
>>> cmd[:3], cmd[-2:]
(['mpirun', '-n', '4'], ['python', 'job.py'])
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from ..errors import VerishardError


class LaunchError(VerishardError):
    """``mpirun`` is missing or could not be started."""


@dataclass(frozen=True)
class LaunchResult:
    """What an ``mpirun`` job did."""

    command: tuple[str, ...]
    returncode: int | None   # None when it was killed for running too long
    output: str              # stdout and stderr, interleaved as they came
    timed_out: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def rank_lines(self, rank: int) -> list[str]:
        """Lines a rank printed with the ``[rank r]`` prefix (as errors from
        :func:`verishard.runtime.mpi.guarded` are), without the prefix."""
        tag = f"[rank {rank}] "
        return [line[len(tag):] for line in self.output.splitlines() if line.startswith(tag)]

    def failed_ranks(self) -> list[int]:
        """Ranks that printed a ``[rank r]`` line."""
        return sorted({int(m.group(1)) for m in re.finditer(r"^\[rank (\d+)\] ", self.output, re.M)})

    def summary(self) -> str:
        if self.timed_out:
            head = f"timed out after {self.seconds:.0f} s"
        else:
            head = f"exit status {self.returncode} after {self.seconds:.1f} s"
        return f"{' '.join(self.command)}: {head}\n{self.output}"


def _find_mpirun() -> str:
    for name in ("mpirun", "mpiexec"):
        path = shutil.which(name)
        if path:
            return path
    raise LaunchError("mpirun was not found on PATH; install Open MPI (apt-get install openmpi-bin "
                      "libopenmpi-dev) and mpi4py")


_FLAVOUR: dict[str, bool] = {}


def _is_open_mpi(path: str) -> bool:
    if path not in _FLAVOUR:
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        _FLAVOUR[path] = "Open MPI" in out or "OpenRTE" in out
    return _FLAVOUR[path]


def mpirun_command(nranks: int, argv: Sequence[str], mpirun: str = "mpirun",
                   open_mpi: bool = True, tag_output: bool = False) -> list[str]:
    """The command line: ``mpirun -n N`` with, for Open MPI, oversubscription
    allowed (more ranks than cores), no core binding, and ``--allow-run-as-root``
    when running as root."""
    cmd = [mpirun, "-n", str(int(nranks))]
    if open_mpi:
        cmd += ["--oversubscribe", "--bind-to", "none"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        if tag_output:
            cmd.append("--tag-output")
    return cmd + list(argv)


def mpirun(argv: Sequence[str], nranks: int, timeout: float | None = None, stream: TextIO | None = None,
           env: dict[str, str] | None = None, cwd: str | None = None, tag_output: bool = False) -> LaunchResult:
    """Run ``argv`` under ``mpirun -n nranks``; stream its output to ``stream``
    (if given) line by line, and kill the whole job after ``timeout`` seconds.

    The job runs in its own process group, so a timeout ends every rank.
    """
    path = _find_mpirun()
    cmd = mpirun_command(nranks, argv, path, _is_open_mpi(path), tag_output)
    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    full_env.setdefault("OMPI_MCA_btl_base_warn_component_unused", "0")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        full_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        full_env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    start = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=full_env, cwd=cwd, text=True, errors="replace", bufsize=1,
                                start_new_session=True)
    except OSError as e:
        raise LaunchError(f"could not start {cmd[0]}: {e}") from None
    chunks: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            chunks.append(line)
            if stream is not None:
                stream.write(line)
                stream.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    except BaseException:
        _kill_group(proc)
        raise
    reader.join(timeout=10)
    return LaunchResult(tuple(cmd), None if timed_out else proc.returncode, "".join(chunks), timed_out,
                        time.monotonic() - start)


def _kill_group(proc: subprocess.Popen) -> None:
    """End the job we started: SIGTERM to its process group, SIGKILL if it lingers."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_mpi_demo(nranks: int = 8, timeout: float | None = 600, stream: TextIO | None = None,
                 python: str | None = None) -> int:
    """Run ``python -m verishard.runtime.demo_job`` under ``mpirun -n nranks``,
    streaming its output (to ``stream``, default stdout). Returns the exit
    status: 0 when every redistribution matched numpy, else non-zero (124 on
    a timeout, with a message)."""
    stream = sys.stdout if stream is None else stream
    res = mpirun([python or sys.executable, "-m", "verishard.runtime.demo_job"], nranks, timeout, stream)
    if res.timed_out:
        stream.write(f"verishard demo: the MPI job did not finish within {timeout:g} s and was stopped\n")
        return 124
    if res.returncode != 0:
        stream.write(f"verishard demo: the MPI job failed (exit status {res.returncode})\n")
    return int(res.returncode or 0)


__all__ = ["mpirun", "mpirun_command", "run_mpi_demo", "LaunchResult", "LaunchError"]
