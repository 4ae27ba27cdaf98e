"""JAX: conversions to and from ``PartitionSpec``/``NamedSharding``, and a JAX
backend that runs checked plans inside ``jax.shard_map``.

Conversions (``entries`` level parsing lives in :mod:`verishard.notation`):

* :func:`mesh_from_jax` / :func:`jax_mesh`: our :class:`~verishard.mesh.Mesh`
  and ``jax.sharding.Mesh`` (axes in order, devices in rank order, i.e.
  row-major, as ``np.array(devices).reshape(sizes)``). A mesh with split
  axes becomes a JAX mesh over its parts (``y.0``, ``y.1``): the same devices
  in the same order, so a sharding over whole axes is the same layout.
* :func:`from_partition_spec`, :func:`to_partition_spec`,
  :func:`from_named_sharding`, :func:`to_named_sharding`: tuples of axes are
  major to minor, ``None`` is replicated, and ``P.UNCONSTRAINED`` is refused
  with a :class:`~verishard.errors.ShardingError`.

Execution:

* :class:`JaxBackend`: the four collectives of
  :mod:`verishard.runtime.backend` with ``lax.all_gather``,
  ``lax.all_to_all``, ``lax.ppermute`` and local ``dynamic_slice``; driven by
  the shared executor :func:`verishard.runtime.execute`.
* :func:`execute`: run a checked :class:`~verishard.plan.Plan` on an array.
* :func:`reshard`: drop-in for ``jax.device_put(x, sharding)`` between
  ``NamedSharding``\\ s of one mesh: plans with :func:`verishard.plan` and
  executes the plan.

Importing this module imports JAX (set ``XLA_FLAGS`` before, for CPU devices).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh as JaxMesh
from jax.sharding import NamedSharding, PartitionSpec

from . import notation
from .errors import ShardingError, VerishardError
from .mesh import Mesh
from .plan import Plan
from .plan import plan as synthesize
from .runtime.backend import AxisGroup, Backend, validate_plan
from .runtime.backend import execute as run_steps
from .sharding import ArrayType

__all__ = ["mesh_from_jax", "jax_mesh", "spec_entries", "from_partition_spec", "to_partition_spec",
           "from_named_sharding", "to_named_sharding", "JaxBackend", "execute", "reshard", "compile_plan"]


# ---------------------------------------------------------------------------
# meshes


def mesh_from_jax(jmesh: JaxMesh) -> Mesh:
    """Our mesh for a ``jax.sharding.Mesh`` (axis names and sizes, in order).

    Part names of a parts-level JAX mesh (``y.0``, ``y.1``, as made by
    :func:`jax_mesh`) are folded back into a split axis.

    >>> mesh_from_jax(JaxMesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y")))
    {x:2, y:2}
    >>> mesh_from_jax(jax_mesh("x=2,y=2*2"))
    {x:2, y:2*2}
    """
    if not isinstance(jmesh, JaxMesh):
        raise ShardingError(f"expected a jax.sharding.Mesh, not {type(jmesh).__name__}")
    axes: list[tuple[str, Any]] = []
    for name, size in jmesh.shape.items():
        if not isinstance(name, str):
            raise ShardingError(f"JAX mesh axis name {name!r} is not a string")
        base, dot, idx = name.partition(".")
        if dot and idx.isdigit() and axes and axes[-1][0] == base:
            prev = axes[-1][1]
            axes[-1] = (base, (*(prev if isinstance(prev, tuple) else (prev,)), size))
        elif dot and idx == "0":
            axes.append((base, (size,)))
        else:
            axes.append((name, size))
    return Mesh(tuple((n, s[0] if isinstance(s, tuple) and len(s) == 1 else s) for n, s in axes))


def _devices(jmesh_or_devices) -> list:
    if isinstance(jmesh_or_devices, JaxMesh):
        return list(jmesh_or_devices.devices.flat)
    return list(jmesh_or_devices)


def jax_mesh(mesh: Mesh | str, devices: Sequence | JaxMesh | None = None) -> JaxMesh:
    """A ``jax.sharding.Mesh`` for ``mesh`` over ``devices`` (default: the
    first ``N`` of ``jax.devices()``), devices in rank order.

    Unsplit axes keep their names; a split axis ``y=2*2`` becomes the parts
    ``y.0`` and ``y.1``.

    >>> jm = jax_mesh("x=2,y=2*2")
    >>> jm.axis_names, [d.id for d in jm.devices.flat]
    (('x', 'y.0', 'y.1'), [0, 1, 2, 3, 4, 5, 6, 7])
    """
    if isinstance(mesh, str):
        mesh = Mesh.parse(mesh)
    devs = _devices(devices) if devices is not None else jax.devices()[:mesh.num_devices]
    if len(devs) != mesh.num_devices:
        raise ShardingError(f"mesh {mesh} needs {mesh.num_devices} devices, got {len(devs)}")
    names = tuple(name for name, _ in mesh.parts)
    return JaxMesh(np.array(devs, dtype=object).reshape(mesh.part_sizes), names)


@functools.lru_cache(maxsize=256)
def _jax_mesh_cached(mesh: Mesh, device_ids: tuple[int, ...]) -> JaxMesh:
    by_id = {d.id: d for d in jax.devices()}
    return jax_mesh(mesh, [by_id[i] for i in device_ids])


# ---------------------------------------------------------------------------
# PartitionSpec and NamedSharding


def spec_entries(spec: PartitionSpec | Sequence) -> tuple:
    """The entries of a ``PartitionSpec`` as plain data (None or a tuple of
    names per dimension); unconstrained dimensions and unreduced/reduced axes
    are refused.

    >>> spec_entries(PartitionSpec('x', None, ('y', 'z')))
    (('x',), None, ('y', 'z'))
    >>> spec_entries(PartitionSpec('x', PartitionSpec.UNCONSTRAINED))
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: dimension 1 of PartitionSpec('x', UNCONSTRAINED) is unconstrained: the compiler picks its sharding, so it is not a sharding to redistribute
    """
    if isinstance(spec, (str, bytes)):
        raise ShardingError(f"expected a PartitionSpec, not the string {spec!r}; "
                            f"parse text with verishard.notation.parse_partition_spec")
    for attr in ("unreduced", "reduced"):
        if getattr(spec, attr, None):
            raise ShardingError(f"PartitionSpec {spec} has {attr} axes {sorted(getattr(spec, attr))}: "
                                f"pending reductions are not a sharding")
    out = []
    for i, e in enumerate(spec):
        if e is PartitionSpec.UNCONSTRAINED:
            raise ShardingError(f"dimension {i} of {_show_spec(spec)} is unconstrained: the compiler picks its "
                                f"sharding, so it is not a sharding to redistribute")
        if e is None or e == ():
            out.append(None)
        elif isinstance(e, str):
            out.append((e,))
        elif isinstance(e, (tuple, list)):
            out.append(tuple(e))
        else:
            raise ShardingError(f"dimension {i} of {_show_spec(spec)}: entry {e!r} is not None, "
                                f"an axis name or a tuple of names")
    return tuple(notation._normalise_entries(out)) if out else ()


def _show_spec(spec) -> str:
    if isinstance(spec, PartitionSpec):
        return "PartitionSpec(" + ", ".join("UNCONSTRAINED" if e is PartitionSpec.UNCONSTRAINED else repr(e)
                                             for e in spec) + ")"
    return repr(spec)


def from_partition_spec(mesh: Mesh | JaxMesh | str, global_shape: Sequence[int],
                        spec: PartitionSpec | Sequence) -> ArrayType:
    """Our type for a ``PartitionSpec`` over ``mesh`` and a global shape.

    >>> from_partition_spec(Mesh.parse("x=2,y=2"), (8, 4), PartitionSpec(('y', 'x')))
    [2{y,x}8, 4]
    """
    if isinstance(mesh, JaxMesh):
        mesh = mesh_from_jax(mesh)
    return notation.from_partition_spec(mesh, global_shape, spec_entries(spec))


def to_partition_spec(t: ArrayType, parts: bool = False) -> PartitionSpec:
    """The ``PartitionSpec`` of ``t`` (one entry per dimension; a single axis
    as a bare name). Whole axes only, unless ``parts`` is set: then every
    entry names mesh parts (``'y.0'``), for a JAX mesh made by :func:`jax_mesh`.

    >>> to_partition_spec(ArrayType.parse("[2{y,x}8, 4]", "x=2,y=2"))
    P(('y', 'x'), None)
    >>> to_partition_spec(ArrayType.parse("[2{y.1}4]", "y=2*2"), parts=True)
    P('y.1',)
    """
    if parts:
        entries = [tuple(t.mesh.part_name(p) for p in t.dim_parts(d)) or None for d in range(t.rank)]
    else:
        entries = list(notation.to_partition_spec(t))
    return PartitionSpec(*[None if e is None else e[0] if len(e) == 1 else tuple(e) for e in entries])


def from_named_sharding(sharding: NamedSharding, global_shape: Sequence[int]) -> ArrayType:
    """Our type for a ``NamedSharding`` of an array of ``global_shape``.

    >>> from_named_sharding(NamedSharding(jax_mesh("x=2"), PartitionSpec(None, "x")), (3, 4))
    [3, 2{x}4]
    """
    if not isinstance(sharding, NamedSharding):
        raise ShardingError(f"expected a jax.sharding.NamedSharding, not {type(sharding).__name__}")
    return from_partition_spec(mesh_from_jax(sharding.mesh), global_shape, sharding.spec)


def to_named_sharding(t: ArrayType, mesh: JaxMesh | Sequence | None = None) -> NamedSharding:
    """A ``NamedSharding`` with the layout of ``t``.

    ``mesh`` is a JAX mesh with the axes of ``t.mesh`` (or a device list, or
    None for the first devices). A type over split axes gets a parts-level
    mesh over the same devices (see :func:`jax_mesh`).

    >>> to_named_sharding(ArrayType.parse("[2{x}4]", "x=2"), jax_mesh("x=2"))
    NamedSharding(mesh=Mesh('x': 2, axis_types=(Auto,)), spec=P('x',), memory_kind=device)
    >>> s = to_named_sharding(ArrayType.parse("[1{y}4]", "y=2*2"))
    >>> s.mesh.axis_names, s.spec
    (('y.0', 'y.1'), P(('y.0', 'y.1'),))
    """
    split = len(t.mesh.parts) != len(t.mesh.axes)
    if isinstance(mesh, JaxMesh) and not split:
        if mesh_from_jax(mesh) != t.mesh:
            raise ShardingError(f"JAX mesh {dict(mesh.shape)} is not the mesh {t.mesh} of type {t}")
        return NamedSharding(mesh, to_partition_spec(t))
    jm = jax_mesh(t.mesh, mesh)
    return NamedSharding(jm, to_partition_spec(t, parts=True))


# ---------------------------------------------------------------------------
# the backend


class JaxBackend(Backend):
    """The four collectives inside ``jax.shard_map`` over a JAX mesh whose
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
        return lax.all_gather(x, group.names, axis=dim, tiled=True)

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
        return lax.dynamic_slice_in_dim(x, lax.axis_index(group.names) * n, n, axis=dim)

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
        return lax.all_to_all(x, group.names, split_axis=dst_dim, concat_axis=src_dim, tiled=True)

    def all_permute(self, x, sources: np.ndarray):
        """``lax.ppermute`` over every part name; devices with ``sources[c] == c`` keep ``x``.

        >>> b = JaxBackend(Mesh.parse("x=2")); jm = jax_mesh(b.mesh)
        >>> x = jax.device_put(jnp.arange(4), NamedSharding(jm, PartitionSpec("x")))
        >>> f = jax.shard_map(lambda v: b.all_permute(v, np.array([1, 0])), mesh=jm,
        ...                   in_specs=PartitionSpec("x"), out_specs=PartitionSpec("x"), check_vma=False)
        >>> f(x).tolist()
        [2, 3, 0, 1]
        """
        pairs = [(int(s), c) for c, s in enumerate(sources) if s != c]
        y = lax.ppermute(x, self.all_names, pairs)
        fixed = np.array([s == c for c, s in enumerate(sources)])
        if not fixed.any():
            return y
        keep = jnp.asarray(fixed)[lax.axis_index(self.all_names)]
        return jnp.where(keep, x, y)


def _same_layout_mesh(plan: Plan, jmesh: JaxMesh) -> JaxMesh:
    """The JAX mesh the plan runs on: ``jmesh`` itself when the plan's mesh is
    the user's, else the parts-level mesh over the same devices."""
    if mesh_from_jax(jmesh) == plan.mesh and len(plan.mesh.parts) == len(plan.mesh.axes):
        return jmesh
    return _jax_mesh_cached(plan.mesh, tuple(d.id for d in jmesh.devices.flat))


@functools.lru_cache(maxsize=512)
def _compiled(plan: Plan, jm: JaxMesh):
    in_spec = to_partition_spec(plan.src, parts=True)
    out_spec = to_partition_spec(plan.dst, parts=True)
    backend = JaxBackend(plan.mesh)

    def body(x):
        return run_steps(plan, x, backend)

    return jax.jit(jax.shard_map(body, mesh=jm, in_specs=in_spec, out_specs=out_spec, check_vma=False))


def compile_plan(plan: Plan, mesh: JaxMesh | Sequence | None = None):
    """The jitted ``shard_map`` function that runs ``plan`` (cached); its
    argument is an array laid out as ``plan.src`` on the returned mesh.

    Returns ``(fn, jax_mesh)``. ``mesh`` is the user's JAX mesh (or devices).

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
        devs = _devices(mesh) if mesh is not None else jax.devices()[:plan.mesh.num_devices]
        jm = _jax_mesh_cached(plan.mesh, tuple(d.id for d in devs))
    return _compiled(plan, jm), jm


def _rewrap(x: jax.Array, sharding: NamedSharding) -> jax.Array:
    """The same device buffers under another sharding of the same layout (no copy)."""
    if x.sharding == sharding:
        return x
    return jax.make_array_from_single_device_arrays(x.shape, sharding, [s.data for s in x.addressable_shards])


def execute(plan: Plan, x: jax.Array, mesh: JaxMesh | None = None, check: bool = True) -> jax.Array:
    """Run a checked plan on ``x`` (laid out as ``plan.src``); returns the
    array laid out as ``plan.dst``, with a sharding over ``mesh`` (default:
    ``x``'s JAX mesh) when the plan's mesh is the user's.

    ``check`` re-checks the plan with the verified checker first.

    >>> from verishard import plan
    >>> p = plan("x=2", "[2{x}4]", "[4]")
    >>> x = jax.device_put(jnp.arange(4), to_named_sharding(p.src, jax_mesh(p.mesh)))
    >>> y = execute(p, x)
    >>> y.tolist(), from_named_sharding(y.sharding, y.shape)
    ([0, 1, 2, 3], [4])
    """
    if check:
        plan = validate_plan(plan)
    if mesh is None:
        sh = getattr(x, "sharding", None)
        mesh = sh.mesh if isinstance(sh, NamedSharding) else None
    fn, jm = compile_plan(plan, mesh)
    src_sh = NamedSharding(jm, to_partition_spec(plan.src, parts=True))
    if not isinstance(x, jax.Array):
        x = jax.device_put(x, src_sh)
    else:
        x = _rewrap(x, src_sh)
    return _rewrap(fn(x), NamedSharding(jm, to_partition_spec(plan.dst, parts=True)))


# ---------------------------------------------------------------------------
# reshard


@functools.lru_cache(maxsize=1024)
def _plan_for(mesh: Mesh, src: ArrayType, dst: ArrayType) -> Plan:
    return synthesize(mesh, src, dst)


def _same_devices(a: JaxMesh, b: JaxMesh) -> bool:
    return (tuple(a.axis_names) == tuple(b.axis_names) and a.devices.shape == b.devices.shape
            and all(x.id == y.id for x, y in zip(a.devices.flat, b.devices.flat)))


def reshard(x: jax.Array, sharding: NamedSharding, *, plan: Plan | None = None) -> jax.Array:
    """``jax.device_put(x, sharding)`` by a verified plan.

    ``x`` is a ``jax.Array`` with a ``NamedSharding`` over the same JAX mesh as
    ``sharding`` (same axes, same devices in the same order). The plan comes
    from :func:`verishard.plan` (or ``plan``, re-checked), runs as one jitted
    ``shard_map``, and the result has exactly ``sharding``. Anything else (a
    NumPy array, another mesh, another memory kind) is refused with a
    :class:`~verishard.errors.ShardingError`: there is nothing to redistribute
    among one mesh's devices, use ``jax.device_put``.

    >>> jm = jax_mesh("x=2")
    >>> x = jax.device_put(jnp.arange(4), NamedSharding(jm, PartitionSpec("x")))
    >>> y = reshard(x, NamedSharding(jm, PartitionSpec()))
    >>> y.tolist(), y.sharding.spec, [s.data.tolist() for s in y.addressable_shards]
    ([0, 1, 2, 3], P(), [[0, 1, 2, 3], [0, 1, 2, 3]])
    >>> reshard(np.arange(4), NamedSharding(jm, PartitionSpec()))
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: reshard needs a jax.Array laid out on the mesh, not ndarray; use jax.device_put for host data
    """
    if not isinstance(sharding, NamedSharding):
        raise ShardingError(f"reshard needs a jax.sharding.NamedSharding, not {type(sharding).__name__}")
    if not isinstance(x, jax.Array):
        raise ShardingError(f"reshard needs a jax.Array laid out on the mesh, not {type(x).__name__}; "
                            f"use jax.device_put for host data")
    src_sh = x.sharding
    if not isinstance(src_sh, NamedSharding) or not _same_devices(src_sh.mesh, sharding.mesh):
        raise ShardingError("reshard moves data between NamedShardings of one JAX mesh; "
                            f"the array has {src_sh}, the target is over another mesh or devices")
    if src_sh.memory_kind != sharding.memory_kind:
        raise ShardingError(f"reshard keeps the memory kind; the array is in {src_sh.memory_kind}, "
                            f"the target in {sharding.memory_kind}")
    mesh = mesh_from_jax(sharding.mesh)
    src = from_partition_spec(mesh, x.shape, src_sh.spec)
    dst = from_partition_spec(mesh, x.shape, sharding.spec)
    if plan is None:
        p = _plan_for(mesh, src, dst)
    else:
        p = validate_plan(plan)
        if p.src.refined() != src.refined() or p.dst.refined() != dst.refined():
            raise VerishardError(f"the plan goes from {p.src} to {p.dst}, not from {src} to {dst}")
    y = execute(p, x, mesh=sharding.mesh, check=False)
    return _rewrap(y, sharding)
