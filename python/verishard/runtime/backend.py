"""The backend interface and the shared executor.

A backend runs the four collectives of the model and nothing else. The
executor (:func:`execute`) walks a checked :class:`~verishard.plan.Plan` and
calls the backend once per step; plan validation, the device bijection of a
permute, group tables and trivial-step elimination live here, so a new
backend (JAX, PyTorch, ...) is one module with four methods.

Interface
---------

A backend is any object with these four methods (subclass :class:`Backend`
for the documentation and a helpful error on a missing one). ``x`` is the
backend's own value for "the local array of the calling device": a
``numpy.ndarray`` for MPI, a traced ``jax.Array`` inside ``shard_map`` for
JAX, or the list of every device's array for the simulator. Dimensions are
local-array dimensions; local shapes are row-major (C order).

``all_gather(x, dim, group) -> y``
    Within each group, device with group index ``k`` contributes ``x``;
    every device returns the concatenation along ``dim`` of the group's
    arrays in order ``k = 0 .. group.size-1`` (``y.shape[dim] ==
    x.shape[dim] * group.size``). JAX: ``lax.all_gather(x, group.names,
    axis=dim, tiled=True)``.

``dyn_slice(x, dim, group) -> y``
    Device with group index ``k`` keeps the ``k``-th of ``group.size`` equal
    pieces of ``x`` along ``dim``. No communication. JAX:
    ``lax.dynamic_slice_in_dim(x, lax.axis_index(group.names) * l, l, dim)``.

``all_to_all(x, src_dim, dst_dim, group) -> y``
    Device ``k`` splits ``x`` into ``group.size`` equal pieces along
    ``dst_dim`` and sends piece ``j`` to device ``j``; it returns what it
    received concatenated along ``src_dim`` in order of the sender's index
    (``src_dim`` grows by ``group.size``, ``dst_dim`` shrinks by it). JAX:
    ``lax.all_to_all(x, group.names, split_axis=dst_dim, concat_axis=src_dim,
    tiled=True)``.

``all_permute(x, sources) -> y``
    ``sources`` is an int array over linear ranks: rank ``c`` returns the
    ``x`` of rank ``sources[c]`` (a bijection from the verified core,
    ``Permute.permute_table``). Ranks with ``sources[c] == c`` keep their
    array and must send nothing. JAX: ``lax.ppermute(x, all_names,
    [(int(s), c) for c, s in enumerate(sources) if s != c])`` then keep ``x``
    on the fixed ranks (``all_names`` = every part name of ``group.mesh``, in
    order).

A :class:`AxisGroup` names the mesh parts a collective runs over, major to
minor (``group.names``, e.g. ``("y.1", "x")``); a device's index in its group
is the mixed-radix number of its coordinates on those parts, in that order
(``group.index[rank]``, from the verified block function). The mesh
(``group.mesh``) is the plan's mesh: it may split an axis into parts (``y=4``
as ``y.0:2, y.1:2``); linear ranks are row-major over the parts, which is
row-major over the whole axes, so ranks never change. A JAX backend builds
its ``jax.sharding.Mesh`` from ``plan.mesh.parts`` (names and sizes) over the
devices in rank order.

Partial types add three methods; ``op`` is the pending reduction, one of
``"sum"``, ``"max"``, ``"min"`` (the plan's :attr:`~verishard.plan.Plan.reduce`):

``all_reduce(x, group, op) -> y``
    Every device returns the elementwise reduction of its group's arrays.
    MPI: ``Allreduce``; JAX: ``lax.psum`` / ``pmax`` / ``pmin``; torch:
    ``all_reduce``.

``reduce_scatter(x, dim, group, op) -> y``
    The reduction, of which the device with group index ``k`` keeps the
    ``k``-th of ``group.size`` equal pieces along ``dim``. MPI:
    ``Reduce_scatter_block``; JAX: ``lax.psum_scatter(..., tiled=True)``;
    torch: ``reduce_scatter_tensor``.

``to_partial(x, group, op) -> y``
    No communication: the device with group index 0 returns ``x``, the
    others an array of the reduction's unit (:func:`reduction_identity`).

Uneven types (blocks of ``ceil(g / n)``, ``Uchecker.v``) run on padded
buffers (every device holds ``t.local_shape``, padding at the end of each
dimension) with one more, local, method:

``fit(x, dim, n) -> y``
    ``x`` cut to its first ``n`` positions along ``dim``, or extended to ``n``
    with padding (any value: ``Ucheckerproof.ucheck_correct`` holds for every
    padding value). No communication.

The exchange (a plan's only step, planned with ``plan(..., exchange=True)``)
adds one method:

``exchange(x, schedule, out=None) -> y``
    ``schedule`` is an :class:`ExchangeSchedule` built from the verified
    schedule (``Exchange.exchange``, ``Exchangeproof.exchange_correct``):
    for every rank the pieces it receives, each a sender rank, the slices of
    the sender's local array and the slices of its own output they fill.
    ``out``, when given, is the output buffer to fill (a slab of a larger
    one). MPI: one ``Alltoallw`` of subarray datatypes; the simulator
    copies; torch: one ``all_to_all_single`` with split sizes. JAX does not run it.

The executor (:func:`run_step`) then runs each step as the even collective
between a ``fit`` before and after, exactly as ``Uneven.usource`` moves data:
a gather concatenates the padded blocks and keeps the first ``c_out``; a
slice pads to ``N * c_out`` and keeps piece ``k``; an all-to-all pads the
split dimension to ``N * c_out``, exchanges, and cuts the concatenated one to
``c_out``. On even types no ``fit`` is ever called.

The executor never calls a backend for a step that moves nothing: a group
of size 1, or a permute whose bijection is the identity.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes
from ..collectives import (AllGather, AllPermute, AllReduce, AllToAll, Collective, DynSlice, Exchange,
                           ReduceScatter, ToPartial)
from ..errors import PlanError, VerishardError
from ..mesh import Mesh
from ..plan import Plan, Step, check, is_verified
from ..sharding import ArrayType, DimType, as_type
from ..core import block_starts, permute_sources, xplan


class RedistributionError(VerishardError):
    """A redistribution was refused before any data moved (bad plan or input).

    >>> from verishard.runtime import simulate
    >>> simulate(naive_plan("x=2", "[2{x}4]", "[4]"), [np.zeros(2)])
    Traceback (most recent call last):
    ...
    verishard.runtime.backend.RedistributionError: simulate: source arrays: got 1 arrays for 2 devices of {x:2}
    """


class UnsupportedStep(RedistributionError, NotImplementedError):
    """A plan holds a step the backend does not implement: refused before anything moves."""


class RuntimeCheckError(AssertionError):
    """A backend's result disagrees with the verified rule of its step (a bug).

    It signals a bug in verishard or a backend, not bad input, so it is an
    ``AssertionError`` rather than a :class:`~verishard.errors.VerishardError`:

    >>> issubclass(RuntimeCheckError, AssertionError), issubclass(RuntimeCheckError, VerishardError)
    (True, False)
    """


@dataclass(frozen=True)
class AxisGroup:
    """The mesh parts a collective runs over, major to minor.

    >>> g = AxisGroup.of(Mesh.parse("x=2,y=2*2"), (2, 0))
    >>> g.names, g.size, g.index.tolist()
    (('y.1', 'x'), 4, [0, 2, 0, 2, 1, 3, 1, 3])
    >>> g.members.tolist()
    [[0, 4, 1, 5], [2, 6, 3, 7]]
    """

    mesh: Mesh
    parts: tuple[int, ...]

    @staticmethod
    @functools.lru_cache(maxsize=1024)
    def of(mesh: Mesh, parts: tuple[int, ...]) -> "AxisGroup":
        """The group of ``parts`` over ``mesh`` (cached: equal arguments give the same object).

        >>> g = AxisGroup.of(Mesh.parse("x=2,y=2"), (1,))
        >>> g, AxisGroup.of(Mesh.parse("x=2,y=2"), (1,)) is g
        (AxisGroup(mesh={x:2, y:2}, parts=(1,)), True)
        """
        return AxisGroup(mesh, tuple(parts))

    @property
    def names(self) -> tuple[str, ...]:
        """Part names, major to minor (``"x"``, ``"y.0"``).

        >>> AxisGroup.of(Mesh.parse("x=2,y=2*2"), (1, 0)).names
        ('y.0', 'x')
        """
        return tuple(self.mesh.part_name(p) for p in self.parts)

    @property
    def size(self) -> int:
        """Devices per group: the product of the parts' sizes.

        >>> AxisGroup.of(Mesh.parse("x=2,y=3"), (0, 1)).size
        6
        """
        n = 1
        for p in self.parts:
            n *= self.mesh.part_sizes[p]
        return n

    @functools.cached_property
    def _table(self) -> np.ndarray:
        # Group index and group number of every rank, from the verified block
        # function: a type whose dimension 1 is sharded by the group's parts
        # (local size 1, so its block start is the mixed-radix index) and whose
        # dimension 0 is sharded by all other parts (in mesh order).
        rest = tuple(p for p in range(len(self.mesh.part_sizes)) if p not in self.parts)
        n_rest = 1
        for p in rest:
            n_rest *= self.mesh.part_sizes[p]
        t = ArrayType(self.mesh, (DimType(n_rest, rest), DimType(self.size, self.parts)))
        return block_starts(t)

    @property
    def index(self) -> np.ndarray:
        """``index[rank]``: the rank's index in its group (read-only).

        >>> AxisGroup.of(Mesh.parse("x=2,y=2"), (1,)).index.tolist()
        [0, 1, 0, 1]
        """
        return self._table[:, 1]

    @property
    def key(self) -> np.ndarray:
        """``key[rank]``: which group the rank belongs to, ``0 .. N/size - 1``.

        >>> AxisGroup.of(Mesh.parse("x=2,y=2"), (1,)).key.tolist()
        [0, 0, 1, 1]
        """
        return self._table[:, 0]

    @functools.cached_property
    def members(self) -> np.ndarray:
        """``members[g, k]``: the rank with index ``k`` in group ``g``.

        >>> AxisGroup.of(Mesh.parse("x=2,y=2"), (0,)).members.tolist()
        [[0, 2], [1, 3]]
        """
        out = np.empty((self.mesh.num_devices // self.size, self.size), dtype=np.int64)
        out[self.key, self.index] = np.arange(self.mesh.num_devices)
        out.flags.writeable = False
        return out


class Backend:
    """Base class of backends: the four collectives (see the module docstring).

    A backend implements only the collectives its plans use; here one that
    describes each call instead of moving data:

    >>> class Describe(Backend):
    ...     name = "describe"
    ...     def all_gather(self, x, dim, group):
    ...         return f"all_gather({x}, dim={dim}, over {group.names})"
    >>> execute(naive_plan("x=2", "[2{x}4]", "[4]"), "x", Describe())
    "all_gather(x, dim=0, over ('x',))"
    >>> Describe().dyn_slice("x", 0, AxisGroup.of(Mesh.parse("x=2"), (0,)))
    Traceback (most recent call last):
    ...
    NotImplementedError: Describe does not implement dyn_slice
    """

    name = "abstract"

    def all_gather(self, x: Any, dim: int, group: AxisGroup) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement all_gather")

    def dyn_slice(self, x: Any, dim: int, group: AxisGroup) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement dyn_slice")

    def all_to_all(self, x: Any, src_dim: int, dst_dim: int, group: AxisGroup) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement all_to_all")

    def all_permute(self, x: Any, sources: np.ndarray) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement all_permute")

    def all_reduce(self, x: Any, group: AxisGroup, op: str) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement all_reduce")

    def reduce_scatter(self, x: Any, dim: int, group: AxisGroup, op: str) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement reduce_scatter")

    def to_partial(self, x: Any, group: AxisGroup, op: str) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement to_partial")

    def fit(self, x: Any, dim: int, n: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement fit (uneven types)")

    def exchange(self, x: Any, schedule: "ExchangeSchedule", out: Any = None) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not run exchange steps; "
                                  "plan without exchange=True")


@dataclass(frozen=True)
class ExchangeSchedule:
    """The verified exchange schedule from ``src`` to ``dst`` in local terms.

    ``pieces[j]``: what rank ``j`` receives, as ``(sender, sender_slices,
    own_slices)`` (the sender is ``j`` itself for what it already holds),
    from ``Crossmesh.xplan`` on one mesh (``Exchangeproof.exchange_correct``:
    every position of every target block is filled exactly once, from a
    rank holding it; ``exchange_lower_bound``: what comes from others is the
    block less what the rank holds). Slices are local to each side's block:
    the sender's from the verified cell (block numbers) it sends from, the
    receiver's from its type's block starts.

    >>> from verishard import Mesh
    >>> m = Mesh.parse("x=2")
    >>> s = ExchangeSchedule.of(ArrayType.parse("[2{x}4]", m), ArrayType.parse("[4]", m))
    >>> [[(r, a[0].start, b[0].start, b[0].stop) for r, a, b in ps] for ps in s.pieces]
    [[(0, 0, 0, 2), (1, 0, 2, 4)], [(0, 0, 0, 2), (1, 0, 2, 4)]]
    >>> s.sends[0]
    ((1, (slice(0, 2, None),)),)
    """

    src: ArrayType
    dst: ArrayType
    pieces: tuple[tuple[tuple[int, tuple[slice, ...], tuple[slice, ...]], ...], ...]
    out_shape: tuple[int, ...]  # every rank's output: dst.local_shape, or a slab of it (restrict)

    @staticmethod
    @functools.lru_cache(maxsize=256)
    def of(src: ArrayType, dst: ArrayType) -> "ExchangeSchedule":
        """The schedule of ``src -> dst`` (cached per pair of types)."""
        n = src.mesh.num_devices
        sched = xplan(src, range(n), dst, range(n))
        if sched is None:  # plans holding an exchange come from echeck, which ran the same builder
            raise PlanError(f"the verified core refuses the exchange {src} -> {dst}")
        out = []
        for j, ps in enumerate(sched):
            d0 = dst.block_starts(j)
            out.append(tuple(
                (q.src,
                 # the sender's block starts at its cell (block numbers) times the padded block size
                 tuple(slice(a - k * c, a - k * c + l) for (a, l), k, c in zip(q.box, q.cell, src.local_shape)),
                 tuple(slice(a - o, a - o + l) for (a, l), o in zip(q.box, d0)))
                for q in ps if all(l > 0 for _, l in q.box)))
        return ExchangeSchedule(src, dst, tuple(out), dst.local_shape)

    @property
    def padded(self) -> bool:
        """Whether the output buffers have padding (uneven target): what the pieces
        do not fill is padding, set to the backend's padding value."""
        return self.dst.uneven

    def restrict(self, d: int, a: int, b: int) -> "ExchangeSchedule":
        """The schedule of positions ``[a, b)`` along dimension ``d``, which
        neither type shards (the plan's ``Exchange.dim``), on both sides
        re-indexed from ``a``: along such a dimension a piece is read at
        the coordinates it is written at (``Exchangeproof.exchange_chunk``;
        checked here), so slab ``[a, b)`` of the output comes from slab
        ``[a, b)`` of the input alone.

        >>> from verishard import Mesh
        >>> m = Mesh.parse("x=2")
        >>> s = ExchangeSchedule.of(ArrayType.parse("[2{x}4, 3]", m), ArrayType.parse("[4, 3]", m))
        >>> r = s.restrict(1, 1, 3)
        >>> r.out_shape, [(q, a[1], b[1]) for q, a, b in r.pieces[0]]
        ((4, 2), [(0, slice(0, 2, None), slice(0, 2, None)), (1, slice(0, 2, None), slice(0, 2, None))])
        """
        out = []
        for ps in self.pieces:
            qs = []
            for r, sa, sb in ps:
                if sa[d] != sb[d]:
                    raise RuntimeCheckError(f"exchange {self.src} -> {self.dst}: dimension {d} is not free")
                lo, hi = max(sa[d].start, a), min(sa[d].stop, b)
                if hi > lo:
                    cut = slice(lo - a, hi - a)
                    qs.append((r, sa[:d] + (cut,) + sa[d + 1:], sb[:d] + (cut,) + sb[d + 1:]))
            out.append(tuple(qs))
        shape = self.out_shape[:d] + (b - a,) + self.out_shape[d + 1:]
        return ExchangeSchedule(self.src, self.dst, tuple(out), shape)

    @functools.cached_property
    def sends(self) -> tuple[tuple[tuple[int, tuple[slice, ...]], ...], ...]:
        """``sends[r]``: ``(receiver, sender_slices)`` for every piece rank
        ``r`` sends another rank, in receiver order."""
        out: list[list[tuple[int, tuple[slice, ...]]]] = [[] for _ in self.pieces]
        for j, ps in enumerate(self.pieces):
            for r, a, _ in ps:
                if r != j:
                    out[r].append((j, a))
        return tuple(tuple(x) for x in out)


