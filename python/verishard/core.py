"""The bridge to the verified core: the only module that imports ``_core``.

Each function encodes its arguments as in ``docs/internals.md``, calls the
extracted Coq function, and decodes the answer. Nothing here decides
anything about plans: validation beyond "is this well-formed Python data"
happens in the core.

>>> from verishard import Mesh, ArrayType
>>> t = ArrayType.parse("[3{x}6]", Mesh.parse("x=2,y=3"))
>>> block_starts(t).tolist()
[[0], [0], [0], [3], [3], [3]]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import product
from math import comb, factorial
from typing import NamedTuple

import numpy as np

from . import _core
from .collectives import AllReduce, Collective, Exchange, ReduceScatter, ToPartial
from .errors import LimitError, ParseError, PlanError, ShardingError
from .limits import MAX_CERTIFY_STEPS
from .mesh import Mesh
from .sharding import ArrayType, raw

PARTIAL_COLLECTIVES = (AllReduce, ReduceScatter, ToPartial)

# Constructors of Rules.error in order: (code, template). Templates get
# `detail` (the constructor's argument) and `names` (mesh part names).
REASONS = (
    ("bad_dim", "the type has no dimension {detail}"),
    ("no_axes", "the collective names no axes"),
    ("not_minor_axes", "the axes are not the minor (last) axes of that dimension"),
    ("axis_out_of_range", "the mesh has no axis number {detail}"),
    ("repeated_axis", "an axis is named twice"),
    ("axis_in_use", "axis {name} already shards the array"),
    ("not_divisible", "the group size does not divide the local size"),
    ("same_dim", "an all-to-all needs two different dimensions"),
    ("bad_target", "the permute target is not a well-formed type"),
    ("shape_changed", "the permute target has another global or local shape"),
    ("bad_mesh", "the mesh has an axis of size 0"),
    ("bad_source", "the source type is not well formed"),
    ("bad_dest", "the target type is not well formed"),
    ("global_shape_mismatch", "source and target have different global shapes"),
    ("wrong_result", "the plan does not end at the target type"),
    ("not_pending", "axis {name} is not pending"),
    ("axis_pending", "axis {name} is pending"),
)


def _call(fn, ints: Sequence[int]) -> tuple[int, ...]:
    try:
        return fn(ints)
    except ValueError as e:  # the core refused the input (bounds, encoding)
        raise LimitError(str(e)) from None


def _same_mesh(mesh: Mesh, *types: ArrayType) -> None:
    for t in types:
        if not isinstance(t, ArrayType):
            raise ShardingError(f"expected an ArrayType, not {type(t).__name__}")
        if t.mesh is not mesh and t.mesh != mesh:
            raise ShardingError(f"type {t} is over mesh {t.mesh}, not {mesh}")


@dataclass(frozen=True)
class CheckOk:
    """What the verified checker reports for an accepted plan.

    >>> from verishard import Mesh, ArrayType, AllGather
    >>> m = Mesh.parse("x=2")
    >>> check(m, ArrayType.parse("[2{x}4]", m), ArrayType.parse("[4]", m), [AllGather(0, "x")])
    CheckOk(peak=4, types=([2{x}4], [4]), received=(2,))
    """

    peak: int
    types: tuple[ArrayType, ...]
    received: tuple[int, ...]


def reduction(src: ArrayType, dst: ArrayType) -> str:
    """The reduction a problem's pending axes wait for: the source's when it
    has pending axes, else the target's. A problem that would change it
    (sum pending to max pending) is refused: no collective does that.

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse("x=2")
    >>> reduction(ArrayType.parse("[4] partial(max){x}", m), ArrayType.parse("[2{x}4]", m))
    'max'
    """
    if src.partial and dst.partial and src.reduce != dst.reduce:
        raise ShardingError(f"source {src} is pending a {src.reduce} and target {dst} a {dst.reduce}: "
                            "a redistribution cannot change the reduction")
    return src.reduce if src.partial else dst.reduce


def check(mesh: Mesh, src: ArrayType, dst: ArrayType, plan: Sequence[Collective]) -> CheckOk:
    """Run the extracted checker: ``Checker.check`` on a plain problem and
    plan, ``Pchecker.pcheck`` when something is pending or a step reduces or
    makes pending; raise :class:`PlanError` on rejection.

    >>> from verishard import Mesh, ArrayType, DynSlice, AllPermute, AllGather
    >>> m = Mesh.parse("x=2,y=3")
    >>> P = lambda s: ArrayType.parse(s, m)
    >>> ok = check(m, P("[3{x}6]"), P("[2{y}6]"), [DynSlice(0, "y"), AllPermute(P("[1{y,x}6]")), AllGather(0, "x")])
    >>> ok.peak, ok.received
    (3, (0, 1, 1))
    """
    _same_mesh(mesh, src, dst)
    op = reduction(src, dst)
    for c in plan:
        if not isinstance(c, Collective):
            raise PlanError(f"plan step {c!r} is not a collective")
    if (src.partial or dst.partial) and (src.uneven or dst.uneven):
        return _pucheck(mesh, src, dst, plan)
    if any(isinstance(c, Exchange) for c in plan):
        return _echeck(mesh, src, dst, plan)
    if _uneven_problem(src, dst, plan):
        return _ucheck(mesh, src, dst, plan)
    # Plain problems and plans go to Checker.check (its theorems, check_ok_iff, are about it)
    plain = not (src.partial or dst.partial) and not any(isinstance(c, PARTIAL_COLLECTIVES) for c in plan)
    encode = ArrayType.encode if plain else ArrayType.pencode
    ints = mesh.encode() + encode(src) + encode(dst) + [len(plan)]
    for c in plan:
        ints += c.encode(mesh)
    out = _call(_core.check if plain else _core.pcheck, ints)
    decode = ArrayType.decode if plain else (lambda m, o, pos: ArrayType.pdecode(m, o, pos, op))
    return _checked(mesh, out, plan, decode)


def _checked(mesh: Mesh, out: Sequence[int], plan: Sequence[Collective], decode=ArrayType.decode) -> CheckOk:
    """A checker's answer (``put_report`` in bindings/glue.ml): ``[0, peak, s,
    s + 1 types, s received counts]``, types read by ``decode(mesh, out, pos)``;
    or the rejection ``[1, step, reason, detail]``, raised."""
    if out[0] == 1:
        _raise_rejection(mesh, out, plan)
    peak, s = out[1], out[2]
    pos, types = 3, []
    for _ in range(s + 1):
        t, pos = decode(mesh, out, pos)
        types.append(t)
    return CheckOk(peak, tuple(types), tuple(out[pos:pos + s]))


def _raise_rejection(mesh: Mesh, out: Sequence[int], plan: Sequence[Collective]) -> None:
    """Raise the :class:`PlanError` for the core's answer ``[1, step, reason, detail]``."""
    step, code, detail = out[1], out[2], out[3]
    key, template = REASONS[code]
    named = key in ("axis_in_use", "not_pending", "axis_pending")
    name = mesh.part_name(detail) if named and detail < len(mesh.parts) else detail
    why = template.format(detail=detail, name=name)
    where = "the problem itself" if step == 0 else f"step {step} ({plan[step - 1]})"
    if key == "wrong_result":
        where = f"step {step}" if step else "the empty plan"
    raise PlanError(f"{where}: {why}", step=step, reason=key)


@dataclass(frozen=True)
class Step:
    """One collective, the type after it, and the elements each device receives (at most).

    >>> from verishard import plan
    >>> s = plan("x=2", "[2{x}4]", "[4]").steps[0]
    >>> s
    Step(collective=AllGather(dim=0, axes=('x',)), type=[4], received=2)
    """

    collective: Collective
    type: ArrayType
    received: int

    @property
    def local_size(self) -> int:
        """Elements each device holds after this step.

        >>> from verishard import plan
        >>> plan("x=2", "[2{x}4]", "[4]").steps[0].local_size
        4
        """
        return self.type.size


