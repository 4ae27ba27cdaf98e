"""The verified synthesizer against brute force, and on random larger cases.

Brute force: over the refined mesh, every well-formed type is a node and
every well-typed collective an edge (tests/reference.py). The smallest
achievable peak from ``src`` to ``dst`` is a bottleneck shortest path; the
least traffic at that peak is a shortest path (per-step received elements
per device) among types no larger than the peak.
"""

from __future__ import annotations

import heapq
import itertools
from functools import lru_cache
from math import prod

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpi_cases as mc
import reference as ref
import verishard as vs
from verishard import AllGather, AllPermute, AllToAll, DynSlice


as_ref = mc.to_ref


class Graph:
    """All types over a flat mesh with one global shape, and their collectives."""

    def __init__(self, n, shape):
        self.n = n
        self.types = ref.all_types(n, shape)
        self.size = {t: ref.size(n, t) for t in self.types}
        self.edges = {}
        for t in self.types:
            out = []
            for c in ref.well_typed(n, t):
                t2, _ = ref.apply(n, t, c)
                out.append((t2, ref.received(n, t, c)))
            self.edges[t] = out

    def min_peaks(self, src):
        """Smallest achievable peak from src to every type."""
        best = {src: self.size[src]}
        heap = [(self.size[src], src)]
        while heap:
            p, t = heapq.heappop(heap)
            if p > best[t]:
                continue
            for t2, _ in self.edges[t]:
                q = max(p, self.size[t2])
                if q < best.get(t2, float("inf")):
                    best[t2] = q
                    heapq.heappush(heap, (q, t2))
        return best

    def min_traffic(self, src, cap):
        """Least traffic from src to every type through types of size <= cap."""
        best = {src: 0}
        heap = [(0, src)]
        while heap:
            d, t = heapq.heappop(heap)
            if d > best[t]:
                continue
            for t2, w in self.edges[t]:
                if self.size[t2] <= cap and d + w < best.get(t2, float("inf")):
                    best[t2] = d + w
                    heapq.heappush(heap, (d + w, t2))
        return best


CASES = [
    ("x=2,y=2,z=2", [(4, 4), (8, 2)]),
    ("x=2,y=4", [(8,), (4,), (4, 4)]),
    ("x=2,y=3", [(6,), (12,), (6, 4)]),
    ("x=4,y=2", [(4, 4), (8, 2)]),
]


@pytest.mark.parametrize("mesh_text,shapes", CASES, ids=[c[0] for c in CASES])
def test_exhaustive_peak_is_optimal(mesh_text, shapes, capsys):
    mesh = vs.Mesh.parse(mesh_text)
    fine = mesh.refined()
    pairs = optimal_traffic = 0
    ratios = []
    for shape in shapes:
        graph = Graph(fine.part_sizes, shape)
        coarse_types = ref.all_types(mesh.part_sizes, shape)
        fine_of = {t: as_ref(vs.ArrayType.from_parts(mesh, shape, [a for _, a in t]).refined())
                   for t in coarse_types}
        for s in coarse_types:
            fs = fine_of[s]
            peaks = graph.min_peaks(fs)
            traffic_at = {}
            for d in coarse_types:
                fd = fine_of[d]
                src = vs.ArrayType.from_parts(mesh, shape, [a for _, a in s])
                dst = vs.ArrayType.from_parts(mesh, shape, [a for _, a in d])
                p = vs.plan(mesh, src, dst)
                assert p.guaranteed, (mesh_text, str(src), str(dst))
                assert p.peak == peaks[fd] == max(src.size, dst.size), (str(src), str(dst), str(p))
                cap = peaks[fd]
                if cap not in traffic_at:
                    traffic_at[cap] = graph.min_traffic(fs, cap)
                best = traffic_at[cap][fd]
                assert p.traffic >= best
                pairs += 1
                optimal_traffic += p.traffic == best
                ratios.append(p.traffic / best if best else 1.0)
    with capsys.disabled():
        print(f"\n[{mesh_text} shapes {shapes}] {pairs} pairs: peak optimal in all; traffic optimal in "
              f"{optimal_traffic} ({100 * optimal_traffic / pairs:.1f}%), mean ratio to least-traffic plan "
              f"{np.mean(ratios):.3f}, max {max(ratios):.2f}")


def test_spec_examples():
    p = vs.plan("x=2,y=3", "[3{x}6]", "[2{y}6]")
    assert [str(c) for c in p.collectives] == ["DynSlice(0, y)", "AllPermute([1{y,x}6])", "AllGather(0, x)"]
    assert (p.peak, p.guaranteed) == (3, True)
    q = vs.plan("x=2,y=4", "[2{x}4]", "[1{y}4]")
    assert q.peak == 2 and q.guaranteed
    assert str(q.mesh) == "{x:2, y:2*2}"          # needs a sub-axis
    r = vs.plan("x=2,y=4", "[4{x}8]", "[2{y}8]")
    assert str(r.mesh) == "{x:2, y:4}"            # needs none
    assert vs.plan("x=2", "[1{x}2, 2]", "[2, 1{x}2]").collectives == (AllToAll(0, 1, ("x",)),)
    assert vs.plan("x=2,y=3", "[3{x}6]", "[3{x}6]").collectives == ()


# -- random larger cases, simulated in numpy --------------------------------

@st.composite
def problems(draw):
    k = draw(st.integers(1, 6))
    sizes = [draw(st.sampled_from([1, 2, 2, 2, 3, 4])) for _ in range(k)]
    names = [f"a{i}" for i in range(k)]
    mesh = vs.Mesh(tuple(zip(names, sizes)))
    rank = draw(st.integers(1, 4))

    def a_type(shape=None):
        assign = [draw(st.integers(0, rank)) for _ in range(k)]       # rank = replicated
        axes = [[names[i] for i in draw(st.permutations(range(k))) if assign[i] == d] for d in range(rank)]
        return axes

    sa, da = a_type(), a_type()
    shape = []
    for d in range(rank):
        need = np.lcm(prod(sizes[names.index(a)] for a in sa[d]), prod(sizes[names.index(a)] for a in da[d]))
        shape.append(int(need) * draw(st.sampled_from([1, 1, 2, 3])))
    if prod(shape) > 4096:
        shape = None
    return mesh, shape, sa, da


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(problems())
def test_random_plans_move_the_data(problem):
    mesh, shape, sa, da = problem
    if shape is None:
        return
    src = vs.ArrayType.from_axes(mesh, shape, sa)
    dst = vs.ArrayType.from_axes(mesh, shape, da)
    p = vs.plan(mesh, src, dst)
    assert p.guaranteed and p.peak == max(src.size, dst.size)
    n = p.mesh.part_sizes
    A = np.random.default_rng(0).integers(0, 1 << 30, size=shape)
    t = as_ref(p.src)
    local = ref.distribute(n, A, t)
    for step in p.steps:
        local = ref.simulate(n, t, mc.to_ref_collective(p.mesh, step.collective), local)
        t = as_ref(step.type)
    want = ref.distribute(n, A, as_ref(p.dst))
    assert all(np.array_equal(a, b) for a, b in zip(local, want))
