"""The extracted core against the independent reference (tests/reference.py).

Inputs go to the binding as raw integer encodings, so ill-formed meshes,
types and plans reach the verified checker too (the Python layer would
refuse them earlier).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference as ref
from verishard import _core

# -- encodings (docs/internals.md) ------------------------------------------


def enc_mesh(n):
    return [len(n), *n]


def enc_type(t):
    out = [len(t)]
    for g, axes in t:
        out += [g, len(axes), *axes]
    return out


def enc_coll(c):
    kind = c[0]
    if kind == "gather":
        return [0, c[1], len(c[2]), *c[2]]
    if kind == "slice":
        return [1, c[1], len(c[2]), *c[2]]
    if kind == "a2a":
        return [2, c[1], c[2], len(c[3]), *c[3]]
    return [3, *enc_type(c[1])]


def dec_type(out, pos):
    r = out[pos]
    pos += 1
    dims = []
    for _ in range(r):
        g, m = out[pos], out[pos + 1]
        dims.append((g, tuple(out[pos + 2:pos + 2 + m])))
        pos += 2 + m
    return tuple(dims), pos


def core_check(n, src, dst, plan):
    out = _core.check(enc_mesh(n) + enc_type(src) + enc_type(dst) + [len(plan)]
                      + [x for c in plan for x in enc_coll(c)])
    if out[0] == 1:
        return ("error", out[1])
    peak, s, pos, types = out[1], out[2], 3, []
    for _ in range(s + 1):
        t, pos = dec_type(out, pos)
        types.append(t)
    return ("ok", types, list(out[pos:]), peak)


# -- random problems, including ill-formed ones ------------------------------

meshes = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)


@st.composite
def problems(draw):
    n = draw(meshes)
    k = len(n)
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24])) for _ in range(rank))

    def a_type():
        axes = draw(st.permutations(range(k + 1)))        # k+1: an axis that does not exist
        cut = sorted(draw(st.lists(st.integers(0, len(axes)), min_size=rank + 1, max_size=rank + 1)))
        dims = []
        for d in range(rank):
            sel = [a for a in axes[cut[d]:cut[d + 1] if d < rank - 1 else cut[-1]]
                   if a < k or draw(st.integers(0, 9)) == 0]
            dims.append((shape[d], tuple(sel)))
        if draw(st.integers(0, 19)) == 0:           # sometimes a duplicate axis
            d = draw(st.integers(0, rank - 1))
            dims[d] = (dims[d][0], dims[d][1] + (0,))
        return tuple(dims)

    src = a_type()
    dst = a_type() if draw(st.integers(0, 9)) else tuple((g + 1, a) for g, a in a_type())

    def a_coll(t):
        choice = draw(st.integers(0, 3))
        d = draw(st.integers(0, rank))                  # rank: a dimension that does not exist
        axes = tuple(draw(st.lists(st.integers(0, k), max_size=3)))
        if choice == 0 and d < rank and t is not None and draw(st.booleans()):
            ax = t[d][1]
            axes = ax[draw(st.integers(0, len(ax))):]
        if choice == 0:
            return ("gather", d, axes)
        if choice == 1:
            return ("slice", d, axes)
        if choice == 2:
            return ("a2a", d, draw(st.integers(0, rank)), axes)
        return ("permute", a_type())

    plan, t = [], src
    for _ in range(draw(st.integers(0, 4))):
        c = a_coll(t)
        if draw(st.integers(0, 3)) and t is not None:      # mostly steer towards valid steps
            valid = ref.well_typed(n, t, with_permutes=False) if ref.wf(n, t) is None else []
            if valid:
                c = draw(st.sampled_from(valid))
        plan.append(c)
        t = ref.apply(n, t, c)[0] if t is not None and ref.wf(n, t) is None else None
    if draw(st.booleans()) and t is not None:
        dst = t
    return n, src, dst, plan


@settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))
@given(problems())
def test_checker_agrees_with_reference(problem):
    n, src, dst, plan = problem
    want = ref.check(n, src, dst, plan)
    got = core_check(n, src, dst, plan)
    assert got[0] == want[0], (want, got)
    if want[0] == "error":
        assert got[1] == want[1]
    else:
        _, types, recvs, peak = want
        assert got[1] == [tuple(t) for t in types]
        assert got[2] == recvs
        assert got[3] == peak


# -- exhaustive small meshes: blocks and data movement ----------------------

SMALL = [
    ((2,), [(4,), (2, 3)]),
    ((3,), [(6,), (3, 2)]),
    ((2, 2), [(4,), (2, 4)]),
    ((2, 3), [(6,), (6, 2)]),
    ((2, 1, 2), [(4,), (4, 2)]),
    ((2, 2, 2), [(8,), (4, 2)]),
]


def core_blocks(n, t):
    out = _core.blocks(enc_mesh(n) + enc_type(t))
    return np.asarray(out).reshape(ref.num_devices(n), len(t))


def core_movement(n, t, c, t2):
    out = _core.movement(enc_mesh(n) + enc_type(t) + enc_coll(c) + enc_type(t2))
    return np.asarray(out).reshape(ref.num_devices(n), -1, 2)


def moved_by_core(n, t, c, t2, local):
    """Apply the verified source map to per-rank local arrays."""
    mv = core_movement(n, t, c, t2)
    lshape = ref.local_shape(n, t2)
    return [np.array([local[r2].reshape(-1)[o] for r2, o in mv[r]]).reshape(lshape)
            for r in range(ref.num_devices(n))]


@pytest.mark.parametrize("n,shapes", SMALL, ids=lambda v: str(v))
def test_exhaustive_blocks_and_movement(n, shapes):
    steps = 0
    for shape in shapes:
        A = np.arange(int(np.prod(shape))).reshape(shape)
        for t in ref.all_types(n, shape):
            starts = core_blocks(n, t)
            for r in range(ref.num_devices(n)):
                assert tuple(starts[r]) == tuple(lo for lo, _ in ref.box(n, t, ref.coords(n, r)))
            local = ref.distribute(n, A, t)
            for c in ref.well_typed(n, t):
                t2, _ = ref.apply(n, t, c)
                want = ref.distribute(n, A, t2)
                sim = ref.simulate(n, t, c, local)
                core = moved_by_core(n, t, c, t2, local)
                for r in range(ref.num_devices(n)):
                    assert np.array_equal(sim[r], want[r]), (t, c, r)
                    assert np.array_equal(core[r], want[r]), (t, c, r)
                steps += 1
    assert steps > 0


def test_permute_table_is_the_fixed_point_maximal_bijection():
    for n, shapes in SMALL:
        for shape in shapes:
            types = ref.all_types(n, shape)
            for t, t2 in itertools.product(types, types):
                if ref.local_shape(n, t) != ref.local_shape(n, t2):
                    continue
                p = _core.permute(enc_mesh(n) + enc_type(t) + enc_type(t2))
                N = ref.num_devices(n)
                assert sorted(p) == list(range(N))
                for c in range(N):
                    assert ref.block(n, t, ref.coords(n, p[c])) == ref.block(n, t2, ref.coords(n, c))
                    if ref.block(n, t, ref.coords(n, c)) == ref.block(n, t2, ref.coords(n, c)):
                        assert p[c] == c


# -- the binding never crashes ------------------------------------------------

@settings(max_examples=2000, deadline=None)
@given(st.sampled_from(["check", "synthesize", "blocks", "permute"]),
       st.lists(st.integers(-3, 40), max_size=40))
def test_binding_survives_garbage(fn, ints):
    try:
        getattr(_core, fn)(ints)
    except ValueError:
        pass


def test_binding_refuses_values_beyond_the_extraction_bound():
    big = [1, 1 << 21]                           # one axis of 2^21 devices
    with pytest.raises(ValueError, match="2\\^20 devices"):
        _core.check(big + [1, 4, 0] + [1, 4, 0] + [0])
    with pytest.raises(ValueError, match="2\\^50 elements"):
        _core.blocks([1, 2] + [2, 1 << 26, 0, 1 << 26, 0])