def reduction_identity(dtype: np.dtype, op: str):
    """The unit of reduction ``op`` for ``dtype`` (what ``to_partial`` fills
    the other devices with): 0 for a sum, the lowest value for a max, the
    highest for a min (infinities for floating dtypes that hold them).

    >>> reduction_identity(np.dtype(np.int32), "max"), reduction_identity(np.dtype(np.float32), "min")
    (-2147483648, inf)
    """
    if op not in NUMPY_REDUCE:
        raise ValueError(f"unknown reduction {op!r}; expected one of {', '.join(NUMPY_REDUCE)}")
    try:   # by name: ml_dtypes' bfloat16 and float8 too (those without infinities: their finite extremes)
        name = dtypes.name_of(dtype)
    except VerishardError:   # another numpy number type (longdouble, ...): numpy's own extremes
        if op == "sum":
            return 0
        if np.issubdtype(dtype, np.integer):
            return int(np.iinfo(dtype).max if op == "min" else np.iinfo(dtype).min)
        return np.inf if op == "min" else -np.inf
    return dtypes.reduction_unit(name, op)


def numpy_fit(x: np.ndarray, dim: int, n: int, pad=0) -> np.ndarray:
    """``fit`` for numpy arrays: ``x`` cut or padded with ``pad`` along ``dim``
    to length ``n`` (a new C-ordered array).

    >>> numpy_fit(np.arange(3), 0, 5, pad=-1).tolist(), numpy_fit(np.arange(3), 0, 2).tolist()
    ([0, 1, 2, -1, -1], [0, 1])
    """
    have = x.shape[dim]
    if have >= n:
        idx = [slice(None)] * x.ndim
        idx[dim] = slice(0, n)
        return np.array(x[tuple(idx)], order="C", copy=True)
    shape = list(x.shape)
    shape[dim] = n - have
    return np.concatenate([x, np.full(shape, pad, dtype=x.dtype)], axis=dim)


