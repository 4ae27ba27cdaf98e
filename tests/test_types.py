"""The pure-Python type layer: Mesh, ArrayType, collectives and their errors."""

from __future__ import annotations

import os
import sys
from math import prod

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from verishard import (AllGather, AllPermute, AllToAll, ArrayType, Collective, DimType, DynSlice,
                       LimitError, Mesh, MeshError, ParseError, PlanError, ShardingError, VerishardError)

sys.path.insert(0, os.path.dirname(__file__))
import reference as ref  # noqa: E402
from verishard.runtime.layout import box  # noqa: E402

XY = Mesh.parse("x=2,y=3")
SPLIT = Mesh.parse("x=2,y=2*2")

# ---------------------------------------------------------------------------
# Mesh


def test_mesh_forms_are_equal():
    forms = ["x=2,y=3", "{x:2, y:3}", "{x: 2, y: 3}", " x = 2 , y = 3 ", "{x=2,y=3}"]
    meshes = {Mesh.parse(f) for f in forms}
    meshes.add(Mesh.from_dict({"x": 2, "y": 3}))
    meshes.add(Mesh([("x", 2), ("y", 3)]))
    meshes.add(Mesh((("x", (2,)), ("y", (3,)))))
    assert meshes == {XY}
    assert str(XY) == repr(XY) == "{x:2, y:3}"
    assert XY != Mesh.parse("y=3,x=2")


def test_mesh_properties():
    assert XY.axis_names == ("x", "y") and XY.axis_sizes == (2, 3) and XY.num_devices == 6
    assert XY.parts == (("x", 2), ("y", 3))
    assert XY.encode() == [2, 2, 3]
    assert str(SPLIT) == "{x:2, y:2*2}" and SPLIT == Mesh.parse("{x:2, y:2*2}")
    assert SPLIT.axis_sizes == (2, 4) and SPLIT.num_devices == 8
    assert SPLIT.parts == (("x", 2), ("y.0", 2), ("y.1", 2))
    assert SPLIT.encode() == [3, 2, 2, 2]
    assert SPLIT.resolve("y") == (1, 2) and SPLIT.resolve("y.1") == (2,) and SPLIT.resolve("x") == (0,)
    assert [SPLIT.part_name(i) for i in range(3)] == ["x", "y.0", "y.1"]
    assert SPLIT != Mesh.parse("x=2,y=4")


def test_refined():
    assert Mesh.parse("x=2,y=12").refined() == Mesh.parse("x=2,y=2*2*3")
    assert Mesh.parse("x=1,y=7").refined() == Mesh.parse("x=1,y=7")
    assert Mesh.parse("x=4,y=2*6").refined() == Mesh.parse("x=2*2,y=2*2*3")
    m = Mesh.parse("a=12,b=2*6")
    assert m.refinement() == ((0, 1, 2), (3,), (4, 5))


@pytest.mark.parametrize("text", ["x=2,y=3", "x=2,y=2*2", "a=3,b=1,c=2*3*1", "x=5"])
def test_coords_are_row_major(text):
    m = Mesh.parse(text)
    grid = np.arange(m.num_devices).reshape(m.axis_sizes)
    pgrid = np.arange(m.num_devices).reshape(m.part_sizes)
    for r in range(m.num_devices):
        assert grid[m.coords(r)] == r and m.rank(m.coords(r)) == r
        assert pgrid[m.part_coords(r)] == r


