"""JAX: conversions (:mod:`verishard.jax.sharding`), the JAX backend
(:mod:`verishard.jax.backend`), and :func:`reshard`, a drop-in for
``jax.device_put(x, sharding)`` / ``jax.sharding.reshard(x, sharding)``
between ``NamedSharding``\\ s of one mesh by a verified plan, eagerly and
under ``jax.jit``, ``jax.grad`` (and ``jvp``), and ``jax.vmap``.

Eagerly on CPU devices it runs the plan's steps on the devices' blocks in
host memory (:func:`verishard.jax.backend.host_executor`, as
``jax.device_put`` copies through the host there); elsewhere, the plan's
compiled ``shard_map``.

Under a trace, :func:`reshard` binds one JAX primitive, ``verishard_reshard``,
whose parameter is the planned redistribution: it lowers to the plan's
``shard_map``; it is linear, and its transpose (what ``jax.grad`` and
``jax.vjp`` run backward) is the reverse redistribution ``dst -> src``,
planned by the verified core (``verishard.plan(mesh, dst, src)``); under
``jax.vmap`` it plans the batched types (one more dimension). See
``docs/jax.md`` for the rules on the source sharding and the limits.

Partial values: a sharding's ``unreduced`` axes (JAX's pending sum, on a
mesh of ``AxisType.Explicit`` axes) are the pending axes of a partial type,
so :func:`reshard` also runs the all-reduces, reduce-scatters and
make-pending steps of a partial plan (``P(unreduced={'x'})`` to ``P('x')`` is
one ``psum_scatter``). Inside a ``jax.shard_map`` of your own,
:func:`reshard_local` runs a plan on the local blocks (any reduction: sum,
max or min).

Uneven shapes (a sharding that does not divide the shape, blocks of
``ceil(g / n)``): JAX has such arrays only inside ``jax.jit`` on Auto axes,
so that is where :func:`reshard` runs them (with ``src=``), on the padded
global array; elsewhere it refuses them, saying why (``docs/jax.md``).

Importing this module imports JAX (set ``XLA_FLAGS`` before, for CPU devices).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec
from jax.sharding import Mesh as JaxMesh

from ..errors import ShardingError, VerishardError
from .sharding import (from_named_sharding, from_partition_spec, jax_mesh, mesh_from_jax, spec_entries,
                       to_named_sharding, to_partition_spec)
from ..mesh import Mesh
from ..plan import Plan
from ..plan import plan as synthesize
from ..runtime.backend import step_call, validate_plan
from .backend import (JaxBackend, compile_plan, execute, host_executor, host_runs, padded_global_shape, rewrap,
                      run_bits)
from ..sharding import ArrayType
from ..notation import parse_partition_spec

try:  # the concrete array class: the eager fast path tests ``type(x) is ArrayImpl``
    from jax._src.array import ArrayImpl
except ImportError:  # pragma: no cover
    ArrayImpl = type(jnp.zeros(()))

__all__ = ["mesh_from_jax", "jax_mesh", "spec_entries", "from_partition_spec", "to_partition_spec",
           "from_named_sharding", "to_named_sharding", "JaxBackend", "execute", "reshard", "plan_for", "reshard_local",
           "compile_plan", "cache_info", "clear_cache", "reshard_p"]

# ---------------------------------------------------------------------------
# caches


@functools.lru_cache(maxsize=1024)
def _plan_for(mesh: Mesh, src: ArrayType, dst: ArrayType) -> Plan:
    return synthesize(mesh, src, dst)


_MAX_EXECUTORS = 1024
# (shape, dtype, x.sharding, target NamedSharding) -> executor, for reshard(x, sharding) on a
# concrete array without src/plan: a hit is one dict lookup before the compiled call.
_EAGER: dict[tuple, Callable] = {}
# (redistribution, input sharding, output sharding) -> executor (src= or plan= given, or impl).
_EXECUTORS: dict[tuple, Callable] = {}
_STATS = {"hits": 0, "misses": 0}


def _eager_key(x, src, dst, donate: bool) -> tuple:
    """The eager cache's key: shape, dtype, source and target sharding (and donation, when asked)."""
    return (x.shape, x.dtype, src, dst, True) if donate else (x.shape, x.dtype, src, dst)


def _remember(table: dict, key: tuple, value: Callable) -> None:
    if len(table) >= _MAX_EXECUTORS:
        table.pop(next(iter(table)))  # oldest first
    table[key] = value


def cache_info() -> dict[str, int]:
    """What the caches hold: ``plans`` (distinct ``(mesh, src, dst)`` planned
    by the core), ``executors`` (compiled callables, one per shape, dtype,
    source and target sharding), and eager ``hits``/``misses`` of
    :func:`reshard` on concrete arrays.

    >>> clear_cache()
    >>> jm = jax_mesh("x=2")
    >>> x = jax.device_put(jnp.arange(4.0), NamedSharding(jm, PartitionSpec("x")))
    >>> for _ in range(3):
    ...     y = reshard(x, NamedSharding(jm, PartitionSpec()))
    >>> cache_info()
    {'plans': 1, 'executors': 1, 'hits': 2, 'misses': 1}
    """
    return {"plans": _plan_for.cache_info().currsize, "executors": len(_EAGER) + len(_EXECUTORS),
            "hits": _STATS["hits"], "misses": _STATS["misses"]}


