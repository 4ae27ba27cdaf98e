"""Every integer crossing the bindings (module.cpp -> stubs.c -> glue.ml and
back) at full width, for every entry of bindings/module.cpp: 2^31 + 1 (past
a 32-bit int), the element cap 2^50 and the documented caps
(verishard/limits.py), both directions.

``CASES`` holds one case per entry. A case runs at two scales, "2^31+1" and
"2^50": its sizes, ranks, budgets and figures are built from the scale's
value (at "2^50", the largest the caps allow for the case's shape: 2^50 - 2
elements for an even split over 2 devices). Each case checks that its inputs
reach the core intact (the answer is the one those exact values give: it
echoes them, or figures computed from them) and that its outputs above 2^31
reach Python intact (peaks, received counts, lower bounds, offsets, global
sizes of the types in a report, ranks, boxes). ``RAW`` encodes every entry's
input by hand, past the Python layer, so that the caps are tested at the
glue for every entry: one element past 2^50, one device past 2^20 and an
integer at 2^62 are refused with the cap's message. A new entry in
module.cpp without a case and a raw encoding fails
``test_every_entry_has_a_width_case``.

The last test plants a 32-bit truncation in a copy of bindings/stubs.c,
builds that core (build/vscore.o, as `make core` leaves it) and expects
every entry's case to fail against it. (The scales' values are chosen so
that a truncated budget is negative, refused at once: a budget cut to a few
elements would make millions of cuts.)
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verishard import AllGather, AllToAll, ArrayType, DynSlice, Mesh, ReduceScatter, _core, core
from verishard.collectives import AllPermute, Exchange
from verishard.errors import LimitError
from verishard.limits import CORE_INT_LIMIT, MAX_DEVICES, MAX_ELEMENTS, MAX_INDEX

ROOT = Path(__file__).resolve().parent.parent
WIDE = 2**31 + 1
CAP_ELEMENTS = MAX_ELEMENTS   # 2^50
CAP_DEVICES = MAX_DEVICES     # 2^20
CORE_LIMIT = CORE_INT_LIMIT   # module.cpp: the binding takes [0, 2^62)
SCALES = {"2^31+1": WIDE, "2^50": CAP_ELEMENTS}
BUDGET = CAP_ELEMENTS - 1     # a budget within the cap (truncated to 32 bits: -1, refused)


def _parse(mesh: Mesh | str, text: str) -> ArrayType:
    return ArrayType.parse(text, mesh)


def _half(v: int) -> int:
    """Half a global size at scale ``v``: 2^31 + 1, or 2^49 - 1 (the global 2^50 - 2, within the cap)."""
    return min(v, CAP_ELEMENTS // 2 - 1)


def _factor(v: int, elements: int) -> int:
    """A factor F at scale ``v`` for a shape of ``elements * F`` elements: 2^31 + 1, or the
    largest 2^k - 1 keeping ``elements * F`` within the cap."""
    return min(v, (1 << (CAP_ELEMENTS // elements).bit_length() - 1) - 1)


# --- one case per entry ------------------------------------------------------

CASES: dict[str, object] = {}


def case(*entries: str):
    def register(fn):
        for e in entries:
            CASES[e] = fn
        return fn
    return register


def _even(v: int):
    """``[h{x}2h] -> [2h]`` over x=2: each device holds h and needs 2h."""
    h = _half(v)
    m = Mesh.parse("x=2")
    return m, h, _parse(m, f"[{h}{{x}}{2 * h}]"), _parse(m, f"[{2 * h}]")


@case("plan")
def _plan_raw(v):
    # `_core.plan` (Pipeline.plan_problem), called by no Python function: its answer read as core.plan's.
    m, h, src, dst = _even(v)
    out = core._call(_core.plan, m.encode() + src.encode() + dst.encode())
    r = core._planned(m, out, ArrayType.decode)
    assert r.collectives == (AllGather(0, "x"),) and r.types == (src, dst)
    assert r.received == (h,) and r.peak == 2 * h


@case("pplan")
def _plan_even(v):
    m, h, src, dst = _even(v)
    r = core.plan(m, src, dst)
    assert r.types == (src, dst) and r.received == (h,) and r.peak == 2 * h
    # with the sum pending: a reduce-scatter receives the other device's partial half
    s = _parse(m, f"[{2 * h}] partial{{x}}")
    r = core.plan(m, s, src)
    assert r.collectives == (ReduceScatter(0, "x"),) and r.types == (s, src)
    assert r.received == (h,) and r.peak == 2 * h


@case("eplan")
def _eplan(v):
    m, h, src, dst = _even(v)
    r = core.eplan(m, src, dst)
    assert r.types == (src, dst) and r.received == (h,) and r.peak == 2 * h
    # the exchange taken (its answer [2; dim; peak; received]): 3F received, peak 4F
    m2 = Mesh.parse("x=2,y=2")
    f = _factor(v, 16)
    s, d = _parse(m2, f"[1{{x,y}}4, 4, {f}]"), _parse(m2, f"[4, 1{{y,x}}4, {f}]")
    r = core.eplan(m2, s, d)
    assert r.collectives == (Exchange(d, 2),) and r.received == (3 * f,) and r.peak == 4 * f


@case("ueplan")
def _ueplan(v):
    m = Mesh.parse("x=2,y=2")
    f = _factor(v, 20)
    s, d = _parse(m, f"[2{{x,y}}5, 4, {f}]"), _parse(m, f"[5, 1{{y,x}}4, {f}]")
    r = core.eplan(m, s, d)
    assert r.collectives == (Exchange(d, 2),) and r.received == (5 * f,) and r.peak == 8 * f


def _uneven(v: int):
    """``[(h+1){x}(2h+1)] -> [2h+1]`` over x=2."""
    h = _half(v)
    m = Mesh.parse("x=2")
    return m, h, _parse(m, f"[{h + 1}{{x}}{2 * h + 1}]"), _parse(m, f"[{2 * h + 1}]")


@case("uplan")
def _uplan(v):
    m, h, src, dst = _uneven(v)
    r = core.plan(m, src, dst)
    assert r.collectives == (AllGather(0, "x"),) and r.types == (src, dst)
    assert r.received == (h + 1,) and r.peak == 2 * h + 1


@case("check")
def _check(v):
    m, h, src, dst = _even(v)
    ok = core.check(m, src, dst, [AllGather(0, "x")])
    assert ok.types == (src, dst) and ok.peak == 2 * h and ok.received == (h,)


@case("pcheck")
def _pcheck(v):
    m, h, src, _ = _even(v)
    s = _parse(m, f"[{2 * h}] partial{{x}}")
    ok = core.check(m, s, src, [ReduceScatter(0, "x")])
    assert ok.types == (s, src) and ok.peak == 2 * h and ok.received == (h,)


@case("ucheck")
def _ucheck(v):
    m, h, src, dst = _uneven(v)
    ok = core.check(m, src, dst, [AllGather(0, "x")])
    assert ok.types == (src, dst) and ok.peak == 2 * h + 1 and ok.received == (h + 1,)


@case("echeck")
def _echeck(v):
    m, h = Mesh.parse("x=2"), _factor(v, 4)
    s, d = _parse(m, f"[{h}{{x}}{2 * h}, 2]"), _parse(m, f"[{2 * h}, 1{{x}}2]")
    ok = core.check(m, s, d, [Exchange(d)])
    assert ok.types == (s, d) and ok.peak == 2 * h and ok.received == (h,)


@case("uecheck")
def _uecheck(v):
    m, h = Mesh.parse("x=2"), _factor(v, 4)
    s, d = _parse(m, f"[{h + 1}{{x}}{2 * h + 1}, 2]"), _parse(m, f"[{2 * h + 1}, 1{{x}}2]")
    ok = core.check(m, s, d, [Exchange(d)])
    assert ok.types == (s, d) and ok.peak == 2 * h + 2 and ok.received == (h + 1,)


def _partial_uneven(v: int):
    m, h, src, _ = _uneven(v)
    return m, h, _parse(m, f"[{2 * h + 1}] partial{{x}}"), src


@case("puplan_checked")
def _puplan(v):
    m, h, s, d = _partial_uneven(v)
    r = core.plan(m, s, d)
    assert r.collectives == (ReduceScatter(0, "x"), Exchange(d)) and r.types == (s, d, d)
    assert r.received == (h + 1, 0) and r.peak == 2 * h + 1


@case("pucheck")
def _pucheck(v):
    m, h, s, d = _partial_uneven(v)
    ok = core.check(m, s, d, [ReduceScatter(0, "x"), Exchange(d)])
    assert ok.types == (s, d, d) and ok.received == (h + 1, 0) and ok.peak == 2 * h + 1


@case("lower_bound", "ulower_bound")
def _lower_bounds(v):
    _, h, src, dst = _even(v)
    assert core.lower_bound(src, dst) == h and core.ulower_bound(src, dst) == h
    _, h, src, dst = _uneven(v)
    assert core.ulower_bound(src, dst) == h + 1   # device 1 holds h of the 2h + 1
    assert core.ulower_bound(dst, src) == 0


@case("blocks")
def _blocks(v):
    _, h, src, _ = _even(v)
    assert core.block_starts(src).tolist() == [[0], [h]]


@case("synthesize")
def _synthesize(v):
    # the answer's all-permute carries its target type: a global size above 2^31 comes back
    h = _half(v)
    m = Mesh.parse("x=2,y=2")
    s, d = _parse(m, f"[{h}{{x}}{2 * h}]"), _parse(m, f"[{h}{{y}}{2 * h}]")
    assert core.synthesize(m, s, d) == (True, [AllPermute(d)])


@case("permute")
def _permute(v):
    # The answer is ranks (below the device cap: tested at the cap below); the sizes go in.
    h = _half(v)
    m = Mesh.parse("x=2,y=2")
    s, d = _parse(m, f"[{h}{{x}}{2 * h}]"), _parse(m, f"[{h}{{y}}{2 * h}]")
    assert core.permute_sources(s, d).tolist() == [0, 2, 1, 3]


@case("movement", "umovement")
def _movement(v):
    # An all-permute from [2, h] to [2, 1] on one device: element (1, 0) is read at local offset h.
    h = _half(v)
    m = Mesh.parse("x=1")
    s, d = _parse(m, f"[2, {h}]"), _parse(m, "[2, 1]")
    for movement in (core.movement, core.umovement):
        assert movement(s, AllPermute(d), d).tolist() == [[[0, 0], [0, h]]]


def _certificate(v: int):
    """The doctest's minimal problem of core.certify with its last dimension F times longer: every figure F times."""
    f = _factor(v, 128)
    m = Mesh.parse("x=2,y=3")
    s, d = _parse(m, f"[9, 2{{y}}6, {2 * f}]"), _parse(m, f"[3{{y}}9, 3{{x}}6, {2 * f}]")
    entries = [(s, 21 * f), (_parse(m, f"[9, 1{{y,x}}6, {2 * f}]"), 21 * f),
               (_parse(m, f"[9, 2{{y}}6, {f}{{x}}{2 * f}]"), 21 * f)]
    return m, f, s, d, entries


