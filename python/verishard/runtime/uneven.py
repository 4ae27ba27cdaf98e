"""Uneven dimensions: layout and simulation on padded and chunked buffers.

A dimension of global size ``g`` sharded into ``n`` blocks (``n`` not
dividing ``g``) has blocks of ``c = ceil(g / n)``: block ``b`` covers the
global indices ``[b c, min(g, (b+1) c))`` (``coq/theories/Uneven.v``). The
padded convention (JAX) gives every device a buffer of ``c`` (the type's
``local_shape``), padding at the end; the chunked one (``torch.chunk``) only
the valid part (``ArrayType.valid_shape(rank)``).

The collectives run on padded buffers exactly as ``Uneven.usource`` (and,
for permutes, ``Uchecker.usrc``) say, each as an even collective between a
pad and a truncation (the shared executor's ``backend.run_step``, so every
backend with a ``fit`` method runs uneven plans the same way):

- ``AllGather(d, xs)``: concatenate the group's padded blocks along ``d``
  (``N * c_in``, the gather's concatenation buffer) and keep the first ``c_out``;
- ``DynSlice(d, xs)``: pad the buffer along ``d`` to ``N * c_out`` and keep
  piece ``k`` (the group index);
- ``AllToAll(d, e, xs)``: pad along ``e`` to ``N * c_out_e``, exchange the
  pieces, concatenate along ``d`` and keep the first ``c_out_d``;
- ``AllPermute``: whole buffers, from the device ``Permute.perm_src`` names.

Plans come from ``Upipeline.uplan_problem`` (``verishard.plan`` on uneven
types); ``Ucheckerproof.ucheck_correct`` proves that no padding reaches a
valid position. This module is in the trust base: ``tests/test_uneven.py``
checks it against the extracted movement (``core.umovement``) and numpy.

>>> import numpy as np
>>> from verishard import plan
>>> p = plan("x=2,y=2", "[3{x}5]", "[3{y}5]")
>>> xs = distribute_padded(np.arange(5), p.mesh, p.src, pad=-1)
>>> [x.tolist() for x in xs]
[[0, 1, 2], [0, 1, 2], [3, 4, -1], [3, 4, -1]]
>>> ys = simulate_uneven(p, xs, pad=-1)
>>> [y.tolist() for y in ys]
[[0, 1, 2], [3, 4, -1], [0, 1, 2], [3, 4, -1]]
>>> assemble_padded(ys, p.mesh, p.dst).tolist()
[0, 1, 2, 3, 4]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ShardingError
from ..mesh import Mesh
from ..plan import Plan
from .backend import RedistributionError, execute, run_step, step_call, validate_plan
from .layout import as_type
from .simulator import SimBackend


def _valid_box(t, rank: int) -> tuple[slice, ...]:
    return tuple(slice(s, s + v) for s, v in zip(t.block_starts(rank), t.valid_shape(rank)))


def _local_box(t, rank: int) -> tuple[slice, ...]:
    return tuple(slice(0, v) for v in t.valid_shape(rank))


def _global(A, t) -> np.ndarray:
    A = np.asarray(A)
    if A.shape != t.global_shape:
        raise ShardingError(f"global array has shape {A.shape}, but {t} has global shape {t.global_shape}")
    return A


def distribute_padded(global_array, mesh: Mesh | str, t, pad) -> list[np.ndarray]:
    """Every rank's padded buffer (shape ``t.local_shape``): its valid part
    from the array, ``pad`` elsewhere (``Uneven.ulocal``).

    >>> [x.tolist() for x in distribute_padded(np.arange(3), "x=2", "[2{x}3]", pad=9)]
    [[0, 1], [2, 9]]
    """
    t = as_type(t, mesh)
    A = _global(global_array, t)
    out = []
    for r in range(t.mesh.num_devices):
        x = np.full(t.local_shape, pad, dtype=np.result_type(A.dtype, np.asarray(pad).dtype))
        x[_local_box(t, r)] = A[_valid_box(t, r)]
        out.append(x)
    return out


def distribute_chunked(global_array, mesh: Mesh | str, t) -> list[np.ndarray]:
    """Every rank's chunked buffer (``torch.chunk``): exactly its valid part.

    >>> [x.tolist() for x in distribute_chunked(np.arange(5), "x=4", "[2{x}5]")]
    [[0, 1], [2, 3], [4], []]
    """
    t = as_type(t, mesh)
    A = _global(global_array, t)
    return [np.array(A[_valid_box(t, r)], order="C", copy=True) for r in range(t.mesh.num_devices)]


def to_padded(chunks: Sequence[np.ndarray], t, pad) -> list[np.ndarray]:
    """Chunked buffers padded to ``t.local_shape`` with ``pad``.

    >>> from verishard import ArrayType
    >>> t = ArrayType.parse("[2{x}3]", "x=2")
    >>> [x.tolist() for x in to_padded([np.array([0, 1]), np.array([2])], t, pad=-1)]
    [[0, 1], [2, -1]]
    """
    out = []
    for r, c in enumerate(chunks):
        if c.shape != t.valid_shape(r):
            raise ShardingError(f"rank {r}'s chunk has shape {c.shape}, not {t.valid_shape(r)} as {t} says")
        x = np.full(t.local_shape, pad, dtype=np.result_type(c.dtype, np.asarray(pad).dtype))
        x[_local_box(t, r)] = c
        out.append(x)
    return out


def to_chunked(padded: Sequence[np.ndarray], t) -> list[np.ndarray]:
    """The valid parts of padded buffers (the chunked buffers).

    >>> from verishard import ArrayType
    >>> t = ArrayType.parse("[2{x}3]", "x=2")
    >>> [x.tolist() for x in to_chunked([np.array([0, 1]), np.array([2, -1])], t)]
    [[0, 1], [2]]
    """
    return [np.array(x[_local_box(t, r)], order="C", copy=True) for r, x in enumerate(padded)]


def assemble_padded(locals_: Sequence[np.ndarray], mesh: Mesh | str, t) -> np.ndarray:
    """The global array from every rank's padded buffer, reading valid
    positions only; raises ``RedistributionError`` if two ranks disagree on
    an element or some element is held by none.

    >>> assemble_padded([np.array([0, 1]), np.array([2, -1])], "x=2", "[2{x}3]").tolist()
    [0, 1, 2]
    """
    t = as_type(t, mesh)
    if len(locals_) != t.mesh.num_devices:
        raise ShardingError(f"{len(locals_)} local arrays for {t.mesh.num_devices} devices")
    out = np.empty(t.global_shape, dtype=np.asarray(locals_[0]).dtype)
    seen = np.zeros(t.global_shape, dtype=bool)
    for r, x in enumerate(locals_):
        x = np.asarray(x)
        if x.shape != t.local_shape:
            raise ShardingError(f"rank {r}'s buffer has shape {x.shape}, not {t.local_shape} as {t} says")
        box, v = _valid_box(t, r), x[_local_box(t, r)]
        both = seen[box]
        if np.any(both) and not np.array_equal(out[box][both], v[both]):
            raise RedistributionError(f"rank {r} disagrees with another rank on elements of {t}")
        out[box] = v
        seen[box] = True
    if not seen.all():
        raise RedistributionError(f"some elements of {t} are held by no rank")
    return out


# --- padded collectives over every device's buffer ------------------------------

def _step(mesh: Mesh, t, c, t2, xs: list[np.ndarray], pad) -> list[np.ndarray]:
    """One step of an uneven plan on every device's padded buffer: the shared
    executor's padded step (``backend.run_step``) on the simulator's backend."""
    call = step_call(mesh, t, c)
    if call is None:
        return list(xs)
    return run_step(SimBackend(mesh.num_devices, pad), call, xs, t, t2)


def simulate_uneven(plan: Plan, locals_: Sequence[np.ndarray], pad) -> list[np.ndarray]:
    """Run an uneven plan (``plan.uneven``) on every rank's padded buffer
    (``distribute_padded``), writing ``pad`` where a step creates padding.
    Returns every rank's padded target buffer.

    >>> from verishard import plan
    >>> p = plan("x=2", "[3{x}5]", "[5]")
    >>> [y.tolist() for y in simulate_uneven(p, distribute_padded(np.arange(5), p.mesh, p.src, 0), 0)]
    [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
    """
    plan = validate_plan(plan)
    mesh = plan.mesh
    xs = [np.asarray(x) for x in locals_]
    if len(xs) != mesh.num_devices:
        raise ShardingError(f"{len(xs)} local arrays for {mesh.num_devices} devices")
    for r, x in enumerate(xs):
        if x.shape != plan.src.local_shape:
            raise ShardingError(f"rank {r}'s buffer has shape {x.shape}, not {plan.src.local_shape} "
                                f"as {plan.src} says (padded buffers: distribute_padded)")
    return execute(plan, xs, SimBackend(mesh.num_devices, pad))


def simulate_chunked(plan: Plan, chunks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run an uneven plan on chunked (``torch.chunk``) buffers, the way the
    chunked convention runs (``Ucheckerproof.ucheck_correct_chunked``): pad
    every chunk to the block size, run the padded plan, keep the valid parts.

    >>> from verishard import plan
    >>> p = plan("x=4", "[2{x}5]", "[5]")
    >>> [y.tolist() for y in simulate_chunked(p, distribute_chunked(np.arange(5), p.mesh, p.src))][3]
    [0, 1, 2, 3, 4]
    """
    plan = validate_plan(plan)
    chunks = [np.asarray(c) for c in chunks]
    pad = np.zeros((), dtype=chunks[0].dtype)[()] if chunks else 0
    return to_chunked(simulate_uneven(plan, to_padded(chunks, plan.src, pad), pad), plan.dst)


__all__ = ["simulate_chunked", "distribute_padded", "distribute_chunked", "to_padded", "to_chunked", "assemble_padded",
           "simulate_uneven"]