def clear_cache() -> None:
    """Forget every cached plan and executor (the next call plans and compiles again).

    >>> clear_cache(); cache_info()
    {'plans': 0, 'executors': 0, 'hits': 0, 'misses': 0}
    """
    _plan_for.cache_clear()
    _EAGER.clear()
    _EXECUTORS.clear()
    _STATS.update(hits=0, misses=0)


# ---------------------------------------------------------------------------
# meshes


def _same_devices(a: JaxMesh, b: JaxMesh) -> bool:
    return (tuple(a.axis_names) == tuple(b.axis_names) and a.devices.shape == b.devices.shape
            and all(x.id == y.id for x, y in zip(a.devices.flat, b.devices.flat)))


def _same_axes(a, b) -> bool:
    return tuple(a.axis_names) == tuple(b.axis_names) and tuple(a.axis_sizes) == tuple(b.axis_sizes)


def _types(m) -> str:
    return "(" + ", ".join(t.name for t in m.axis_types) + ")"


def _describe_mesh(m) -> str:
    return "{" + ", ".join(f"{n}:{s}" for n, s in zip(m.axis_names, m.axis_sizes)) + "}"


def _mode(amesh) -> bool:
    """True for a mesh of Explicit axes, False for Auto axes; anything else is refused."""
    types = set(amesh.axis_types)
    if AxisType.Manual in types:
        manual = ", ".join(n for n, t in zip(amesh.axis_names, amesh.axis_types) if t == AxisType.Manual)
        raise ShardingError(f"reshard inside jax.shard_map (manual axes {manual}) is not supported: "
                            f"call it outside the shard_map, or verishard.jax.reshard_local inside it")
    if types <= {AxisType.Explicit}:
        return True
    if types <= {AxisType.Auto}:
        return False
    raise ShardingError(f"mesh {_describe_mesh(amesh)} mixes Auto and Explicit axes {_types(amesh)}; "
                        f"reshard needs all axes Auto or all Explicit")


@functools.lru_cache(maxsize=256)
def _plan_mesh(plan_mesh: Mesh, user: JaxMesh | AbstractMesh) -> JaxMesh | AbstractMesh:
    """The JAX mesh a plan runs on: ``user`` itself when the plan's mesh is the
    user's, else its parts (``y.0``, ``y.1``) over the same devices in the same
    order, each part with its axis's type; concrete if ``user`` is."""
    if len(plan_mesh.parts) == len(plan_mesh.axes) and mesh_from_jax(user) == plan_mesh:
        return user
    kinds = dict(zip(user.axis_names, user.axis_types))
    names = tuple(n for n, _ in plan_mesh.parts)
    types = tuple(kinds[n.partition(".")[0]] for n in names)
    if isinstance(user, AbstractMesh):
        return AbstractMesh(plan_mesh.part_sizes, names, axis_types=types)
    return JaxMesh(np.asarray(user.devices).reshape(plan_mesh.part_sizes), names, axis_types=types)


# ---------------------------------------------------------------------------
# the redistribution: the static parameter of the primitive


class _Redistribution:
    """A planned redistribution of one global shape between two layouts of one
    mesh: the primitive's parameter (hashable, compared by value).

    ``jmesh`` is the user's concrete JAX mesh when known (None inside a trace
    whose mesh comes from ``jax.set_mesh``), ``amesh`` its abstract mesh
    (axis types decide Auto or Explicit mode)."""

    __slots__ = ("jmesh", "amesh", "mesh", "src", "dst", "plan", "user_plan", "explicit", "_key", "_hash",
                 "_reverse")

    def __init__(self, jmesh: JaxMesh | None, amesh: AbstractMesh, src: ArrayType, dst: ArrayType,
                 plan: Plan, user_plan: bool = False):
        self.jmesh, self.amesh, self.src, self.dst, self.plan = jmesh, amesh, src, dst, plan
        self.mesh = src.mesh
        self.user_plan = user_plan
        self.explicit = _mode(amesh)
        self._key = (jmesh, amesh, src, dst, plan)
        self._hash = hash(self._key)
        self._reverse = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Redistribution) and self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"{self.src} -> {self.dst} by {', '.join(map(str, self.plan.collectives)) or 'no step'}"

    @property
    def moves(self) -> bool:
        """Whether any step moves data (a plan of trivial steps only relabels)."""
        t = self.plan.src
        for s in self.plan.steps:
            if step_call(self.plan.mesh, t, s.collective) is not None:
                return True
            t = s.type
        return False

    def reverse(self) -> "_Redistribution":
        """``dst -> src``, planned by the verified core: the transpose."""
        if self._reverse is None:
            self._reverse = _Redistribution(self.jmesh, self.amesh, self.dst, self.src,
                                            _plan_for(self.mesh, self.dst, self.src))
        return self._reverse

    def batched(self, dim: int, size: int, src_entry, dst_entry) -> "_Redistribution":
        """The same redistribution with a batch dimension of ``size`` inserted
        at ``dim`` (sharded as ``src_entry``/``dst_entry``), planned by the core."""
        shape = list(self.src.global_shape)
        shape.insert(dim, size)
        types = []
        for t, e in ((self.src, src_entry), (self.dst, dst_entry)):
            spec = to_partition_spec(t)
            entries = list(spec_entries(spec, unreduced=True))
            entries += [None] * (t.rank - len(entries))
            entries.insert(dim, e)
            try:
                types.append(from_partition_spec(self.mesh, shape, PartitionSpec(*entries, unreduced=spec.unreduced)))
            except ShardingError as err:
                raise ShardingError(f"vmap: the batch dimension {dim} sharded as {e!r} does not fit {t}: {err}") \
                    from None
        return _Redistribution(self.jmesh, self.amesh, types[0], types[1], _plan_for(self.mesh, *types))

    def user_sharding(self, t: ArrayType) -> NamedSharding | PartitionSpec:
        spec = to_partition_spec(t)
        return NamedSharding(self.jmesh, spec) if self.jmesh is not None else spec