@case("certify")
def _certify(v):
    _, f, s, d, entries = _certificate(v)
    assert core.certify(s, d, 36 * f, entries, 21 * f)
    assert not core.certify(s, d, 36 * f, entries, 21 * f + 1)   # the figure, exactly
    # the cap, exactly: a potential too high at the source (36F elements) is checked from a cap of 36F on
    high = [(s, 40 * f)] + entries[1:]
    assert core.certify(s, d, 36 * f - 1, high, 21 * f) and not core.certify(s, d, 36 * f, high, 21 * f)


@case("mplan")
def _mplan(v):
    m, f, s, d, entries = _certificate(v)
    # Eminimal.emplan_problem: the exchange (18F, the lower bound) beats the certified collectives (21F)
    r = core.mplan(m, s, d, [DynSlice(2, "x"), AllToAll(1, 0, "y"), AllToAll(2, 1, "x")], entries)
    assert r.collectives == (Exchange(d, 2),) and r.received == (18 * f,) and r.peak == 36 * f


def _cross(v: int):
    """``[h{x}2h]`` over x=2 to ``[2h]`` over one device, world ranks from ``v`` on."""
    h = _half(v)
    s, d = _parse("x=2", f"[{h}{{x}}{2 * h}]"), _parse("u=1", f"[{2 * h}]")
    return h, s, [v, v + 1], d, [v + 2]


