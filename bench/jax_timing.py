"""Our compiled reshard against XLA's own at 16, 64 and 256 MiB on 8 CPU devices.

    python bench/jax_timing.py                     # writes bench/results/jax_timing.md (9-12 min on 2 cores)
    python bench/jax_timing.py --sizes 16 --pairs 8 --out -   # a quick look, markdown to stdout

Placement pairs: ``--pairs`` (default 64) pairs of ``PartitionSpec``\\ s,
drawn with a seeded generator (``--seed``) over the meshes (2, 4), (2, 2, 2),
(4, 2) and (8,) of ``jax.make_mesh`` (Explicit axes), on arrays of rank 2 or
3 whose sides are powers of two (every spec divides them); only pairs whose
layouts differ (some data moves). Each pair runs on a float32 global array
of each size in ``--sizes`` (MiB); the 256 MiB size runs every
``--big-every``-th pair only (default 3: a third of the pairs), which keeps
the run near ten minutes on two cores.

For each pair and size, three programs are compiled once (``jit(...).lower(x)
.compile()``) and called on the same ``x`` interleaved, in a new random order
every round, each call waited for with ``block_until_ready``: one warm-up
call each, then as many timed rounds as fit ``--budget`` seconds (at least
``--runs``, default 7, at most ``--max-runs``, default 25); the time of a
program is its median.

- *XLA*: XLA's own reshard, ``jax.jit(lambda v: jax.sharding.reshard(v, dst))``;
- *ours*: ``jax.jit(lambda v: verishard.jax.reshard(v, dst))``, the verified plan's
  ``shard_map`` compiled (what ``jax.jit`` runs, and the eager call off CPU devices);
- *before*: the same plan and ``shard_map`` lowered by the JAX backend's
  previous collective lowering (``PreviousLowering`` below: ``lax.all_to_all``
  splitting one dimension and concatenating another, ``lax.all_gather`` along
  the dimension itself, ``ppermute`` then ``where`` on the fixed ranks), to
  show in one run what the new lowering changes.

Speedup = XLA time / ours (above 1: ours is faster). Where ours and before
compile to the same program (plans the lowering change does not touch), their
ratio shows how far two timings of one program differ on the machine: the
report gives that spread. Checked once per pair
(at its first size): ``verishard.jax.reshard(x, dst)``, ours and before equal
XLA's result on every device, values and sharding. Compiled memory:
``compiled.memory_analysis()`` (per device) of XLA's program and ours.
Collectives of a compiled program are counted from its ``as_text()``.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import re
import statistics
import sys
import time
from collections import Counter

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import verishard.jax as vj  # noqa: E402
from verishard.jax.backend import JaxBackend  # noqa: E402
from report import emit_report  # noqa: E402  (bench/: this script's directory)

MiB = 1 << 20
MESHES = [(("x", 2), ("y", 4)), (("x", 2), ("y", 2), ("z", 2)), (("x", 4), ("y", 2)), (("x", 8),)]
COLLECTIVES = ("all-to-all", "all-gather", "collective-permute", "all-reduce", "reduce-scatter")
_OP = re.compile(r"\s(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")
SHORT = {"all-to-all": "a2a", "all-gather": "ag", "collective-permute": "cp", "all-reduce": "ar",
         "reduce-scatter": "rs"}


class PreviousLowering(JaxBackend):
    """The JAX backend's collectives as they were lowered before this
    benchmark (kept here, verbatim, only to measure the change). The local
    slice (``dyn_slice``) is today's, whose only change is a scalar one (no
    wrap-around of a negative start, which never occurs): plans of slices
    then compile to the same program in both, the report's noise control."""

    def all_gather(self, x, dim, group):
        return lax.all_gather(x, group.names, axis=dim, tiled=True)

    def all_to_all(self, x, src_dim, dst_dim, group):
        return lax.all_to_all(x, group.names, split_axis=dst_dim, concat_axis=src_dim, tiled=True)

    def all_permute(self, x, sources):
        pairs = [(int(s), c) for c, s in enumerate(sources) if s != c]
        y = lax.ppermute(x, self.all_names, pairs)
        fixed = np.array([s == c for c, s in enumerate(sources)])
        if not fixed.any():
            return y
        keep = jnp.asarray(fixed)[lax.axis_index(self.all_names)]
        return jnp.where(keep, x, y)


