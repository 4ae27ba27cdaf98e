"""verishard.partition: MILP optimum against brute force, lower bound, heuristic, memory, errors, CLI."""

from __future__ import annotations

import contextlib
import doctest
import io
import json
import random
from pathlib import Path

import networkx as nx
import pytest

from verishard import plan
from verishard.cli import main as cli_main
from verishard.partition import (OpGraph, PartitionError, Problem, brute_force, exact, fastest_single, heft,
                                 load_platform, lower_bound, model_graph, partition, platform_from_json,
                                 round_robin, split_heuristic)
from verishard.partition.graph import random_dag
from verishard.partition.problem import plan_steps

ROOT = Path(__file__).resolve().parents[1]
CLASSES = ("conv", "matmul", "elementwise")


def random_graph(seed: int, n: int = 4) -> OpGraph:
    rng = random.Random(seed)
    nodes = {"in": {"shape": [8, 1024], "pin": "host"}}
    edges, names = [], ["in"]
    for i in range(n):
        v = f"n{i}"
        nodes[v] = {"work": {rng.choice(CLASSES): rng.uniform(1e8, 6e10)}, "shape": [8, rng.choice([256, 8192, 131072])],
                    "dp": 0, "mp": 1 if rng.random() < 0.5 else None, "params": rng.choice([0, 4e9, 9e9])}
        edges += [(p, v) for p in rng.sample(names, k=min(len(names), rng.randint(1, 2)))]
        names.append(v)
    return OpGraph.from_spec(nodes, edges, f"random{seed}")


def value(r, objective):
    return r.latency if objective == "latency" else r.period


@pytest.fixture(scope="module")
def pf():
    return load_platform("cpu+2gpu")


# ---------------------------------------------------------------------------
# exactness, bound, heuristic


@pytest.mark.parametrize("objective", ["latency", "throughput"])
@pytest.mark.parametrize("seed", range(6))
def test_milp_matches_brute_force_and_bounds_hold(pf, seed, objective):
    pb = Problem(random_graph(seed), pf)
    best, arg = brute_force(pb, objective)
    r = exact(pb, objective, time_limit=60)
    assert r.optimal
    assert value(r, objective) == pytest.approx(best, rel=1e-6, abs=1e-12)
    lb = lower_bound(pb, objective)
    assert lb <= best * (1 + 1e-9)
    assert lb > 0
    for other in (split_heuristic(pb, objective, max_size=2), heft(pb), round_robin(pb),
                  fastest_single(pb, objective)):
        if other.assign is not None:
            assert value(other, objective) >= best * (1 - 1e-9), other.method


def test_some_random_case_uses_sharding_and_beats_one_device(pf):
    # the MILP is not trivially "everything on the V100": it shards or splits somewhere
    kinds, gains = set(), []
    for seed in range(6):
        pb = Problem(random_graph(seed), pf)
        r = exact(pb, "latency")
        kinds |= {pb.opts[v][i].kind for v, i in r.assign.items()}
        gains.append(fastest_single(pb).latency / r.latency)
    assert kinds & {"dp", "mp"}
    assert max(gains) > 1.05


def test_simulated_schedule_never_above_milp_objective(pf):
    from verishard.partition.milp import solve_latency

    pb = Problem(random_graph(3, n=5), pf)
    sol = solve_latency(pb)
    by_start = sorted(pb.order, key=lambda v: sol.start[v])
    order = list(nx.lexicographical_topological_sort(pb.g, key=by_start.index))
    assert pb.simulate(sol.assign, order)[0] <= sol.value * (1 + 1e-7)


def test_heuristic_never_beats_milp_on_a_model(pf):
    pb = Problem(model_graph("tiny-transformer", batch=4), pf)
    for objective in ("latency", "throughput"):
        r = exact(pb, objective, time_limit=60)
        s = split_heuristic(pb, objective, max_size=5)
        assert r.optimal
        assert value(s, objective) >= value(r, objective) * (1 - 1e-7)
        assert lower_bound(pb, objective) <= value(r, objective) * (1 + 1e-9)


# ---------------------------------------------------------------------------
# memory


def test_memory_capacity_is_respected():
    doc = json.loads((ROOT / "python/verishard/partition/platforms/cpu+2gpu.json").read_text())
    for d in doc["devices"]:
        d["memory"] = 10e9 if d["name"] != "cpu" else 1e12
    pf = platform_from_json(doc)
    nodes = {"in": {"shape": [8, 1024], "pin": "host"}}
    edges = []
    for i in range(4):  # 4 x 6 GB of weights: at most one node per GPU
        nodes[f"n{i}"] = {"work": {"matmul": 5e11}, "shape": [8, 1024], "params": 6e9}
        edges.append(("in" if i == 0 else f"n{i - 1}", f"n{i}"))
    pb = Problem(OpGraph.from_spec(nodes, edges), pf, sharding=False)
    assert fastest_single(pb).note == "cpu"  # nothing fits on one GPU alone
    for objective in ("latency", "throughput"):
        r = exact(pb, objective)
        use = pb.memory_use(r.assign)
        assert all(use[d] <= pf.memory[d] for d in pf.devices)
        assert sum(1 for v, i in r.assign.items() if pb.opts[v][i].devs[0] == "v100") <= 1
        best, _ = brute_force(pb, objective)
        assert value(r, objective) == pytest.approx(best, rel=1e-6)
    # without the limit the V100 takes more than one
    free = Problem(OpGraph.from_spec(nodes, edges), load_platform("cpu+2gpu"), sharding=False)
    r = exact(free, "latency")
    assert sum(1 for v, i in r.assign.items() if free.opts[v][i].devs[0] == "v100") > 1


