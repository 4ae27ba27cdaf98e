"""Instructions per planning call under callgrind (deterministic, unlike
wall time on a shared machine): `plan()` (plan cache cleared), the core
call `_core.pplan` and the synthesizer `_core.synthesize`, on the 30
problems of bench/planner.py's headline cell (rank 4 over 4 axes, its seed).

Each figure is (a run planning every problem REP times) minus (a run
planning none), over 30 * REP calls; hash seed fixed and BLAS threads off
so that both runs do the same work besides. Needs valgrind.

Usage: python bench/planner_callgrind.py [--rep N] [plan core synth ...]
       (inside: python bench/planner_callgrind.py --drive MODE REP)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def problems():
    import random

    sys.path.insert(0, str(HERE))
    from planner import CELLS, HEAD, random_problem
    rng = random.Random(20261202)   # bench/planner.py's draw, cell by cell up to the headline
    for cell in CELLS:
        probs = [random_problem(rng, *cell) for _ in range(30)]
        if cell == HEAD:
            return probs
    raise AssertionError("no headline cell")


def drive(mode: str, rep: int) -> None:
    import verishard as vs
    from verishard import _core
    from verishard.plan import _planned
    probs = problems()
    synth_in = [m.refined().encode() + s.refined().encode() + d.refined().encode() for m, s, d in probs]
    plan_in = [m.encode() + s.pencode() + d.pencode() for m, s, d in probs]
    for m, s, d in probs:   # warm the decoding caches, as in the benchmark's plan() column
        vs.plan(m, s, d)
    for _ in range(rep):
        if mode == "plan":
            for m, s, d in probs:
                _planned.cache_clear()
                vs.plan(m, s, d)
        elif mode == "core":
            for x in plan_in:
                _core.pplan(x)
        elif mode == "synth":
            for x in synth_in:
                _core.synthesize(x)
        else:
            raise SystemExit(f"unknown mode {mode}")


def instructions(mode: str, rep: int) -> int:
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                          __file__, "--drive", mode, str(rep)], env=env, capture_output=True, text=True)
    m = re.search(r"Collected : (\d+)", out.stderr)
    if not m:
        raise SystemExit(f"valgrind failed:\n{out.stderr[-2000:]}")
    return int(m.group(1))


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--drive"]:
        drive(args[1], int(args[2]))
        return
    rep = 10
    if args[:1] == ["--rep"]:
        rep, args = int(args[1]), args[2:]
    for mode in args or ["plan", "core", "synth"]:
        n = (instructions(mode, rep) - instructions(mode, 0)) / (30 * rep)
        print(f"{mode:6s} {n / 1000:7.1f}k instructions per call")


if __name__ == "__main__":
    main()