@pytest.mark.parametrize("text, error, token", [
    ("x=2,x=3", MeshError, "duplicate axis 'x'"),
    ("x=0", MeshError, "size 0 of axis 'x'"),
    ("x=-2", MeshError, "-2"),
    ("x=2.5", ParseError, "'2.5'"),
    ("x=a", ParseError, "'a'"),
    ("x=2*", ParseError, "''"),
    ("x=2*0", MeshError, "size 0"),
    ("", MeshError, "empty mesh"),
    ("{}", MeshError, "empty mesh"),
    ("{ }", MeshError, "empty mesh"),
    ("x=1048576,y=2", LimitError, "2**20"),
    ("x=1024*1024*2", LimitError, "2**20"),
    ("x=" + "9" * 40, LimitError, "999999"),
    ("1x=2", ParseError, "'1x'"),
    ("y.0=2", ParseError, "'y.0'"),
    ("{x:2", ParseError, "'{x:2'"),
    ("x:2}", ParseError, "'x:2}'"),
    ("x=2,", ParseError, "empty entry"),
    ("x", ParseError, "'x'"),
    ("x=\u0663", ParseError, "'\u0663'"),   # non-ASCII digit
    ("x=1_0", ParseError, "'1_0'"),
])
def test_bad_meshes(text, error, token):
    with pytest.raises(error) as e:
        Mesh.parse(text)
    assert token in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("axes, error, token", [
    ([("y.0", 2)], MeshError, "reserved"),
    ([("x", 2.0)], MeshError, "2.0"),
    ([("x", True)], MeshError, "True"),
    ([("x", "2")], MeshError, "'2'"),
    ([("x", ())], MeshError, "'x'"),
    ([(3, 2)], MeshError, "3"),
    ([("x", 2), ("x", 2)], MeshError, "duplicate axis 'x'"),
    ((), MeshError, "empty"),
    ("x=2", MeshError, "x=2"),
    ([("x y", 2)], MeshError, "'x y'"),
])
def test_bad_mesh_constructor(axes, error, token):
    with pytest.raises(error) as e:
        Mesh(axes)
    assert token in str(e.value)


def test_mesh_lookup_errors():
    with pytest.raises(ShardingError, match=r"unknown axis 'z'; the mesh has x, y$"):
        XY.resolve("z")
    with pytest.raises(ShardingError, match=r"unknown axis 'x.0'"):
        XY.resolve("x.0")
    with pytest.raises(ShardingError, match=r"'y.2'.*x, y, y.0, y.1"):
        SPLIT.resolve("y.2")
    with pytest.raises(ShardingError, match="'y.01'"):
        SPLIT.resolve("y.01")
    with pytest.raises(ShardingError):
        SPLIT.part_name(3)
    with pytest.raises(MeshError):
        XY.coords(6)
    with pytest.raises(MeshError):
        XY.rank((2, 0))
    with pytest.raises(MeshError):
        XY.rank((0,))


def test_mesh_is_frozen_and_hashable():
    with pytest.raises(AttributeError):
        XY.axes = ()
    assert len({XY, Mesh.parse("x=2,y=3"), SPLIT}) == 2

# ---------------------------------------------------------------------------
# ArrayType


def test_examples():
    t = ArrayType.parse("[3{x}6, 4]", XY)
    assert str(t) == repr(t) == "[3{x}6, 4]"
    assert t.global_shape == (6, 4) and t.local_shape == (3, 4) and t.size == 12 and t.rank == t.ndim == 2
    assert t.used_parts == {0} and t.dim_parts(0) == (0,) and t.dim_axes(1) == ()
    assert t.encode() == [2, 6, 1, 0, 4, 0]
    assert ArrayType.decode(XY, t.encode()) == (t, 6)
    assert t.dims == (DimType(6, (0,)), DimType(4, ()))
    assert str(ArrayType.parse("[1{x,y}6]", XY)) == "[1{x,y}6]"
    assert ArrayType.parse("[6{}6]", XY) == ArrayType.parse("[6]", XY) == ArrayType(XY, [6])
    assert ArrayType.parse("[ 3 {x} 6 ]", XY) == ArrayType.parse("[3{x}6]", XY)
    assert ArrayType.parse("\n[\t3{ x }6 ,4 ]\n", XY) == t


def test_whole_axis_and_part_notation():
    a = ArrayType.parse("[1{y}4]", SPLIT)
    assert a == ArrayType.parse("[1{y.0,y.1}4]", SPLIT) and hash(a) == hash(ArrayType.parse("[1{y.0, y.1}4]", SPLIT))
    assert str(a) == "[1{y}4]" and a.dim_axes(0) == ("y",)
    b = ArrayType.parse("[1{y.1,y.0}4]", SPLIT)
    assert str(b) == "[1{y.1,y.0}4]" and b != a
    c = ArrayType.parse("[1{y.0,x}4, 2{y.1}4]", SPLIT)
    assert str(c) == "[1{y.0,x}4, 2{y.1}4]"
    assert str(ArrayType.parse("[1{x,y}8]", SPLIT)) == "[1{x,y}8]"
    assert ArrayType.parse("[2{y}8]", SPLIT) != ArrayType.parse("[2{y}8]", "x=2,y=4")


