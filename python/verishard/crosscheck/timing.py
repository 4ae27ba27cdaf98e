"""Wall time of XLA's resharding against our JAX backend, in one process.

Both are jitted JAX functions called on the same device array: XLA's is
``jit(identity, out_shardings=dst)``, ours the ``shard_map`` program of a
checked plan (:func:`verishard.jax.compile_plan`). Calls alternate between
the two; the result is the median over ``repeats`` calls after ``warmup``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from math import prod

import numpy as np

from ..plan import Plan

__all__ = ["Timing", "time_pair"]


@dataclass
class Timing:
    """Median seconds per call of XLA's reshard and of ours, and each compiled
    program's memory analysis (bytes: argument, output, temp, alias, total).

    >>> Timing(2e-5, 1e-5, {}, {}).speedup
    2.0
    """

    xla_seconds: float
    ours_seconds: float
    xla_memory: dict
    ours_memory: dict

    @property
    def speedup(self) -> float:
        """``t_xla / t_ours``: above 1 when our plan is faster.

        >>> Timing(xla_seconds=3e-5, ours_seconds=6e-5, xla_memory={}, ours_memory={}).speedup
        0.5
        """
        return self.xla_seconds / self.ours_seconds


def _mem(compiled) -> dict:
    m = compiled.memory_analysis()
    out = {k: int(getattr(m, f"{k}_size_in_bytes", 0)) for k in ("argument", "output", "temp", "alias")}
    out["total"] = out["argument"] + out["output"] + out["temp"] - out["alias"]
    return out


def time_pair(plan: Plan, repeats: int = 25, warmup: int = 5, dtype=np.float32) -> Timing:
    """Time XLA's reshard and our execution of ``plan`` (from ``plan.src`` to
    ``plan.dst``) on the first devices; both results are compared first.

    >>> from verishard import plan
    >>> t = time_pair(plan("x=2", "[2{x}4]", "[4]"), repeats=3, warmup=1)
    >>> t.speedup > 0, sorted(t.ours_memory)
    (True, ['alias', 'argument', 'output', 'temp', 'total'])
    """
    import jax
    from jax.sharding import NamedSharding

    from ..jax import compile_plan, jax_mesh, rewrap, to_partition_spec
    src = plan.src
    jm0 = jax_mesh(plan.mesh)  # a split axis is a parts-level mesh: the same layout
    s_sh = NamedSharding(jm0, to_partition_spec(src, parts=True))
    d_sh = NamedSharding(jm0, to_partition_spec(plan.dst, parts=True))
    shape = src.global_shape
    x = jax.device_put(np.arange(prod(shape), dtype=dtype).reshape(shape), s_sh)
    f_xla = jax.jit(lambda a: a, out_shardings=d_sh)
    fn, jm = compile_plan(plan, s_sh.mesh)
    x_ours = rewrap(x, NamedSharding(jm, to_partition_spec(src, parts=True)))
    from .xla import _CaptureStderr
    with _CaptureStderr():
        a, b = f_xla(x), fn(x_ours)
    ga = {s.device.id: np.asarray(s.data) for s in a.addressable_shards}
    gb = {s.device.id: np.asarray(s.data) for s in b.addressable_shards}
    if ga.keys() != gb.keys() or any(not np.array_equal(ga[k], gb[k]) for k in ga):
        raise AssertionError(f"XLA and our backend disagree on {plan.src} -> {plan.dst}")
    from .xla import _CaptureStderr
    with _CaptureStderr():  # XLA's rematerialization warning was recorded by the adapter already
        mx, mo = _mem(f_xla.lower(x).compile()), _mem(fn.lower(x_ours).compile())
    tx, to = [], []
    for i in range(warmup + repeats):
        t0 = time.perf_counter()
        f_xla(x).block_until_ready()
        t1 = time.perf_counter()
        fn(x_ours).block_until_ready()
        t2 = time.perf_counter()
        if i >= warmup:
            tx.append(t1 - t0)
            to.append(t2 - t1)
    return Timing(statistics.median(tx), statistics.median(to), mx, mo)