def test_a_node_too_big_for_every_device(pf):
    g = OpGraph.from_spec({"a": {"work": {"conv": 1}, "params": 1e15}}, [])
    with pytest.raises(PartitionError, match="fits in no device"):
        Problem(g, pf)


# ---------------------------------------------------------------------------
# transfers priced by verified plans


def test_group_transfer_is_the_verified_plan(pf):
    g = OpGraph.from_spec({"a": {"work": {"matmul": 1e9}, "shape": [8, 4096], "dp": 0, "mp": 1},
                           "b": {"work": {"matmul": 1e9}, "shape": [8, 4096], "dp": 0, "mp": 1}}, [("a", "b")])
    pb = Problem(g, pf)
    grp = ("v100", "t4")
    t, ports = pb.transfer(("grp", grp, 0), ("grp", grp, 1), (8, 4096))
    p = plan("g=2", "[4{g}8, 4096]", "[8, 2048{g}4096]")
    alpha, beta = pf.link("v100", "t4")
    assert t == pytest.approx(sum(alpha + s.received * 4 / beta for s in p.steps))
    assert plan_steps((8, 4096), 2, 0, 1) == tuple(s.received for s in p.steps) == (8192,)
    assert set(ports) == set(grp)
    assert pb.transfer(("grp", grp, 0), ("grp", grp, 0), (8, 4096))[0] == 0


# ---------------------------------------------------------------------------
# bad input


def test_bad_inputs_give_clear_errors(pf, tmp_path):
    with pytest.raises(PartitionError, match="the graph has a cycle: a -> b -> a"):
        OpGraph.from_spec({"a": {}, "b": {}}, [("a", "b"), ("b", "a")])
    with pytest.raises(PartitionError, match="work for 'conv' must be a finite number >= 0, not -1"):
        OpGraph.from_spec({"a": {"work": {"conv": -1}}}, [])
    with pytest.raises(PartitionError, match="unknown op class 'fft'"):
        OpGraph.from_spec({"a": {"work": {"fft": 1}}}, [])
    with pytest.raises(PartitionError, match="unknown key 'flops'"):
        OpGraph.from_spec({"a": {"flops": 1}}, [])
    with pytest.raises(PartitionError, match="unknown node 'c'"):
        OpGraph.from_spec({"a": {}}, [("a", "c")])
    with pytest.raises(PartitionError, match="unknown platform 'cpu\\+9gpu'"):
        load_platform("cpu+9gpu")
    doc = json.loads((ROOT / "python/verishard/partition/platforms/cpu+2gpu.json").read_text())
    with pytest.raises(PartitionError, match="unknown key 'bandwidth' in the platform"):
        platform_from_json(dict(doc, bandwidth=1))
    bad = json.loads(json.dumps(doc))
    bad["devices"][1]["memroy"] = 1
    with pytest.raises(PartitionError, match="unknown key 'memroy' in a device"):
        platform_from_json(bad)
    bad = json.loads(json.dumps(doc))
    bad["kinds"]["t4"]["peak_flops"] = -3
    with pytest.raises(PartitionError, match="peak_flops of kind 't4' must be a finite number > 0"):
        platform_from_json(bad)
    bad = json.loads(json.dumps(doc))
    bad["links"] = [{"between": ["cpu", "a100"], "alpha": 0, "beta": 1}]
    with pytest.raises(PartitionError, match="link 'between' must name two different devices"):
        platform_from_json(bad)
    with pytest.raises(PartitionError, match="pinned to 'tpu'"):
        Problem(OpGraph.from_spec({"a": {"pin": "tpu"}}, []), pf)
    with pytest.raises(PartitionError, match="unknown objective"):
        partition("tiny-transformer", "cpu+2gpu", "energy")
    with pytest.raises(PartitionError, match="unknown model 'alexnet'"):
        model_graph("alexnet")


# ---------------------------------------------------------------------------
# graphs


@pytest.mark.parametrize("name", ["tiny-resnet", "tiny-transformer", "tiny-randwire"])
def test_fx_graphs(name):
    full = model_graph(name, batch=2, coarsen=False)
    g = model_graph(name, batch=2)
    assert nx.is_directed_acyclic_graph(g.g) and len(g) < len(full)
    fx_nodes = sorted(f for _, a in full.nodes(data=True) for f in a["fx"])
    assert sorted(f for _, a in g.nodes(data=True) for f in a["fx"]) == fx_nodes  # contraction loses nothing
    total = lambda gr, c: sum(a["work"].get(c, 0) for _, a in gr.nodes(data=True))  # noqa: E731
    assert total(g, "conv") + total(g, "matmul") == total(full, "conv") + total(full, "matmul") > 0


