"""Chunked execution on JAX: the schedule of :mod:`verishard.runtime.chunked`
inside ``jax.shard_map``, with the source buffer donated to the jitted call.

Between steps the array is held as its list of ``k`` pieces when the next
step cuts it the same way (same chunk range and ``k``), so a piece's buffer
is dead, and XLA may reuse it, as soon as the next step has consumed it;
otherwise the pieces are concatenated and cut again. Every piece runs the
step's own collective (:class:`verishard.jax.backend.JaxBackend`), so the
result is the unchunked plan's (``Chunkproof.chunk_decompose``); the memory
XLA really uses is what its buffer assignment makes of this program
(``compiled.memory_analysis()``; see ``bench/jax_memory.py``).

>>> from verishard import plan
>>> from verishard.jax.sharding import jax_mesh, to_named_sharding
>>> p = plan("x=2", "[8{x}16, 4]", "[16, 2{x}4]")
>>> x = jax.device_put(jnp.arange(64.0).reshape(16, 4), to_named_sharding(p.src, jax_mesh(p.mesh)))
>>> y, rep = execute(p, x, chunks=4)
>>> bool((y == jnp.arange(64.0).reshape(16, 4)).all()), rep.ks
(True, (4,))
"""

from __future__ import annotations

import functools

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding

from .sharding import to_partition_spec
from ..plan import Plan
from ..runtime.backend import step_call, validate_plan
from ..runtime.chunked import ChunkReport, StepChunks, choose_k, chunk_geometry, default_budget, refined_bound
from .backend import JaxBackend, compile_plan, rewrap

__all__ = ["schedule", "compile_chunked", "execute"]


# Steps run whole whatever the budget: a slice moves nothing and XLA keeps it a
# view; an all-gather's input is the smaller end and XLA writes its output
# whole, so its pieces would only add their concatenation (measured: 2.5x the
# bound chunked against 1.75x whole, bench/results/jax_memory.md).
_WHOLE = ("dyn_slice", "all_gather")


def schedule(plan: Plan, itemsize: int, budget_bytes: int | None = None, chunks: int | None = None) -> ChunkReport:
    """The pieces of every step (the host-side part, as the numpy runtime chooses them; source donated)."""
    bound = plan.peak * itemsize
    budget = default_budget(bound) if budget_bytes is None else int(budget_bytes)
    t, out = plan.src, []
    for i, step in enumerate(plan.steps, 1):
        call = step_call(plan.mesh, t, step.collective, plan.reduce)
        in_b, out_b = t.size * itemsize, step.type.size * itemsize
        if call is None:
            out.append(StepChunks(i, None, 1, 1, in_b, in_b, False, in_b, in_b))
        else:
            R, G_in, _ = chunk_geometry(t.local_shape, step.type.local_shape)
            k = 1 if call[0] in _WHOLE else choose_k(in_b, out_b, R, G_in, budget, chunks)
            ref = refined_bound(in_b, out_b, k, G_in > 1 and k > 1)
            out.append(StepChunks(i, call[0], k, R, in_b, out_b, G_in > 1 and k > 1, ref, ref))
        t = step.type
    return ChunkReport(bound, budget, tuple(out))


class _Pieces:
    """An array held as ``k`` pieces: piece ``p`` is rows ``g*R + [p*w, p*w + w)``, ``g < G``, in ``(g, r)`` order."""

    def __init__(self, pieces, G, R, k):
        self.pieces, self.G, self.R, self.k = pieces, G, R, k

    def whole(self):
        rest = self.pieces[0].shape[1:]
        w = self.R // self.k
        parts = [p.reshape((self.G, w) + rest) for p in self.pieces]
        return jnp.concatenate(parts, axis=1).reshape((self.G * self.R,) + rest)


