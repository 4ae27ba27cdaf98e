"""Plans: checked sequences of collectives, with their memory and traffic.

Every :class:`Plan` is built from the verified checker's report: its types,
peak and per-step traffic are what ``Checker.check`` computed, never a
second Python computation.

>>> from verishard import Mesh, ArrayType, plan
>>> m = Mesh.parse("x=2,y=3")
>>> p = plan(m, "[3{x}6]", "[2{y}6]")
>>> [str(c) for c in p.collectives]
['DynSlice(0, y)', 'AllPermute([1{y,x}6])', 'AllGather(0, x)']
>>> p.peak, p.bound, p.traffic, p.lower_bound
(3, 3, 2, 2)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from typing import Any

from . import core
from .core import Step
from .collectives import AllGather, AllPermute, AllToAll, Collective, DynSlice, Exchange
from .errors import ParseError, PlanError, ShardingError
from .mesh import Mesh
from .sharding import ArrayType, raw

# The Plans this process made from a verified report (the pipeline's or the
# checker's) carry this token in their __dict__: the runtime trusts these and
# re-checks any other (built by hand, edited with dataclasses.replace, copied
# or unpickled: neither the constructor nor the pickled state, which
# Plan.__getstate__ leaves it out of, carries it).
_VERIFIED = object()


def _made(p: "Plan") -> "Plan":
    p.__dict__["_verified"] = _VERIFIED
    return p


def is_verified(p: object) -> bool:
    """Whether ``p`` is a Plan this process made from a verified report.

    >>> import copy, dataclasses, pickle
    >>> p = plan("x=2", "[2{x}4]", "[4]")
    >>> is_verified(p), is_verified(dataclasses.replace(p)), is_verified(None)
    (True, False, False)
    >>> is_verified(pickle.loads(pickle.dumps(p))), is_verified(copy.copy(p))
    (False, False)
    """
    return isinstance(p, Plan) and p.__dict__.get("_verified") is _VERIFIED


@dataclass(frozen=True)
class Plan:
    """A redistribution from ``src`` to ``dst`` over ``mesh``, accepted by the verified checker.

    ``mesh`` is the mesh the collectives run over: the user's mesh, with an
    axis split into sub-axes only where the plan needs one.
    ``guaranteed`` is the synthesizer's flag (memory bound and normal form
    proved for this plan), or None for a plan the user wrote.
    ``minimal``: the plan of ``plan(..., minimal=True)``: no plan within the
    memory bound receives less, of collectives or the exchange where a free
    dimension lets it run in pieces (``Eminimalproof.emplan_least``).

    >>> p = plan("x=2", "[2{x}4]", "[4]")
    >>> print(p)
    plan on {x:2}: [2{x}4] -> [4]
      step  collective       type after  local size  received/device
         0  (source)         [2{x}4]              2                0
         1  AllGather(0, x)  [4]                  4                2
    peak 4 elements/device; bound max(2, 4) = 4 (guaranteed by Pipelineproof.plan_spec)
    traffic 2 elements/device; lower bound 2 (ratio 1.00)
    >>> len(p), p.guaranteed
    (1, True)
    """

    mesh: Mesh
    src: ArrayType
    dst: ArrayType
    steps: tuple[Step, ...]
    peak: int
    guaranteed: bool | None = None
    minimal: bool = False

    @property
    def collectives(self) -> tuple[Collective, ...]:
        """The plan's collectives, in order.

        >>> plan("x=2", "[2{x}4]", "[4]").collectives
        (AllGather(dim=0, axes=('x',)),)
        """
        return tuple(s.collective for s in self.steps)

    @property
    def types(self) -> tuple[ArrayType, ...]:
        """The source type, then the type after each step.

        >>> plan("x=2,y=3", "[3{x}6]", "[2{y}6]").types
        ([3{x}6], [1{x,y}6], [1{y,x}6], [2{y}6])
        """
        return (self.src,) + tuple(s.type for s in self.steps)

    @property
    def bound(self) -> int:
        """``max(size(src), size(dst))``: no plan can peak lower.

        >>> plan("x=2", "[2{x}4]", "[4]").bound
        4
        """
        return max(self.src.size, self.dst.size)

    @property
    def traffic(self) -> int:
        """Elements received per device, summed over steps (each step's worst device).

        >>> plan("x=2,y=3", "[3{x}6]", "[2{y}6]").traffic
        2
        """
        return sum(s.received for s in self.steps)

    @property
    def partial(self) -> bool:
        """Whether the source or the target has pending axes (a partial problem).

        >>> plan("x=2", "[4] partial{x}", "[2{x}4]").partial
        True
        """
        return bool(self.src.partial or self.dst.partial)

    @property
    def uneven(self) -> bool:
        """Whether a type along the plan has an uneven dimension (blocks of
        ``ceil(g / n)``, padded buffers; planned by ``Upipeline.uplan_problem``,
        checked by ``Uchecker.ucheck``). ``peak``, ``bound`` and sizes are then
        padded-buffer sizes.

        >>> p = plan("x=2,y=2", "[3{x}5]", "[3{y}5]")
        >>> p.uneven, p.peak, p.bound, p.within_bound
        (True, 3, 3, True)
        """
        return any(t.uneven for t in self.types)

    @property
    def exchange(self) -> bool:
        """Whether the plan is the one-step exchange (``Exchange.echeck``).

        >>> plan("x=2,y=2", "[1{x,y}4, 4, 2]", "[4, 1{y,x}4, 2]", exchange=True).exchange
        True
        """
        return any(isinstance(c, Exchange) for c in self.collectives)

    @property
    def within_bound(self) -> bool:
        """``peak <= bound``: always so for even plans from the pipeline
        (``plan_spec``) and for plans between partial types over uneven
        dimensions (``Puexchangeproof.puplan_peak``: every type along the plan
        is within the bound, the peak equals it); for other uneven plans a fact
        of this plan only (no bound is proved for uneven plans of collectives;
        the peak is the verified checker's).

        >>> plan("x=2", "[3{x}5]", "[5]").within_bound
        True
        """
        return self.peak <= self.bound

    @property
    def reduce(self) -> str:
        """The reduction the pending axes wait for ("sum" when none are pending).

        >>> plan("x=2", "[4] partial(max){x}", "[4]").reduce
        'max'
        """
        return core.reduction(self.src, self.dst)

    @cached_property
    def lower_bound(self) -> int:
        """The transfer lower bound (``Traffic.lower_bound``, computed by the core):
        the most any device must receive; no accepted plan's traffic is lower
        (``Trafficproof.accepted_traffic_lower_bound``). For a partial problem
        the bound of its array types (``Ptrafficproof.pcheck_traffic_lower_bound``:
        positions only, the reduction's own traffic is not counted); for uneven
        types the valid elements a device lacks (``Utraffic.ulower_bound``,
        ``Utrafficproof.ucheck_traffic_lower_bound``); for partial types over
        uneven dimensions that of the array types, which every plan the
        checker accepts receives at least (``Pucheckerproof.pucheck_lower_bound``;
        the planner's exchange alone does, ``Puexchangeproof.puplan_lower_bound``;
        positions only again).

        >>> plan("x=2,y=3", "[3{x}6]", "[2{y}6]").lower_bound
        2
        >>> plan("x=2", "[4] partial{x}", "[2{x}4]").lower_bound, plan("x=2,y=2", "[2{x}4] partial{y}", "[4]").lower_bound
        (0, 2)
        >>> p = plan("x=2,y=2", "[3{x}5, 4] partial{y}", "[5, 2{y}4] partial{x}")
        >>> p.lower_bound, [s.received for s in p.steps]
        (6, [6, 6, 0])
        """
        if self.uneven:
            return core.ulower_bound(self.src.plain, self.dst.plain)
        return core.lower_bound(self.src.plain, self.dst.plain)

    @property
    def traffic_ratio(self) -> float:
        """``traffic / lower_bound`` (1.0 when both are 0, inf when only the
        bound is).

        >>> plan("x=2,y=3", "[3{x}6]", "[2{y}6]").traffic_ratio
        1.0
        """
        lb = self.lower_bound
        if lb == 0:
            return 1.0 if self.traffic == 0 else float("inf")
        return self.traffic / lb

    def __len__(self) -> int:
        return len(self.steps)

    def __getstate__(self) -> dict:
        # a copy or an unpickled Plan is not the verified one (is_verified)
        return {k: v for k, v in self.__dict__.items() if k != "_verified"}

    def __str__(self) -> str:
        rows = [("step", "collective", "type after", "local size", "received/device")]
        rows.append(("0", "(source)", str(self.src), str(self.src.size), "0"))
        for i, s in enumerate(self.steps, 1):
            rows.append((str(i), str(s.collective), str(s.type), str(s.local_size), str(s.received)))
        lines = [f"plan on {self.mesh}: {self.src} -> {self.dst}"] + table_lines(rows, left=(1, 2))
        if self.guaranteed and self.partial and self.uneven:
            note = (" (padded buffers; peak = bound by Puexchangeproof.puplan_peak; data correct by "
                    "Puexchangeproof.puexec_correct)")
        elif self.partial and self.uneven:
            note = (" (padded buffers; accepted by Puchecker.pucheck: data correct by Pucheckerproof.pucheck_correct,"
                    " every type within the peak by pucheck_peak)")
        elif self.guaranteed and self.exchange:
            note = (" (padded buffers; guaranteed by Exchangeproof.ueplan_spec)" if self.uneven
                    else " (guaranteed by Eminimalproof.emplan_spec)" if self.minimal
                    else " (guaranteed by Exchangeproof.eplan_spec)")
        else:
            note = _guarantee_note(self.guaranteed, self.partial, self.uneven, self.within_bound)
        lines.append(f"peak {self.peak} elements/device; bound max({self.src.size}, {self.dst.size}) = {self.bound}"
                     + note)
        if self.uneven and self.partial:
            lines.append(f"traffic {self.traffic} elements/device (padded buffers); lower bound {self.lower_bound}"
                         f" valid elements ({'Puexchangeproof.puplan_lower_bound' if self.guaranteed else 'Pucheckerproof.pucheck_lower_bound'};"
                         f" positions only: reductions move more)")
        elif self.uneven:
            lines.append(f"traffic {self.traffic} elements/device (padded buffers); lower bound {self.lower_bound}"
                         f" valid elements")
        elif self.partial:
            lines.append(f"traffic {self.traffic} elements/device; lower bound {self.lower_bound} "
                         f"(positions only; reductions move more)")
        else:
            lines.append(f"traffic {self.traffic} elements/device; lower bound {self.lower_bound}"
                         f" (ratio {self.traffic_ratio:.2f})"
                         + ("; least of any plan within the bound: of collectives, or the exchange where a free"
                            " dimension lets it run in pieces (Eminimalproof.emplan_least)" if self.minimal else ""))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """Plain data: mesh, source, target and steps (see ``docs/plan.md``).

        >>> plan("x=2", "[2{x}4]", "[4]").to_json()  # doctest: +NORMALIZE_WHITESPACE
        {'mesh': '{x:2}', 'src': '[2{x}4]', 'dst': '[4]',
         'steps': [{'op': 'all_gather', 'dim': 0, 'axes': ['x']}],
         'peak': 4, 'bound': 4, 'traffic': 2, 'lower_bound': 2, 'guaranteed': True,
         'types': ['[2{x}4]', '[4]'], 'received': [2]}
        """
        return {
            "mesh": str(self.mesh), "src": str(self.src), "dst": str(self.dst),
            "steps": [s.collective.to_json() for s in self.steps],
            "peak": self.peak, "bound": self.bound, "traffic": self.traffic,
            "lower_bound": self.lower_bound, "guaranteed": self.guaranteed,
            "types": [str(t) for t in self.types], "received": [s.received for s in self.steps],
        } | ({"minimal": True} if self.minimal else {})

    @staticmethod
    def from_json(obj: object) -> "Plan":
        """Re-check a plan given as data (only mesh, src, dst and steps are read).

        >>> p = Plan.from_json({"mesh": "x=2", "src": "[2{x}4]", "dst": "[4]",
        ...                     "steps": [{"op": "all_gather", "dim": 0, "axes": ["x"]}]})
        >>> p.collectives, p.peak, p.guaranteed
        ((AllGather(dim=0, axes=('x',)),), 4, None)
        >>> Plan.from_json({"mesh": "x=2", "src": "[2{x}4]", "dst": "[4]", "steps": []})
        Traceback (most recent call last):
        ...
        verishard.errors.PlanError: the empty plan: the plan does not end at the target type
        """
        if not isinstance(obj, dict):
            raise ParseError(f"a plan must be a JSON object, not {type(obj).__name__}")
        for key in ("mesh", "src", "dst", "steps"):
            if key not in obj:
                raise ParseError(f"missing key {key!r} in plan object")
        if not isinstance(obj["mesh"], str) or not isinstance(obj["src"], str) or not isinstance(obj["dst"], str):
            raise ParseError("plan keys 'mesh', 'src' and 'dst' must be strings")
        if not isinstance(obj["steps"], list):
            raise ParseError("plan key 'steps' must be a list")
        mesh = Mesh.parse(obj["mesh"])
        steps = [Collective.from_json(s, mesh) for s in obj["steps"]]
        return check(mesh, obj["src"], obj["dst"], steps)


def _guarantee_note(guaranteed: bool | None, partial: bool = False, uneven: bool = False,
                    within: bool = True) -> str:
    if uneven:
        where = "" if within else "; peak ABOVE the bound"
        if guaranteed is None:
            return f" (padded buffers{where}; accepted by Uchecker.ucheck: data correct by Ucheckerproof.ucheck_correct)"
        return (f" (padded buffers{where}; accepted and data correct by Upipelineproof.uplan_spec, "
                f"Ucheckerproof.ucheck_correct; no memory bound is proved for uneven types)")
    if guaranteed is None:
        return ""
    if guaranteed:
        return " (guaranteed by Ppipelineproof.pplan_spec)" if partial else " (guaranteed by Pipelineproof.plan_spec)"
    return " (NOT guaranteed: fallback plan)"


def _as_type(t: ArrayType | str, mesh: Mesh, what: str) -> ArrayType:
    if isinstance(t, str):
        return ArrayType.parse(t, mesh)
    if not isinstance(t, ArrayType):
        raise ShardingError(f"{what} must be an ArrayType or its notation, not {type(t).__name__}")
    if t.mesh is not mesh and t.mesh != mesh:
        raise ShardingError(f"{what} {t} is over mesh {t.mesh}, not {mesh}")
    return t


def _problem(mesh, src, dst) -> tuple[Mesh, ArrayType, ArrayType]:
    mesh = Mesh.coerce(mesh)
    src, dst = _as_type(src, mesh, "source"), _as_type(dst, mesh, "target")
    if src.global_shape != dst.global_shape:
        raise ShardingError(f"global shapes differ: source {src} has {src.global_shape}, "
                            f"target {dst} has {dst.global_shape}")
    return mesh, src, dst


def check(mesh: Mesh | str, src: ArrayType | str, dst: ArrayType | str,
          plan: Sequence[Collective]) -> Plan:
    """Check ``plan`` with the verified checker; return it as a :class:`Plan`.

    Raises :class:`PlanError` naming the first bad step and why.

    >>> from verishard import DynSlice, AllGather
    >>> check("x=2", "[2{x}4]", "[4]", [AllGather(0, "x")]).peak
    4
    >>> check("x=2", "[2{x}4]", "[4]", [DynSlice(0, "x")])
    Traceback (most recent call last):
    ...
    verishard.errors.PlanError: step 1 (DynSlice(0, x)): axis x already shards the array
    """
    mesh, src, dst = _problem(mesh, src, dst)
    if isinstance(plan, (str, bytes)) or not isinstance(plan, Sequence):
        raise PlanError(f"a plan is a sequence of collectives, not {type(plan).__name__}")
    ok = core.check(mesh, src, dst, list(plan))
    steps = tuple(Step(c, t, r) for c, t, r in zip(plan, ok.types[1:], ok.received))
    return _made(Plan(mesh, src, dst, steps, ok.peak, None))


def plan(mesh: Mesh | str, src: ArrayType | str, dst: ArrayType | str, *, exchange: bool = False,
         minimal: bool = False) -> Plan:
    """Plan a redistribution with the verified pipeline, in one call into the core.

    ``Ppipeline.pplan_problem`` reduces the source's pending axes the target
    does not keep (reduce-scatters where the target shards with them,
    all-reduces where the array is smallest otherwise), makes pending what
    the target adds, and plans the rest with ``Pipeline.plan_problem``
    (``Ppipelineproof.pplan_spec``; with nothing pending the plan is
    ``plan_problem``'s own, ``Ppipelineproof.pplan_plain``), which refines the mesh into prime sub-axes,
    synthesizes there, re-expresses the plan over the user's mesh with an
    axis split into sub-axes only where the plan needs one, and validates it
    there; ``Pipelineproof.plan_spec`` proves the result correct, within
    ``max(size(src), size(dst))`` and in normal form, for every valid problem.

    With ``exchange=True`` (nothing pending; uneven types too) the planner is
    ``Exchange.eplan_problem``: the same plan, unless one exchange step
    (an ``Alltoallv`` of exactly what each device needs, run by the
    simulator and MPI backends) receives strictly less and a free dimension
    lets it run in pieces; ``Exchangeproof.eplan_spec`` proves it correct,
    within the same bound, at the transfer lower bound.

    >>> p = plan("x=2,y=4", "[2{x}4]", "[1{y}4]")
    >>> str(p.mesh), [str(c) for c in p.collectives], p.peak
    ('{x:2, y:2*2}', ['DynSlice(0, y.0)', 'AllPermute([1{y}4])'], 2)
    >>> q = plan("x=2,y=2", "[1{x,y}4, 4, 2]", "[4, 1{y,x}4, 2]", exchange=True)
    >>> [str(c) for c in q.collectives], q.peak, q.traffic, q.lower_bound
    (['Exchange([4, 1{y,x}4, 2], dim=2)'], 8, 6, 6)
    >>> [str(c) for c in plan(q.mesh, q.src, q.dst).collectives], plan(q.mesh, q.src, q.dst).traffic
    (['AllToAll(0->1, y)', 'AllToAll(0->1, x)'], 8)

    With ``minimal=True`` (nothing pending, even types; ``exchange=True`` adds
    nothing: the exchange is compared) the plan's traffic is the least of any
    plan within ``max(size(src), size(dst))``: of any plan of collectives the
    checker accepts, over the mesh or its refinement into prime parts, and of
    the one-step exchange where a free dimension lets it run in pieces
    (``Eminimalproof.emplan_least``). One core call
    (``Eminimal.emplan_problem``) returns the exchange where it receives
    less than the pipeline's plan (it receives the lower bound) and the
    pipeline's plan where that is at the lower bound; otherwise a
    branch-and-bound (``optimal.search``, untrusted) either certifies the
    pipeline's plan or finds a cheaper one, and a second call carries that
    plan to the prime refinement, checks it, checks its peak against the
    bound and the certificate at the plan's own traffic
    (``Minimalproof.mplan_spec``), the exchange still compared. A cheaper
    plan of collectives is over the prime refinement and carries the
    checker's guarantees, not the pipeline's normal form. Raises
    :class:`PlanError` when the search gives up (its budget of states or
    time) or the core refuses.

    >>> p = plan("x=2,y=3", "[9, 2{y}6]", "[3{y}9, 3{x}6]")
    >>> m = plan("x=2,y=3", "[9, 2{y}6]", "[3{y}9, 3{x}6]", minimal=True)
    >>> (p.traffic, p.minimal), (m.traffic, m.minimal, m.peak <= m.bound)
    ((15, False), (12, True, True))
    >>> [str(c) for c in m.collectives]
    ['AllToAll(1->0, y)', 'DynSlice(1, x)']

    Where the least plan of collectives receives 21 and a free dimension
    (the last) lets the exchange run in pieces, the exchange receives 18,
    at the same peak:

    >>> m = plan("x=2,y=3", "[9, 2{y}6, 2]", "[3{y}9, 3{x}6, 2]", minimal=True)
    >>> [str(c) for c in m.collectives], m.traffic, m.peak == m.bound
    (['Exchange([3{y}9, 3{x}6, 2], dim=2)'], 18, True)
    """
    if not (type(mesh) is Mesh and type(src) is ArrayType and type(dst) is ArrayType and src.mesh is mesh
            and dst.mesh is mesh and src.global_shape == dst.global_shape):
        mesh, src, dst = _problem(mesh, src, dst)   # (the same checks, and the error when one fails)
    if minimal:
        return _minimal(mesh, src, dst)
    return _eplanned(mesh, src, dst) if exchange else _planned(mesh, src, dst)


@lru_cache(maxsize=256)
def _minimal(mesh: Mesh, src: ArrayType, dst: ArrayType) -> Plan:
    """The least-traffic plan within the bound, the exchange among the plans
    (see :func:`plan`). Python only proposes: one core call,
    ``Eminimal.emplan_problem``, checks the pipeline's plan at the lower
    bound (no certificate needed) or returns the exchange where that
    receives less and can run in pieces; only where it refuses for want of
    a certificate does the search (untrusted) offer a candidate plan and a
    certificate, which a second call carries to the refinement, checks,
    checks its peak against the bound and the certificate at its own
    traffic, the exchange still compared (``Eminimalproof.emplan_spec``,
    ``emplan_least``)."""
    from . import optimal

    if src.partial or dst.partial or src.uneven or dst.uneven:
        raise ShardingError(f"minimal=True certifies plans between even types with nothing pending, "
                            f"not {src} -> {dst}")
    candidate = None
    try:
        r = core.mplan(mesh, src, dst, None, ())
    except PlanError as e:
        if e.reason != "not_least":
            raise
        p = _planned(mesh, src, dst)
        fine, groups = mesh.prime_parts()
        found = optimal.search(fine, optimal.onto(src, fine, groups), optimal.onto(dst, fine, groups),
                               p.traffic, p.bound)
        if found.gave_up is not None:
            raise PlanError(f"cannot certify the least traffic of {src} -> {dst}: {found.gave_up} "
                            f"(plan() without minimal=True gives the verified plan, traffic {p.traffic})") from None
        candidate = found.better
        r = core.mplan(mesh, src, dst, candidate, found.entries)
    # the pipeline's own plan keeps plan_spec's guarantees (Minimalproof.mplan_pipeline), the exchange
    # eplan_spec's (Eminimalproof.emplan_spec); a cheaper plan of collectives the checker's
    exchanged = any(isinstance(s.collective, Exchange) for s in r.steps)
    made = from_report(r, src, dst)
    return _made(replace(made, guaranteed=True if candidate is None or exchanged else None, minimal=True))


@lru_cache(maxsize=4096)
def _eplanned(mesh: Mesh, src: ArrayType, dst: ArrayType) -> Plan:
    return from_report(core.eplan(mesh, src, dst), src, dst)


@lru_cache(maxsize=4096)  # plans are immutable; a hit skips the core call and the decoding
def _planned(mesh: Mesh, src: ArrayType, dst: ArrayType) -> Plan:
    return from_report(core.plan_checked(mesh, src, dst), src, dst)   # (plan() checked the types are over mesh)


def from_report(r: core.PlanReport, src: ArrayType, dst: ArrayType) -> Plan:
    """The Plan of a verified planner's report for the user's problem ``src ->
    dst`` (well formed by construction: without the dataclass ``__init__``),
    once its first and last types are the user's ``src`` and ``dst`` over the
    report's mesh (the one place every planned Plan passes: ``plan``,
    ``exchange=True`` and the front ends that call them).

    The planners' theorems say so (``Ppipelineproof.pplan_spec``,
    ``Exchangeproof.eplan_spec``, ...); this checks that the bindings and
    the decoding handed over what they state:

    >>> m = Mesh.parse("x=2,y=4")
    >>> src, dst = ArrayType.parse("[2{x}4]", m), ArrayType.parse("[1{y}4]", m)
    >>> r = core.plan_checked(m, src, dst)
    >>> from_report(r, src, dst).dst
    [1{y}4]
    >>> from_report(r._replace(steps=r.steps[:1]), src, dst)     # a report cut short
    Traceback (most recent call last):
    ...
    verishard.errors.PlanError: the verified planner's plan for [2{x}4] -> [1{y}4] on {x:2, y:4} ends at [1{x,y.0}4] over {x:2, y:2*2}, not at the target [1{y}4]; nothing was run: this is a fault in verishard (its core, bindings or decoding), please report it
    """
    steps = r.steps
    last = steps[-1].type if steps else r.src
    if r.src != _lifted(src, r.mesh) or last != _lifted(dst, r.mesh):
        wrong = ("ends at " + _shown(last, dst.mesh)) if r.src == _lifted(src, r.mesh) else \
            ("starts at " + _shown(r.src, src.mesh))
        raise PlanError(f"the verified planner's plan for {src} -> {dst} on {src.mesh} {wrong}, not at the "
                        f"{'target ' + str(dst) if wrong[0] == 'e' else 'source ' + str(src)}; nothing was run: "
                        f"this is a fault in verishard (its core, bindings or decoding), please report it")
    return _made(raw(Plan, mesh=r.mesh, src=r.src, dst=last, steps=steps, peak=r.peak, guaranteed=True))


def _sub_parts(mesh: Mesh, finer: Mesh) -> tuple[tuple[int, ...], ...]:
    """For each part of ``mesh``, the consecutive parts of ``finer`` it is
    split into (``Refine.rmesh``: same axes, each part's size the product of
    its sub-parts'); PlanError when ``finer`` is no such refinement.

    >>> _sub_parts(Mesh.parse("x=2,y=4"), Mesh.parse("x=2,y=2*2"))
    ((0,), (1, 2))
    """
    fine = finer.part_sizes
    if [n for n, _ in mesh.axes] != [n for n, _ in finer.axes]:
        raise PlanError(f"the plan's mesh {finer} is not a refinement of {mesh}: other axes")
    out, q = [], 0
    for u, size in enumerate(mesh.part_sizes):
        start, prod = q, 1
        while q < len(fine) and (q == start or prod < size):
            prod *= fine[q]
            q += 1
        if prod != size or {finer._axis_of_part(k) for k in range(start, q)} != {mesh._axis_of_part(u)}:
            raise PlanError(f"the plan's mesh {finer} is not a refinement of {mesh}: part {mesh.part_name(u)}")
        out.append(tuple(range(start, q)))
    if q != len(fine):
        raise PlanError(f"the plan's mesh {finer} is not a refinement of {mesh}: parts left over")
    return tuple(out)


def _lifted(t: ArrayType, finer: Mesh) -> ArrayType:
    """``t`` over ``finer``, a refinement of its mesh: each part replaced by
    its sub-parts, major to minor (``Refine``'s lifting of a type).

    >>> _lifted(ArrayType.parse("[1{y,x}8, 3]", "x=2,y=4,z=2"), Mesh.parse("x=2,y=2*2,z=2"))
    [1{y,x}8, 3]
    >>> _lifted(ArrayType.parse("[2{y}8] partial(max){x}", "x=2,y=4"), Mesh.parse("x=2,y=2*2")).partial
    (0,)
    """
    if finer == t.mesh:
        return t
    sub = _sub_parts(t.mesh, finer)
    return ArrayType(finer, [(d.global_size, tuple(q for p in d.parts for q in sub[p])) for d in t.dims],
                     tuple(q for p in t.partial for q in sub[p]), t.reduce)


def _shown(t: ArrayType, mesh: Mesh) -> str:
    """``t`` (over a refinement of ``mesh``) for an error message, with its mesh when that is not ``mesh``."""
    return str(t) if t.mesh == mesh else f"{t} over {t.mesh}"


def express(mesh: Mesh, src: ArrayType, dst: ArrayType, fine: Mesh,
            raw: Sequence[Collective]) -> Plan:
    """Rewrite another planner's plan over ``fine = mesh.refined()`` over the
    coarsest mesh between the two that can express it, and check it there
    with the verified checker (the cross-check's reader of foreign plans;
    our own plans come re-expressed and validated from the core).

    >>> m = Mesh.parse("x=2,y=4")
    >>> fine = m.refined()
    >>> p = express(m, ArrayType.parse("[4{x}8]", m), ArrayType.parse("[8]", m), fine, [AllGather(0, "x")])
    >>> str(p.mesh), p.peak
    ('{x:2, y:4}', 8)
    """
    split: set[int] = set()
    while True:
        coarse, groups, owner = _partial_refinement(mesh, split)
        try:
            steps = [_translate_collective(c, fine, coarse, groups, owner) for c in raw]
        except _NeedsSplit as e:
            split.add(e.part)
            continue
        return check(coarse, _translate_type(src.refined(), coarse, groups, owner),
                     _translate_type(dst.refined(), coarse, groups, owner), steps)


class _NeedsSplit(Exception):
    def __init__(self, part: int):
        self.part = part


def _partial_refinement(mesh: Mesh, split: set[int]):
    """``mesh`` with the parts in ``split`` refined into primes; also, for every
    new part, the fine parts it stands for, and the user part it comes from."""
    table, fine_sizes = mesh.refinement(), mesh.refined().part_sizes
    axes, groups, owner, u = [], [], [], 0
    for name, factors in mesh.axes:
        new = []
        for f in factors:
            if u in split and len(table[u]) > 1:
                new += [fine_sizes[r] for r in table[u]]
                groups += [(r,) for r in table[u]]
                owner += [u] * len(table[u])
            else:
                new.append(f)
                groups.append(table[u])
                owner.append(u)
            u += 1
        axes.append((name, tuple(new)))
    return Mesh(tuple(axes)), groups, owner


def _translate_parts(parts: Sequence[int], groups, owner) -> tuple[int, ...]:
    where = {r: q for q, g in enumerate(groups) for r in g}
    out, i = [], 0
    while i < len(parts):
        q = where[parts[i]]
        if tuple(parts[i:i + len(groups[q])]) != groups[q]:
            raise _NeedsSplit(owner[q])
        out.append(q)
        i += len(groups[q])
    return tuple(out)


def _translate_type(t: ArrayType, coarse: Mesh, groups, owner) -> ArrayType:
    return ArrayType.from_parts(coarse, t.global_shape,
                                [_translate_parts(t.dim_parts(d), groups, owner) for d in range(t.rank)])


def _translate_collective(c: Collective, fine: Mesh, coarse: Mesh, groups, owner) -> Collective:
    if isinstance(c, AllPermute):
        return AllPermute(_translate_type(c.target, coarse, groups, owner))
    names = coarse.names(_translate_parts(c.parts(fine), groups, owner))
    if isinstance(c, AllGather):
        return AllGather(c.dim, names)
    if isinstance(c, DynSlice):
        return DynSlice(c.dim, names)
    return AllToAll(c.src_dim, c.dst_dim, names)


# ---------------------------------------------------------------------------
# Text tables: one layout for every plan and schedule verishard prints

MAX_SHOWN_PIECES = 20  # rows of a printed box schedule before "... N more pieces"


def table_lines(rows: Sequence[Sequence[str]], left: Sequence[int] = ()) -> list[str]:
    """``rows`` (the first is the header) as aligned lines indented by two
    spaces: the columns in ``left`` flush left, the others flush right.

    >>> print("\\n".join(table_lines([("step", "name"), ("1", "AllGather")], left=(1,))))
      step  name
         1  AllGather
    """
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) if k in left else c.rjust(w)
                             for k, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]


def box_text(box: Sequence[tuple[int, int]]) -> str:
    """A global box ``((start, length), ...)`` as numpy slices.

    >>> box_text(((0, 2), (4, 4)))
    '[0:2, 4:8]'
    """
    return "[" + ", ".join(f"{s}:{s + n}" for s, n in box) + "]"


def ranks_text(ranks: Sequence[int], limit: int = 12) -> str:
    """Ranks as a range where they are consecutive, else listed (the first ``limit``).

    >>> ranks_text([0, 1, 2, 3]), ranks_text([0, 2, 5]), ranks_text(range(0, 40, 2), limit=3)
    ('0..3', '0, 2, 5', '0, 2, 4, ... (20 ranks)')
    """
    ranks = list(ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}..{ranks[-1]}"
    if len(ranks) > limit:
        return ", ".join(map(str, ranks[:limit])) + f", ... ({len(ranks)} ranks)"
    return ", ".join(map(str, ranks))


def pieces_table(pieces: Sequence[tuple[int, str | None, int, int, Sequence[tuple[int, int]], int]],
                 limit: int = MAX_SHOWN_PIECES) -> list[str]:
    """The lines of a box schedule's table: one row per piece ``(round,
    tensor or None, sender, receiver, global box, bytes)``, the first
    ``limit`` of them, then ``... N more pieces``. The tensor column is
    shown when some piece names one.

    >>> print("\\n".join(pieces_table([(1, None, 0, 1, ((0, 2),), 8), (1, None, 1, 0, ((2, 2),), 8),
    ...                                 (2, None, 0, 1, ((4, 1),), 4)], limit=2)))
      round  sender -> receiver  box    bytes
          1  0 -> 1              [0:2]      8
          1  1 -> 0              [2:4]      8
      ... 1 more piece
    """
    named = any(name is not None for _, name, *_ in pieces)
    rows = [("round",) + (("tensor",) if named else ()) + ("sender -> receiver", "box", "bytes")]
    width = max((len(str(a)) for _, _, a, *_ in pieces), default=1)
    for rd, name, a, b, box, nbytes in pieces[:limit]:
        rows.append((str(rd),) + ((name or "",) if named else ()) + (f"{str(a).rjust(width)} -> {b}", box_text(box),
                                                                       str(nbytes)))
    lines = table_lines(rows, left=(1, 2, 3) if named else (1, 2))
    if len(pieces) > limit:
        more = len(pieces) - limit
        lines.append(f"  ... {more} more piece{'s' if more != 1 else ''}")
    return lines


__all__ = ["Plan", "check", "plan", "express", "is_verified", "table_lines", "box_text", "pieces_table",
           "ranks_text", "MAX_SHOWN_PIECES"]
