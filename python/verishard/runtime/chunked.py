"""Chunked execution: every communicating step in ``k`` pieces, so that a
step holds about ``max(in, out) + in_or_out / k`` instead of ``in + out``.

The schedule (``coq/theories/Chunk.v``, proofs in ``Chunkproof.v``)
-------------------------------------------------------------------

A step takes a local array of shape ``S_in`` to one of shape ``S_out``.
Its **chunk range** along dimension 0 is ``R = min(S_in[0], S_out[0])``;
both extents are multiples of ``R`` (``G_in = S_in[0] / R`` and
``G_out = S_out[0] / R``: a gather or an all-to-all *into* dimension 0
multiplies it by the group size, a slice or an all-to-all *out of*
dimension 0 divides it, every other step keeps it). The **chunk
coordinate** of a position along dimension 0 is its index modulo ``R``.
With ``k`` dividing ``R``, piece ``p`` is the set of positions whose chunk
coordinate lies in ``[p*R/k, (p+1)*R/k)``: in the input the rows
``g*R + r`` (``g < G_in``), in the output the rows ``g*R + r``
(``g < G_out``).

``Chunkproof.chunk_source_coord`` proves that for every well-typed step and
every output position, the position ``Semantics.source`` reads has the same
chunk coordinate (along any dimension, not only 0); so
``Chunkproof.chunk_decompose`` holds: every output position is written by
exactly one piece, the piece that holds the input position it comes from.
Running the step's own collective on each piece's rows (stacked in ``(g, r)``
order) therefore computes exactly the unchunked step: the executor below does
that with the backend's unchanged methods.

Memory
------

A step runs piece after piece; after piece ``p`` its input rows are released
(``MADV_DONTNEED`` on the pages of an array the runtime owns: an earlier
step's output or a donated source that owns its memory) and its output rows
are written into the step's output buffer, which is allocated lazily (an
anonymous mapping whose pages become resident only when written: on MPI
each piece's pages are made resident in one call just before the piece is
received, and a piece that is one run of at least 16 MiB gets transparent
huge pages; taking a fault per 4 KiB page inside the collective had doubled
the chunked step's time). While
piece ``p`` runs the step holds the input pieces ``p..k-1``, the output
pieces ``0..p``, the piece's result before it is copied (``out / k``) and,
when the piece's input rows are not contiguous (``G_in > 1``), their
packed copy (``in / k``). ``Chunkproof.held_bound`` proves the first two
terms are at most ``max(in, out) + min(in, out) / k``; the runtime reports
per step ``refined = max(in, out) + (min(in, out) + out + [in if packed]) / k``
and its accounting (``held``) never exceeds it.

``k`` is chosen per step from a budget (bytes per device): the smallest
divisor of ``R`` that keeps ``refined`` within the budget; the default
budget is ``bound + max(bound / 8, MIN_EXTRA)`` with ``bound`` the plan's
type-level peak ``max size(t_i)`` (in bytes).
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..plan import Plan, Step
from ..sharding import ArrayType
from .backend import Backend, Donated, require_methods, step_call

MIN_EXTRA = 1 << 20      # default: never aim for less than 1 MiB of extra memory per step
LAZY_BYTES = 1 << 20     # outputs at least this large are anonymous mappings (pages resident when written)
HUGE_PAGE = 2 << 20      # a transparent huge page (x86-64)

__all__ = ["StepChunks", "ChunkReport", "chunk_geometry", "refined_bound", "choose_k", "default_budget",
           "execute_chunked", "ArrayOps", "ListOps", "MPIArrayOps", "lazy_empty", "release_rows", "MIN_EXTRA"]


@dataclass(frozen=True)
class StepChunks:
    """How one step ran (sizes in bytes, per device; the largest over devices).

    ``refined`` is the bound the construction guarantees for this step,
    ``held`` the runtime's accounting of the most it held at once.
    """

    index: int
    call: str | None      # backend method, None for a step that moves nothing
    k: int                # pieces
    R: int                # chunk range along dimension 0
    in_bytes: int
    out_bytes: int
    packed: bool          # the pieces' input rows are strided (G_in > 1) and packed
    refined: int
    held: int


@dataclass(frozen=True)
class ChunkReport:
    """Which memory bound applied to a chunked run.

    ``bound`` is the type-level bound of the plan (``max size(t_i)``, bytes),
    ``budget`` the per-device budget ``k`` was chosen for, ``refined`` the
    largest per-step refined bound, ``held`` the largest accounting figure,
    ``budget_met`` whether every step's refined bound is within the budget.
    """

    bound: int
    budget: int
    steps: tuple[StepChunks, ...]

    @property
    def refined(self) -> int:
        return max([self.bound] + [s.refined for s in self.steps])

    @property
    def held(self) -> int:
        return max([0] + [s.held for s in self.steps])

    @property
    def budget_met(self) -> bool:
        return all(s.refined <= self.budget for s in self.steps)

    @property
    def ks(self) -> tuple[int, ...]:
        return tuple(s.k for s in self.steps)

    def __str__(self) -> str:
        lines = [f"chunked: bound {self.bound} B, budget {self.budget} B, refined {self.refined} B, "
                 f"held {self.held} B" + ("" if self.budget_met else " (budget not met)")]
        for s in self.steps:
            lines.append(f"  step {s.index}: {s.call or '-'} k={s.k} (R={s.R}) in {s.in_bytes} out {s.out_bytes} "
                         f"refined {s.refined} held {s.held}")
        return "\n".join(lines)


def chunk_geometry(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``(R, G_in, G_out)`` of a step from its local shapes (module docstring).

    >>> chunk_geometry((4, 6), (16, 6)), chunk_geometry((8, 2), (2, 2)), chunk_geometry((4, 8), (4, 2))
    ((4, 1, 4), (2, 4, 1), (4, 1, 1))
    """
    if not in_shape or not out_shape:
        return 1, 1, 1
    R = min(in_shape[0], out_shape[0])
    if R <= 0 or in_shape[0] % R or out_shape[0] % R:  # pragma: no cover - excluded by the typing rules
        return 1, 1, 1
    return R, in_shape[0] // R, out_shape[0] // R