# The numpy reduction of each op, for the simulator and the tests.
NUMPY_REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


class Donated:
    """Hand an input over to the runtime: ``execute(plan, Donated(x), ...)``.

    The runtime then holds the only reference it keeps and drops it as soon
    as the first step has produced its output, so the source array does not
    stay resident for the whole plan (provided the caller keeps no other
    reference). The box is empty afterwards.

    >>> box = Donated(np.arange(3))
    >>> box.take().tolist(), box.value
    ([0, 1, 2], None)
    """

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def take(self) -> Any:
        """Return the value and empty the box; a second call raises :class:`RedistributionError`.

        >>> box = Donated("array")
        >>> box.take()
        'array'
        >>> box.take()
        Traceback (most recent call last):
        ...
        verishard.runtime.backend.RedistributionError: this Donated box was already used
        """
        if self.value is None:
            raise RedistributionError("this Donated box was already used")
        v, self.value = self.value, None
        return v


def validate_plan(plan: Plan) -> Plan:
    """The plan to execute: ``plan`` itself when this process made it from a
    verified report (:func:`verishard.plan.is_verified`), else ``plan``
    re-checked by the verified checker.

    Raises :class:`~verishard.errors.PlanError` when the checker rejects a step,
    or when the Plan object's recorded types, traffic or peak are not what the
    checker computes (a Plan built or edited by hand).

    >>> import dataclasses
    >>> p = naive_plan("x=2", "[2{x}4]", "[4]")
    >>> validate_plan(p) is p
    True
    >>> validate_plan(dataclasses.replace(p, peak=2))
    Traceback (most recent call last):
    ...
    verishard.errors.PlanError: the plan's recorded traffic or peak differ from the verified checker's
    """
    if is_verified(plan):
        return plan
    if not isinstance(plan, Plan):
        raise PlanError(f"expected a verishard Plan, not {type(plan).__name__}")
    if not isinstance(plan.mesh, Mesh):
        raise PlanError(f"the plan's mesh is a {type(plan.mesh).__name__}, not a Mesh")
    for i, s in enumerate(plan.steps, 1):
        if not isinstance(s, Step):
            raise PlanError(f"plan step {i} is a {type(s).__name__}, not a Step")
    ok = check(plan.mesh, plan.src, plan.dst, list(plan.collectives))
    if ok.types != plan.types:
        bad = next(i for i, (a, b) in enumerate(zip(ok.types, plan.types)) if a != b)
        raise PlanError(f"step {bad}: the plan records type {plan.types[bad]}, "
                        f"the verified checker computes {ok.types[bad]}", step=bad, reason="inconsistent_plan")
    if tuple(s.received for s in ok.steps) != tuple(s.received for s in plan.steps) or ok.peak != plan.peak:
        raise PlanError("the plan's recorded traffic or peak differ from the verified checker's",
                        reason="inconsistent_plan")
    return ok


