"""The eager ``verishard.jax.reshard`` on a cached call against ``jax.device_put``, and what
``donate=True`` saves, on 8 CPU devices.

    python bench/jax_eager.py                  # writes bench/results/jax_eager.md (about a minute)
    python bench/jax_eager.py --out -          # markdown to stdout

Time: a float32 array of ``--mib`` MiB (default 4, the size of the issue's measurement) on the
mesh (2, 4) of ``jax.make_mesh``, over a few placement pairs. For each pair, after warm-up calls,
``--rounds`` rounds call each of these once, in a new random order every round, each waited for
with ``block_until_ready``; a time is the median:

- *planning*: the core's planning alone (``verishard.plan``, its cache empty); *first call*: the
  first ``reshard`` with every cache empty (planning, building the executor, running);
- *ours*: ``verishard.jax.reshard(x, dst)``, its executor cached (the call a training loop makes).
  On CPU devices it runs the verified plan's steps on the devices' blocks in host memory
  (``verishard.jax.backend.host_executor``: no XLA program), then hands each device its block;
- *program*: ``jax.jit(lambda v: verishard.jax.reshard(v, dst))``, the verified plan compiled
  (its ``shard_map`` of collectives: what runs under ``jax.jit``);
- *XLA jit*: ``jax.jit(lambda v: jax.sharding.reshard(v, dst))``, XLA's own program for the pair;
- *device_put*: ``jax.device_put(x, dst)``, which on this client runs no XLA program either: it
  reads ``x`` to the host and hands each device slices of that copy, which JAX caches on the
  array (``x._npy_value``), so a second call on the same ``x`` skips the read;
- *ours, fresh* and *device_put, fresh*: the same calls on a new ``x`` each round (made before the
  timer starts), as in a loop where every step makes a new array: the fair comparison.

Memory with ``donate=True``: XLA's own figure for the compiled program per device
(``compiled.memory_analysis()``: arguments + outputs + temporaries - the donated argument aliased
to the output), without and with donation (``donate_argnums``), in units of the source's local
size; and whether the source array is deleted when the eager ``reshard(..., donate=True)``
returns (it is, in every pair).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import jax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import verishard.jax as vj  # noqa: E402
vplan = sys.modules["verishard.plan"]  # the module (verishard.plan is also the function)
from report import emit_report  # noqa: E402  (bench/: this script's directory)

PAIRS = [(P("x", None), P(None, "x")), (P("x", "y"), P("y", "x")), (P("x"), P()), (P(None, "y"), P("x", None)),
         (P("x", "y"), P("x", None)), (P(("x", "y"), None), P(("y", "x"), None))]


def xla_peak(fn, x) -> int:
    """arguments + outputs + temporaries - aliased, per device, of ``fn`` compiled for ``x``."""
    ma = fn.lower(x).compile().memory_analysis()
    return (ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes
            - ma.alias_size_in_bytes)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=101)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "jax_eager.md"))
    args = ap.parse_args(argv)
    jm = jax.make_mesh((2, 4), ("x", "y"))
    side = int(round((args.mib * 2**20 / 4) ** 0.5))
    side -= side % 8
    A = np.random.default_rng(args.seed).standard_normal((side, side)).astype(np.float32)
    rng = np.random.default_rng(args.seed)
    rows, ratios, fresh_ratios, prog_ratios = [], [], [], []
    for src, dst in PAIRS:
        x = jax.device_put(A, NamedSharding(jm, src))
        target = NamedSharding(jm, dst)
        # the first call with every cache empty (planning, building the executor, running), and
        # the core's planning alone
        m = vj.mesh_from_jax(jm)
        ts, td = vj.from_partition_spec(m, A.shape, src), vj.from_partition_spec(m, A.shape, dst)
        vplan._planned.cache_clear()
        t0 = time.perf_counter()
        vj.synthesize(m, ts, td)
        planning = (time.perf_counter() - t0) * 1e3
        vj.clear_cache()
        vplan._planned.cache_clear()
        t0 = time.perf_counter()
        vj.reshard(x, target).block_until_ready()  # the calls below are cached
        first = (time.perf_counter() - t0) * 1e3
        assert getattr(vj._EAGER[(x.shape, x.dtype, x.sharding, target)], "on_host", False)
        program = jax.jit(lambda v, d=target: vj.reshard(v, d))
        xla = jax.jit(lambda v, d=target: jax.sharding.reshard(v, d))
        fresh = {}
        calls = {"ours": lambda: vj.reshard(x, target).block_until_ready(),
                 "program": lambda: program(x).block_until_ready(),
                 "XLA jit": lambda: xla(x).block_until_ready(),
                 "device_put": lambda: jax.device_put(x, target).block_until_ready(),
                 "ours, fresh": lambda: vj.reshard(fresh["x"], target).block_until_ready(),
                 "device_put, fresh": lambda: jax.device_put(fresh["x"], target).block_until_ready()}
        times = {k: [] for k in calls}
        for r in range(args.rounds + 2):  # the first two rounds warm up
            for k in rng.permutation(list(calls)):
                fresh["x"] = jax.device_put(A, NamedSharding(jm, src)).block_until_ready()
                t0 = time.perf_counter()
                calls[k]()
                if r >= 2:
                    times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        y = vj.reshard(x, target)
        assert np.array_equal(np.asarray(y), A) and y.sharding == target
        # donation: XLA's figure for the executor without and with it, and the source after the call
        local = x.addressable_shards[0].data.nbytes
        plain = xla_peak(program, x)
        xd = jax.device_put(A, NamedSharding(jm, src))
        yd = vj.reshard(xd, target, donate=True)
        donated = xla_peak(jax.jit(lambda v, d=target: vj.reshard(v, d), donate_argnums=0),
                           jax.device_put(A, NamedSharding(jm, src)))
        assert np.array_equal(np.asarray(yd), A)
        ratios.append(med["ours"] / med["device_put"])
        fresh_ratios.append(med["ours, fresh"] / med["device_put, fresh"])
        prog_ratios.append(med["program"] / med["device_put"])
        rows.append(f"| `{src}` -> `{dst}` | {', '.join(map(str, vj.plan_for(x, target).collectives))} | "
                    f"{planning:.2f} | {first:.1f} | {med['ours']:.2f} | {med['program']:.2f} | {med['XLA jit']:.2f} | "
                    f"{med['device_put']:.2f} | {ratios[-1]:.2f}x | {med['ours, fresh']:.2f} | {med['device_put, fresh']:.2f} | "
                    f"{fresh_ratios[-1]:.2f}x | {plain / local:.2f} | {donated / local:.2f} | "
                    f"{'yes' if xd.is_deleted() else 'no'} |")
    text = "\n".join([
        "# Eager reshard (cached call) against jax.device_put, and donation",
        "",
        f"`python bench/jax_eager.py` on {platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}, "
        f"8 CPU devices, mesh (2, 4); a float32 array {side}x{side} ({A.nbytes / 2**20:.1f} MiB); median of "
        f"{args.rounds} interleaved rounds, milliseconds.",
        "",
        "| pair | plan | planning | first call | ours | program | XLA jit | device_put | ours / device_put | "
        "ours, fresh x | device_put, fresh x | ratio, fresh x | peak, no donation | peak, donate=True | "
        "source deleted |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Median over the pairs: ours / device_put **{statistics.median(ratios):.2f}x** on the same `x`, "
        f"{statistics.median(fresh_ratios):.2f}x on a fresh `x` each call; "
        f"the compiled program / device_put {statistics.median(prog_ratios):.2f}x on the same `x`.",
        "",
        "On CPU devices the eager call runs no XLA program: the verified plan's steps move the devices' "
        "blocks in host memory (`verishard.jax.backend.host_executor`; step for step the simulator's "
        "data movement, tests/test_jax_host.py), as device_put copies through the host. Under `jax.jit`, "
        "and eagerly on other devices, the plan runs as its compiled program (*program*).",
        "",
        "Peak: XLA's figure per device for the compiled program (arguments + outputs + temporaries - "
        "aliased), in units of the source's local size. With `donate_argnums` XLA aliases the source's "
        "buffers to the result where the local shapes agree; the eager `reshard(x, s, donate=True)` "
        "deletes the source when the call returns.",
        "",
    ])
    emit_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
