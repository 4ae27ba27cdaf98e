"""Adapters on cases with known answers, and wrong data reported as such."""

from __future__ import annotations

import pytest

from jax_devices import jax_or_skip

jax = jax_or_skip()
torch = pytest.importorskip("torch")

from verishard import ArrayType, Mesh  # noqa: E402
from verishard.crosscheck import harness, known_cases, naive, run_planner  # noqa: E402
from verishard.crosscheck import torch_dtensor, xla  # noqa: E402


def T(s, m):
    return ArrayType.parse(s, m)


def ir(r):
    return [str(c) for c in r.plan.collectives]


XYZ = Mesh.parse("x=2,y=2,z=2")
X4Y2 = Mesh.parse("x=4,y=2")


def test_naive():
    r = naive(X4Y2, T("[4{y}8, 16, 8{x}32]", X4Y2), T("[8, 2{x,y}16, 32]", X4Y2))
    assert r.valid and ir(r) == ["AllGather(0, y)", "AllGather(2, x)", "DynSlice(1, {x,y})"]
    assert r.peak_elements == 8 * 16 * 32 and r.n_collectives == 2


def test_xla_permute():
    r = xla.xla_plan(XYZ, T("[4{x}8, 8{y}16]", XYZ), T("[4{y}8, 8{x}16]", XYZ))
    assert r.valid and ir(r) == ["AllPermute([4{y}8, 8{x}16])"]
    assert r.n_collectives == 1 and r.peak_elements == 32 and r.received_elements == 32
    assert r.extra["xla_output_correct"] and r.extra["memory"]["argument"] == 128


def test_xla_all_to_all():
    r = xla.xla_plan(XYZ, T("[8, 2{x,y,z}16]", XYZ), T("[1{x,y,z}8, 16]", XYZ))
    assert r.valid and ir(r) == ["AllToAll(1->0, {x,y,z})"]


def test_xla_known_full_rematerialization():
    """jax-ml/jax#21562: XLA gathers the whole array, and says so."""
    case = known_cases()[0]
    r = xla.xla_plan(case.mesh, case.src, case.dst)
    assert r.valid
    assert r.extra["remat_warnings"] and "Involuntary full rematerialization" in r.extra["remat_warnings"][0]
    assert r.peak_elements == 16 ** 3 and case.bound == 512
    assert ir(r) == ["AllGather(2, x)", "AllGather(0, y)", "DynSlice(1, {x,y})"]
    ours = harness.ours_plan(case.mesh, case.src, case.dst)
    assert ours.valid and (not ours.extra["guaranteed"] or ours.peak_elements == case.bound)


def test_xla_split_axis_plan():
    m = Mesh.parse("x=2,y=4")
    r = xla.xla_plan(m, T("[32{x}64, 64]", m), T("[16{y}64, 64]", m))
    assert r.valid and str(r.plan.mesh) == "{x:2, y:2*2}"
    assert ir(r) == ["DynSlice(0, y.0)", "AllPermute([16{y}64, 64])"]


class Tampered:
    """A compiled reshard whose permute pairs are swapped (the program moves the wrong data)."""

    def __init__(self, c):
        self.c = c

    def as_text(self):
        return self.c.as_text().replace("{1,2}", "{1,3}").replace("{3,6}", "{3,2}")

    def memory_analysis(self):
        return self.c.memory_analysis()

    def __call__(self, x):
        return self.c(x)


def test_xla_wrong_data_is_reported(monkeypatch):
    """A tampered program (permute pairs swapped) is reported as moving the wrong data."""
    real = xla.compile_reshard

    def fake(*a, **k):
        c, s, d, log = real(*a, **k)
        return Tampered(c), s, d, log

    monkeypatch.setattr(xla, "compile_reshard", fake)
    m = XYZ
    r = xla.xla_plan(m, T("[8{x}16, 16]", m), T("[8{z}16, 16]", m), run=False)
    assert "{1,2}" in real(T("[8{x}16, 16]", m), T("[8{z}16, 16]", m))[0].as_text()
    assert r.status == "wrong_data" and not r.valid and r.output_correct is False


def test_xla_interpreter_disagreement_is_an_adapter_error(monkeypatch):
    real = xla.compile_reshard

    monkeypatch.setattr(xla, "compile_reshard", lambda *a, **k: (Tampered(real(*a, **k)[0]),) + real(*a, **k)[1:])
    r = xla.xla_plan(XYZ, T("[8{x}16, 16]", XYZ), T("[8{z}16, 16]", XYZ))
    assert r.status == "error" and "interpreter" in r.reason


def test_dtensor_greedy_and_mincost():
    src, dst = T("[8{x,y}64, 64]", X4Y2), T("[16{x}64, 32{y}64]", X4Y2)
    g = torch_dtensor.dtensor_plan(X4Y2, src, dst)
    assert g.valid and ir(g) == ["AllToAll(0->1, y)"] and g.extra["transforms"] == ["mesh dim 1: S(0) -> S(1)"]
    mc = torch_dtensor.dtensor_plan(X4Y2, src, dst, min_cost=True)
    assert mc.valid and ir(mc) == ["AllGather(0, y)", "DynSlice(1, y)"]


def test_dtensor_nested_sharding():
    case = known_cases()[3]  # [Shard(0), Shard(0)] -> [Replicate(), Shard(0)]
    r = torch_dtensor.dtensor_plan(case.mesh, case.src, case.dst)
    assert r.valid and ir(r) == ["AllGather(0, y)", "AllGather(0, x)", "DynSlice(0, y)"]


def test_dtensor_non_default_order_uses_the_graph_planner():
    r = torch_dtensor.dtensor_plan(X4Y2, T("[8{y,x}64, 64]", X4Y2), T("[64, 8{x,y}64]", X4Y2))
    assert r.valid and r.extra["graph_planner"] and "note" in r.extra


def test_dtensor_wrong_data_is_reported(monkeypatch):
    """Dropping DTensor's last transform leaves the wrong layout: reported as wrong data."""
    real = torch_dtensor.dtensor_transforms
    monkeypatch.setattr(torch_dtensor, "dtensor_transforms", lambda *a, **k: (real(*a, **k)[0][:-1], False))
    r = torch_dtensor.dtensor_plan(X4Y2, T("[8{x,y}64, 64]", X4Y2), T("[32{y}64, 64]", X4Y2))
    assert r.status == "wrong_data" and r.plan is None


def test_run_planner_statuses_on_a_few_cases():
    cases, _ = harness.grid_cases(XYZ, (8, 16, 32), 8, seed=11)
    for c in cases:
        for name in harness.PLANNERS:
            r = run_planner(name, c.mesh, c.src, c.dst)
            assert r.status in ("valid", "not_expressible"), (name, c, r.reason)
            if r.valid:
                assert r.plan.src.refined() == c.src.refined() and r.plan.dst.refined() == c.dst.refined()
