"""The ``verishard`` command line, end to end through subprocesses, plus
in-process fuzzing of its inputs."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from verishard import cli

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "verishard"
WORKED = ROOT / "docs" / "img" / "worked_example.json"


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run the CLI as the user does: the console script if installed, else ``python -m``."""
    cmd = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "verishard.cli"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    return subprocess.run(cmd + list(args), capture_output=True, text=True, input=stdin, env=env, timeout=120)


def main(*args: str) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return code, out.getvalue(), err.getvalue()


def one_error_line(proc_or_err) -> str:
    err = proc_or_err if isinstance(proc_or_err, str) else proc_or_err.stderr
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("verishard: error: ") and "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------
# plan


def test_console_script_installed():
    assert SCRIPT.exists(), "run `make bindings` to install the console script"


def test_plan_table():
    p = run("plan", "--mesh", "x=2,y=3", "--src", "[3{x}6]", "--dst", "[2{y}6]")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert p.stderr == ""
    assert re.search(r"step\s+collective\s+type after\s+local size\s+received/device", out)
    assert re.search(r"^\s+0\s+\(source\)\s+\[3\{x\}6\]\s+3\s+0$", out, re.M)
    assert re.search(r"\[2\{y\}6\]\s+2\s+\d+$", out, re.M)
    assert re.search(r"^peak \d+ elements/device; bound max\(3, 2\) = 3", out, re.M)
    assert re.search(r"^traffic \d+ elements/device; lower bound 2 ", out, re.M)
    assert "guarantees:" in out and "Checker.check_ok_iff" in out and "Semantics.movement_correct" in out
    assert "Exec.check_exec" in out    # the whole plan, not one step


@pytest.mark.parametrize("mesh,src,dst", [
    ("x=2", "[2{x}4]", "[4]"),                      # a gather: at the lower bound
    ("x=2,y=3", "[6, 3{x}6]", "[1{x,y}6, 6]"),      # above it (5 against 3)
    ("x=2,y=2", "[2{x}4, 2{y}4]", "[2{y}4, 2{x}4]"),
])
def test_traffic_minimal_claimed_only_at_the_lower_bound(mesh, src, dst):
    """`plan_traffic_optimal` is named exactly where the plan's traffic equals
    the lower bound; elsewhere the ratio is listed as measured, not proved."""
    from verishard import check, plan
    p = plan(mesh, src, dst)
    names = dict(cli.guarantees(p))
    at_bound = p.traffic == p.lower_bound
    assert ("Pipelineproof.plan_traffic_optimal" in names) == at_bound
    assert (names.get(None, "").startswith("traffic / lower bound")) == (not at_bound)
    # the same collectives checked as a user's plan: minimal on this mesh only, by the lower bound
    q = check(p.mesh, p.src, p.dst, list(p.collectives))
    claims = [c for n, c in cli.guarantees(q) if n == "Trafficproof.accepted_traffic_lower_bound"]
    assert len(claims) == 1 and ("traffic-minimal" in claims[0]) == at_bound
    assert "Pipelineproof.plan_traffic_optimal" not in dict(cli.guarantees(q))


