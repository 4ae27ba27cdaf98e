"""How the planners that read every device scale with the mesh.

    python bench/scaling.py            # writes bench/results/scaling.md
    python bench/scaling.py --max 16384 --out -

Every call runs on a thread with a 1 MiB stack (``threading.stack_size(1 <<
20)``, as servers set it): the core runs on a stack of its own
(bindings/stubs.c), so a deep recursion in it neither overflows the caller's
stack nor fails for want of the main thread's 8 MiB. The report ends with
the deepest that stack went over the whole run (``_core.stack_peak``).

The exchange planner (``verishard.plan(..., exchange=True)``: the plan of
collectives and the lower bound, per device), the cross-mesh planner
(``crossmesh_plan``, the verified schedule ``Crossmesh.xplan``) and the
staged rounds (``core.xrounds``, what ``runtime.crossmesh_mpi`` runs) visit
every device, so their time grows at least linearly with it. For meshes of
2^10 to 2^20 devices (sizes 8 and 4 or 2), one problem each:

- *exchange*: an uneven dimension whose axes the target reverses
  (``[2{a,b,..}N+1] -> [2{..,b,a}N+1]``: every device receives from another);
- *crossmesh*: ``[1{x}N]`` on ``x=N`` to ``[1{y}N]`` on ``y=N`` (a permutation
  between two meshes);
- *rounds*: ``core.xrounds`` of that cross-mesh problem with a budget of one element;
- *exchange a2a* and *lower bound a2a*: ``[1{x}a, b, 2] -> [a, 1{y}b, 2]`` on
  ``x=a,y=b`` (``a*b`` devices, ``a`` and ``b`` powers of two within a factor
  of 2): every device needs a piece from ``a`` others, ``verishard.plan(...,
  exchange=True)`` and ``core.lower_bound``; the exchange planner reads what
  the exchange receives from the lower bound (``Exchangeproof.eplan_spec``),
  without building its schedule of ``a*b*a`` pieces (186 s at 2^16 devices
  before it did).
- *partial uneven*: ``verishard.plan`` of ``[1{x}a, 2b-1] partial{y} ->
  [a, c{x}2b-1]`` on ``x=a,y=b`` (a reduce-scatter, then the exchange): the
  planner (``Puchecker.puplan_checked``) picks the reduction and the checker
  reports the exchange from the types (``Puexchangeproof.puplan_start_spec``,
  ``Exchangeproof.uecheck_spec``), without the schedules of ``a*b*a``
  pieces it built before (1.13 s at 2^12 devices, 16x per 4x);
- *rounds 1-to-n*: ``core.xrounds`` from one rank holding ``[N]`` to ``[1{y}N]``
  on ``y=N`` with a budget of one element: ``N`` rounds of one cut each, which
  the first-fit packing found by trying every round from the first (6.8 s at 2^13),
  now from the first rounds where the sender and the receiver still have room;
- *box plan*: ``core.bplan`` between two layouts of ``N`` one-element boxes
  (rank ``j`` holds index ``j``, then index ``N-1-j``; budget ``N``): every
  target reads only the source boxes that may meet it, from a search tree
  of the holders built once (``Boxes.bindex``, ``Boxes.window``;
  ``Boxesproof.bsched_in_correct``), where it looked through every source
  box (87 s at 2^14 boxes);
- *box plan 2-D*: ``core.bplan`` from a grid of ``N`` cells of 2x2 (rank
  ``i*cols+j`` holds cell ``(i, j)``) to the grid of ``N/4`` blocks of 4x4,
  ranked column first (each block takes its 4 cells);
- *layout plan*: ``core.lplan`` with types proposed for ``[2{x}2N-1] ->
  [2N-1]`` on ``x=N`` (the torch path's check that the types describe the
  boxes, then the type planner), the layouts built before the clock starts
  (22.8 s at 2^14 while layouts were compared by recursion on each number);
- *certify*: ``core.certify`` of ``[2{a,b,..}2N] -> [2{..,b,a}2N]`` with the
  source type as its one entry (the checker's steps from it, over every
  device);
- *certify, axes of 2*: ``core.certify`` with one entry ``[N]`` on ``log2 N``
  axes of 2, the issue's case that filled 8 GiB and aborted at 2^12: its
  steps are arrangements of the axes (over 10^6 from 2^10 on), refused with
  a ``LimitError`` before the core is called; the cell is the time to the
  refusal.

Each figure is the median wall time of REPEAT calls (the plan caches cleared
before each; one call once a call takes ONE_CALL_S seconds), on this
machine; the growth column is the time over the previous size's, the size
doubling, reported as the exponent ``log(time ratio) / log(size ratio)``: 1
is linear, 2 quadratic. Cells are skipped once a call passes SKIP_S
seconds.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

import verishard as vs  # noqa: E402
from verishard import _core, core  # noqa: E402
from verishard.crossmesh import _plan, crossmesh_plan  # noqa: E402
from verishard.errors import LimitError  # noqa: E402
from verishard.plan import _eplanned, _planned  # noqa: E402

REPEAT = 3
ONE_CALL_S = 2.0
SKIP_S = 120.0
SMALL_STACK = 1 << 20


def mesh_of(n: int) -> str:
    """``a=8,b=8,...`` with a last axis of 4 or 2, for ``n`` a power of two."""
    sizes, left = [], n
    while left >= 8:
        sizes.append(8)
        left //= 8
    if left > 1:
        sizes.append(left)
    return ",".join(f"{chr(ord('a') + i)}={s}" for i, s in enumerate(sizes))


def timed(fn) -> tuple[float, str]:
    """The median time of ``fn()``, and ``"LimitError"`` where it was refused."""
    samples, refused = [], ""
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        try:
            fn()
        except LimitError:
            refused = "LimitError"
        samples.append(time.perf_counter() - t0)
        if samples[-1] > ONE_CALL_S:
            break
    return statistics.median(samples), refused


def cases(n: int):
    m = vs.Mesh.parse(mesh_of(n))
    names = [a for a, _ in m.axes]
    src = vs.ArrayType.parse(f"[2{{{','.join(names)}}}{n + 1}]", m)
    dst = vs.ArrayType.parse(f"[2{{{','.join(reversed(names))}}}{n + 1}]", m)

    def exchange():
        _eplanned.cache_clear()
        vs.plan(m, src, dst, exchange=True)

    xs = vs.ArrayType.parse(f"[1{{x}}{n}]", vs.Mesh.parse(f"x={n}"))
    xd = vs.ArrayType.parse(f"[1{{y}}{n}]", vs.Mesh.parse(f"y={n}"))
    a = 1 << ((n.bit_length() - 1 + 1) // 2)
    b = n // a
    am = vs.Mesh.parse(f"x={a},y={b}")
    a_src, a_dst = vs.ArrayType.parse(f"[1{{x}}{a}, {b}, 2]", am), vs.ArrayType.parse(f"[{a}, 1{{y}}{b}, 2]", am)

    def exchange_a2a():
        _eplanned.cache_clear()
        vs.plan(am, a_src, a_dst, exchange=True)

    c = -(-(2 * b - 1) // a)
    lm = vs.Mesh.parse(f"x={n}")

    def partial_uneven():
        pu_src = vs.ArrayType.parse(f"[1{{x}}{a}, {2 * b - 1}] partial{{y}}", am)
        pu_dst = vs.ArrayType.parse(f"[{a}, {c}{{x}}{2 * b - 1}]", am)
        return lambda: (_planned.cache_clear(), vs.plan(am, pu_src, pu_dst))

    def rounds_one_to_n():
        one = vs.ArrayType.parse(f"[{n}]", vs.Mesh.parse("x=1"))
        return lambda: core.xrounds(one, [n], xd, list(range(n)), 1)

    def box_plan():
        boxes_src = [(j, ((j, 1),)) for j in range(n)]
        boxes_dst = [(j, ((n - 1 - j, 1),)) for j in range(n)]
        return lambda: core.bplan(boxes_src, boxes_dst, n)

    def box_plan_2d():
        rows = 1 << ((n.bit_length() - 1 + 1) // 2)
        cols = n // rows
        cells = [(i * cols + j, ((2 * i, 2), (2 * j, 2))) for i in range(rows) for j in range(cols)]
        blocks = [(j * (rows // 2) + i, ((4 * i, 4), (4 * j, 4))) for i in range(rows // 2) for j in range(cols // 2)]
        return lambda: core.bplan(cells, blocks, 1 << 30)

    def layout_plan():
        l_src, l_dst = vs.ArrayType.parse(f"[2{{x}}{2 * n - 1}]", lm), vs.ArrayType.parse(f"[{2 * n - 1}]", lm)
        boxes = (core.type_layout(l_src), core.type_layout(l_dst))   # before the clock starts
        return lambda: core.lplan(lm, *boxes, n, (l_src, l_dst))

    def certify():
        return lambda: core.certify(src, dst, 2, [(src, 0)], 0)

    def certify_axes_of_2():
        k = n.bit_length() - 1
        m2 = vs.Mesh.parse(",".join(f"a{i}=2" for i in range(k)))
        t = vs.ArrayType.parse(f"[{n}]", m2)
        return lambda: core.certify(t, t, n, [(t, 0)], 0)

    # each entry builds its inputs when its column runs, and returns what is timed
    return {
        "exchange": lambda: exchange,
        "crossmesh": lambda: lambda: (_plan.cache_clear(), crossmesh_plan(xs, xd)),
        "rounds": lambda: lambda: core.xrounds(xs, list(range(n)), xd, list(range(n, 2 * n)), 1),
        "exchange a2a": lambda: exchange_a2a,
        "lower bound a2a": lambda: lambda: core.lower_bound(a_src, a_dst),
        "partial uneven": partial_uneven,
        "rounds 1-to-n": rounds_one_to_n,
        "box plan": box_plan,
        "box plan 2-D": box_plan_2d,
        "layout plan": layout_plan,
        "certify": certify,
        "certify, axes of 2": certify_axes_of_2,
    }


def on_small_stack(fn):
    """``fn()`` on a fresh thread with a SMALL_STACK stack; its value or its exception."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # re-raised on the caller's thread
            out["error"] = e

    old = threading.stack_size(SMALL_STACK)
    try:
        t = threading.Thread(target=run)
        t.start()
    finally:
        threading.stack_size(old)
    t.join()
    if "error" in out:
        raise out["error"]
    return out.get("value")