class PlanReport(NamedTuple):
    """What ``Ppipeline.pplan_problem`` returns in one call: the plan over the
    partial refinement ``mesh`` of the user's mesh it runs on, its source
    type, its steps (each with the type after it and the checker's received
    elements) and peak. (A named tuple: built once per planning call, read once.)

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse("x=2,y=4")
    >>> r = plan(m, ArrayType.parse("[2{x}4]", m), ArrayType.parse("[1{y}4]", m))
    >>> r.mesh, r.collectives, r.peak
    ({x:2, y:2*2}, (DynSlice(dim=0, axes=('y.0',)), AllPermute(target=[1{y}4])), 2)
    >>> r.types, r.received
    (([2{x}4], [1{x,y.0}4], [1{y}4]), (0, 1))
    """

    mesh: Mesh
    src: ArrayType
    steps: tuple[Step, ...]
    peak: int

    @property
    def collectives(self) -> tuple[Collective, ...]:
        return tuple(s.collective for s in self.steps)

    @property
    def types(self) -> tuple[ArrayType, ...]:
        return (self.src,) + tuple(s.type for s in self.steps)

    @property
    def received(self) -> tuple[int, ...]:
        return tuple(s.received for s in self.steps)


def _step(collective: Collective, type_: ArrayType, received: int) -> Step:
    """``Step(collective, type_, received)`` from a verified report, without the dataclass ``__init__``."""
    return raw(Step, collective=collective, type=type_, received=received)


def plan(mesh: Mesh, src: ArrayType, dst: ArrayType) -> PlanReport:
    """Plan with the verified pipeline (``Ppipeline.pplan_problem``: reduce
    or create pending axes around ``Pipeline.plan_problem``, which refines,
    synthesizes, re-expresses and validates) in one crossing; see
    ``Ppipelineproof.pplan_spec``, and ``pplan_plain``: with nothing pending
    the plan is ``plan_problem``'s, so ``Pipelineproof.plan_spec`` holds.

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse("x=2,y=2")
    >>> r = plan(m, ArrayType.parse("[4, 4] partial{x}", m), ArrayType.parse("[2{x}4, 4]", m))
    >>> r.collectives, r.types, r.received
    ((ReduceScatter(dim=0, axes=('x',)),), ([4, 4] partial{x}, [2{x}4, 4]), (8,))
    """
    _same_mesh(mesh, src, dst)
    return plan_checked(mesh, src, dst)


def plan_checked(mesh: Mesh, src: ArrayType, dst: ArrayType) -> PlanReport:
    """:func:`plan` for types already known to be over ``mesh`` (``verishard.plan`` checked them)."""
    if src.uneven or dst.uneven:
        return _puplan(mesh, src, dst) if src.partial or dst.partial else _uplan(mesh, src, dst)
    op = reduction(src, dst) if src.partial or dst.partial else "sum"
    try:
        out = _core.pplan(mesh.encoded + src.pcode() + dst.pcode())
    except ValueError as e:  # (as _call: the core refused the input)
        raise LimitError(str(e)) from None
    if out[0] == 1:
        _raise_rejection(mesh, out, [])
    return _planned(mesh, out, _PDECODE if op == "sum" else lambda m, o, pos: ArrayType.pdecode(m, o, pos, op))


def _planned(mesh: Mesh, out: Sequence[int], decode_type) -> PlanReport:
    """The report of a planning call (``put_planned`` in bindings/glue.ml): the split of the
    mesh's parts, the peak, the source type over the split mesh, then each
    step as one record (its collective, the type after it, what it
    receives), read by ``Collective.decode`` and ``decode_type(mesh, ints,
    pos) -> (type, pos)``; the source type and each record come with the
    length of their encoding.

    Source types and records are looked up by their encoding in caches of
    the mesh they are over (plans repeat the same steps); only what is not
    there yet is decoded."""
    out = tuple(out)   # (the core answers a tuple: its slices are the cache keys themselves)
    pos = 2
    for _ in range(out[1]):
        pos += 1 + out[pos]
    coarse, caches = _report_mesh(mesh, out[2:pos])
    # (another decoder's reading depends on more than the encoding: what it reads is kept for this call only)
    types, records = caches.get(decode_type) or ({}, {})
    peak, s = out[pos], out[pos + 1]
    end = pos + 3 + out[pos + 2]
    k = out[pos + 3:end]
    src = types.get(k) or _new_decoded(coarse, types, k, decode_type)
    steps = []
    get = records.get   # (a Step is always true)
    for _ in range(s):
        pos = end
        end = pos + 1 + out[pos]
        k = out[pos + 1:end]
        steps.append(get(k) or _remember(records, k, _decoded_record(coarse, k, decode_type)))
    if end != len(out):
        raise ParseError(f"plan report of {len(out)} integers, {end} expected")
    # the core's report, well formed by construction
    return _new_report((coarse, src, tuple(steps), peak))


def _new_decoded(mesh: Mesh, cache: dict, code: tuple[int, ...], decode):
    """The type ``decode(mesh, code, 0)`` reads from the whole of ``code``, remembered in ``cache``."""
    value, end = decode(mesh, code, 0)
    if end != len(code):
        raise ParseError(f"an encoding of {len(code)} integers read as {end}")
    return _remember(cache, code, value)


def _decoded_record(mesh: Mesh, code: tuple[int, ...], decode_type) -> Step:
    """The step a report's record encodes: its collective, the type after it (read by ``decode_type``), what it receives."""
    c, pos = Collective.decode(mesh, code, 0)
    t, pos = decode_type(mesh, code, pos)
    if pos + 1 != len(code):
        raise ParseError(f"a step record of {len(code)} integers read as {pos + 1}")
    return _step(c, t, code[pos])


def _new_report(fields: tuple, new=tuple.__new__) -> PlanReport:
    """``PlanReport(*fields)`` without the named tuple's Python-level ``__new__``."""
    return new(PlanReport, fields)


_DECODED_MAX = 4096   # entries per cache before it is cleared

def _report_mesh(mesh: Mesh, split_code: tuple[int, ...]) -> tuple[Mesh, dict]:
    """The refinement of ``mesh`` a report's split encodes (``[len, sizes...]``
    per part) and the caches of decoded source types and step records over
    it, by decoder, kept in ``mesh``'s ``__dict__`` by the encoding
    (``Mesh.__getstate__`` leaves them out). There are caches only for the
    two decoders of plain and partial types (with the sum pending), whose
    reading of an encoding never changes."""
    known = mesh.__dict__.get("_reports")
    if known is None:
        known = {}
        object.__setattr__(mesh, "_reports", known)
    hit = known.get(split_code)
    if hit is None:
        split, pos = [], 0
        while pos < len(split_code):
            end = pos + 1 + split_code[pos]
            split.append(split_code[pos + 1:end])
            pos = end
        coarse = _refinement(mesh, tuple(split))
        hit = (coarse, _caches(coarse))
        _remember(known, split_code, hit)
    return hit


@lru_cache(maxsize=256)
def _caches(mesh: Mesh) -> dict:
    return {_DECODE: ({}, {}), _PDECODE: ({}, {})}


_DECODE, _PDECODE = ArrayType.decode, ArrayType.pdecode   # the two decoders whose answers are cached


def _remember(cache: dict, key, value):
    if len(cache) >= _DECODED_MAX:
        cache.clear()
    cache[key] = value
    return value


# --- the exchange (Exchange.v, Exchangeproof.v) ------------------------------

def _exchange_problem(src: ArrayType, dst: ArrayType) -> bool:
    """Whether the problem is uneven (``Exchange.uecheck``/``ueplan_problem``); partial ones are refused."""
    if src.partial or dst.partial:
        raise ShardingError(f"the exchange is planned and checked for types without pending axes (here {src} -> {dst})")
    return src.uneven or dst.uneven