# ---------------------------------------------------------------------------
# pairs


def _spec(rng, names, rank) -> P:
    entries = [[] for _ in range(rank)]
    for a in rng.permutation(names):
        d = int(rng.integers(rank + 1))
        if d < rank:
            entries[d].append(str(a))
    return P(*[tuple(e) if len(e) > 1 else (e[0] if e else None) for e in entries])


def shape_for(rank: int, mib: int) -> tuple[int, ...]:
    """Powers of two, as even as they go, of ``mib`` MiB of float32."""
    e = (mib * MiB // 4).bit_length() - 1
    return tuple(1 << (e // rank + (1 if i < e % rank else 0)) for i in range(rank))


def pick_pairs(n: int, seed: int) -> list[tuple]:
    """``n`` pairs ``(mesh axes, rank, src spec, dst spec)``, about as many on
    every mesh, whose layouts differ; deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    per = [n // len(MESHES) + (1 if i < n % len(MESHES) else 0) for i in range(len(MESHES))]
    out = []
    for axes, k in zip(MESHES, per):
        m = vj.mesh_from_jax(jax.make_mesh(tuple(s for _, s in axes), tuple(a for a, _ in axes)))
        names = [a for a, _ in axes]
        seen = set()
        for _ in range(10000):
            if len(seen) == k:
                break
            rank = int(rng.integers(2, 4))
            s, d = _spec(rng, names, rank), _spec(rng, names, rank)
            shape = shape_for(rank, 16)
            ts, td = vj.from_partition_spec(m, shape, s), vj.from_partition_spec(m, shape, d)
            key = (rank, str(ts), str(td))
            if ts.refined() == td.refined() or key in seen:
                continue
            seen.add(key)
            out.append((axes, rank, s, d))
    return out


# ---------------------------------------------------------------------------
# one pair at one size


def hlo_collectives(compiled) -> Counter:
    return Counter(m.group(1) for m in _OP.finditer(compiled.as_text()))


def program_shape(compiled) -> list[str]:
    """The compiled program's instructions, type and opcode only (names,
    metadata and operands dropped): equal for two programs that XLA compiled
    to the same code."""
    out = []
    for line in compiled.as_text().splitlines():
        m = re.match(r"\s*(?:ROOT )?%\S+ = (.*?)\(", line)
        if m:
            out.append(m.group(1))
    return out


def describe(c: Counter) -> str:
    return " + ".join(f"{c[k]} {SHORT[k]}" for k in COLLECTIVES if c[k]) or "none"


def same(y, ref) -> bool:
    a = {s.device.id: np.asarray(s.data) for s in y.addressable_shards}
    b = {s.device.id: np.asarray(s.data) for s in ref.addressable_shards}
    return (y.shape == ref.shape and y.sharding.is_equivalent_to(ref.sharding, y.ndim) and a.keys() == b.keys()
            and all(np.array_equal(a[k], b[k]) for k in a))


@functools.lru_cache(maxsize=None)
def make_mesh(axes):
    return jax.make_mesh(tuple(s for _, s in axes), tuple(a for a, _ in axes))


def compile_previous(r, xs, dst, x):
    """The plan's program lowered by :class:`PreviousLowering` (``_body``
    looks ``JaxBackend`` up when it traces)."""
    saved = vj.JaxBackend
    vj.JaxBackend = PreviousLowering
    try:
        return jax.jit(functools.partial(vj._body, r), in_shardings=xs, out_shardings=dst).lower(x).compile()
    finally:
        vj.JaxBackend = saved


def run_pair(i, pair, mib, A, min_runs, max_runs, budget, check, rng):
    axes, rank, s, d = pair
    mesh = make_mesh(axes)
    shape = shape_for(rank, mib)
    src, dst = NamedSharding(mesh, s), NamedSharding(mesh, d)
    x = jax.device_put(A[: int(np.prod(shape))].reshape(shape), src)
    vj.clear_cache()
    mine = vj.reshard(x, dst)  # plans and caches (on CPU devices the eager call runs on the host)
    raw = jax.jit(lambda v: vj.reshard(v, dst))  # our compiled program, as jax.jit runs it
    m = vj.mesh_from_jax(mesh)
    p = vj._plan_for(m, vj.from_partition_spec(m, shape, s), vj.from_partition_spec(m, shape, d))
    r = vj._Redistribution(mesh, mesh.abstract_mesh, p.src, p.dst, p)
    progs = {
        "xla": jax.jit(lambda v: jax.sharding.reshard(v, dst)).lower(x).compile(),
        "ours": raw.lower(x).compile(),
        "before": compile_previous(r, x.sharding, dst, x),
    }
    ref = progs["xla"](x)
    ok = None
    if check:
        ok = same(mine, ref) and all(same(progs[k](x), ref) for k in ("ours", "before"))
        if not ok:
            raise AssertionError(f"pair {i}: {s} -> {d} on {axes} at {mib} MiB: ours differs from XLA's")
    del mine, ref
    names = list(progs)
    warm = 0.0
    for k in names:  # warm-up, and how many rounds fit the budget
        t = time.perf_counter()
        progs[k](x).block_until_ready()
        warm += time.perf_counter() - t
    runs = max(min_runs, min(max_runs, int(np.ceil(budget / warm))))
    times = {k: [] for k in names}
    for _ in range(runs):
        for j in rng.permutation(len(names)):
            k = names[j]
            t = time.perf_counter()
            y = progs[k](x)
            y.block_until_ready()
            times[k].append(time.perf_counter() - t)
            del y
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    mem = {k: progs[k].memory_analysis() for k in ("xla", "ours")}
    return dict(
        i=i, mib=mib, mesh=str(tuple(n for _, n in axes)), shape=shape, s=s, d=d,
        types=f"{p.src} -> {p.dst}", plan=", ".join(map(str, p.collectives)) or "(none)",
        plan_n=sum(1 for _ in p.collectives), med=med, ok=ok, runs=runs,
        same_program=program_shape(progs["ours"]) == program_shape(progs["before"]),
        same_as_xla=program_shape(progs["ours"]) == program_shape(progs["xla"]),
        temp={k: v.temp_size_in_bytes for k, v in mem.items()},
        hlo={k: hlo_collectives(progs[k]) for k in ("xla", "ours", "before")},
        ops={k: entry_ops(progs[k]) for k in ("xla", "ours", "before")},
    )


# ---------------------------------------------------------------------------
# report


def gmean(v) -> float:
    return float(np.exp(np.mean(np.log(v))))


def spec_text(s: P) -> str:
    return str(s).removeprefix("PartitionSpec")


def stats(rows, key="ours") -> dict:
    sp = np.array([r["med"]["xla"] / r["med"][key] for r in rows])
    return dict(n=len(sp), g=gmean(sp), lo=sp.min(), hi=sp.max(), below=float(np.mean(sp < 0.95)), med=np.median(sp))


def jaxlib_version() -> str:
    try:
        from importlib.metadata import version
        return version("jaxlib")
    except Exception:  # pragma: no cover
        return "?"


def load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:  # pragma: no cover
        return "?"


def entry_ops(compiled) -> str:
    """The top-level instructions of the compiled program's entry, in order
    (parameters, tuple plumbing and bitcasts left out; a fusion by its name,
    which XLA makes from what it fuses), runs of one kind counted."""
    text = compiled.as_text()
    body = text[text.index("\nENTRY"):]
    ops = []
    for line in body.splitlines()[1:]:
        m = re.match(r"\s*(?:ROOT )?%([\w.-]+) = \S+(?: \S+)*? ([\w-]+)\(", line)
        if not m:
            continue
        name, op = m.group(1), m.group(2)
        if op in ("parameter", "get-tuple-element", "tuple", "bitcast", "constant", "partition-id"):
            continue
        ops.append(re.sub(r"\.\d+$", "", name) if op == "fusion" else op)
    out = []
    for op in ops:
        if out and out[-1][0] == op:
            out[-1][1] += 1
        else:
            out.append([op, 1])
    return ", ".join(f"{n} {op}" if n > 1 else op for op, n in out)


XYZ = (("x", 2), ("y", 2), ("z", 2))
PROBES = [  # one-collective pairs whose programs the report lists instruction by instruction
    ("rows to columns (one all-to-all)", XYZ, 2, P(("x", "y", "z")), P(None, ("x", "y", "z"))),
    ("swap the axes of two dims (one permute, fixed ranks)", XYZ, 2, P("x", "y"), P("y", "x")),
    ("gather columns (one all-gather along dim 1)", XYZ, 2, P(None, "x"), P()),
]


def report(rows, probes, args, wall, load0, load1) -> str:
    argv = "".join(f" --{k.replace('_', '-')} {v}" for k, v in vars(args).items()
                   if k in DEFAULTS and v != DEFAULTS[k])
    cmd = f"XLA_FLAGS=--xla_force_host_platform_device_count=8 python bench/jax_timing.py{argv}"
    sizes = sorted({r["mib"] for r in rows})
    npairs = len({r["i"] for r in rows})
    nbig = len({r["i"] for r in rows if r["mib"] >= 256})
    out = [
        "# Our compiled reshard against XLA's own, 16-256 MiB",
        "",
        f"`{cmd}` (8 JAX CPU devices, {os.cpu_count()} CPU cores shared with other work, {platform.machine()}, "
        f"JAX {jax.__version__}, jaxlib {jaxlib_version()}); {wall / 60:.1f} min in all; load average {load0} "
        f"at the start, {load1} at the end.",
        "",
        f"{npairs} placement pairs (`PartitionSpec` pairs drawn with seed {args.seed}, about as many on each of "
        "the meshes (2,4), (2,2,2), (4,2), (8,) of `jax.make_mesh`, Explicit axes; arrays of rank 2 or 3 with "
        "power-of-two sides, float32; only pairs whose layouts differ)"
        + (f"; at 256 MiB one pair in {args.big_every} ({nbig} pairs), to keep the run near ten minutes on two "
           "cores" if nbig else "") + ". "
        "Per pair and size three programs, each compiled once and called on the same `x`, interleaved in a new "
        f"random order every round, each call waited for (`block_until_ready`): one warm-up call each, then "
        f"as many timed rounds as fit {args.budget:g} s (at least {args.runs}, at most {args.max_runs}); the "
        "median of each.",
        "",
        "- *XLA*: `jax.jit(lambda v: jax.sharding.reshard(v, dst))`;",
        "- *ours*: `jax.jit(lambda v: verishard.jax.reshard(v, dst))`, the verified plan's `shard_map` "
        "lowered by `verishard.jax.backend.JaxBackend` (what `jax.jit` runs, and the eager call off CPU devices);",
        "- *before*: the same plan lowered as the backend lowered it before this benchmark (`PreviousLowering` "
        "in the script): the same plans, only the lowering of their steps differs.",
        "",
        "Speedup = XLA time / our time (above 1: ours faster). Each pair's result (`reshard`, ours, before) "
        "equals XLA's on every device, values and sharding (checked at the pair's first size). Temp memory: "
        "`compiled.memory_analysis().temp_size_in_bytes`, per device. Collectives: counted in each compiled "
        "program's `as_text()` (a2a all-to-all, ag all-gather, cp collective-permute).",
        "",
        "## Summary",
        "",
        "| size | pairs | geomean XLA/ours | median | min | max | below 0.95x | before: geomean | before: min "
        "| before: below 0.95x | temp MiB XLA / ours (median) | ours more temp than XLA |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mib in sizes:
        rs = [r for r in rows if r["mib"] == mib]
        a, b = stats(rs), stats(rs, "before")
        tx = np.median([r["temp"]["xla"] for r in rs]) / MiB
        to = np.median([r["temp"]["ours"] for r in rs]) / MiB
        more = sum(r["temp"]["ours"] > r["temp"]["xla"] for r in rs)
        out.append(f"| {mib} MiB | {a['n']} | {a['g']:.2f} | {a['med']:.2f} | {a['lo']:.2f} | {a['hi']:.2f} | "
                   f"{a['below']:.0%} | {b['g']:.2f} | {b['lo']:.2f} | {b['below']:.0%} | {tx:.1f} / {to:.1f} | "
                   f"{more} of {len(rs)} |")
    a, b = stats(rows), stats(rows, "before")
    out += [
        "",
        f"All sizes together ({a['n']} pair-sizes): geomean {a['g']:.2f}x, min {a['lo']:.2f}x, max {a['hi']:.2f}x, "
        f"below 0.95x {a['below']:.0%}; before: geomean {b['g']:.2f}x, min {b['lo']:.2f}x, below 0.95x "
        f"{b['below']:.0%}. The target of issue 13 is a geomean of at least 1.5x and nothing below 0.95x.",
    ]
    same = [r for r in rows if r["same_program"]]
    if same:
        q = np.array([r["med"]["before"] / r["med"]["ours"] for r in same])
        out += [
            "",
            f"How much two timings of one program differ here: on the {len(same)} pair-sizes where ours and "
            "before compile to the same program (plans of slices and leading-dimension gathers, which the "
            f"lowering did not change), before / ours has geomean {gmean(q):.2f}, min {q.min():.2f}, max "
            f"{q.max():.2f}, and {np.mean(np.abs(np.log(q)) > np.log(1 / 0.95)):.0%} of them lie outside "
            "0.95-1.05: a single pair's ratio within a few percent of 1 is noise on this loaded machine.",
        ]
    twin = [r for r in rows if r.get("same_as_xla")]
    if twin:
        q = np.array([r["med"]["xla"] / r["med"]["ours"] for r in twin])
        slow = [r for r in rows if r["med"]["xla"] / r["med"]["ours"] < 0.95]
        out += [
            "",
            f"On {len(twin)} pair-sizes ours compiles to exactly XLA's program (same instructions): there "
            f"XLA / ours has geomean {gmean(q):.2f}, min {q.min():.2f}, max {q.max():.2f}. Of the "
            f"{len(slow)} pair-sizes below 0.95x, {sum(1 for r in slow if r.get('same_as_xla'))} are such "
            "twins, whose difference is the measurement's, not the program's.",
        ]
        other = np.array([r["med"]["xla"] / r["med"]["ours"] for r in rows if not r.get("same_as_xla")])
        if other.size:
            out[-1] += (f" Where the programs differ ({other.size} pair-sizes): geomean {gmean(other):.2f}x, "
                        f"min {other.min():.2f}x, below 0.95x {np.mean(other < 0.95):.0%}.")
    out += [
        "",
        "## What made ours slower, and what changed",
        "",
        "The backend used to lower each step to the `lax` collective of its name, and XLA's CPU compiler then "
        "added a pass over the block around three of them (the *before* programs; the instruction table below "
        "shows one of each):",
        "",
        "- all-to-all: `lax.all_to_all(split_axis=dst_dim, concat_axis=src_dim)` compiles to slices, the "
        "exchange, a concatenation along the split dimension and a transpose that XLA does not fuse with it: "
        "four passes where XLA's own program has three (slices, exchange, one copy out). Now the split "
        "dimension is cut into (n, rest), the exchange runs over that new axis alone (split == concat, the form "
        "XLA's partitioner emits), and one copy moves the axis in front of the concatenated dimension;",
        "- permute: `ppermute` over the moving ranks, then `where(keep, x, y)` on every device, a select pass "
        "that reads two blocks and writes a third. Now the fixed ranks are pairs (c, c) of the one "
        "collective-permute, as in XLA's programs;",
        "- all-gather along an inner dimension: XLA (in its own programs too) copies the operand into a layout "
        "where that dimension is major, gathers, and copies the result back, element by element. Now the gather "
        "runs along a new leading axis and one copy moves that axis into place, in contiguous runs of the "
        "inner dimensions;",
        "- local slice: no wrap-around of a negative start (a scalar select, no pass over the data).",
        "",
        "The `shard_map` boundary adds nothing: the parameter feeds the first step's fusions directly, on the "
        "user's mesh and on a mesh of parts (an axis split as `y.0`, `y.1`). No plan changed: the same plan "
        "runs, step by step, in *before* and *ours*.",
    ]
    out += ["", "## By how many collectives each program runs", "",
            "Collectives in our compiled program against those in XLA's, over all pair-sizes:", "",
            "| ours vs XLA | pair-sizes | geomean XLA/ours | min | max | below 0.95x |",
            "|---|---:|---:|---:|---:|---:|"]
    groups = {}
    for r in rows:
        no, nx = sum(r["hlo"]["ours"].values()), sum(r["hlo"]["xla"].values())
        groups.setdefault("fewer" if no < nx else "as many" if no == nx else "more", []).append(r)
    for key in ("fewer", "as many", "more"):
        if key in groups:
            g = stats(groups[key])
            out.append(f"| ours {key} | {g['n']} | {g['g']:.2f} | {g['lo']:.2f} | {g['hi']:.2f} | {g['below']:.0%} |")
    gathers = [r for r in rows if r["hlo"]["xla"]["all-gather"] and not r["hlo"]["ours"]["all-gather"]]
    rest = [r for r in rows if r not in gathers]
    if gathers and rest:
        g, h = stats(gathers), stats(rest)
        out += ["", f"Where XLA's program all-gathers and ours does not ({g['n']} pair-sizes): geomean {g['g']:.2f}x, "
                    f"min {g['lo']:.2f}x; on the other {h['n']}: geomean {h['g']:.2f}x, min {h['lo']:.2f}x."]
    chains = [r for r in rows if r["hlo"]["ours"]["all-to-all"] >= 2]
    if chains:
        g = stats(chains)
        theirs = Counter(describe(r["hlo"]["xla"]) for r in chains).most_common()
        out += ["", f"Where our plan runs a chain of all-to-alls ({g['n']} pair-sizes): geomean {g['g']:.2f}x, "
                    f"min {g['lo']:.2f}x; XLA's programs there: " + ", ".join(f"{n}x {k}" for k, n in theirs) + "."]
        worse = [r for r in chains if r["hlo"]["xla"]["all-to-all"] == 1 and r["hlo"]["xla"]["collective-permute"] == 1
                 and sum(r["hlo"]["xla"].values()) == 2]
        if worse:
            w = stats(worse)
            out += ["", f"Against XLA's one all-to-all and one collective-permute ({w['n']} pair-sizes, pairs "
                        + ", ".join(f"#{i}" for i in sorted({r['i'] for r in worse})) + f") the chain runs at "
                        f"{w['lo']:.2f}-{w['hi']:.2f}x (geomean {w['g']:.2f}x). The gap is the plan's, not the "
                        "lowering's: on CPU an all-to-all is three passes over the block (slices, exchange, one "
                        "copy out) and a collective-permute one, so two all-to-alls make six passes against XLA's "
                        "four (4/6 = 0.67), though our plan receives less data. Running it as XLA does would take "
                        "another plan: one all-to-all and a permute, which the verified planner, minimising data "
                        "received, does not choose here."]
    if probes:
        out += ["", "## One-collective programs, instruction by instruction (16 MiB)", "",
                "The top-level instructions of each compiled program (parameters, tuple plumbing and bitcasts left "
                "out; a fusion by XLA's name for it), and its median time in the same interleaved rounds:", "",
                "| pair | program | ms | instructions |", "|---|---|---:|---|"]
        for pr in probes:
            for k in ("xla", "ours", "before"):
                out.append(f"| {pr['name']}: `{spec_text(pr['s'])} -> {spec_text(pr['d'])}` | {k} | "
                           f"{pr['med'][k]:.1f} | {pr['ops'][k]} |")
    for mib in sizes:
        rs = sorted((r for r in rows if r["mib"] == mib), key=lambda r: r["med"]["xla"] / r["med"]["ours"])
        out += ["", f"## Slowest 10 pairs at {mib} MiB", "",
                "| # | mesh | shape | src -> dst | XLA ms | ours ms | XLA/ours | before | rounds | temp MiB XLA / ours "
                "| our plan | ours compiled | XLA compiled |",
                "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|---|---|"]
        out += [row_text(r) for r in rs[:10]]
    out += ["", "## Every pair", "",
            "| # | size | mesh | shape | src -> dst | XLA ms | ours ms | XLA/ours | before | rounds "
            "| temp MiB XLA / ours | our plan | ours compiled | XLA compiled |",
            "|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|---|---|"]
    out += [row_text(r, size=True) for r in sorted(rows, key=lambda r: (r["i"], r["mib"]))]
    out.append("")
    return "\n".join(out)


def row_text(r, size=False) -> str:
    m = r["med"]
    cells = [str(r["i"])] + ([f"{r['mib']}"] if size else []) + [
        r["mesh"], "x".join(map(str, r["shape"])), f"`{spec_text(r['s'])} -> {spec_text(r['d'])}`",
        f"{m['xla']:.1f}", f"{m['ours']:.1f}", f"{m['xla'] / m['ours']:.2f}", f"{m['xla'] / m['before']:.2f}",
        str(r["runs"]),
        f"{r['temp']['xla'] / MiB:.1f} / {r['temp']['ours'] / MiB:.1f}", r["plan"],
        describe(r["hlo"]["ours"]), describe(r["hlo"]["xla"])]
    return "| " + " | ".join(cells) + " |"


DEFAULTS = {"pairs": 64, "sizes": "16,64,256", "runs": 7, "max_runs": 25, "budget": 3.0, "seed": 0, "big_every": 3}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=DEFAULTS["pairs"], help="placement pairs")
    ap.add_argument("--sizes", default=DEFAULTS["sizes"], help="global sizes in MiB, comma-separated")
    ap.add_argument("--runs", type=int, default=DEFAULTS["runs"], help="fewest timed rounds per pair and size")
    ap.add_argument("--max-runs", type=int, default=DEFAULTS["max_runs"], help="most timed rounds per pair and size")
    ap.add_argument("--budget", type=float, default=DEFAULTS["budget"],
                    help="seconds of timed rounds per pair and size (within --runs .. --max-runs)")
    ap.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="seed of the pair generator")
    ap.add_argument("--big-every", type=int, default=DEFAULTS["big_every"],
                    help="at 256 MiB and above run every n-th pair only")
    ap.add_argument("--no-probes", dest="probes", action="store_false",
                    help="leave out the instruction-by-instruction table of three one-collective pairs")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "jax_timing.md"), help="report path, - for stdout")
    args = ap.parse_args(argv)
    if len(jax.devices()) < 8:
        print("needs 8 JAX devices", file=sys.stderr)
        return 1
    t0, load0 = time.perf_counter(), load()
    pairs = pick_pairs(args.pairs, args.seed)
    sizes = [int(v) for v in args.sizes.split(",")]
    rng = np.random.default_rng(args.seed + 1)
    rows, checked = [], set()
    for mib in sizes:
        A = np.random.default_rng(mib).standard_normal(mib * MiB // 4, dtype=np.float32)
        for i, pair in enumerate(pairs):
            if mib >= 256 and i % args.big_every:
                continue
            row = run_pair(i, pair, mib, A, args.runs, args.max_runs, args.budget, i not in checked, rng)
            checked.add(i)
            rows.append(row)
            m = row["med"]
            print(f"[{time.perf_counter() - t0:6.0f} s] {mib} MiB #{i} {row['mesh']} {spec_text(row['s'])} -> "
                  f"{spec_text(row['d'])}: xla {m['xla']:.1f} ms, ours {m['ours']:.1f} ms "
                  f"({m['xla'] / m['ours']:.2f}x, before {m['xla'] / m['before']:.2f}x)", file=sys.stderr, flush=True)
        del A
    probes = []
    if args.probes:
        A = np.random.default_rng(0).standard_normal(16 * MiB // 4, dtype=np.float32)
        for name, axes, rank, s, d in PROBES:
            row = run_pair(name, (axes, rank, s, d), 16, A, args.runs, args.max_runs, args.budget, True, rng)
            row["name"] = name
            probes.append(row)
    text = report(rows, probes, args, time.perf_counter() - t0, load0, load())
    emit_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