def naive_plan(mesh: Mesh | str, src: ArrayType | str, dst: ArrayType | str) -> Plan:
    """The gather-everything-then-slice plan, checked by the verified checker:
    one multi-axis ``AllGather`` per sharded source dimension, then one
    multi-axis ``DynSlice`` per sharded target dimension.

    >>> p = naive_plan("x=2,y=3", "[3{x}6]", "[2{y}6]")
    >>> [str(c) for c in p.collectives], p.peak
    (['AllGather(0, x)', 'DynSlice(0, y)'], 6)
    """
    mesh = Mesh.coerce(mesh)
    src, dst = as_type(src, mesh), as_type(dst, mesh)
    steps: list[Collective] = [AllGather(d, mesh.names(src.dim_parts(d)))
                               for d in range(src.rank) if src.dim_parts(d)]
    steps += [DynSlice(d, mesh.names(dst.dim_parts(d))) for d in range(dst.rank) if dst.dim_parts(d)]
    return check(mesh, src, dst, steps)


def step_call(mesh: Mesh, t: ArrayType, c: Collective, op: str = "sum") -> tuple[str, tuple] | None:
    """The backend method and arguments for collective ``c`` applied to type
    ``t`` (pending reduction ``op``), or None when the step moves nothing.

    >>> m = Mesh.parse("x=2,y=3")
    >>> step_call(m, ArrayType.parse("[3{x}6]", m), DynSlice(0, "y"))
    ('dyn_slice', (0, AxisGroup(mesh={x:2, y:3}, parts=(1,))))
    >>> step_call(m, ArrayType.parse("[1{x,y}6]", m), AllPermute(ArrayType.parse("[1{y,x}6]", m)))
    ('all_permute', (array([0, 2, 4, 1, 3, 5]),))
    >>> step_call(Mesh.parse("x=1"), ArrayType.parse("[4]", "x=1"), DynSlice(0, "x")) is None
    True
    """
    if isinstance(c, Exchange):
        return "exchange", (ExchangeSchedule.of(t, c.target),)
    if isinstance(c, AllPermute):
        sources = permute_sources(t, c.target)
        if np.array_equal(sources, np.arange(len(sources))):
            return None
        return "all_permute", (sources,)
    group = AxisGroup.of(mesh, c.parts(mesh))
    if group.size == 1:
        return None
    if isinstance(c, AllGather):
        return "all_gather", (c.dim, group)
    if isinstance(c, DynSlice):
        return "dyn_slice", (c.dim, group)
    if isinstance(c, AllToAll):
        return "all_to_all", (c.src_dim, c.dst_dim, group)
    if isinstance(c, AllReduce):
        return "all_reduce", (group, op)
    if isinstance(c, ReduceScatter):
        return "reduce_scatter", (c.dim, group, op)
    if isinstance(c, ToPartial):
        return "to_partial", (group, op)
    raise PlanError(f"unknown collective {c!r}")  # pragma: no cover