def test_plan_json_round_trip(tmp_path):
    p = run("plan", "--mesh", "x=2,y=4", "--src", "[2{x}4]", "--dst", "[1{y}4]", "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["schema"] == "verishard.plan/1"
    assert doc["types"][0] == doc["src"] == "[2{x}4]" and doc["types"][-1] == doc["dst"] == "[1{y}4]"
    assert len(doc["types"]) == len(doc["steps"]) + 1 == len(doc["received"]) + 1 == len(doc["local_sizes"])
    assert doc["peak"] == max(doc["local_sizes"]) >= doc["bound"] == 2
    assert doc["traffic"] == sum(doc["received"]) and doc["lower_bound"] == 1
    assert isinstance(doc["guaranteed"], bool)
    assert all(set(t) == {"name", "claim"} for t in doc["theorems"])
    path = tmp_path / "plan.json"
    path.write_text(p.stdout)
    c = run("check", str(path), "--format", "json")
    assert c.returncode == 0, c.stderr
    again = json.loads(c.stdout)
    for key in ("mesh", "src", "dst", "steps", "types", "local_sizes", "received", "peak", "bound", "traffic",
                "lower_bound"):
        assert again[key] == doc[key], key
    assert again["guaranteed"] is None          # a file is checked, not synthesized


def test_json_keys_are_documented():
    code, out, _ = main("plan", "--mesh", "x=2,y=3", "--src", "[3{x}6]", "--dst", "[2{y}6]", "--format", "json")
    doc = json.loads(out)
    page = (ROOT / "docs" / "plan.md").read_text()
    documented = set(re.findall(r"^\| `(\w+)` \|", page, re.M))
    assert set(doc) == documented - {"comment", "minimal"}   # "minimal" is written only when true
    code, out, _ = main("plan", "--mesh", "x=2,y=3", "--src", "[3{x}6]", "--dst", "[2{y}6]", "--format", "json",
                        "--minimal")
    assert code == 0 and set(json.loads(out)) == documented - {"comment"}
    ops = set(re.findall(r'"op": "(\w+)"', page))
    assert ops >= {"all_gather", "dyn_slice", "all_to_all", "all_permute"}


def test_plan_jax_and_dtensor():
    p = run("plan", "--mesh", "x=2,y=2", "--shape", "16,16", "--jax", "--src", "P('x', None)", "--dst", "P(None, 'x')")
    assert p.returncode == 0, p.stderr
    assert "source P('x', None) = [8{x}16, 16]" in p.stdout and "target P(None, 'x') = [16, 8{x}16]" in p.stdout
    p = run("plan", "--mesh", "x=2,y=2", "--shape", "16,16", "--dtensor",
            "--src", "Shard(0),Replicate()", "--dst", "[Replicate(), Shard(1)]")
    assert p.returncode == 0, p.stderr
    assert "source [Shard(0), Replicate()] = [8{x}16, 16]" in p.stdout
    assert "target [Replicate(), Shard(1)] = [16, 8{y}16]" in p.stdout


def test_plan_shape_with_our_notation():
    code, out, err = main("plan", "--mesh", "x=2", "--shape", "6,4", "--src", "[3{x}6, 4]", "--dst", "[6, 4]")
    assert code == 0, err
    code, out, err = main("plan", "--mesh", "x=2", "--shape", "8", "--src", "[3{x}6]", "--dst", "[6]")
    assert code == 2 and "does not match --shape (8,)" in one_error_line(err)


# ---------------------------------------------------------------------------
# check


def test_check_accepts_the_worked_example():
    p = run("check", str(WORKED))
    assert p.returncode == 0, p.stderr
    assert "AllPermute([1{y,x}6])" in p.stdout
    assert "peak 3 elements/device; bound max(3, 2) = 3" in p.stdout
    assert "Permute.permute_table_perm" in p.stdout and "OK: the verified checker accepts" in p.stdout


def test_check_reads_stdin():
    p = run("check", "-", stdin=WORKED.read_text())
    assert p.returncode == 0, p.stderr


def bad_plan(tmp_path, **changes) -> str:
    doc = json.loads(WORKED.read_text())
    doc.update(changes)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("steps, token", [
    ([{"op": "all_gather", "dim": 0, "axes": ["x"]}, {"op": "all_gather", "dim": 0, "axes": ["x"]}],
     "step 2 (AllGather(0, x)): the axes are not the minor"),
    ([{"op": "dyn_slice", "dim": 0, "axes": ["x"]}], "step 1 (DynSlice(0, x)): axis x already shards the array"),
    ([{"op": "dyn_slice", "dim": 0, "axes": ["y"]}, {"op": "all_gather", "dim": 0, "axes": ["x"]}],
     "step 2 (AllGather(0, x)): the axes are not the minor"),
    ([{"op": "all_gather", "dim": 0, "axes": ["x"]}], "step 1: the plan does not end at the target type"),
    ([], "the empty plan: the plan does not end at the target type"),
    ([{"op": "dyn_slice", "dim": 0, "axes": ["y"]}, {"op": "all_permute", "target": "[3{x}6]"}],
     "step 2 (AllPermute([3{x}6])): the permute target has another global or local shape"),
])
def test_check_rejects_with_first_bad_step(tmp_path, steps, token):
    p = run("check", bad_plan(tmp_path, steps=steps))
    assert p.returncode == 1
    line = one_error_line(p)
    assert "rejected: " in line and token in line


@pytest.mark.parametrize("field, value", [
    ("peak", 2), ("types", ["[3{x}6]"]), ("received", [0, 0, 0]), ("traffic", 0), ("bound", 1),
    ("lower_bound", 0), ("local_sizes", [3, 1, 1, 1]),
])
def test_check_rejects_wrong_claims(tmp_path, field, value):
    code, _, err = main("check", bad_plan(tmp_path, **{field: value}))
    assert code == 1 and f"field '{field}' says" in one_error_line(err)


@pytest.mark.parametrize("text, token", [
    ("{", "is not valid JSON"),
    ("[1, 2]", "must hold a JSON object, not list"),
    ('{"mesh": NaN}', "JSON constant NaN"),
    ('{"mesh": "x=2", "src": "[2{x}4]", "dst": "[4]"}', "missing key 'steps'"),
    ('{"mesh": "x=2", "src": "[2{x}4]", "dst": "[4]", "steps": [], "extra": 1}', "unexpected key 'extra'"),
    ('{"schema": "other/9", "mesh": "x=2", "src": "[2{x}4]", "dst": "[4]", "steps": []}', "unknown schema"),
    ('{"mesh": "x=2", "src": "[2{z}4]", "dst": "[4]", "steps": []}', "unknown axis 'z'"),
    ('{"mesh": "x=2", "src": "[2{x}4]", "dst": "[4]", "steps": [{"op": "exec"}]}', "unknown collective op 'exec'"),
    ('{"mesh": "x=2", "src": "[2{x}4]", "dst": "[4]", "steps": [{"op": "all_gather", "dim": -1, "axes": ["x"]}]}',
     "dimension -1 of AllGather is negative"),
    ('{"mesh": 2, "src": "[2{x}4]", "dst": "[4]", "steps": []}', "must be strings"),
    ('{"mesh": "x=2", "src": "[2{x}4]", "dst": "[4]", "steps": [{"op": "all_gather", "dim": 1e400, "axes": []}]}',
     "not an integer"),
    ("[" * 100000, "nested too deeply"),
    ('{"a": ' + "9" * 5000 + "}", "not valid JSON"),
])
def test_check_bad_files(tmp_path, text, token):
    path = tmp_path / "p.json"
    path.write_text(text)
    code, _, err = main("check", str(path))
    assert code == 2, err
    line = one_error_line(err)
    assert token in line and str(path) in line


def test_check_missing_and_binary_files(tmp_path):
    code, _, err = main("check", str(tmp_path / "nope.json"))
    assert code == 2 and "No such file" in one_error_line(err)
    (tmp_path / "b.json").write_bytes(b"\xff\xfe\x00")
    code, _, err = main("check", str(tmp_path / "b.json"))
    assert code == 2 and "not UTF-8" in one_error_line(err)


# ---------------------------------------------------------------------------
# show


def test_show_text_and_pictures(tmp_path):
    png, svg = tmp_path / "plan.png", tmp_path / "plan.svg"
    p = run("show", "--mesh", "x=2,y=3", "--src", "[3{x}6]", "--dst", "[2{y}6]", "--picture", str(png))
    assert p.returncode == 0, p.stderr
    assert "step 0: source [3{x}6], local size 3" in p.stdout and "x=1  B 3..5" in p.stdout
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 5000
    n_steps = len(re.findall(r"^\s+\d+\s+\S", p.stdout.split("\n\n")[0], re.M)) - 1
    assert f"({n_steps + 1} panels)" in p.stdout
    p = run("show", str(WORKED), "--picture", str(svg))
    assert p.returncode == 0, p.stderr
    assert len(re.findall(r'id="panel-\d+"', svg.read_text())) == 4 and "(4 panels)" in p.stdout


def test_show_errors(tmp_path):
    code, _, err = main("show", str(WORKED), "--mesh", "x=2")
    assert code == 2 and "not both" in one_error_line(err)
    code, _, err = main("show", str(WORKED), "--picture", str(tmp_path / "p.jpg"))
    assert code == 2 and "must end in .png or .svg" in one_error_line(err)
    code, _, err = main("show", "--mesh", "x=128", "--src", "[128]", "--dst", "[128]", "--picture",
                        str(tmp_path / "p.png"))
    assert code == 2 and "at most 64" in one_error_line(err)


def test_show_prints_text_plans_of_any_size():
    code, out, err = main("show", "--mesh", "x=128", "--src", "[1{x}128]", "--dst", "[128]")
    assert code == 0 and "x=127" in out, err
    code, out, err = main("show", "--mesh", "x=8192", "--src", "[1{x}8192]", "--dst", "[8192]")
    assert code == 0 and "AllGather(0, x)" in out and "left out: 8192 devices" in out, err


def test_partial_placements_and_notation_hints():
    code, out, err = main("plan", "--mesh", "x=2,y=2", "--shape", "4,4", "--dtensor", "--src", "Partial(),Shard(0)",
                          "--dst", "Replicate(),Shard(1)")
    assert code == 0 and "[2{y}4, 4] partial{x}" in out, err
    for argv, hint in [(["--src", "P('x', None)", "--dst", "P(None, 'x')"], "add --jax"),
                       (["--src", "Shard(0)", "--dst", "Replicate()"], "add --dtensor"),
                       (["--shape", "4", "--jax", "--src", "[2{x}4]", "--dst", "[4]"], "drop --jax")]:
        code, _, err = main("plan", "--mesh", "x=2", *argv)
        assert code == 2 and hint in one_error_line(err)


# ---------------------------------------------------------------------------
# errors: one line, the offending token, exit code 2


ERRORS = [
    (["plan", "--mesh", "x=2,y=3", "--src", "[3{z}6]", "--dst", "[6]"], "unknown axis 'z' in --src; the mesh has x, y"),
    (["plan", "--mesh", "x=2,y=3", "--src", "[6]", "--dst", "[2{q}6]"], "unknown axis 'q' in --dst"),
    (["plan", "--mesh", "x=2,x=3", "--src", "[6]", "--dst", "[6]"], "duplicate axis 'x'"),
    (["plan", "--mesh", "x=2,y=3", "--src", "[1{x,x}6]", "--dst", "[6]"], "duplicate axis 'x'"),
    (["plan", "--mesh", "x=2,y=3", "--src", "[3{x}7]", "--dst", "[7]"], "does not match ceil(7 / 2) = 4"),
    (["plan", "--mesh", "x=2,y=3", "--src", "[3{x}6, 4]", "--dst", "[6]"], "global shapes differ"),
    (["plan", "--mesh", "x=2", "--src", "[3{x}6]", "--dst", "[8]"], "global shapes differ"),
    (["plan", "--mesh", "x=-2", "--src", "[6]", "--dst", "[6]"], "size -2 of axis 'x' must be at least 1"),
    (["plan", "--mesh", "x=2", "--src", "[3{x}-6]", "--dst", "[6]"], "global size -6"),
    (["plan", "--mesh", "x=2", "--src", "[3{x}" + "6" * 40 + "]", "--dst", "[6]"], "too large"),
    (["plan", "--mesh", "x=2000,y=3000", "--src", "[6]", "--dst", "[6]"], "more than 2**20 devices"),
    (["plan", "--mesh", "x=2", "--src", "[1048576, 1048576, 1048576]", "--dst", "[1, 1, 1]"], "more than 2**50"),
    (["plan", "--mesh", "x=2", "--src", "[3{x}6", "--dst", "[6]"], "end of text"),
    (["plan", "--mesh", "x=2", "--src", "[2{x}4]", "--dst", "[4] ; rm -rf /"], "';'"),
    (["plan", "--mesh", "x=2", "--src", "[3{x}6]"], "missing --dst"),
    (["plan", "--mesh", "x=2", "--jax", "--src", "P('x')", "--dst", "P()"], "--jax needs --shape"),
    (["plan", "--mesh", "x=2", "--jax", "--dtensor", "--shape", "4", "--src", "P()", "--dst", "P()"],
     "not allowed with argument"),
    (["plan", "--mesh", "x=2", "--jax", "--shape", "4", "--src", "P('x', 'x')", "--dst", "P()"],
     "has 2 entries but the array has rank 1"),
    (["plan", "--mesh", "x=2", "--jax", "--shape", "4", "--src", "P('x'", "--dst", "P()"], "--src"),
    (["plan", "--mesh", "x=2", "--jax", "--shape", "4", "--src", "P(P.UNCONSTRAINED)", "--dst", "P()"],
     "unconstrained dimensions are not a sharding"),
    (["plan", "--mesh", "x=2", "--jax", "--shape", "4", "--src", "P('y')", "--dst", "P()"], "unknown axis 'y' in --src"),
    (["plan", "--mesh", "x=2,y=2", "--dtensor", "--shape", "4", "--src", "Shard(0)", "--dst", "Replicate(),Replicate()"],
     "1 placements [Shard(0)] for a mesh with 2 axes"),
    (["plan", "--mesh", "x=2", "--dtensor", "--shape", "4", "--src", "Partial('avg')", "--dst", "Replicate()"],
     "Partial reduction 'avg'"),
    (["plan", "--mesh", "x=2", "--dtensor", "--shape", "4", "--src", "Shard(3)", "--dst", "Replicate()"],
     "Shard(3) on mesh axis 'x'"),
    (["plan", "--mesh", "x=2", "--shape", "4,0", "--jax", "--src", "P()", "--dst", "P()"], "size '0' in shape"),
    (["plan", "--mesh", "x=2", "--shape", "4,a", "--jax", "--src", "P()", "--dst", "P()"], "size in shape '4,a': 'a' is not an integer"),
    (["plan", "--mesh", "x=2", "--src", "[4]", "--dst", "[4]", "--format", "xml"], "invalid choice: 'xml'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    ([], "required"),
    (["check"], "required: file"),
    (["plan", "--mesh", "x=2", "--src", "[4]", "--dst", "[4]", "--bogus"], "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("args, token", ERRORS)
def test_errors_in_process(args, token):
    code, out, err = main(*args)
    assert code == 2, (out, err)
    assert token in one_error_line(err)


@pytest.mark.parametrize("args, token", [ERRORS[0], ERRORS[5], ERRORS[27]])
def test_errors_through_the_script(args, token):
    p = run(*args)
    assert p.returncode == 2 and p.stdout == ""
    assert token in one_error_line(p)


def test_debug_shows_traceback():
    p = run("plan", "--debug", "--mesh", "x=2", "--src", "[3{z}6]", "--dst", "[6]")
    assert p.returncode == 2
    assert "Traceback" in p.stderr and p.stderr.strip().splitlines()[-1].startswith("verishard: error: unknown axis")
    code, _, err = main("--debug", "plan", "--mesh", "x=2", "--src", "[3{z}6]", "--dst", "[6]")
    assert code == 2 and "Traceback" in err


def test_internal_errors_are_one_line(monkeypatch):
    monkeypatch.setattr(cli.plan, "cmd_plan", lambda args, out: 1 / 0)
    code, _, err = main("plan", "--mesh", "x=2", "--src", "[4]", "--dst", "[4]")
    assert code == 3 and "internal error: ZeroDivisionError" in one_error_line(err)


def test_help():
    code, out, _ = main("plan", "--help")
    assert code == 0 and "--jax" in out and "--dtensor" in out


# ---------------------------------------------------------------------------
# demo


def test_demo_without_mpi():
    p = run("demo", "--no-mpi")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    out = p.stdout
    cases = re.findall(r"^== \d+\. (.*)$", out, re.M)
    assert len(cases) >= 12
    assert any("[3{x}6] -> [2{y}6]" in c and "{x:2, y:3}" in c for c in cases)
    assert any("[2{x}4] -> [1{y}4]" in c and "{x:2, y:4}" in c for c in cases)
    for word in ("transpose", "all-to-all", "splitting an axis", "replicate to shard", "shard to replicate",
                 "multi-dimensional"):
        assert any(word in c for c in cases), word
    assert out.count("step  collective") >= 12                        # a table per case
    assert out.count("checked: the verified checker accepts it again") == len(cases)
    assert "FAILED" not in out


@pytest.fixture
def fake_runtime(monkeypatch):
    """Install a fake ``verishard.runtime`` whose ``run_mpi_demo`` does what the test says."""
    calls = []

    def install(behaviour):
        mod = types.ModuleType("verishard.runtime")

        def run_mpi_demo(nranks=8):
            calls.append(nranks)
            return behaviour()

        mod.run_mpi_demo = run_mpi_demo
        monkeypatch.setitem(sys.modules, "verishard.runtime", mod)
        monkeypatch.setattr(cli.demo, "_mpi_missing", lambda: None)   # as if mpi4py and mpirun were installed
        return calls

    return install


def test_demo_runs_the_mpi_demo(fake_runtime):
    calls = fake_runtime(lambda: 0)
    code, out, _ = main("demo")
    assert code == 0 and calls == [8] and "MPI demo: ok" in out


def test_demo_propagates_mpi_failure(fake_runtime):
    calls = fake_runtime(lambda: 5)
    code, out, _ = main("demo", "--nranks", "4")
    assert code == 1 and calls == [4] and "MPI demo FAILED: exit code 5" in out


def test_demo_reports_mpi_exception(fake_runtime):
    def boom():
        raise RuntimeError("mpirun not found")

    fake_runtime(boom)
    code, out, _ = main("demo")
    assert code == 1 and "MPI demo FAILED: RuntimeError: mpirun not found" in out


def test_demo_fails_when_a_case_fails(monkeypatch):
    monkeypatch.setattr(cli.demo, "DEMO_CASES", cli.DEMO_CASES[:1] + (("broken", "x=2", "[2{x}4]", "[3]", "bad"),))
    code, out, _ = main("demo", "--no-mpi")
    assert code == 1 and "FAILED: global shapes differ" in out and "1 FAILED" in out


# ---------------------------------------------------------------------------
# packaging and output edges


def without(tmp_path: Path, *names: str) -> dict[str, str]:
    """An environment in which importing each of ``names`` fails as it does
    when the package is not installed (a shim package first on PYTHONPATH
    raising ModuleNotFoundError), for the CLI and every process it starts."""
    shim = tmp_path / "shim"
    for name in names:
        (shim / name).mkdir(parents=True)
        (shim / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim), str(ROOT / "python")]))


def run_in(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verishard.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.mark.parametrize("args, package, extra", [
    (["show", "--mesh", "x=2", "--src", "[2{x}4]", "--dst", "[4]", "--picture", "PIC.png"], "matplotlib", "picture"),
    (["partition", "tiny-resnet", "--platform", "cpu+2gpu"], "networkx", "partition"),
    (["partition", "tiny-resnet", "--platform", "cpu+2gpu"], "scipy", "partition"),
    (["partition", "tiny-resnet", "--platform", "cpu+2gpu"], "torch", "partition"),
    (["plan", "--mesh", "x=2,y=2", "--shape", "5,4", "--dtensor", "--src", "Shard(0),Shard(0)",
      "--dst", "Replicate(),Replicate()"], "torch", "torch"),
])
def test_missing_optional_package_is_exit_2_naming_the_extra(tmp_path, args, package, extra):
    args = [a.replace("PIC.png", str(tmp_path / "p.png")) for a in args]
    p = run_in(without(tmp_path, package), *args)
    line = one_error_line(p)
    assert p.returncode == 2, p.stderr
    assert f"needs {package}, which is not installed: pip install 'verishard[{extra}]'" in line
    assert not (tmp_path / "p.png").exists()


def test_missing_package_in_process(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # what `import matplotlib` meets when it is absent
    code, out, err = main("show", "--mesh", "x=2", "--src", "[2{x}4]", "--dst", "[4]", "--picture",
                          str(tmp_path / "p.svg"))
    assert code == 2 and out == "" and "pip install 'verishard[picture]'" in one_error_line(err)


def test_a_missing_module_of_verishard_itself_is_still_internal(monkeypatch):
    def broken(args, out):
        raise ModuleNotFoundError("No module named 'verishard.nothing'", name="verishard.nothing")
    monkeypatch.setattr(cli.plan, "cmd_plan", broken)
    code, _, err = main("plan", "--mesh", "x=2", "--src", "[2{x}4]", "--dst", "[4]")
    assert code == 3 and "internal error" in one_error_line(err)


def test_demo_runs_what_is_installed_and_says_what_it_skipped(tmp_path):
    p = run_in(without(tmp_path, "mpi4py"), "demo")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    assert "MPI demo: skipped: mpi4py is not installed (pip install 'verishard[mpi]')" in p.stdout
    assert "Traceback" not in p.stdout + p.stderr and "No module named" not in p.stdout + p.stderr
    assert "13 of 13 redistributions planned and checked" in p.stdout


def test_demo_without_mpirun_skips_it(monkeypatch):
    monkeypatch.setattr(cli.demo.shutil, "which", lambda name: None)
    code, out, _ = main("demo")
    assert code == 0 and "MPI demo: skipped: mpirun is not on PATH" in out


def test_demo_nranks_is_capped_at_what_the_machine_runs():
    cap = cli.demo_rank_cap()
    assert cap == max(8, (os.cpu_count() or 1) * 4)
    p = run("demo", "--nranks", "1048576")
    line = one_error_line(p)
    assert p.returncode == 2 and p.stdout == ""
    assert f"--nranks 1048576 is more than this machine runs: at most {cap}" in line
    assert "verishard.limits.DEMO_RANKS_PER_CPU" in line


def test_version():
    import verishard
    p = run("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"verishard {verishard.__version__}" and p.stderr == ""


PLAN_ARGS = ("plan", "--mesh", "x=2,y=3", "--src", "[3{x}6]", "--dst", "[2{y}6]")


def test_closed_stdout_exits_1_quietly():
    cmd = [sys.executable, "-m", "verishard.cli", *PLAN_ARGS]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    p = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *cmd], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 1
    assert one_error_line(p) == "verishard: error: standard output is closed; nothing was written"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_unwritable_stdout_exits_1_quietly():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "verishard.cli", *PLAN_ARGS], stdout=full, stderr=subprocess.PIPE,
                           text=True, env=env, timeout=120)
    assert p.returncode == 1
    assert "cannot write to standard output" in one_error_line(p.stderr)


# ---------------------------------------------------------------------------
# fuzzing: no input makes the CLI crash


TYPE_ALPHABET = st.sampled_from(["[", "]", "{", "}", ",", "x", "y", "z", "y.0", "2", "3", "6", "-1", " ", "0",
                                 "P(", "'x'", "None", ")", "Shard(0)", "Replicate()", "9" * 31])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from([[], ["--jax", "--shape", "6"], ["--dtensor", "--shape", "6,6"]]),
       mesh=st.one_of(st.sampled_from(["x=2,y=3", "x=2*3", "{x:2}", "x=0"]), st.text(max_size=12)),
       src=st.one_of(st.text(max_size=20), st.lists(TYPE_ALPHABET, max_size=10).map("".join)),
       dst=st.sampled_from(["[6]", "[2{y}6]", "P()", "Replicate(),Replicate()"]))