def test_constructors():
    t = ArrayType.from_axes(SPLIT, (8, 6), [("y",), "x"])
    assert t == ArrayType.from_parts(SPLIT, (8, 6), [(1, 2), (0,)]) == ArrayType.parse("[2{y}8, 3{x}6]", SPLIT)
    assert ArrayType.from_axes(XY, (6, 4), [None, ()]) == ArrayType.parse("[6, 4]", XY)
    assert ArrayType(XY, (DimType(6, (1,)),)) == ArrayType(XY, [(6, [1])])
    with pytest.raises(ShardingError, match="2 dimensions but 1"):
        ArrayType.from_parts(XY, (6, 4), [()])


def test_refined_type_has_same_boxes():
    m = Mesh.parse("x=2,y=12")
    t = ArrayType.parse("[1{y,x}24, 5]", m)
    r = t.refined()
    assert r.mesh == m.refined() and r.global_shape == t.global_shape and r.local_shape == t.local_shape
    for rank in range(m.num_devices):
        assert box(t.mesh, t, rank) == box(r.mesh, r, rank)


@pytest.mark.parametrize("mesh, text, error, token", [
    (XY, "[3{z}6]", ShardingError, "unknown axis 'z'; the mesh has x, y"),
    (XY, "[3{x}6, 2{x}4]", ShardingError, "duplicate axis 'x' in [3{x}6, 2{x}4]"),
    (SPLIT, "[2{y}8, 2{y.0}4]", ShardingError, "duplicate axis 'y.0'"),
    (SPLIT, "[1{y,y.1}8]", ShardingError, "duplicate axis 'y.1'"),
    (XY, "[3{x}7]", ShardingError, "local size 3 written for dimension 0 does not match ceil(7 / 2) = 4"),
    (XY, "[1{x,y}8]", ShardingError, "local size 1 written for dimension 0 does not match ceil(8 / 6) = 2"),
    (XY, "[4{x}6]", ShardingError, "local size 4 written for dimension 0 does not match 6 / 2 = 3"),
    (XY, "[5{}6]", ShardingError, "local size 5 written for dimension 0 does not match 6 / 1 = 6"),
    (XY, "[-6]", ShardingError, "global size -6 of dimension 0"),
    (XY, "[4, 0]", ShardingError, "global size 0 of dimension 1"),
    (XY, "[" + "9" * 40 + "]", LimitError, "99999"),
    (XY, "[1125899906842624, 2]", LimitError, "2**50"),
    (XY, "[3{x6]", ParseError, "'x6', found ']'"),
    (XY, "[a{x}6]", ParseError, "'a'"),
    (XY, "[]", ParseError, "'[]'"),
    (XY, "[3{x}6,,]", ParseError, "','"),
    (XY, "3{x}6", ParseError, "'3'"),
    (XY, "[3{x}6", ParseError, "end of text"),
    (XY, "[3{x}6]]", ParseError, "']'"),
    (XY, "[3{x}6 4]", ParseError, "'4'"),
    (XY, "[3{x,}6]", ParseError, "'}'"),
    (XY, "[3{x}]", ParseError, "']'"),
    (XY, "[3{x}6]x", ParseError, "'x'"),
    (XY, "[3$]", ParseError, "'$'"),
    (XY, "[3{x.}6]", ParseError, "'.'"),
    (XY, "[3{x.0}6]", ShardingError, "unknown axis 'x.0'"),
    (SPLIT, "[3{y.2}6]", ShardingError, "unknown axis 'y.2'"),
    (XY, "", ParseError, "end of text"),
    (XY, "[\u0663]", ParseError, "'\u0663'"),
])
def test_bad_types(mesh, text, error, token):
    with pytest.raises(error) as e:
        ArrayType.parse(text, mesh)
    msg = str(e.value)
    assert token in msg and "\n" not in msg