def _body(r: _Redistribution, x):
    """The plan as traced JAX: one ``shard_map`` over the plan's mesh (the
    user's, or its parts), with the array's type moved onto that mesh and
    back in Explicit mode (same devices, same layout: no data moves).

    Uneven types (Auto mode under ``jax.jit``, the only place JAX has them):
    ``shard_map`` wants shapes its specs divide, so it runs on the padded
    global array, ``x`` padded at the end of every dimension to blocks times
    ``ceil(g / n)``, which has the same blocks on the same devices as ``x``
    (only the last block grows); each step pads and cuts the local buffers
    (``JaxBackend.fit``), and the result is cut back to the global shape and
    constrained to the target. XLA runs the global pad and cut on the local
    buffers, with no collective of its own (``_pad_global``; the tests count
    the compiled program's collectives)."""
    p = r.plan
    user = r.jmesh if r.jmesh is not None else r.amesh
    pm = _plan_mesh(p.mesh, user)
    ins, outs = to_partition_spec(p.src, parts=True), to_partition_spec(p.dst, parts=True)
    backend = JaxBackend(p.mesh)
    split = pm is not user
    uneven = p.src.uneven or p.dst.uneven
    if r.explicit and split:
        x = jax.sharding.reshard(x, NamedSharding(pm, ins))
    if uneven:
        x = _pad_global(x, padded_global_shape(p.src))
    amesh = pm.abstract_mesh if isinstance(pm, JaxMesh) else pm
    with jax.sharding.use_abstract_mesh(amesh):
        y = jax.shard_map(lambda v: run_bits(p, v, backend), mesh=pm, in_specs=ins, out_specs=outs,
                          check_vma=False)(x)
    if uneven:
        y = lax.slice(y, (0,) * y.ndim, r.dst.global_shape)
        return lax.with_sharding_constraint(y, r.user_sharding(r.dst))
    if split:
        dst = to_partition_spec(r.dst)
        if r.explicit:
            y = jax.sharding.reshard(y, NamedSharding(user, dst))
        else:
            y = lax.with_sharding_constraint(y, r.user_sharding(r.dst))
    return y


def _pad_global(x, shape: tuple[int, ...]):
    """``x`` padded with zeros at the end of every dimension to ``shape``
    (the padded global shape of its uneven type): every device's block keeps
    its place, the last ones grow to the full block size, so XLA writes the
    zeros into the buffers it already pads (a local ``select``)."""
    widths = [(0, n - g) for n, g in zip(shape, x.shape)]
    return jnp.pad(x, widths) if any(w for _, w in widths) else x


# ---------------------------------------------------------------------------
# the primitive


reshard_p = Primitive("verishard_reshard")


def _impl(x, *, r: _Redistribution):
    # Evaluated eagerly (e.g. the transpose inside an eager jax.grad): plan
    # from the array's actual layout, through the cached eager path.
    if type(x) is ArrayImpl and isinstance(x.sharding, NamedSharding):
        jm = r.jmesh if r.jmesh is not None else x.sharding.mesh
        same = from_named_sharding(x.sharding, x.shape).refined() == r.src.refined()
        return _reshard(x, NamedSharding(jm, to_partition_spec(r.dst)), None,
                        r.plan if (r.user_plan and same) else None)
    return _executor(r, None, None)(x)


def _abstract_eval(aval, *, r: _Redistribution):
    if r.explicit:
        return aval.update(sharding=NamedSharding(aval.sharding.mesh, to_partition_spec(r.dst)))
    return aval


def _transpose(ct, x, *, r: _Redistribution):
    if r.src.partial or r.dst.partial:
        raise ShardingError(f"jax.grad / jax.vjp through reshard {r.src} -> {r.dst} (unreduced axes) is not "
                            f"supported: the cotangent of an unreduced value is a reduced (replicated) one, not the "
                            f"reverse redistribution; forward mode (jax.jvp) and jax.vmap work")
    return [reshard_p.bind(ct, r=r.reverse())]