def run_step(backend: Backend, call: tuple[str, tuple], x: Any, t: ArrayType, t2: ArrayType) -> Any:
    """One step ``t -> t2`` on ``backend``: the even collective ``call`` (from
    :func:`step_call`), between the pad and the cut that padded buffers of
    uneven types need (``fit``, called only where a padded size differs).

    >>> from verishard.runtime.simulator import SimBackend
    >>> m = Mesh.parse("x=2")
    >>> t, t2 = ArrayType.parse("[3{x}5]", m), ArrayType.parse("[5]", m)
    >>> ys = run_step(SimBackend(2, pad=-1), step_call(m, t, AllGather(0, "x")),
    ...               [np.array([0, 1, 2]), np.array([3, 4, -1])], t, t2)
    >>> [y.tolist() for y in ys]
    [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
    """
    name, args = call
    if name in ("dyn_slice", "reduce_scatter"):   # piece k of N: pad to N * c_out first
        d, group = args[0], args[1]
        if t.local_shape[d] != group.size * t2.local_shape[d]:
            x = backend.fit(x, d, group.size * t2.local_shape[d])
    elif name == "all_to_all":
        d, e, group = args
        if t.local_shape[e] != group.size * t2.local_shape[e]:
            x = backend.fit(x, e, group.size * t2.local_shape[e])
    y = getattr(backend, name)(x, *args)
    if name in ("all_gather", "all_to_all"):  # N blocks concatenated along d
        d, group = args[0], args[-1]
        if group.size * t.local_shape[d] != t2.local_shape[d]:
            y = backend.fit(y, d, t2.local_shape[d])
    return y