@pytest.mark.parametrize("make, error, token", [
    (lambda: ArrayType(XY, ()), ShardingError, "at least one dimension"),
    (lambda: ArrayType(XY, [(6, (5,))]), ShardingError, "unknown part 5"),
    (lambda: ArrayType(XY, [(6.0, ())]), ShardingError, "6.0"),
    (lambda: ArrayType(XY, [(6, ("x",))]), ShardingError, "'x'"),
    (lambda: ArrayType(XY, [(True, ())]), ShardingError, "True"),
    (lambda: ArrayType(XY, [(6, (-1,))]), ShardingError, "-1"),
    (lambda: ArrayType("x=2", [6]), ShardingError, "Mesh"),
    (lambda: ArrayType.parse(3, XY), ParseError, "int"),
    (lambda: ArrayType.from_axes(XY, (6,), [("z",)]), ShardingError, "'z'"),
    (lambda: ArrayType.from_parts(XY, (6, 6), [(0,), (0,)]), ShardingError, "duplicate axis 'x' in [3{x}6, 3{x}6]"),
    (lambda: ArrayType.decode(XY, [2, 6, 1]), ParseError, "truncated"),
])
def test_bad_constructor_calls(make, error, token):
    with pytest.raises(error) as e:
        make()
    assert token in str(e.value)


def test_types_are_frozen_and_hashable():
    t = ArrayType.parse("[3{x}6]", XY)
    with pytest.raises(AttributeError):
        t.dims = ()
    assert {t: 1}[ArrayType.parse("[3{x}6]", "x=2,y=3")] == 1


def test_box_matches_reference():
    for t in ["[1{y,x}6, 4]", "[3{x}6, 2{y}6]", "[6, 4]", "[1{x,y}6]"]:
        at = ArrayType.parse(t, XY)
        rt = tuple((g, ps) for g, ps in zip(at.global_shape, (at.dim_parts(d) for d in range(at.rank))))
        for r in range(XY.num_devices):
            want = ref.box(XY.part_sizes, rt, ref.coords(XY.part_sizes, r))
            assert tuple((s.start, s.stop) for s in box(at.mesh, at, r)) == want

# ---------------------------------------------------------------------------
# hypothesis: round trips

NAMES = ["x", "y", "z", "w", "ab_1", "_q", "Dev2"]


@st.composite
def meshes(draw):
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    axes = []
    for name in names:
        if draw(st.booleans()):
            axes.append((name, draw(st.integers(1, 5))))
        else:
            axes.append((name, tuple(draw(st.lists(st.integers(1, 3), min_size=2, max_size=3)))))
    return Mesh(axes)


@st.composite
def types(draw, mesh=None):
    mesh = mesh or draw(meshes())
    k = len(mesh.parts)
    r = draw(st.integers(1, 3))
    assign = [draw(st.integers(0, r)) for _ in range(k)]   # r: replicated
    dims = []
    for d in range(r):
        ps = draw(st.permutations([p for p in range(k) if assign[p] == d]))
        g = prod(mesh.part_sizes[p] for p in ps) * draw(st.integers(1, 4))
        dims.append(DimType(g, tuple(ps)))
    return ArrayType(mesh, dims)


@settings(max_examples=200, deadline=None)
@given(meshes())
def test_mesh_roundtrip(m):
    assert Mesh.parse(str(m)) == m
    assert Mesh.parse(str(m).strip("{}").replace(":", "=")) == m
    assert repr(m) == str(m)
    assert m.encode() == [len(m.parts), *m.part_sizes]
    for a, name in enumerate(m.axis_names):
        assert m.names(m.resolve(name)) == (name,)
    for i, (name, _) in enumerate(m.parts):
        assert m.resolve(name) == (i,) and m.part_name(i) == name
    assert m.refined().num_devices == m.num_devices


