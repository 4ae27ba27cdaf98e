"""HLO reading and interpretation, and observed data movement -> our IR (no JAX needed)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from verishard import AllGather, AllPermute, AllToAll, ArrayType, DynSlice, Mesh
from verishard.crosscheck import PlannerResult, harness
from verishard.crosscheck.hlo import HloError, Interpreter, parse_module, parse_replica_groups
from verishard.crosscheck.result import judge
from verishard.crosscheck.trace import (Event, NotExpressible, global_values, held_sets, infer_type,
                                        local_arrays, translate)

# ---------------------------------------------------------------------------
# replica groups


@pytest.mark.parametrize("text, groups", [
    ("{{0,1},{2,3}}", [[0, 1], [2, 3]]),
    ("{}", [[0, 1, 2, 3]]),
    ("[2,2]<=[4]", [[0, 1], [2, 3]]),
    ("[2,2]<=[2,2]T(1,0)", [[0, 2], [1, 3]]),
    ("mesh['a'=2,'b'=2] {'b'}", [[0, 1], [2, 3]]),
    ("mesh['a'=2,'b'=2] {'a'}", [[0, 2], [1, 3]]),
    ("mesh['a'=2,'b'=2] {'b','a'}", [[0, 2, 1, 3]]),
    ("mesh['a'=2,'b'=2], device_ids=([2,2]T(1,0)) {'b'}", [[0, 2], [1, 3]]),
    ("mesh['a'=4] {'a':(1)2}", [[0, 2], [1, 3]]),
    ("mesh['a'=4] {'a':(2)2}", [[0, 1], [2, 3]]),
])
def test_replica_groups(text, groups):
    assert parse_replica_groups(text, 4) == groups


def test_replica_groups_match_xla_mesh_layout():
    # mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] over devices [4,2]T(1,0), grouped over axis_2:
    # the device list is [0,2,4,6,1,3,5,7]; groups are its rows of 4.
    text = "mesh['axis_0'=2,'axis_1'=1,'axis_2'=4], device_ids=([4,2]T(1,0)) {'axis_2'}"
    assert parse_replica_groups(text, 8) == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_unknown_group_format_is_an_hlo_error():
    with pytest.raises(HloError):
        parse_replica_groups("banana", 4)


# ---------------------------------------------------------------------------
# interpreter

TUPLE_A2A = """HloModule m, num_partitions=2
%piece0 (p: f32[4]) -> f32[2] {
  %p = f32[4]{0} parameter(0)
  ROOT %s = f32[2]{0} slice(%p), slice={[0:2]}
}
%piece1 (p.1: f32[4]) -> f32[2] {
  %p.1 = f32[4]{0} parameter(0)
  ROOT %s.1 = f32[2]{0} slice(%p.1), slice={[2:4]}
}
%cat (a: f32[2], b: f32[2]) -> f32[2,2] {
  %a = f32[2]{0} parameter(0)
  %b = f32[2]{0} parameter(1)
  %ra = f32[1,2]{1,0} reshape(%a)
  %rb = f32[1,2]{1,0} reshape(%b)
  ROOT %c = f32[2,2]{1,0} concatenate(%ra, %rb), dimensions={0}
}
ENTRY %main (x: f32[4]) -> f32[2,2] {
  %x = f32[4]{0} parameter(0)
  %f0 = f32[2]{0} fusion(%x), kind=kLoop, calls=%piece0
  %f1 = f32[2]{0} fusion(%x), kind=kLoop, calls=%piece1
  %a2a = (f32[2]{0}, f32[2]{0}) all-to-all(%f0, %f1), channel_id=1, replica_groups={{0,1}}
  %g0 = f32[2]{0} get-tuple-element(%a2a), index=0
  %g1 = f32[2]{0} get-tuple-element(%a2a), index=1
  ROOT %out = f32[2,2]{1,0} fusion(%g0, %g1), kind=kLoop, calls=%cat
}
"""


def test_tuple_all_to_all():
    run = Interpreter(parse_module(TUPLE_A2A)).run([[np.array([1, 2, 3, 4]), np.array([5, 6, 7, 8])]])
    assert run.outputs[0].tolist() == [[1, 2], [5, 6]]
    assert run.outputs[1].tolist() == [[3, 4], [7, 8]]
    ev = run.collectives[0]
    assert ev.opcode == "all-to-all" and ev.received.tolist() == [2, 2]


PERMUTE_SLICE = """HloModule m, num_partitions=4
%ds (p: f32[4,2], i: u32[]) -> f32[2,2] {
  %p = f32[4,2]{1,0} parameter(0)
  %i = u32[] parameter(1)
  %t = u32[4]{0} constant({0, 2, 2, 9})
  %o = u32[1]{0} dynamic-slice(%t, %i), dynamic_slice_sizes={1}
  %z = s32[] constant(0)
  %r = u32[] reshape(%o)
  %c = s32[] convert(%r)
  ROOT %d = f32[2,2]{1,0} dynamic-slice(%p, %c, %z), dynamic_slice_sizes={2,2}
}
ENTRY %main (x: f32[4,2]) -> f32[2,2] {
  %pid = u32[] partition-id()
  %x = f32[4,2]{1,0} parameter(0)
  %cp = f32[4,2]{1,0} collective-permute(%x), channel_id=1, source_target_pairs={{0,1},{1,0},{2,2}}
  ROOT %f = f32[2,2]{1,0} fusion(%cp, %pid), kind=kLoop, calls=%ds
}
"""


def test_collective_permute_zero_fill_and_clamped_dynamic_slice():
    xs = [np.full((4, 2), r + 1) for r in range(4)]
    run = Interpreter(parse_module(PERMUTE_SLICE)).run([xs])
    assert run.outputs[0].tolist() == [[2, 2], [2, 2]]       # from device 1, offset 0
    assert run.outputs[3].tolist() == [[0, 0], [0, 0]]       # nobody sends to 3: zeros; offset 9 clamped to 2
    assert run.collectives[0].received.tolist() == [8, 8, 0, 0]


def test_bitcast_follows_layouts():
    text = """HloModule m, num_partitions=1