def _batch(axis_data, vals_in, dims_in, *, r: _Redistribution):
    # The batched problem has one more dimension, planned by the core. Its
    # sharding follows JAX's own reshard batcher: in Explicit mode the batch
    # axis's mesh axis (``explicit_mesh_axis``) in the target and the type's in
    # the source; in Auto mode ``spmd_axis_name`` (or unsharded), or a
    # concrete array's own layout in the source.
    (x,), (d,) = vals_in, dims_in
    if d is None:
        return reshard_p.bind(x, r=r), None
    spmd = axis_data.spmd_name
    spmd = tuple(spmd) if spmd else None
    if r.explicit:
        spec = jax.typeof(x).sharding.spec
        src_entry = spec.partitions[d] if d < len(spec.partitions) else None
        dst_entry = axis_data.explicit_mesh_axis
    elif type(x) is ArrayImpl and isinstance(x.sharding, NamedSharding):
        spec = x.sharding.spec
        src_entry, dst_entry = (spec.partitions[d] if d < len(spec.partitions) else None), spmd
    else:
        src_entry = dst_entry = spmd
    return reshard_p.bind(x, r=r.batched(d, axis_data.size, src_entry, dst_entry)), d


reshard_p.def_impl(_impl)
reshard_p.def_abstract_eval(_abstract_eval)
ad.deflinear2(reshard_p, _transpose)
batching.fancy_primitive_batchers[reshard_p] = _batch
mlir.register_lowering(reshard_p, mlir.lower_fun(lambda x, *, r: _body(r, x), multiple_results=False))


@functools.lru_cache(maxsize=1024)
def _pinned(r: _Redistribution) -> Callable:
    """Auto mode: the primitive inside a ``jax.jit`` whose out sharding names
    the concrete mesh (the layout the plan's ``shard_map`` produces), where the
    enclosing jit looks for its devices: a primitive's lowering is invisible
    to it, and without this a jit whose arguments carry no sharding (a
    gradient that depends on shapes only) would compile for one device."""
    out = NamedSharding(r.jmesh, to_partition_spec(r.dst))
    if r.src.uneven or r.dst.uneven:
        # no jit output may be uneven (JAX: IndivisibleError); a constraint names the devices as well
        return jax.jit(lambda v: lax.with_sharding_constraint(reshard_p.bind(v, r=r), out))
    return jax.jit(lambda v: reshard_p.bind(v, r=r), out_shardings=out)


# ---------------------------------------------------------------------------
# executors (eager)


def _relabel(out_sh: NamedSharding, donate: bool = False):
    if out_sh.spec.unreduced:  # jax.device_put cannot place unreduced arrays; the buffers are the same
        return lambda x: rewrap(x, out_sh)

    def run(x):  # same layout: buffers reused
        return x if x.sharding == out_sh else jax.device_put(x, out_sh, donate=donate)
    return run


def _executor(r: _Redistribution, in_sh: NamedSharding | None, out_sh: NamedSharding | None,
              donate: bool = False) -> Callable:
    key = (r, in_sh, out_sh, donate)
    fn = _EXECUTORS.get(key)
    if fn is None:
        fn = _build(r, in_sh, out_sh, donate)
        _remember(_EXECUTORS, key, fn)
    return fn


def _on_host(run_host: Callable, donate: bool) -> Callable:
    """The eager executor on CPU devices (:func:`verishard.jax.backend.host_executor`):
    no program; with ``donate`` the source is deleted when the call returns."""
    run = run_host
    if donate:
        def run(x):
            y = run_host(x)
            x.delete()
            return y
    run.on_host = True
    return run


def _build(r: _Redistribution, in_sh, out_sh, donate: bool = False) -> Callable:
    if out_sh is not None and not r.moves:
        return _relabel(out_sh, donate)
    if in_sh is not None and out_sh is not None and host_runs(r.plan, in_sh.mesh):
        return _on_host(host_executor(r.plan, in_sh, out_sh), donate)
    # donate: where the local shapes agree XLA aliases the source's buffers to the result (no
    # second copy while the plan runs); elsewhere XLA cannot use them (it would warn), so the
    # source is deleted when the call returns. Either way it does not outlive the call.
    alias = donate and r.src.local_shape == r.dst.local_shape
    fn = jax.jit(functools.partial(_body, r), in_shardings=in_sh, out_shardings=out_sh,
                 donate_argnums=(0,) if alias else ())
    devices = in_sh.mesh.devices.flat if in_sh is not None else jax.devices()
    wait = all(d.platform == "cpu" for d in devices)
    # XLA's CPU client aborts (rendezvous timeout) when more than about 32 collective programs
    # are in flight; on CPU devices the eager call waits for its result, so a loop of reshards
    # cannot pile them up.
    if not wait and not donate:
        return fn

    def run(x):
        y = fn(x)
        if wait:
            y.block_until_ready()
        if donate and not x.is_deleted():
            x.delete()
        return y
    run.jitted = fn
    return run


# ---------------------------------------------------------------------------
# reshard