def refined_bound(in_b: int, out_b: int, k: int, packed: bool, owned: bool = True, direct: bool = False) -> int:
    """The construction's bound for one step (bytes): with the input released
    piece by piece (``owned``) ``max(in, out) + (min(in, out) + out + [in]) / k``,
    else ``in + out + (out + [in]) / k``; ``in + out`` unchunked. ``direct``:
    the pieces move straight from the input buffer into the output buffer (MPI
    datatypes), so no piece result or packed copy is held: ``max + min / k``
    (``Chunkproof.held_refined``)."""
    if k <= 1:
        return in_b + out_b
    extra = 0 if direct else out_b + (in_b if packed else 0)
    if not owned:
        return in_b + out_b + extra // k
    return max(in_b, out_b) + (min(in_b, out_b) + extra) // k


def choose_k(in_b: int, out_b: int, R: int, G_in: int, budget: int, fixed: int | None = None,
             direct: bool = False) -> int:
    """Pieces for a step: ``fixed`` rounded up to a divisor of ``R``, or the
    smallest divisor of ``R`` whose refined bound fits ``budget`` (``R`` when none does).

    >>> choose_k(100, 100, 64, 1, 250), choose_k(800, 800, 64, 1, 900), choose_k(8, 8, 6, 1, 0, fixed=4)
    (1, 16, 6)
    """
    divisors = [d for d in range(1, R + 1) if R % d == 0]
    if fixed is not None:
        return next((d for d in divisors if d >= fixed), R)
    for d in divisors:
        if refined_bound(in_b, out_b, d, G_in > 1 and d > 1, direct=direct) <= budget:
            return d
    return R


