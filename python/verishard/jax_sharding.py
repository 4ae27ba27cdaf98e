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
  with a :class:`~verishard.errors.ShardingError`.

Importing this module imports JAX (set ``XLA_FLAGS`` before, for CPU devices).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

import jax
from jax.sharding import AbstractMesh
from jax.sharding import Mesh as JaxMesh
from jax.sharding import NamedSharding, PartitionSpec

from . import notation
from .errors import ShardingError
from .mesh import Mesh
from .sharding import ArrayType

__all__ = ["mesh_from_jax", "jax_mesh", "spec_entries", "from_partition_spec", "to_partition_spec",
           "from_named_sharding", "to_named_sharding"]


# ---------------------------------------------------------------------------
# meshes


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
    devs = devices_of(devices) if devices is not None else jax.devices()[:mesh.num_devices]
    if len(devs) != mesh.num_devices:
        raise ShardingError(f"mesh {mesh} needs {mesh.num_devices} devices, got {len(devs)}")
    names = tuple(name for name, _ in mesh.parts)
    return JaxMesh(np.array(devs, dtype=object).reshape(mesh.part_sizes), names)


@functools.lru_cache(maxsize=256)
def cached_jax_mesh(mesh: Mesh, device_ids: tuple[int, ...]) -> JaxMesh:
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