@case("xplan")
def _xplan(v):
    h, s, r1, d, r2 = _cross(v)
    want = [[(r1[0], (0,), ((0, h),)), (r1[1], (1,), ((h, h),))]]
    for start in (None, min(v, MAX_INDEX - 1)):   # Crossmesh.xplan, then Balance.xplan_bal from holder `start`
        assert [[(p.src, p.cell, p.box) for p in ps] for ps in core.xplan(s, r1, d, r2, start)] == want


@case("xrounds")
def _xrounds(v):
    h, s, r1, d, r2 = _cross(v)
    rounds = core.xrounds(s, r1, d, r2, BUDGET, min(v, MAX_INDEX - 1))
    assert [[(c.src, c.dst, c.target, c.box) for c in rd] for rd in rounds] == [
        [(r1[0], r2[0], 0, ((0, h),)), (r1[1], r2[0], 0, ((h, h),))]]


@case("bplan")
def _bplan(v):
    # ranks and box starts and lengths, echoed in the pieces and cuts
    h = _half(v)
    src = [(v, ((0, h),)), (v + 1, ((h, h),))]
    dst = [(v + 2, ((0, 2 * h),))]
    pieces, rounds = core.bplan(src, dst, BUDGET)
    assert [[(p.src, p.box) for p in ps] for ps in pieces] == [[(v, ((0, h),)), (v + 1, ((h, h),))]]
    assert [[(c.src, c.dst, c.box) for c in rd] for rd in rounds] == [
        [(v, v + 2, ((0, h),)), (v + 1, v + 2, ((h, h),))]]


