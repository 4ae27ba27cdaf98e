"""The cross-check harness: cases, planners, the table and its summary.

Planners (each returns a :class:`~verishard.crosscheck.result.PlannerResult`):

* ``ours``: :func:`verishard.plan` (the verified synthesizer, or its
  fallback while ``guaranteed`` is False);
* ``naive``: gather every axis, then slice (:func:`verishard.runtime.naive_plan`);
* ``xla``: :func:`verishard.crosscheck.xla.xla_plan` (needs JAX);
* ``dtensor-greedy`` / ``dtensor-mincost``: PyTorch DTensor's planner without
  and with its minimum-cost search (needs torch).

Every figure of the summary is a function of the table rows alone
(:func:`summarize`), and :func:`read_table` reads a written table back, so
the report can be recomputed from what it shows.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import VerishardError
from ..mesh import Mesh
from .. import core
from ..plan import Plan, plan as synthesize
from ..sharding import ArrayType
from .result import PlannerResult

__all__ = ["PLANNERS", "Case", "Row", "all_types", "grid_cases", "known_cases", "run_planner", "run_case",
           "summarize", "table_markdown", "read_table", "ours_plan", "naive"]

PLANNERS = ("ours", "naive", "xla", "dtensor-greedy", "dtensor-mincost")


# ---------------------------------------------------------------------------
# planners


def _communicating(p: Plan) -> int:
    from ..runtime.backend import step_call
    n, t = 0, p.src
    for s in p.steps:
        call = step_call(p.mesh, t, s.collective)
        if call is not None and call[0] != "dyn_slice":
            n += 1
        t = s.type
    return n


def _from_plan(name: str, p: Plan, **extra: Any) -> PlannerResult:
    return PlannerResult(name, "valid", "", plan=p, program=tuple(str(c) for c in p.collectives),
                         n_collectives=_communicating(p), peak_elements=p.peak, received_elements=p.traffic,
                         output_correct=True, extra=dict(extra))


def ours_plan(mesh: Mesh, src: ArrayType, dst: ArrayType) -> PlannerResult:
    """The ``ours`` planner: :func:`verishard.plan`, as a PlannerResult.

    >>> m = Mesh.parse("x=2,y=3")
    >>> r = ours_plan(m, ArrayType.parse("[3{x}6]", m), ArrayType.parse("[2{y}6]", m))
    >>> r.summary(), r.program, r.peak_elements, r.received_elements, r.extra
    ('ours: valid', ('DynSlice(0, y)', 'AllPermute([1{y,x}6])', 'AllGather(0, x)'), 3, 2, {'guaranteed': True})
    """
    p = synthesize(mesh, src, dst)
    return _from_plan("ours", p, guaranteed=p.guaranteed)


def naive(mesh: Mesh, src: ArrayType, dst: ArrayType) -> PlannerResult:
    """The ``naive`` planner: gather every sharded axis, then slice.

    >>> m = Mesh.parse("x=2,y=3")
    >>> r = naive(m, ArrayType.parse("[3{x}6]", m), ArrayType.parse("[2{y}6]", m))
    >>> r.summary(), r.program, r.peak_elements, r.n_collectives
    ('naive: valid', ('AllGather(0, x)', 'DynSlice(0, y)'), 6, 1)
    """
    from ..runtime.backend import naive_plan
    return _from_plan("naive", naive_plan(mesh, src, dst))


def run_planner(name: str, mesh: Mesh, src: ArrayType, dst: ArrayType) -> PlannerResult:
    """Run one planner; an unexpected failure becomes status ``error``.

    >>> m = Mesh.parse("x=2")
    >>> run_planner("ours", m, ArrayType.parse("[2{x}4]", m), ArrayType.parse("[4]", m)).summary()
    'ours: valid'
    >>> run_planner("mine", m, ArrayType.parse("[2{x}4]", m), ArrayType.parse("[4]", m))
    Traceback (most recent call last):
    ...
    ValueError: unknown planner 'mine'; known: ours, naive, xla, dtensor-greedy, dtensor-mincost
    """
    try:
        if name == "ours":
            return ours_plan(mesh, src, dst)
        if name == "naive":
            return naive(mesh, src, dst)
        if name == "xla":
            from .xla import xla_plan
            return xla_plan(mesh, src, dst)
        if name in ("dtensor-greedy", "dtensor-mincost"):
            from .torch_dtensor import dtensor_plan
            return dtensor_plan(mesh, src, dst, min_cost=name == "dtensor-mincost")
    except (VerishardError, ImportError, RuntimeError, ValueError) as e:
        return PlannerResult(name, "error", f"{type(e).__name__}: {e}")
    raise ValueError(f"unknown planner {name!r}; known: {', '.join(PLANNERS)}")


# ---------------------------------------------------------------------------
# cases


@dataclass(frozen=True)
class Case:
    """One redistribution to plan: mesh, source and target types, and where it comes from.

    >>> m = Mesh.parse("x=2,y=3")
    >>> c = Case(m, ArrayType.parse("[3{x}6]", m), ArrayType.parse("[2{y}6]", m), "example")
    >>> c.shape, c.bound, c.lower_bound, c.origin
    ((6,), 3, 2, 'grid')
    """

    mesh: Mesh
    src: ArrayType
    dst: ArrayType
    label: str = ""
    origin: str = "grid"

    @property
    def shape(self) -> tuple[int, ...]:
        """The global shape.

        >>> Case(Mesh.parse("x=2"), ArrayType.parse("[2{x}4, 3]", "x=2"), ArrayType.parse("[4, 3]", "x=2")).shape
        (4, 3)
        """
        return self.src.global_shape

    @property
    def bound(self) -> int:
        """``max(size(src), size(dst))``, elements per device.

        >>> Case(Mesh.parse("x=2"), ArrayType.parse("[2{x}4]", "x=2"), ArrayType.parse("[4]", "x=2")).bound
        4
        """
        return max(self.src.size, self.dst.size)

    @property
    def lower_bound(self) -> int:
        """The most elements any device must receive (``Traffic.lower_bound``).

        >>> Case(Mesh.parse("x=2"), ArrayType.parse("[2{x}4]", "x=2"), ArrayType.parse("[4]", "x=2")).lower_bound
        2
        """
        return core.lower_bound(self.src, self.dst)


def all_types(mesh: Mesh, shape: Sequence[int], uneven: bool = False) -> list[ArrayType]:
    """Every well-formed type over the whole axes of ``mesh`` (each axis used
    at most once, in any order within a dimension), sorted by text; even
    types only unless ``uneven`` (the foreign planners' even cases).

    >>> len(all_types(Mesh.parse("x=2,y=2"), (4, 4))), len(all_types(Mesh.parse("x=2,y=2"), (3, 4), uneven=True))
    (11, 11)
    """
    names = mesh.axis_names
    out = set()
    rank = len(shape)
    for assign in itertools.product(range(rank + 1), repeat=len(names)):
        groups = [[a for a, d in zip(names, assign) if d == k] for k in range(rank)]
        for orders in itertools.product(*[list(itertools.permutations(g)) for g in groups]):
            try:
                t = ArrayType.from_axes(mesh, shape, list(orders))
            except VerishardError:
                continue
            if uneven or not t.uneven:
                out.add(t)
    return sorted(out, key=str)


def grid_cases(mesh: Mesh | str, shape: Sequence[int], limit: int | None = None,
               seed: int = 0) -> tuple[list[Case], int]:
    """Every pair of types (or a deterministic sample of ``limit`` pairs) and
    the total number of pairs.

    >>> cases, total = grid_cases("x=2", (4,))
    >>> [(str(c.src), str(c.dst)) for c in cases], total
    ([('[2{x}4]', '[2{x}4]'), ('[2{x}4]', '[4]'), ('[4]', '[2{x}4]'), ('[4]', '[4]')], 4)
    >>> len(grid_cases("x=2,y=2", (4, 4), limit=3)[0])
    3
    """
    if isinstance(mesh, str):
        mesh = Mesh.parse(mesh)
    types = all_types(mesh, shape)
    total = len(types) ** 2
    idx = range(total)
    if limit is not None and limit < total:
        idx = sorted(np.random.default_rng(seed).choice(total, size=limit, replace=False).tolist())
    return [Case(mesh, types[k // len(types)], types[k % len(types)]) for k in idx], total


# (mesh, shape, src, dst, label, where it comes from)
KNOWN = [
    ("x=4,y=2", (16, 16, 16), "P('y', None, 'x')", "P(None, ('x', 'y'), None)",
     "XLA full rematerialization", "jax-ml/jax#21562, openxla/xla#15207"),
    ("x=2,y=2,z=2", (64, 64), "P(('x', 'y', 'z'), None)", "P(None, 'x')",
     "8-device analog of {devices=[256,1]} -> {devices=[1,64,4] last_tile_dim_replicate}", "jax-ml/jax#18591"),
    ("x=4,y=2", (16, 16, 16), "[Shard(1), Shard(1)]", "[Shard(1), Shard(2)]",
     "misaligned nested sharding (old planner: two all-gathers)", "pytorch/pytorch#131210"),
    ("x=4,y=2", (64, 64), "[Shard(0), Shard(0)]", "[Replicate(), Shard(0)]",
     "nested sharding", "DTensor greedy planner docstring"),
    ("x=2,y=2,z=2", (8, 16, 32), "[Shard(1), Shard(1), Shard(1)]", "[Shard(0), Shard(0), Shard(0)]",
     "three mesh dims move from one tensor dim to another", "DTensor flattening warning"),
    ("x=2,y=4", (64, 64), "[32{x}64, 64]", "[16{y}64, 64]",
     "needs a split axis for the memory bound", "model.md (over whole axes a full gather is needed)"),
]


def known_cases() -> list[Case]:
    """The cases from bug reports and documentation (``KNOWN``), as types.

    >>> c = known_cases()[0]
    >>> c.mesh, c.src, c.dst, c.origin
    ({x:4, y:2}, [8{y}16, 16, 4{x}16], [16, 2{x,y}16, 16], 'jax-ml/jax#21562, openxla/xla#15207')
    """
    from .. import notation
    out = []
    for mesh_text, shape, a, b, label, origin in KNOWN:
        mesh = Mesh.parse(mesh_text)

        def conv(s: str) -> ArrayType:
            if s.startswith("P("):
                return notation.from_partition_spec(mesh, shape, notation.parse_partition_spec(s))
            if s.startswith("[") and ("Shard" in s or "Replicate" in s):
                return notation.from_placements(mesh, shape, notation.parse_placements(s))
            return ArrayType.parse(s, mesh)
        out.append(Case(mesh, conv(a), conv(b), f"{label}: {a} -> {b}", origin))
    return out


# ---------------------------------------------------------------------------
# rows


@dataclass
class Row:
    """One (case, planner) line of the table; sizes in bytes per device.

    >>> m = Mesh.parse("x=2")
    >>> run_case(0, Case(m, ArrayType.parse("[2{x}4]", m), ArrayType.parse("[4]", m)), ["ours"])
    [Row(case=0, mesh='{x:2}', shape='4', src='[2{x}4]', dst='[4]', planner='ours', status='valid', peak=16, bound=16, received=8, lower_bound=8, collectives=1, note='')]
    """

    case: int
    mesh: str
    shape: str
    src: str
    dst: str
    planner: str
    status: str
    peak: int | None
    bound: int
    received: int | None
    lower_bound: int
    collectives: int | None
    note: str = ""

    @property
    def exceeds(self) -> bool | None:
        """Whether the peak is above the bound (None when the peak is unknown).

        >>> Row(0, "{x:2}", "4", "[2{x}4]", "[4]", "xla", "valid", 24, 16, 8, 8, 1).exceeds
        True
        >>> Row(0, "{x:2}", "4", "[2{x}4]", "[4]", "xla", "unsupported", None, 16, None, 8, None).exceeds is None
        True
        """
        return None if self.peak is None else self.peak > self.bound


def run_case(k: int, case: Case, planners: Iterable[str] = PLANNERS, itemsize: int = 4,
             results: dict | None = None) -> list[Row]:
    """Run ``planners`` on ``case``; rows numbered ``k``. ``results`` (a dict)
    receives the PlannerResult objects by planner name.

    >>> m = Mesh.parse("x=2,y=3")
    >>> case = Case(m, ArrayType.parse("[3{x}6]", m), ArrayType.parse("[2{y}6]", m))
    >>> results = {}
    >>> for r in run_case(7, case, ["ours", "naive"], itemsize=4, results=results):
    ...     print(r.case, r.planner, r.status, r.peak, r.bound, r.received, r.lower_bound)
    7 ours valid 12 12 8 8
    7 naive valid 24 12 12 8
    >>> sorted(results)
    ['naive', 'ours']
    """
    rows = []
    for name in planners:
        r = run_planner(name, case.mesh, case.src, case.dst)
        if results is not None:
            results[name] = r
        note = r.reason
        if name == "ours" and r.extra.get("guaranteed") is False:
            note = "fallback plan (guaranteed=False)"
        if r.extra.get("remat_warnings"):
            note = (note + "; " if note else "") + "XLA: involuntary full rematerialization"
        rows.append(Row(k, str(case.mesh), "x".join(map(str, case.shape)), str(case.src), str(case.dst), name,
                        r.status, None if r.peak_elements is None else r.peak_elements * itemsize,
                        case.bound * itemsize,
                        None if r.received_elements is None else r.received_elements * itemsize,
                        case.lower_bound * itemsize, r.n_collectives, _clean(note)))
    return rows


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("|", "/")).strip()[:160]


# ---------------------------------------------------------------------------
# summary


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(rows: list[Row], timings: dict[int, tuple[float, float]] | None = None) -> dict[str, Any]:
    """Per planner: cases, status counts, the fraction of measured cases whose
    peak exceeds ``max(size(src), size(dst))``, and the mean received/lower
    bound; with ``timings`` (case -> (xla seconds, ours seconds)), the
    geometric-mean and maximum speedup of ours over XLA (``t_xla / t_ours``).

    >>> m = Mesh.parse("x=2,y=3")
    >>> rows = run_case(0, Case(m, ArrayType.parse("[3{x}6]", m), ArrayType.parse("[2{y}6]", m)), ["ours", "naive"])
    >>> s = summarize(rows, {0: (2e-5, 1e-5)})
    >>> s["planners"]["naive"]["exceeds"], s["planners"]["naive"]["mean_traffic_ratio"]
    (1, 1.5)
    >>> s["speedup"]["geomean"]
    2.0
    """
    out: dict[str, Any] = {"planners": {}}
    for name in dict.fromkeys(r.planner for r in rows):
        mine = [r for r in rows if r.planner == name]
        measured = [r for r in mine if r.peak is not None]
        statuses: dict[str, int] = {}
        for r in mine:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        ratios = [r.received / r.lower_bound for r in measured
                  if r.received is not None and r.lower_bound > 0]
        out["planners"][name] = {
            "cases": len(mine),
            "valid": statuses.get("valid", 0),
            "statuses": statuses,
            "measured": len(measured),
            "exceeds": sum(1 for r in measured if r.exceeds),
            "exceed_fraction": (sum(1 for r in measured if r.exceeds) / len(measured)) if measured else None,
            "mean_traffic_ratio": (sum(ratios) / len(ratios)) if ratios else None,
            "remat_warnings": sum(1 for r in mine if "full rematerialization" in r.note),
            "exceeds_with_remat": sum(1 for r in measured if r.exceeds and "full rematerialization" in r.note),
        }
    if timings:
        speed = [tx / to for tx, to in timings.values() if to > 0]
        out["speedup"] = {"cases": len(speed), "geomean": _geomean(speed), "max": max(speed) if speed else None,
                          "min": min(speed) if speed else None}
        remat = {r.case for r in rows if r.planner == "xla" and "full rematerialization" in r.note}
        for key, keep in (("remat", True), ("no_remat", False)):
            part = [tx / to for k, (tx, to) in timings.items() if to > 0 and (k in remat) == keep]
            out["speedup"][key] = {"cases": len(part), "geomean": _geomean(part)}
    return out


# ---------------------------------------------------------------------------
# markdown table and reading it back

COLUMNS = ("case", "mesh", "shape", "src", "dst", "planner", "status", "peak B", "bound B", "received B",
           "lower bound B", "collectives", "note")
TIME_COLUMNS = ("case", "xla us", "ours us", "speedup")


def _cell(v: Any) -> str:
    return "-" if v is None else str(v)


def table_markdown(rows: list[Row], timings: dict[int, tuple[float, float]] | None = None) -> str:
    """The rows (and timings: case -> (xla seconds, ours seconds)) as Markdown tables.

    >>> m = Mesh.parse("x=2")
    >>> rows = run_case(0, Case(m, ArrayType.parse("[2{x}4]", m), ArrayType.parse("[4]", m)), ["ours"])
    >>> print(table_markdown(rows, {0: (2e-5, 1e-5)}))
    | case | mesh | shape | src | dst | planner | status | peak B | bound B | received B | lower bound B | collectives | note |
    |---|---|---|---|---|---|---|---|---|---|---|---|---|
    | 0 | {x:2} | 4 | `[2{x}4]` | `[4]` | ours | valid | 16 | 16 | 8 | 8 | 1 |  |
    <BLANKLINE>
    | case | xla us | ours us | speedup |
    |---|---|---|---|
    | 0 | 20.0 | 10.0 | 2.000 |
    <BLANKLINE>
    """
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        vals = (r.case, r.mesh, r.shape, f"`{r.src}`", f"`{r.dst}`", r.planner, r.status, r.peak, r.bound,
                r.received, r.lower_bound, r.collectives, r.note)
        lines.append("| " + " | ".join(_cell(v) for v in vals) + " |")
    if timings:
        lines += ["", "| " + " | ".join(TIME_COLUMNS) + " |", "|" + "---|" * len(TIME_COLUMNS)]
        for k, (tx, to) in sorted(timings.items()):
            lines.append(f"| {k} | {tx * 1e6:.1f} | {to * 1e6:.1f} | {tx / to:.3f} |")
    return "\n".join(lines) + "\n"


def read_table(text: str) -> tuple[list[Row], dict[int, tuple[float, float]]]:
    """Rows and timings from a table written by :func:`table_markdown` (times in microseconds).

    >>> m = Mesh.parse("x=2")
    >>> rows = run_case(0, Case(m, ArrayType.parse("[2{x}4]", m), ArrayType.parse("[4]", m)), ["ours"])
    >>> back, timings = read_table(table_markdown(rows, {0: (2e-5, 1e-5)}))
    >>> back == rows, list(timings)
    (True, [0])
    """
    rows, timings = [], {}
    for line in text.splitlines():
        if not line.startswith("| ") or line.startswith("| case |"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == len(COLUMNS):
            v = [None if c == "-" else c for c in cells]
            rows.append(Row(int(v[0]), v[1], v[2], v[3].strip("`"), v[4].strip("`"), v[5], v[6],
                            None if v[7] is None else int(v[7]), int(v[8]),
                            None if v[9] is None else int(v[9]), int(v[10]),
                            None if v[11] is None else int(v[11]), v[12] or ""))
        elif len(cells) == len(TIME_COLUMNS):
            timings[int(cells[0])] = (float(cells[1]) * 1e-6, float(cells[2]) * 1e-6)
    return rows, timings
