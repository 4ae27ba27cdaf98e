"""JAX PartitionSpec and DTensor placements: parsers, printers, conversions."""

from __future__ import annotations

from math import prod

import pytest
from hypothesis import given, settings, strategies as st

from verishard import ArrayType, LimitError, Mesh, ParseError, ShardingError, VerishardError
from verishard.runtime.layout import box
from verishard.notation import (format_partition_spec, format_placements, from_partition_spec, from_placements,
                                parse_partition_spec, parse_placements, to_partition_spec, to_placements)

XY = Mesh.parse("x=2,y=3")

# ---------------------------------------------------------------------------
# PartitionSpec text


@pytest.mark.parametrize("text, entries", [
    ("P('x', None)", (("x",), None)),
    ("PartitionSpec('x', ('y','z'))", (("x",), ("y", "z"))),
    ("P()", ()),
    ("('x', None)", (("x",), None)),
    ('P(None, "x")', (None, ("x",))),
    ("P('x',)", (("x",),)),
    ("P(('x',), ('y', 'z',),)", (("x",), ("y", "z"))),
    ("P((), 'x')", (None, ("x",))),
    ("P(('x'), None)", (("x",), None)),
    ("jax.sharding.PartitionSpec('data', None)", (("data",), None)),
    ("  P ( 'x' , None )  ", (("x",), None)),
    ("P('y.0')", (("y.0",),)),
])
def test_parse_partition_spec(text, entries):
    assert parse_partition_spec(text) == entries


@pytest.mark.parametrize("text, error, token", [
    ("", ParseError, "empty"),
    ("P(", ParseError, "end of text"),
    ("P('x'", ParseError, "end of text"),
    ("P('x' None)", ParseError, "'None'"),
    ("P(x)", ParseError, "'x'"),
    ("P(1)", ParseError, "'1'"),
    ("P('x') extra", ParseError, "'extra'"),
    ("Q('x')", ParseError, "'Q'"),
    ("P('')", ParseError, "empty axis name"),
    ("P('x\\'y')", ParseError, "string"),
    ("P((('x',),))", ParseError, "'('"),
    ("P(('x', None))", ParseError, "'None'"),
    ("P('x'; import os)", ParseError, "';'"),
    ("__import__('os')", ParseError, "'__import__'"),
    ("P.UNCONSTRAINED", ShardingError, "unconstrained dimensions are not a sharding"),
    ("P('x', P.UNCONSTRAINED)", ShardingError, "unconstrained dimensions are not a sharding"),
    ("P(UNCONSTRAINED)", ShardingError, "'UNCONSTRAINED'"),
    ("P(('x', P.UNCONSTRAINED))", ShardingError, "unconstrained"),
])
def test_parse_partition_spec_errors(text, error, token):
    with pytest.raises(error) as e:
        parse_partition_spec(text)
    assert token in str(e.value) and "\n" not in str(e.value)


def test_parse_is_not_eval():
    with pytest.raises(VerishardError):
        parse_partition_spec("P(print('hi'))")
    with pytest.raises(ParseError):
        parse_partition_spec(42)


def test_format_partition_spec():
    assert format_partition_spec([("x",), None]) == "P('x', None)"
    assert format_partition_spec([("x", "y"), None]) == "P(('x', 'y'), None)"
    assert format_partition_spec(["x", ("y",), ()]) == "P('x', 'y', None)"
    assert format_partition_spec(()) == "P()"
    for bad in (["x'y"], [""], [3], "x", [("x", 3)]):
        with pytest.raises(ShardingError):
            format_partition_spec(bad)


# ---------------------------------------------------------------------------
# PartitionSpec <-> ArrayType


def test_from_partition_spec():
    assert str(from_partition_spec(XY, (6, 4), (("x",), None))) == "[3{x}6, 4]"
    assert str(from_partition_spec(XY, (6, 4), [("x",)])) == "[3{x}6, 4]"   # padded as JAX does
    assert str(from_partition_spec(XY, (6, 4), ())) == "[6, 4]"
    assert str(from_partition_spec("x=2,y=3", [12], ["y"])) == "[4{y}12]"
    assert str(from_partition_spec(XY, (12, 4), [("y", "x"), None])) == "[2{y,x}12, 4]"