def _echeck(mesh: Mesh, src: ArrayType, dst: ArrayType, plan: Sequence[Collective]) -> CheckOk:
    """``Exchange.echeck`` on a plan holding an exchange (``Exchangeproof.echeck_spec``):
    the exchange must be the plan's only step; its report has the peak
    ``max(size(src), size(dst))`` and the lower bound as what the worst
    device receives.

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse("x=2,y=2")
    >>> P = lambda s: ArrayType.parse(s, m)
    >>> check(m, P("[1{x,y}4, 4]"), P("[4, 1{y,x}4]"), [Exchange(P("[4, 1{y,x}4]"))])
    CheckOk(peak=4, types=([1{x,y}4, 4], [4, 1{y,x}4]), received=(3,))
    """
    if len(plan) != 1:
        where = next(i for i, c in enumerate(plan, 1) if isinstance(c, Exchange))
        raise PlanError(f"step {where} ({plan[where - 1]}): an exchange is a plan's only step",
                        step=where, reason="exchange_not_alone")
    uneven = _exchange_problem(src, dst) or plan[0].target.uneven
    out = _call(_core.uecheck if uneven else _core.echeck,
                mesh.encode() + src.encode() + dst.encode() + [1] + plan[0].encode(mesh))
    return _checked(mesh, out, plan)


def eplan(mesh: Mesh, src: ArrayType, dst: ArrayType) -> PlanReport:
    """Plan with exchanges allowed (``Exchange.eplan_problem``, theorem
    ``Exchangeproof.eplan_spec``; uneven types: ``ueplan_problem``,
    ``ueplan_spec``): ``Pipeline.plan_problem``'s plan, or the one-step
    exchange when a free dimension lets it run in pieces and it receives
    strictly less (uneven: or the plan of collectives exceeds the padded bound).

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse("x=2,y=2")
    >>> r = eplan(m, ArrayType.parse("[1{x,y}4, 4, 2]", m), ArrayType.parse("[4, 1{y,x}4, 2]", m))
    >>> r.collectives, r.received, r.peak
    ((Exchange(target=[4, 1{y,x}4, 2], dim=2),), (6,), 8)
    """
    _same_mesh(mesh, src, dst)
    uneven = _exchange_problem(src, dst)
    out = _call(_core.ueplan if uneven else _core.eplan, mesh.encode() + src.encode() + dst.encode())
    if out[0] == 1:
        _raise_rejection(mesh, out, [])
    if out[0] == 2:
        return _exchanged(src, dst, out)
    return _planned(mesh, out, _DECODE)


def _exchanged(src: ArrayType, dst: ArrayType, out: Sequence[int]) -> PlanReport:
    """The one-step exchange a planner took (``put_eplanned`` in bindings/glue.ml):
    ``[tag, free dimension + 1 (0: none), peak, received]``."""
    return PlanReport(src.mesh, src, (Step(Exchange(dst, out[1] - 1 if out[1] else None), dst, out[3]),), out[2])


# --- uneven types (Uchecker.v, Upipeline.v) ---------------------------------

def _uneven_problem(src: ArrayType, dst: ArrayType, plan: Sequence[Collective]) -> bool:
    """Whether a problem or plan involves an uneven type (then it goes to the uneven checker)."""
    from .collectives import AllPermute
    return src.uneven or dst.uneven or any(isinstance(c, AllPermute) and c.target.uneven for c in plan)


def _ucheck(mesh: Mesh, src: ArrayType, dst: ArrayType, plan: Sequence[Collective]) -> CheckOk:
    """``Uchecker.ucheck`` (theorems ``Ucheckerproof.ucheck_ok`` and
    ``ucheck_correct``): peak is the largest padded buffer along the plan.

    >>> from verishard import Mesh, ArrayType, AllGather
    >>> m = Mesh.parse("x=2")
    >>> check(m, ArrayType.parse("[3{x}5]", m), ArrayType.parse("[5]", m), [AllGather(0, "x")])
    CheckOk(peak=5, types=([3{x}5], [5]), received=(3,))
    """
    if src.partial or dst.partial:
        return _pucheck(mesh, src, dst, plan)
    if any(isinstance(c, PARTIAL_COLLECTIVES) for c in plan):
        raise PlanError("a plan over uneven types without pending axes reduces or makes pending: "
                        "its types would be partial", reason="not_plain")
    ints = mesh.encode() + src.encode() + dst.encode() + [len(plan)]
    for c in plan:
        ints += c.encode(mesh)
    return _checked(mesh, _call(_core.ucheck, ints), plan)


# --- partial types over uneven dimensions (Puexchange.v) ---------------------

def _puplan(mesh: Mesh, src: ArrayType, dst: ArrayType) -> PlanReport:
    """``Puchecker.puplan_checked``: ``Puexchange.puplan_problem``'s plan (all-reduce the
    source's pending axes, or reduce-scatter them where that receives less,
    exchange to the target's array type, make the target's axes pending; on
    padded buffers), as steps the verified checker ``Puchecker.pucheck``
    accepts, with its report (theorems ``Pucheckerproof.puplan_checked_ok``,
    ``pucheck_correct``, ``pucheck_peak``, ``pucheck_lower_bound``).

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse("x=2,y=2")
    >>> r = plan(m, ArrayType.parse("[3{x}5, 4] partial{y}", m), ArrayType.parse("[5, 2{y}4] partial{x}", m))
    >>> [str(c) for c in r.collectives], r.received, r.peak
    (['ReduceScatter(1, y)', 'Exchange([5, 2{y}4])', 'ToPartial(x)'], (6, 6, 0), 12)
    >>> [str(c) for c in plan(m, ArrayType.parse("[3{x}5, 4] partial{y}", m), ArrayType.parse("[3{x}5, 4]", m)).collectives]
    ['AllReduce(y)', 'Exchange([3{x}5, 4])']
    """
    op = reduction(src, dst)   # refuses a change of the pending reduction, naming both
    out = _call(_core.puplan_checked, mesh.encode() + src.pencode() + dst.pencode())
    if out[0] == 1:
        _raise_purejection(mesh, src, dst, out, [])
    s, pos, steps = out[1], 2, []
    for _ in range(s):
        c, pos = Collective.decode(mesh, out, pos)
        steps.append(c)
    ok = _checked(mesh, out[pos:], steps, lambda m, o, p: ArrayType.pdecode(m, o, p, op))
    return PlanReport(mesh, src, tuple(map(_step, steps, ok.types[1:], ok.received)), ok.peak)


def _pucheck(mesh: Mesh, src: ArrayType, dst: ArrayType, plan: Sequence[Collective]) -> CheckOk:
    """``Puchecker.pucheck``, the verified checker of plans between partial
    types over uneven dimensions (theorems ``Pucheckerproof.pucheck_correct``,
    ``pucheck_peak``, ``pucheck_lower_bound``): the source's pending axes
    reduced first (all of them, by one all-reduce or reduce-scatter), then
    collectives or one exchange between the array types as the uneven
    checker accepts them, then the target's axes made pending.

    >>> from verishard import Mesh, ArrayType, AllReduce, AllGather
    >>> m = Mesh.parse("x=2,y=2")
    >>> s, d = ArrayType.parse("[3{x}5] partial{y}", m), ArrayType.parse("[5]", m)
    >>> check(m, s, d, [AllReduce("y"), AllGather(0, "x")])
    CheckOk(peak=5, types=([3{x}5] partial{y}, [3{x}5], [5]), received=(4, 3))
    >>> check(m, s, d, [AllGather(0, "x"), AllReduce("y")])
    Traceback (most recent call last):
    ...
    verishard.errors.PlanError: step 1 (AllGather(0, x)): a plan over partial uneven types first reduces all of the source's pending axes (y), by one AllReduce or ReduceScatter
    """
    op = reduction(src, dst)
    ints = mesh.encode() + src.pencode() + dst.pencode() + [len(plan)]
    for c in plan:
        ints += c.encode(mesh)
    out = _call(_core.pucheck, ints)
    if out[0] == 1:
        _raise_purejection(mesh, src, dst, out, plan)
    return _checked(mesh, out, plan, lambda m, o, p: ArrayType.pdecode(m, o, p, op))