ENTRY %main (x: f32[2,3]) -> f32[3,2] {
  %x = f32[2,3]{0,1} parameter(0)
  ROOT %b = f32[3,2]{1,0} bitcast(%x)
}
"""
    x = np.arange(6).reshape(2, 3)
    out = Interpreter(parse_module(text)).run([[x]]).outputs[0]
    assert out.tolist() == x.T.tolist()  # column-major [2,3] reinterpreted as row-major [3,2]


def test_unsupported_op_is_reported():
    text = """HloModule m, num_partitions=1
ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  ROOT %s = f32[4]{0} sort(%x), dimensions={0}
}
"""
    with pytest.raises(HloError, match="sort"):
        Interpreter(parse_module(text)).run([[np.arange(4)]])


# ---------------------------------------------------------------------------
# types from held sets

MESHES = ["x=2,y=3", "x=2,y=2,z=2", "x=4,y=2", "x=2,y=2*2", "x=8"]


@pytest.mark.parametrize("mesh_text", MESHES)
def test_infer_type_recovers_every_type(mesh_text):
    mesh = Mesh.parse(mesh_text)
    shape = (12, 8) if "3" in mesh_text else (8, 16)
    for t in harness.all_types(mesh, shape):
        sets = held_sets(local_arrays(t, global_values(shape)))
        assert infer_type(mesh, shape, sets) == t.refined()


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_infer_type_refuses_non_blocks(data):
    mesh = Mesh.parse("x=2,y=2")
    G = global_values((4, 4))
    sets = [np.array(sorted(data.draw(st.sets(st.integers(1, 16), min_size=1, max_size=16))), dtype=np.int64)
            for _ in range(4)]
    try:
        t = infer_type(mesh, (4, 4), sets)
    except NotExpressible:
        return
    want = held_sets(local_arrays(t, G))
    assert all(np.array_equal(a, b) for a, b in zip(sets, want))


def test_translate_gather_slice_and_permute():
    mesh = Mesh.parse("x=2,y=3")
    P = lambda s: ArrayType.parse(s, mesh)  # noqa: E731
    src, mid, dst = P("[3{x}6]"), P("[1{x,y}6]"), P("[1{y,x}6]")
    G = global_values((6,))
    sets = lambda t: held_sets(local_arrays(t, G))  # noqa: E731
    events = [Event("local", sets(mid)), Event("collective-permute", sets(dst), sets(mid)),
              Event("all-gather", sets(P("[2{y}6]")))]
    out = translate(mesh, src, events, sets(P("[2{y}6]")))
    assert [str(c) for c in out] == ["DynSlice(0, y)", "AllPermute([1{y,x}6])", "AllGather(0, x)"]


def test_translate_refuses_a_reduction_and_reused_data():
    mesh = Mesh.parse("x=2")
    t = ArrayType.parse("[2{x}4]", mesh)
    G = global_values((4,))
    full = held_sets([G, G])
    with pytest.raises(NotExpressible, match="all-reduce"):
        translate(mesh, t, [Event("all-reduce", full)], full)
    with pytest.raises(NotExpressible, match="does not hold"):
        translate(mesh, t, [Event("all-gather", full, pre=full)], full)


# ---------------------------------------------------------------------------
# judging


def test_judge_valid_plan_goes_through_the_checker():
    mesh = Mesh.parse("x=2,y=2")
    src, dst = ArrayType.parse("[2{x}4, 4]", mesh), ArrayType.parse("[4, 2{x}4]", mesh)
    G = global_values((4, 4))
    final = local_arrays(dst, G)
    r = judge("t", mesh, src, dst, [Event("all-to-all", held_sets(final))], final)
    assert r.valid and [str(c) for c in r.plan.collectives] == ["AllToAll(0->1, x)"]


def test_judge_reports_wrong_data():
    mesh = Mesh.parse("x=2,y=2")
    src, dst = ArrayType.parse("[2{x}4, 4]", mesh), ArrayType.parse("[4, 2{y}4]", mesh)
    G = global_values((4, 4))
    wrong = local_arrays(ArrayType.parse("[4, 2{x}4]", mesh), G)  # moved, but along the wrong axis
    r = judge("t", mesh, src, dst, [Event("all-to-all", held_sets(wrong))], wrong)
    assert r.status == "wrong_data" and r.plan is None and not r.valid
    # right elements, wrong local order: transposed local blocks
    right = local_arrays(dst, G)
    flipped = [np.ascontiguousarray(a[::-1]) for a in right]
    r = judge("t", mesh, src, dst, [Event("all-to-all", held_sets(right))], flipped)
    assert r.status == "wrong_data" and not r.valid


def test_valid_needs_a_checked_plan():
    with pytest.raises(ValueError):
        PlannerResult("t", "valid")
    with pytest.raises(ValueError):
        PlannerResult("t", "fine")


def test_valid_result_rechecks_a_tampered_plan():
    import dataclasses

    from verishard import PlanError, check
    mesh = Mesh.parse("x=2")
    p = check(mesh, "[2{x}4]", "[4]", [AllGather(0, "x")])
    bad = dataclasses.replace(p, peak=1)
    with pytest.raises(PlanError):
        PlannerResult("t", "valid", plan=bad)


def test_collectives_are_importable():
    assert {AllGather, AllPermute, AllToAll, DynSlice}