@case("wplan")
def _wplan(v):
    # Perrank.wplan: world ranks and global boxes, the inputs, back
    h, s, r1, d, r2 = _cross(v)
    for start in (0, min(v, MAX_INDEX - 1)):
        world = core.wplan(s, r1, d, r2, start)
        assert [[(p.src, p.box) for p in ps] for ps in world] == [[(r1[0], ((0, h),)), (r1[1], ((h, h),))]]


@case("xrank")
def _xrank(v):
    # Perrank.rank_recv / rank_send with Rounds.cut_box: the target's pieces and cuts, a source's sends
    h, s, r1, d, r2 = _cross(v)
    part = core.xrank(s, r1, d, r2, 0, 0, None, BUDGET)
    assert [(p.src, p.box, cuts) for p, cuts in part.recv] == [
        (r1[0], ((0, h),), (((0, h),),)), (r1[1], ((h, h),), (((h, h),),))]
    part = core.xrank(s, r1, d, r2, min(v, MAX_INDEX - 1), None, 1, min(v, BUDGET))
    assert [(j, r, p.box) for j, r, p, _ in part.send] == [(0, r2[0], ((h, h),))]
    assert sum(c[0][1] for c in part.send[0][3]) == h


@case("rank_rounds")
def _rank_rounds(v):
    # Rankrounds.rank_rounds: cuts of v bytes, ranks at the device cap; round numbers (k W + s) 2 + c, W = 2^20
    w = CAP_DEVICES
    v = min(v, CAP_ELEMENTS)
    assert core.rank_rounds([(0, 1, v), (0, 1, v), (w - 1, 0, v)], w, v) == [(2, (0,)), (3, (2,)), (2 * w + 2, (1,))]
    assert core.rank_rounds([(0, 1, v), (0, 1, v)], w, min(2 * v, CAP_ELEMENTS)) == (
        [(2, (0, 1))] if 2 * v <= CAP_ELEMENTS else [(2, (0,)), (2 * w + 2, (1,))])
    for bad in ([(w, 0, 1)], [(0, 1, CAP_ELEMENTS + 1)]):
        with pytest.raises(LimitError):
            core.rank_rounds(bad, w, v)


@case("bcovers")
def _bcovers(v):
    h = _half(v)
    src = [(v, ((0, h),)), (v + 1, ((h, h),))]
    assert core.bcovers((2 * h,), src, [(v + 2, ((0, 2 * h),))])
    assert not core.bcovers((2 * h,), src[:1], [(v + 2, ((0, 2 * h),))])
    assert not core.bcovers((2 * h,), src, [(v + 2, ((1, 2 * h),))])   # a target box past the array


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


@case("lplan")
def _lplan(v):
    m, h, src, dst = _even(v)
    ls, lt = core.type_layout(src), core.type_layout(dst)
    assert ls == [(0, ((0, h),)), (1, ((h, h),))]
    r = core.lplan(m, ls, lt, BUDGET, (src, dst))   # the types describe the layouts: the type planner's plan
    assert r.types == (src, dst) and r.received == (h,) and r.peak == 2 * h
    rounds = core.lplan(m, ls, lt, BUDGET)         # no types: the box schedule's rounds
    assert sorted((c.src, c.dst, c.box) for rd in rounds for c in rd) == [(0, 1, ((0, h),)), (1, 0, ((h, h),))]