def test_fuzz_cli_plan(mode, mesh, src, dst):
    code, out, err = main("plan", "--mesh", mesh, "--src", src, "--dst", dst, *mode)
    assert code in (0, 2), err
    if code == 2:
        one_error_line(err)


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 10), st.text(max_size=8),
              st.sampled_from(["x", "y", "[3{x}6]", "[1{x,y}6]", "[2{y}6]", "all_gather", "dyn_slice",
                               "all_to_all", "all_permute"])),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.sampled_from(["op", "dim", "axes", "src_dim", "dst_dim",
                                                                "target"]), children, max_size=4)),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(steps=JSON_VALUES, extra=st.dictionaries(st.sampled_from(["peak", "types", "mesh", "src"]), JSON_VALUES,
                                                max_size=2))
def test_fuzz_plan_documents(steps, extra):
    doc = {"mesh": "x=2,y=3", "src": "[3{x}6]", "dst": "[2{y}6]", "steps": steps} | extra
    try:
        cli.check_document(cli.document.parse_plan_text(json.dumps(doc)))
    except cli.VerishardError as e:
        assert "\n" not in str(e)


# ---------------------------------------------------------------------------
# documentation


def test_documented_keys_are_the_accepted_keys():
    page = (ROOT / "docs" / "plan.md").read_text()
    assert set(re.findall(r"^\| `(\w+)` \|", page, re.M)) == cli.document._KEYS


@pytest.mark.parametrize("page", ["types.md", "jax.md", "dtensor.md", "plan.md"])
def test_docs_examples_run(page, monkeypatch):
    import doctest

    monkeypatch.chdir(ROOT)
    result = doctest.testfile(str(ROOT / "docs" / page), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_cli_page_error_examples_are_current():
    page = (ROOT / "docs" / "cli.md").read_text()
    examples = re.findall(r"^    \$ verishard (plan .*)\n    (verishard: error: .*)$", page, re.M)
    assert len(examples) >= 3
    import shlex

    for command, expected in examples:
        code, _, err = main(*shlex.split(command))
        assert code == 2 and one_error_line(err) == expected
