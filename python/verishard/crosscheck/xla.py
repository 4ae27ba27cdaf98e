"""The XLA adapter: what XLA's SPMD partitioner (GSPMD propagation or Shardy,
whichever JAX uses) compiles for ``jit(identity, in_shardings=src,
out_shardings=dst)``, read from the compiled HLO.

The compiled HLO is run by :mod:`verishard.crosscheck.hlo` on an array whose
elements carry their global index, so each collective's effect on every
device is observed rather than guessed from its name; the compiled program is
also executed by XLA itself on the same values, and the interpreter must agree
with it. Observations become our IR in :mod:`verishard.crosscheck.trace` and
are judged by the verified checker.

Needs JAX with enough devices: on CPU, set
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before importing JAX.
"""

from __future__ import annotations

import os
import re
import tempfile
from typing import Any

import numpy as np

from ..mesh import Mesh
from ..sharding import ArrayType
from .hlo import HloError, Interpreter, parse_module
from .result import PlannerResult, judge
from .trace import Event, global_values, held_sets, local_arrays, matches_layout

__all__ = ["xla_plan", "compile_reshard", "REMAT_PATTERN"]

REMAT_PATTERN = re.compile(r"Involuntary full rematerialization[^\n]*")


class _CaptureStderr:
    """Capture what C++ code writes to file descriptor 2 (XLA's warnings)."""

    def __enter__(self):
        self.tmp = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.tmp.fileno(), 2)
        return self

    def __exit__(self, *exc):
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.tmp.seek(0)
        self.text = self.tmp.read().decode(errors="replace")
        self.tmp.close()
        return False


def compile_reshard(src: ArrayType, dst: ArrayType, dtype=np.float32, devices=None):
    """Compile ``jit(identity)`` from ``src`` to ``dst`` with JAX.

    Returns ``(compiled, src_sharding, dst_sharding, stderr_text)``.

    >>> m = Mesh.parse("x=2")
    >>> compiled, s, d, log = compile_reshard(ArrayType.parse("[2{x}4]", m), ArrayType.parse("[4]", m))
    >>> s.spec, d.spec, [i.opcode for i in parse_module(compiled.as_text()).collectives()]
    (P('x',), P(None,), ['all-gather'])
    """
    import jax

    from ..jax import to_named_sharding
    s = to_named_sharding(src, devices)
    d = to_named_sharding(dst, s.mesh)
    fn = jax.jit(lambda a: a, in_shardings=s, out_shardings=d)
    with _CaptureStderr() as cap:
        compiled = fn.lower(jax.ShapeDtypeStruct(src.global_shape, dtype, sharding=s)).compile()
    return compiled, s, d, cap.text


def _memory(compiled) -> dict[str, int]:
    try:
        m = compiled.memory_analysis()
    except Exception:  # pragma: no cover - backend without memory analysis
        return {}
    if m is None:  # pragma: no cover
        return {}
    out = {k: int(getattr(m, f"{k}_size_in_bytes", 0)) for k in ("argument", "output", "temp", "alias")}
    out["total"] = out["argument"] + out["output"] + out["temp"] - out["alias"]
    return out


def xla_plan(mesh: Mesh, src: ArrayType, dst: ArrayType, *, dtype=np.float32, devices=None,
             run: bool = True) -> PlannerResult:
    """XLA's plan for ``src -> dst`` in our IR (or why it has none).

    ``run`` also executes the compiled program on the devices and compares
    its result with the target layout (XLA's own correctness).

    XLA reshards ``[2{x}4]`` to ``[2{y}4]`` on ``x=2,y=2`` with one permute:

    >>> m = Mesh.parse("x=2,y=2")
    >>> r = xla_plan(m, ArrayType.parse("[2{x}4]", m), ArrayType.parse("[2{y}4]", m))
    >>> r.summary(), r.plan.collectives, r.extra["xla_output_correct"]
    ('xla: valid', (AllPermute(target=[2{y}4]),), True)
    """
    import jax
    name = "xla"
    itemsize = np.dtype(dtype).itemsize
    extra: dict[str, Any] = {"partitioner": "shardy" if jax.config.jax_use_shardy_partitioner else "gspmd"}
    try:
        compiled, s_sh, d_sh, log = compile_reshard(src, dst, dtype, devices)
    except Exception as e:  # XLA refused the case
        return PlannerResult(name, "unsupported", f"JAX/XLA refused: {type(e).__name__}: {str(e)[:200]}",
                             extra=extra)
    extra["remat_warnings"] = REMAT_PATTERN.findall(log)
    extra["memory"] = _memory(compiled)
    text = compiled.as_text()
    extra["hlo"] = text
    G = global_values(src.global_shape)
    n = mesh.num_devices
    if run:
        x = jax.device_put(G.astype(dtype), s_sh)
        y = compiled(x)
        order = {dev.id: r for r, dev in enumerate(d_sh.mesh.devices.flat)}
        got = [None] * n
        for shard in y.addressable_shards:
            got[order[shard.device.id]] = np.asarray(shard.data).astype(np.int64)
        xla_correct = matches_layout(got, dst, G)
        extra["xla_output_correct"] = xla_correct
    else:
        xla_correct = None
    try:
        module = parse_module(text)
        trace = Interpreter(module, n).run([local_arrays(src, G)])
    except (HloError, KeyError, ValueError, IndexError) as e:
        n_coll = len([i for i in parse_module(text).collectives()]) if "ENTRY" in text else None
        if xla_correct is False:
            return PlannerResult(name, "wrong_data", "XLA's compiled program does not produce the target layout",
                                 n_collectives=n_coll, output_correct=False, extra=extra)
        return PlannerResult(name, "not_expressible", f"not expressible: the HLO uses something our reader "
                             f"does not model ({e})", n_collectives=n_coll, output_correct=xla_correct,
                             extra=extra)
    events = [Event(ev.opcode, held_sets(ev.outputs), held_sets(ev.inputs), f"{ev.opcode} %{ev.name}")
              for ev in trace.collectives]
    received = sum(int(ev.received.max()) for ev in trace.collectives)
    n_coll = sum(1 for ev in trace.collectives if ev.received.max() > 0)
    program = tuple(f"{ev.opcode} %{ev.name}: {ev.text}" for ev in trace.collectives)
    interp_correct = matches_layout(trace.outputs, dst, G)
    info = dict(program=program, n_collectives=n_coll, peak_elements=trace.peak_elements,
                received_elements=received, extra=extra)
    if xla_correct is not None and interp_correct != xla_correct:
        return PlannerResult(name, "error", "our HLO interpreter disagrees with XLA's own result "
                             "(an adapter bug)", output_correct=xla_correct, **info)
    extra["bytes"] = {"peak": trace.peak_elements * itemsize, "received": received * itemsize}
    return judge(name, mesh, src, dst, events, trace.outputs, **info)