_METHOD = {AllGather: "all_gather", DynSlice: "dyn_slice", AllToAll: "all_to_all", AllPermute: "all_permute",
           AllReduce: "all_reduce", ReduceScatter: "reduce_scatter", ToPartial: "to_partial", Exchange: "exchange"}


def require_methods(plan: Plan, backend: Backend) -> None:
    """Refuse, before anything moves, a plan with a step ``backend`` does not
    implement (a :class:`Backend` subclass that leaves the base method).

    >>> from verishard import plan
    >>> class GatherOnly(Backend):
    ...     name = "gather-only"
    ...     def all_gather(self, x, dim, group): return x
    >>> require_methods(plan("x=2", "[2{x}4]", "[4]"), GatherOnly())
    >>> require_methods(plan("x=2,y=2", "[1{x,y}4, 4, 2]", "[4, 1{y,x}4, 2]", exchange=True), GatherOnly())
    Traceback (most recent call last):
    ...
    verishard.runtime.backend.UnsupportedStep: GatherOnly does not implement exchange: the gather-only backend does not run Exchange([4, 1{y,x}4, 2], dim=2) (step 1); plan without exchange=True
    """
    if not isinstance(backend, Backend):
        return
    for i, c in enumerate(plan.collectives, 1):
        name = _METHOD.get(type(c))
        if name is not None and getattr(type(backend), name) is getattr(Backend, name):
            hint = "; plan without exchange=True" if isinstance(c, Exchange) else ""
            raise UnsupportedStep(f"{type(backend).__name__} does not implement {name}: the {backend.name} "
                                  f"backend does not run {c} (step {i}){hint}")