def reshard(x: jax.Array, sharding: NamedSharding | PartitionSpec, *,
            src: NamedSharding | PartitionSpec | None = None, plan: Plan | None = None,
            donate: bool = False) -> jax.Array:
    """``jax.device_put(x, sharding)`` (or ``jax.sharding.reshard``) by a verified plan.

    ``sharding`` is a ``NamedSharding``, or a ``PartitionSpec`` over the mesh
    set by ``jax.set_mesh``. Works eagerly and under ``jax.jit``,
    ``jax.grad``/``jax.vjp`` (the backward pass is the reverse
    redistribution, planned and checked by the verified core),
    ``jax.jvp`` and ``jax.vmap``.

    The source sharding is ``x.sharding`` for a concrete array and the type
    ``jax.typeof(x).sharding`` in Explicit mode (a mesh of
    ``AxisType.Explicit`` axes, ``jax.make_mesh``'s default). Inside a trace
    in Auto mode JAX does not track it: pass ``src`` (a ``NamedSharding`` or
    ``PartitionSpec``); ``src`` is checked against ``x`` wherever ``x``'s
    layout is known. A sharding that does not divide the shape (an uneven
    type) runs under ``jax.jit`` on Auto axes, the only place JAX has one.
    The plan comes from :func:`verishard.plan` (or ``plan``, re-checked); what
    runs it is built once per shape, dtype, source and target
    (:func:`cache_info`): on CPU devices its steps on the host blocks, else
    its compiled ``shard_map``.
    Rank-0 arrays pass through. ``x`` may be a pytree of arrays (tuples,
    lists, dicts), with one ``sharding`` (and ``src``) for all or a matching
    tree of them. :func:`plan_for` gives the plan without running it.

    ``donate=True`` (concrete arrays) hands ``x`` over, as
    ``jax.jit(..., donate_argnums=0)`` does: XLA may reuse its buffers for
    the result, and ``x`` is deleted when the call returns, so the source and
    the result do not both stay alive. Under ``jax.jit``, donate the jit's
    argument instead.

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
    if src is None and plan is None and type(x) is ArrayImpl:
        try:
            fn = _EAGER.get(_eager_key(x, x.sharding, sharding, donate))
        except TypeError:  # an unhashable "sharding": refused below
            fn = None
        if fn is not None and not x.is_deleted():
            _STATS["hits"] += 1
            return fn(x)
    if isinstance(x, (tuple, list, dict)) and not isinstance(x, jax.Array):
        return _reshard_tree(x, sharding, src, plan, donate)
    return _reshard(x, sharding, src, plan, donate)


def plan_for(x: jax.Array, sharding: NamedSharding | PartitionSpec, *,
             src: NamedSharding | PartitionSpec | None = None) -> Plan | None:
    """The verified plan :func:`reshard` runs for these arguments, without
    running it (None for a rank-0 array, which passes through). Refuses what
    :func:`reshard` refuses, with the same errors. Works on concrete arrays
    and on tracers (``src`` as for :func:`reshard`).

    >>> jm = jax_mesh("x=2,y=2")
    >>> x = jax.device_put(jnp.zeros((4, 4)), NamedSharding(jm, PartitionSpec("x", "y")))
    >>> p = plan_for(x, NamedSharding(jm, PartitionSpec("y", "x")))
    >>> p.src, p.dst, p.collectives
    ([2{x}4, 2{y}4], [2{y}4, 2{x}4], (AllPermute(target=[2{y}4, 2{x}4]),))
    """
    if isinstance(x, (tuple, list, dict)) and not isinstance(x, jax.Array):
        raise VerishardError("plan_for takes one array; call it per leaf of a pytree")
    return _reshard(x, sharding, src, None, False, only_plan=True)


def _is_sharding(s) -> bool:
    return s is None or isinstance(s, (NamedSharding, PartitionSpec, jax.sharding.Sharding))


def _reshard_tree(xs, sharding, src, plan, donate=False):
    """A pytree of arrays: one sharding (and src) for every leaf, or a tree of them matching ``xs``."""
    if plan is not None:
        raise VerishardError("plan= is for one array; reshard a pytree without it")
    leaves, tree = jax.tree.flatten(xs)

    def per_leaf(s, what):
        if _is_sharding(s):
            return [s] * len(leaves)
        got, t = jax.tree.flatten(s, is_leaf=_is_sharding)
        if t != tree:
            raise ShardingError(f"reshard: the {what} tree {t} does not match the arrays' tree {tree}")
        return got
    dsts, srcs = per_leaf(sharding, "sharding"), per_leaf(src, "src")
    return jax.tree.unflatten(tree, [reshard(a, d, src=s, donate=donate) for a, d, s in zip(leaves, dsts, srcs)])


def _context_mesh() -> tuple[JaxMesh | None, AbstractMesh]:
    am = jax.sharding.get_abstract_mesh()
    try:
        cm = jax.sharding.get_mesh()  # outside jit only
    except ValueError:
        cm = None
    return (cm if cm is not None and not cm.empty else None), am


def _peek(x) -> tuple[JaxMesh, PartitionSpec] | None:
    """The concrete array under an eager ``jax.grad``/``jvp``/``vmap`` tracer
    (Auto mode keeps no sharding in the type), with the per-example spec: the
    concrete array's spec without the vmapped dimensions. None inside jit."""
    dims = []
    while isinstance(x, jax.core.Tracer):
        if hasattr(x, "primal"):
            x = x.primal
        elif hasattr(x, "val") and hasattr(x, "batch_dim"):
            d = x.batch_dim
            if d is not None:
                if not isinstance(d, int):
                    return None
                dims.append(d)
            x = x.val
        else:
            return None
    if type(x) is not ArrayImpl or not isinstance(x.sharding, NamedSharding):
        return None
    entries = list(spec_entries(x.sharding.spec))
    entries += [None] * (x.ndim - len(entries))
    for d in reversed(dims):
        del entries[d]
    return x.sharding.mesh, PartitionSpec(*entries)