def _raise_purejection(mesh: Mesh, src: ArrayType, dst: ArrayType, out: Sequence[int],
                       plan: Sequence[Collective]) -> None:
    """Raise the :class:`PlanError` for ``Puchecker.puerror`` (``[1, kind, step, reason, detail]``)."""
    kind = out[1]
    if kind == 0:
        raise ShardingError(f"{src} -> {dst}: not a valid problem over partial uneven types "
                            f"(same global shape, pending axes unused by the array type)")
    red = 1 if src.partial else 0
    if kind == 1:
        where = f"step 1 ({plan[0]})" if plan else "the empty plan"
        raise PlanError(f"{where}: a plan over partial uneven types first reduces all of the source's pending "
                        f"axes ({', '.join(mesh.names(src.partial))}), by one AllReduce or ReduceScatter",
                        step=1, reason="not_reduced")
    if kind == 2:
        where = f"step {len(plan)} ({plan[-1]})" if plan else "the empty plan"
        raise PlanError(f"{where}: a plan over partial uneven types ends by making the target's axes "
                        f"({', '.join(mesh.names(dst.partial))}) pending, by one ToPartial",
                        step=len(plan), reason="not_made_pending")
    if kind == 3:
        k = next((i for i, c in enumerate(plan[red:], red + 1) if isinstance(c, PARTIAL_COLLECTIVES)), len(plan))
        raise PlanError(f"step {k} ({plan[k - 1]}): over partial uneven types a reduction comes first and a "
                        f"make-pending last, once each", step=k, reason="misplaced")
    step = out[2] + red if out[2] else 0
    _raise_rejection(mesh, [1, step, out[3], out[4]], plan)


def _uplan(mesh: Mesh, src: ArrayType, dst: ArrayType) -> PlanReport:
    """``Upipeline.uplan_problem`` (theorem ``Upipelineproof.uplan_spec``):
    the even synthesizer's plan for a surrogate even problem, read back over
    the real sizes and validated by the uneven checker, or the fallback.

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse("x=2,y=2")
    >>> r = plan(m, ArrayType.parse("[3{x}5]", m), ArrayType.parse("[3{y}5]", m))
    >>> r.collectives, r.peak
    ((AllPermute(target=[3{y}5]),), 3)
    """
    out = _call(_core.uplan, mesh.encode() + src.encode() + dst.encode())
    if out[0] == 1:
        _raise_rejection(mesh, out, [])
    return _planned(mesh, out, _DECODE)


def umovement(t: ArrayType, op: Collective, t2: ArrayType) -> np.ndarray:
    """``Uchecker.umovement``: for every rank and every row-major position of
    its padded buffer after ``op``, the rank and padded offset it is read
    from; ``(N, 0)`` (N the number of devices) where the step writes fresh
    padding (theorem ``Tablesproof.umovement_spec``: ``[r, o]`` is where
    ``Uchecker.usrc`` reads rank ``r``'s padded position of row-major number
    ``o``). Shape ``(N, L, 2)``; for tests on small cases.

    >>> from verishard import Mesh, ArrayType, DynSlice
    >>> m = Mesh.parse("x=2")
    >>> umovement(ArrayType.parse("[3]", m), DynSlice(0, "x"), ArrayType.parse("[2{x}3]", m)).tolist()
    [[[0, 0], [0, 1]], [[1, 2], [2, 0]]]
    """
    _same_mesh(t.mesh, t2)
    out = _call(_core.umovement, t.mesh.encode() + t.encode() + op.encode(t.mesh) + t2.encode())
    return np.asarray(out, dtype=np.int64).reshape(t.mesh.num_devices, -1, 2)


@lru_cache(maxsize=4096)
def _refinement(mesh: Mesh, split: tuple[tuple[int, ...], ...]) -> Mesh:
    """``mesh`` with part ``u`` split into the sizes ``split[u]`` (``Refine.rmesh``)."""
    axes, u = [], 0
    for name, factors in mesh.axes:
        sizes: list[int] = []
        for _ in factors:
            sizes += split[u]
            u += 1
        axes.append((name, tuple(sizes)))
    return raw(Mesh, axes=tuple(axes))   # (the core's split of each part: its names and sizes are valid)


def lower_bound(src: ArrayType, dst: ArrayType) -> int:
    """``Traffic.lower_bound``: the most elements any device needs under ``dst``
    and does not hold under ``src``; no accepted plan receives less
    (``Trafficproof.accepted_traffic_lower_bound``).

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse("x=2,y=3")
    >>> lower_bound(ArrayType.parse("[3{x}6]", m), ArrayType.parse("[2{y}6]", m))
    2
    """
    _same_mesh(src.mesh, dst)
    return _call(_core.lower_bound, src.mesh.encode() + src.encode() + dst.encode())[0]


def _arrangements(n: int, pool: tuple[tuple[int, int], ...]) -> int:
    """How many ordered lists of distinct axes of ``pool`` (``(size, count)``
    pairs: how many axes of each size) have a product dividing ``n``
    (``Certify.arrangements``)."""
    total = 0
    for ks in product(*(range(c + 1) for _, c in pool)):
        p = 1
        for (s, _), k in zip(pool, ks):
            p *= s ** k
        if n % p == 0:
            w = factorial(sum(ks))
            for (_, c), k in zip(pool, ks):
                w *= comb(c, k)
            total += w
    return total