@pytest.mark.parametrize("kind", ["ws", "er"])
def test_random_dags(kind):
    d = random_dag(kind, 12, seed=3, p=0.75 if kind == "ws" else 0.3)
    assert nx.is_directed_acyclic_graph(d)
    assert [v for v in d if d.in_degree(v) == 0] == ["in"] and [v for v in d if d.out_degree(v) == 0] == ["out"]


def test_four_server_platform_heuristic():
    pf = load_platform("4x-cpu+2gpu")
    assert len(pf.devices) == 12 and pf.link("s0.v100", "s1.v100") == (25e-6, 12.5e9)
    pb = Problem(model_graph("tiny-transformer", batch=8), pf)
    s = split_heuristic(pb, "throughput", max_size=6, time_limit=10)
    assert s.assign is not None and s.period >= lower_bound(pb, "throughput")


# ---------------------------------------------------------------------------
# profiler and execution


def test_profile_and_execute_two_gloo_processes():
    from verishard.partition import execute as ex
    from verishard.partition.profile import attach_times, profile_fx

    g = model_graph("tiny-randwire", batch=1)
    attach_times(g, profile_fx(g, repeats=3))
    pb = Problem(g, load_platform("local-2cpu"), sharding=False)
    h = heft(pb)
    # a placement that uses both processes: alternate the non-pinned nodes
    assign = round_robin(pb).assign
    assert {pb.opts[v][i].devs[0] for v, i in assign.items()} == {"cpu0", "cpu1"}
    res = ex.execute(pb, assign, pb.order, "tiny-randwire", 1, iters=3)
    assert res["correct"] and len(res["times"]) == 3 and res["median"] > 0
    assert h.latency > 0


# ---------------------------------------------------------------------------
# CLI and docs


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_cli_exit_codes(tmp_path):
    pic = tmp_path / "g.png"
    code, out, err = run_cli("partition", "tiny-transformer", "--platform", "cpu+2gpu", "--batch", "2",
                             "--objective", "throughput", "--picture", str(pic))
    assert code == 0, err
    assert "lower bound" in out and "gap" in out and "fastest device only" in out
    assert pic.read_bytes()[:4] == b"\x89PNG"
    svg = tmp_path / "g.svg"
    code, _, err = run_cli("partition", "tiny-transformer", "--platform", "cpu+2gpu", "--batch", "2",
                           "--picture", str(svg))
    assert code == 0 and all(f">{op}<" in svg.read_text() for op in ("ln1", "fc2", "output")), err  # labelled
    code, _, err = run_cli("partition", "tiny-transformer", "--platform", "cpu+9gpu")
    assert code == 2 and err.startswith("verishard: error: unknown platform 'cpu+9gpu'")
    code, _, err = run_cli("partition", "tiny-transformer", "--platform", "cpu+2gpu", "--objective", "energy")
    assert code == 2 and "invalid choice" in err
    cyc = tmp_path / "cyc.json"
    cyc.write_text(json.dumps({"nodes": {"a": {}, "b": {}}, "edges": [["a", "b"], ["b", "a"]]}))
    code, _, err = run_cli("partition", str(cyc), "--platform", "cpu+2gpu")
    assert code == 2 and "the graph has a cycle" in err
    code, _, err = run_cli("partition", "tiny-transformer", "--platform", "cpu+2gpu", "--picture", "x.gif")
    assert code == 2 and "--picture must end in" in err
    code, _, err = run_cli("partition", "tiny-transformer", "--platform", "cpu+2gpu", "--batch", "0")
    assert code == 2


def test_docs_page_runs(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = doctest.testfile(str(ROOT / "docs" / "partition.md"), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_package_doctests():
    import importlib

    for mod in ("graph", "platform", "problem", "models", "cli", "profile"):
        m = importlib.import_module(f"verishard.partition.{mod}")
        r = doctest.testmod(m, optionflags=doctest.ELLIPSIS)
        assert r.failed == 0, mod
    import verishard.partition as P

    assert doctest.testmod(P).failed == 0


def test_one_graph_on_two_platforms():
    """A Problem resolves the graph's "host" pins for its platform without changing the graph,
    so one graph can be partitioned for several platforms in turn (the benchmark does)."""
    from verishard.partition import Problem, load_platform, model_graph
    g = model_graph("tiny-transformer", batch=1)
    pins = {n: a["pin"] for n, a in g.g.nodes(data=True)}
    a, b = Problem(g, load_platform("cpu+2gpu")), Problem(g, load_platform("4x-cpu+2gpu"))
    assert {n: a["pin"] for n, a in g.g.nodes(data=True)} == pins
    assert {a.g.nodes[n]["pin"] for n in pins if pins[n]} == {a.pf.host}
    assert {b.g.nodes[n]["pin"] for n in pins if pins[n]} == {b.pf.host}