def _type(mesh: Mesh, shape, spec, what: str) -> ArrayType:
    try:
        return from_partition_spec(mesh, shape, spec)
    except ShardingError as e:
        raise ShardingError(f"reshard {what} {spec}: {e}") from None


def _check_uneven(x, amesh, src_t: ArrayType, dst_t: ArrayType, src_spec, tgt_spec, concrete: bool) -> None:
    """Uneven types exist in JAX (0.10) only as values inside ``jax.jit`` on
    Auto axes (``with_sharding_constraint`` to a sharding that does not
    divide the shape): ``jax.device_put``, a jit's output and Explicit-mode
    types all refuse them (``IndivisibleError``). Refuse the rest here, in
    words, rather than with JAX's error from inside the plan's lowering."""
    t = src_t if src_t.uneven else dst_t
    which = f"{'source' if t is src_t else 'target'} {src_spec if t is src_t else tgt_spec} ({t})"
    if _mode(amesh):
        raise ShardingError(f"reshard {src_t} -> {dst_t}: the {which} does not divide shape {tuple(x.shape)}, and "
                            f"JAX's Explicit axes have no such sharding (jax.sharding.reshard refuses it too); on a "
                            f"mesh of AxisType.Auto axes, under jax.jit, reshard(x, sharding, src=...) runs it")
    if concrete or _peek(x) is not None:
        raise ShardingError(f"reshard {src_t} -> {dst_t}: the {which} does not divide shape {tuple(x.shape)}, and "
                            f"outside jax.jit JAX holds no such array (jax.device_put refuses it too); under "
                            f"jax.jit, where XLA pads it, reshard(x, sharding, src=...) runs it")