@settings(max_examples=300, deadline=None)
@given(types())
def test_type_roundtrip(t):
    m = t.mesh
    assert ArrayType.parse(str(t), m) == t
    assert ArrayType.parse(str(t).replace(",", " , ").replace("{", " { "), m) == t
    # the same type written with part names only, and with whole names only where printed
    parts_text = "[" + ", ".join(
        f"{l}{{{','.join(m.part_name(p) for p in d.parts)}}}{d.global_size}"
        for d, l in zip(t.dims, t.local_shape)) + "]"
    assert ArrayType.parse(parts_text, m) == t
    assert ArrayType.from_axes(m, t.global_shape, [t.dim_axes(d) for d in range(t.rank)]) == t
    assert ArrayType.decode(m, t.encode()) == (t, len(t.encode()))
    assert ArrayType.decode(m, [7, 7] + t.encode(), 2) == (t, 2 + len(t.encode()))
    assert t.size == prod(t.local_shape)
    assert t.refined().local_shape == t.local_shape
    # boxes tile the global array with multiplicity = number of replicas
    seen = np.zeros(t.global_shape, dtype=np.int64)
    if m.num_devices <= 64 and prod(t.global_shape) <= 4096:
        for r in range(m.num_devices):
            seen[box(t.mesh, t, r)] += 1
        assert (seen == m.num_devices // prod(g // l for g, l in zip(t.global_shape, t.local_shape))).all()

# ---------------------------------------------------------------------------
# collectives


def test_collective_printing():
    t = ArrayType.parse("[1{y,x}6]", XY)
    assert str(AllGather(0, "x")) == "AllGather(0, x)"
    assert str(AllGather(0, ("x", "y"))) == "AllGather(0, {x,y})"
    assert str(DynSlice(1, "y")) == "DynSlice(1, y)"
    assert str(AllToAll(0, 1, "x")) == "AllToAll(0->1, x)"
    assert str(AllPermute(t)) == "AllPermute([1{y,x}6])"
    assert AllGather(0, "x") == AllGather(0, ["x"]) == AllGather(0, ("x",))
    assert len({AllGather(0, "x"), AllGather(0, ("x",)), DynSlice(0, "x")}) == 2


def test_collective_encoding():
    t = ArrayType.parse("[1{y,x}6]", XY)
    assert AllGather(0, "x").encode(XY) == [0, 0, 1, 0]
    assert DynSlice(1, ("x", "y")).encode(XY) == [1, 1, 2, 0, 1]
    assert AllToAll(0, 1, "y").encode(SPLIT) == [2, 0, 1, 2, 1, 2]
    assert AllToAll(0, 1, "y.1").encode(SPLIT) == [2, 0, 1, 1, 2]
    assert AllPermute(t).encode(XY) == [3, 1, 6, 2, 1, 0]
    assert Collective.decode(SPLIT, [0, 0, 2, 1, 2]) == (AllGather(0, "y"), 5)
    assert Collective.decode(SPLIT, [0, 0, 2, 2, 1]) == (AllGather(0, ("y.1", "y.0")), 5)
    assert Collective.decode(XY, [9, 3, 1, 6, 2, 1, 0], 1) == (AllPermute(t), 7)
    with pytest.raises(ShardingError, match="'z'"):
        AllGather(0, "z").encode(XY)
    with pytest.raises(ShardingError, match="mesh"):
        AllPermute(t).encode(SPLIT)
    with pytest.raises(ParseError, match="tag 9"):
        Collective.decode(XY, [9])
    with pytest.raises(ParseError, match="truncated"):
        Collective.decode(XY, [0, 0, 2, 0])


@pytest.mark.parametrize("obj, error, token", [
    ([], ParseError, "list"),
    ({}, ParseError, "None"),
    ({"op": "gather"}, ParseError, "'gather'"),
    ({"op": "all_gather", "dim": 0}, ParseError, "'axes'"),
    ({"op": "all_gather", "dim": 0, "axes": ["x"], "extra": 1}, ParseError, "'extra'"),
    ({"op": "all_gather", "dim": "0", "axes": ["x"]}, PlanError, "'0'"),
    ({"op": "all_gather", "dim": -1, "axes": ["x"]}, PlanError, "-1"),
    ({"op": "all_gather", "dim": True, "axes": ["x"]}, PlanError, "True"),
    ({"op": "dyn_slice", "dim": 0, "axes": "x"}, ParseError, "'x'"),
    ({"op": "dyn_slice", "dim": 0, "axes": [1]}, PlanError, "1"),
    ({"op": "dyn_slice", "dim": 0, "axes": ["z"]}, ShardingError, "'z'"),
    ({"op": "all_to_all", "src_dim": 0, "axes": ["x"]}, ParseError, "'dst_dim'"),
    ({"op": "all_permute", "target": 5}, ParseError, "5"),
    ({"op": "all_permute", "target": "[1{y,x}7]"}, ShardingError, "7"),
    ({"op": "all_permute", "target": "[1{y,x6]"}, ParseError, "'x6'"),
    ({1: 2, "op": "all_permute", "target": "[6]"}, ParseError, "1"),
])
def test_bad_json(obj, error, token):
    with pytest.raises(error) as e:
        Collective.from_json(obj, XY)
    assert token in str(e.value)


@st.composite
def typed_collective(draw):
    """A mesh, a type and any collective (not necessarily well typed) over the mesh."""
    t = draw(types())
    m = t.mesh
    names = list(m.axis_names) + [n for n, _ in m.parts if "." in n]
    axes = tuple(draw(st.lists(st.sampled_from(names), min_size=1, max_size=3)))
    kind = draw(st.integers(0, 3))
    d, e = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    if kind == 0:
        return m, AllGather(d, axes)
    if kind == 1:
        return m, DynSlice(d, axes)
    if kind == 2:
        return m, AllToAll(d, e, axes)
    return m, AllPermute(t)


@settings(max_examples=300, deadline=None)
@given(typed_collective())
def test_collective_roundtrips(case):
    m, c = case
    assert Collective.from_json(c.to_json(), m) == c
    assert Collective.parse(str(c), m) == c
    code = c.encode(m)
    back, pos = Collective.decode(m, code + [5, 5])
    assert pos == len(code) and back.encode(m) == code
    if not isinstance(c, AllPermute):
        # decoding names canonically: same parts, and printed names resolve to them
        assert back.parts(m) == c.parts(m)

# ---------------------------------------------------------------------------
# fuzz: only VerishardError ever escapes

ALPHABET = "[]{},.*=:-_ \n0123456789xyzXY\u0663$"


def _only_verishard(f, *args):
    try:
        f(*args)
    except VerishardError as e:
        assert "\n" not in str(e)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet=ALPHABET, max_size=30)))
