"""JAX: conversions (:mod:`verishard.jax_sharding`), the JAX backend
(:mod:`verishard.runtime.jax`), and :func:`reshard`, a drop-in for
``jax.device_put(x, sharding)`` between ``NamedSharding``\\ s of one mesh by a
verified plan.

Importing this module imports JAX (set ``XLA_FLAGS`` before, for CPU devices).
"""

from __future__ import annotations

import functools

import numpy as np

import jax
import jax.numpy as jnp
from jax.sharding import Mesh as JaxMesh
from jax.sharding import NamedSharding, PartitionSpec

from .errors import ShardingError, VerishardError
from .jax_sharding import (from_named_sharding, from_partition_spec, jax_mesh, mesh_from_jax, spec_entries,
                           to_named_sharding, to_partition_spec)
from .mesh import Mesh
from .plan import Plan
from .plan import plan as synthesize
from .runtime.backend import validate_plan
from .runtime.jax import JaxBackend, compile_plan, execute, rewrap
from .sharding import ArrayType

__all__ = ["mesh_from_jax", "jax_mesh", "spec_entries", "from_partition_spec", "to_partition_spec",
           "from_named_sharding", "to_named_sharding", "JaxBackend", "execute", "reshard", "compile_plan"]

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
    return rewrap(y, sharding)