@case("stack_reserved", "stack_peak")
def _stack(v):
    # Not core calls: bytes of the core's own stack (bindings/stubs.c), 4 GiB where the mapping allows.
    reserved = _core.stack_reserved()
    assert reserved in {2**k for k in range(28, 33)}, reserved
    assert 0 <= _core.stack_peak() <= reserved


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("entry", sorted(CASES))
def test_width(entry, scale):
    CASES[entry](SCALES[scale])


# --- every entry's input, encoded by hand (docs/internals.md) -----------------

def _layout(k: int, n: int = 1, size: int = 1) -> list[int]:
    return [n] + [0, *([0, size] * k)] * n


def _plan_input(m, t, t2):
    return m + t + t2


def _ptypes(m, t, t2, *tail):
    return m + [0] + t + [0] + t2 + list(tail)


def _xplan_input(m, t, t2):
    return m + [1, 0] + t + m + [1, 1] + t2 + [0]


# entry -> its input from a mesh and two types (encoded); None: it reads no mesh nor type
RAW = {
    "plan": _plan_input, "eplan": _plan_input, "ueplan": _plan_input, "uplan": _plan_input,
    "lower_bound": _plan_input, "ulower_bound": _plan_input, "synthesize": _plan_input, "permute": _plan_input,
    "check": lambda m, t, t2: m + t + t2 + [0], "ucheck": lambda m, t, t2: m + t + t2 + [0],
    "echeck": lambda m, t, t2: m + t + t2 + [0], "uecheck": lambda m, t, t2: m + t + t2 + [0],
    "pcheck": lambda m, t, t2: _ptypes(m, t, t2, 0), "pucheck": lambda m, t, t2: _ptypes(m, t, t2, 0),
    "pplan": _ptypes, "puplan_checked": _ptypes,
    "blocks": lambda m, t, t2: m + t,
    "movement": lambda m, t, t2: m + t + [3] + t2 + t2, "umovement": lambda m, t, t2: m + t + [3] + t2 + t2,
    "certify": lambda m, t, t2: m + [len(m) - 1] + [x for n in m[1:] for x in (1, n)] + [4, 0] + t + t2 + [0],
    "mplan": lambda m, t, t2: m + t + t2 + [0, 0],
    "xplan": _xplan_input, "xrounds": lambda m, t, t2: [4] + _xplan_input(m, t, t2),
    "lplan": lambda m, t, t2: [4] + m + [1] + t + t2 + [1] + _layout(1) + _layout(1),
    "bplan": None, "stack_reserved": None, "stack_peak": None,
    "wplan": lambda m, t, t2: _xplan_input(m, t, t2),
    "xrank": lambda m, t, t2: [4] + _xplan_input(m, t, t2) + [1, 0],
    "bcovers": None, "rank_rounds": None,
}
CORE_ENTRIES = sorted(e for e in RAW if not e.startswith("stack_"))


def test_every_entry_has_a_width_case():
    module = (ROOT / "bindings" / "module.cpp").read_text()
    entries = set(re.findall(r'm\.def\("(\w+)"', module))
    assert entries == set(CASES), f"entries of bindings/module.cpp without a width case: {sorted(entries - set(CASES))}"
    assert entries == set(RAW), f"entries of bindings/module.cpp without a raw encoding: {sorted(entries - set(RAW))}"
    forwarded = set(re.findall(r'forward\("vs_(\w+)"', module))
    assert forwarded == set(CORE_ENTRIES)
    registered = set(re.findall(r'Callback\.register "vs_(\w+)"', (ROOT / "bindings" / "glue.ml").read_text()))
    assert registered == forwarded
    called = set(re.findall(r"_core\.(\w+)\b", (ROOT / "python" / "verishard" / "core.py").read_text()))
    assert called <= entries | {"_core"}, called - entries


def _small(entry: str, mesh: list[int], t: list[int], t2: list[int]) -> tuple[int, ...]:
    return core._call(getattr(_core, entry), RAW[entry](mesh, t, t2))


