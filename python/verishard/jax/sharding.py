"""Conversions between our types and ``jax.sharding``: meshes,
``PartitionSpec`` and ``NamedSharding`` (entries-level parsing lives in
:mod:`verishard.notation`).

* :func:`mesh_from_jax` / :func:`jax_mesh`: our :class:`~verishard.mesh.Mesh`
  and ``jax.sharding.Mesh`` (axes in order, devices in rank order, i.e.
  row-major, as ``np.array(devices).reshape(sizes)``). A mesh with split
  axes becomes a JAX mesh over its parts (``y.0``, ``y.1``): the same devices
  in the same order, so a sharding over whole axes is the same layout.
* :func:`from_partition_spec`, :func:`to_partition_spec`,
  :func:`from_named_sharding`, :func:`to_named_sharding`: tuples of axes are
  major to minor, ``None`` is replicated, and ``P.UNCONSTRAINED`` is refused
  with a :class:`~verishard.errors.ShardingError`. ``unreduced`` axes (JAX's
  pending sum, ``P(None, unreduced={'x'})``) are the pending axes of a partial
  type with reduction ``"sum"`` (``[4, 4] partial{x}``); a pending max or min
  has no JAX spelling and is refused, as are ``reduced`` axes.

Importing this module imports JAX (set ``XLA_FLAGS`` before, for CPU devices).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

import jax
from jax.sharding import AbstractMesh, AxisType
from jax.sharding import Mesh as JaxMesh
from jax.sharding import NamedSharding, PartitionSpec

from .. import notation
from ..errors import ShardingError, refusing_raw_errors
from ..mesh import Mesh
from ..sharding import ArrayType

__all__ = ["mesh_from_jax", "jax_mesh", "spec_entries", "from_partition_spec", "to_partition_spec",
           "from_named_sharding", "to_named_sharding"]


# ---------------------------------------------------------------------------
# meshes


@refusing_raw_errors()
def mesh_from_jax(jmesh: JaxMesh | AbstractMesh) -> Mesh:
    """Our mesh for a ``jax.sharding.Mesh`` or ``AbstractMesh`` (axis names
    and sizes, in order; axis types do not matter).

    Part names of a parts-level JAX mesh (``y.0``, ``y.1``, as made by
    :func:`jax_mesh`) are folded back into a split axis.

    >>> mesh_from_jax(JaxMesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y")))
    {x:2, y:2}
    >>> mesh_from_jax(jax_mesh("x=2,y=2*2"))
    {x:2, y:2*2}
    >>> mesh_from_jax(jax_mesh("x=2,y=3").abstract_mesh)
    {x:2, y:3}
    """
    if not isinstance(jmesh, (JaxMesh, AbstractMesh)):
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


def devices_of(jmesh_or_devices) -> list:
    if isinstance(jmesh_or_devices, JaxMesh):
        return list(jmesh_or_devices.devices.flat)
    return list(jmesh_or_devices)


@refusing_raw_errors()
def jax_mesh(mesh: Mesh | str, devices: Sequence | JaxMesh | None = None,
             axis_types: AxisType | Sequence[AxisType] | None = None) -> JaxMesh:
    """A ``jax.sharding.Mesh`` for ``mesh`` over ``devices`` (default: the
    first ``N`` of ``jax.devices()``), devices in rank order.

    Unsplit axes keep their names; a split axis ``y=2*2`` becomes the parts
    ``y.0`` and ``y.1``. ``axis_types`` is one ``jax.sharding.AxisType`` for
    every axis, or one per JAX axis (default: JAX's, ``Auto``); unreduced
    axes need ``AxisType.Explicit``.

    >>> jm = jax_mesh("x=2,y=2*2")
    >>> jm.axis_names, [d.id for d in jm.devices.flat]
    (('x', 'y.0', 'y.1'), [0, 1, 2, 3, 4, 5, 6, 7])
    >>> jax_mesh("x=2", axis_types=AxisType.Explicit).axis_types
    (Explicit,)
    """
    if isinstance(mesh, str):
        mesh = Mesh.parse(mesh)
    devs = devices_of(devices) if devices is not None else jax.devices()[:mesh.num_devices]
    if len(devs) != mesh.num_devices:
        raise ShardingError(f"mesh {mesh} needs {mesh.num_devices} devices, got {len(devs)}")
    names = tuple(name for name, _ in mesh.parts)
    grid = np.array(devs, dtype=object).reshape(mesh.part_sizes)
    if axis_types is None:
        return JaxMesh(grid, names)
    if isinstance(axis_types, AxisType):
        axis_types = (axis_types,) * len(names)
    return JaxMesh(grid, names, axis_types=tuple(axis_types))


@functools.lru_cache(maxsize=256)
def cached_jax_mesh(mesh: Mesh, device_ids: tuple[int, ...], axis_types: tuple | None = None) -> JaxMesh:
    by_id = {d.id: d for d in jax.devices()}
    return jax_mesh(mesh, [by_id[i] for i in device_ids], axis_types)


def part_axis_types(mesh: Mesh, jmesh: JaxMesh | AbstractMesh) -> tuple:
    """The axis type of every part of ``mesh``: that of its axis in ``jmesh``
    (a JAX mesh over the whole axes, or over the parts)."""
    kinds = dict(zip(jmesh.axis_names, jmesh.axis_types))
    return tuple(kinds.get(n, kinds.get(n.partition(".")[0])) for n, _ in mesh.parts)


# ---------------------------------------------------------------------------
# PartitionSpec and NamedSharding


@refusing_raw_errors()
def spec_entries(spec: PartitionSpec | Sequence, *, unreduced: bool = False) -> tuple:
    """The entries of a ``PartitionSpec`` as plain data (None or a tuple of
    names per dimension); unconstrained dimensions and reduced axes are
    refused, and so are unreduced axes unless ``unreduced`` is set (then the
    entries leave them out: read them from ``spec.unreduced``, as
    :func:`from_partition_spec` does).

    >>> spec_entries(PartitionSpec('x', None, ('y', 'z')))
    (('x',), None, ('y', 'z'))
    >>> spec_entries(PartitionSpec('x', PartitionSpec.UNCONSTRAINED))
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: dimension 1 of PartitionSpec('x', UNCONSTRAINED) is unconstrained: the compiler picks its sharding, so it is not a sharding to redistribute
    >>> spec_entries(PartitionSpec('x', unreduced={'y'}), unreduced=True)
    (('x',),)
    """
    if isinstance(spec, (str, bytes)):
        raise ShardingError(f"expected a PartitionSpec, not the string {spec!r}; "
                            f"parse text with verishard.notation.parse_partition_spec")
    if getattr(spec, "reduced", None):
        raise ShardingError(f"PartitionSpec {spec} has reduced axes {sorted(spec.reduced)}: a reduced value "
                            f"(replicated, with an unreduced gradient) has no verishard type")
    if not unreduced and getattr(spec, "unreduced", None):
        raise ShardingError(f"PartitionSpec {spec} has unreduced axes {sorted(spec.unreduced)}: a pending sum, "
                            f"which from_partition_spec reads as a partial type, not a sharding")
    out = []
    for i, e in enumerate(_partitions(spec)):
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


def _partitions(spec) -> tuple:
    """The dimension entries of a PartitionSpec (JAX refuses to iterate one with unreduced axes)."""
    return tuple(spec.partitions) if isinstance(spec, PartitionSpec) else tuple(spec)


def _show_spec(spec) -> str:
    if isinstance(spec, PartitionSpec):
        return "PartitionSpec(" + ", ".join("UNCONSTRAINED" if e is PartitionSpec.UNCONSTRAINED else repr(e)
                                             for e in spec.partitions) + ")"
    return repr(spec)


@refusing_raw_errors()
def from_partition_spec(mesh: Mesh | JaxMesh | str, global_shape: Sequence[int],
                        spec: PartitionSpec | Sequence) -> ArrayType:
    """Our type for a ``PartitionSpec`` over ``mesh`` and a global shape;
    ``unreduced`` axes are pending a sum.

    >>> from_partition_spec(Mesh.parse("x=2,y=2"), (8, 4), PartitionSpec(('y', 'x')))
    [2{y,x}8, 4]
    >>> from_partition_spec(Mesh.parse("x=2,y=2"), (8, 4), PartitionSpec('y', unreduced={'x'}))
    [4{y}8, 4] partial{x}
    """
    if isinstance(mesh, (JaxMesh, AbstractMesh)):
        mesh = mesh_from_jax(mesh)
    t = notation.from_partition_spec(mesh, global_shape, spec_entries(spec, unreduced=True))
    pending = getattr(spec, "unreduced", None)
    if not pending:
        return t
    parts: list[int] = []
    for name in sorted(pending, key=str):
        if not isinstance(name, str):
            raise ShardingError(f"unreduced axis {name!r} of {spec} is not an axis name")
        try:
            got = t.mesh.resolve(name)
        except ShardingError as e:
            raise ShardingError(f"unreduced axes of {spec}: {e}") from None
        for p in got:
            if p in t.used_parts:
                raise ShardingError(f"axis {name!r} of {spec} is both unreduced and sharding a dimension")
            if p in parts:
                raise ShardingError(f"axis {name!r} of {spec} is unreduced twice")
        parts += got
    return ArrayType(t.mesh, t.dims, tuple(parts), "sum")


def _unreduced_names(t: ArrayType, parts: bool) -> frozenset:
    """The ``unreduced`` axes of ``t``'s ``PartitionSpec``: its pending axes
    (whole axes, or part names when ``parts``); a max or min is refused."""
    if not t.partial:
        return frozenset()
    if t.reduce != "sum":
        raise ShardingError(f"{t} is pending a {t.reduce}: JAX's unreduced axes are a pending sum, so no "
                            f"PartitionSpec spells it (inside jax.shard_map, verishard.jax.reshard_local runs "
                            f"its plans on the local blocks)")
    if parts:
        return frozenset(t.mesh.part_name(p) for p in t.partial)
    out = []
    pending = set(t.partial)
    for name in t.mesh.axis_names:
        own = set(t.mesh.resolve(name))
        if own <= pending:
            out.append(name)
        elif own & pending:
            sub = t.mesh.part_name(min(own & pending))
            raise ShardingError(f"sub-axis {sub!r} is pending in {t}, not the whole axis {name!r}; a "
                                f"PartitionSpec's unreduced axes are whole axes")
    return frozenset(out)


@refusing_raw_errors()
def to_partition_spec(t: ArrayType, parts: bool = False) -> PartitionSpec:
    """The ``PartitionSpec`` of ``t`` (one entry per dimension; a single axis
    as a bare name; pending axes of a sum as ``unreduced``). Whole axes only,
    unless ``parts`` is set: then every entry names mesh parts (``'y.0'``),
    for a JAX mesh made by :func:`jax_mesh`.

    >>> to_partition_spec(ArrayType.parse("[2{y,x}8, 4]", "x=2,y=2"))
    P(('y', 'x'), None)
    >>> to_partition_spec(ArrayType.parse("[2{y.1}4]", "y=2*2"), parts=True)
    P('y.1',)
    >>> to_partition_spec(ArrayType.parse("[4{y}8, 4] partial{x}", "x=2,y=2"))
    P('y', None, unreduced={'x'})
    >>> to_partition_spec(ArrayType.parse("[8] partial(max){x}", "x=2,y=2"))
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: [8] partial(max){x} is pending a max: JAX's unreduced axes are a pending sum, so no PartitionSpec spells it (inside jax.shard_map, verishard.jax.reshard_local runs its plans on the local blocks)
    """
    if parts:
        entries = [tuple(t.mesh.part_name(p) for p in t.dim_parts(d)) or None for d in range(t.rank)]
    else:
        entries = list(notation.to_partition_spec(t.plain))  # the pending axes: below
    entries = [None if e is None else e[0] if len(e) == 1 else tuple(e) for e in entries]
    unreduced = _unreduced_names(t, parts)
    return PartitionSpec(*entries, unreduced=unreduced) if unreduced else PartitionSpec(*entries)


@refusing_raw_errors()
def from_named_sharding(sharding: NamedSharding, global_shape: Sequence[int]) -> ArrayType:
    """Our type for a ``NamedSharding`` of an array of ``global_shape``.

    >>> from_named_sharding(NamedSharding(jax_mesh("x=2"), PartitionSpec(None, "x")), (3, 4))
    [3, 2{x}4]
    >>> from_named_sharding(NamedSharding(jax_mesh("x=2", axis_types=AxisType.Explicit),
    ...                                   PartitionSpec(unreduced={"x"})), (3, 4))
    [3, 4] partial{x}
    """
    if not isinstance(sharding, NamedSharding):
        raise ShardingError(f"expected a jax.sharding.NamedSharding, not {type(sharding).__name__}")
    return from_partition_spec(mesh_from_jax(sharding.mesh), global_shape, sharding.spec)


@refusing_raw_errors()
def to_named_sharding(t: ArrayType, mesh: JaxMesh | Sequence | None = None) -> NamedSharding:
    """A ``NamedSharding`` with the layout of ``t``.

    ``mesh`` is a JAX mesh with the axes of ``t.mesh`` (or a device list, or
    None for the first devices). A type over split axes gets a parts-level
    mesh over the same devices (see :func:`jax_mesh`), with the axis types of
    ``mesh``. A partial type (a pending sum) needs JAX's ``AxisType.Explicit``
    on its pending axes: a mesh made here has Explicit axes, a given one
    with other types is refused.

    >>> to_named_sharding(ArrayType.parse("[2{x}4]", "x=2"), jax_mesh("x=2"))
    NamedSharding(mesh=Mesh('x': 2, axis_types=(Auto,)), spec=P('x',), memory_kind=device)
    >>> s = to_named_sharding(ArrayType.parse("[1{y}4]", "y=2*2"))
    >>> s.mesh.axis_names, s.spec
    (('y.0', 'y.1'), P(('y.0', 'y.1'),))
    >>> to_named_sharding(ArrayType.parse("[4] partial{x}", "x=2"))
    NamedSharding(mesh=Mesh('x': 2, axis_types=(Explicit,)), spec=P(None, unreduced={'x'}), memory_kind=device)
    """
    split = len(t.mesh.parts) != len(t.mesh.axes)
    if isinstance(mesh, JaxMesh):
        types = part_axis_types(t.mesh, mesh) if mesh_from_jax(mesh).refined() == t.mesh.refined() else None
        if t.partial and types is not None:
            bad = [f"{t.mesh.part_name(p)} ({types[p].name})" for p in t.partial if types[p] != AxisType.Explicit]
            if bad:
                raise ShardingError(f"the pending axes {', '.join(bad)} of {t} are not Explicit axes of the JAX "
                                    f"mesh; JAX's unreduced axes must be AxisType.Explicit")
        if not split:
            if mesh_from_jax(mesh) != t.mesh:
                raise ShardingError(f"JAX mesh {dict(mesh.shape)} is not the mesh {t.mesh} of type {t}")
            return NamedSharding(mesh, to_partition_spec(t))
    else:
        types = AxisType.Explicit if t.partial else None
    jm = jax_mesh(t.mesh, mesh, types)
    return NamedSharding(jm, to_partition_spec(t, parts=True))