def _reshard(x, sharding, src, plan, donate=False, only_plan=False):
    # -- the target and its mesh
    if isinstance(sharding, NamedSharding):
        tgt_spec, tmesh = sharding.spec, sharding.mesh
    elif isinstance(sharding, PartitionSpec):
        tgt_spec, tmesh = sharding, None
    else:
        raise ShardingError(f"reshard needs a jax.sharding.NamedSharding (or a PartitionSpec with a mesh set by "
                            f"jax.set_mesh), not {type(sharding).__name__}")
    if not isinstance(x, jax.Array):
        raise ShardingError(f"reshard needs a jax.Array laid out on the mesh, not {type(x).__name__}; "
                            f"use jax.device_put for host data")
    concrete = not isinstance(x, jax.core.Tracer)
    if concrete and x.is_deleted():
        raise ShardingError("reshard: the array has been deleted (by x.delete() or donated to an earlier call, "
                            "reshard(..., donate=True) included); pass a live array")
    if donate and not concrete:
        raise ShardingError("reshard(..., donate=True) hands over a concrete array; under a trace (jax.jit, "
                            "jax.grad, jax.vmap) donate the jitted function's argument (donate_argnums) instead")
    if isinstance(tmesh, JaxMesh):
        cmesh, amesh = tmesh, tmesh.abstract_mesh
    elif isinstance(tmesh, AbstractMesh):
        cmesh, amesh = _context_mesh()[0], tmesh
    else:
        cmesh, amesh = _context_mesh()
        if amesh.empty:
            raise ShardingError(f"reshard to the PartitionSpec {tgt_spec} needs a mesh: pass a NamedSharding, "
                                f"or set one with jax.set_mesh(mesh)")
    if cmesh is not None and not _same_axes(cmesh, amesh):
        cmesh = None

    # -- the source
    xs = x.sharding if concrete else None
    if concrete and not isinstance(xs, NamedSharding):
        raise ShardingError(f"reshard moves data between NamedShardings of one JAX mesh; the array has a "
                            f"{type(xs).__name__} ({xs}); use jax.device_put to move it onto a mesh")
    if concrete:
        if not _same_axes(xs.mesh, amesh) or (cmesh is not None and not _same_devices(xs.mesh, cmesh)):
            raise ShardingError("reshard moves data between NamedShardings of one JAX mesh; the array is on mesh "
                                f"{_describe_mesh(xs.mesh)}, the target on {_describe_mesh(amesh)} "
                                f"(or other devices)")
        if tuple(xs.mesh.axis_types) != tuple(amesh.axis_types):
            raise ShardingError(f"the array's mesh has axis types {_types(xs.mesh)}, the target's "
                                f"{_types(amesh)}; reshard keeps the axis types")
        if isinstance(sharding, NamedSharding) and xs.memory_kind != sharding.memory_kind:
            raise ShardingError(f"reshard keeps the memory kind; the array is in {xs.memory_kind}, "
                                f"the target in {sharding.memory_kind}")
        cmesh, amesh = xs.mesh, xs.mesh.abstract_mesh
        known = xs.spec
    else:
        tsh = jax.typeof(x).sharding
        known = None
        if not tsh.mesh.empty:
            if not _same_axes(tsh.mesh, amesh):
                raise ShardingError(f"reshard moves data within one mesh; the traced array's type is over "
                                    f"{_describe_mesh(tsh.mesh)}, the target over {_describe_mesh(amesh)}")
            explicit = _mode(tsh.mesh)
            if tmesh is not None and tuple(tmesh.axis_types) != tuple(tsh.mesh.axis_types):
                raise ShardingError(f"the array's mesh has axis types {_types(tsh.mesh)}, the target's "
                                    f"{_types(tmesh)}; reshard keeps the axis types")
            amesh = tsh.mesh
            if explicit:
                known = tsh.spec
        if known is None:
            peeked = _peek(x)
            if peeked is not None:
                pm, known = peeked
                if not _same_axes(pm, amesh) or (cmesh is not None and not _same_devices(pm, cmesh)):
                    raise ShardingError("reshard moves data between NamedShardings of one JAX mesh; the array is on "
                                        f"mesh {_describe_mesh(pm)}, the target on {_describe_mesh(amesh)} "
                                        f"(or other devices)")
                cmesh = pm
    if src is not None:
        if isinstance(src, NamedSharding):
            if not _same_axes(src.mesh, amesh) or (isinstance(src.mesh, JaxMesh) and cmesh is not None
                                                   and not _same_devices(src.mesh, cmesh)):
                raise ShardingError(f"src is over mesh {_describe_mesh(src.mesh)}, the target over "
                                    f"{_describe_mesh(amesh)} (or other devices)")
            if cmesh is None and isinstance(src.mesh, JaxMesh):
                cmesh = src.mesh
            src_spec = src.spec
        elif isinstance(src, PartitionSpec):
            src_spec = src
        else:
            raise ShardingError(f"src must be a NamedSharding or a PartitionSpec, not {type(src).__name__}")
    elif known is not None:
        src_spec = known
    else:
        raise ShardingError(
            "reshard cannot tell how the traced array is laid out: under jax.jit in Auto mode the type does not "
            "carry the sharding; pass src=NamedSharding(...) or PartitionSpec(...), or use a mesh with "
            "AxisType.Explicit axes (jax.make_mesh's default) so that the type carries it")
    # -- rank 0: nothing to move
    if x.ndim == 0:
        for what, spec in (("target", tgt_spec), ("src", src_spec)):
            if getattr(spec, "unreduced", None):
                raise ShardingError(f"reshard {what} {spec} of a rank-0 array has unreduced axes: verishard types "
                                    f"have at least one dimension (reshape it to (1,), or use jax.lax.psum)")
            if len(spec_entries(spec)):
                raise ShardingError(f"reshard {what} {spec} has {len(spec)} entries but the array has rank 0")
        if only_plan:
            return None
        if concrete:
            out = sharding if isinstance(sharding, NamedSharding) else NamedSharding(cmesh, PartitionSpec())
            return x if x.sharding == out else jax.device_put(x, out, donate=donate)
        return x

    mesh = mesh_from_jax(amesh)
    src_t = _type(mesh, x.shape, src_spec, "source")
    dst_t = _type(mesh, x.shape, tgt_spec, "target")
    if known is not None and src is not None:
        k = _type(mesh, x.shape, known, "source")
        if k.refined() != src_t.refined():
            raise ShardingError(f"src {src_spec} ({src_t}) is not how the array is laid out: {known} ({k})")
    if src_t.uneven or dst_t.uneven:
        _check_uneven(x, amesh, src_t, dst_t, src_spec, tgt_spec, concrete)
    if (src_t.partial or dst_t.partial) and not _mode(amesh):
        raise ShardingError(f"reshard {src_t} -> {dst_t}: unreduced axes need a mesh of AxisType.Explicit axes "
                            f"(JAX's rule: it has no unreduced arrays on Auto axes); inside jax.shard_map, "
                            f"verishard.jax.reshard_local runs the plan on the local blocks")
    if plan is None:
        p = _plan_for(mesh, src_t, dst_t)
    else:
        p = validate_plan(plan)
        if p.src.refined() != src_t.refined() or p.dst.refined() != dst_t.refined():
            raise VerishardError(f"the plan goes from {p.src} to {p.dst}, not from {src_t} to {dst_t}")
    if only_plan:
        return p
    r = _Redistribution(cmesh, amesh, src_t, dst_t, p, user_plan=plan is not None)
    if not concrete:
        if r.explicit or cmesh is None:
            # Explicit mode: JAX asks for jax.set_mesh where no argument names the devices; a mesh
            # from jax.set_mesh: the enclosing jit knows the devices.
            return reshard_p.bind(x, r=r)
        return _pinned(r)(x)
    out_sh = sharding if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, JaxMesh) \
        else NamedSharding(cmesh, tgt_spec)
    _STATS["misses"] += 1
    if src is None and plan is None and isinstance(sharding, NamedSharding):
        fn = _build(r, xs, out_sh, donate)
        _remember(_EAGER, _eager_key(x, xs, sharding, donate), fn)
    else:
        fn = _executor(r, xs, out_sh, donate)
    return fn(x)


# ---------------------------------------------------------------------------
# inside shard_map: the local block


