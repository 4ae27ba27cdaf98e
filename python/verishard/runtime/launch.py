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
from ..limits import check_seconds


class LaunchError(VerishardError):
    """``mpirun`` is missing or could not be started.

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"PATH": ""}):
    ...     mpirun(["true"], 1)
    Traceback (most recent call last):
    ...
    verishard.runtime.launch.LaunchError: mpirun was not found on PATH; install Open MPI (apt-get install openmpi-bin libopenmpi-dev) and mpi4py
    """


@dataclass(frozen=True)
class LaunchResult:
    """What an ``mpirun`` job did.

    >>> r = LaunchResult(("mpirun", "-n", "2", "job"), 1, "[rank 1] error: bad input\\nok\\n", False, 0.5)
    >>> r.ok, r.failed_ranks(), r.rank_lines(1)
    (False, [1], ['error: bad input'])
    """

    command: tuple[str, ...]
    returncode: int | None   # None when it was killed for running too long
    output: str              # stdout and stderr, interleaved as they came
    timed_out: bool
    seconds: float

    @property
    def ok(self) -> bool:
        """Exit status 0 and no timeout.

        >>> LaunchResult(("mpirun", "job"), 0, "", False, 0.1).ok, LaunchResult(("mpirun", "job"), None, "", True, 60.0).ok
        (True, False)
        """
        return self.returncode == 0 and not self.timed_out

    def rank_lines(self, rank: int) -> list[str]:
        """Lines a rank printed with the ``[rank r]`` prefix (as errors from
        :func:`verishard.runtime.mpi.guarded` are), without the prefix.

        >>> out = "[rank 0] error: x\\n[rank 1] error: y\\n[rank 0] more\\n"
        >>> LaunchResult(("mpirun", "job"), 1, out, False, 0.2).rank_lines(0)
        ['error: x', 'more']
        """
        tag = f"[rank {rank}] "
        return [line[len(tag):] for line in self.output.splitlines() if line.startswith(tag)]

    def failed_ranks(self) -> list[int]:
        """Ranks that printed a ``[rank r]`` line.

        >>> out = "[rank 3] error: x\\nplain line\\n[rank 1] error: y\\n[rank 3] more\\n"
        >>> LaunchResult(("mpirun", "job"), 1, out, False, 0.2).failed_ranks()
        [1, 3]
        """
        return sorted({int(m.group(1)) for m in re.finditer(r"^\[rank (\d+)\] ", self.output, re.M)})

    def summary(self) -> str:
        """The command, how it ended, and its output.

        >>> print(LaunchResult(("mpirun", "-n", "2", "job"), 0, "done\\n", False, 1.34).summary())
        mpirun -n 2 job: exit status 0 after 1.3 s
        done
        <BLANKLINE>
        >>> print(LaunchResult(("mpirun", "job"), None, "", True, 60.0).summary())
        mpirun job: timed out after 60 s
        <BLANKLINE>
        """
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
    when running as root.

    >>> mpirun_command(2, ["python", "job.py"], open_mpi=False)
    ['mpirun', '-n', '2', 'python', 'job.py']
    >>> [a for a in mpirun_command(2, ["python", "job.py"], tag_output=True) if a != "--allow-run-as-root"]
    ['mpirun', '-n', '2', '--oversubscribe', '--bind-to', 'none', '--tag-output', 'python', 'job.py']
    """
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
    (if given) line by line, and kill the whole job after ``timeout`` seconds
    (None: never; else a number greater than 0, at most
    ``verishard.limits.MAX_SECONDS``).

    The job runs in its own process group, so a timeout ends every rank.

    >>> r = mpirun([sys.executable, "-c", "print('hello')"], 2, timeout=60)
    >>> r.ok, r.output.count("hello")   # the two ranks' output may interleave
    (True, 2)
    """
    if timeout is not None:   # nan would never end the job, 0 or less would end it at once
        timeout = check_seconds(timeout, "timeout")
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
    a timeout, with a message).

    The demo needs 8 ranks; with one it stops at once and says so:

    >>> import io
    >>> out = io.StringIO()
    >>> run_mpi_demo(1, timeout=60, stream=out)
    2
    >>> out.getvalue().splitlines()[0]
    'demo_job needs 8 ranks (mpirun -n 8), got 1'
    """
    stream = sys.stdout if stream is None else stream
    res = mpirun([python or sys.executable, "-m", "verishard.runtime.demo_job"], nranks, timeout, stream)
    if res.timed_out:
        stream.write(f"verishard demo: the MPI job did not finish within {timeout:g} s and was stopped\n")
        return 124
    if res.returncode != 0:
        stream.write(f"verishard demo: the MPI job failed (exit status {res.returncode})\n")
    return int(res.returncode or 0)


__all__ = ["mpirun", "mpirun_command", "run_mpi_demo", "LaunchResult", "LaunchError"]
