"""The exact search of bench/optimality.py against brute force on tiny problems.

1. Its successor enumeration (``legal_steps``) is exactly the set of single
   collectives the verified checker accepts, out of a superset of candidates
   that includes ill-typed ones, with the checker's received count.
2. Its optimum equals the least traffic over every plan of the class up to a
   length, found by enumerating plans and checking each with ``verishard.check``.
3. The hub encoding of permutes gives the same optimum as explicit permute edges.
"""

from __future__ import annotations

import importlib.util
import itertools
import random
import sys
from pathlib import Path

import pytest

import verishard as vs

_path = Path(__file__).resolve().parent.parent / "bench" / "optimality.py"
_spec = importlib.util.spec_from_file_location("bench_optimality", _path)
O = importlib.util.module_from_spec(_spec)
sys.modules["bench_optimality"] = O
_spec.loader.exec_module(O)

TINY = [((2, 3), (6, 6)), ((2, 2), (4, 2)), ((2, 3), (6, 3, 2)), ((2, 2, 3), (12, 2)), ((2, 2), (4, 4, 4)),
        ((3, 2), (6, 6, 6))]


def _candidate_types(P):
    """Every even type the constructor accepts (the search's class; uneven
    types are planned by the uneven pipeline), built independently of the search."""
    out = []
    for where in itertools.product(range(-1, P.rank), repeat=P.k):
        dims = [[a for a in range(P.k) if where[a] == d] for d in range(P.rank)]
        for orders in itertools.product(*(itertools.permutations(d) for d in dims)):
            try:
                t = vs.ArrayType.from_parts(P.mesh, P.gshape, orders)
            except vs.VerishardError:
                continue
            if not t.uneven:
                out.append(tuple(orders))
    return out


def _candidates(P, types):
    """A superset of the legal collectives: any axis sequence (repeats allowed),
    any dimension pair (equal ones too), any permute target."""
    seqs = [xs for n in range(1, P.k + 1) for xs in itertools.product(range(P.k), repeat=n)]
    for d in range(P.rank):
        for xs in seqs:
            yield ("S", d, xs)
            yield ("G", d, xs)
            for e in range(P.rank):
                yield ("A", d, e, xs)
    for t2 in types:
        yield ("P", t2)


def _verdict(P, t, c, guess):
    """The checker on the one-step plan [c] from t to guess: "ok" (accepted, with
    received), "other" (well typed but another result), or None (rejected)."""
    try:
        ok = vs.core.check(P.mesh, P.atype(t), P.atype(guess), [P.collective(c)])
    except vs.PlanError as e:
        return "other" if e.reason == "wrong_result" else None
    return ("ok", ok.received[0])


@pytest.mark.parametrize("sizes,gshape", TINY)
def test_legal_steps_match_checker(sizes, gshape):
    types = O.all_types(sizes, gshape)
    P = O.Problem(sizes, gshape, types[0], types[0])
    cand_types = _candidate_types(P)
    assert sorted(cand_types) == sorted(types)
    for t in types:
        mine = {c: (t2, w) for c, t2, w in O.legal_steps(P, t)}
        assert len(mine) == len(list(O.legal_steps(P, t)))
        cands = list(_candidates(P, cand_types))
        assert set(mine) <= set(cands)
        for c in cands:
            if c in mine:
                t2, w = mine[c]
                assert _verdict(P, t, c, t2) == ("ok", w), (P.show(t), c)
            else:
                assert _verdict(P, t, c, t) is None, (P.show(t), c)


def _brute(P, max_len, upto=None):
    """Least traffic over class plans of at most max_len steps, each plan checked
    whole; with ``upto``, only plans of traffic at most ``upto`` are looked for
    (None if there is none)."""
    types = O.all_types(P.sizes, P.gshape)
    step_cache = {}

    def steps(t):
        if t not in step_cache:
            step_cache[t] = [s for s in O.legal_steps(P, t)]
        return step_cache[t]

    best = [None if upto is None else upto + 1]
    order = {"S": 0, "A": 1, "P": 1, "G": 2}

    def ok_axes(c):
        if c[0] == "S":
            return all(a in P.dst_used for a in c[2])
        if c[0] == "G":
            return not any(a in P.dst_used for a in c[2])
        return True

    def rec(t, plan, phase, cost):
        if best[0] is not None and cost >= best[0]:
            return
        if t == P.dst:
            r = O.check_plan(P, plan)  # the verified checker on the whole plan
            assert r.traffic == cost
            assert r.peak <= max(P.size(P.src), P.size(P.dst))
            best[0] = cost
            return
        if len(plan) == max_len:
            return
        for c, t2, w in steps(t):
            if order[c[0]] < phase or not ok_axes(c) or (c[0] == "P" and t2 == t):
                continue
            rec(t2, plan + [c], order[c[0]], cost + w)

    rec(P.src, [], 0, 0)
    return None if upto is not None and best[0] == upto + 1 else best[0]


@pytest.mark.parametrize("sizes,gshape", TINY)
def test_optimum_matches_brute_force(sizes, gshape):
    types = O.all_types(sizes, gshape)
    rng = random.Random(7)
    pairs = [(a, b) for a in types for b in types if a != b]
    rng.shuffle(pairs)
    for a, b in pairs[:60]:
        P = O.Problem(sizes, gshape, a, b)
        opt, plan, _ = O.optimum(P)
        assert O.in_class(P, plan) and O.check_plan(P, plan).traffic == opt
        brute = _brute(P, max(4, len(plan)))
        assert brute == opt, (P.describe(), brute, opt)
        assert vs.core.lower_bound(P.atype(a), P.atype(b)) <= opt
        assert opt <= vs.plan(P.mesh, P.atype(a), P.atype(b)).traffic


def test_hub_equals_explicit_permutes():
    for k in (2, 3, 4):
        for i in range(15):
            P = O.random_problem(random.Random(f"t:{k}:{i}"), k)
            assert O.optimum(P)[0] == O.optimum(P, explicit_permutes=True)[0], P.describe()


def test_solve_small_random():
    for k in (2, 3, 4, 5):
        for i in range(5):
            r = O.solve(O.random_problem(random.Random(f"s:{k}:{i}"), k), cap=30)
            assert r["lb"] <= r["opt"] <= r["ours"]


def test_optimum_matches_brute_force_random():
    for k in (3, 4):
        for i in range(10):
            P = O.random_problem(random.Random(f"b:{k}:{i}"), k)
            opt, plan, _ = O.optimum(P)
            # any class plan of at most 5 steps and traffic <= opt: never below opt
            assert _brute(P, max(5, len(plan)), upto=opt) == opt, P.describe()