def _given_type(mesh: Mesh, t, global_shape=None, local_shape=None, what: str = "src") -> ArrayType:
    """``t`` as a type over ``mesh``: an ArrayType, its text, or a
    PartitionSpec (over ``global_shape``, or over ``local_shape`` times the
    shards of each dimension)."""
    if isinstance(t, ArrayType):
        return t
    if isinstance(t, str) and t.lstrip().startswith("["):
        return ArrayType.parse(t, mesh)
    spec = parse_partition_spec(t) if isinstance(t, str) else t
    if not isinstance(spec, (PartitionSpec, tuple, list)):
        raise ShardingError(f"reshard_local {what}: expected a type, its text or a PartitionSpec, "
                            f"not {type(t).__name__}")
    if global_shape is None:
        entries = list(spec_entries(spec, unreduced=True))
        if len(entries) > len(local_shape):
            raise ShardingError(f"reshard_local {what} {spec} has {len(entries)} entries but the block has rank "
                                f"{len(local_shape)}")
        entries += [None] * (len(local_shape) - len(entries))
        global_shape = []
        for n, e in zip(local_shape, entries):
            for name in e or ():
                for q in mesh.resolve(name):
                    n *= mesh.part_sizes[q]
            global_shape.append(n)
    return from_partition_spec(mesh, global_shape, spec)


def _axis_size(name: str) -> int | None:
    try:
        return lax.axis_size(name)
    except (NameError, ValueError, KeyError):
        return None


def reshard_local(x, plan: Plan | Mesh | str, src: ArrayType | PartitionSpec | str | None = None,
                  dst: ArrayType | PartitionSpec | str | None = None):
    """Run a redistribution on the local block ``x`` of the calling device,
    inside a ``jax.shard_map`` (or another context naming the mesh axes) over
    the axes of the plan's mesh; returns the local block of the target.

    ``plan`` is a :class:`~verishard.plan.Plan` (re-checked by the verified
    checker unless this process made it), or a mesh with ``src`` and ``dst``
    (types, their text, or ``PartitionSpec``\\ s whose global shape is the
    block's times its shards), planned by :func:`verishard.plan` (cached).
    This is the entry point for a pending reduction of any kind (sum, max,
    min): ``x`` is this device's term of it, e.g. its piece of a matrix
    product. The steps are those of :func:`verishard.runtime.execute` with
    :class:`JaxBackend` (``psum``/``pmax``/``pmin``, ``psum_scatter``,
    ``all_gather``, ``all_to_all``, ``ppermute``, local slices). Works with
    ``check_vma`` on or off, and under ``jax.jit``.

    Uneven types (a size the blocks do not divide: pass the types or their
    text, since a block's ``PartitionSpec`` always divides) run on padded
    blocks: ``x`` has the source's ``local_shape`` (``ceil(g / n)`` per
    sharded dimension), the valid part first; what the steps put past the
    valid part is padding, never read into a valid position.

    >>> f = jax.shard_map(lambda v: reshard_local(v, "x=2", "[3{x}5, 2]", "[5, 1{x}2]"), mesh=jax_mesh("x=2"),
    ...                   in_specs=PartitionSpec("x"), out_specs=PartitionSpec(None, "x"))
    >>> f(jnp.array([[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [-1, -1]])).tolist()   # the last row: padding
    [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]

    >>> jm = jax_mesh("x=2")
    >>> terms = jax.device_put(jnp.arange(8.0).reshape(2, 4), NamedSharding(jm, PartitionSpec("x")))
    >>> f = jax.shard_map(lambda v: reshard_local(v[0], "x=2", "[4] partial{x}", "[2{x}4]"),
    ...                   mesh=jm, in_specs=PartitionSpec("x"), out_specs=PartitionSpec("x"))
    >>> f(terms).tolist()                   # [0, 1, 2, 3] + [4, 5, 6, 7], scattered over x
    [4.0, 6.0, 8.0, 10.0]
    """
    if isinstance(plan, Plan):
        if src is not None or dst is not None:
            raise VerishardError("reshard_local: pass a plan, or a mesh with src and dst, not both")
        p = validate_plan(plan)
    else:
        if src is None or dst is None:
            raise VerishardError("reshard_local needs a plan, or a mesh with src and dst")
        mesh = mesh_from_jax(plan) if isinstance(plan, (JaxMesh, AbstractMesh)) else Mesh.coerce(plan)
        s = _given_type(mesh, src, local_shape=tuple(x.shape), what="src")
        p = _plan_for(mesh, s, _given_type(mesh, dst, global_shape=s.global_shape, what="dst"))
    if tuple(x.shape) != tuple(p.src.local_shape):
        raise ShardingError(f"reshard_local: the block has shape {tuple(x.shape)}, but a block of {p.src} on "
                            f"{p.mesh} has shape {tuple(p.src.local_shape)}")
    missing = [f"{n} (size {k})" for n, k in p.mesh.parts if k > 1 and _axis_size(n) != k]
    if missing:
        raise ShardingError(f"reshard_local runs inside jax.shard_map over the axes of the plan's mesh {p.mesh}; "
                            f"{', '.join(missing)} is not a manual axis of that size here"
                            + (" (the plan splits an axis: shard_map over verishard.jax.jax_mesh(plan.mesh))"
                               if len(p.mesh.parts) != len(p.mesh.axes) else ""))
    return run_bits(p, x, JaxBackend(p.mesh))
