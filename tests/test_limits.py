"""Every integer that crosses the binding is range-checked, with one clear error.

The Python objects check their integer fields when built (``verishard.limits``),
so a bad value never reaches the core; the binding itself refuses any integer
outside ``[0, 2**62)`` (where OCaml native ints stop agreeing with Coq's
naturals) with a ValueError, so even a direct ``_core`` call cannot smuggle
one in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import verishard as vs
from verishard import (AllGather, AllToAll, ArrayType, Collective, DimType, DynSlice, LimitError,
                       Mesh, Plan, PlanError, ShardingError, VerishardError, _core, core)
from verishard.errors import MeshError
from verishard.limits import check_int

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "verishard"

M = Mesh.parse("x=2")
SRC, DST = ArrayType.parse("[4]", M), ArrayType.parse("[2{x}4]", M)

# the three cases of the report: past the core's int range, past 64 bits, past a C long
HUGE = [2**62, 2**70, 2**63]


# ---------------------------------------------------------------------------
# Python API: the collectives refuse the value when built


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize("make, field, owner", [
    (lambda v: DynSlice(v, "x"), "dimension", "DynSlice"),
    (lambda v: AllGather(v, "x"), "dimension", "AllGather"),
    (lambda v: AllToAll(v, 0, "x"), "source dimension", "AllToAll"),
    (lambda v: AllToAll(0, v, "x"), "target dimension", "AllToAll"),
])
def test_collective_rejects_huge_dimension(make, field, owner, value):
    with pytest.raises(LimitError) as e:
        make(value)
    assert str(e.value) == f"{field} {value} of {owner} is too large (at most 2**50)"
    assert isinstance(e.value, ValueError) and not isinstance(e.value, TypeError)


def test_dynslice_2_63_is_a_limit_error_not_a_type_error():
    with pytest.raises(LimitError, match=r"^dimension 9223372036854775808 of DynSlice is too large"):
        vs.check(M, SRC, DST, [DynSlice(2**63, "x")])


@pytest.mark.parametrize("value, error, text", [
    (-1, PlanError, "dimension -1 of DynSlice is negative"),
    (-2**70, PlanError, "dimension -1180591620717411303424 of DynSlice is negative"),
    (True, PlanError, "dimension True of DynSlice is not an integer"),
    (1.0, PlanError, "dimension 1.0 of DynSlice is not an integer"),
    ("0", PlanError, "dimension '0' of DynSlice is not an integer"),
    (2**50 + 1, LimitError, "dimension 1125899906842625 of DynSlice is too large (at most 2**50)"),
])
def test_collective_dimension_errors(value, error, text):
    with pytest.raises(error) as e:
        DynSlice(value, "x")
    assert str(e.value) == text


def test_largest_dimension_reaches_the_checker():
    # 2**50 is allowed through; the verified checker then rejects it as a step
    with pytest.raises(PlanError) as e:
        vs.check(M, SRC, DST, [DynSlice(2**50, "x")])
    assert e.value.step == 1 and e.value.reason == "bad_dim"


def test_huge_number_message_stays_short():
    with pytest.raises(LimitError) as e:
        DynSlice(10**5000, "x")
    assert str(e.value) == "dimension ~2**16609 of DynSlice is too large (at most 2**50)"


@pytest.mark.parametrize("build, error, text", [
    (lambda: DimType(2**70), LimitError, "global size 1180591620717411303424 is too large (at most 2**50)"),
    (lambda: DimType(6, (2**62,)), LimitError, "part index 4611686018427387904 is too large (at most 2**50)"),
    (lambda: DimType(6, (-1,)), ShardingError, "part index -1 is negative"),
    (lambda: ArrayType(M, [(4, (2**63,))]), LimitError, "part index 9223372036854775808 is too large"),
    (lambda: Mesh([("x", 2**70)]), LimitError, "size 1180591620717411303424 of axis 'x' is too large (at most 2**20)"),
    (lambda: Mesh([("x", (2, 2**62))]), LimitError, "size 4611686018427387904 of axis 'x' is too large"),
    (lambda: Mesh([("x", 0)]), MeshError, "size 0 of axis 'x' must be at least 1"),
])
def test_types_and_meshes_reject_out_of_range_fields(build, error, text):
    with pytest.raises(error) as e:
        build()
    assert str(e.value).startswith(text)


@pytest.mark.parametrize("ints", [[1, 2**62, 1, 0], [0, 2**70, 1, 0], [2, 0, 2**63, 1, 0]])
def test_decode_rejects_huge_dimension(ints):
    with pytest.raises(LimitError, match="is too large"):
        Collective.decode(M, ints)


def test_check_int_is_the_one_helper():
    assert check_int(0, "dimension") == 0 and check_int(2**50, "dimension") == 2**50
    with pytest.raises(LimitError, match=r"^n 5 of it is too large \(at most 4\)$"):
        check_int(5, "n", "it", high=4)


def test_binding_backstop_reaches_the_user_as_limit_error():
    # An object forced past its own check (frozen dataclass, bypassed) still
    # cannot reach OCaml: the binding refuses, core turns it into LimitError.
    c = DynSlice(0, "x")
    object.__setattr__(c, "dim", 2**70)
    with pytest.raises(LimitError, match="out of range for the verified core"):
        core.check(M, SRC, DST, [c])


# ---------------------------------------------------------------------------
# JSON: Collective.from_json and Plan.from_json


def _doc(step: dict) -> dict:
    return {"mesh": "x=2", "src": "[4]", "dst": "[2{x}4]", "steps": [step]}


STEPS = [
    ({"op": "dyn_slice", "dim": None, "axes": ["x"]}, "dim", "dimension", "DynSlice"),
    ({"op": "all_gather", "dim": None, "axes": ["x"]}, "dim", "dimension", "AllGather"),
    ({"op": "all_to_all", "src_dim": None, "dst_dim": 0, "axes": ["x"]}, "src_dim", "source dimension", "AllToAll"),
    ({"op": "all_to_all", "src_dim": 0, "dst_dim": None, "axes": ["x"]}, "dst_dim", "target dimension", "AllToAll"),
]


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize("step, key, field, owner", STEPS)
def test_plan_from_json_rejects_huge_dimension(step, key, field, owner, value):
    step = dict(step, **{key: value})
    # through a JSON text, as a file would give it
    doc = json.loads(json.dumps(_doc(step)))
    with pytest.raises(LimitError) as e:
        Plan.from_json(doc)
    assert str(e.value) == f"in {step['op']} object: {field} {value} of {owner} is too large (at most 2**50)"
    with pytest.raises(LimitError):
        Collective.from_json(step, M)


# ---------------------------------------------------------------------------
# CLI: exit 2, one error line, no traceback


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    cmd = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "verishard.cli"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    return subprocess.run(cmd + list(args), capture_output=True, text=True, input=stdin, env=env, timeout=120)


@pytest.mark.parametrize("value", HUGE)
def test_cli_check_rejects_huge_dimension(tmp_path, value):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_doc({"op": "dyn_slice", "dim": value, "axes": ["x"]})))
    p = _run("check", str(path))
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0] == (f"verishard: error: {path}: in dyn_slice object: dimension {value} of DynSlice "
                        f"is too large (at most 2**50)")
    assert p.stdout == ""


def test_cli_check_huge_all_to_all_from_stdin():
    text = json.dumps(_doc({"op": "all_to_all", "src_dim": 0, "dst_dim": 2**70, "axes": ["x"]}))
    p = _run("check", "-", stdin=text)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "target dimension 1180591620717411303424 of AllToAll is too large" in lines[0]


# ---------------------------------------------------------------------------
# The binding itself


CORE_FUNCTIONS = ["check", "synthesize", "blocks", "permute", "movement"]


@pytest.mark.parametrize("fn", CORE_FUNCTIONS)
@pytest.mark.parametrize("value", [2**62, 2**70, -1, 2**63, -2**70])
def test_core_refuses_out_of_range_ints(fn, value):
    with pytest.raises(ValueError) as e:
        getattr(_core, fn)([value])
    assert type(e.value) is ValueError
    assert str(e.value).startswith(f"integer {value} out of range for the verified core")


def test_core_range_check_is_per_element():
    ok = M.encode() + SRC.encode() + DST.encode() + [1] + DynSlice(0, "x").encode(M)
    assert _core.check(ok)[0] == 0
    for i in range(len(ok)):
        bad = list(ok)
        bad[i] = 2**70
        with pytest.raises(ValueError, match=r"^integer 1180591620717411303424 out of range"):
            _core.check(bad)


def test_core_huge_int_message_is_short():
    with pytest.raises(ValueError) as e:
        _core.check([10**5000])
    msg = str(e.value)
    assert "out of range for the verified core" in msg and len(msg) < 120


def test_core_largest_int_passes_the_binding():
    # 2**62 - 1 is a valid OCaml int: the binding forwards it, the glue then
    # refuses the input as a mesh with too many devices
    with pytest.raises(ValueError) as e:
        _core.check([1, 2**62 - 1])
    assert "out of range" not in str(e.value) and "2^20 devices" in str(e.value)


# Products that wrap a 63-bit int: the glue's own guard must catch them
# even when every factor is in range (2^40 * 2^40 wraps to 0; 2 * 3 * h,
# h = (2^63 + 1) / 3, wraps to 2, the size of the axis the split claims to refine).
_WRAP = (2**63 + 1) // 3


def test_glue_refuses_element_products_that_wrap():
    wide = [2, 2**40, 0, 2**40, 0]   # [2^40, 2^40]: 2^80 elements
    for fn in ("check", "plan", "pplan", "lower_bound", "uplan"):
        ints = [1, 2] + ([0] + wide + [0] + wide if fn == "pplan" else wide + wide) + ([0] if fn == "check" else [])
        with pytest.raises(ValueError, match=r"^bad input to the verified core: more than 2\^50 elements$"):
            getattr(_core, fn)(ints)


def test_glue_refuses_a_split_whose_product_wraps():
    t = [1, 6, 0]
    assert (2 * 3 * _WRAP) % 2**63 == 2 and _WRAP < 2**62
    ok = [1, 2] + [1, 1, 2] + [100, 0] + t + t + [0]
    assert _core.certify(ok) == (1,)
    bad = [1, 2] + [1, 3, 2, 3, _WRAP] + [100, 0] + t + t + [0]
    with pytest.raises(ValueError, match=r"more than 2\^20 devices"):
        _core.certify(bad)


def test_glue_refuses_a_budget_beyond_the_bound():
    s = ArrayType.parse("[3{x}6]", Mesh.parse("x=2"))
    d = ArrayType.parse("[2{u}6]", Mesh.parse("u=3"))
    assert core.xrounds(s, [0, 1], d, [2, 3, 4], 2**50) is not None
    with pytest.raises(LimitError, match=r"budget of more than 2\^50 elements"):
        core.xrounds(s, [0, 1], d, [2, 3, 4], 2**50 + 1)


def test_core_accepts_any_integer_sequence():
    import numpy as np

    ints = M.encode() + SRC.encode()
    assert _core.blocks(tuple(ints)) == _core.blocks(ints) == _core.blocks(np.array(ints))
    with pytest.raises(TypeError):
        _core.blocks([1.5])
    with pytest.raises(TypeError):
        _core.blocks(5)


def test_errors_are_verishard_errors():
    for value in HUGE:
        with pytest.raises(VerishardError):
            DynSlice(value, "x")
