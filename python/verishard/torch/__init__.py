"""``verishard.torch.redistribute``: a drop-in for ``DTensor.redistribute``
that moves the data with a verified plan.

::

    from verishard.torch import redistribute
    y = redistribute(x, [Shard(1), Replicate()])      # same result as x.redistribute(placements=...)

The result is what ``DTensor.redistribute`` returns: the same local shard on
every rank, the same ``placements`` (and shard order), the same
``device_mesh`` (with Partial placements: the same value; see below). The
data moves by the plan ``verishard.plan`` returns for the two layouts
(``Pipelineproof.plan_spec``: every rank ends with exactly its
target block, and no rank holds more than ``max(size(src), size(dst))``
elements of array data between steps), run with torch.distributed collectives
by :mod:`verishard.torch.backend`: gloo for CPU tensors, NCCL for CUDA
tensors, on the process groups of the DTensor's ``DeviceMesh``.

What it takes:

- ``Shard(d)``, ``Replicate()`` and ``_StridedShard`` placements (and a
  source with a non-default ``shard_order``), on a ``DeviceMesh`` of any
  number of dimensions, named or not, over every rank of the default
  process group or over some of them (a sub-mesh such as ``mesh["tp"]``:
  its ranks plan, agree and run among themselves; a rank outside it gets
  its local tensor back, as with DTensor);
- ``Partial("sum" | "max" | "min")`` in the source and in the target (a
  pending reduction; the plan is ``verishard.plan``'s over the partial
  types, ``Ppipelineproof.pplan_spec``, with all-reduce, reduce-scatter and
  to-partial steps). Unlike ``DTensor.redistribute``, a target may be
  Partial where the source is not (DTensor keeps that for internal use); the
  result's local tensors are then the backend's: the rank with index 0 in
  the pending group holds the value, the others the reduction's unit
  (DTensor's own Replicate -> Partial("sum") divides by the group size
  instead; the reductions agree). Refused (:func:`_partial_problems`):
  ``Partial("avg")`` and DTensor's other reductions, Partial subclasses,
  two reductions in one placement tuple, and a target pending another
  reduction than the source;
- shapes whose sharded dimensions do not divide (uneven). DTensor keeps
  ``torch.chunk`` shards; our uneven types have blocks of ``ceil(g / n)``
  (the trailing ones short or empty). Where DTensor's shards are those
  blocks (every dimension one mesh dimension shards, and some that several
  shard: 7 over 2 x 2), the plan runs on padded buffers: each rank pads its
  shard to the block size, runs the verified plan (``Upipelineproof``;
  ``Ucheckerproof.ucheck_correct_chunked``: no padding reaches a valid
  position) and keeps the valid part of its target block
  (:func:`~verishard.torch.backend.run_chunked`), which is the shard
  ``DTensor.redistribute`` gives it. Every shard of the source and of the
  target is compared with DTensor's own offsets
  (:func:`verishard.torch.dtensor.layout_mismatches`, in :func:`_types`).
  Where they differ (a dimension several mesh dimensions shard: chunk by
  chunk, 5 over 2 x 2 is 2, 1, 1, 1 for DTensor, 2, 2, 1, 0 for us; or
  interleaved by ``_StridedShard``), both layouts become explicit boxes per
  rank read off DTensor itself (:func:`verishard.torch.dtensor.layout_boxes`) and
  the verified box schedule runs point to point (:func:`_box_entry`,
  ``Boxesworldproof.brounds_correct``; Partial sources reduced first,
  Partial targets made pending after). The core takes that decision:
  where our types convert, they are only proposed, with DTensor's boxes of
  both layouts, to ``Layoutchoice.lplan``, which takes the type planner
  only when the types describe those boxes exactly
  (``Layoutchoiceproof.lplan_spec``; :func:`_core_choice`), and then
  answers with the plan that runs (``Exchange.ueplan_problem``'s), else the
  box schedule. Partial placements with an uneven
  shape whose layouts agree are planned as reduce, exchange, make-pending
  (``Puexchange.v``).

It is differentiable as ``DTensor.redistribute`` is: the backward
redistributes the gradient back to the input's placements (DTensor's rule:
a Partial input placement becomes Replicate unless the gradient is Partial
there too) with a verified plan of its own (and is itself differentiable).

Plans are cached per (default group and rank, mesh, global shape, stride,
dtype, source placements and shard order, target placements): a second call
with the same layouts does no planning work (:func:`cache_info`).

Before any data moves, every rank checks its input and plan and the ranks
compare a fingerprint of the plan through the default group's store
(:func:`verishard.torch.backend.agree`); bad input or ranks that disagree
raise the same :class:`~verishard.torch.backend.RedistributionRefused` (a
``ValueError``) on every rank, naming every failing rank, and a rank that
does not arrive within the deadline (60 s by default) fails the others with
:class:`~verishard.torch.backend.RanksMissing` naming it. By default the
ranks agree when a rank first uses a cached plan (``check_agreement=True``
or ``"first"``); ``"always"`` agrees on every call, ``False`` never (a
problem is then raised on the ranks that see it).

DTensor's keywords ``forward_dtype``, ``backward_dtype`` and ``async_op``
mean what they mean there (:func:`redistribute`). Under ``torch.compile``
the plan is made while tracing and its collectives enter the graph as
functional collectives (:class:`~verishard.torch.backend.FuncolBackend`).

Another ``device_mesh`` than the DTensor's runs the verified cross-mesh
schedule point to point (:mod:`verishard.torch.crossmesh`, which also holds
:func:`transfer`, a whole state dict in one schedule). :func:`enable` routes
DTensor's own redistributions through verified plans.

Importing this module imports torch; see ``docs/torch.md``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch._dynamo
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
from torch.distributed.tensor.placement_types import Placement

from .. import core
from . import dtensor as _conv
from ..errors import VerishardError
from ..mesh import Mesh
from ..plan import Plan
from ..plan import from_report as _from_report, plan as _verified_plan
from ..runtime.crossmesh_mpi import DEFAULT_BUDGET
from ..runtime.backend import AxisGroup
from .backend import (BoxPlan, NotSupportedYet, RanksMissing, RedistributionRefused, TorchBackend, abandoned,
                      agree, fingerprint, mesh_groups, real_tensors, reduction_problem, run_chunked, run_plan,
                      tracing, world)
from .specs import (CHECKS, INVALID, UNSUPPORTED, planning_mesh,  # noqa: F401  (CHECKS: this module's name too)
                    agreement_policy as _policy, dim_label as _dim_label, holdings as _holdings,
                    mesh_ranks as _mesh_ranks, normalise_placements as _normalise,
                    require_initialized as _require_initialized, spec_types as _types)

__all__ = ["redistribute", "transfer", "plan_transfer", "plan_transfer_world", "fused", "block_fp8", "BlockFP8Shard", "quantize_block_fp8",
           "enable", "disable", "enabled", "routing_info",
           "check_entry_point", "EntryPointMoved", "planning_mesh", "plan_for", "cache_info", "cache_clear",
           "RedistributionRefused", "NotSupportedYet", "RanksMissing"]



# ---------------------------------------------------------------------------
# meshes


def _agreement_ranks(device_mesh: DeviceMesh) -> tuple[int, ...] | None:
    """The world ranks that plan and agree on a redistribution over
    ``device_mesh``: None (the whole default group) for a mesh over every
    rank, else the mesh's own ranks (a ``tp`` or ``dp`` sub-mesh of a 2-D or
    3-D model: each group agrees within itself, its collectives run on its
    own process groups)."""
    if device_mesh.size() == dist.get_world_size():
        return None
    return tuple(sorted(int(r) for r in device_mesh.mesh.flatten().tolist()))


# ---------------------------------------------------------------------------
# what the verified core cannot type: one place each


def _partial_problems(src: DTensorSpec, dst: DTensorSpec, device_mesh: DeviceMesh,
                      what: tuple[str, str] = ("source", "target")) -> list[tuple[str, str]]:
    """Partial placements our types cannot hold (``verishard.torch.dtensor.partial_of``:
    ``Partial("avg")``, other reductions, Partial subclasses: unsupported;
    two reductions in one tuple: invalid, DTensor refuses them too), a
    reduction the dtype or the mesh's process group cannot run
    (:func:`verishard.torch.backend.reduction_problem`: unsupported), and a
    target pending another reduction than the source (unsupported: a plan
    keeps the reduction)."""
    names = tuple(device_mesh.mesh_dim_names) if device_mesh.mesh_dim_names else None
    out, ops = [], []
    for spec, w in zip((src, dst), what):
        try:
            op, dims = _conv.partial_of(spec.placements, names)
        except _conv.UnsupportedReduction as e:
            out.append((UNSUPPORTED, f"the {w}: {e}"))
            continue
        except VerishardError as e:
            out.append((INVALID, f"the {w}: {e}"))
            continue
        ops.append((op, dims))
    if not out and src.tensor_meta is not None:   # the dtype: a unit for the reduction, a group that runs it
        reduced = [i for i in ops[0][1] if i not in ops[1][1]]   # the source's pending dimensions reduced here
        for (op, dims), w, over in zip(ops, what, (reduced, ())):
            why = reduction_problem(src.tensor_meta.dtype, op, bool(over), device_mesh.device_type) if dims else None
            if why:
                out.append((UNSUPPORTED, f"the {w}: {why}"))
                break
    if not out and ops[0][1] and ops[1][1] and ops[0][0] != ops[1][0]:
        (a, da), (b, db) = ops
        on = lambda dims: ", ".join(_dim_label(device_mesh, i) for i in dims)  # noqa: E731
        out.append((UNSUPPORTED, f"the {what[0]} is pending a {a} (on {on(da)}) and the {what[1]} a {b} "
                                 f"(on {on(db)}): a verified plan keeps the pending reduction; reduce the "
                                 f"{what[0]} first (to Replicate() or Shard(d) on those mesh dimensions)"))
    return out


# ---------------------------------------------------------------------------
# the plan cache


@dataclass
class _Entry:
    """Everything a cached call needs on this rank: the plan (None: nothing
    to do), the output's spec, the shape of this rank's input local tensor
    (DTensor's ``torch.chunk`` shard: on an uneven dimension it differs from
    rank to rank), the agreement record, and whether the ranks have agreed
    on it (``check_agreement="first"`` agrees on an entry's first use only)."""

    plan: Plan | None
    target_spec: DTensorSpec
    local_shape: tuple[int, ...]
    fp: int
    record: dict
    agreed: bool = False
    boxes: BoxPlan | None = None          # the box schedule, where the collectives cannot express the layouts
    out_shape: tuple[int, ...] = ()       # with boxes: this rank's target local shape
    pending: tuple = (None, (), ())       # with boxes: the reduction, the source's and the target's pending mesh dims
    ranks: tuple[int, ...] | None = None  # the world ranks that agree on it (None: the whole default group)


_CACHE: "OrderedDict[Any, _Entry]" = OrderedDict()
_CACHE_SIZE = 1024
_STATS = {"hits": 0, "misses": 0, "plans": 0}


def cache_info() -> dict[str, int]:
    """Hits, misses and plans made (calls of ``verishard.plan``) since the
    last :func:`cache_clear`, and the number of cached entries.

    >>> cache_clear(); cache_info()
    {'hits': 0, 'misses': 0, 'plans': 0, 'size': 0}
    """
    return {**_STATS, "size": len(_CACHE)}


def cache_clear() -> None:
    """Forget every cached plan and reset the counters."""
    _CACHE.clear()
    for k in _STATS:
        _STATS[k] = 0


def _lookup(key: Any) -> _Entry | None:
    try:
        e = _CACHE.get(key)
    except TypeError:  # unhashable input: the slow path names the problem
        return None
    if e is not None:
        _STATS["hits"] += 1
        _CACHE.move_to_end(key)
    return e


def _store(key: Any, e: _Entry) -> None:
    _STATS["misses"] += 1
    try:
        _CACHE[key] = e
    except TypeError:
        return
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)