def execute(plan: Plan, x: Any, backend: Backend,
            on_step: Callable[[int, Step, ArrayType, Any], None] | None = None) -> Any:
    """Run the steps of ``plan`` (already validated) on ``backend``; uneven
    plans on padded buffers (:func:`run_step`).

    ``x`` is the backend's value for the source (or ``Donated(value)``).
    ``on_step(i, step, type_before, y)`` is called after step ``i`` (from 1)
    with its result ``y``. Returns the final value.

    With the simulator's backend (every device's array in one list):

    >>> from verishard.runtime.simulator import SimBackend
    >>> p = naive_plan("x=2", "[2{x}4]", "[4]")
    >>> ys = execute(p, [np.array([0, 1]), np.array([2, 3])], SimBackend(2),
    ...              on_step=lambda i, step, t, y: print(i, step.collective, t, "->", step.type))
    1 AllGather(0, x) [2{x}4] -> [4]
    >>> [y.tolist() for y in ys]
    [[0, 1, 2, 3], [0, 1, 2, 3]]
    """
    require_methods(plan, backend)
    if isinstance(x, Donated):
        x = x.take()
    t, op = plan.src, plan.reduce
    for i, step in enumerate(plan.steps, 1):
        call = step_call(plan.mesh, t, step.collective, op)
        if call is not None:
            x = run_step(backend, call, x, t, step.type)
        if on_step is not None:
            on_step(i, step, t, x)
        t = step.type
    return x


__all__ = ["Backend", "AxisGroup", "Donated", "ExchangeSchedule", "require_methods", "execute", "run_step", "validate_plan", "naive_plan", "step_call",
           "reduction_identity", "NUMPY_REDUCE", "numpy_fit",
           "permute_sources", "RedistributionError", "RuntimeCheckError", "UnsupportedStep"]