def default_budget(bound_bytes: int) -> int:
    """The default per-device budget: the bound plus an eighth of it (at least ``MIN_EXTRA``).

    >>> default_budget(64 << 20) == (64 << 20) + (8 << 20), default_budget(1000) == 1000 + MIN_EXTRA
    (True, True)
    """
    return bound_bytes + max(bound_bytes // 8, MIN_EXTRA)


# ---------------------------------------------------------------------------
# memory helpers


def lazy_empty(shape: tuple[int, ...], dtype: np.dtype, huge: bool = False) -> np.ndarray:
    """An uninitialised C-order array; from ``LAZY_BYTES`` up an anonymous
    mapping, so its pages become resident when written and are returned to
    the system when the array is freed. ``huge``: ask for transparent huge
    pages (``MADV_HUGEPAGE``, where the kernel allows), 512 times fewer page
    faults for a buffer written whole; a buffer written piece by piece keeps
    4 KiB pages, since a huge page becomes resident whole when first touched.

    >>> a = lazy_empty((1024, 1024), np.dtype(np.float32)); a[:] = 1; float(a.sum()), a.flags.c_contiguous
    (1048576.0, True)
    >>> b = lazy_empty((4096, 1024), np.dtype(np.float32), huge=True); b[:] = 2; float(b.sum())
    8388608.0
    """
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if n < LAZY_BYTES or dtype.hasobject:
        return np.empty(shape, dtype=dtype)
    # private: MADV_DONTNEED then really drops the pages (a shared anonymous mapping keeps them)
    buf = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20))
    if huge and n >= 4 * HUGE_PAGE and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buf.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # THP disabled or unsupported: plain pages
            pass
    return np.frombuffer(buf, dtype=dtype, count=n // dtype.itemsize).reshape(shape)


_LIBC = None
_PAGE = mmap.PAGESIZE
MADV_DONTNEED = 4
MADV_POPULATE_WRITE = 23  # Linux 5.14 on; older kernels answer EINVAL and the pages fault in as written


def _madvise(addr: int, length: int, advice: int = MADV_DONTNEED) -> None:
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(None, use_errno=True)
            _LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        except (OSError, AttributeError):  # pragma: no cover - not Linux
            _LIBC = False
    if _LIBC:
        _LIBC.madvise(ctypes.c_void_p(addr), ctypes.c_size_t(length), advice)


def _row_spans(x: np.ndarray, G: int, R: int, a: int, b: int):
    """The address ranges ``[lo, hi)`` of rows ``g*R + [a, b)`` of the
    C-contiguous ``x``, one per group ``g < G``."""
    row = x.nbytes // x.shape[0]
    base = x.__array_interface__["data"][0]
    for g in range(G):
        yield base + (g * R + a) * row, base + (g * R + b) * row


def release_rows(x: np.ndarray, G: int, R: int, a: int, b: int) -> None:
    """Return to the system the whole pages of rows ``g*R + [a, b)`` of ``x``
    (C-contiguous; the caller owns the memory and never reads those rows
    again: they read as zeros or stale data afterwards)."""
    if x.ndim == 0 or x.nbytes < 2 * _PAGE or not x.flags.c_contiguous:
        return
    for lo, hi in _row_spans(x, G, R, a, b):
        lo = -(-lo // _PAGE) * _PAGE
        hi = hi // _PAGE * _PAGE
        if hi > lo:
            _madvise(lo, hi - lo)


def populate_rows(x: np.ndarray, G: int, R: int, a: int, b: int) -> None:
    """Make resident, in one call per group, the pages rows ``g*R + [a, b)`` of
    ``x`` occupy (C-contiguous, lazily allocated), just before a piece is
    written there: a collective that takes a page fault for every fresh page
    it writes ran at half its speed (bench/results/runtime.md). Pages only
    partly inside the rows become resident too: at most two per group.
    What the rows already hold is kept.

    >>> y = lazy_empty((512, 1024), np.dtype(np.float32)); y[:256] = 7
    >>> populate_rows(y, 2, 256, 0, 128); bool((y[:256] == 7).all())
    True
    """
    if x.ndim == 0 or x.nbytes < LAZY_BYTES or not x.flags.c_contiguous:
        return
    for lo, hi in _row_spans(x, G, R, a, b):
        lo = lo // _PAGE * _PAGE
        if hi > lo:
            _madvise(lo, hi - lo, MADV_POPULATE_WRITE)


def release_bytes(x: np.ndarray, lo: int, hi: int) -> None:
    """Return to the system the whole pages of bytes ``[lo, hi)`` of ``x`` (C-contiguous, owned)."""
    if not x.flags.c_contiguous or hi <= lo:
        return
    base = x.__array_interface__["data"][0]
    a, b = -(-(base + lo) // _PAGE) * _PAGE, (base + hi) // _PAGE * _PAGE
    if b > a:
        _madvise(a, b - a)


def _slice_view(x: np.ndarray, dim: int, n: int, k: int) -> np.ndarray | None:
    """Piece ``k`` of ``n`` along ``dim`` as a view when it is contiguous (all leading extents 1)."""
    if int(np.prod(x.shape[:dim], dtype=np.int64)) != 1:
        return None
    l = x.shape[dim] // n
    idx = [slice(None)] * x.ndim
    idx[dim] = slice(k * l, k * l + l)
    return x[tuple(idx)]


def _rows(x, G: int, R: int, a: int, b: int):
    """Rows ``g*R + [a, b)`` of ``x``, ``g < G``, stacked in ``(g, r)`` order (a view when contiguous)."""
    if G == 1:
        return x[a:b]
    v = x.reshape((G, R) + x.shape[1:])[:, a:b]
    return np.ascontiguousarray(v).reshape((G * (b - a),) + x.shape[1:])


def _write_rows(out, G: int, R: int, a: int, b: int, q) -> None:
    if G == 1:
        out[a:b] = q
    else:
        out.reshape((G, R) + out.shape[1:])[:, a:b] = q.reshape((G, b - a) + q.shape[1:])


# ---------------------------------------------------------------------------
# array operations per kind of backend value


class ArrayOps:
    """One device's numpy array (the MPI backend); releases pages of arrays it owns."""

    release = True

    def __init__(self, backend: Backend):
        self.backend = backend

    def can_direct(self, name, args) -> bool:
        return False

    def keeps(self, sources) -> bool:
        r = getattr(self.backend, "rank", None)
        return r is not None and int(sources[r]) == r

    def shape(self, x) -> tuple[int, ...]:
        return x.shape

    def nbytes(self, x) -> int:
        return int(x.nbytes)

    def alloc_like(self, x, shape, huge=False):
        return lazy_empty(shape, x.dtype, huge)

    def rows(self, x, G, R, a, b):
        p = _rows(x, G, R, a, b)
        return p, (int(p.nbytes) if G > 1 else 0)

    def write(self, out, G, R, a, b, q) -> int:
        _write_rows(out, G, R, a, b, q)
        return int(q.nbytes)

    def free(self, x, G, R, a, b) -> None:
        release_rows(x, G, R, a, b)

    def slice_view(self, x, dim, group):
        """This rank's slice as a view of ``x`` (the rest of ``x`` released), or None."""
        v = _slice_view(x, dim, group.size, int(group.index[self.backend.rank]))
        if v is not None and x.nbytes:
            start = v.__array_interface__["data"][0] - x.__array_interface__["data"][0]
            release_bytes(x, 0, start)
            release_bytes(x, start + v.nbytes, x.nbytes)
        return v

    def traffic_start(self):
        return [0, 0]

    def traffic_add(self, acc):
        acc[0] += self.backend.sent
        acc[1] += self.backend.received

    def traffic_end(self, acc):
        self.backend.sent, self.backend.received = acc


class ListOps:
    """Every device's array in one list (the simulator); nothing to release, the accounting is exact."""

    release = False

    def __init__(self, backend: Backend):
        self.backend = backend

    def can_direct(self, name, args) -> bool:
        return False

    def keeps(self, sources) -> bool:
        return False

    def shape(self, xs):
        return xs[0].shape

    def nbytes(self, xs) -> int:
        return max(int(x.nbytes) for x in xs)

    def alloc_like(self, xs, shape, huge=False):
        return [np.empty(shape, dtype=x.dtype) for x in xs]

    def rows(self, xs, G, R, a, b):
        ps = [_rows(x, G, R, a, b) for x in xs]
        return ps, (max(int(p.nbytes) for p in ps) if G > 1 else 0)

    def write(self, outs, G, R, a, b, qs) -> int:
        for o, q in zip(outs, qs):
            _write_rows(o, G, R, a, b, q)
        return max(int(q.nbytes) for q in qs)

    def free(self, xs, G, R, a, b) -> None:
        pass

    def slice_view(self, xs, dim, group):
        vs = [_slice_view(x, dim, group.size, int(group.index[r])) for r, x in enumerate(xs)]
        return None if any(v is None for v in vs) else vs

    def traffic_start(self):
        n = len(self.backend.last_sent)
        return [np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)]

    def traffic_add(self, acc):
        acc[0] = acc[0] + self.backend.last_sent
        acc[1] = acc[1] + self.backend.last_received

    def traffic_end(self, acc):
        self.backend.last_sent, self.backend.last_received = acc


# ---------------------------------------------------------------------------
# the executor


def execute_chunked(plan: Plan, x: Any, backend: Backend, ops, budget_bytes: int | None = None,
                    chunks: int | None = None, itemsize: int = 1, owned: bool = False,
                    on_step: Callable[[int, Step, ArrayType, Any, StepChunks], None] | None = None
                    ) -> tuple[Any, ChunkReport]:
    """Run the (validated) ``plan`` on ``backend`` step by step, each step in
    ``k`` pieces (module docstring); returns the final value and the report.

    ``chunks`` fixes the pieces per step (rounded up to a divisor of the chunk
    range); otherwise ``k`` comes from ``budget_bytes`` (default
    :func:`default_budget`). ``owned``: the source is the runtime's to free
    (a donated array that owns its memory). ``on_step(i, step, t, y, info)``
    is called after every step.

    >>> from verishard import plan
    >>> from verishard.runtime.simulator import SimBackend
    >>> p = plan("x=2", "[4{x}8, 2]", "[8, 2]")
    >>> ys, rep = execute_chunked(p, [np.arange(8).reshape(4, 2), np.arange(8, 16).reshape(4, 2)],
    ...                           SimBackend(2), ListOps(SimBackend(2)), chunks=2, itemsize=8)
    >>> ys[0][:, 0].tolist(), rep.ks
    ([0, 2, 4, 6, 8, 10, 12, 14], (2,))
    """
    require_methods(plan, backend)
    if isinstance(x, Donated):
        x = x.take()
    bound = plan.peak * itemsize
    budget = default_budget(bound) if budget_bytes is None else int(budget_bytes)
    t, op = plan.src, plan.reduce
    infos: list[StepChunks] = []
    for i, step in enumerate(plan.steps, 1):
        call = step_call(plan.mesh, t, step.collective, op)
        in_b = ops.nbytes(x)
        if call is None:
            info = StepChunks(i, None, 1, 1, in_b, in_b, False, in_b, in_b)
            y = x
        else:
            name, args = call
            fn = getattr(backend, name)
            in_shape = ops.shape(x)
            out_shape = step.type.local_shape
            out_b = in_b // max(1, int(np.prod(in_shape, dtype=np.int64))) * int(np.prod(out_shape, dtype=np.int64))
            R, G_in, G_out = chunk_geometry(in_shape, out_shape)
            direct = ops.can_direct(name, args)
            k = choose_k(in_b, out_b, R, G_in, budget, chunks, direct)
            view = ops.slice_view(x, *args) if name == "dyn_slice" and owned else None
            if name == "exchange":  # in pieces along its free dimension, not dimension 0
                y, info = _run_exchange(i, step.collective.dim, args[0], x, backend, ops, in_b, out_b,
                                        budget, chunks, owned)
            elif view is not None:  # a contiguous slice of an array the runtime owns: a view, nothing copied
                y = view
                info = StepChunks(i, name, 1, R, in_b, out_b, False, in_b, in_b)
            elif name == "all_permute" and ops.keeps(args[0]):  # this device keeps its block: nothing to do
                y = x
                info = StepChunks(i, name, k, R, in_b, out_b, False, in_b, in_b)
            elif k > 1 and direct:  # every piece straight from the input buffer into the output buffer
                w = R // k
                # huge pages where a piece is one run of at least 8 of them (at most one
                # beyond it is resident early); else each piece's pages made resident at once
                y = ops.alloc_like(x, out_shape, huge=G_out == 1 and out_b // R * w >= 8 * HUGE_PAGE)
                acc = ops.traffic_start()
                held, written, kept_in = 0, 0, in_b
                for p in range(k):
                    a, b = p * w, p * w + w
                    written += ops.direct(name, args, x, y, G_in, G_out, R, a, b)
                    ops.traffic_add(acc)
                    held = max(held, kept_in + written)
                    if owned:
                        ops.free(x, G_in, R, a, b)
                        kept_in -= in_b // k
                ops.traffic_end(acc)
                info = StepChunks(i, name, k, R, in_b, out_b, False,
                                  refined_bound(in_b, out_b, k, False, owned, direct=True), held)
            elif k <= 1:
                y = fn(x, *args)
                info = StepChunks(i, name, 1, R, in_b, out_b, False, in_b + out_b, in_b + out_b)
            else:
                y = ops.alloc_like(x, out_shape)
                w = R // k
                acc = ops.traffic_start()
                held = 0
                written = 0
                kept_in = in_b
                packed = False
                for p in range(k):
                    a, b = p * w, p * w + w
                    piece, copied = ops.rows(x, G_in, R, a, b)
                    packed = packed or copied > 0
                    q = fn(piece, *args)
                    ops.traffic_add(acc)
                    qb = ops.write(y, G_out, R, a, b, q)
                    written += qb
                    # at this moment: input pieces p.., output pieces ..p, the piece's result and its packed input
                    held = max(held, kept_in + written + qb + copied)
                    del piece, q
                    if owned:  # the accounting models the release; ops.free does it where it can
                        if ops.release:
                            ops.free(x, G_in, R, a, b)
                        kept_in -= in_b // k
                ops.traffic_end(acc)
                refined = refined_bound(in_b, out_b, k, packed, owned)
                info = StepChunks(i, name, k, R, in_b, out_b, packed, refined, held)
        if on_step is not None:
            on_step(i, step, t, y, info)
        infos.append(info)
        if y is not x:
            owned = True  # the runtime made it
        x = y
        t = step.type
    return x, ChunkReport(bound, budget, tuple(infos))


def _slab(x, d: int, a: int, b: int):
    """Positions ``[a, b)`` along dimension ``d`` (a view; one per device for a list)."""
    if isinstance(x, list):
        return [_slab(v, d, a, b) for v in x]
    return x[(slice(None),) * d + (slice(a, b),)]


def _write_slab(y, d: int, a: int, b: int, q) -> int:
    if isinstance(y, list):
        return max(_write_slab(v, d, a, b, w) for v, w in zip(y, q))
    y[(slice(None),) * d + (slice(a, b),)] = q
    return int(q.nbytes)


def _run_exchange(i: int, d: int | None, sched, x, backend: Backend, ops, in_b: int, out_b: int,
                  budget: int, chunks: int | None, owned: bool):
    """An exchange in ``k`` pieces along its free dimension ``d``: piece ``p``
    is the exchange of slab ``[a, b)`` of the input into slab ``[a, b)`` of
    the output (``ExchangeSchedule.restrict``; ``Exchangeproof.exchange_chunk``),
    and the input slab is released once sent where a slab is whole pages
    (its runs, ``G`` of them, span at least two pages each: ``d = 0``, or
    large inner extents); then the accounting is ``Chunk.held``'s
    (``Chunkproof.held_bound``), else the input is held whole."""
    shape = ops.shape(x)
    R = shape[d] if d is not None and shape else 1
    k = 1 if R < 2 else choose_k(in_b, out_b, R, 1, budget, chunks)
    if k <= 1:
        y = backend.exchange(x, sched)
        return y, StepChunks(i, "exchange", 1, R, in_b, out_b, False, in_b + out_b, in_b + out_b)
    G = int(np.prod(shape[:d], dtype=np.int64))
    w = R // k
    # a piece's input is G runs of w indices along d: released only where each run spans pages
    releasable = owned and in_b // (G * R) * w >= 2 * _PAGE
    y = ops.alloc_like(x, sched.out_shape)
    direct = d == 0   # a slab of the output is contiguous: the piece is received in place
    acc = ops.traffic_start()
    held, written, kept_in = 0, 0, in_b
    for p in range(k):
        a, b = p * w, p * w + w
        if direct:
            backend.exchange(_slab(x, d, a, b), sched.restrict(d, a, b), out=_slab(y, d, a, b))
            written += out_b // k
            held = max(held, kept_in + written)   # input slabs p.., output slabs ..p
        else:
            q = backend.exchange(_slab(x, d, a, b), sched.restrict(d, a, b))
            qb = _write_slab(y, d, a, b, q)
            written += qb
            held = max(held, kept_in + written + qb)  # input slabs p.., output slabs ..p, the piece's result
            del q
        ops.traffic_add(acc)
        if releasable:
            if ops.release:
                ops.free(x.reshape((G * R, -1)), G, R, a, b)
            kept_in -= in_b // k
    ops.traffic_end(acc)
    return y, StepChunks(i, "exchange", k, R, in_b, out_b, False,
                         refined_bound(in_b, out_b, k, False, releasable, direct=direct), held)


# ---------------------------------------------------------------------------
# MPI: pieces straight between the input and output buffers


def _region(x: np.ndarray, G: int, R: int, a: int, b: int) -> np.ndarray:
    """Rows ``g*R + [a, b)`` of ``x`` as a (strided) view of shape ``(G, b-a) + rest``."""
    return x.reshape((G, R) + x.shape[1:])[:, a:b]


class MPIArrayOps(ArrayOps):
    """:class:`ArrayOps` for :class:`~verishard.runtime.mpi.MPIBackend`: gathers,
    all-to-alls, permutes and slices of a piece read its rows in place from the
    input buffer and write them in place into the output buffer, through MPI
    derived datatypes built from the numpy views (cached per step shape), so
    nothing is packed or held besides the two buffers."""

    DIRECT = ("all_gather", "all_to_all", "all_permute", "dyn_slice")

    def can_direct(self, name, args) -> bool:
        return name in self.DIRECT

    def _type(self, v: np.ndarray, extent: int | None = None):
        """A committed datatype for the elements of view ``v`` (relative to its first
        element), resized to ``extent`` bytes when given; cached."""
        it = v.dtype.itemsize
        dims = [(n, st) for n, st in zip(v.shape, v.strides) if n != 1]
        key = ("chunk-view", it, tuple(dims), extent)

        def make():
            run, rest = 1, list(dims)
            while rest and rest[-1][1] == it * run:
                run *= rest[-1][0]
                rest.pop()
            made = []
            t = self.backend.unit(it).Create_contiguous(run)
            made.append(t)
            for n, st in reversed(rest):
                t = t.Create_hvector(n, 1, st)
                made.append(t)
            if extent is not None:
                t = t.Create_resized(0, extent)
                made.append(t)
            t.Commit()
            for u in made[:-1]:
                u.Free()
            return t

        return self.backend.mc.datatype(key, make)

    @staticmethod
    def _at(base: np.ndarray, v: np.ndarray):
        off = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        if not 0 <= off < max(1, base.nbytes) or not np.may_share_memory(v, base):
            from .backend import RuntimeCheckError
            raise RuntimeCheckError("chunked MPI step: a piece's view is not inside its buffer")
        return base.reshape(-1).view(np.uint8)[off:]

    def direct(self, name, args, x, y, G_in, G_out, R, a, b) -> int:
        be = self.backend
        populate_rows(y, G_out, R, a, b)
        xin, yout = _region(x, G_in, R, a, b), _region(y, G_out, R, a, b)
        if name == "dyn_slice":
            dim, group = args
            n, k = group.size, int(group.index[be.rank])
            l = yout.shape[dim + 1]
            if G_in != G_out:  # slicing dimension 0: keep group k of the G_in = n * G_out groups
                src = xin[k * G_out:(k + 1) * G_out]
            else:
                idx = [slice(None)] * xin.ndim
                idx[dim + 1] = slice(k * l, k * l + l)
                src = xin[tuple(idx)]
            yout[...] = src
            be.sent = be.received = 0
            return int(yout.nbytes)
        if name == "all_permute":
            (sources,) = args
            r = be.rank
            src_rank = int(sources[r])
            dest = int(np.flatnonzero(sources == r)[0])
            be.mc.cart.Sendrecv([self._at(x, xin), 1, self._type(xin)], dest, 7,
                                [self._at(y, yout), 1, self._type(yout)], src_rank, 7)
            be.sent = be.received = int(xin.nbytes)
            return int(yout.nbytes)
        if name == "all_gather":
            dim, group = args
            n = group.size
            sub = be.mc.group_comm(group.parts)
            if G_out == n * G_in and dim == 0:   # member m's rows go to groups m*G_in ..
                blocks = yout.reshape((n, G_in) + yout.shape[1:])
                blk = blocks[0]
                ext = blocks.strides[0]
            else:
                blocks = yout.reshape(yout.shape[:dim + 1] + (n, yout.shape[dim + 1] // n) + yout.shape[dim + 2:])
                blk = blocks[(slice(None),) * (dim + 1) + (0,)]
                ext = blocks.strides[dim + 1]
            sub.Allgather([self._at(x, xin), 1, self._type(xin)], [self._at(y, blk), 1, self._type(blk, ext)])
            be.sent = be.received = (n - 1) * int(xin.nbytes)
            return int(yout.nbytes)
        if name == "all_to_all":
            d, e, group = args
            n = group.size
            sub = be.mc.group_comm(group.parts)
            # pieces sent: split along e (dimension 0: the G_in = n * G_out groups)
            if e == 0:
                sp = xin.reshape((n, G_out) + xin.shape[1:])
                sblk, sext = sp[0], sp.strides[0]
            else:
                sp = xin.reshape(xin.shape[:e + 1] + (n, xin.shape[e + 1] // n) + xin.shape[e + 2:])
                sblk, sext = sp[(slice(None),) * (e + 1) + (0,)], sp.strides[e + 1]
            # pieces received: stacked along d (dimension 0: the G_out = n * G_in groups)
            if d == 0:
                rp = yout.reshape((n, G_in) + yout.shape[1:])
                rblk, rext = rp[0], rp.strides[0]
            else:
                rp = yout.reshape(yout.shape[:d + 1] + (n, yout.shape[d + 1] // n) + yout.shape[d + 2:])
                rblk, rext = rp[(slice(None),) * (d + 1) + (0,)], rp.strides[d + 1]
            sub.Alltoall([self._at(x, sblk), 1, self._type(sblk, sext)], [self._at(y, rblk), 1, self._type(rblk, rext)])
            be.sent = be.received = (n - 1) * int(sblk.nbytes)
            return int(yout.nbytes)
        raise AssertionError(name)  # pragma: no cover