def test_partition_spec_tuple_is_major_to_minor():
    # JAX: P(('y', 'x')) puts device (x, y) at block y * n_x + x.
    t = from_partition_spec(XY, (12,), [("y", "x")])
    for x in range(2):
        for y in range(3):
            b = y * 2 + x
            assert box(t.mesh, t, XY.rank((x, y))) == (slice(2 * b, 2 * b + 2),)


@pytest.mark.parametrize("shape, entries, token", [
    ((6,), [None, "x"], "has 2 entries but the array has rank 1"),
    ((6,), ["z"], "unknown axis 'z'"),
    ((6, 6), ["x", "x"], "duplicate axis 'x'"),
    ((0,), [None], "must be at least 1"),
    ((-6,), [None], "must be at least 1"),
    ((2**40, 2**40), [None], "2**50"),
    ((), [], "no dimensions"),
    ((6.0,), [None], "6.0"),
    ((True,), [None], "True"),
    ((6,), [3], "3"),
    ((6,), ["UNCONSTRAINED_sentinel"], "unknown axis"),
])
def test_from_partition_spec_errors(shape, entries, token):
    with pytest.raises(VerishardError) as e:
        from_partition_spec(XY, shape, entries)
    assert token in str(e.value)


def test_from_partition_spec_uneven():
    """JAX's layout of a spec that does not divide (blocks of ceil(g / n), the
    last short or empty) is verishard's uneven type."""
    t = from_partition_spec(XY, (7,), ["x"])
    assert str(t) == "[4{x}7]" and t.uneven
    assert [t.valid_shape(XY.rank((x, 0))) for x in range(2)] == [(4,), (3,)]


def test_unconstrained_object_refused():
    class Unconstrained:
        def __repr__(self):
            return "UNCONSTRAINED"

    with pytest.raises(ShardingError, match="unconstrained dimensions are not a sharding"):
        from_partition_spec(XY, (6,), [Unconstrained()])


def test_to_partition_spec():
    assert to_partition_spec(ArrayType.parse("[3{x}6, 4]", XY)) == (("x",), None)
    assert to_partition_spec(ArrayType.parse("[1{y,x}6, 4]", XY)) == (("y", "x"), None)
    assert to_partition_spec(ArrayType.parse("[2{y}8]", "x=2,y=2*2")) == (("y",),)
    for text in ("[2{y.0}4]", "[1{y.1,y.0}4]", "[2{y.0}4, 2{y.1}4]"):
        with pytest.raises(ShardingError, match="sub-axis 'y.[01]'.*whole axes"):
            to_partition_spec(ArrayType.parse(text, "y=2*2"))


# ---------------------------------------------------------------------------
# Placements


@pytest.mark.parametrize("text, placements", [
    ("Shard(0),Replicate()", (("shard", 0), ("replicate",))),
    ("[Shard(0), Shard(0)]", (("shard", 0), ("shard", 0))),
    ("(Replicate(), Shard(1))", (("replicate",), ("shard", 1))),
    ("(Replicate(), Shard(dim=1),)", (("replicate",), ("shard", 1))),
    ("Shard(0),", (("shard", 0),)),
    ("dt.Shard(2), torch.distributed.tensor.Replicate()", (("shard", 2), ("replicate",))),
    ("Shard(-1)", (("shard", -1),)),
    ("[]", ()),
])
def test_parse_placements(text, placements):
    assert parse_placements(text) == placements