def _desc(spec: DTensorSpec) -> str:
    order = "" if spec.use_strided_shard_as_shard_order else f" order {tuple(spec.shard_order)}"
    return "(" + ", ".join(map(str, spec.placements)) + ")" + order


def _extra(src: DTensorSpec, dst: DTensorSpec) -> tuple[str, str, dict]:
    """What the ranks agree on besides the plan: the dtype, the global shape,
    both placements and the mesh's rank layout (:func:`_mesh_ranks`), as
    text for the fingerprint and as the record's named fields."""
    dtype = str(src.tensor_meta.dtype)
    ranks = _mesh_ranks(src.mesh) if src.mesh == dst.mesh else f"{_mesh_ranks(src.mesh)} -> {_mesh_ranks(dst.mesh)}"
    fields = {"dtype": dtype, "dtype_name": dtype, "mesh_ranks": ranks}
    return dtype, f"{dtype}|{tuple(src.tensor_meta.shape)}|{_desc(src)}|{_desc(dst)}|{ranks}", fields


def _identity_entry(mesh: Mesh, src: DTensorSpec, local_shape: tuple[int, ...]) -> _Entry:
    """DTensor's short cut (the placements do not change): keep the local tensor and the spec."""
    dtype, extra, fields = _extra(src, src)
    fp = fingerprint(None, f"{mesh}|{extra}")
    rec = {"errors": [], "plan": f"{fp:x}", "desc": f"{_desc(src)} -> itself on {mesh}, {dtype}", **fields}
    return _Entry(None, src, local_shape, fp, rec)


