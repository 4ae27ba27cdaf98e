"""The JAX backend: the collectives of :mod:`verishard.runtime.backend`
with ``lax.all_gather``, ``lax.all_to_all``, ``lax.ppermute`` and local
``dynamic_slice`` inside ``jax.shard_map`` (on partial types ``lax.psum`` /
``pmax`` / ``pmin``, ``lax.psum_scatter`` and a local ``where``), driven by the shared executor
:func:`verishard.runtime.execute`; :func:`compile_plan` jits a plan,
:func:`execute` runs one on an array.

Importing this module imports JAX (set ``XLA_FLAGS`` before, for CPU devices).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh as JaxMesh
from jax.sharding import NamedSharding, PartitionSpec

from jax.sharding import AxisType

from .. import dtypes
from ..errors import ShardingError
from .sharding import (devices_of, cached_jax_mesh, from_named_sharding, jax_mesh, mesh_from_jax,
                       part_axis_types, to_named_sharding, to_partition_spec)
from ..mesh import Mesh
from ..plan import Plan
from ..runtime.backend import AxisGroup, Backend, reduction_identity, validate_plan
from ..runtime.backend import execute as run_steps

_REDUCE = {"sum": lax.psum, "max": lax.pmax, "min": lax.pmin}

__all__ = ["JaxBackend", "run_bits", "compile_plan", "execute", "rewrap", "padded_global_shape", "host_runs",
           "host_executor"]


class JaxBackend(Backend):
    """The collectives inside ``jax.shard_map`` over a JAX mesh whose
    axes are the parts of ``mesh`` (see :func:`jax_mesh`).

    Normally driven by :func:`execute`; its methods can also be called
    directly inside ``jax.shard_map``:

    >>> b = JaxBackend(Mesh.parse("x=2"))
    >>> b.name, b.all_names
    ('jax', ('x',))
    >>> x = jax.device_put(jnp.arange(4), NamedSharding(jax_mesh(b.mesh), PartitionSpec("x")))
    >>> g = AxisGroup.of(b.mesh, (0,))
    >>> f = jax.shard_map(lambda v: b.all_gather(v, 0, g), mesh=jax_mesh(b.mesh),
    ...                   in_specs=PartitionSpec("x"), out_specs=PartitionSpec(), check_vma=False)
    >>> [s.data.tolist() for s in f(x).addressable_shards]
    [[0, 1, 2, 3], [0, 1, 2, 3]]
    """

    name = "jax"

    def __init__(self, mesh: Mesh):
        self.mesh = mesh
        self.all_names = tuple(name for name, _ in mesh.parts)

    def all_gather(self, x, dim: int, group: AxisGroup):
        """``lax.all_gather(..., tiled=True)`` over the group's part names.

        >>> b = JaxBackend(Mesh.parse("x=2")); jm = jax_mesh(b.mesh)
        >>> x = jax.device_put(jnp.arange(4), NamedSharding(jm, PartitionSpec("x")))
        >>> f = jax.shard_map(lambda v: b.all_gather(v, 0, AxisGroup.of(b.mesh, (0,))), mesh=jm,
        ...                   in_specs=PartitionSpec("x"), out_specs=PartitionSpec(), check_vma=False)
        >>> f(x).tolist()
        [0, 1, 2, 3]
        """
        if dim == 0:
            return lax.all_gather(x, group.names, axis=0, tiled=True)
        # Gathered along a new leading axis, then moved into place by one local
        # copy: XLA's CPU all-gather along an inner dimension first transposes
        # the operand so that dimension is major, gathers, and transposes back
        # element by element (2-3x slower at 16 MiB; bench/jax_timing.py).
        y = lax.all_gather(x, group.names, axis=0, tiled=False)
        return _merge(y, 0, dim + 1)

    def dyn_slice(self, x, dim: int, group: AxisGroup):
        """Each device keeps its piece along ``dim`` (``lax.dynamic_slice_in_dim``); no communication.

        >>> b = JaxBackend(Mesh.parse("x=2")); jm = jax_mesh(b.mesh)
        >>> x = jax.device_put(jnp.arange(4), NamedSharding(jm, PartitionSpec()))
        >>> f = jax.shard_map(lambda v: b.dyn_slice(v, 0, AxisGroup.of(b.mesh, (0,))), mesh=jm,
        ...                   in_specs=PartitionSpec(), out_specs=PartitionSpec("x"), check_vma=False)
        >>> [s.data.tolist() for s in f(x).addressable_shards]
        [[0, 1], [2, 3]]
        """
        n = x.shape[dim] // group.size
        # the start is never negative: no wrap-around select (XLA's own slice has none)
        return lax.dynamic_slice_in_dim(x, lax.axis_index(group.names) * n, n, axis=dim, allow_negative_indices=False)

    def all_to_all(self, x, src_dim: int, dst_dim: int, group: AxisGroup):
        """``lax.all_to_all(..., tiled=True)``: split along ``dst_dim``, concatenate along ``src_dim``.

        From ``[2{x}4, 2]`` to ``[4, 1{x}2]``: same global array, other layout.

        >>> b = JaxBackend(Mesh.parse("x=2")); jm = jax_mesh(b.mesh)
        >>> x = jax.device_put(jnp.arange(8).reshape(4, 2), NamedSharding(jm, PartitionSpec("x")))
        >>> f = jax.shard_map(lambda v: b.all_to_all(v, 0, 1, AxisGroup.of(b.mesh, (0,))), mesh=jm,
        ...                   in_specs=PartitionSpec("x"), out_specs=PartitionSpec(None, "x"), check_vma=False)
        >>> y = f(x)
        >>> y.tolist(), [s.data.tolist() for s in y.addressable_shards]
        ([[0, 1], [2, 3], [4, 5], [6, 7]], [[[0], [2], [4], [6]], [[1], [3], [5], [7]]])
        """
        if src_dim == dst_dim:  # pragma: no cover - no checked plan has one
            return lax.all_to_all(x, group.names, split_axis=dst_dim, concat_axis=src_dim, tiled=True)
        # XLA's own layout (its SPMD partitioner's): the split dimension cut
        # into (n, rest), the exchange over that new axis alone (split ==
        # concat, so the received pieces keep their place: the axis becomes
        # the sender's index), then one local copy moves it in front of
        # src_dim. ``all_to_all(split_axis=dst_dim, concat_axis=src_dim)``
        # lowers on CPU to the same exchange plus a concatenation along the
        # split dimension and a transpose that XLA does not fuse: one more
        # pass over the block (1.4x slower for rows to columns at 16 MiB).
        n = group.size
        shape = list(x.shape)
        y = x.reshape(shape[:dst_dim] + [n, shape[dst_dim] // n] + shape[dst_dim + 1:])
        y = lax.all_to_all(y, group.names, split_axis=dst_dim, concat_axis=dst_dim, tiled=True)
        return _merge(y, dst_dim, src_dim if src_dim < dst_dim else src_dim + 1)

    def all_reduce(self, x, group: AxisGroup, op: str):
        """``lax.psum`` / ``lax.pmax`` / ``lax.pmin`` over the group's part names.

        >>> b = JaxBackend(Mesh.parse("x=2")); jm = jax_mesh(b.mesh)
        >>> x = jax.device_put(jnp.arange(4), NamedSharding(jm, PartitionSpec("x")))
        >>> f = jax.shard_map(lambda v: b.all_reduce(v, AxisGroup.of(b.mesh, (0,)), "max"), mesh=jm,
        ...                   in_specs=PartitionSpec("x"), out_specs=PartitionSpec("x"), check_vma=False)
        >>> f(x).tolist()
        [2, 3, 2, 3]
        """
        return _REDUCE[op](x, group.names)

    def reduce_scatter(self, x, dim: int, group: AxisGroup, op: str):
        """``lax.psum_scatter(..., tiled=True)`` for a sum; for max and min, which
        have no scatter primitive, ``pmax``/``pmin`` then this device's piece.

        >>> b = JaxBackend(Mesh.parse("x=2")); jm = jax_mesh(b.mesh)
        >>> x = jax.device_put(jnp.arange(8), NamedSharding(jm, PartitionSpec("x")))
        >>> f = jax.shard_map(lambda v: b.reduce_scatter(v, 0, AxisGroup.of(b.mesh, (0,)), "sum"), mesh=jm,
        ...                   in_specs=PartitionSpec("x"), out_specs=PartitionSpec("x"), check_vma=False)
        >>> f(x).tolist()
        [4, 6, 8, 10]
        """
        if op == "sum":
            return lax.psum_scatter(x, group.names, scatter_dimension=dim, tiled=True)
        return self.dyn_slice(_REDUCE[op](x, group.names), dim, group)

    def to_partial(self, x, group: AxisGroup, op: str):
        """Group index 0 keeps ``x``, the others hold the unit of ``op``; no communication.

        >>> b = JaxBackend(Mesh.parse("x=2")); jm = jax_mesh(b.mesh)
        >>> x = jax.device_put(jnp.arange(2), NamedSharding(jm, PartitionSpec()))
        >>> f = jax.shard_map(lambda v: b.to_partial(v, AxisGroup.of(b.mesh, (0,)), "sum"), mesh=jm,
        ...                   in_specs=PartitionSpec(), out_specs=PartitionSpec("x"), check_vma=False)
        >>> f(x).tolist()
        [0, 1, 0, 0]
        """
        unit = jnp.full_like(x, reduction_identity(np.dtype(x.dtype), op))
        return jnp.where(lax.axis_index(group.names) == 0, x, unit)

    def all_permute(self, x, sources: np.ndarray):
        """``lax.ppermute`` over every part name; devices with ``sources[c] == c`` keep ``x``.

        >>> b = JaxBackend(Mesh.parse("x=2")); jm = jax_mesh(b.mesh)
        >>> x = jax.device_put(jnp.arange(4), NamedSharding(jm, PartitionSpec("x")))
        >>> f = jax.shard_map(lambda v: b.all_permute(v, np.array([1, 0])), mesh=jm,
        ...                   in_specs=PartitionSpec("x"), out_specs=PartitionSpec("x"), check_vma=False)
        >>> f(x).tolist()
        [2, 3, 0, 1]
        """
        # The fixed ranks are pairs (c, c) of the one collective-permute (as in
        # XLA's own programs): XLA copies their block locally, where a
        # ``where(keep, x, ppermute(...))`` read both buffers on every device
        # and wrote a third (1.4x slower at 16 MiB).
        return lax.ppermute(x, self.all_names, [(int(s), c) for c, s in enumerate(sources)])

    def fit(self, x, dim: int, n: int):
        """The local buffer cut (``lax.slice_in_dim``) or zero-padded at the end
        (``jnp.pad``) to ``n`` along ``dim``: the padded buffers of uneven
        types between the even collectives (``backend.run_step``); local, no
        communication. Zero, not garbage, so that padding never holds a NaN
        or an infinity that a later reduction could spread (the verified
        checker proves that no padding reaches a valid position anyway).

        >>> b = JaxBackend(Mesh.parse("x=2"))
        >>> b.fit(jnp.arange(3), 0, 5).tolist(), b.fit(jnp.arange(6).reshape(2, 3), 1, 2).tolist()
        ([0, 1, 2, 0, 0], [[0, 1], [3, 4]])
        """
        have = x.shape[dim]
        if have == n:
            return x
        if have > n:
            return lax.slice_in_dim(x, 0, n, axis=dim)
        widths = [(0, 0)] * x.ndim
        widths[dim] = (0, n - have)
        return jnp.pad(x, widths)


def _merge(y, k: int, d: int):
    """``y`` with its axis ``k`` (a device index of size ``n``) merged into
    axis ``d`` as its major part: axis ``k`` moved to just before axis ``d``,
    the two made one of ``n`` times the size (one local copy, none when
    ``k`` is already there). ``d`` is counted in ``y``'s axes, ``k != d``.

    >>> _merge(jnp.arange(12).reshape(2, 3, 2), 0, 2).tolist()
    [[0, 1, 6, 7], [2, 3, 8, 9], [4, 5, 10, 11]]
    """
    to = d if d < k else d - 1  # where axis d is once axis k is gone
    y = jnp.moveaxis(y, k, to)
    shape = list(y.shape)
    return y.reshape(shape[:to] + [shape[to] * shape[to + 1]] + shape[to + 2:])


def padded_global_shape(t) -> tuple[int, ...]:
    """The global shape whose even blocks are the padded buffers of ``t``:
    per dimension the number of blocks times the block size ``ceil(g / n)``
    (``t.global_shape`` itself for an even type). ``shard_map`` runs uneven
    plans on arrays of this shape, since it wants shapes its specs divide.

    >>> from verishard import ArrayType
    >>> padded_global_shape(ArrayType.parse("[2{x,y}5, 7]", "x=2,y=2"))
    (8, 7)
    """
    sizes = t.mesh.part_sizes
    out = []
    for d, c in zip(t.dims, t.local_shape):
        n = 1
        for q in d.parts:
            n *= sizes[q]
        out.append(n * c)
    return tuple(out)


def _pending(plan: Plan) -> bool:
    return bool(plan.src.partial or plan.dst.partial)


def _same_layout_mesh(plan: Plan, jmesh: JaxMesh) -> JaxMesh:
    """The JAX mesh the plan runs on: ``jmesh`` itself when the plan's mesh is
    the user's, else the parts-level mesh over the same devices (each part
    with its axis's type when the plan has pending axes, which JAX wants
    Explicit)."""
    if mesh_from_jax(jmesh) == plan.mesh and len(plan.mesh.parts) == len(plan.mesh.axes):
        return jmesh
    types = part_axis_types(plan.mesh, jmesh) if _pending(plan) else None
    return cached_jax_mesh(plan.mesh, tuple(d.id for d in jmesh.devices.flat), types)


def run_bits(plan: Plan, x, backend: "JaxBackend"):
    """The plan's steps on one device's block ``x`` (traced, inside a
    ``shard_map``), bit-exact: where no step reduces, bfloat16 and the
    float8 types (``verishard.dtypes.LOW_PRECISION``) move as the unsigned
    integers of their width (a bitcast), since XLA's collectives on CPU
    change their NaN payloads (XLA's own resharding, a jitted
    ``with_sharding_constraint``, changes them too; float16, float32 and
    float64 keep them). Reductions run on the dtype itself."""
    if _pending(plan) or np.dtype(x.dtype).name not in dtypes.LOW_PRECISION:
        return run_steps(plan, x, backend)
    bits = jnp.dtype(f"uint{8 * jnp.dtype(x.dtype).itemsize}")
    return lax.bitcast_convert_type(run_steps(plan, lax.bitcast_convert_type(x, bits), backend), x.dtype)


@functools.lru_cache(maxsize=512)
def _compiled(plan: Plan, jm: JaxMesh):
    in_spec = to_partition_spec(plan.src, parts=True)
    out_spec = to_partition_spec(plan.dst, parts=True)
    backend = JaxBackend(plan.mesh)

    def body(x):
        return run_bits(plan, x, backend)

    return jax.jit(jax.shard_map(body, mesh=jm, in_specs=in_spec, out_specs=out_spec, check_vma=False))


def compile_plan(plan: Plan, mesh: JaxMesh | Sequence | None = None):
    """The jitted ``shard_map`` function that runs ``plan`` (cached); its
    argument is an array laid out as ``plan.src`` on the returned mesh.

    Returns ``(fn, jax_mesh)``. ``mesh`` is the user's JAX mesh (or devices).
    A plan with pending axes (a pending sum: JAX's ``unreduced``) runs on a
    mesh of ``AxisType.Explicit`` axes, as JAX requires; a pending max or min
    has no JAX spelling (:func:`verishard.jax.reshard_local` runs it inside a
    ``shard_map`` of your own).

    >>> from verishard import plan
    >>> p = plan("x=2", "[2{x}4]", "[4]")
    >>> fn, jm = compile_plan(p, jax.devices()[:2])
    >>> jm.axis_names, [d.id for d in jm.devices.flat]
    (('x',), [0, 1])
    >>> fn(jax.device_put(jnp.arange(4), to_named_sharding(p.src, jm))).sharding.spec
    P()
    """
    if isinstance(mesh, JaxMesh):
        jm = _same_layout_mesh(plan, mesh)
    else:
        devs = devices_of(mesh) if mesh is not None else jax.devices()[:plan.mesh.num_devices]
        types = (AxisType.Explicit,) * len(plan.mesh.parts) if _pending(plan) else None
        jm = cached_jax_mesh(plan.mesh, tuple(d.id for d in devs), types)
    return _compiled(plan, jm), jm


def host_runs(plan: Plan, jmesh: JaxMesh) -> bool:
    """Whether :func:`host_executor` runs ``plan`` on ``jmesh``: every device a
    CPU device of this process (they share the host's memory), even types
    with nothing pending (JAX places no uneven or unreduced arrays from host
    blocks)."""
    return (all(d.platform == "cpu" and d.process_index == jax.process_index() for d in jmesh.devices.flat)
            and not (plan.src.uneven or plan.dst.uneven or _pending(plan)))


def host_executor(plan: Plan, in_sharding: NamedSharding, out_sharding: NamedSharding):
    """A function that runs ``plan`` on an array laid out as ``in_sharding``
    over CPU devices (:func:`host_runs`) and returns it laid out as
    ``out_sharding``, with no XLA program: the devices' blocks are read in
    place (NumPy views of their buffers), the plan's steps run on them as
    the simulator moves data (:class:`~verishard.runtime.simulator.HostBackend`,
    driven step by step by :func:`verishard.runtime.backend.run_step`), and
    each device is handed its block of the result (one batched transfer, as
    ``jax.device_put`` hands out host data; the blocks are made read-only,
    so JAX takes them without copying and keeps them alive). XLA's CPU
    collectives are rendezvous of threads, slower than host copies on small
    arrays; on CPU devices ``jax.device_put`` copies through the host too.

    >>> from verishard import plan
    >>> p = plan("x=2", "[2{x}4]", "[4]")
    >>> jm = jax_mesh(p.mesh, jax.devices()[:2])
    >>> run = host_executor(p, to_named_sharding(p.src, jm), to_named_sharding(p.dst, jm))
    >>> y = run(jax.device_put(jnp.arange(4), to_named_sharding(p.src, jm)))
    >>> [s.data.tolist() for s in y.addressable_shards], y.sharding.spec
    ([[0, 1, 2, 3], [0, 1, 2, 3]], P(None,))
    """
    from jax._src import core as jax_core
    from jax._src.interpreters import pxla
    from ..runtime.backend import run_step, step_call
    from ..runtime.simulator import HostBackend

    devices = list(in_sharding.mesh.devices.flat)      # plan rank r is the mesh's r-th device (row-major)
    if list(out_sharding.mesh.devices.flat) != devices:
        raise ShardingError("host_executor: the source and the target sharding must be over the same devices")
    rank_of = {d: r for r, d in enumerate(devices)}
    backend = HostBackend(len(devices))
    calls, t = [], plan.src
    for step in plan.steps:
        call = step_call(plan.mesh, t, step.collective, plan.reduce)
        if call is not None:
            calls.append((call, t, step.type))
        t = step.type
    avals: dict = {}

    def run(x: jax.Array) -> jax.Array:
        xs: list = [None] * len(devices)
        for shard in x.addressable_shards:
            xs[rank_of[shard.device]] = np.asarray(shard.data)
        for call, t1, t2 in calls:
            xs = run_step(backend, call, xs, t1, t2)
        for y in xs:   # read-only, as nothing writes them again: JAX then takes them without a copy
            y.flags.writeable = False
        if out_sharding.is_fully_replicated and any(y is not xs[0] for y in xs):
            return place_replicated(x, xs)
        return pxla.batched_device_put(aval_of(x, out_sharding), out_sharding, xs, devices)

    def aval_of(x, sharding):
        key = (x.dtype, sharding)
        if key not in avals:
            avals[key] = jax_core.update_aval_with_sharding(jax_core.ShapedArray(x.shape, x.dtype), sharding)
        return avals[key]

    sub_shardings: dict = {}

    def place_replicated(x, xs):
        # JAX's batched put takes one value for a replicated sharding (its replicas are equal by
        # contract); the plan gave each gather group its own array: each goes to its own devices
        # (as one replicated put each), and the result is assembled from the devices' arrays
        holders: dict = {}
        for r, y in enumerate(xs):
            holders.setdefault(id(y), (y, []))[1].append(r)
        singles = [None] * len(devices)
        for y, ranks in holders.values():
            sub = sub_shardings.get(tuple(ranks))
            if sub is None:
                sub = sub_shardings[tuple(ranks)] = NamedSharding(
                    JaxMesh(np.array([devices[r] for r in ranks]), ("holders",)), PartitionSpec())
            put = pxla.batched_device_put(aval_of(x, sub), sub, [y] * len(ranks), [devices[r] for r in ranks])
            for shard in put.addressable_shards:
                singles[rank_of[shard.device]] = shard.data
        return jax.make_array_from_single_device_arrays(x.shape, out_sharding, singles)

    return run


def rewrap(x: jax.Array, sharding: NamedSharding) -> jax.Array:
    """The same device buffers under another sharding of the same layout (no copy)."""
    if x.sharding == sharding:
        return x
    return jax.make_array_from_single_device_arrays(x.shape, sharding, [s.data for s in x.addressable_shards])


def _check_pending(plan: Plan, x: jax.Array) -> None:
    """The array's unreduced axes are the plan's pending axes (the rest of the
    layout is the caller's promise; a wrong pending set would silently scale
    the data)."""
    sh = getattr(x, "sharding", None)
    got = set(sh.spec.unreduced) if isinstance(sh, NamedSharding) else set()
    parts: set[int] = set()
    for name in got:
        try:
            parts.update(plan.mesh.resolve(name))
        except ShardingError:
            parts.add(-1)
    if parts != set(plan.src.partial):
        raise ShardingError(f"execute: the array's unreduced axes {sorted(got)} are not the pending axes of the "
                            f"plan's source {plan.src}")


def execute(plan: Plan, x: jax.Array, mesh: JaxMesh | None = None, check: bool = True) -> jax.Array:
    """Run a checked plan on ``x`` (laid out as ``plan.src``); returns the
    array laid out as ``plan.dst``, with a sharding over ``mesh`` (default:
    ``x``'s JAX mesh) when the plan's mesh is the user's.

    ``check`` re-checks the plan with the verified checker first. A source
    with pending axes is an array whose sharding has those ``unreduced`` axes
    (each device holds a term of the sum), on a mesh of Explicit axes.

    An uneven plan runs on padded global arrays, since JAX holds no array
    whose shape its sharding does not divide: ``x`` is the global array
    padded at the end of every dimension to :func:`padded_global_shape` of
    ``plan.src``, and so is the result (for ``plan.dst``; its first
    ``plan.dst.global_shape`` positions are the array, the rest is padding).

    >>> from verishard import plan
    >>> p = plan("x=2", "[2{x}4]", "[4]")
    >>> x = jax.device_put(jnp.arange(4), to_named_sharding(p.src, jax_mesh(p.mesh)))
    >>> y = execute(p, x)
    >>> y.tolist(), from_named_sharding(y.sharding, y.shape)
    ([0, 1, 2, 3], [4])
    """
    if check:
        plan = validate_plan(plan)
    if plan.src.uneven or plan.dst.uneven:
        want = padded_global_shape(plan.src)
        if tuple(np.shape(x)) != want:
            raise ShardingError(f"execute: the plan {plan.src} -> {plan.dst} is uneven; JAX holds no array whose "
                                f"shape its sharding does not divide, so pass the array padded at the end of every "
                                f"dimension to {want}, not one of shape {tuple(np.shape(x))} (or use "
                                f"verishard.jax.reshard under jax.jit)")
    if mesh is None:
        sh = getattr(x, "sharding", None)
        mesh = sh.mesh if isinstance(sh, NamedSharding) else None
    fn, jm = compile_plan(plan, mesh)
    src_sh = NamedSharding(jm, to_partition_spec(plan.src, parts=True))
    if not isinstance(x, jax.Array):
        if plan.src.partial:
            raise ShardingError(f"execute: the source {plan.src} has pending axes, so it must be a jax.Array whose "
                                f"sharding has them unreduced (jax.device_put cannot make one from host data)")
        x = jax.device_put(x, src_sh)
    else:
        _check_pending(plan, x)
        x = rewrap(x, src_sh)
    return rewrap(fn(x), NamedSharding(jm, to_partition_spec(plan.dst, parts=True)))