def certify_steps(t: ArrayType, figure: int, cap: int) -> int:
    """The steps ``Certify.certify`` enumerates from the certificate entry
    ``(t, figure)`` (``entry_ok``): none above the cap; else every gather,
    all-to-all and slice (``Certify.cands``), and where the figure exceeds
    the block every type of its shape (``permute_targets``). The slices and
    permutes are arrangements of the mesh's axes, factorial in their number:
    ``certify`` and ``mplan`` refuse an entry with more than
    :data:`~verishard.limits.MAX_CERTIFY_STEPS` before the core builds them.

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse(",".join(f"a{i}=2" for i in range(12)))
    >>> certify_steps(ArrayType.parse("[4096]", m), 0, 4096)
    1302061345
    """
    if t.size > cap:
        return 0
    sizes = t.mesh.part_sizes
    used = {a for d in t.dims for a in d.parts}
    free = tuple(sorted(Counter(s for a, s in enumerate(sizes) if a not in used).items()))
    r = len(t.dims)
    steps = 0
    for d in t.dims:
        local = d.global_size // _nprod(sizes, d.parts)
        steps += len(d.parts) * (1 + r) + _arrangements(local, free)
    if t.size < figure:   # permutes: every type of t's shape, its axes drawn from the whole mesh
        steps += _shaped(tuple((d.global_size, d.global_size // _nprod(sizes, d.parts)) for d in t.dims),
                         tuple(sorted(Counter(sizes).items())))
    return steps


def _nprod(sizes: Sequence[int], parts: Sequence[int]) -> int:
    p = 1
    for a in parts:
        p *= sizes[a]
    return p


@lru_cache(maxsize=1024)
def _shaped(shape: tuple[tuple[int, int], ...], pool: tuple[tuple[int, int], ...]) -> int:
    """How many types of the dimensions' ``(global, local)`` sizes ``shape``
    draw their axes from ``pool``, each at most once (``Certify.types_shaped``)."""
    if not shape:
        return 1
    (g, l), rest = shape[0], shape[1:]
    if l == 0 or g % l:
        return 0
    total = 0
    for ks in product(*(range(c + 1) for _, c in pool)):
        p = 1
        for (s, _), k in zip(pool, ks):
            p *= s ** k
        if p * l == g:
            w = factorial(sum(ks))
            for (_, c), k in zip(pool, ks):
                w *= comb(c, k)
            left = tuple((s, c - k) for (s, c), k in zip(pool, ks) if c > k)
            total += w * _shaped(rest, left)
    return total


def _check_certificate_size(entries: Sequence[tuple[ArrayType, int]], cap: int) -> None:
    """:class:`LimitError` for an entry whose steps (:func:`certify_steps`) exceed the limit."""
    for t, figure in entries:
        n = certify_steps(t, figure, cap)
        if n > MAX_CERTIFY_STEPS:
            raise LimitError(f"the certificate entry {t} on {t.mesh} has {n} steps to check, more than "
                             f"{MAX_CERTIFY_STEPS} (verishard.limits.MAX_CERTIFY_STEPS): its mesh has too many "
                             f"axes to check every step from it")


def certify(src: ArrayType, dst: ArrayType, cap: int, entries: Sequence[tuple[ArrayType, int]],
            traffic: int, over: Mesh | None = None) -> bool:
    """``Certify.certify_split``: whether the certificate ``entries`` (types
    with potentials, from an untrusted search such as ``optimal.search``)
    proves that no plan the checker accepts from ``src`` to ``dst`` with every
    type of local size at most ``cap`` receives less than ``traffic``, over
    ``src``'s mesh and over ``over``, the mesh the entries are over: that mesh
    itself or ``src.mesh.prime_parts()`` (its prime sub-axes of size 2 or
    more); by default the entries' mesh, or ``src``'s when there are none
    (``Certifyproof.certify_split_minimal``).

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse("x=2,y=3")
    >>> s, d = ArrayType.parse("[9, 2{y}6, 2]", m), ArrayType.parse("[3{y}9, 3{x}6, 2]", m)
    >>> entries = [(s, 21), (ArrayType.parse("[9, 1{y,x}6, 2]", m), 21), (ArrayType.parse("[9, 2{y}6, 1{x}2]", m), 21)]
    >>> certify(s, d, 36, entries, 21), certify(s, d, 36, entries, 22), certify(s, d, 36, entries[:2], 21)
    (True, False, False)
    """
    mesh = src.mesh
    _same_mesh(mesh, dst)
    over = over if over is not None else entries[0][0].mesh if entries else mesh
    fine, groups = mesh.prime_parts()
    if over == mesh:
        split = [[n] for n in mesh.part_sizes]
    elif over == fine:
        split = [[fine.part_sizes[q] for q in qs] for qs in groups]
    else:
        raise ShardingError(f"the certificate's types are over {over}, neither {mesh} nor its prime sub-axes {fine}")
    _same_mesh(over, *(t for t, _ in entries))
    _check_certificate_size(entries, cap)
    ints = mesh.encode() + [len(split)]
    for sizes in split:
        ints += [len(sizes), *sizes]
    ints += [cap, traffic] + src.encode() + dst.encode() + [len(entries)]
    for t, figure in entries:
        ints.append(figure)
        ints += t.encode()
    return _call(_core.certify, ints)[0] == 1


def mplan(mesh: Mesh, src: ArrayType, dst: ArrayType, candidate: Sequence[Collective] | None,
          entries: Sequence[tuple[ArrayType, int]]) -> PlanReport:
    """``Eminimal.emplan_problem``, ``plan(..., minimal=True)`` in one call
    (``Eminimalproof.emplan_spec``, ``emplan_least``): the core carries
    ``candidate`` (a plan over ``mesh.prime_parts()``, e.g.
    ``optimal.search``'s; None: the pipeline's own plan) to a refinement of
    ``mesh``, checks it there, compares its peak with ``max(size(src),
    size(dst))`` and accepts the certificate ``entries`` (types over
    ``mesh.prime_parts()`` with potentials) at the traffic the checker
    reports for the plan (``Minimal.mplan_problem``,
    ``Minimalproof.mplan_spec``); it returns the one-step exchange instead
    where that receives less than the plan and a free dimension lets it run
    in pieces (the exchange receives the lower bound: no certificate is
    needed for it). Raises :class:`PlanError` when the checker refuses the
    candidate, a type along it is above the bound, or (the exchange not
    receiving less) the certificate does not prove its traffic least.

    >>> from verishard import Mesh, ArrayType, DynSlice, AllToAll
    >>> m = Mesh.parse("x=2,y=3")
    >>> s, d = ArrayType.parse("[9, 2{y}6]", m), ArrayType.parse("[3{y}9, 3{x}6]", m)
    >>> entries = [(s, 12), (ArrayType.parse("[9, 1{y,x}6]", m), 12)]
    >>> r = mplan(m, s, d, [AllToAll(1, 0, "y"), DynSlice(1, "x")], entries)
    >>> r.received, r.peak
    ((12, 0), 18)
    >>> mplan(m, s, d, None, entries)
    Traceback (most recent call last):
    ...
    verishard.errors.PlanError: the certificate does not prove traffic 15 least within the bound (Minimal.mplan_problem)

    With a free dimension (the last) the exchange receives the lower bound,
    18, less than the pipeline's plan (30) or the least plan of collectives
    (21), and is returned with no certificate:

    >>> s, d = ArrayType.parse("[9, 2{y}6, 2]", m), ArrayType.parse("[3{y}9, 3{x}6, 2]", m)
    >>> r = mplan(m, s, d, None, [])
    >>> r.collectives, r.received, r.peak
    ((Exchange(target=[3{y}9, 3{x}6, 2], dim=2),), (18,), 36)
    """
    _same_mesh(mesh, src, dst)
    fine = mesh.prime_parts()[0]
    ints = mesh.encode() + src.encode() + dst.encode()
    if candidate is None:
        ints.append(0)
    else:
        ints += [1, len(candidate)]
        for c in candidate:
            if not isinstance(c, Collective):
                raise PlanError(f"plan step {c!r} is not a collective")
            ints += c.encode(fine)
    ints.append(len(entries))
    _same_mesh(fine, *(t for t, _ in entries))
    _check_certificate_size(entries, max(src.size, dst.size))
    for t, figure in entries:
        ints.append(figure)
        ints += t.encode()
    out = _call(_core.mplan, ints)
    if out[0] == 1:
        step, code, detail = out[1], out[2], out[3]
        key, template = REASONS[code]
        why = template.format(detail=detail, name=detail)
        where = "the problem itself" if step == 0 else f"step {step} of the plan carried to {mesh.refined()}"
        raise PlanError(f"the verified checker refused the candidate: {where}: {why}", step=step, reason=key)
    if out[0] == 2:
        raise PlanError(f"the candidate peaks at {out[1]} elements per device, above the bound "
                        f"{max(src.size, dst.size)}", reason="above_bound")
    if out[0] == 3:
        raise PlanError(f"the certificate does not prove traffic {out[1]} least within the bound "
                        f"(Minimal.mplan_problem)", reason="not_least")
    if out[0] == 4:
        return _exchanged(src, dst, out)
    return _planned(mesh, out, _DECODE)


def ulower_bound(src: ArrayType, dst: ArrayType) -> int:
    """``Utraffic.ulower_bound``: over uneven types, the most valid elements any
    device needs that it does not hold validly; no plan the uneven checker
    accepts receives less (``Utrafficproof.ucheck_traffic_lower_bound``), and
    it is ``lower_bound`` on even types (``ulower_bound_even``).

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse("x=2,y=2")
    >>> ulower_bound(ArrayType.parse("[3{x}5, 3]", m), ArrayType.parse("[5, 2{y}3]", m))
    6
    """
    return _call(_core.ulower_bound, src.mesh.encode() + src.encode() + dst.encode())[0]


def synthesize(mesh: Mesh, src: ArrayType, dst: ArrayType) -> tuple[bool, list[Collective]]:
    """Run the extracted synthesizer (``Search.synthesize_best``) on ``mesh`` as given.

    Returns whether the memory bound is guaranteed, and the collectives.

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse("x=2")
    >>> synthesize(m, ArrayType.parse("[2{x}4]", m), ArrayType.parse("[4]", m))
    (True, [AllGather(dim=0, axes=('x',))])
    """
    _same_mesh(mesh, src, dst)
    out = _call(_core.synthesize, mesh.encode() + src.encode() + dst.encode())
    guaranteed, s, pos, plan = bool(out[0]), out[1], 2, []
    for _ in range(s):
        c, pos = Collective.decode(mesh, out, pos)
        plan.append(c)
    return guaranteed, plan


@lru_cache(maxsize=1024)  # types are immutable; the runtime asks for the same ones repeatedly
def block_starts(t: ArrayType) -> np.ndarray:
    """Global offset of every rank's block in every dimension, shape ``(N, rank)``
    (``Types.block_starts``: block index times local size; theorem
    ``Tablesproof.block_starts_spec``: row ``r``, column ``d`` is where rank
    ``r``'s block starts in dimension ``d``, its local index ``k`` there the
    global index ``start + k``); read-only, cached.

    >>> from verishard import ArrayType
    >>> block_starts(ArrayType.parse("[2{x}4, 3{y}6]", "x=2,y=2")).tolist()
    [[0, 0], [0, 3], [2, 0], [2, 3]]
    """
    out = _call(_core.blocks, t.mesh.encode() + t.encode())
    starts = np.asarray(out, dtype=np.int64).reshape(t.mesh.num_devices, t.rank)
    starts.flags.writeable = False
    return starts


@lru_cache(maxsize=1024)
def permute_sources(src: ArrayType, dst: ArrayType) -> np.ndarray:
    """``p[c]``: the rank that sends its whole local array to rank ``c`` in an
    ``AllPermute`` from ``src`` to ``dst`` (``Permute.permute_table``); read-only, cached.

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse("x=2,y=2")
    >>> permute_sources(ArrayType.parse("[2{x}4]", m), ArrayType.parse("[2{y}4]", m)).tolist()
    [0, 2, 1, 3]
    """
    _same_mesh(src.mesh, dst)
    out = _call(_core.permute, src.mesh.encode() + src.encode() + dst.encode())
    sources = np.asarray(out, dtype=np.int64)
    sources.flags.writeable = False
    return sources


def movement(t: ArrayType, op: Collective, t2: ArrayType) -> np.ndarray:
    """For every rank and every row-major local offset after ``op``, the rank
    and local offset it comes from (``Semantics.movement``; theorem
    ``Tablesproof.movement_spec``: ``[r, o]`` is where ``Semantics.source``
    reads rank ``r``'s output position of row-major number ``o``); shape ``(N, L, 2)``.
    Meant for tests on small cases: it is as large as the whole array.

    After an all-gather over two devices, both hold rank 0's two elements
    followed by rank 1's:

    >>> from verishard import Mesh, ArrayType, AllGather
    >>> m = Mesh.parse("x=2")
    >>> movement(ArrayType.parse("[2{x}4]", m), AllGather(0, "x"), ArrayType.parse("[4]", m)).tolist()
    [[[0, 0], [0, 1], [1, 0], [1, 1]], [[0, 0], [0, 1], [1, 0], [1, 1]]]
    """
    _same_mesh(t.mesh, t2)
    out = _call(_core.movement, t.mesh.encode() + t.encode() + op.encode(t.mesh) + t2.encode())
    return np.asarray(out, dtype=np.int64).reshape(t.mesh.num_devices, -1, 2)


@dataclass(frozen=True)
class Piece:
    """One piece of a cross-mesh schedule (``Crossmesh.piece``): the world
    rank ``src`` that sends it, the source block ``cell`` it lies in (block
    number per dimension), and its global box, ``(start, length)`` per
    dimension."""

    src: int
    cell: tuple[int, ...]
    box: tuple[tuple[int, int], ...]


def xplan(src: ArrayType, src_ranks: Sequence[int], dst: ArrayType,
          dst_ranks: Sequence[int], start: int | None = None) -> list[list[Piece]] | None:
    """The verified cross-mesh schedule (``Crossmesh.xplan``): for every
    device of ``dst.mesh`` in rank order, the pieces of its block and their
    senders (world ranks); None when the core refuses the problem. With
    ``start`` (an integer >= 0), ``Balance.xplan_bal``'s: the same pieces, the
    moved pieces of each source block dealt over the ranks holding it from
    holder ``start`` on (``Balanceproof.xplan_bal_balanced``).

    >>> from verishard import Mesh, ArrayType
    >>> s = ArrayType.parse("[3{x}6]", Mesh.parse("x=2"))
    >>> d = ArrayType.parse("[2{u}6]", Mesh.parse("u=3"))
    >>> [[(p.src, p.box) for p in ps] for ps in xplan(s, [0, 1], d, [2, 3, 4])]
    [[(0, ((0, 2),))], [(0, ((2, 1),)), (1, ((3, 1),))], [(1, ((4, 2),))]]
    """
    ints = (src.mesh.encode() + [len(src_ranks), *map(int, src_ranks)] + src.encode()
            + dst.mesh.encode() + [len(dst_ranks), *map(int, dst_ranks)] + dst.encode() + [_deal(start)])
    out = _call(_core.xplan, ints)
    if out[0] != 0:
        return None
    k = dst.rank
    pos = 2
    result = []
    for _ in range(out[1]):
        n = out[pos]
        pos += 1
        pieces = []
        for _ in range(n):
            r = out[pos]
            vals = out[pos + 1:pos + 1 + 3 * k]
            pos += 1 + 3 * k
            pieces.append(Piece(r, tuple(vals[0::3]), tuple(zip(vals[1::3], vals[2::3]))))
        result.append(pieces)
    return result


def _deal(start: int | None) -> int:
    """The builder choice the core reads: 0 for ``Crossmesh.xplan``, ``start + 1`` for ``Balance.xplan_bal``."""
    if start is None:
        return 0
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < 2**50:
        raise ShardingError(f"the senders' rotation must be an integer in 0..2**50 - 1, not {start!r}")
    return start + 1


@dataclass(frozen=True)
class Cut:
    """One transfer of a staged cross-mesh schedule (``Rounds.cut``): the
    sending and receiving world ranks, the index of the target device, and
    the global box, ``(start, length)`` per dimension."""

    src: int
    dst: int
    target: int
    box: tuple[tuple[int, int], ...]


def xrounds(src: ArrayType, src_ranks: Sequence[int], dst: ArrayType, dst_ranks: Sequence[int],
            budget: int, start: int | None = None) -> list[list[Cut]] | None:
    """The rounds of the verified staged cross-mesh transfer (``Rounds.xrounds``
    on ``Crossmesh.xplan``'s schedule, theorem ``Roundsproof.xrounds_correct``;
    with ``start``, on ``Balance.xplan_bal``'s, ``Balanceproof.xrounds_bal_correct``):
    every piece a target receives from another rank cut into slices that fit
    ``budget`` elements, packed first fit (each cut into the first round with
    room for it, searched from the first rounds where its sender and receiver
    still have room: near linear in the cuts) into rounds where each rank sends at
    most ``budget`` and receives at most ``budget`` elements, or moves a single
    cut; None when the core refuses the problem. A budget above 2**50 elements
    raises :class:`LimitError` (the core's integers stay below 2**51).

    >>> from verishard import Mesh, ArrayType
    >>> s = ArrayType.parse("[3{x}6]", Mesh.parse("x=2"))
    >>> d = ArrayType.parse("[2{u}6]", Mesh.parse("u=3"))
    >>> [[(c.src, c.dst, c.box) for c in rd] for rd in xrounds(s, [0, 1], d, [2, 3, 4], 1)]
    [[(0, 2, ((0, 1),)), (1, 3, ((3, 1),))], [(0, 2, ((1, 1),)), (1, 4, ((4, 1),))], [(0, 3, ((2, 1),)), (1, 4, ((5, 1),))]]
    """
    ints = ([int(budget)] + src.mesh.encode() + [len(src_ranks), *map(int, src_ranks)] + src.encode()
            + dst.mesh.encode() + [len(dst_ranks), *map(int, dst_ranks)] + dst.encode() + [_deal(start)])
    out = _call(_core.xrounds, ints)
    if out[0] != 0:
        return None
    pos, result = 2, []
    for _ in range(out[1]):
        n, pos, rd = out[pos], pos + 1, []
        for _ in range(n):
            a, b, j, k = out[pos:pos + 4]
            vals = out[pos + 4:pos + 4 + 2 * k]
            pos += 4 + 2 * k
            rd.append(Cut(a, b, j, tuple(zip(vals[0::2], vals[1::2]))))
        result.append(rd)
    return result


def _xplan_ints(src: ArrayType, src_ranks: Sequence[int], dst: ArrayType, dst_ranks: Sequence[int]) -> list[int]:
    return (src.mesh.encode() + [len(src_ranks), *map(int, src_ranks)] + src.encode()
            + dst.mesh.encode() + [len(dst_ranks), *map(int, dst_ranks)] + dst.encode())


def _start(start: int) -> int:
    return _deal(start) - 1


def _read_piece(out: Sequence[int], pos: int, k: int) -> tuple[Piece, int]:
    vals = out[pos + 1:pos + 1 + 3 * k]
    return Piece(out[pos], tuple(vals[0::3]), tuple(zip(vals[1::3], vals[2::3]))), pos + 1 + 3 * k


def wplan(src: ArrayType, src_ranks: Sequence[int], dst: ArrayType, dst_ranks: Sequence[int],
          start: int = 0) -> list[list[Piece]] | None:
    """The world schedule assembled from every target's own receive list
    (``Perrank.wplan``; theorems ``Perrankproof.wplan_correct``: every
    guarantee of ``xplan_correct``; ``rank_recv_restrict`` and
    ``rank_send_restrict``: each rank's :func:`xrank` part is its
    restriction): every target device's pieces, senders dealt over each
    source block's holders from holder ``start``. None when the core refuses.

    >>> from verishard import Mesh, ArrayType
    >>> s = ArrayType.parse("[3{x}6]", Mesh.parse("x=2"))
    >>> d = ArrayType.parse("[2{u}6]", Mesh.parse("u=3"))
    >>> [[(p.src, p.box) for p in ps] for ps in wplan(s, [0, 1], d, [2, 3, 4])]
    [[(0, ((0, 2),))], [(0, ((2, 1),)), (1, ((3, 1),))], [(1, ((4, 2),))]]
    """
    out = _call(_core.wplan, _xplan_ints(src, src_ranks, dst, dst_ranks) + [_start(start)])
    if out[0] != 0:
        return None
    k, pos, result = dst.rank, 2, []
    for _ in range(out[1]):
        n, pos, pieces = out[pos], pos + 1, []
        for _ in range(n):
            p, pos = _read_piece(out, pos, k)
            pieces.append(p)
        result.append(pieces)
    return result


class RankPart(NamedTuple):
    """One rank's own part of the world schedule :func:`wplan` builds
    (``Perrank.rank_recv`` and ``rank_send``): ``recv``, the pieces of its
    target block (None when it is no target), each with the cuts it arrives
    in (``Rounds.cut_box``; none for a piece it holds itself); ``send``, the
    pieces it sends to other ranks as ``(target device, receiving rank,
    piece, cuts)``, in target order."""

    recv: tuple[tuple[Piece, tuple[Box, ...]], ...] | None
    send: tuple[tuple[int, int, Piece, tuple[Box, ...]], ...]


def xrank(src: ArrayType, src_ranks: Sequence[int], dst: ArrayType, dst_ranks: Sequence[int], start: int,
          target: int | None, source: int | None, budget: int) -> RankPart | None:
    """What target device ``target`` receives and source device ``source``
    sends (either None), computed from the two layouts alone, in time
    linear in the two meshes' devices plus the rank's own pieces: the
    restriction of :func:`wplan`'s world schedule to the rank
    (``Perrankproof.rank_recv_restrict``, ``rank_send_restrict``; senders
    balanced: ``rank_send_balanced``). Each moved piece comes with its cuts
    of at most ``budget`` elements (a slice larger than it alone), the same
    on both sides. None when the core refuses.

    >>> from verishard import Mesh, ArrayType
    >>> s = ArrayType.parse("[3{x}6]", Mesh.parse("x=2"))
    >>> d = ArrayType.parse("[2{u}6]", Mesh.parse("u=3"))
    >>> part = xrank(s, [0, 1], d, [2, 3, 4], 0, 1, 0, 100)
    >>> [(p.src, p.box, cuts) for p, cuts in part.recv]
    [(0, ((2, 1),), (((2, 1),),)), (1, ((3, 1),), (((3, 1),),))]
    >>> [(j, r, p.box) for j, r, p, _ in part.send]
    [(0, 2, ((0, 2),)), (1, 3, ((2, 1),))]
    """
    if not 0 <= int(budget) <= 2**50:
        raise LimitError(f"a cut budget of {budget} elements: at most 2**50")
    ints = ([int(budget)] + _xplan_ints(src, src_ranks, dst, dst_ranks) + [_start(start)]
            + [0 if target is None else int(target) + 1, 0 if source is None else int(source) + 1])
    out = _call(_core.xrank, ints)
    if out[0] != 0:
        return None
    k = dst.rank

    def cuts(pos):
        n, pos, cs = out[pos], pos + 1, []
        for _ in range(n):
            vals = out[pos:pos + 2 * k]
            cs.append(tuple(zip(vals[0::2], vals[1::2])))
            pos += 2 * k
        return tuple(cs), pos

    pos, recv = 2, []
    for _ in range(out[1]):
        p, pos = _read_piece(out, pos, k)
        cs, pos = cuts(pos)
        recv.append((p, cs))
    n, pos, send = out[pos], pos + 1, []
    for _ in range(n):
        j, r = out[pos], out[pos + 1]
        p, pos = _read_piece(out, pos + 2, k)
        cs, pos = cuts(pos)
        send.append((j, r, p, cs))
    return RankPart(None if target is None else tuple(recv), tuple(send))


def rank_rounds(cuts: Sequence[tuple[int, int, int]], world_size: int,
                budget_bytes: int) -> list[tuple[int, tuple[int, ...]]]:
    """The rounds of one rank's cuts ``(sender, receiver, bytes)``, by the
    rule every rank evaluates alike from its own cuts
    (``Rankrounds.rank_rounds``): per (sender, receiver) pair, in the order
    given, chunks of at most ``budget_bytes`` (a larger cut alone); chunk
    ``k`` of ``a -> b`` is round ``(k W + s) 2 + c`` (``W`` the least power
    of two of at least ``world_size`` and 2, ``s = (b - a) mod W``, ``c`` the
    bit of ``a`` at the lowest set bit of ``s``); cuts with ``a = b`` are
    dropped. Returns ``(round number, indices of its cuts in the input)`` in
    increasing round number. Theorems (``Rankroundsproof``):
    ``rank_rounds_agree``, ``rank_rounds_partner``, ``rank_rounds_budget``,
    ``rank_rounds_perm``.

    >>> rank_rounds([(0, 1, 16), (0, 1, 16), (2, 0, 16)], 4, 16)
    [(2, (0,)), (5, (2,)), (10, (1,))]
    """
    ints = [int(world_size), int(budget_bytes), len(cuts)]
    for a, b, n in cuts:
        ints += (int(a), int(b), int(n))
    out = _call(_core.rank_rounds, ints)
    rounds, pos = [], 1
    for _ in range(out[0]):
        t, n = out[pos], out[pos + 1]
        rounds.append((t, tuple(out[pos + 2:pos + 2 + n])))
        pos += 2 + n
    return rounds


Box = tuple[tuple[int, int], ...]
Layout = Sequence[tuple[int, Box]]


def _encode_layout(layout: Layout, k: int) -> list[int]:
    out = [len(layout)]
    for rank, box in layout:
        if len(box) != k:
            raise ShardingError(f"rank {rank}'s box {tuple(box)} has {len(box)} dimensions, not {k}")
        out.append(int(rank))
        for start, length in box:
            out += [int(start), int(length)]
    return out


def bplan(src: Layout, dst: Layout, budget: int) -> tuple[list[list[Piece]], list[list[Cut]]]:
    """The verified box schedule between two layouts given as explicit boxes
    (``(world rank, ((start, length), ...))`` per holder; boxes may be empty
    or held by several ranks): ``Boxes.bplan``'s pieces for every target of
    ``dst`` in order (sender and global box; ``cell`` is empty), and
    ``Boxes.brounds``'s rounds of cuts within ``budget`` elements per rank
    (theorem ``Boxesworldproof.brounds_correct``: every target gets every
    held index of its box exactly once, from itself where it holds it, else
    in one cut from a rank whose box holds it; every index of its box where
    :func:`bcovers` holds, ``Coverproof.brounds_complete``).

    >>> ps, rs = bplan([(0, ((0, 3),)), (1, ((3, 2),))], [(0, ((0, 2),)), (1, ((2, 3),))], 100)
    >>> [[(p.src, p.box) for p in q] for q in ps]
    [[(0, ((0, 2),))], [(1, ((3, 2),)), (0, ((2, 1),))]]
    >>> [[(c.src, c.dst, c.box) for c in rd] for rd in rs]
    [[(0, 1, ((2, 1),))]]
    """
    k = len(dst[0][1]) if dst else len(src[0][1]) if src else 0
    ints = [int(budget), k] + _encode_layout(src, k) + _encode_layout(dst, k)
    out = _call(_core.bplan, ints)
    pos, pieces = 1, []
    for _ in range(out[0]):
        n, pos, ps = out[pos], pos + 1, []
        for _ in range(n):
            vals = out[pos + 1:pos + 1 + 2 * k]
            ps.append(Piece(out[pos], (), tuple(zip(vals[0::2], vals[1::2]))))
            pos += 1 + 2 * k
        pieces.append(ps)
    return pieces, _decode_box_rounds(out, pos, k)


def bcovers(shape: Sequence[int], src: Layout, dst: Layout) -> bool:
    """The box schedule's precondition (``Cover.bcovers``, theorem
    ``Coverproof.bcovers_spec``): whether the source layout ``src`` holds
    every index of the global array of shape ``shape`` and every box of
    ``dst`` lies in the array (layouts as :func:`bplan` takes them). Where
    it holds, :func:`bplan`'s schedule gives every target rank every index
    of its box exactly once (``Coverproof.brounds_complete``).

    >>> bcovers((5,), [(0, ((0, 3),)), (1, ((3, 2),))], [(0, ((0, 2),)), (1, ((2, 3),))])
    True
    >>> bcovers((5,), [(0, ((0, 3),)), (1, ((3, 1),))], [(0, ((0, 2),)), (1, ((2, 3),))])
    False
    """
    k = len(shape)
    # The answer is the same in any order of the holders (the theorem is over
    # every list); by their boxes' starts, row-major, what is left of the array
    # stays a few boxes (a grid in another order splits it into up to a row's).
    src = sorted(src, key=lambda h: tuple(int(s) for s, _ in h[1]))
    ints = [k] + [int(n) for n in shape] + _encode_layout(src, k) + _encode_layout(dst, k)
    return _call(_core.bcovers, ints)[0] == 1


def _decode_box_rounds(out: Sequence[int], pos: int, k: int) -> list[list[Cut]]:
    """Rounds of cuts of ``k`` dimensions from ``out[pos:]`` (``put_box_rounds`` in bindings/glue.ml)."""
    n_rounds, pos, rounds = out[pos], pos + 1, []
    for _ in range(n_rounds):
        n, pos, rd = out[pos], pos + 1, []
        for _ in range(n):
            a, b, j = out[pos:pos + 3]
            vals = out[pos + 3:pos + 3 + 2 * k]
            pos += 3 + 2 * k
            rd.append(Cut(a, b, j, tuple(zip(vals[0::2], vals[1::2]))))
        rounds.append(rd)
    return rounds


def type_layout(t: ArrayType) -> list[tuple[int, Box]]:
    """The layout of type ``t`` as boxes (``Layoutchoice.tlayout``): device
    ``j`` of its mesh, as rank ``j``, holding the valid part of its block.

    >>> from verishard import Mesh, ArrayType
    >>> type_layout(ArrayType.parse("[2{x}3]", Mesh.parse("x=2")))
    [(0, ((0, 2),)), (1, ((2, 1),))]
    """
    return [(j, tuple((int(s), int(v)) for s, v in zip(t.block_starts(j), t.valid_shape(j))))
            for j in range(t.mesh.num_devices)]


def lplan(mesh: Mesh, src: Layout, dst: Layout, budget: int,
          types: tuple[ArrayType, ArrayType] | None = None) -> PlanReport | list[list[Cut]]:
    """The verified choice of path between two layouts given as boxes
    (``Layoutchoice.lplan``, theorem ``Layoutchoiceproof.lplan_spec``): with
    ``types`` proposed, the core checks that they describe exactly the two
    layouts (the same non-empty boxes as :func:`type_layout` of each, in
    order; ranks with empty boxes may be left out) and form a valid problem; then the
    type planner's plan (``Exchange.ueplan_problem``: collectives, or the
    exchange), as :func:`eplan` returns it. Otherwise the box schedule's
    rounds within ``budget`` elements per rank, as :func:`bplan` returns them.

    >>> from verishard import Mesh, ArrayType
    >>> m = Mesh.parse("x=2")
    >>> s, d = ArrayType.parse("[2{x}4]", m), ArrayType.parse("[4]", m)
    >>> lplan(m, type_layout(s), type_layout(d), 100, (s, d)).collectives
    (AllGather(dim=0, axes=('x',)),)
    >>> lplan(m, type_layout(s), [(0, ((0, 4),)), (1, ((1, 2),))], 100, (s, d))
    [[Cut(src=1, dst=0, target=0, box=((2, 2),)), Cut(src=0, dst=1, target=1, box=((1, 1),))]]
    """
    k = len(dst[0][1]) if dst else len(src[0][1]) if src else 0
    ints = [int(budget)] + mesh.encode()
    if types is None:
        ints.append(0)
    else:
        _same_mesh(mesh, *types)
        ints += [1] + types[0].encode() + types[1].encode()
    ints += [k] + _encode_layout(src, k) + _encode_layout(dst, k)
    out = _call(_core.lplan, ints)
    if out[0] == 1:
        return _decode_box_rounds(out, 1, k)
    out = out[1:]
    if out[0] == 2:   # the exchange, as in eplan
        dim = out[1] - 1 if out[1] else None
        return PlanReport(mesh, types[0], (Step(Exchange(types[1], dim), types[1], out[3]),), out[2])
    return _planned(mesh, out, _DECODE)


__all__ = ["PARTIAL_COLLECTIVES", "REASONS", "CheckOk", "reduction", "check", "Step", "PlanReport", "plan",
           "plan_checked", "eplan", "umovement", "lower_bound", "certify_steps", "certify", "mplan", "ulower_bound", "synthesize",
           "movement", "Piece", "xplan", "Cut", "xrounds", "wplan", "RankPart", "xrank", "rank_rounds", "bplan", "bcovers", "type_layout", "lplan"]