@pytest.mark.parametrize("text, error, token", [
    ("", ParseError, "empty"),
    ("Shard(0) Shard(1)", ParseError, "'Shard'"),
    ("Shard()", ParseError, "')'"),
    ("Shard(x)", ParseError, "'x'"),
    ("Shard(0", ParseError, "end of text"),
    ("[Shard(0)", ParseError, "end of text"),
    ("[Shard(0))", ParseError, "')'"),
    ("Replicate(1)", ParseError, "'1'"),
    ("Shrad(0)", ParseError, "'Shrad'"),
    ("Shard(" + "9" * 40 + ")", LimitError, "too large"),
    ("Partial('avg')", ShardingError, "Partial reduction 'avg'"),
    ("Shard(0), Partial(sum)", ParseError, "a reduction in quotes"),
    ("Shard(0); rm", ParseError, "';'"),
])
def test_parse_placements_errors(text, error, token):
    with pytest.raises(error) as e:
        parse_placements(text)
    assert token in str(e.value) and "\n" not in str(e.value)


def test_format_placements():
    assert format_placements([("shard", 0), ("replicate",)]) == "[Shard(0), Replicate()]"
    assert format_placements((("shard", 0), ("shard", 0)), {0: (1, 0)}) == "[Shard(0), Shard(0)] shard_order={0: (1, 0)}"
    assert parse_placements(format_placements([("replicate",), ("shard", 1)])) == (("replicate",), ("shard", 1))
    for bad in ([("partial",)], [("shard", "0")], [("shard",)], "Shard(0)", [("shard", True)]):
        with pytest.raises(ShardingError):
            format_placements(bad)


def test_from_placements_default_order_is_mesh_order():
    t = from_placements(XY, (12,), parse_placements("Shard(0), Shard(0)"))
    assert str(t) == "[2{x,y}12]"
    # DTensor: the tensor is split over mesh dim 0 first, then each piece over mesh dim 1.
    for r in range(6):
        assert box(t.mesh, t, r) == (slice(2 * r, 2 * r + 2),)
    assert str(from_placements(XY, (6, 4), [("shard", 0), ("replicate",)])) == "[3{x}6, 4]"
    assert str(from_placements(XY, (6, 6), [("replicate",), ("shard", -1)])) == "[6, 2{y}6]"
    assert str(from_placements("x=2,y=3", (6, 6), [("replicate",), ("replicate",)])) == "[6, 6]"


def test_from_placements_shard_order():
    assert str(from_placements(XY, (12,), [("shard", 0)] * 2, shard_order={0: (1, 0)})) == "[2{y,x}12]"
    assert str(from_placements(XY, (12,), [("shard", 0)] * 2, shard_order={0: [0, 1]})) == "[2{x,y}12]"
    assert str(from_placements(XY, (12, 6), [("shard", 0)] * 2, shard_order={-2: (1, 0)})) == "[2{y,x}12, 6]"


@pytest.mark.parametrize("shape, placements, order, token", [
    ((6, 4), [("shard", 0)], None, "1 placements [Shard(0)] for a mesh with 2 axes (x, y)"),
    ((6,), [("shard", 1), ("replicate",)], None, "Shard(1) on mesh axis 'x' names no dimension"),
    ((6,), [("shard", -2), ("replicate",)], None, "Shard(-2)"),
    ((7,), [("shard", 0), ("replicate",)], None, "not divisible by 2"),
    ((12,), [("shard", 0), ("shard", 0)], {0: (1,)}, "shard_order[0]"),
    ((12,), [("shard", 0), ("shard", 0)], {0: (1, 1)}, "shard_order[0]"),
    ((12,), [("shard", 0), ("shard", 0)], {1: (1, 0)}, "shard_order key 1"),
    ((12,), [("shard", 0), ("shard", 0)], {0: "10"}, "shard_order[0]"),
    ((12,), [("shard", 0), ("shard", 0)], [(0, (1, 0))], "mapping"),
    ((12,), [("partial",), ("shard", 0)], None, "('partial', op)"),
    ((12,), [("partial", "max"), ("partial", "min")], None, "one pending reduction"),
    ((12,), [("shard", 0.0), ("shard", 0)], None, "non-integer"),
    ((12,), "Shard(0),Shard(0)", None, "sequence"),
])
def test_from_placements_errors(shape, placements, order, token):
    with pytest.raises(ShardingError) as e:
        from_placements(XY, shape, placements, shard_order=order)
    assert token in str(e.value)


