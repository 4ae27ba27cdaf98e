"""The core never aborts the process for want of memory: a call whose heap
would outgrow what the process may still obtain stops with a LimitError
(bindings/glue.ml, ``watch_heap``), and the process goes on.

Each case runs in a subprocess (an abort would end it, not pytest) under an
address-space limit a little above what it has mapped after a first core
call (the core's stack reservation included), bounded in time."""

from __future__ import annotations

import subprocess
import sys

import pytest

PRELUDE = """
import resource
import verishard as vs
from verishard import core
from verishard.errors import LimitError

def limit_memory(extra):
    core.lower_bound(vs.ArrayType.parse("[2{x}4]", "x=2"), vs.ArrayType.parse("[4]", "x=2"))  # the core's stack is reserved
    mapped = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (mapped + extra, resource.RLIM_INFINITY))

def refused(fn):
    try:
        fn()
    except LimitError as e:
        print("LimitError:", e)
    else:
        print("no error")
"""

# certify on 12 axes of 2 with the replicated type as an entry: its steps
# enumerate every arrangement of the 12 axes (over 10^9), which filled 8 GiB
# and aborted with "Fatal error: out of memory" before the glue's bound.
CERTIFY = """
m = vs.Mesh.parse(",".join(f"a{i}=2" for i in range(12)))
s = vs.ArrayType.parse("[4096]", m)
d = vs.ArrayType.parse("[1{" + ",".join(f"a{i}" for i in range(12)) + "}4096]", m)
limit_memory(768 << 20)
"""

# The glue's bound itself: the Python layer's count of the certificate's
# steps (core.certify_steps) switched off, so that the core builds them.
GLUE = CERTIFY + """
core._check_certificate_size = lambda entries, cap: None
refused(lambda: core.certify(s, d, 4096, [(s, 0)], 0))
print(vs.plan("x=2,y=2", "[2{x}4, 4]", "[4, 2{y}4]").traffic)   # the process goes on
"""

# The Python layer's count: refused before the core is called, at once.
COUNTED = CERTIFY + """
import time
t0 = time.perf_counter()
refused(lambda: core.certify(s, d, 4096, [(s, 0)], 0))
print(round(time.perf_counter() - t0))
"""


def run_case(case: str) -> list[str]:
    run = subprocess.run([sys.executable, "-c", PRELUDE + case], capture_output=True, text=True, timeout=180)
    assert "Fatal error" not in run.stderr, run.stderr[-2000:]
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.splitlines()


# Another entry: the movement of an all-gather of 2^28 elements (an answer as
# large as the array, meant for small cases) outgrows the same limit.
MOVEMENT = """
m = vs.Mesh.parse("x=2")
t, t2 = vs.ArrayType.parse(f"[{2**27}{{x}}{2**28}]", m), vs.ArrayType.parse(f"[{2**28}]", m)
limit_memory(768 << 20)
refused(lambda: core.movement(t, vs.AllGather(0, "x"), t2))
print(vs.plan("x=2,y=2", "[2{x}4, 4]", "[4, 2{y}4]").traffic)
"""


# A process with less left than the glue's step between two looks at the heap
# (64 MiB): the box schedule of 2^16 boxes, from a thread with a 1 MiB stack,
# aborted with "Fatal error: out of memory" before the heap's first look.
LITTLE_ROOM = """
import threading
n = 1 << 16
src, dst = [(j, ((j, 1),)) for j in range(n)], [(j, ((n - 1 - j, 1),)) for j in range(n)]
limit_memory(64 << 20)
threading.stack_size(1 << 20)
t = threading.Thread(target=refused, args=(lambda: core.bplan(src, dst, n),))
t.start()
t.join()
print(vs.plan("x=2,y=2", "[2{x}4, 4]", "[4, 2{y}4]").traffic)
"""


@pytest.mark.parametrize("case", [GLUE, MOVEMENT, LITTLE_ROOM], ids=["certify-12-axes", "movement-2^28", "bplan-64MiB-left"])
def test_core_stops_before_its_heap_runs_out(case):
    lines = run_case(case)
    assert lines[0].startswith("LimitError: problem too large for this process's memory"), lines
    assert lines[1] == "4", lines


def test_certificate_too_large_to_check_is_refused_first():
    lines = run_case(COUNTED)
    assert lines[0].startswith("LimitError: the certificate entry [4096] on"), lines
    assert "1302061345 steps" in lines[0] and "MAX_CERTIFY_STEPS" in lines[0], lines
    assert lines[1] == "0", lines   # no time spent in the core
