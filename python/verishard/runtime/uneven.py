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
valid position. :func:`~verishard.runtime.distribute`,
:func:`~verishard.runtime.assemble` and
:func:`~verishard.runtime.simulate` take uneven types (``layout="padded"``,
the default, or ``"chunked"``); this module keeps the older names as thin
aliases. ``tests/test_uneven.py`` checks the padded steps against the
extracted movement (``core.umovement``) and numpy.

>>> import numpy as np
>>> from verishard import plan
>>> from verishard.runtime import assemble, distribute, simulate
>>> p = plan("x=2,y=2", "[3{x}5]", "[3{y}5]")
>>> xs = distribute(np.arange(5), p.mesh, p.src, pad=-1)
>>> [x.tolist() for x in xs]
[[0, 1, 2], [0, 1, 2], [3, 4, -1], [3, 4, -1]]
>>> ys = simulate(p, xs, pad=-1).outputs
>>> [y.tolist() for y in ys]
[[0, 1, 2], [3, 4, -1], [0, 1, 2], [3, 4, -1]]
>>> assemble(ys, p.mesh, p.dst).tolist()
[0, 1, 2, 3, 4]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..mesh import Mesh
from ..plan import Plan
from .backend import run_step, step_call
from .layout import assemble, distribute, to_chunked, to_padded
from .simulator import SimBackend, simulate

# The functions below are thin aliases kept for existing callers: distribute, assemble and simulate
# take every kind of type, the convention chosen by layout= ("padded" or "chunked").


def distribute_padded(global_array, mesh: Mesh | str, t, pad) -> list[np.ndarray]:
    """``distribute(global_array, mesh, t, pad=pad)``: every rank's padded buffer
    (shape ``t.local_shape``), its valid part from the array, ``pad`` elsewhere (``Uneven.ulocal``).

    >>> [x.tolist() for x in distribute_padded(np.arange(3), "x=2", "[2{x}3]", pad=9)]
    [[0, 1], [2, 9]]
    """
    return distribute(global_array, mesh, t, layout="padded", pad=pad)


def distribute_chunked(global_array, mesh: Mesh | str, t) -> list[np.ndarray]:
    """``distribute(global_array, mesh, t, layout="chunked")``: every rank's chunked
    buffer (``torch.chunk``), exactly its valid part.

    >>> [x.tolist() for x in distribute_chunked(np.arange(5), "x=4", "[2{x}5]")]
    [[0, 1], [2, 3], [4], []]
    """
    return distribute(global_array, mesh, t, layout="chunked")


def assemble_padded(locals_: Sequence[np.ndarray], mesh: Mesh | str, t) -> np.ndarray:
    """``assemble(locals_, mesh, t)``: the global array from every rank's padded
    buffer, reading valid positions only.

    >>> assemble_padded([np.array([0, 1]), np.array([2, -1])], "x=2", "[2{x}3]").tolist()
    [0, 1, 2]
    """
    return assemble([np.asarray(x) for x in locals_], mesh, t)


def _step(mesh: Mesh, t, c, t2, xs: list[np.ndarray], pad) -> list[np.ndarray]:
    """One step of an uneven plan on every device's padded buffer: the shared
    executor's padded step (``backend.run_step``) on the simulator's backend."""
    call = step_call(mesh, t, c)
    if call is None:
        return list(xs)
    return run_step(SimBackend(mesh.num_devices, pad), call, xs, t, t2)


def simulate_uneven(plan: Plan, locals_: Sequence[np.ndarray], pad) -> list[np.ndarray]:
    """``simulate(plan, locals_, pad=pad, check=False).outputs``: an uneven plan on
    every rank's padded buffer, ``pad`` written where a step creates padding.

    >>> from verishard import plan
    >>> p = plan("x=2", "[3{x}5]", "[5]")
    >>> [y.tolist() for y in simulate_uneven(p, distribute_padded(np.arange(5), p.mesh, p.src, 0), 0)]
    [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
    """
    return simulate(plan, [np.asarray(x) for x in locals_], check=False, pad=pad).outputs


def simulate_chunked(plan: Plan, chunks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``simulate(plan, chunks, layout="chunked", check=False).outputs``: an uneven
    plan on chunked (``torch.chunk``) buffers, run padded as ``Ucheckerproof.ucheck_correct_chunked`` says.

    >>> from verishard import plan
    >>> p = plan("x=4", "[2{x}5]", "[5]")
    >>> [y.tolist() for y in simulate_chunked(p, distribute_chunked(np.arange(5), p.mesh, p.src))][3]
    [0, 1, 2, 3, 4]
    """
    return simulate(plan, [np.asarray(c) for c in chunks], check=False, layout="chunked").outputs


__all__ = ["simulate_chunked", "distribute_padded", "distribute_chunked", "to_padded", "to_chunked", "assemble_padded",
           "simulate_uneven"]
