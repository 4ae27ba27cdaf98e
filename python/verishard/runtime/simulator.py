"""The simulator backend: every device's local array in one process.

Each collective is implemented literally as the spec's data movement
(``docs/model.md``, "Data movement"), over groups and device
bijections computed by the verified core. Per device and per step it records
bytes sent, bytes received, and bytes held: after the step, and at the peak
while the step runs, when the step's input and output buffers are both alive
(a device whose array does not change holds just its input). So the peak it
reports is the real one of this implementation, not only ``max size(t)``.

After every step :func:`simulate` checks the step against the verified rule
it implements, and raises :class:`~verishard.runtime.backend.RuntimeCheckError`
on any difference:

- every device's array has the local shape of the type the verified checker
  computed for this step;
- the bytes each device received are the spec's figure for that device
  (``(N-1)*size(t)`` for a gather, ``size(t) - size(t)/N`` for an all-to-all,
  ``size(t)`` for a permute on devices whose block changes, else 0), and the
  largest is the checker's per-step figure (``Checker.recv``) times the item
  size; bytes sent in total equal bytes received in total;
- the data: the arrays are exactly the distribution, under the step's type,
  of the global array the source distribution holds (``Semantics.movement_correct``).

>>> import numpy as np
>>> from verishard import Mesh, ArrayType, check, DynSlice, AllPermute, AllGather
>>> m = Mesh.parse("x=2,y=3"); P = lambda s: ArrayType.parse(s, m)
>>> plan = check(m, "[3{x}6]", "[2{y}6]", [DynSlice(0, "y"), AllPermute(P("[1{y,x}6]")), AllGather(0, "x")])
>>> from verishard.runtime import distribute
>>> A = np.arange(6, dtype=np.int16)
>>> r = simulate(plan, distribute(A, m, plan.src))
>>> [a.tolist() for a in r.outputs] == [a.tolist() for a in distribute(A, m, plan.dst)]
True
>>> r.received_bytes.tolist(), r.peak_bytes.tolist()
([2, 4, 4, 4, 4, 2], [8, 8, 8, 8, 8, 8])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..collectives import (AllGather, AllPermute, AllReduce, AllToAll, Collective, DynSlice, Exchange, ReduceScatter,
                           ToPartial)
from ..plan import Plan, Step
from ..sharding import ArrayType
from .backend import (NUMPY_REDUCE, AxisGroup, numpy_fit, Backend, Donated, RedistributionError, RuntimeCheckError, execute,
                      permute_sources, reduction_identity, validate_plan)
from .layout import LayoutError, assemble, check_locals, distribute, represented, same_bytes, to_chunked, to_padded


class SimBackend(Backend):
    """Collectives over the list of every device's local array, as the spec
    moves data. Each call stores the bytes every device sent and received in
    ``last_sent``/``last_received`` (int64 arrays over ranks).

    >>> from verishard import Mesh
    >>> b, g = SimBackend(2), AxisGroup.of(Mesh.parse("x=2"), (0,))
    >>> [y.tolist() for y in b.all_gather([np.array([0, 1]), np.array([2, 3])], 0, g)]
    [[0, 1, 2, 3], [0, 1, 2, 3]]
    >>> b.last_sent.tolist(), b.last_received.tolist()
    ([16, 16], [16, 16])
    """

    name = "simulate"

    def __init__(self, num_devices: int, pad=0):
        self.n = num_devices
        self.pad = pad  # what fit writes where a padded buffer grows (uneven types)
        self.last_sent = np.zeros(num_devices, dtype=np.int64)
        self.last_received = np.zeros(num_devices, dtype=np.int64)

    def _reset(self) -> tuple[np.ndarray, np.ndarray]:
        self.last_sent = np.zeros(self.n, dtype=np.int64)
        self.last_received = np.zeros(self.n, dtype=np.int64)
        return self.last_sent, self.last_received

    @staticmethod
    def _piece(x: np.ndarray, dim: int, group: AxisGroup, r: int) -> np.ndarray:
        """The piece of ``x`` along ``dim`` that device ``r`` keeps (its group index's; a view)."""
        l, k = x.shape[dim] // group.size, int(group.index[r])
        return x[(slice(None),) * dim + (slice(k * l, k * l + l),)]

    def _concatenate(self, blocks, axis) -> np.ndarray:
        return np.concatenate(blocks, axis=axis, dtype=blocks[0].dtype)

    def all_gather(self, xs, dim, group: AxisGroup):
        """Every device gets its group's arrays concatenated along ``dim``.

        >>> from verishard import Mesh
        >>> g = AxisGroup.of(Mesh.parse("x=2"), (0,))
        >>> [y.tolist() for y in SimBackend(2).all_gather([np.array([[0]]), np.array([[1]])], 1, g)]
        [[[0, 1]], [[0, 1]]]
        """
        sent, recv = self._reset()
        out = [None] * self.n
        for members in group.members:
            blocks = [xs[r] for r in members]  # in group order k = 0..N-1
            for j, r in enumerate(members):
                out[r] = np.concatenate(blocks, axis=dim, dtype=blocks[0].dtype)
                for k, s in enumerate(members):
                    if k != j:
                        sent[s] += blocks[k].nbytes
                        recv[r] += blocks[k].nbytes
        return out

    def dyn_slice(self, xs, dim, group: AxisGroup):
        """Device with group index ``k`` keeps the ``k``-th piece along ``dim``; nothing moves.

        >>> from verishard import Mesh
        >>> b, g = SimBackend(2), AxisGroup.of(Mesh.parse("x=2"), (0,))
        >>> [y.tolist() for y in b.dyn_slice([np.arange(4), np.arange(4)], 0, g)], b.last_received.tolist()
        ([[0, 1], [2, 3]], [0, 0])
        """
        self._reset()
        return [np.array(self._piece(x, dim, group, r), order="C", copy=True) for r, x in enumerate(xs)]

    def all_to_all(self, xs, src_dim, dst_dim, group: AxisGroup):
        """Split along ``dst_dim``, exchange pieces, concatenate along ``src_dim``.

        >>> from verishard import Mesh
        >>> b, g = SimBackend(2), AxisGroup.of(Mesh.parse("x=2"), (0,))
        >>> [y.tolist() for y in b.all_to_all([np.array([[0, 1]]), np.array([[2, 3]])], 0, 1, g)]
        [[[0], [2]], [[1], [3]]]
        """
        sent, recv = self._reset()
        n = group.size
        out = [None] * self.n
        for members in group.members:
            pieces = [np.split(xs[s], n, axis=dst_dim) for s in members]  # pieces[k][j]: k sends to j
            for j, r in enumerate(members):
                out[r] = self._concatenate([pieces[k][j] for k in range(n)], src_dim)
                for k, s in enumerate(members):
                    if k != j:
                        sent[s] += pieces[k][j].nbytes
                        recv[r] += pieces[k][j].nbytes
        return out

    def all_permute(self, xs, sources):
        """Device ``c`` gets the array of ``sources[c]``; fixed devices keep theirs.

        >>> b = SimBackend(3)
        >>> [y.tolist() for y in b.all_permute([np.array([0]), np.array([1]), np.array([2])], [1, 0, 2])]
        [[1], [0], [2]]
        >>> b.last_received.tolist()
        [8, 8, 0]
        """
        sent, recv = self._reset()
        out = []
        for c, s in enumerate(sources):
            s = int(s)
            if s == c:
                out.append(xs[c])  # keeps its block: nothing moves, no new buffer
            else:
                out.append(xs[s].copy())
                sent[s] += xs[s].nbytes
                recv[c] += xs[s].nbytes
        return out

    def exchange(self, xs, schedule, out=None):
        """Every device fills its block from the pieces of the verified schedule.

        >>> from verishard import Mesh, ArrayType
        >>> from verishard.runtime.backend import ExchangeSchedule
        >>> m = Mesh.parse("x=2")
        >>> s = ExchangeSchedule.of(ArrayType.parse("[2{x}4]", m), ArrayType.parse("[4]", m))
        >>> b = SimBackend(2)
        >>> [y.tolist() for y in b.exchange([np.array([0, 1]), np.array([2, 3])], s)], b.last_received.tolist()
        ([[0, 1, 2, 3], [0, 1, 2, 3]], [16, 16])
        """
        sent, recv = self._reset()
        ys = []
        for j, ps in enumerate(schedule.pieces):
            if out is not None:   # every device's output buffer given (views of a larger one)
                y = out[j]
                if schedule.padded:
                    y[...] = self.pad
            else:
                y = (np.full(schedule.out_shape, self.pad, dtype=xs[j].dtype) if schedule.padded
                     else np.empty(schedule.out_shape, dtype=xs[j].dtype))
            for r, a, b in ps:
                y[b] = xs[r][a]
                if r != j:
                    sent[r] += y[b].nbytes
                    recv[j] += y[b].nbytes
            ys.append(y)
        return ys

    def fit(self, xs, dim, n):
        """Every device's buffer cut or padded (with ``self.pad``) to ``n`` along ``dim``; nothing moves.

        >>> [y.tolist() for y in SimBackend(2, pad=9).fit([np.array([0]), np.array([1, 2])], 0, 2)]
        [[0, 9], [1, 2]]
        """
        return [numpy_fit(x, dim, n, self.pad) for x in xs]

    def _reduced(self, xs, group: AxisGroup, op: str) -> dict[int, np.ndarray]:
        """Each group's reduction (in group order), by group number."""
        ufunc = NUMPY_REDUCE[op]
        out = {}
        for g, members in enumerate(group.members):
            acc = np.array(xs[int(members[0])], copy=True)
            for r in members[1:]:
                ufunc(acc, xs[int(r)], out=acc)
            out[g] = acc
        return out

    def all_reduce(self, xs, group: AxisGroup, op: str):
        """Every device gets its group's reduction. Traffic is the model's
        (``Partial.precv``: a reduce-scatter then an all-gather of pieces,
        ``2 * (s - s // n)`` elements each way), not this literal loop's.

        >>> from verishard import Mesh
        >>> b, g = SimBackend(2), AxisGroup.of(Mesh.parse("x=2"), (0,))
        >>> [y.tolist() for y in b.all_reduce([np.array([1, 2]), np.array([10, 20])], g, "sum")]
        [[11, 22], [11, 22]]
        >>> b.last_received.tolist()
        [16, 16]
        """
        sent, recv = self._reset()
        red = self._reduced(xs, group, op)
        out = [red[int(k)].copy() for k in group.key]
        for r, x in enumerate(xs):
            moved = 2 * (x.size - x.size // group.size) * x.itemsize
            sent[r] += moved
            recv[r] += moved
        return out

    def reduce_scatter(self, xs, dim, group: AxisGroup, op: str):
        """Device with group index ``k`` gets the ``k``-th piece along ``dim``
        of its group's reduction; it receives that piece from each other member.

        >>> from verishard import Mesh
        >>> b, g = SimBackend(2), AxisGroup.of(Mesh.parse("x=2"), (0,))
        >>> [y.tolist() for y in b.reduce_scatter([np.array([1, 2]), np.array([10, 20])], 0, g, "max")]
        [[10], [20]]
        """
        sent, recv = self._reset()
        red = self._reduced(xs, group, op)
        out = []
        for r, x in enumerate(xs):
            out.append(np.array(self._piece(red[int(group.key[r])], dim, group, r), order="C", copy=True))
            moved = (group.size - 1) * out[-1].nbytes
            sent[r] += moved
            recv[r] += moved
        return out

    def to_partial(self, xs, group: AxisGroup, op: str):
        """Device 0 of each group keeps its array, the others hold the unit; nothing moves.

        >>> from verishard import Mesh
        >>> b, g = SimBackend(2), AxisGroup.of(Mesh.parse("x=2"), (0,))
        >>> [y.tolist() for y in b.to_partial([np.array([1.0]), np.array([1.0])], g, "max")]
        [[1.0], [-inf]]
        """
        self._reset()
        return [x if group.index[r] == 0 else np.full_like(x, reduction_identity(x.dtype, op))
                for r, x in enumerate(xs)]


class HostBackend(SimBackend):
    """The simulator's data movement over every device's array in one
    process, without the copies a runtime whose devices share the host's
    memory does not need (JAX's CPU devices, :func:`verishard.jax.backend.host_executor`).
    Arrays are never written after a step makes them, so a step hands out
    blocks without copying them: the members of a gather group share the one
    concatenation, a slice is a view, a permute passes the array on; an
    all-to-all is the simulator's, into aligned buffers. The
    values are the simulator's, step for step (tests/test_jax_host.py).

    >>> from verishard import Mesh
    >>> b, g = HostBackend(2), AxisGroup.of(Mesh.parse("x=2"), (0,))
    >>> ys = b.all_gather([np.array([0, 1]), np.array([2, 3])], 0, g)
    >>> [y.tolist() for y in ys], ys[0] is ys[1]
    ([[0, 1, 2, 3], [0, 1, 2, 3]], True)
    """

    name = "host"

    @staticmethod
    def _empty(shape, dtype) -> np.ndarray:
        """A new C-order array at a 64-byte boundary (XLA's CPU client takes
        such a buffer without copying it; NumPy's large arrays start at 16)."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        raw = np.empty(nbytes + 64, np.uint8)
        start = -raw.ctypes.data % 64
        return raw[start:start + nbytes].view(dtype).reshape(shape)

    def _concatenate(self, blocks, axis) -> np.ndarray:
        shape = list(blocks[0].shape)
        shape[axis] = sum(b.shape[axis] for b in blocks)
        return np.concatenate(blocks, axis=axis, out=self._empty(shape, blocks[0].dtype))

    def all_gather(self, xs, dim, group: AxisGroup):
        out = [None] * self.n
        for members in group.members:
            y = self._concatenate([xs[r] for r in members], dim)
            for r in members:
                out[r] = y
        return out

    def dyn_slice(self, xs, dim, group: AxisGroup):
        return [self._piece(x, dim, group, r) for r, x in enumerate(xs)]

    def all_permute(self, xs, sources):
        return [xs[int(s)] for s in sources]


@dataclass(frozen=True)
class SimStep:
    """Per-device figures of one step (int64 arrays over ranks, in bytes).

    >>> from verishard import plan
    >>> p = plan("x=2", "[2{x}4]", "[4]")
    >>> s = simulate(p, [np.array([0, 1], np.int32), np.array([2, 3], np.int32)]).steps[0]
    >>> s.index, s.collective, s.type, s.received.tolist(), s.held.tolist(), s.peak.tolist()
    (1, AllGather(dim=0, axes=('x',)), [4], [8, 8], [16, 16], [24, 24])
    """

    index: int
    collective: Collective
    type: ArrayType
    sent: np.ndarray
    received: np.ndarray
    held: np.ndarray       # after the step
    peak: np.ndarray       # while it runs: input and output at once
    predicted_received: int  # verified checker's per-device maximum, in bytes


@dataclass(frozen=True)
class SimResult:
    """What :func:`simulate` returns.

    >>> from verishard import plan
    >>> p = plan("x=2", "[2{x}4]", "[4]")
    >>> r = simulate(p, [np.array([0, 1], np.int32), np.array([2, 3], np.int32)])
    >>> [y.tolist() for y in r.outputs], r.itemsize, len(r.steps)
    ([[0, 1, 2, 3], [0, 1, 2, 3]], 4, 1)
    >>> print(r)
    simulated on {x:2}: [2{x}4] -> [4]
      step  collective       type after  max recv B  max held B  max peak B
         0  (source)         [2{x}4]              0           8           8
         1  AllGather(0, x)  [4]                  8          16          24
    peak 24 B/device (type-level 16 B); received 8 B/device
    """

    plan: Plan
    outputs: list[np.ndarray]
    steps: tuple[SimStep, ...]
    itemsize: int
    chunking: "ChunkReport | None" = None  # set when run chunked (budget_bytes= or chunks=)

    @property
    def source_bytes(self) -> np.ndarray:
        """Per device: bytes of its source array.

        >>> from verishard import plan
        >>> r = simulate(plan("x=2", "[2{x}4]", "[4]"), [np.zeros(2), np.ones(2)], check_data=False)
        >>> r.source_bytes.tolist()
        [16, 16]
        """
        return np.full(self.plan.mesh.num_devices, self.plan.src.size * self.itemsize, dtype=np.int64)

    @property
    def peak_bytes(self) -> np.ndarray:
        """Per device: the most bytes held at once over the whole run.

        During an all-gather a device holds its input and the gathered output:

        >>> from verishard import plan
        >>> r = simulate(plan("x=2", "[2{x}4]", "[4]"), [np.zeros(2), np.ones(2)])
        >>> r.peak_bytes.tolist()
        [48, 48]
        """
        out = self.source_bytes
        for s in self.steps:
            out = np.maximum(out, s.peak)
        return out

    @property
    def received_bytes(self) -> np.ndarray:
        """Per device: bytes received over the whole run.

        >>> from verishard import plan
        >>> r = simulate(plan("x=2", "[2{x}4]", "[4]"), [np.zeros(2), np.ones(2)])
        >>> r.received_bytes.tolist()
        [16, 16]
        """
        return sum((s.received for s in self.steps), np.zeros(self.plan.mesh.num_devices, dtype=np.int64))

    @property
    def sent_bytes(self) -> np.ndarray:
        """Per device: bytes sent over the whole run.

        >>> from verishard import plan
        >>> r = simulate(plan("x=2", "[2{x}4]", "[4]"), [np.zeros(2), np.ones(2)])
        >>> r.sent_bytes.tolist()
        [16, 16]
        """
        return sum((s.sent for s in self.steps), np.zeros(self.plan.mesh.num_devices, dtype=np.int64))

    def __str__(self) -> str:
        rows = [("step", "collective", "type after", "max recv B", "max held B", "max peak B")]
        rows.append(("0", "(source)", str(self.plan.src), "0", str(self.plan.src.size * self.itemsize),
                     str(self.plan.src.size * self.itemsize)))
        for s in self.steps:
            rows.append((str(s.index), str(s.collective), str(s.type), str(int(s.received.max())),
                         str(int(s.held.max())), str(int(s.peak.max()))))
        w = [max(len(r[k]) for r in rows) for k in range(6)]
        lines = [f"simulated on {self.plan.mesh}: {self.plan.src} -> {self.plan.dst}"]
        lines += ["  " + "  ".join(r[k].ljust(w[k]) if k in (1, 2) else r[k].rjust(w[k]) for k in range(6))
                  for r in rows]
        lines.append(f"peak {int(self.peak_bytes.max())} B/device (type-level "
                     f"{self.plan.peak * self.itemsize} B); received {int(self.received_bytes.max())} B/device")
        return "\n".join(lines)


def expected_received(t: ArrayType, c: Collective, mesh) -> np.ndarray:
    """The spec's elements received by every device for one step (table in
    "Collectives and their typing rules"), with the permute's bijection from
    the verified core.

    >>> from verishard import Mesh, ArrayType, AllGather, AllToAll
    >>> m = Mesh.parse("x=2,y=2")
    >>> expected_received(ArrayType.parse("[2{x}4]", m), AllGather(0, "x"), m).tolist()
    [2, 2, 2, 2]
    >>> expected_received(ArrayType.parse("[4{x}8, 4]", m), AllToAll(0, 1, "x"), m).tolist()
    [8, 8, 8, 8]
    """
    n = mesh.num_devices
    if isinstance(c, DynSlice):
        return np.zeros(n, dtype=np.int64)
    if isinstance(c, Exchange):  # the (valid) target block less what the device holds (Traffic.need)
        out = []
        for r in range(n):
            a = [(s, s + v) for s, v in zip(t.block_starts(r), t.valid_shape(r))]
            b = [(s, s + v) for s, v in zip(c.target.block_starts(r), c.target.valid_shape(r))]
            kept = int(np.prod([max(0, min(u[1], w[1]) - max(u[0], w[0])) for u, w in zip(a, b)]))
            out.append(int(np.prod(c.target.valid_shape(r))) - kept)
        return np.array(out, dtype=np.int64)
    if isinstance(c, AllPermute):
        moved = permute_sources(t, c.target) != np.arange(n)
        return np.where(moved, t.size, 0).astype(np.int64)
    g = AxisGroup.of(mesh, c.parts(mesh)).size
    if isinstance(c, AllGather):
        return np.full(n, (g - 1) * t.size, dtype=np.int64)
    if isinstance(c, ToPartial):
        return np.zeros(n, dtype=np.int64)
    if isinstance(c, AllReduce):
        return np.full(n, 2 * (t.size - t.size // g), dtype=np.int64)
    assert isinstance(c, (AllToAll, ReduceScatter))
    # N - 1 pieces: the (padded) block with the split dimension cut to its
    # block size after the step (Uchecker.urecv, Partial.precv; size(t) -
    # size(t)/N for an all-to-all on even types)
    e = c.dst_dim if isinstance(c, AllToAll) else c.dim
    blocks = g
    for p in t.dim_parts(e):
        blocks *= mesh.part_sizes[p]
    piece = list(t.local_shape)
    piece[e] = -(-t.global_shape[e] // blocks)
    return np.full(n, (g - 1) * int(np.prod(piece)), dtype=np.int64)


def simulate(plan: Plan, locals_: Sequence[np.ndarray] | Donated, check: bool = True,
             check_data: bool | None = None, budget_bytes: int | None = None,
             chunks: int | None = None, *, layout: str = "padded", pad=0) -> SimResult:
    """Run ``plan`` on the local arrays of every device (``locals_[rank]``,
    e.g. ``distribute(A, plan.mesh, plan.src)``) and return the results and
    the per-device, per-step traffic and memory.

    The plan is re-checked by the verified checker first. ``check`` runs the
    per-step checks of the module docstring; ``check_data`` (default: same as
    ``check``) includes the data check, which needs the source arrays to be a
    distribution of some global array (replicas equal).

    >>> from verishard import plan
    >>> from verishard.runtime import distribute
    >>> p = plan("x=2,y=2", "[2{x}4]", "[2{y}4]")
    >>> p.collectives
    (AllPermute(target=[2{y}4]),)
    >>> r = simulate(p, distribute(np.arange(4, dtype=np.int8), p.mesh, p.src))
    >>> [y.tolist() for y in r.outputs], r.received_bytes.tolist()
    ([[0, 1], [2, 3], [0, 1], [2, 3]], [0, 2, 2, 0])

    Every kind of type runs here. On uneven dimensions ``layout`` says how the
    buffers hold their blocks, as in :func:`~verishard.runtime.distribute`:
    ``"padded"`` (the default: the type's local shape, ``pad`` written where a
    step creates padding) or ``"chunked"`` (only the valid parts, as
    ``torch.chunk`` leaves them; run padded with zeros, the way
    ``Ucheckerproof.ucheck_correct_chunked`` runs them, the outputs cut back).
    The data check reads valid positions only.

    >>> p = plan("x=2,y=2", "[3{x}5]", "[3{y}5]")
    >>> A = np.arange(5)
    >>> [y.tolist() for y in simulate(p, distribute(A, p.mesh, p.src, pad=-1), pad=-1).outputs]
    [[0, 1, 2], [3, 4, -1], [0, 1, 2], [3, 4, -1]]
    >>> [y.tolist() for y in simulate(p, distribute(A, p.mesh, p.src, layout="chunked"), layout="chunked").outputs]
    [[0, 1, 2], [3, 4], [0, 1, 2], [3, 4]]
    """
    plan = validate_plan(plan)
    if isinstance(locals_, Donated):
        locals_ = locals_.take()
    try:
        dtype = check_locals(locals_, plan.src, "simulate: source arrays", layout)
    except LayoutError as e:
        raise RedistributionError(str(e)) from None
    chunked = layout == "chunked"
    if chunked:  # run padded (zeros), cut the outputs back to their valid parts at the end
        pad = np.zeros((), dtype)[()]
    if check_data is None:
        check_data = check
    itemsize = dtype.itemsize
    mesh = plan.mesh
    A = None
    if check_data:
        try:
            A = assemble(locals_, mesh, plan.src, layout=layout)
        except LayoutError as e:
            raise RedistributionError(f"simulate: the source arrays are not a distribution of {plan.src}: {e}"
                                      " (pass check_data=False to move them anyway)") from None
    if chunked and plan.src.uneven:
        locals_ = to_padded(locals_, plan.src, pad)
    backend = SimBackend(mesh.num_devices, pad)
    records: list[SimStep] = []
    before = {"xs": list(locals_)}

    def on_step(i: int, step: Step, t: ArrayType, ys: list[np.ndarray], info=None) -> None:
        xs = before["xs"]
        moved = ys is not xs
        sent = backend.last_sent if moved else np.zeros(mesh.num_devices, dtype=np.int64)
        recv = backend.last_received if moved else np.zeros(mesh.num_devices, dtype=np.int64)
        backend._reset()
        held_in = np.array([x.nbytes for x in xs], dtype=np.int64)
        held_out = np.array([y.nbytes for y in ys], dtype=np.int64)
        fresh = np.array([y is not x for x, y in zip(xs, ys)])
        peak = np.where(fresh, held_in + held_out, held_in)
        if info is not None:  # chunked (runtime/chunked.py): its accounting, as if donated
            peak = np.where(fresh, info.held, held_in)
        rec = SimStep(i, step.collective, step.type, sent, recv, held_out, peak, step.received * itemsize)
        if check:
            _check_step(plan, rec, t, ys, dtype, A)
        records.append(rec)
        before["xs"] = ys

    report = None
    if budget_bytes is None and chunks is None:
        outputs = execute(plan, list(locals_), backend, on_step)
    else:  # chunked execution (runtime/chunked.py), accounted as if the source were donated
        from .chunked import ListOps, execute_chunked
        outputs, report = execute_chunked(plan, list(locals_), backend, ListOps(backend), budget_bytes, chunks,
                                          itemsize, owned=True, on_step=on_step)
        outputs = [y if y.flags.owndata else y.copy() for y in outputs]  # no view of the caller's arrays
    given = {id(x) for x in locals_}
    outputs = [y.copy() if id(y) in given else y for y in outputs]  # never alias the caller's arrays
    if chunked:
        outputs = to_chunked(outputs, plan.dst)
    return SimResult(plan, outputs, tuple(records), itemsize, report)


def _check_step(plan: Plan, rec: SimStep, t: ArrayType, ys, dtype: np.dtype, A) -> None:
    where = f"simulate, step {rec.index} ({rec.collective})"
    itemsize = dtype.itemsize
    for r, y in enumerate(ys):
        if y.shape != rec.type.local_shape:
            raise RuntimeCheckError(f"{where}: device {r} holds shape {y.shape}, the verified type "
                                    f"{rec.type} has local shape {rec.type.local_shape}")
        if y.dtype != dtype:
            raise RuntimeCheckError(f"{where}: device {r} holds dtype {y.dtype}, not {dtype}")
    want = expected_received(t, rec.collective, plan.mesh) * itemsize
    if not np.array_equal(rec.received, want):
        bad = int(np.flatnonzero(rec.received != want)[0])
        raise RuntimeCheckError(f"{where}: device {bad} received {int(rec.received[bad])} B, "
                                f"the spec's figure is {int(want[bad])} B")
    if int(rec.received.max()) != rec.predicted_received:
        raise RuntimeCheckError(f"{where}: the most any device received is {int(rec.received.max())} B, "
                                f"the verified checker predicts {rec.predicted_received} B")
    if int(rec.sent.sum()) != int(rec.received.sum()):
        raise RuntimeCheckError(f"{where}: {int(rec.sent.sum())} B sent but {int(rec.received.sum())} B received")
    if A is not None:
        want_data = distribute(A, plan.mesh, rec.type.plain, layout="chunked")  # valid positions only
        got = to_chunked(represented(ys, rec.type), rec.type)
        summed = plan.reduce == "sum" and bool(plan.src.partial or rec.type.partial)  # a float sum was taken
        for r, (y, w) in enumerate(zip(got, want_data)):
            if not same_value(y, w, summed):
                raise RuntimeCheckError(f"{where}: device {r} does not hold its block of {rec.type}"
                                        + (" (reduced over its pending group)" if rec.type.partial else ""))


def same_value(y: np.ndarray, w: np.ndarray, summed: bool) -> bool:
    """Exact equality, except for floating sums, whose order of reduction is
    free: those agree to a relative tolerance of 1e-5 for 32 bits or fewer,
    1e-12 for wider (and an absolute 1e-6 / 1e-12 near zero).

    >>> same_value(np.float32([1.0]), np.float32([1.0000001]), True), same_value(np.int32([1]), np.int32([2]), True)
    (True, False)
    """
    if not summed or y.dtype.kind not in "fc" or y.dtype != w.dtype or y.shape != w.shape:
        return same_bytes(y, w)
    tol = 1e-5 if y.dtype.itemsize <= 4 else 1e-12
    return bool(np.allclose(y, w, rtol=tol, atol=tol * 0.1 if tol < 1e-6 else 1e-6))


__all__ = ["SimBackend", "SimStep", "SimResult", "simulate", "expected_received", "same_value"]