def command_args() -> str:
    """The options this run was given, as they would be typed (``--out`` left out)."""
    out, args = [], sys.argv[1:]
    while args:
        a = args.pop(0)
        value = None if "=" in a or not args else args.pop(0)
        if a.split("=")[0] != "--out":
            out.append(a if value is None else f"{a} '{value}'" if " " in value else f"{a} {value}")
    return "".join(" " + x for x in out)


# the report's tables, each a group of columns (one table would be too wide to read)
TABLES = [["exchange", "crossmesh", "rounds", "exchange a2a", "lower bound a2a"],
          ["partial uneven", "rounds 1-to-n", "box plan", "box plan 2-D", "layout plan"],
          ["certify", "certify, axes of 2"]]


def slope(points: list[tuple[int, float]]) -> float:
    """The exponent ``log(t1 / t0) / log(n1 / n0)`` from the first point to the last."""
    (n0, t0), (n1, t1) = points[0], points[-1]
    return math.log(t1 / t0) / math.log(n1 / n0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=1 << 20, help="largest number of devices (a power of two)")
    ap.add_argument("--out", default=str(HERE / "results" / "scaling.md"), help="markdown report, or - for stdout")
    ap.add_argument("--only", default=None, help="comma-separated column names (default: all)")
    args = ap.parse_args()
    sizes = [1 << k for k in range(10, args.max.bit_length()) if 1 << k <= args.max]
    names = [x for t in TABLES for x in t]
    if args.only:
        names = [x for x in names if x in args.only.split(",")]
    cells = {name: [] for name in names}      # per column: its cell per size
    measured = {name: [] for name in names}   # per column: (size, seconds) of the calls that ran
    skipped = set()
    for n in sizes:
        fns = cases(n)
        for name in names:
            if name in skipped:
                cells[name].append("skipped")
                continue
            fn = fns[name]()
            t, refused = on_small_stack(lambda: timed(fn))
            last = measured[name][-1] if measured[name] else None
            if refused:
                cells[name].append(f"{t * 1000:.1f} ({refused})")
            else:
                growth = f" ({slope([last, (n, t)]):.2f})" if last and t > 0 and last[1] > 0 else ""
                cells[name].append(f"{t * 1000:.1f}{growth}")
                measured[name].append((n, t))
            if t > SKIP_S:
                skipped.add(name)
        print(n, " | ".join(cells[name][-1] for name in names), flush=True)
    lines = ["# Planners over every device: time against the number of devices", "",
             f"Command: `.venv/bin/python bench/scaling.py{command_args()}` (see its docstring); median of {REPEAT} calls "
             f"(one once a call took {ONE_CALL_S:.0f} s), milliseconds on this machine (2 shared cores), each from a "
             "thread with a 1 MiB stack, with the growth exponent against the row above in parentheses (1: linear, "
             f"2: quadratic); 'skipped' once a call passed {SKIP_S:.0f} s; 'LimitError': refused, the time to the "
             "refusal.", ""]
    for table in TABLES:
        cols = [x for x in table if x in names]
        if not cols:
            continue
        lines += ["| devices | " + " | ".join(f"{x} ms" for x in cols) + " |", "|---" * (len(cols) + 1) + "|"]
        lines += [f"| {n} | " + " | ".join(cells[x][i] for x in cols) + " |" for i, n in enumerate(sizes)]
        lines.append("")
    lines += ["Growth per column: the exponent from 2^14 devices (below it fixed costs dominate) to the largest "
              "size measured, and over its last factor of 4 (1: linear, 2: quadratic).", "",
              "| column | largest size | its time ms | exponent from 2^14 | exponent over the last 4x |",
              "|---|---|---|---|---|"]
    for name in names:
        pts = [p for p in measured[name] if p[0] >= 1 << 14]
        if len(pts) < 3:
            lines.append(f"| {name} | every size refused (LimitError) | - | - | - |" if not measured[name] else
                         f"| {name} | {measured[name][-1][0]} | {measured[name][-1][1] * 1000:.1f} | - | - |")
            continue
        lines.append(f"| {name} | {pts[-1][0]} | {pts[-1][1] * 1000:.1f} | {slope(pts):.2f} | {slope(pts[-3:]):.2f} |")
    lines += ["", f"The core's own stack (bindings/stubs.c) went at most {_core.stack_peak() / 2**20:.0f} MiB deep "
              f"over the whole run, of the {_core.stack_reserved() / 2**20:.0f} MiB reserved (0: never below its top "
              "8 MiB). The callers' threads had 1 MiB stacks; the run reached this line, so no call overflowed a "
              "stack or aborted the process (either would have ended it)."]
    text = "\n".join(lines) + "\n"
    if args.out == "-":
        print(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
