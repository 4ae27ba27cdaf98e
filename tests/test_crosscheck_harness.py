"""The harness: cases, and the report's summary recomputed from its own table."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from verishard import Mesh
from verishard.crosscheck import harness

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_type_counts_and_deterministic_samples():
    assert len(harness.all_types(Mesh.parse("x=2,y=2,z=2"), (16, 16))) == 49
    assert len(harness.all_types(Mesh.parse("x=2,y=2,z=2"), (8, 16, 32))) == 106
    a, total = harness.grid_cases("x=2,y=2,z=2", (8, 16, 32), 20, seed=0)
    b, _ = harness.grid_cases("x=2,y=2,z=2", (8, 16, 32), 20, seed=0)
    assert total == 106 ** 2 and [(c.src, c.dst) for c in a] == [(c.src, c.dst) for c in b]
    full, total = harness.grid_cases("x=8", (16, 16))
    assert len(full) == total == 9


def test_known_cases_convert():
    cases = harness.known_cases()
    assert str(cases[0].src) == "[8{y}16, 16, 4{x}16]" and str(cases[0].dst) == "[16, 2{x,y}16, 16]"
    assert all(c.origin for c in cases)


def test_summary_round_trips_through_the_table():
    rows = []
    cases, _ = harness.grid_cases("x=2,y=2", (4, 8), 10, seed=3)
    for k, c in enumerate(cases):
        rows += harness.run_case(k, c, ("ours", "naive"))
    timings = {k: (1e-4 * (k + 1), 1e-4 * (k + 2)) for k in range(len(cases))}
    back_rows, back_t = harness.read_table(harness.table_markdown(rows, timings))
    assert back_rows == rows
    assert harness.summarize(back_rows, back_t)["planners"] == harness.summarize(rows, timings)["planners"]
    s = harness.summarize(back_rows, back_t)["speedup"]
    assert s["max"] == pytest.approx(max(a / b for a, b in timings.values()), rel=1e-3)


def _number(pattern, text):
    m = re.search(pattern, text)
    assert m, pattern
    return m.groups()


def test_bench_report_recomputed_from_its_table(tmp_path):
    """Run bench/crosscheck.py --quick and recompute its summary from crosscheck_table.md."""
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "crosscheck.py"), "--quick", "--out",
                          str(tmp_path), "--repeats", "3", "--warmup", "1"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    report = (tmp_path / "crosscheck.md").read_text()
    rows, timings = harness.read_table((tmp_path / "crosscheck_table.md").read_text())
    assert (tmp_path / "crosscheck_memory.png").stat().st_size > 0
    assert (tmp_path / "crosscheck_time.png").stat().st_size > 0
    s = harness.summarize(rows, timings)
    for name, p in s["planners"].items():
        line = next(l for l in report.splitlines() if l.startswith(f"| {name} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert int(cells[1]) == p["cases"] and int(cells[2]) == p["valid"]
        exceeds, measured = _number(r"(\d+)/(\d+)", cells[6])
        assert (int(exceeds), int(measured)) == (p["exceeds"], p["measured"])
    g, mx = _number(r"geometric-mean speedup of ours over XLA ([0-9.]+)x, maximum ([0-9.]+)x", report)
    # the table stores microseconds with one decimal: allow that rounding
    assert float(g) == pytest.approx(s["speedup"]["geomean"], rel=2e-2)
    assert float(mx) == pytest.approx(s["speedup"]["max"], rel=2e-2)
    # nothing is reported valid without a row the checker accepted: valid rows have a peak and traffic
    assert all(r.peak is not None and r.received is not None for r in rows if r.status == "valid")
