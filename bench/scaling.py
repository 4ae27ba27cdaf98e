"""How the planners that read every device scale with the mesh.

    python bench/scaling.py            # writes bench/results/scaling.md
    python bench/scaling.py --max 16384 --out -

Every call runs on a thread with a 1 MiB stack (``threading.stack_size(1 <<
20)``, as servers set it): the core runs on a stack of its own
(bindings/stubs.c), so a deep recursion in it neither overflows the caller's
stack nor fails for want of the main thread's 8 MiB.

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

Each figure is the median wall time of REPEAT calls (the plan caches cleared
before each), on this machine; the growth column is the time over the
previous size's, the size doubling or quadrupling, reported as the exponent
``log(time ratio) / log(size ratio)``: 1 is linear, 2 quadratic. Cells are
skipped once a call passes SKIP_S seconds.
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
from verishard import core  # noqa: E402
from verishard.crossmesh import _plan, crossmesh_plan  # noqa: E402
from verishard.plan import _eplanned  # noqa: E402

REPEAT = 3
SKIP_S = 20.0
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


def timed(fn) -> float:
    samples = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        if samples[-1] > SKIP_S:
            break
    return statistics.median(samples)


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

    return {
        "exchange": exchange,
        "crossmesh": lambda: (_plan.cache_clear(), crossmesh_plan(xs, xd)),
        "rounds": lambda: core.xrounds(xs, list(range(n)), xd, list(range(n, 2 * n)), 1),
        "exchange a2a": exchange_a2a,
        "lower bound a2a": lambda: core.lower_bound(a_src, a_dst),
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=1 << 20, help="largest number of devices (a power of two)")
    ap.add_argument("--out", default=str(HERE / "results" / "scaling.md"), help="markdown report, or - for stdout")
    args = ap.parse_args()
    sizes = [1 << k for k in range(10, args.max.bit_length()) if 1 << k <= args.max]
    names = ["exchange", "crossmesh", "rounds", "exchange a2a", "lower bound a2a"]
    rows, last, skipped = [], {}, set()
    for n in sizes:
        fns = cases(n)
        row = [f"{n}"]
        for name in names:
            if name in skipped:
                row.append("skipped")
                continue
            t = on_small_stack(lambda: timed(fns[name]))
            growth = (f" ({math.log(t / last[name][1]) / math.log(n / last[name][0]):.2f})"
                      if name in last and t > 0 and last[name][1] > 0 else "")
            row.append(f"{t * 1000:.1f}{growth}")
            last[name] = (n, t)
            if t > SKIP_S:
                skipped.add(name)
        rows.append(row)
        print(" | ".join(row), flush=True)
    lines = ["# Planners over every device: time against the number of devices", "",
             f"Command: `.venv/bin/python bench/scaling.py` (see its docstring); median of {REPEAT} calls, "
             "milliseconds on this machine (2 shared cores), each from a thread with a 1 MiB stack, with the "
             "growth exponent against the row above in parentheses (1: linear, 2: quadratic); 'skipped' once "
             f"a call passed {SKIP_S:.0f} s.", "",
             "| devices | " + " | ".join(f"{n} ms" for n in names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines) + "\n"
    if args.out == "-":
        print(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
