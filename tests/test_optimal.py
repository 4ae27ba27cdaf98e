"""The certificate search (verishard.optimal) against a literal reference of
``Certify.certify``'s conditions, the verified checker and bench/optimality.py.

The reference (``_reference_check``) enumerates a superset of candidate
steps from every listed type, decides each with a literal transcription of
``Rules.apply`` and ``Checker.recv`` (cross-checked against the verified
checker on every accepted step), and reads lower bounds from the verified
core (``core.lower_bound``): it shares no code with the search.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import verishard as vs
from verishard import core
from verishard.optimal import Search, _Space, search

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from problems import draw_problem  # noqa: E402


# --- a literal reference of the checker's conditions ---------------------------


def _group(mesh, parts):
    return math.prod(mesh.part_sizes[p] for p in parts)


def _lsizes(mesh, dims):
    return tuple(g // _group(mesh, A) for g, A in dims)


def _wf(mesh, dims) -> bool:
    """``Types.wfb`` (mesh already checked)."""
    used = [p for _, A in dims for p in A]
    return (all(g > 0 and all(p < len(mesh.part_sizes) for p in A) and g % _group(mesh, A) == 0 for g, A in dims)
            and len(used) == len(set(used)))


def _apply(mesh, dims, c):
    """``Rules.apply`` on ``dims`` (``((g, parts), ...)``): the result, or None."""
    kind = c[0]
    if kind == "P":
        t2 = c[1]
        ok = (_wf(mesh, t2) and len(t2) == len(dims) and [g for g, _ in t2] == [g for g, _ in dims]
              and _lsizes(mesh, t2) == _lsizes(mesh, dims))
        return t2 if ok else None
    if kind in ("G", "S"):
        d, xs = c[1], c[2]
        if d >= len(dims) or not xs:
            return None
        g, A = dims[d]
        if kind == "G":
            if len(xs) > len(A) or A[len(A) - len(xs):] != xs:
                return None
            return dims[:d] + ((g, A[:len(A) - len(xs)]),) + dims[d + 1:]
        used = {p for _, B in dims for p in B}
        if (any(p >= len(mesh.part_sizes) for p in xs) or len(set(xs)) != len(xs) or any(p in used for p in xs)
                or _lsizes(mesh, dims)[d] % _group(mesh, xs)):
            return None
        return dims[:d] + ((g, A + xs),) + dims[d + 1:]
    d, e, xs = c[1], c[2], c[3]
    if d == e or d >= len(dims) or e >= len(dims) or not xs:
        return None
    (g, A), (h, E) = dims[d], dims[e]
    if len(xs) > len(A) or A[len(A) - len(xs):] != xs or _lsizes(mesh, dims)[e] % _group(mesh, xs):
        return None
    out = list(dims)
    out[d], out[e] = (g, A[:len(A) - len(xs)]), (h, E + xs)
    return tuple(out)


def _strip1(mesh, A):
    return tuple(p for p in A if mesh.part_sizes[p] != 1)


def _recv(mesh, dims, c, dims2) -> int:
    """``Checker.recv``."""
    s = math.prod(_lsizes(mesh, dims))
    if c[0] == "G":
        return (_group(mesh, c[2]) - 1) * s
    if c[0] == "S":
        return 0
    if c[0] == "A":
        return s - s // _group(mesh, c[3])
    moves = any(_strip1(mesh, A) != _strip1(mesh, B) for (_, A), (_, B) in zip(dims, dims2))
    return s if moves else 0


def _all_types(mesh, gshape):
    """Every well-formed type of global shape ``gshape``, independently of the search."""
    k, out = len(mesh.part_sizes), []
    for where in itertools.product(range(-1, len(gshape)), repeat=k):
        groups = [[p for p in range(k) if where[p] == d] for d in range(len(gshape))]
        for orders in itertools.product(*(itertools.permutations(G) for G in groups)):
            dims = tuple(zip(gshape, orders))
            if _wf(mesh, dims):
                out.append(dims)
    return out


def _candidates(mesh, dims, types):
    """A superset of the steps ``Rules.apply`` accepts from ``dims``: every
    sequence of distinct parts on every dimension (pair), every permute target."""
    k, r = len(mesh.part_sizes), len(dims)
    seqs = [xs for n in range(1, k + 1) for xs in itertools.permutations(range(k), n)]
    for d in range(r):
        for xs in seqs:
            yield ("G", d, xs)
            yield ("S", d, xs)
            for e in range(r):
                yield ("A", d, e, xs)
    for t2 in types:
        yield ("P", t2)


def _dims(t: vs.ArrayType):
    return tuple((d.global_size, d.parts) for d in t.dims)


def _atype(mesh, dims):
    return vs.ArrayType.from_parts(mesh, [g for g, _ in dims], [A for _, A in dims])


def _collective(mesh, c):
    if c[0] == "G":
        return vs.AllGather(c[1], mesh.names(c[2]))
    if c[0] == "S":
        return vs.DynSlice(c[1], mesh.names(c[2]))
    if c[0] == "A":
        return vs.AllToAll(c[1], c[2], mesh.names(c[3]))
    return vs.AllPermute(_atype(mesh, c[1]))


def _reference_check(mesh, dst, cap, entries, T, src) -> str | None:
    """``Certify.certify_traffic`` read literally: None when accepted, else
    the first failed condition. Every accepted step is also run through the
    verified checker, which must agree on its result and received count."""
    if any(s < 2 for s in mesh.part_sizes):
        return "a part of size below 2"
    lbs: dict = {}

    def pot(dims):
        for u, du in entries:
            if _dims(u) == dims:
                return du
        if dims not in lbs:
            lbs[dims] = core.lower_bound(_atype(mesh, dims), dst)
        return lbs[dims]

    if pot(_dims(dst)) != 0:
        return "pot(dst) != 0"
    if T > pot(_dims(src)):
        return f"T = {T} above pot(src) = {pot(_dims(src))}"
    types = _all_types(mesh, src.global_shape)
    for u, du in entries:
        dims = _dims(u)
        if u.size > cap:
            continue
        if du > pot(dims):
            return f"entry {u} at {du} above its potential {pot(dims)}"
        for c in _candidates(mesh, dims, types):
            v = _apply(mesh, dims, c)
            if v is None:
                continue
            w = _recv(mesh, dims, c, v)
            ok = core.check(mesh, u, _atype(mesh, v), [_collective(mesh, c)])
            assert ok.received == (w,), (u, c, ok.received, w)
            if math.prod(_lsizes(mesh, v)) <= cap and du > w + pot(v):
                return f"step {c} from {u} ({du}) to {_atype(mesh, v)} receives {w}, potential {pot(v)}"
    return None


# --- random problems -------------------------------------------------------------


def _rand_axes(rng, k, rank):
    dims = [[] for _ in range(rank)]
    order = list(range(k))
    rng.shuffle(order)
    for a in order:
        if rng.random() < 0.7:
            dims[rng.randrange(rank)].append(a)
    return tuple(tuple(d) for d in dims)


def _random_problem(rng, ks=(2, 3), ranks=(1, 2, 3)):
    """A mesh of 2-3 parts of sizes 2/3 and two types of rank 1-3 (as bench/optimality.py's)."""
    while True:
        k, rank = rng.choice(ks), rng.choice(ranks)
        sizes = tuple(rng.choice((2, 3)) for _ in range(k))
        src, dst = _rand_axes(rng, k, rank), _rand_axes(rng, k, rank)
        if src == dst:
            continue
        grp = lambda A: math.prod(sizes[a] for a in A)
        gshape = tuple(math.lcm(grp(a), grp(b)) * rng.choice((1, 2)) for a, b in zip(src, dst))
        mesh = vs.Mesh(tuple((f"a{i}", s) for i, s in enumerate(sizes)))
        return mesh, vs.ArrayType.from_parts(mesh, gshape, src), vs.ArrayType.from_parts(mesh, gshape, dst)


def _problems(tag, n, trivial, **kw):
    """The first ``n`` random problems where our plan is above the lower bound
    (the others certify with no entries), and the first ``trivial`` where it is not."""
    hard, easy = [], []
    for i in itertools.count():
        pr = _random_problem(random.Random(f"{tag}:{i}"), **kw)
        p = vs.plan(*pr)
        (hard if p.traffic > p.lower_bound else easy).append(pr)
        if len(hard) >= n and len(easy) >= trivial:
            return hard[:n] + easy[:trivial]


PROBLEMS = _problems("optimal", 24, 4) + _problems("optimal4", 8, 0, ks=(4,), ranks=(2, 3))


def _assert_better(p, r: Search, cap: int):
    """A cheaper plan the verified checker accepts, within the cap."""
    ok = vs.check(p.mesh, p.src, p.dst, list(r.better))
    assert ok.traffic == r.better_traffic == r.certified < p.traffic
    assert ok.peak <= cap


def _agreed(mesh, dst, cap, entries, T, src):
    """The reference's verdict, asserted equal to the verified checker's
    (``core.certify``, ``Certify.certify_traffic``) on the same certificate."""
    ref = _reference_check(mesh, dst, cap, entries, T, src)
    assert core.certify(src, dst, cap, list(entries), T) == (ref is None), (str(src), str(dst), cap, T, ref)
    return ref


# --- tests -------------------------------------------------------------------------


@pytest.mark.parametrize("i", range(len(PROBLEMS)))
@pytest.mark.parametrize("factor", [1, 2])
def test_plan_certified_or_beaten(i, factor):
    """Our plan's traffic is certified, or a cheaper checked plan comes with
    a certificate of its own figure; the reference accepts the certificate
    (for the bound, and for twice the bound, which may admit cheaper plans)."""
    p = vs.plan(*PROBLEMS[i])
    cap = factor * p.bound
    r = search(p.mesh, p.src, p.dst, p.traffic, cap)
    assert r.gave_up is None and r.entries is not None
    if r.better is None:
        assert r.certified == p.traffic and r.better_traffic is None
    else:
        _assert_better(p, r, cap)
    assert p.lower_bound <= r.certified
    for u, du in r.entries:
        assert u.mesh is p.mesh and du > 0
    assert r.entries == () or r.entries[0][0] == p.src
    assert _agreed(p.mesh, p.dst, cap, r.entries, r.certified, p.src) is None


@pytest.mark.parametrize("i", [i for i, (_, s, d) in enumerate(PROBLEMS) if s.size != d.size][::2])
def test_unreachable_target_certifies_anything(i):
    """With the cap below the target's size no plan is within it: the search
    settles every type it can reach and certifies any figure, and the
    reference accepts that large certificate too."""
    p = vs.plan(*PROBLEMS[i])
    if p.dst.size < p.src.size:
        p = vs.plan(p.mesh, p.dst, p.src)
    r = search(p.mesh, p.src, p.dst, 10**6, p.src.size)
    assert r.better is None and r.certified == 10**6 and len(r.entries) == r.settled
    assert _agreed(p.mesh, p.dst, p.src.size, r.entries, 10**6, p.src) is None


@pytest.mark.parametrize("i", range(0, len(PROBLEMS), 3))
def test_tampered_certificates_fail(i):
    """A certificate claiming one more than the optimum is refused, whichever
    way it is raised: a plan at the optimum exists within the bound (soundness)."""
    p = vs.plan(*PROBLEMS[i])
    r = search(p.mesh, p.src, p.dst, p.traffic + 1, p.bound)
    opt, ents = r.better_traffic, r.entries
    assert opt is not None and opt <= p.traffic
    assert _agreed(p.mesh, p.dst, p.bound, ents, opt, p.src) is None
    assert _agreed(p.mesh, p.dst, p.bound, ents, opt + 1, p.src) is not None
    raised = tuple((u, du + 1) for u, du in ents)
    assert _agreed(p.mesh, p.dst, p.bound, raised, opt + 1, p.src) is not None
    src_up = ((p.src, opt + 1),) + ents
    assert _agreed(p.mesh, p.dst, p.bound, src_up, opt + 1, p.src) is not None
    # a later entry for a listed type does not change its potential (the first
    # entry's, as the checker's table by type key finds it): a higher one is refused
    if ents:
        again_up = ents + ((ents[0][0], ents[0][1] + 1),)
        assert _agreed(p.mesh, p.dst, p.bound, again_up, opt, p.src) is not None
        again_down = ents + ((ents[0][0], ents[0][1] - 1),)
        assert _agreed(p.mesh, p.dst, p.bound, again_down, opt, p.src) is None


@pytest.mark.parametrize("i", range(1, len(PROBLEMS), 4))
def test_weaker_figures_certify(i):
    """Any figure up to the optimum is certified (by a smaller search), and
    the reference accepts it; a figure above it yields the optimum."""
    p = vs.plan(*PROBLEMS[i])
    opt = search(p.mesh, p.src, p.dst, p.traffic + 1, p.bound).better_traffic
    for T in sorted({0, p.lower_bound, (p.lower_bound + opt) // 2, opt}):
        r = search(p.mesh, p.src, p.dst, T, p.bound)
        assert r.better is None and r.certified == T
        assert _agreed(p.mesh, p.dst, p.bound, r.entries, T, p.src) is None
    r = search(p.mesh, p.src, p.dst, opt + 5, p.bound)
    assert r.better_traffic == opt


def test_lower_bound_matches_core():
    """The vectorised lower bound is ``Traffic.lower_bound`` (the verified core's)."""
    rng = random.Random(7)
    for mesh, src, dst in PROBLEMS[:8] + [_random_problem(rng, ks=(4,), ranks=(2, 3)) for _ in range(3)]:
        space = _Space(mesh.part_sizes, dst.global_shape, tuple(d.parts for d in dst.dims))
        types = _all_types(mesh, dst.global_shape)
        for dims in rng.sample(types, min(40, len(types))):
            raw = tuple(A for _, A in dims)
            assert space.lower_bound(raw) == core.lower_bound(_atype(mesh, dims), dst), (mesh, dims, dst)


def _load_optimality():
    mod = sys.modules.get("bench_optimality")
    if mod is None:
        spec = importlib.util.spec_from_file_location("bench_optimality", ROOT / "bench" / "optimality.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["bench_optimality"] = mod
        spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("seed,k", [(0, 2), (1, 2), (2, 3), (3, 3), (4, 3), (5, 4), (0, 2)])
def test_against_normal_form_optimum(seed, k):
    """lower bound <= optimum over all plans within the bound <= optimum
    over normal-form plans (bench/optimality.py) <= ours."""
    O = _load_optimality()
    P = O.random_problem(random.Random(f"0:{k}:{seed}"), k)
    nf, _, _ = O.optimum(P)
    p = vs.plan(P.mesh, P.atype(P.src), P.atype(P.dst))
    r = search(p.mesh, p.src, p.dst, p.traffic + 1, p.bound)
    assert p.lower_bound <= r.better_traffic <= nf <= p.traffic
    _assert_better_or_equal = vs.check(p.mesh, p.src, p.dst, list(r.better))
    assert _assert_better_or_equal.traffic == r.better_traffic and _assert_better_or_equal.peak <= p.bound


@pytest.mark.parametrize("mesh,src,dst", [
    ("x=4,y=3", "[3{x}12, 6]", "[12, 2{y}6]"),
    ("x=4,y=3", "[1{x,y}12, 4]", "[4{y}12, 1{x}4]"),
    ("x=2,y=6", "[1{y}6, 6{x}12]", "[3{x}6, 2{y}12]"),
    ("x=4,y=2", "[2{y}4, 2{x}8]", "[1{x}4, 4{y}8]"),
])
def test_composite_parts(mesh, src, dst):
    """Parts of size 4 or 6: over the user's mesh (no split) and over the
    plan's mesh (split where the plan needs it)."""
    m = vs.Mesh.parse(mesh)
    s, d = vs.ArrayType.parse(src, m), vs.ArrayType.parse(dst, m)
    p = vs.plan(m, s, d)
    for mm, a, b in ((m, s, d), (p.mesh, p.src, p.dst)):
        r = search(mm, a, b, p.traffic, p.bound)
        assert r.gave_up is None and p.lower_bound <= r.certified <= p.traffic
        if r.better is not None:
            ok = vs.check(mm, a, b, list(r.better))
            assert ok.traffic == r.better_traffic and ok.peak <= p.bound
        assert _agreed(mm, b, p.bound, r.entries, r.certified, a) is None


def test_split_mesh_names():
    """Over a mesh with split axes the steps name parts as the mesh prints them."""
    m = vs.Mesh.parse("x=2*3, y=2")
    src, dst = vs.ArrayType.parse("[9, 2{x.1}6, 2]", m), vs.ArrayType.parse("[3{x.1}9, 3{y}6, 2]", m)
    bound = max(src.size, dst.size)
    r = search(m, src, dst, 10**6, bound)
    ok = vs.check(m, src, dst, list(r.better))
    assert ok.traffic == r.better_traffic and ok.peak <= bound
    assert _agreed(m, dst, bound, r.entries, r.certified, src) is None


def test_bad_input():
    m = vs.Mesh.parse("x=2,y=3")
    src, dst = vs.ArrayType.parse("[3{x}6]", m), vs.ArrayType.parse("[2{y}6]", m)
    other = vs.ArrayType.parse("[3{x}6]", "x=2,z=3")
    with pytest.raises(vs.ShardingError, match="over mesh"):
        search(m, other, dst, 5, 3)
    with pytest.raises(vs.ShardingError, match="over mesh"):
        search(vs.Mesh.parse("x=2,z=3"), src, dst, 5, 3)
    with pytest.raises(vs.ShardingError, match="global shapes"):
        search(m, src, vs.ArrayType.parse("[4{y}12]", m), 5, 6)
    with pytest.raises(vs.ShardingError, match="pending"):
        search(m, vs.ArrayType.parse("[6] partial{x}", m), dst, 5, 6)
    with pytest.raises(vs.ShardingError, match="divisible"):
        search(m, vs.ArrayType.parse("[3{x}5]", m), vs.ArrayType.parse("[5]", m), 5, 6)
    with pytest.raises(vs.VerishardError):
        search(m, src, dst, -1, 3)
    with pytest.raises(vs.ShardingError):
        search("x=2,y=3", src, dst, 5, 3)
    one = vs.Mesh.parse("x=2,u=1")
    r = search(one, vs.ArrayType.parse("[1{x}2]", one), vs.ArrayType.parse("[2]", one), 5, 2)
    assert r.entries is None and "size 1" in r.gave_up
    r = search(m, src, dst, 5, 2)
    assert r.entries is None and "above the cap" in r.gave_up
    mesh, a, b = PROBLEMS[0]
    r = search(mesh, a, b, 10**6, 10**6, max_states=1)
    assert r.entries is None and "states" in r.gave_up


def test_trivial_problems():
    """src == dst: the empty plan is optimal; a figure at the lower bound needs no entries."""
    m = vs.Mesh.parse("x=2,y=3")
    t = vs.ArrayType.parse("[3{x}6, 4]", m)
    r = search(m, t, t, 1, t.size)
    assert r.better == () and r.better_traffic == 0 and r.entries == ()
    r = search(m, t, t, 0, t.size)
    assert r.better is None and r.entries == () and r.certified == 0


# --- plan(..., minimal=True), end to end ------------------------------------------------

MINIMAL = [("x=2,y=3", "[9, 2{y}6]", "[3{y}9, 3{x}6]"),         # a cheaper plan of collectives exists
           ("x=2,y=3", "[9, 2{y}6, 2]", "[3{y}9, 3{x}6, 2]"),     # ... and the exchange receives less still
           ("x=2,y=4", "[8, 2{y}8, 2]", "[2{y}8, 4{x}8, 2]"),     # ... (the plan of collectives over y=2*2)
           ("x=2,y=2,z=2", "[12, 3{y}6]", "[3{y,x}12, 6]"),       # a cheaper plan of collectives
           ("x=2,y=3", "[3{x}6]", "[2{y}6]"),                     # the pipeline's plan is certified
           ("x=3,y=2", "[6{y}12, 3{x}9, 1]", "[4{x}12, 9, 1]")]


@pytest.mark.parametrize("mesh,src,dst", MINIMAL)
def test_plan_minimal(mesh, src, dst):
    """The certified plan is verified, accepted by the checker at its traffic,
    within the bound, no worse than the pipeline's or the exchange's,
    certified by the core (a plan of collectives: by a certificate; the
    exchange: at the lower bound), and moves the data as its types say
    (simulator, data checked)."""
    import numpy as np
    from verishard.plan import is_verified
    from verishard.runtime import distribute
    from verishard.runtime.simulator import simulate

    p, m = vs.plan(mesh, src, dst), vs.plan(mesh, src, dst, minimal=True)
    assert m.minimal and is_verified(m) and not p.minimal
    e = vs.plan(mesh, src, dst, exchange=True)
    assert m.lower_bound <= m.traffic <= min(p.traffic, e.traffic) and m.peak <= m.bound == p.bound
    again = vs.check(m.mesh, m.src, m.dst, list(m.collectives))
    assert (again.traffic, again.peak) == (m.traffic, m.peak)
    fsrc, fdst = m.src.refined(), m.dst.refined()
    if m.exchange:
        assert m.traffic == m.lower_bound
    else:
        assert core.certify(fsrc, fdst, m.bound, search(fsrc.mesh, fsrc, fdst, m.traffic, m.bound).entries,
                            m.traffic)
    assert "Eminimalproof.emplan_least" in str(m)
    A = np.arange(math.prod(m.src.global_shape), dtype=np.int32).reshape(m.src.global_shape)
    out = simulate(m, distribute(A, m.mesh, m.src)).outputs
    for got, want in zip(out, distribute(A, m.mesh, m.dst)):
        assert np.array_equal(got, want)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_minimal_least_of_both(data):
    """On random problems over meshes of 1-2 axes (sizes 2, 3): minimal=True
    receives no more than the pipeline's plan or exchange=True's, stays
    within the bound, and is the exchange only at the lower bound, with a
    free dimension."""
    mesh, a, b = draw_problem(data, max_axes=2)
    p, e = vs.plan(mesh, a, b), vs.plan(mesh, a, b, exchange=True)
    try:
        m = vs.plan(mesh, a, b, minimal=True)
    except vs.PlanError as err:       # the search's budget, never the core's refusal
        assert "cannot certify" in str(err)
        return
    assert m.lower_bound <= m.traffic <= min(p.traffic, e.traffic) and m.peak <= m.bound
    if m.exchange:
        assert m.traffic == m.lower_bound and m.collectives[0].dim is not None
    else:
        assert vs.check(m.mesh, m.src, m.dst, list(m.collectives)).traffic == m.traffic


def test_plan_minimal_refusals():
    """What minimal=True does not certify gets one clear error."""
    with pytest.raises(vs.ShardingError, match="nothing pending"):
        vs.plan("x=2", "[4] partial{x}", "[2{x}4]", minimal=True)
    # minimal=True compares the exchange already: exchange=True adds nothing
    both = vs.plan("x=2,y=3", "[9, 2{y}6, 2]", "[3{y}9, 3{x}6, 2]", minimal=True, exchange=True)
    assert both == vs.plan("x=2,y=3", "[9, 2{y}6, 2]", "[3{y}9, 3{x}6, 2]", minimal=True)

def test_plan_minimal_gives_up(monkeypatch):
    """A search out of budget is one clear PlanError naming the plain plan."""
    from verishard import optimal
    from verishard.plan import _minimal
    real = optimal.search
    monkeypatch.setattr(optimal, "search", lambda *a, **k: real(*a, **{**k, "max_states": 1}))
    _minimal.cache_clear()
    with pytest.raises(vs.PlanError, match="cannot certify.*more than 1 states.*traffic 15"):
        vs.plan("x=2,y=3", "[9, 2{y}6]", "[3{y}9, 3{x}6]", minimal=True)


@pytest.mark.parametrize("mesh,src,dst", [("u=1,x=2,y=3", "[9, 2{y,u}6]", "[3{u,y}9, 3{x}6]"),
                                          ("u=1,x=2,y=3", "[9, 2{y,u}6, 1]", "[3{u,y}9, 3{x}6, 1]")])
def test_plan_minimal_unit_axes(mesh, src, dst):
    """Axes of size 1 shard nothing: the certificate is over the prime
    sub-axes without them (Refineplan.refine_check drops the steps over them),
    and a cheaper plan found there gets permutes that move nothing to drop and
    restore them."""
    p, m = vs.plan(mesh, src, dst), vs.plan(mesh, src, dst, minimal=True)
    assert m.minimal and m.traffic < p.traffic and m.peak <= m.bound
    fine, groups = p.src.mesh.prime_parts()
    assert all(n > 1 for n in fine.part_sizes)
    edges = [s for s in m.steps if isinstance(s.collective, vs.AllPermute)]
    assert edges and all(s.received == 0 for s in edges)


def test_mplan_refuses_doctored_candidates():
    """minimal=True is one verified call (Eminimal.emplan_problem, through
    Minimal.mplan_problem): a candidate or certificate doctored by a faulty
    search is refused there, whatever the search claims: a dearer plan than
    the certificate's figure, a plan above the bound, one that does not end
    at the target, a certificate raised or emptied. (No free dimension: the
    exchange is not compared.)"""
    from verishard import AllGather, DynSlice
    mesh, src, dst = vs.Mesh.parse("x=2,y=3"), "[9, 2{y}6]", "[3{y}9, 3{x}6]"
    s, d = vs.ArrayType.parse(src, mesh), vs.ArrayType.parse(dst, mesh)
    fine, groups = mesh.prime_parts()
    assert fine == mesh                      # (every part prime: candidates over the mesh itself)
    p = vs.plan(mesh, s, d)
    found = search(fine, s, d, p.traffic, p.bound)
    assert found.better_traffic == 12 < p.traffic == 15
    good = core.mplan(mesh, s, d, found.better, found.entries)
    assert sum(good.received) == 12 and good.peak <= p.bound
    # the pipeline's plan (15) offered with the certificate for 12: its own traffic is not certified
    with pytest.raises(vs.PlanError, match="traffic 15 least") as e:
        core.mplan(mesh, s, d, list(p.collectives), found.entries)
    assert e.value.reason == "not_least"
    # a plan that gathers the whole of dimension 1 (54 elements per device) before slicing
    over = [AllGather(1, "y"), DynSlice(0, "y"), DynSlice(1, "x")]
    assert vs.check(mesh, s, d, over).peak > p.bound
    with pytest.raises(vs.PlanError, match="above the bound") as e:
        core.mplan(mesh, s, d, over, found.entries)
    assert e.value.reason == "above_bound"
    # one that stops short of the target
    with pytest.raises(vs.PlanError, match="refused the candidate") as e:
        core.mplan(mesh, s, d, list(found.better[:-1]), found.entries)
    assert e.value.reason == "wrong_result"
    # the right plan with a certificate raised by one, or with none
    raised = [(t, f + 1) for t, f in found.entries]
    for entries in (raised, []):
        with pytest.raises(vs.PlanError, match="traffic 12 least"):
            core.mplan(mesh, s, d, found.better, entries)


def test_mplan_exchange_needs_no_certificate():
    """Where a free dimension lets the exchange run in pieces and it receives
    less than the candidate, the core returns it whatever the certificate
    (it receives the lower bound): the known case, 21 for the least plan of
    collectives and 18 for the exchange at the same peak."""
    from verishard.collectives import Exchange
    mesh = vs.Mesh.parse("x=2,y=3")
    s, d = vs.ArrayType.parse("[9, 2{y}6, 2]", mesh), vs.ArrayType.parse("[3{y}9, 3{x}6, 2]", mesh)
    p = vs.plan(mesh, s, d)
    found = search(mesh, s, d, p.traffic, p.bound)
    assert found.better_traffic == 21 < p.traffic == 30
    for cand, entries in ((None, []), (list(p.collectives), found.entries), (found.better, found.entries),
                          (found.better, [])):
        r = core.mplan(mesh, s, d, cand, entries)
        assert r.collectives == (Exchange(d, 2),) and r.received == (18,) and r.peak == p.bound
    # the candidate is still checked first: one above the bound is refused, not replaced
    from verishard import AllGather, DynSlice
    with pytest.raises(vs.PlanError, match="above the bound"):
        core.mplan(mesh, s, d, [AllGather(1, "y"), DynSlice(0, "y"), DynSlice(1, "x")], found.entries)


def test_minimal_search_only_proposes(monkeypatch):
    """plan(..., minimal=True) returns what the core accepts, not what the
    search claims: a search reporting a doctored plan gets a PlanError."""
    from verishard import AllGather, DynSlice, optimal
    from verishard.plan import _minimal
    real = optimal.search

    def lying(*a, **k):
        r = real(*a, **k)
        return Search(r.entries, r.certified, (AllGather(1, "y"), DynSlice(0, "y"), DynSlice(1, "x")),
                      r.better_traffic, r.settled, r.seconds)

    monkeypatch.setattr(optimal, "search", lying)
    _minimal.cache_clear()
    try:
        with pytest.raises(vs.PlanError, match="above the bound"):
            vs.plan("x=2,y=3", "[9, 2{y}6]", "[3{y}9, 3{x}6]", minimal=True)
    finally:
        _minimal.cache_clear()


def test_cli_minimal_round_trip(tmp_path):
    """--minimal names the theorem; its JSON is re-checked by `verishard check`."""
    import subprocess
    exe = [sys.executable, "-m", "verishard.cli"]
    args = ["plan", "--mesh", "x=2,y=3", "--src", "[9, 2{y}6, 2]", "--dst", "[3{y}9, 3{x}6, 2]", "--minimal"]
    table = subprocess.run(exe + args, capture_output=True, text=True)
    assert table.returncode == 0 and "Eminimalproof.emplan_least" in table.stdout
    assert "not proved minimal" not in table.stdout
    doc = subprocess.run(exe + args + ["--format", "json"], capture_output=True, text=True)
    assert doc.returncode == 0 and '"minimal": true' in doc.stdout and '"traffic": 18' in doc.stdout
    f = tmp_path / "plan.json"
    f.write_text(doc.stdout)
    checked = subprocess.run(exe + ["check", str(f)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_minimal_plans_run_on_jax():
    """Certified plans leave normal form (a slice by an axis the target does
    not use, gathered back later); the JAX backend runs them on 8 devices to
    exactly the target layout."""
    import os
    if "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    jax = pytest.importorskip("jax")
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 JAX devices")
    import numpy as np
    from verishard.jax.sharding import jax_mesh, to_named_sharding
    from verishard.jax import backend as rj

    cases = [("x=2,y=2,z=2", "[12, 3{y}6]", "[3{y,x}12, 6]"),        # slice z, permute, gather z back
             ("x=2,y=2,z=2", "[4{z}8, 3{x}6, 1]", "[2{x,z}8, 6, 1]")]
    for mesh, src, dst in cases:
        m = vs.plan(mesh, src, dst, minimal=True)
        A = np.arange(math.prod(m.src.global_shape), dtype=np.float32).reshape(m.src.global_shape)
        x = jax.device_put(A, to_named_sharding(m.src, jax_mesh(m.mesh)))
        y = rj.execute(m, x)
        assert np.array_equal(np.asarray(y), A)
        want = to_named_sharding(m.dst, jax_mesh(m.mesh))
        for shard in y.addressable_shards:
            assert np.array_equal(np.asarray(shard.data), A[want.devices_indices_map(A.shape)[shard.device]])
