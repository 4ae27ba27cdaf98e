"""Hostile input on every surface (issue 34): each case a fuzzing run found
escaping, hanging or crashing, with what it must do now.

CLI: every input error exits 2 with one line on stderr naming the problem
(and the limit, where one applies), never 3 ("internal error") or a hang.
Python API: every public entry point raises only VerishardError subclasses.
bench/fuzz.py runs the same surfaces for longer (bench/results/fuzz.md).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verishard.cli import main

SCRIPT = Path(sys.executable).parent / "verishard"
BIG = "9" * 4400  # past Python's 4,300-digit int-string limit


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``main(argv)`` in process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def assert_usage_error(argv: list[str], *needles: str) -> str:
    code, _, err = run_cli(argv)
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("verishard: error: "), err
    assert "internal error" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


PLAN = ["plan", "--mesh", "x=2", "--src", "[2{x}4]", "--dst", "[4]"]
XMESH = ["crossmesh", "--src-mesh", "x=2", "--src", "[2{x}4]", "--dst-mesh", "u=2", "--dst", "[2{u}4]"]


def _with(argv: list[str], option: str, value: str) -> list[str]:
    out = list(argv)
    if option in out:
        out[out.index(option) + 1] = value
    else:
        out += [option, value]
    return out


# ---------------------------------------------------------------------------
# CLI: the cases of issue 34 that exited 3 ("internal error") or hung


@pytest.mark.parametrize("argv, needles", [
    # lone surrogates (undecodable bytes in argv)
    (_with(PLAN, "--mesh", "x=2\udc80"), ["not an integer", "--mesh"]),
    (_with(PLAN, "--src", "[2{x\udc80}4]"), ["--src"]),
    (["plan", "--mesh", "x=2", "--shape", "4", "--jax", "--src", "P('x'\udc80)", "--dst", "P(None)"], ["--src"]),
    (["check", "/nonexistent/\udcff.json"], ["cannot read plan file"]),
    # unicode digits
    (_with(PLAN, "--mesh", "x=²"), ["'²' is not an integer"]),
    (_with(PLAN, "--src", "[²{x}4]"), ["'²'"]),
    (["plan", "--mesh", "x=2", "--shape", "²", "--jax", "--src", "P('x')", "--dst", "P()"], ["'²' is not an integer"]),
    (_with(XMESH, "--dst-ranks", "²"), ["'²' is not an integer"]),
    (_with(XMESH, "--dst-ranks", "١,٢"), ["is not an integer"]),  # Arabic-Indic digits: int() takes them, we do not
    (_with(XMESH, "--world-size", "١٢"), ["--world-size", "is not an integer"]),
    (["demo", "--no-mpi", "--nranks", "²"], ["--nranks '²' is not an integer"]),
    (["partition", "tiny-transformer", "--platform", "cpu+2gpu", "--batch", "²"], ["--batch '²' is not an integer"]),
    # integers of 4,400 digits
    (_with(PLAN, "--mesh", "x=" + BIG), ["MAX_DIGITS"]),
    (_with(PLAN, "--src", "[" + BIG + "{x}4]"), ["MAX_DIGITS"]),
    (["plan", "--mesh", "x=2", "--shape", BIG, "--jax", "--src", "P('x')", "--dst", "P()"], ["MAX_DIGITS"]),
    (["plan", "--mesh", "x=2", "--shape", "4", "--dtensor", "--src", f"Shard({BIG})", "--dst", "Replicate()"],
     ["MAX_DIGITS"]),
    (_with(XMESH, "--dst-ranks", BIG), ["MAX_DIGITS"]),
    (_with(XMESH, "--world-size", BIG), ["MAX_DIGITS"]),
    (["demo", "--no-mpi", "--nranks", BIG], ["MAX_DIGITS"]),
    # sizes that would need all the memory
    (_with(XMESH, "--dst-ranks", "0-99999999999"), ["MAX_DEVICES"]),
    (_with(XMESH, "--dst-ranks", "5-2"), ["empty"]),
    # meshes of hundreds of size-1 axes (hung past 30 s), 100,000 of them, types of 20,000 dimensions
    (_with(PLAN, "--mesh", "x=" + "*".join(["1"] * 300)), ["MAX_MESH_PARTS"]),
    (_with(PLAN, "--mesh", ",".join(f"a{i}=1" for i in range(300))), ["MAX_MESH_PARTS"]),
    (_with(PLAN, "--mesh", ",".join(f"a{i}=1" for i in range(100_000))), ["MAX_TEXT", "--mesh"]),
    (["plan", "--mesh", "x=2", "--src", "[" + ",".join(["1"] * 20_000) + "]", "--dst", "[1]"], ["MAX_TEXT"]),
    (["plan", "--mesh", "x=2", "--src", "[" + ",".join(["1"] * 65) + "]", "--dst", "[1]"], ["MAX_DIMS"]),
    (["plan", "--mesh", "x=2", "--shape", ",".join(["1"] * 65), "--jax", "--src", "P()", "--dst", "P()"],
     ["MAX_DIMS"]),
    (_with(PLAN, "--src", "[" + "2" * 100_000 + "]"), ["MAX_TEXT"]),
])
def test_cli_input_error_exits_2_with_one_line(argv, needles):
    assert_usage_error(argv, *needles)


def test_cli_output_paths(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    show = ["show", "--mesh", "x=2", "--src", "[2{x}4]", "--dst", "[4]", "--picture"]
    assert_usage_error(show + [str(tmp_path / "no" / "dir" / "p.png")], "No such file or directory")
    assert_usage_error(show + [str(afile / "p.png")], "Not a directory")
    assert_usage_error(show + [str(tmp_path)], "must end in .png or .svg")
    assert_usage_error(["partition", "tiny-transformer", "--platform", "cpu+2gpu", "--batch", "1",
                        "--picture", str(tmp_path / "no" / "x.png")], "No such file or directory")
    assert_usage_error(["check", str(tmp_path)], "Is a directory")
    # an output directory that is an existing file (FileExistsError before)
    from verishard import checkpoint
    import numpy as np
    ckpt = str(tmp_path / "ckpt")
    checkpoint.save(np.arange(4.0), "x=2", "[2{x}4]", ckpt)
    reshard = ["reshard-checkpoint", ckpt]
    assert_usage_error(reshard + [str(afile), "--mesh", "x=2", "--type", "[4]"], "File exists")
    assert_usage_error(reshard + [str(afile / "sub"), "--mesh", "x=2", "--type", "[4]"], "Not a directory")
    assert_usage_error(reshard + [str(tmp_path / "out"), "--mesh", "x=2", "--type", "[4]", "--read-buffer", BIG],
                       "MAX_DIGITS")


def test_cli_surrogates_in_a_real_process(tmp_path):
    """Run as a command, where arguments arrive as bytes: an undecodable
    byte becomes a lone surrogate, which the error line must still print."""
    env = dict(os.environ, LC_ALL="C.UTF-8")
    bad = os.fsencode("x=2") + b"\xff"
    r = subprocess.run([os.fsencode(SCRIPT), b"plan", b"--mesh", bad, b"--src", b"[2{x}4]", b"--dst", b"[4]"],
                       capture_output=True, env=env, timeout=120)
    err = r.stderr.decode("utf-8", "replace").strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "not an integer" in err[0], r.stderr


def test_cli_limits_leave_room_for_real_meshes():
    """64 size-1 axes and 64 dimensions are inside the limits and plan."""
    mesh = ",".join(f"a{i}=1" for i in range(64))
    code, out, err = run_cli(["plan", "--mesh", mesh, "--src", "[2]", "--dst", "[2]"])
    assert code == 0, err
    dims = ",".join(["1"] * 64)
    code, out, err = run_cli(["plan", "--mesh", "x=2", "--src", f"[{dims}]", "--dst", f"[{dims}]"])
    assert code == 0, err
