"""Every integer crossing the bindings (module.cpp -> stubs.c -> glue.ml and
back) at full width: 2^31 + 1 (past a 32-bit int), 2^50 (the element cap)
and the documented caps, both directions. Inputs inside the caps reach the
core and come back unchanged where the answer echoes them; inputs past a cap
are refused with the cap's message; answers above 2^31 (a lower bound, a
block offset, a plan's peak and traffic) are not truncated.

The last test plants a 32-bit truncation in a copy of bindings/stubs.c,
builds that core (build/vscore.o, as `make core` leaves it) and expects the
other tests of this file to fail against it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verishard import ArrayType, Mesh, _core, core
from verishard.errors import LimitError

ROOT = Path(__file__).resolve().parent.parent
WIDE = 2**31 + 1
CAP_ELEMENTS = 2**50
CAP_DEVICES = 2**20
CORE_LIMIT = 2**62  # module.cpp: the binding takes [0, 2^62)


def _types(local: int, glob: int):
    m = Mesh.parse("x=2")
    return ArrayType.parse(f"[{local}{{x}}{glob}]", m), ArrayType.parse(f"[{glob}]", m)


@pytest.mark.parametrize("half", [WIDE, 2**49])
def test_lower_bound_above_2_31(half):
    # Each of 2 devices holds half and needs the whole: it lacks `half` elements.
    src, dst = _types(half, 2 * half)
    assert core.lower_bound(src, dst) == half
    assert core.ulower_bound(src, dst) == half


@pytest.mark.parametrize("half", [WIDE, 2**49])
def test_block_offsets_above_2_31(half):
    src, _ = _types(half, 2 * half)
    assert core.block_starts(src).tolist() == [[0], [half]]


@pytest.mark.parametrize("half", [WIDE, 2**49])
def test_plan_figures_above_2_31(half):
    src, dst = _types(half, 2 * half)
    for p in (core.plan(src.mesh, src, dst), core.eplan(src.mesh, src, dst)):
        assert p.peak == 2 * half and sum(p.received) == half, (p.peak, p.received)
        assert p.types[-1] == dst


def test_check_report_above_2_31():
    src, dst = _types(WIDE, 2 * WIDE)
    plan = core.plan(src.mesh, src, dst)
    ok = core.check(src.mesh, src, dst, list(plan.collectives))
    assert ok.peak == 2 * WIDE and ok.received == (WIDE,)


@pytest.mark.parametrize("value", [WIDE, CAP_ELEMENTS - 3])
def test_box_starts_and_ranks_echo(value):
    # bplan answers with each piece's sending rank and box: the inputs, back.
    src = [(value, ((value, 3),))]
    dst = [(7, ((value, 3),))]
    pieces, rounds = core.bplan(src, dst, CAP_ELEMENTS)
    assert [(p.src, p.box) for p in pieces[0]] == [(value, ((value, 3),))]
    assert [[(c.src, c.dst, c.box) for c in rd] for rd in rounds] == [[(value, 7, ((value, 3),))]]


def test_cross_mesh_ranks_echo():
    s = ArrayType.parse("[3{x}6]", Mesh.parse("x=2"))
    d = ArrayType.parse("[2{u}6]", Mesh.parse("u=3"))
    ranks = [WIDE + i for i in range(5)]
    sched = core.xplan(s, ranks[:2], d, ranks[2:])
    assert {p.src for ps in sched for p in ps} == set(ranks[:2])
    rounds = core.xrounds(s, ranks[:2], d, ranks[2:], CAP_ELEMENTS)
    assert {(c.src, c.dst) for rd in rounds for c in rd} <= {(a, b) for a in ranks[:2] for b in ranks[2:]}


def test_per_rank_entries_echo_wide_ranks_boxes_and_rotations():
    # wplan and xrank answer with world ranks, global boxes and cuts: the inputs, back, at full width.
    half = CAP_ELEMENTS // 2
    s = ArrayType.parse(f"[{half}{{x}}{CAP_ELEMENTS}]", Mesh.parse("x=2"))
    d = ArrayType.parse(f"[{CAP_ELEMENTS}]", Mesh.parse("u=1"))
    ranks = [WIDE + i for i in range(3)]
    for start in (0, WIDE, CAP_ELEMENTS - 1):
        world = core.wplan(s, ranks[:2], d, ranks[2:], start)
        assert [[(p.src, p.box) for p in ps] for ps in world] == [[(ranks[0], ((0, half),)), (ranks[1], ((half, half),))]]
        part = core.xrank(s, ranks[:2], d, ranks[2:], start, 0, None, CAP_ELEMENTS)
        assert [(p.src, p.box, cuts) for p, cuts in part.recv] == [
            (ranks[0], ((0, half),), (((0, half),),)), (ranks[1], ((half, half),), (((half, half),),))]
        part = core.xrank(s, ranks[:2], d, ranks[2:], start, None, 1, WIDE)
        assert [(j, r, p.box) for j, r, p, _ in part.send] == [(0, ranks[2], ((half, half),))]
        assert part.send[0][3][0] == ((half, WIDE),) and sum(c[0][1] for c in part.send[0][3]) == half
    with pytest.raises(LimitError, match="rotation outside 0..2\\^50"):   # the glue's, behind Python's
        core._call(_core.wplan, core._xplan_ints(s, ranks[:2], d, ranks[2:]) + [CAP_ELEMENTS + 1])
    with pytest.raises(LimitError, match="budget of more than 2\\^50"):
        core._call(_core.xrank, [CAP_ELEMENTS + 1] + core._xplan_ints(s, ranks[:2], d, ranks[2:]) + [0, 1, 0])
    with pytest.raises(LimitError, match="device index past 2\\^20"):
        core._call(_core.xrank, [1] + core._xplan_ints(s, ranks[:2], d, ranks[2:]) + [0, CAP_DEVICES + 2, 0])


def test_element_cap():
    m = Mesh.parse("x=2")
    ok = ArrayType.parse(f"[{CAP_ELEMENTS // 2}{{x}}{CAP_ELEMENTS}]", m)
    assert core.lower_bound(ok, ArrayType.parse(f"[{CAP_ELEMENTS}]", m)) == CAP_ELEMENTS // 2
    # Past the cap: the glue's refusal, behind the Python layer's (raw ints).
    big = CAP_ELEMENTS + 2
    raw = m.encode() + [1, big, 1, 0] + [1, big, 0]
    with pytest.raises(LimitError, match="more than 2\\^50 elements"):
        core._call(_core.lower_bound, raw)


def test_device_cap():
    # A mesh of 2^20 devices is taken; one more device is refused, before the core runs.
    raw_ok = [2, 1024, 1024] + [1, 4, 0] + [1, 4, 0]
    assert core._call(_core.lower_bound, raw_ok) == (0,)
    for mesh in ([1, CAP_DEVICES + 1], [2, 1025, 1024], [2, 2**40, 2**40]):
        with pytest.raises(LimitError, match="more than 2\\^20 devices"):
            core._call(_core.lower_bound, mesh + [1, 4, 0] + [1, 4, 0])


def test_budget_and_index_caps():
    box = [(0, ((0, 3),))]
    core.bplan(box, box, CAP_ELEMENTS)
    with pytest.raises(LimitError, match="budget of more than 2\\^50"):
        core.bplan(box, box, CAP_ELEMENTS + 1)
    with pytest.raises(LimitError, match="index past 2\\^50"):
        core.bplan([(0, ((CAP_ELEMENTS + 1, 3),))], box, 10)


@pytest.mark.parametrize("value", [WIDE, CAP_ELEMENTS, CORE_LIMIT - 1])
def test_binding_takes_every_int_below_2_62(value):
    # The binding passes it on: the glue's own refusal (a cap), not the binding's.
    with pytest.raises(ValueError) as e:
        _core.lower_bound([1, value, 1, value, 0, 1, value, 0])
    assert "out of range" not in str(e.value) and "bad input to the verified core" in str(e.value)


@pytest.mark.parametrize("value", [CORE_LIMIT, 2**63, 2**64 + WIDE, -1, -WIDE])
def test_binding_refuses_ints_outside_0_2_62(value):
    with pytest.raises(ValueError, match="out of range for the verified core"):
        _core.lower_bound([1, 2, 1, value, 0, 1, 4, 0])


def _plant_truncation(tmp: Path) -> Path:
    """A copy of python/verishard whose _core is linked from a stubs.c that
    keeps 32 bits of every integer, each way."""
    vscore = ROOT / "build" / "vscore.o"
    if not vscore.exists() or shutil.which("g++") is None:
        pytest.skip("build/vscore.o is not built (make core)")
    stubs = (ROOT / "bindings" / "stubs.c").read_text()
    inp, out = "Val_long(in[i])", "buf[i] = Long_val(Field(res, i));"
    assert inp in stubs and out in stubs
    stubs = stubs.replace(inp, "Val_long((int)in[i])").replace(out, "buf[i] = (int)Long_val(Field(res, i));")
    (tmp / "stubs.c").write_text(stubs)
    pkg = tmp / "python"
    shutil.copytree(ROOT / "python" / "verishard", pkg / "verishard",
                    ignore=shutil.ignore_patterns("_core*.so", "__pycache__"))
    so = pkg / "verishard" / Path(_core.__file__).name
    caml = subprocess.run(["ocamlfind", "ocamlc", "-where"], capture_output=True, text=True, check=True).stdout.strip()
    includes = subprocess.run([sys.executable, "-m", "pybind11", "--includes"], capture_output=True, text=True,
                              check=True).stdout.split()
    subprocess.run(["gcc", "-O0", "-fPIC", "-c", str(tmp / "stubs.c"), f"-I{caml}", f"-I{ROOT / 'bindings'}",
                    "-o", str(tmp / "stubs.o")], check=True, timeout=120)
    subprocess.run(["g++", "-O0", "-fPIC", "-shared", "-std=c++17", str(ROOT / "bindings" / "module.cpp"),
                    str(tmp / "stubs.o"), str(vscore), *includes, f"-I{ROOT / 'bindings'}", "-lm", "-ldl",
                    "-o", str(so)], check=True, timeout=300)
    return pkg


def test_truncating_glue_is_caught(tmp_path):
    pkg = _plant_truncation(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(pkg))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
                          "-k", "not truncating"], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    out = run.stdout + run.stderr
    assert str(pkg) in subprocess.run([sys.executable, "-c", "import verishard; print(verishard.__file__)"],
                                      capture_output=True, text=True, env=env).stdout
    assert run.returncode != 0, out
    for name in ("test_lower_bound_above_2_31", "test_block_offsets_above_2_31", "test_box_starts_and_ranks_echo"):
        assert f"FAILED {Path(__file__).name}::{name}" in out or f"{name}[" in out, out[-3000:]
