"""Calls into the verified core never crash the process nor fail for want of
stack, whatever the calling thread's stack: the core runs on a stack of its
own (bindings/stubs.c). Each case runs in a child process (a crash is then a
failed test, not a dead test run), on a thread with a 1 MiB stack, as servers
set it (``threading.stack_size(1 << 20)``), at the documented limit of 2^20
devices where the planner allows it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import threading
import verishard
from verishard import core, Mesh, ArrayType

def on_small_stack(fn):
    out = {}
    def run():
        try:
            out["value"] = fn()
        except BaseException as e:
            out["error"] = e
    threading.stack_size(1 << 20)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]

def rows_to_columns(a, b, tail):
    m = Mesh.parse(f"x={a},y={b}")
    return m, ArrayType.parse(f"[1{{x}}{a}, {b}, {tail}]", m), ArrayType.parse(f"[{a}, 1{{y}}{b}, {tail}]", m)
"""

CASES = {
    # The report: SIGSEGV from a 1 MiB thread at 2^14 devices (186 s at 2^16).
    "exchange 2^14": """
p = on_small_stack(lambda: verishard.plan("x=128,y=128", "[1{x}128, 128, 2]", "[128, 1{y}128, 2]", exchange=True))
assert p.types[-1] == ArrayType.parse("[128, 1{y}128, 2]", p.mesh)
assert p.traffic == 254, p.traffic   # the lower bound: each device keeps 2 of its 256 target elements
""",
    # "input too large for the verified core" at 2^20 (lower bound) and 2^18 (exchange) before.
    "lower bound 2^20": """
m, s, d = rows_to_columns(1024, 1024, 2)
assert on_small_stack(lambda: core.lower_bound(s, d)) == 2046
assert core.lower_bound(s, d) == 2046   # and on the main thread
""",
    "exchange 2^18 and 2^20": """
for a in (512, 1024):
    m, s, d = rows_to_columns(a, a, 2)
    p = on_small_stack(lambda: verishard.plan(m, s, d, exchange=True))
    assert p.types[-1] == d and p.traffic == 2 * a - 2, (a, p.steps, p.traffic)
""",
    "uneven exchange 2^20": """
m = Mesh.parse("x=1024,y=1024")
s, d = ArrayType.parse("[1{x}1000, 1000, 2]", m), ArrayType.parse("[1000, 1{y}1000, 2]", m)
p = on_small_stack(lambda: verishard.plan(m, s, d, exchange=True))
assert p.traffic == on_small_stack(lambda: core.ulower_bound(s, d)), p.traffic
""",
    "plan 2^20": """
m, s, d = rows_to_columns(1024, 1024, 2)
p = on_small_stack(lambda: verishard.plan(m, s, d))
assert p.types[-1] == d
""",
    "cross-mesh and rounds 2^16": """
n = 1 << 16
xs = ArrayType.parse(f"[1{{x}}{n}]", Mesh.parse(f"x={n}"))
xd = ArrayType.parse(f"[1{{y}}{n}]", Mesh.parse(f"y={n}"))
sched = on_small_stack(lambda: core.xplan(xs, list(range(n)), xd, list(range(n, 2 * n))))
assert len(sched) == n and all(len(ps) == 1 for ps in sched[:10])
rounds = on_small_stack(lambda: core.xrounds(xs, list(range(n)), xd, list(range(n, 2 * n)), 1))
assert sum(len(r) for r in rounds) == n
""",
    "errors and many threads": """
from verishard import _core
from verishard.errors import LimitError
m, s, d = rows_to_columns(4, 4, 2)
for ints, reason in (([1, 0], "input ends early"), ([1, 2**62 - 1, 4], "more than 2^20 devices")):
    try:
        on_small_stack(lambda: core._call(_core.pplan, ints))
        raise AssertionError(f"{ints} accepted")
    except LimitError as e:   # the core's refusal, back from its own stack
        assert reason in str(e), e
want = verishard.plan(m, s, d, exchange=True).traffic
got = []
threads = [threading.Thread(target=lambda: got.append(verishard.plan(m, s, d, exchange=True).traffic))
           for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert got == [want] * 8, got
assert _core.stack_reserved() >= 256 << 20
""",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_core_call_on_a_small_stack(case):
    code = textwrap.dedent(PRELUDE) + textwrap.dedent(CASES[case]) + "\nprint('done')\n"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip().endswith("done"), (
        f"exit status {run.returncode} (negative: killed by a signal)\n{run.stdout[-2000:]}{run.stderr[-3000:]}")