def _cut(x, G, R, k):
    if isinstance(x, _Pieces):
        if (x.G, x.R, x.k) == (G, R, k):
            return x.pieces
        x = x.whole()
    w = R // k
    rest = x.shape[1:]
    v = x.reshape((G, R) + rest)
    return [v[:, p * w:(p + 1) * w].reshape((G * w,) + rest) for p in range(k)]


def _whole(x):
    return x.whole() if isinstance(x, _Pieces) else x


def _in_place(fn, args, x, k):
    """A step that keeps the local shape (a permute: ``chunk_geometry`` gives
    one group, ``R`` the leading dimension), piece ``p`` of the leading
    dimension written back where it was read: its output piece occupies the
    input piece's rows, so
    XLA updates the donated buffer in place and holds two pieces besides it.
    Used where the step's input is one buffer (the source, or a step's whole
    result), not the previous step's pieces, which would first be joined.
    (Any reshape on the way, even a bitcast, makes XLA copy the whole buffer,
    which is why steps that change the local shape keep their pieces apart.)"""
    w = x.shape[0] // k
    rest = (0,) * (x.ndim - 1)
    for p in range(k):
        piece = lax.dynamic_slice(x, (p * w,) + rest, (w,) + x.shape[1:])
        x = lax.dynamic_update_slice(x, fn(piece, *args), (p * w,) + rest)
    return x


@functools.lru_cache(maxsize=256)
def _compiled(plan: Plan, jm, ks: tuple[int, ...], donate: bool):
    in_spec = to_partition_spec(plan.src, parts=True)
    out_spec = to_partition_spec(plan.dst, parts=True)
    backend = JaxBackend(plan.mesh)

    def body(x):
        t, val = plan.src, x
        for step, k in zip(plan.steps, ks):
            call = step_call(plan.mesh, t, step.collective, plan.reduce)
            if call is not None:
                name, args = call
                fn = getattr(backend, name)
                if k <= 1:
                    val = fn(_whole(val), *args)
                elif t.local_shape == step.type.local_shape and not isinstance(val, _Pieces):
                    val = _in_place(fn, args, val, k)
                else:
                    R, G_in, G_out = chunk_geometry(t.local_shape, step.type.local_shape)
                    val = _Pieces([fn(p, *args) for p in _cut(val, G_in, R, k)], G_out, R, k)
            t = step.type
        return _whole(val)

    f = jax.shard_map(body, mesh=jm, in_specs=in_spec, out_specs=out_spec, check_vma=False)
    return jax.jit(f, donate_argnums=(0,) if donate else ())


def compile_chunked(plan: Plan, itemsize: int, mesh=None, budget_bytes: int | None = None,
                    chunks: int | None = None, donate: bool = True):
    """``(fn, jax_mesh, report)``: the jitted chunked plan (source donated by default)."""
    rep = schedule(plan, itemsize, budget_bytes, chunks)
    _, jm = compile_plan(plan, mesh)
    return _compiled(plan, jm, rep.ks, donate), jm, rep


def execute(plan: Plan, x, mesh=None, budget_bytes: int | None = None, chunks: int | None = None,
            donate: bool = False, check: bool = True):
    """Run ``plan`` chunked on ``x`` (laid out as ``plan.src``); returns ``(y, report)``.
    ``donate``: hand ``x``'s buffers to the call (``x`` is unusable afterwards)."""
    if check:
        plan = validate_plan(plan)
    if mesh is None:
        sh = getattr(x, "sharding", None)
        mesh = sh.mesh if isinstance(sh, NamedSharding) else None
    itemsize = np.dtype(x.dtype).itemsize
    fn, jm, rep = compile_chunked(plan, itemsize, mesh, budget_bytes, chunks, donate)
    src_sh = NamedSharding(jm, to_partition_spec(plan.src, parts=True))
    x = jax.device_put(x, src_sh) if not isinstance(x, jax.Array) else rewrap(x, src_sh)
    return rewrap(fn(x), NamedSharding(jm, to_partition_spec(plan.dst, parts=True))), rep