def test_fuzz_mesh_parse(text):
    _only_verishard(Mesh.parse, text)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet=ALPHABET, max_size=30)),
       st.sampled_from([XY, SPLIT, Mesh.parse("a=1")]))
def test_fuzz_type_parse(text, mesh):
    _only_verishard(ArrayType.parse, text, mesh)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=ALPHABET + "AllGatherDynSlicePermuteTo()>", max_size=40))
def test_fuzz_collective_parse(text):
    _only_verishard(Collective.parse, text, SPLIT)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 10) | st.floats(allow_nan=False) |
                    st.sampled_from(["x", "y", "y.0", "z", "[6]", "[1{y,x}6]", "[3{x6]"]),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=8)
OPS = st.sampled_from(["all_gather", "dyn_slice", "all_to_all", "all_permute", "nope"])
KEYS = st.sampled_from(["op", "dim", "src_dim", "dst_dim", "axes", "target"])


@settings(max_examples=500, deadline=None)
@given(st.one_of(JSON, st.dictionaries(KEYS, JSON, max_size=5),
                 st.builds(lambda op, d: {**d, "op": op}, OPS, st.dictionaries(KEYS, JSON, max_size=5))))
def test_fuzz_from_json(obj):
    _only_verishard(Collective.from_json, obj, XY)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=20), st.sampled_from([XY, SPLIT]))
def test_fuzz_decode(ints, mesh):
    _only_verishard(ArrayType.decode, mesh, ints)
    _only_verishard(Collective.decode, mesh, ints)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["x=2", "x=2,y=3", "x=2,y=2*2", "x=4,y=6"]),
       st.lists(st.tuples(st.integers(1, 13), st.lists(st.integers(0, 3), max_size=3)), min_size=1, max_size=3))
def test_python_well_formedness_is_the_cores(mesh_text, raw):
    """ArrayType's early checks (duplicate axis, ...) accept exactly the
    types the verified core calls well-formed uneven types
    (``Uneven.wf_unevenb``, asked through the uneven checker on the empty
    plan from the type to itself), and the even ones among them are exactly
    the core's well-formed types (``Types.wfb``, through the checker)."""
    from verishard import _core
    from verishard.core import REASONS

    mesh = Mesh.parse(mesh_text)
    n = len(mesh.part_sizes)
    raw = [(g, [p % n for p in ps]) for g, ps in raw]
    enc = [len(raw)] + [v for g, ps in raw for v in (g, len(ps), *ps)]
    out = _core.check(mesh.encode() + enc + enc + [0])
    core_ok = out[0] == 0 or REASONS[out[2]][0] != "bad_source"
    uout = _core.ucheck(mesh.encode() + enc + enc + [0])
    core_uneven_ok = uout[0] == 0 or REASONS[uout[2]][0] != "bad_source"
    try:
        t = ArrayType(mesh, [(g, tuple(ps)) for g, ps in raw])
        python_ok, even = True, not t.uneven
    except ShardingError:
        python_ok, even = False, False
    assert python_ok == core_uneven_ok, (mesh_text, raw, uout)
    assert (python_ok and even) == core_ok, (mesh_text, raw, out)