def test_to_placements():
    assert to_placements(ArrayType.parse("[3{x}6, 4]", XY)) == ((("shard", 0), ("replicate",)), None)
    assert to_placements(ArrayType.parse("[2{x,y}12]", XY)) == ((("shard", 0), ("shard", 0)), None)
    assert to_placements(ArrayType.parse("[2{y,x}12]", XY)) == ((("shard", 0), ("shard", 0)), {0: (1, 0)})
    assert to_placements(ArrayType.parse("[6, 2{y}6]", XY)) == ((("replicate",), ("shard", 1)), None)
    with pytest.raises(ShardingError, match="sub-axis 'y.1'.*whole mesh dimensions"):
        to_placements(ArrayType.parse("[2{y.1}4]", "y=2*2"))


# ---------------------------------------------------------------------------
# Properties: round trips and fuzzing

NAMES = ["x", "y", "z", "data", "model"]


@st.composite
def whole_types(draw):
    """A random well-formed type over whole axes of a random mesh (no split axes)."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    mesh = Mesh(tuple((n, draw(st.integers(1, 4))) for n in names))
    r = draw(st.integers(1, 3))
    assign = [draw(st.integers(0, r)) for _ in names]    # r: replicated
    dims = []
    for d in range(r):
        axes = draw(st.permutations([n for n, a in zip(names, assign) if a == d]))
        g = prod(mesh.axis_sizes[names.index(n)] for n in axes) * draw(st.integers(1, 3))
        dims.append((g, tuple(axes)))
    return ArrayType.from_axes(mesh, [g for g, _ in dims], [a for _, a in dims])


@settings(max_examples=150, deadline=None)
@given(whole_types())
def test_partition_spec_round_trip(t):
    spec = to_partition_spec(t)
    assert len(spec) == t.rank
    assert from_partition_spec(t.mesh, t.global_shape, spec) == t
    assert parse_partition_spec(format_partition_spec(spec)) == spec


@settings(max_examples=150, deadline=None)
@given(whole_types())
def test_placements_round_trip(t):
    pl, order = to_placements(t)
    assert len(pl) == len(t.mesh.axis_names)
    assert from_placements(t.mesh, t.global_shape, pl, order) == t
    assert parse_placements(format_placements(pl)) == pl


SPEC_ALPHABET = st.sampled_from(["P", "PartitionSpec", "(", ")", ",", "None", "'x'", '"y"', "('x', 'y')",
                                 "P.UNCONSTRAINED", "x", "1", "-", ".", "'", '"', " ", "\\", "[", "]", "=", "jax."])
PLACEMENT_ALPHABET = st.sampled_from(["Shard", "Replicate", "Partial", "(", ")", "[", "]", ",", "0", "1", "-1",
                                      "dim", "=", " ", ".", "x", "'", "99999999999999999999999999999999999"])


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=40), st.lists(SPEC_ALPHABET, max_size=14).map("".join)))
def test_fuzz_parse_partition_spec(text):
    try:
        entries = parse_partition_spec(text)
    except VerishardError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(entries, tuple)
    for e in entries:
        assert e is None or (isinstance(e, tuple) and e and all(isinstance(a, str) and a for a in e))
    assert parse_partition_spec(format_partition_spec(entries)) == entries
    try:
        from_partition_spec(XY, (12, 12, 12), entries[:3])
    except VerishardError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=40), st.lists(PLACEMENT_ALPHABET, max_size=14).map("".join)))
def test_fuzz_parse_placements(text):
    try:
        pl = parse_placements(text)
    except VerishardError as e:
        assert "\n" not in str(e)
        return
    assert all(p == ("replicate",) or (p[0] == "shard" and isinstance(p[1], int)) for p in pl)
    assert parse_placements(format_placements(pl)) == pl
    try:
        from_placements(XY, (12, 12), pl)
    except VerishardError:
        pass