def _make_entry(mesh: Mesh, p: Plan, src: DTensorSpec, dst: DTensorSpec, out_spec: DTensorSpec,
                rank: int) -> _Entry:
    """The entry of the verified plan ``p`` for plan rank ``rank``, whose
    input is the valid part of its source block (the padded buffers exist
    only while the plan runs, :func:`run_chunked`)."""
    dtype, extra, fields = _extra(src, dst)
    _STATS["plans"] += 1
    fp = fingerprint(p, extra)
    rec = {"errors": [], "plan": f"{fp:x}", "desc": f"{p.src} -> {p.dst} on {mesh}, {dtype}", **fields}
    return _Entry(p, out_spec, p.src.valid_shape(rank), fp, rec)


def _core_choice(mesh_obj: DeviceMesh, mesh: Mesh, src: DTensorSpec, dst: DTensorSpec, s: Any, d: Any,
                 what: tuple[str, str] = ("source", "target")) -> tuple[Plan | None, list]:
    """The verified core's choice for the two layouts, one call:
    ``Layoutchoice.lplan`` on DTensor's own boxes of both layouts
    (:func:`_holdings`, world ranks read as device indices) with our types
    ``s``, ``d`` proposed takes them only when they describe those boxes
    exactly, and then answers with the type planner's plan
    (``Exchange.ueplan_problem``: collectives, or the exchange where it
    receives strictly less; theorem ``Layoutchoiceproof.lplan_spec``). That
    plan is returned. With a Partial type the core is given the array types
    (lplan plans nothing pending): where it takes them, the plan is the
    pending pipeline's (``Ppipeline.pplan_problem``, :func:`verishard.plan`).
    Otherwise the problem that sends the pair to the box schedule
    (:func:`_box_entry`)."""
    index = {r: j for j, r in enumerate(int(r) for r in mesh_obj.mesh.flatten().tolist())}
    try:
        ls, lt = ([(index[r], box) for r, box, _ in _holdings(spec, mesh_obj)[0]] for spec in (src, dst))
        per_round = max(1, DEFAULT_BUDGET // src.tensor_meta.dtype.itemsize)
        answer = core.lplan(mesh, ls, lt, per_round, (s.plain, d.plain))
        if not isinstance(answer, core.PlanReport):
            return None, [(UNSUPPORTED, f"our types {s.plain} -> {d.plain} do not describe DTensor's layouts of "
                                        f"the {what[0]} and the {what[1]} (Layoutchoice.lplan)")]
        if s.partial or d.partial:
            return _verified_plan(mesh, s, d), []
        return _from_report(answer, s, d), []
    except VerishardError as err:
        return None, [(INVALID, str(err))]


def _entry_for(mesh_obj: DeviceMesh, src: DTensorSpec, dst: DTensorSpec, out_spec: DTensorSpec,
               what: tuple[str, str] = ("source", "target")) -> tuple[_Entry | None, list]:
    """The entry for ``src -> dst`` on ``mesh_obj`` (the output's spec
    ``out_spec``), or the problems: the one place a forward call, a
    gradient's reverse call and a routed DTensor redistribution plan.
    Reductions our types cannot hold are refused; the core chooses between
    our types' plan and the box schedule (:func:`_core_choice`)."""
    problems = _partial_problems(src, dst, mesh_obj, what)
    if problems:
        return None, problems
    mesh = planning_mesh(mesh_obj)
    s, d, problems = _types(mesh, src, dst, what)
    p = None
    if not problems:
        p, problems = _core_choice(mesh_obj, mesh, src, dst, s, d, what)
    if problems:
        e, problems = _box_entry(mesh_obj, src, dst, out_spec, problems, what)
    else:
        try:
            e = _make_entry(mesh, p, src, dst, out_spec, mesh_groups(mesh_obj).rank)
        except VerishardError as err:
            return None, [(INVALID, str(err))]
    if e is not None:
        e.ranks = _agreement_ranks(mesh_obj)
    return e, problems


def _box_entry(mesh_obj: DeviceMesh, src: DTensorSpec, dst: DTensorSpec, out_spec: DTensorSpec,
               problems: list, what: tuple[str, str] = ("source", "target")) -> tuple[_Entry | None, list]:
    """Where our types cannot describe a layout (``problems`` from
    :func:`_types`: DTensor's nested ``torch.chunk`` shards, uneven
    ``_StridedShard``), the entry of the verified box schedule between the
    two layouts as DTensor lays them out (:func:`verishard.torch.dtensor.layout_boxes`;
    ``Boxesworldproof.brounds_correct``), run point to point. A Partial
    source is reduced first (all-reduce over its pending mesh dimensions), a
    Partial target made pending after, as the plans of collectives do
    (the rank with index 0 in the pending group keeps the value); the
    callers refuse the reductions our types cannot hold
    (:func:`_partial_problems`) before."""
    if any(k != UNSUPPORTED for k, _ in problems):
        return None, problems
    pending = [tuple(i for i, p in enumerate(spec.placements) if p.is_partial()) for spec in (src, dst)]
    op = next((p.reduce_op for spec in (src, dst) for p in spec.placements if p.is_partial()), None)
    try:
        s, s_shapes = _holdings(src, mesh_obj)
        d, d_shapes = _holdings(dst, mesh_obj)
        boxes = BoxPlan.build(tuple(src.tensor_meta.shape), s, d, src.tensor_meta.dtype.itemsize, DEFAULT_BUDGET)
    except VerishardError as err:
        return None, [(INVALID, str(err))]
    _STATS["plans"] += 1
    me = [int(r) for r in mesh_obj.mesh.flatten().tolist()].index(dist.get_rank())
    dtype, extra, fields = _extra(src, dst)
    fp = fingerprint(None, f"boxes|{planning_mesh(mesh_obj)}|{extra}")
    rec = {"errors": [], "plan": f"{fp:x}", "desc": f"{_desc(src)} -> {_desc(dst)} as boxes, {dtype}", **fields}
    return _Entry(None, out_spec, s_shapes[me], fp, rec, boxes=boxes, out_shape=d_shapes[me],
                  pending=(op, *pending)), []


def _move_local(entry: _Entry, local: torch.Tensor, mesh_obj: DeviceMesh) -> torch.Tensor:
    """Move this rank's local tensor by the entry (collective over the mesh)."""
    if entry.boxes is not None and tracing():
        raise NotSupportedYet(
            "redistribution refused while torch.compile traces: DTensor lays out "
            f"{tuple(map(str, entry.target_spec.placements))} of shape {tuple(entry.target_spec.tensor_meta.shape)} "
            "in boxes our types do not describe, which move point to point (batch_isend_irecv), and a compiled "
            "graph holds functional collectives only; compile without fullgraph=True (Dynamo then runs this "
            "call eagerly) or call redistribute outside the compiled region")
    if entry.boxes is not None:
        op, before, after = entry.pending
        if before or after:
            mesh, backend = planning_mesh(mesh_obj), TorchBackend(mesh_groups(mesh_obj))
        if before:
            local = backend.all_reduce(local, AxisGroup.of(mesh, before), op)
        out = entry.boxes.run(local, entry.out_shape)
        return backend.to_partial(out, AxisGroup.of(mesh, after), op) if after else out
    if entry.plan is None:
        return local
    groups = mesh_groups(mesh_obj)
    if entry.plan.src.uneven or entry.plan.dst.uneven:  # DTensor's torch.chunk shards: pad, run, keep the valid part
        return run_chunked(entry.plan, local, groups)
    return run_plan(entry.plan, local, groups)


def plan_for(dtensor: DTensor, placements: Sequence[Placement], *,
             device_mesh: DeviceMesh | None = None) -> Plan | BoxPlan | None:
    """The verified plan :func:`redistribute` runs for these arguments (a
    :class:`~verishard.torch.backend.BoxPlan` where the collectives cannot
    express the layouts; None when the local tensor is kept as it is);
    local, no communication. Raises
    :class:`~verishard.torch.backend.RedistributionRefused` naming the problem."""
    _require_initialized()
    key, entry, problems = _forward_entry(dtensor, device_mesh, placements)
    if problems:
        raise _local_error(problems)
    return entry.boxes if entry.boxes is not None else entry.plan


# ---------------------------------------------------------------------------
# checking the arguments (DTensor's rules, with errors that name the problem)


def _forward_entry(x: Any, device_mesh: Any, placements: Any) -> tuple[Any, _Entry | None, list]:
    """(cache key, entry, problems) for a forward call; plans on a miss.

    The key holds everything the entry depends on: the default group and this
    process's rank in it (an uneven entry's local shapes are this rank's),
    the input's spec (mesh, placements, shard order, global shape, stride,
    dtype), the target placements and the mesh argument."""
    if not isinstance(x, DTensor):
        return None, None, [(INVALID, f"redistribute expects a DTensor, not {type(x).__name__}")]
    mesh_obj = x.device_mesh if device_mesh is None else device_mesh
    key = (world(), dist.get_rank(), x._spec, tuple(placements) if isinstance(placements, (list, tuple))
           else placements, mesh_obj)
    e = _lookup(key)
    if e is not None:
        return key, e, []
    if device_mesh is not None:
        if not isinstance(device_mesh, DeviceMesh):
            return key, None, [(INVALID, f"device_mesh must be a DeviceMesh, not {type(device_mesh).__name__}")]
        if device_mesh != x.device_mesh:
            return key, None, [(UNSUPPORTED, f"device_mesh {device_mesh} is not the DTensor's mesh {x.device_mesh}: "
                                             "redistribute runs it point to point (verishard.torch.crossmesh); its "
                                             "schedule is verishard.torch.plan_transfer's, not a plan of collectives")]
    src = x._spec
    pl, problems = _normalise(placements, x, mesh_obj)
    if problems:
        return key, None, problems
    mesh = planning_mesh(mesh_obj)
    local_shape = tuple(x._local_tensor.shape)
    if src.placements == pl:  # DTensor's short cut: keep the local tensor and the spec
        e = _identity_entry(mesh, src, local_shape)
        e.ranks = _agreement_ranks(mesh_obj)
        _store(key, e)
        return key, e, []
    dst = DTensorSpec(mesh_obj, pl, tensor_meta=src.tensor_meta)
    e, problems = _entry_for(mesh_obj, src, dst, dst)
    if problems:
        return key, None, problems
    if local_shape != e.local_shape:
        return key, None, [(INVALID, f"the DTensor's local tensor has shape {local_shape}, but placements "
                                     f"{src.placements} of the global shape {tuple(x.shape)} give local shape "
                                     f"{e.local_shape}" + (" on this rank" if e.plan is not None and e.plan.src.uneven
                                                           else ""))]
    _store(key, e)
    return key, e, []


def _backward_entry(grad: Any, prev: DTensorSpec) -> tuple[Any, _Entry | None, list]:
    """(cache key, entry, problems) for the reverse redistribution of a
    gradient to the input's placements (DTensor's ``_redistribute_backward``)."""
    if not isinstance(grad, DTensor):
        return None, None, [(INVALID, f"the gradient is a {type(grad).__name__}, not a DTensor")]
    key = (world(), dist.get_rank(), "backward", grad._spec, prev)
    e = _lookup(key)
    if e is not None:
        return key, e, []
    cur = grad._spec
    meta = cur.tensor_meta
    mesh_obj = prev.mesh
    if cur.mesh != mesh_obj:
        return key, None, [(UNSUPPORTED, f"mismatched mesh: the gradient is on {cur.mesh}, the input on {mesh_obj}")]
    # DTensor's _redistribute_backward: where the input was Partial and the
    # gradient is not (Shard, _StridedShard or Replicate), the gradient stays
    # Replicate there (no conversion back to Partial).
    pl = tuple(Replicate() if p.is_partial() and not c.is_partial() else p
               for c, p in zip(cur.placements, prev.placements))
    target = DTensorSpec(mesh_obj, pl, tensor_meta=meta,
                         use_strided_shard_as_shard_order=prev.use_strided_shard_as_shard_order)
    out_spec = DTensorSpec(mesh_obj, pl, tensor_meta=TensorMeta(meta.shape, meta.stride, meta.dtype),
                           use_strided_shard_as_shard_order=prev.use_strided_shard_as_shard_order)
    e, problems = _entry_for(mesh_obj, cur, target, out_spec, ("gradient", "input's layout"))
    if e is not None:
        _store(key, e)
    return key, e, problems


def _local_error(problems: list) -> RedistributionRefused:
    cls = NotSupportedYet if all(k == UNSUPPORTED for k, _ in problems) else RedistributionRefused
    return cls("redistribution refused before any data moved:\n  "
               + "\n  ".join(f"rank {dist.get_rank() if dist.is_initialized() else 0}: {t}" for _, t in problems))


def _agree_on(entry: _Entry | None, problems: list, policy: tuple, ranks: tuple[int, ...] | None = None) -> None:
    """The agreement :func:`redistribute`'s ``check_agreement`` asks for:
    on a problem (every mode but False), on an entry's first use ("first"),
    on every call ("always", and every call but False on a rank that left a
    collective unfinished: the others are then refused at once); a problem
    without agreement is raised here. Among the entry's ranks (``ranks``
    without an entry: the mesh's, :func:`_agreement_ranks`)."""
    mode, deadline = policy
    if mode is False or (mode == "first" and entry is not None and entry.agreed and abandoned() is None):
        if problems:
            raise _local_error(problems)
        return
    # the policy is agreed on too: ranks that agree at other times would wait for each other until the deadline
    if entry is not None:
        agree(fingerprint(None, f"{entry.fp:x}|{mode}"), {**entry.record, "check_agreement": str(mode)},
              deadline_s=deadline, ranks=entry.ranks)
        entry.agreed = True
    else:
        agree(0, {"errors": [t for _, t in problems], "unsupported": all(k == UNSUPPORTED for k, _ in problems),
                  "check_agreement": str(mode)}, deadline_s=deadline, ranks=ranks)


def _run(x: Any, entry: _Entry | None, problems: list, policy: tuple) -> torch.Tensor:
    """Agree (or raise), then move this rank's local tensor by the entry's plan."""
    local = x._local_tensor if isinstance(x, DTensor) else None
    if entry is not None and local is not None and tuple(local.shape) != entry.local_shape:
        problems = [(INVALID, f"the DTensor's local tensor has shape {tuple(local.shape)}, but its placements give "
                              f"local shape {entry.local_shape}")]
        entry = None
    _agree_on(entry, problems, policy, _agreement_ranks(x.device_mesh) if problems and isinstance(x, DTensor)
              else None)
    assert entry is not None
    return _move_local(entry, local, entry.target_spec.mesh)


# ---------------------------------------------------------------------------
# autograd


def _with_mesh(spec: DTensorSpec, mesh: DeviceMesh) -> DTensorSpec:
    """``spec`` on the caller's mesh object (a cached spec may hold an equal one)."""
    if spec.mesh is mesh:
        return spec
    return DTensorSpec(mesh, spec.placements, tensor_meta=spec.tensor_meta,
                       shard_order=None if spec.use_strided_shard_as_shard_order else spec.shard_order,
                       use_strided_shard_as_shard_order=spec.use_strided_shard_as_shard_order)


def _cast(x: DTensor, dtype: torch.dtype) -> DTensor:
    """``x`` with its local tensor cast to ``dtype`` and its spec saying so
    (DTensor's ``forward_dtype`` / ``backward_dtype`` cast, before the
    collectives); ``x`` itself when it has that dtype already."""
    if x._local_tensor.dtype == dtype:
        return x
    spec, m = x._spec, x._spec.tensor_meta
    spec = DTensorSpec(spec.mesh, spec.placements, tensor_meta=TensorMeta(m.shape, m.stride, dtype),
                       shard_order=None if spec.use_strided_shard_as_shard_order else spec.shard_order,
                       use_strided_shard_as_shard_order=spec.use_strided_shard_as_shard_order)
    return DTensor(x._local_tensor.to(dtype), spec, requires_grad=False)


def _with_dtype(spec: DTensorSpec, dtype: torch.dtype) -> DTensorSpec:
    m = spec.tensor_meta
    if m.dtype == dtype:
        return spec
    return DTensorSpec(spec.mesh, spec.placements, tensor_meta=TensorMeta(m.shape, m.stride, dtype),
                       shard_order=None if spec.use_strided_shard_as_shard_order else spec.shard_order,
                       use_strided_shard_as_shard_order=spec.use_strided_shard_as_shard_order)


class _Redistribute(torch.autograd.Function):
    """Forward: the input cast to the forward dtype, then the verified plan
    from its layout to ``placements``. Backward: :class:`_Reverse` (the
    gradient, cast to the backward dtype, back to the input's layout, then
    cast to the input's dtype), as DTensor's ``Redistribute`` does."""

    @staticmethod
    def forward(ctx, x, device_mesh, placements, policy, dtypes):  # type: ignore[override]
        op_dtype, ctx.bwd_dtypes = dtypes[0], dtypes[1:]
        if op_dtype is not None:
            x = _cast(x, op_dtype)
        with real_tensors():   # planning reads the mesh's rank tensor: never traced
            _, entry, problems = _forward_entry(x, device_mesh, placements)
        out = _run(x, entry, problems, policy)
        ctx.src_spec, ctx.policy = x._spec, policy
        if entry.plan is None and entry.boxes is None:  # DTensor's short cut: the input's own spec
            return DTensor(out, x._spec, requires_grad=x.requires_grad)
        spec = _with_mesh(entry.target_spec, x.device_mesh if device_mesh is None else device_mesh)
        return DTensor(out, spec, requires_grad=x.requires_grad)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return _Reverse.apply(grad, ctx.src_spec, ctx.policy, *ctx.bwd_dtypes), None, None, None, None


class _Reverse(torch.autograd.Function):
    """A gradient redistributed to an earlier layout by a verified plan, at
    ``op_dtype`` (the gradient cast first) and returned as ``out_dtype``
    (DTensor's ``_redistribute_backward``); differentiable again (its
    backward is another :class:`_Reverse`)."""

    @staticmethod
    def forward(ctx, grad, prev_spec, policy, op_dtype, out_dtype):  # type: ignore[override]
        _require_initialized()
        ctx.original_dtype, ctx.op_dtype, ctx.policy = grad._local_tensor.dtype, op_dtype, policy
        grad = _cast(grad, op_dtype)
        with real_tensors():
            _, entry, problems = _backward_entry(grad, _with_dtype(prev_spec, op_dtype))
        out = _run(grad, entry, problems, policy)
        ctx.spec = grad._spec
        spec = _with_mesh(entry.target_spec, prev_spec.mesh)
        if out.dtype != out_dtype:  # DTensor casts the gradient back to the input's dtype
            out = out.to(out_dtype)
            spec = _with_dtype(spec, out_dtype)
        return DTensor(out, spec, requires_grad=grad.requires_grad)

    @staticmethod
    def backward(ctx, grad2):  # type: ignore[override]
        return _Reverse.apply(grad2, ctx.spec, ctx.policy, ctx.op_dtype, ctx.original_dtype), None, None, None, None


def _arguments(args: tuple, placements: Any, device_mesh: Any) -> tuple[Any, Any]:
    """``(placements, device_mesh)`` from ours ``(x, placements)`` or
    DTensor's ``(x, device_mesh, placements)`` positional order."""
    if len(args) > 2:
        raise RedistributionRefused(f"redistribute takes a DTensor, then placements (or a DeviceMesh and "
                                    f"placements, DTensor's order), not {len(args) + 1} positional arguments")
    if args and isinstance(args[0], DeviceMesh):
        if device_mesh is not None:
            raise RedistributionRefused("device_mesh is given twice (positionally and as a keyword)")
        device_mesh, args = args[0], args[1:]
    if args:
        if placements is not None:
            raise RedistributionRefused("placements is given twice (positionally and as a keyword)")
        placements = args[0]
    return (tuple(placements) if isinstance(placements, list) else placements), device_mesh


@torch._dynamo.nonstrict_trace
def redistribute(dtensor: DTensor, *args: Any, placements: Sequence[Placement] | None = None,
                 device_mesh: DeviceMesh | None = None, async_op: bool = False,
                 forward_dtype: torch.dtype | None = None, backward_dtype: torch.dtype | None = None,
                 check_agreement: bool | str = True, deadline_s: float | None = None) -> DTensor:
    """``dtensor.redistribute(device_mesh, placements, async_op=...,
    forward_dtype=..., backward_dtype=...)``, moved by a verified plan.

    Called as ``redistribute(x, placements)``, ``redistribute(x, placements,
    device_mesh=m)`` or in DTensor's order ``redistribute(x, m, placements)``.
    Collective: every rank of the DTensor's mesh calls it with the same
    arguments (a rank outside the mesh gets its local tensor back, as DTensor
    does). Returns a new DTensor with the same local shard on every rank,
    the same placements and the same device mesh as ``DTensor.redistribute``
    (the input's local tensor itself when the placements do not change, as
    DTensor does). Differentiable; the plan is cached.

    DTensor's keywords, with its semantics: ``forward_dtype`` casts the
    local tensor before the redistribution (the result has that dtype);
    ``backward_dtype`` casts the gradient before the backward's
    redistribution (default: the input's dtype), which returns it as the
    input's dtype; ``async_op=True`` returns the completed result (a caller
    sees the same values, placements and gradients as with DTensor's
    ``AsyncCollectiveTensor``, which waits on first use).

    Partial placements (``"sum"``, ``"max"``, ``"min"``) may be in the source
    and the target; a Partial target gives a DTensor with those placements
    whose local tensors reduce to the value.

    ``check_agreement``: True (or ``"first"``, the default) compares the
    ranks' plans when this rank first uses a cached plan (and whenever a rank
    finds a problem); ``"always"`` on every call (it also catches ranks whose
    arguments differ on a later call, at the cost of one store round trip per
    call); False never (a problem is then raised on the ranks that see it).
    The ranks that agree are the mesh's (a sub-mesh agrees within itself).
    ``deadline_s``: how long the agreement waits for the other ranks
    (default :data:`verishard.torch.backend.DEADLINE_S`, 60 s) before it
    fails with :class:`~verishard.torch.backend.RanksMissing` naming those
    that did not arrive.

    Under ``torch.compile`` (``fullgraph=True`` included) it is a
    ``nonstrict_trace`` function: planned while the graph is traced, its
    plan's collectives enter an AOT graph as functional collectives
    (docs/torch.md, ``torch.compile``).

    Raises, on every rank and before any data moves,
    :class:`~verishard.torch.backend.RedistributionRefused` for bad input
    (placements of the wrong length, a dimension out of range, another
    DeviceMesh, mixed Partial reductions, ranks that disagree) and
    :class:`~verishard.torch.backend.NotSupportedYet` for ``Partial("avg")``
    and DTensor's other reductions and a change of the pending reduction
    (module docstring).
    """
    return _redistribute(dtensor, args, placements, device_mesh, async_op, forward_dtype, backward_dtype,
                         check_agreement, deadline_s)


@torch.compiler.disable(recursive=True)   # Dynamo traces none of it: nonstrict_trace above runs it as Python
def _redistribute(dtensor: Any, args: tuple, placements: Any, device_mesh: Any, async_op: bool,
                  forward_dtype: Any, backward_dtype: Any, check_agreement: Any, deadline_s: Any) -> DTensor:
    _require_initialized()
    placements, device_mesh = _arguments(args, placements, device_mesh)
    policy = _policy(check_agreement, deadline_s)
    for name, d in (("forward_dtype", forward_dtype), ("backward_dtype", backward_dtype)):
        if d is not None and not isinstance(d, torch.dtype):
            raise RedistributionRefused(f"{name} must be a torch.dtype or None, not {d!r}")
    if not isinstance(dtensor, DTensor):
        return _Redistribute.apply(dtensor, device_mesh, placements, policy, (None, None, None))  # refused there
    input_dtype = dtensor._local_tensor.dtype
    if isinstance(device_mesh, DeviceMesh) and device_mesh != dtensor.device_mesh:
        from .crossmesh import crossmesh_redistribute
        x = dtensor if forward_dtype is None else dtensor.to(forward_dtype)
        return crossmesh_redistribute(x, device_mesh, placements, policy)
    if not dtensor.device_mesh._is_current_rank_part_of_mesh():
        return _outside_mesh(dtensor, placements, forward_dtype or input_dtype)
    dtypes = (forward_dtype or input_dtype, backward_dtype or input_dtype, input_dtype)
    return _Redistribute.apply(dtensor, device_mesh, placements, policy, dtypes)


def _outside_mesh(x: DTensor, placements: Any, dtype: torch.dtype) -> DTensor:
    """DTensor's result on a rank outside the DTensor's mesh: its own (empty)
    local tensor with the target placements; no communication."""
    pl, _ = _normalise(placements, x, x.device_mesh)
    local = x._local_tensor.to(dtype)
    spec = DTensorSpec(x.device_mesh, pl if pl is not None else x.placements,
                       tensor_meta=TensorMeta(x.shape, x.stride(), dtype))
    return DTensor(local, spec, requires_grad=x.requires_grad)


from .crossmesh import plan_transfer, plan_transfer_world, transfer  # noqa: E402  (it uses this module's checks)
from .targets import BlockFP8Shard, block_fp8, fused, quantize_block_fp8  # noqa: E402,F401  (transfer's targets)


# ---------------------------------------------------------------------------
# DTensor's own redistributions: enable()

# The torch releases whose internal entry point this was written against and tested on.
TESTED_TORCH = ("2.13",)
# Where DTensor looks the entry point up: each module imported it by name.
_ENTRY_MODULES = ("torch.distributed.tensor._redistribute", "torch.distributed.tensor._dispatch",
                  "torch.distributed.tensor._api")
_ENTRY_PARAMS = ("local_tensor", "current_spec", "target_spec", "async_op")
_ROUTING: dict[str, Any] = {"original": None, "routed": None, "depth": 0}
_ROUTE_STATS: dict[str, Any] = {"routed": 0, "fallbacks": 0, "reasons": {}}


class EntryPointMoved(VerishardError, RuntimeError):
    """torch's internal redistribution entry point is not where
    :func:`enable` expects it (another torch release): nothing was patched."""


def check_entry_point() -> Any:
    """DTensor's ``redistribute_local_tensor`` as every module that calls it
    holds it, checked: the same function everywhere, with the parameters
    :func:`enable` passes on. Raises :class:`EntryPointMoved` naming what
    differs (then :func:`enable` would route nothing)."""
    import importlib
    import inspect
    found = {}
    for name in _ENTRY_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            raise EntryPointMoved(f"torch {torch.__version__}: cannot import {name} ({e}); verishard.torch.enable "
                                  f"is written for torch {', '.join(TESTED_TORCH)}") from None
        fn = getattr(mod, "redistribute_local_tensor", None)
        if fn is None:
            raise EntryPointMoved(f"torch {torch.__version__}: {name} has no redistribute_local_tensor; "
                                  f"verishard.torch.enable is written for torch {', '.join(TESTED_TORCH)}")
        found[name] = getattr(fn, "__wrapped_original__", fn)
    originals = set(map(id, found.values()))
    if len(originals) != 1:
        raise EntryPointMoved(f"torch {torch.__version__}: the modules {', '.join(_ENTRY_MODULES)} hold different "
                              "redistribute_local_tensor functions")
    fn = next(iter(found.values()))
    params = tuple(inspect.signature(fn).parameters)
    if params[:3] != _ENTRY_PARAMS[:3] or _ENTRY_PARAMS[3] not in params:
        raise EntryPointMoved(f"torch {torch.__version__}: redistribute_local_tensor takes {params}, verishard "
                              f"routes {_ENTRY_PARAMS}")
    return fn


def enable(*, force: bool = False) -> None:
    """Route DTensor's own redistributions (``DTensor.redistribute``, the
    implicit ones inside ops and their backward) through verified plans:
    every call of torch's ``redistribute_local_tensor`` (in every module of
    torch that holds it, :func:`_holders`) is planned and run as
    :func:`redistribute` runs it, on the DTensor's mesh or sub-mesh (agreeing
    among its ranks on a plan's first use), with DTensor's own local steps
    of ``_MaskPartial``, ``_NormPartial`` and Replicate -> Partial around
    the verified plan (:func:`_routed_steps`); what the verified planner
    refuses, or what only DTensor's order of steps decides (docs/torch.md
    lists every reason), goes to DTensor's own path and is
    counted (:func:`routing_info`). Nested calls stack; :func:`disable`
    undoes one.

    Checked against torch's internals first (:func:`check_entry_point`);
    on a torch release other than :data:`TESTED_TORCH` it refuses unless
    ``force=True``."""
    if _ROUTING["depth"]:
        _ROUTING["depth"] += 1
        return
    if not force and not any(torch.__version__.startswith(v) for v in TESTED_TORCH):
        raise EntryPointMoved(f"verishard.torch.enable is tested on torch {', '.join(TESTED_TORCH)}, this is "
                              f"{torch.__version__}; enable(force=True) routes anyway (check_entry_point passed)"
                              if _safe_check() else f"torch {torch.__version__} is not tested")
    original = check_entry_point()

    def routed(local_tensor, current_spec, target_spec, **kwargs):
        return _route(original, local_tensor, current_spec, target_spec, kwargs)
    routed.__wrapped_original__ = original
    for mod in _holders(original):
        setattr(mod, "redistribute_local_tensor", routed)
    _ROUTING.update(original=original, routed=routed, depth=1)


def _safe_check() -> bool:
    try:
        check_entry_point()
        return True
    except EntryPointMoved:
        return False


def disable() -> None:
    """Undo one :func:`enable` (the last one restores torch's function)."""
    if not _ROUTING["depth"]:
        return
    _ROUTING["depth"] -= 1
    if not _ROUTING["depth"]:
        for mod in _holders(_ROUTING["routed"]):   # those imported while enabled took the routed one too
            setattr(mod, "redistribute_local_tensor", _ROUTING["original"])
        _ROUTING.update(original=None, routed=None)


def _holders(fn: Any) -> list:
    """Every imported module of torch that holds ``fn`` as
    ``redistribute_local_tensor`` (each imported it by name: DTensor's
    ``_redistribute``, ``_dispatch`` and ``_api``, the tensor-parallel
    ``experimental._tp_transform``, torch's test helpers); the three
    :data:`_ENTRY_MODULES` are imported first. A module imported while
    routing is enabled takes the routed function from ``_redistribute``."""
    import importlib
    import sys
    for name in _ENTRY_MODULES:
        importlib.import_module(name)
    return [m for name, m in list(sys.modules.items())
            if (name == "torch" or name.startswith("torch.")) and m is not None
            and getattr(m, "__dict__", {}).get("redistribute_local_tensor") is fn]


class enabled:
    """``with verishard.torch.enabled(): ...``: :func:`enable` for the block."""

    def __init__(self, *, force: bool = False):
        self.force = force

    def __enter__(self):
        enable(force=self.force)
        return self

    def __exit__(self, *exc):
        disable()
        return False


def routing_info(reset: bool = False) -> dict[str, Any]:
    """Redistributions routed through verified plans and fallbacks to
    DTensor's path (with their reasons) since the last reset."""
    out = {"routed": _ROUTE_STATS["routed"], "fallbacks": _ROUTE_STATS["fallbacks"],
           "reasons": dict(_ROUTE_STATS["reasons"])}
    if reset:
        _ROUTE_STATS.update(routed=0, fallbacks=0, reasons={})
    return out


def _fallback(original: Any, reason: str, args: tuple, kwargs: dict) -> torch.Tensor:
    _ROUTE_STATS["fallbacks"] += 1
    _ROUTE_STATS["reasons"][reason] = _ROUTE_STATS["reasons"].get(reason, 0) + 1
    return original(*args, **kwargs)


def _route(original: Any, local: torch.Tensor, cur: DTensorSpec, target: DTensorSpec, kwargs: dict) -> torch.Tensor:
    """One call of DTensor's ``redistribute_local_tensor``, routed: the
    verified plan(s) of :func:`_routed_steps` with DTensor's own local steps
    around them, or DTensor's path (counted, with the reason)."""
    args = (local, cur, target)
    if cur.placements == target.placements:  # nothing moves: DTensor's own short cut, not counted
        return original(*args, **kwargs)
    if torch.compiler.is_dynamo_compiling():   # Dynamo reading the bytecode: DTensor's own path, traced by Dynamo
        return _fallback(original, "tracing", args, kwargs)
    if cur.mesh != target.mesh:
        return _fallback(original, "another mesh", args, kwargs)
    if not cur.mesh._is_current_rank_part_of_mesh():  # DTensor returns the local tensor: nothing moves here
        return original(*args, **kwargs)
    steps, reason = _routed_steps(cur, target)
    if reason:
        return _fallback(original, reason, args, kwargs)
    entries = []
    for _, c, t, _ in steps:   # every plan before anything runs: a refusal falls back with nothing done
        if c.placements == t.placements:
            entries.append(None)
            continue
        key = (world(), dist.get_rank(), "spec", c, t)
        entry = _lookup(key)
        if entry is None:
            with real_tensors():
                entry, problems = _spec_entry(c, t)
            if problems:
                return _fallback(original, "refused: " + problems[0][1].split(":")[0], args, kwargs)
            _store(key, entry)
        if entry.boxes is not None and tracing():
            return _fallback(original, "tracing a layout only boxes describe", args, kwargs)
        entries.append(entry)
    first = next((e for e in entries if e is not None), None)
    if first is not None and tuple(local.shape) != first.local_shape:
        return _fallback(original, "local shape", args, kwargs)
    for entry in entries:
        if entry is not None:
            _agree_on(entry, [], ("first", None))
    mesh = cur.mesh
    for (before, _, _, after), entry in zip(steps, entries):
        local = _local_steps(before, local, mesh)
        if entry is not None:
            local = _move_local(entry, local, mesh)
        local = _local_steps(after, local, mesh)
    _ROUTE_STATS["routed"] += 1
    return local


# Partial placements whose reduction is a sum with DTensor's own local steps
# around it: the mask of a vocabulary-parallel embedding (applied, then
# released, before the sum) and a p-norm (x ** p before the sum, x ** (1/p) after).
def _special_partials() -> tuple[type, ...]:
    from torch.distributed.tensor._ops._math_ops import _NormPartial
    from torch.distributed.tensor.placement_types import _MaskPartial
    return (_MaskPartial, _NormPartial)


def _plain(p: Placement) -> Placement:
    from torch.distributed.tensor import Partial
    return Partial(p.reduce_op) if p.is_partial() and type(p) is not Partial else p


def _spec_with(spec: DTensorSpec, placements: tuple) -> DTensorSpec:
    if placements == tuple(spec.placements):
        return spec
    return DTensorSpec(spec.mesh, placements, tensor_meta=spec.tensor_meta,
                       shard_order=None if spec.use_strided_shard_as_shard_order else spec.shard_order,
                       use_strided_shard_as_shard_order=spec.use_strided_shard_as_shard_order)


def _routed_steps(cur: DTensorSpec, target: DTensorSpec) -> tuple[list, str | None]:
    """How a routed call runs: steps ``(before, source spec, target spec,
    after)``, each a verified plan between plain placements (a Partial
    subclass as ``Partial(op)``; a Partial the target adds as the source's
    Replicate) with DTensor's own local steps before and after it
    (:func:`_local_steps`: the mask or ``x ** p`` before a ``_MaskPartial``
    or ``_NormPartial`` is reduced, ``x ** (1/p)`` after, and the target's
    ``_partition_value`` where it adds a Partial); or the reason it falls
    back. The result is DTensor's bit for bit where the local steps commute
    with the data movement (they are elementwise); a ``_NormPartial`` or
    ``_MaskPartial`` reduced over several mesh dimensions runs one verified
    plan per dimension, in the order DTensor's own planner reduces them, since
    its transform between the sums decides the value."""
    from torch.distributed.tensor import Partial
    special = _special_partials()
    reduced, added, moved = [], [], []
    for i, (c, t) in enumerate(zip(cur.placements, target.placements)):
        for p in (c, t):
            if p.is_partial() and type(p) is not Partial and not isinstance(p, special):
                return [], f"refused: a Partial subclass verishard does not know ({type(p).__name__})"
        if c == t:
            continue
        if c.is_partial() and t.is_partial():
            return [], "between two different Partial placements"
        if c.is_partial():
            reduced.append(i)
        elif t.is_partial():
            if not c.is_replicate():
                return [], "Shard to Partial (DTensor has no such step)"
            added.append(i)
        else:
            moved.append(i)
    if added and reduced:
        return [], "to Partial next to a reduction (DTensor's order of the two decides the value)"
    if added and moved and any(type(target.placements[i]) is not Partial for i in added):
        return [], "a _MaskPartial or _NormPartial made while the layout moves"
    c_plain = tuple(_plain(p) for p in cur.placements)
    t_plain = tuple(cur.placements[i] if i in added else _plain(p) for i, p in enumerate(target.placements))
    before = [("pre", i, cur.placements[i]) for i in reduced if isinstance(cur.placements[i], special)]
    after = [("post", i, cur.placements[i]) for i in reduced if isinstance(cur.placements[i], special)]
    after += [("partition", i, target.placements[i]) for i in added]
    if len(before) and len(reduced) > 1:
        if moved:
            return [], "a _MaskPartial or _NormPartial reduced over several mesh dimensions while the layout moves"
        steps, now = [], c_plain
        for i in _dtensor_reduction_order(cur, target, reduced):
            nxt = tuple(t_plain[i] if j == i else p for j, p in enumerate(now))
            steps.append(([s for s in before if s[1] == i], _spec_with(cur, now), _spec_with(target, nxt),
                          [s for s in after if s[1] == i]))
            now = nxt
        return steps, None
    return [(before, _spec_with(cur, c_plain), _spec_with(target, t_plain), after)], None


def _dtensor_reduction_order(cur: DTensorSpec, target: DTensorSpec, reduced: list[int]) -> list[int]:
    """The mesh dimensions ``reduced`` in the order DTensor's own planner
    reduces them (``_gen_transform_infos``)."""
    from torch.distributed.tensor._redistribute import _gen_transform_infos
    order = [t.mesh_dim for t in _gen_transform_infos(cur, target) if t.mesh_dim in reduced
             and t.src_dst_placements[0].is_partial() and not t.src_dst_placements[1].is_partial()]
    return order + [i for i in reduced if i not in order]


def _local_steps(steps: list, local: torch.Tensor, mesh: DeviceMesh) -> torch.Tensor:
    """DTensor's own local steps of a Partial placement (no communication):
    ``pre``: what it does before reducing (``_MaskPartial``: apply the mask
    in place and release it; ``_NormPartial``: ``x ** p``); ``post``: after
    (``_NormPartial``: ``x ** (1/p)``); ``partition``: Replicate to that
    Partial (``_partition_value``: divide a sum, mask an embedding's indices)."""
    from torch.distributed.tensor.placement_types import _MaskPartial
    for kind, i, p in steps:
        if kind == "partition":
            local = p._partition_value(local, mesh, i)
        elif isinstance(p, _MaskPartial):
            if kind == "pre":
                p.mask_buffer.apply_mask(local)
                p.mask_buffer.release_mask()
        else:
            local = p._pre_reduce_transform(local) if kind == "pre" else p._post_reduce_transform(local)
    return local


def _spec_entry(cur: DTensorSpec, target: DTensorSpec) -> tuple[_Entry | None, list]:
    """The entry for DTensor's (current spec, target spec), or the problems."""
    return _entry_for(cur.mesh, cur, target, target)
