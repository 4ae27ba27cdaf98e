"""Cross-check of uneven redistributions: ours, XLA and DTensor.

An uneven type splits a dimension of size ``g`` into ``n`` blocks that ``n``
does not divide: blocks of ``c = ceil(g / n)``, the trailing ones short or
empty. XLA (a ``NamedSharding`` that does not divide the shape) pads every
device's buffer to ``c``; DTensor (``torch.chunk``) keeps the short chunks.
Each planner's program runs on the same array, whose elements carry
``1 + their global index`` (0 is padding), and is judged by that execution
only, against numpy (the valid part of every device's block):

* ``ours``: :func:`verishard.plan`'s plan (accepted by the verified checker,
  ``Uchecker``), run by the shared executor on the simulator's backend over
  padded buffers (every step an even collective between a local pad and
  cut, ``backend.run_step``);
* ``ours-jax``: the same plan through :func:`verishard.jax.reshard` under
  ``jax.jit``, compiled by XLA; the compiled HLO is run by the cross-check's
  interpreter (:mod:`verishard.crosscheck.hlo`) and by XLA on the devices,
  and its collectives are counted against the plan's communicating steps;
* ``xla``: XLA's own reshard between the two shardings in the same program
  (``with_sharding_constraint`` to the source, then to the target: in JAX
  0.10 an array whose shape its sharding does not divide exists only inside
  ``jax.jit``; ``jax.device_put`` and a jit's in/out shardings refuse it),
  run the same two ways;
* ``dtensor-greedy`` / ``dtensor-mincost``: DTensor's transforms replayed
  with DTensor's data semantics on its chunked buffers
  (:func:`verishard.crosscheck.torch_dtensor.replay`). Where several mesh
  dimensions shard one uneven tensor dimension, DTensor chunks each chunk
  again, which is another layout than the type's (``5`` over ``2 x 2``:
  2, 1, 1, 1 against 2, 2, 1, 0); such a case is not the same problem, and
  is reported ``unsupported`` with :mod:`verishard.torch.dtensor`'s reason.

Both XLA programs take the source as the padded global array (every block
padded to ``c``, an even array XLA accepts at a jit's boundary), cut it to
the global shape, and pad the result back to the target's padded global
shape; the cut and the pad are local (the tests count the collectives).

Figures, in elements per device: ``peak`` is the largest buffer a program
holds: for ours the executor's largest array, including the concatenation
of a gather before its cut and the pad before a slice (the checker's
type-level peak is ``extra["type_peak"]``); for XLA the largest
data-carrying value of the compiled program (the interpreter's); for DTensor
its local tensors and the padded buffers it gathers into and exchanges (it
pads every chunk to ``c`` around an all-gather or all-to-all). The bound is
``max(size(src), size(dst))`` over padded blocks, the smallest peak a
redistribution can have. ``received`` is per step the most any device
receives, summed: padded buffers for ours and DTensor, what the interpreter
sees for XLA.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np

from ..errors import VerishardError
from ..mesh import Mesh
from ..sharding import ArrayType
from .harness import Case, all_types

__all__ = ["UnevenResult", "uneven_cases", "run_uneven", "PLANNERS"]

PLANNERS = ("ours", "ours-jax", "xla", "dtensor-greedy", "dtensor-mincost")


@dataclass
class UnevenResult:
    """One planner on one case: ``status`` is ``correct``, ``wrong_data``,
    ``unsupported`` (the planner refused, or its layout is not the case's)
    or ``error``."""

    planner: str
    status: str
    reason: str = ""
    program: tuple[str, ...] = ()
    peak: int | None = None
    received: int | None = None
    collectives: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def uneven_cases(mesh: Mesh | str, shape: Sequence[int], limit: int | None = None,
                 seed: int = 0) -> tuple[list[Case], int]:
    """Pairs of types over whole axes at least one of which is uneven, every
    one or a deterministic sample of ``limit``, and the number of such pairs.

    >>> cases, total = uneven_cases("x=2", (3,))
    >>> total, [(str(c.src), str(c.dst)) for c in cases]
    (3, [('[2{x}3]', '[2{x}3]'), ('[2{x}3]', '[3]'), ('[3]', '[2{x}3]')])
    """
    if isinstance(mesh, str):
        mesh = Mesh.parse(mesh)
    types = all_types(mesh, shape, uneven=True)
    pairs = [(a, b) for a in types for b in types if a.uneven or b.uneven]
    idx = range(len(pairs))
    if limit is not None and limit < len(pairs):
        idx = sorted(np.random.default_rng(seed).choice(len(pairs), size=limit, replace=False).tolist())
    return [Case(mesh, *pairs[k]) for k in idx], len(pairs)


def _valid(blocks: Sequence[np.ndarray], t: ArrayType) -> list[np.ndarray]:
    """The valid part of every device's padded block."""
    return [np.asarray(b)[tuple(slice(0, v) for v in t.valid_shape(r))] for r, b in enumerate(blocks)]


def _correct(case: Case, valid: Sequence[np.ndarray], G: np.ndarray) -> bool:
    from ..runtime.uneven import distribute_chunked
    want = distribute_chunked(G, case.mesh, case.dst)
    return all(np.asarray(a).shape == w.shape and np.array_equal(np.asarray(a), w) for a, w in zip(valid, want))


# ---------------------------------------------------------------------------
# ours, on the simulator's backend


def _measured_backend(n: int):
    """The simulator's backend, recording the largest array any call returns
    and, per communicating call, the most a device receives (elements)."""
    from ..runtime.simulator import SimBackend

    class Measured(SimBackend):
        def __init__(self):
            super().__init__(n, pad=0)
            self.peak, self.received, self.calls = 0, 0, 0

        def _note(self, ys, moved: bool):
            self.peak = max(self.peak, max(y.size for y in ys))
            if moved:
                self.calls += 1
                self.received += int(self.last_received.max()) // ys[0].itemsize
            return ys

        def all_gather(self, xs, dim, group):
            return self._note(super().all_gather(xs, dim, group), True)

        def all_to_all(self, xs, src_dim, dst_dim, group):
            return self._note(super().all_to_all(xs, src_dim, dst_dim, group), True)

        def all_permute(self, xs, sources):
            return self._note(super().all_permute(xs, sources), True)

        def dyn_slice(self, xs, dim, group):
            return self._note(super().dyn_slice(xs, dim, group), False)

        def fit(self, xs, dim, n_):
            return self._note(super().fit(xs, dim, n_), False)

    return Measured()


def _ours(case: Case, G: np.ndarray) -> UnevenResult:
    from ..plan import plan
    from ..runtime.backend import execute
    from ..runtime.uneven import distribute_padded
    p = plan(case.mesh, case.src, case.dst)
    b = _measured_backend(case.mesh.num_devices)
    xs = distribute_padded(G, case.mesh, case.src, pad=0)
    b.peak = case.src.size
    ys = execute(p, xs, b)
    ok = _correct(case, _valid(ys, case.dst), G)
    extra = {"type_peak": p.peak, "checker_traffic": p.traffic, "steps": len(p.steps)}
    return UnevenResult("ours", "correct" if ok else "wrong_data", "", tuple(map(str, p.collectives)),
                        b.peak, b.received, b.calls, extra)


# ---------------------------------------------------------------------------
# XLA: our plan through verishard.jax.reshard, and XLA's own reshard


def _padded_global(G: np.ndarray, t: ArrayType) -> np.ndarray:
    from ..jax.backend import padded_global_shape
    out = np.zeros(padded_global_shape(t), dtype=G.dtype)
    out[tuple(slice(0, g) for g in G.shape)] = G
    return out


def _program(case: Case, ours: bool):
    """The jitted program from the padded source array to the padded target
    array, with our reshard or XLA's in the middle; returns it, the JAX mesh
    and the input and output shardings."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import NamedSharding

    from .. import jax as vj
    from ..jax.backend import padded_global_shape
    jm = vj.jax_mesh(case.mesh)  # Auto axes: JAX's only home for uneven shardings
    s, d = vj.to_partition_spec(case.src), vj.to_partition_spec(case.dst)
    shape = case.src.global_shape
    pad_to = padded_global_shape(case.dst)

    def f(v):
        u = lax.with_sharding_constraint(lax.slice(v, (0,) * v.ndim, shape), NamedSharding(jm, s))
        if ours:
            y = vj.reshard(u, NamedSharding(jm, d), src=s)
        else:
            y = lax.with_sharding_constraint(u, NamedSharding(jm, d))
        return jnp.pad(y, [(0, a - g) for a, g in zip(pad_to, shape)])

    return jax.jit(f, out_shardings=NamedSharding(jm, d)), jm, NamedSharding(jm, s), NamedSharding(jm, d)


def _plan_steps(case: Case) -> dict[str, int]:
    """The plan's communicating steps by HLO opcode."""
    from ..plan import plan
    from ..runtime.backend import step_call
    p = plan(case.mesh, case.src, case.dst)
    kind = {"all_gather": "all-gather", "all_to_all": "all-to-all", "all_permute": "collective-permute"}
    out: dict[str, int] = {}
    t = p.src
    for s in p.steps:
        call = step_call(p.mesh, t, s.collective)
        if call is not None and call[0] in kind:
            out[kind[call[0]]] = out.get(kind[call[0]], 0) + 1
        t = s.type
    return out


def _xla(case: Case, G: np.ndarray, ours: bool) -> UnevenResult:
    import jax

    from .hlo import HloError, Interpreter, parse_module
    from .xla import REMAT_PATTERN, _CaptureStderr
    from ..runtime.uneven import distribute_padded
    name = "ours-jax" if ours else "xla"
    try:
        fn, jm, s_sh, d_sh = _program(case, ours)
        Gp = _padded_global(G, case.src)
        with _CaptureStderr() as cap:
            compiled = fn.lower(jax.ShapeDtypeStruct(Gp.shape, np.float32, sharding=s_sh)).compile()
    except Exception as e:  # JAX, XLA or reshard refused the case
        return UnevenResult(name, "unsupported", f"refused: {type(e).__name__}: {str(e)[:200]}")
    text = compiled.as_text()
    extra: dict[str, Any] = {"remat_warnings": len(REMAT_PATTERN.findall(cap.text))}
    module = parse_module(text)
    opcodes = [i.opcode.replace("-start", "") for i in module.collectives()]
    hlo: dict[str, int] = {}
    for op in opcodes:
        hlo[op] = hlo.get(op, 0) + 1
    extra["hlo_collectives"] = hlo
    if ours:
        extra["hlo_matches_plan"] = hlo == _plan_steps(case)
    # XLA's own run on the devices, on the float32 values (exact below 2**24)
    y = compiled(jax.device_put(Gp.astype(np.float32), s_sh))
    order = {dev.id: r for r, dev in enumerate(d_sh.mesh.devices.flat)}
    got: list = [None] * case.mesh.num_devices
    for shard in y.addressable_shards:
        got[order[shard.device.id]] = np.asarray(shard.data).astype(np.int64)
    ok_devices = _correct(case, _valid(got, case.dst), G)
    try:
        run = Interpreter(module, case.mesh.num_devices).run([distribute_padded(G, case.mesh, case.src, pad=0)])
    except (HloError, KeyError, ValueError, IndexError) as e:
        return UnevenResult(name, "correct" if ok_devices else "wrong_data",
                            f"judged by XLA's run only (the HLO interpreter cannot run it: {e})",
                            collectives=len(opcodes), extra=extra)
    ok = _correct(case, _valid(run.outputs, case.dst), G)
    program = tuple(f"{ev.opcode} %{ev.name}" for ev in run.collectives)
    received = sum(int(ev.received.max()) for ev in run.collectives)
    moved = sum(1 for ev in run.collectives if ev.received.max() > 0)
    if ok != ok_devices:
        return UnevenResult(name, "error", "the HLO interpreter disagrees with XLA's own run", program,
                            run.peak_elements, received, moved, extra)
    return UnevenResult(name, "correct" if ok else "wrong_data", "", program, run.peak_elements, received,
                        moved, extra)


# ---------------------------------------------------------------------------
# DTensor


def _dtensor_buffers(info: Any, kind: str, before: np.ndarray, after: np.ndarray, n: int) -> tuple[int, int]:
    """DTensor's largest buffer and the elements it receives for one transform
    on one device: it pads every chunk to ``c = ceil(L / n)`` (``L`` the
    logical size at that mesh dimension) before an all-gather or all-to-all
    and exchanges whole padded chunks."""
    a, b = info.src_dst_placements
    if kind == "all-gather":
        d = a.dim
        c = -(-after.shape[d] // n)
        rest = prod(s for i, s in enumerate(before.shape) if i != d)
        return n * c * rest, (n - 1) * c * rest
    if kind == "all-to-all":
        da, db = a.dim, b.dim
        ca, cb = -(-after.shape[da] // n), -(-before.shape[db] // n)
        rest = prod(s for i, s in enumerate(before.shape) if i not in (da, db))
        return n * ca * cb * rest, (n - 1) * ca * cb * rest
    return after.size, 0


def _dtensor(case: Case, G: np.ndarray, min_cost: bool) -> UnevenResult:
    from ..torch.dtensor import UnsupportedLayout
    from ..runtime.uneven import distribute_chunked
    from ..torch.dtensor import describe_transform
    from .torch_dtensor import dtensor_transforms, replay
    name = "dtensor-mincost" if min_cost else "dtensor-greedy"
    try:
        infos, _ = dtensor_transforms(case.mesh, case.src, case.dst, min_cost)
    except UnsupportedLayout as e:
        return UnevenResult(name, "unsupported", f"DTensor's layout is not the type's: {e}")
    except Exception as e:  # the planner refused
        return UnevenResult(name, "unsupported", f"DTensor's planner refused: {type(e).__name__}: {e}")
    xs = distribute_chunked(G, case.mesh, case.src)
    peak = max(x.size for x in xs)
    received, moved, program = 0, 0, []
    for info in infos:
        step = replay(case.mesh, info, xs)
        if step is None:
            continue
        kind, new, _ = step
        program.append(describe_transform(info))
        if kind == "unsupported":
            return UnevenResult(name, "unsupported", f"transform {describe_transform(info)} is not modelled",
                                tuple(program))
        dims = tuple(getattr(info, "original_mesh_dims", None) or (info.mesh_dim,))
        size = prod(case.mesh.axis_sizes[d] for d in dims)
        cost = [_dtensor_buffers(info, kind, x, y, size) for x, y in zip(xs, new)]
        peak = max(peak, max(c[0] for c in cost), max(y.size for y in new))
        if kind != "local":
            moved += 1
            received += max(c[1] for c in cost)
        xs = new
    ok = _correct(case, xs, G)
    return UnevenResult(name, "correct" if ok else "wrong_data", "", tuple(program), peak, received, moved)


def run_uneven(case: Case, planners: Sequence[str] = PLANNERS) -> list[UnevenResult]:
    """Every planner on one case.

    >>> m = Mesh.parse("x=2")
    >>> c = Case(m, ArrayType.parse("[2{x}3]", m), ArrayType.parse("[3]", m))
    >>> r, = run_uneven(c, ("ours",))
    >>> r.status, r.program, r.peak, c.bound, r.extra["type_peak"], r.received
    ('correct', ('AllGather(0, x)',), 4, 3, 3, 2)
    """
    from .trace import global_values
    G = global_values(case.src.global_shape)
    out = []
    for name in planners:
        try:
            if name == "ours":
                out.append(_ours(case, G))
            elif name in ("ours-jax", "xla"):
                out.append(_xla(case, G, name == "ours-jax"))
            elif name in ("dtensor-greedy", "dtensor-mincost"):
                out.append(_dtensor(case, G, name == "dtensor-mincost"))
            else:
                raise ValueError(f"unknown planner {name!r}; known: {', '.join(PLANNERS)}")
        except (VerishardError, RuntimeError) as e:
            out.append(UnevenResult(name, "error", f"{type(e).__name__}: {e}"))
    return out