@pytest.mark.parametrize("entry", [e for e in CORE_ENTRIES if RAW[e]])
def test_caps_at_the_glue(entry):
    # the caps of limits.py, for every entry reading a mesh and types: the glue's own
    # refusal (raw ints, past the Python layer's checks)
    one = [1, 1]
    _small(entry, one, [1, 4, 0], [1, 4, 0])   # small: accepted (or refused by the core, not by a cap)
    big = [1, CAP_ELEMENTS + 2, 0]
    with pytest.raises(LimitError, match="more than 2\\^50 elements"):
        _small(entry, one, big, [1, 4, 0])
    if entry != "blocks":   # (it reads one type)
        with pytest.raises(LimitError, match="more than 2\\^50 elements"):
            _small(entry, one, [1, 4, 0], big)
    for mesh in ([1, CAP_DEVICES + 1], [2, 1025, 1024], [2, 2**40, 2**40]):
        with pytest.raises(LimitError, match="more than 2\\^20 devices"):
            _small(entry, mesh, [1, 4, 0], [1, 4, 0])
    for value in (CORE_LIMIT, 2**64 + WIDE):
        with pytest.raises(LimitError, match="out of range for the verified core"):
            _small(entry, one, [1, value, 0], [1, 4, 0])


def test_element_cap_exactly():
    m = Mesh.parse("x=2")
    ok = _parse(m, f"[{CAP_ELEMENTS // 2}{{x}}{CAP_ELEMENTS}]")
    assert core.lower_bound(ok, _parse(m, f"[{CAP_ELEMENTS}]")) == CAP_ELEMENTS // 2


def test_device_cap_exactly():
    # 2^20 devices are taken, and every answer about them comes back: the permute
    # table between [1{x,y}2^20] and [1{y,x}2^20] and the blocks' offsets (up to 2^20 - 1).
    m = Mesh.parse("x=1024,y=1024")
    s, d = _parse(m, f"[1{{x,y}}{CAP_DEVICES}]"), _parse(m, f"[1{{y,x}}{CAP_DEVICES}]")
    starts = core.block_starts(s)[:, 0]
    assert starts[0] == 0 and starts[-1] == CAP_DEVICES - 1 and (starts[1:] > starts[:-1]).all()
    p = core.permute_sources(s, d)
    assert p[1] == 1024 and p[-1] == CAP_DEVICES - 1 and sorted(p[:2048:1025].tolist()) == [0, 1025]


def test_budget_index_and_rank_caps():
    box = [(0, ((0, 3),))]
    core.bplan(box, box, CAP_ELEMENTS)
    with pytest.raises(LimitError, match="budget of more than 2\\^50"):
        core.bplan(box, box, CAP_ELEMENTS + 1)
    core.bplan([(0, ((MAX_INDEX, 3),))], [(1, ((MAX_INDEX, 3),))], 10)
    with pytest.raises(LimitError, match="index past 2\\^50"):
        core.bplan([(0, ((MAX_INDEX + 1, 3),))], box, 10)
    with pytest.raises(LimitError, match="more than 2\\^20 devices"):   # a layout of 2^20 + 1 holders
        core._call(_core.bplan, [4, 1, CAP_DEVICES + 1])
    m, h, src, dst = _even(WIDE)
    for budget in (CAP_ELEMENTS + 1, CORE_LIMIT - 1):
        with pytest.raises(LimitError, match="budget of more than 2\\^50"):
            core.lplan(m, core.type_layout(src), core.type_layout(dst), budget)
        with pytest.raises(LimitError, match="budget of more than 2\\^50"):
            core.xrounds(*_cross(WIDE)[1:], budget)
    with pytest.raises(LimitError, match="rotation outside"):
        core._call(_core.xplan, _xplan_input([1, 1], [1, 4, 0], [1, 4, 0])[:-1] + [MAX_INDEX + 1])
    # ranks are any integer the binding takes: the largest echoed
    h, s, _, d, _ = _cross(WIDE)
    top = CORE_LIMIT - 1
    assert {p.src for ps in core.xplan(s, [top, top - 1], d, [top - 2]) for p in ps} == {top, top - 1}


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


def _bounded_memory() -> None:
    # the planted core's heap is stopped by the glue well before this (bindings/glue.ml, [room])
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


def test_truncating_glue_is_caught(tmp_path):
    pkg = _plant_truncation(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(pkg), OPENBLAS_NUM_THREADS="1")
    assert str(pkg) in subprocess.run([sys.executable, "-c", "import verishard; print(verishard.__file__)"],
                                      capture_output=True, text=True, env=env).stdout
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", __file__,
                          "-k", "test_width"], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
                         preexec_fn=_bounded_memory)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    failed = set(re.findall(r"FAILED \S*::test_width\[(\w+)-[^\]]+\]", out))
    # every entry that crosses the glue has a case the 32-bit glue fails
    assert failed == set(CORE_ENTRIES), (sorted(set(CORE_ENTRIES) - failed), out[-3000:])
