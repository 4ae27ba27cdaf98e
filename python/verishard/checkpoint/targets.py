"""What a saved state holds and where loaded values go, shared by both
readers (ours in :mod:`verishard.checkpoint`, DCP's in
:mod:`verishard.checkpoint.dcp`): the state's leaves (:func:`flatten`,
:func:`leaf_kind`), a layout given as (mesh, type) (:func:`layout_type`),
load's targets (:data:`TARGET_KINDS`, :func:`select`, :func:`target_of`,
:func:`finish_target`), and a target rank's boxes where our types cannot
express its layout (:class:`Boxes`, read along the verified box schedule by
:func:`box_pieces`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import format as F
from .. import dtypes
from .format import CheckpointError
from ..crossmesh import as_type
from ..errors import DtypeError, ShardingError, VerishardError, refusing_raw_errors
from ..limits import MAX_ELEMENTS
from ..mesh import Mesh
from ..sharding import ArrayType

__all__ = ["flatten", "leaf_kind", "layout_type", "mesh_rank", "Box", "Boxes", "box_pieces", "TARGET_KINDS",
           "target_of", "finish_target", "nest", "is_one_target", "select"]


def flatten(state: Mapping, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if len(prefix) >= F.MAX_DEPTH:
        raise CheckpointError(f"state nested deeper than {F.MAX_DEPTH} levels at {'/'.join(prefix)!r}")
    out = []
    for k, v in state.items():
        if not isinstance(k, str) or not 0 < len(k) <= F.MAX_NAME:
            raise CheckpointError(f"state key {k!r} under {'/'.join(prefix) or 'the top'!r} is not a string of "
                                  f"1 to {F.MAX_NAME} characters")
        if isinstance(v, Mapping):
            out.extend(flatten(v, prefix + (k,)))
        else:
            out.append((prefix + (k,), v))
    return out


def leaf_kind(obj: Any) -> str:
    mod = type(obj).__module__
    if mod.startswith("torch") and hasattr(obj, "to_local") and hasattr(obj, "device_mesh"):
        return "dtensor"
    if mod.startswith("torch") and hasattr(obj, "detach"):
        return "torch"
    if mod.startswith("jax") and hasattr(obj, "sharding"):
        return "jax"
    return "numpy" if isinstance(obj, np.ndarray) else "value"


def layout_type(lay: Any, where: str) -> ArrayType:
    """A layout for a global numpy array: (mesh, type) or an ArrayType."""
    if isinstance(lay, ArrayType):
        return lay
    if isinstance(lay, tuple) and len(lay) == 2:
        try:
            return as_type(lay[1], Mesh.coerce(lay[0]), where)
        except VerishardError as e:
            raise CheckpointError(f"{where}: {e}") from None
    raise CheckpointError(f"{where}: a layout is (mesh, type) in verishard's notation or an ArrayType, "
                          f"not {type(lay).__name__}")


def mesh_rank(dm: Any) -> int:
    """This process's index in a DeviceMesh."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        raise CheckpointError("a DeviceMesh or DTensor without torch.distributed initialized: which rank is this "
                              "process? init_process_group first, or pass rank=")
    ranks, me = dm.mesh.flatten().tolist(), dist.get_rank()
    if me not in ranks:
        raise CheckpointError(f"process {me} is not in the DeviceMesh of ranks {ranks[:16]}")
    return ranks.index(me)


Box = tuple[tuple[int, int], ...]


class Boxes:
    """One rank's part of a target layout that our types cannot express
    (DTensor's nested ``torch.chunk`` shards, uneven ``_StridedShard``), as
    DTensor lays it out (:func:`verishard.torch.dtensor.layout_boxes`): its global
    boxes, each with where it starts in the local tensor, and the local
    shape. Several boxes where ``_StridedShard`` interleaves; none where the
    shard is empty."""

    def __init__(self, global_shape: tuple[int, ...], holdings: list[tuple[Box, tuple[int, ...]]],
                 local_shape: tuple[int, ...]):
        self.global_shape, self.holdings, self.local_shape = tuple(global_shape), holdings, tuple(local_shape)

    @classmethod
    def of_dtensor(cls, global_shape: tuple[int, ...], dm: Any, placements: Any, r: int, where: str) -> "Boxes":
        """Mesh rank ``r``'s boxes of ``placements`` on the DeviceMesh ``dm``."""
        from torch.distributed.tensor import Shard
        from torch.distributed.tensor.placement_types import _StridedShard
        from ..torch.dtensor import layout_boxes
        k = len(global_shape)
        for i, p in enumerate(placements):
            shard = isinstance(p, (Shard, _StridedShard))
            d = p.dim if shard else p[1] if isinstance(p, tuple) and p[:1] == ("shard",) else 0
            factor = p.split_factor if isinstance(p, _StridedShard) else 1
            if not (isinstance(d, int) and -k <= d < k and isinstance(factor, int) and factor >= 1):
                raise CheckpointError(f"{where}: placement {p!r} on mesh dimension {i} does not shard a tensor of "
                                      f"{k} dimensions (a dimension in [-{k}, {k}), a split factor of 1 or more)")
        held, shapes = refusing_raw_errors(CheckpointError)(layout_boxes)(global_shape, tuple(dm.mesh.shape),
                                                                         list(placements))
        return cls(global_shape, [(box, at) for q, box, at in held if q == r], shapes[r])

    @classmethod
    def of_block(cls, t: ArrayType, j: int) -> "Boxes":
        """Device ``j``'s block of ``t`` as one box (none when empty)."""
        shape = t.valid_shape(j)
        box = tuple(zip(t.block_starts(j), shape))
        return cls(t.global_shape, [(box, (0,) * len(shape))] if math.prod(shape) else [], shape)


def box_pieces(sources: list[Box], target: Boxes) -> list[tuple[int, Box, tuple[slice, ...]]]:
    """The verified box schedule (``core.bplan``: ``Boxes.bplan`` staged by
    ``Boxes.brounds``) from the stored boxes ``sources`` (by index) to the
    target rank's boxes, which no source is: every cut as (source index,
    global box, where it goes in the local tensor). Theorem
    ``Boxesworldproof.brounds_correct``: every index of a target box that
    some source holds arrives in exactly one cut, inside the box of the
    source it is read from. Run only where the stored blocks cover the
    array and the target boxes lie in it (``core.bcovers``); then
    ``Coverproof.brounds_complete``: every index of every target box arrives."""
    from .. import core
    n = len(sources)
    dst = [(n + k, box) for k, (box, _) in enumerate(target.holdings)]
    if not dst:
        return []
    if not core.bcovers(target.global_shape, list(enumerate(sources)), dst):
        raise CheckpointError(f"the stored blocks do not hold every element of the {tuple(target.global_shape)} "
                              f"array, or a target box lies outside it (Cover.bcovers)")
    budget = min(max(math.prod(s for _, s in box) for _, box in dst), MAX_ELEMENTS)   # one cut per piece
    _, rounds = core.bplan(list(enumerate(sources)), dst, budget)
    cuts: list[list] = [[] for _ in dst]
    for rd in rounds:
        for c in rd:
            cuts[c.target].append(c)
    out = []
    for (box, at), cs in zip(target.holdings, cuts):
        out += [(c.src, c.box, tuple(slice(s - g + a, s - g + a + m) for (s, m), (g, _), a in zip(c.box, box, at)))
                for c in cs]
    return out


# What load accepts as a target (one leaf of ``targets``), named in its errors.
TARGET_KINDS = (
    "None (the whole array, as the type it was saved from)",
    "a torch tensor or numpy array of the stored dtype and global shape (filled in place)",
    "a DTensor (this rank's shard, filled in place)",
    "(DeviceMesh, placements) (a new DTensor)",
    "a jax.Array, a jax.ShapeDtypeStruct with a sharding, or a jax sharding (a new jax.Array with that sharding)",
    "(mesh, type) in verishard's notation or an ArrayType (block rank= of it, numpy)",
)


def _target_kind(spec: Any) -> str | None:
    """Which of :data:`TARGET_KINDS` ``spec`` is (None: not a target)."""
    if spec is None:
        return "none"
    mod = type(spec).__module__
    if mod.startswith("torch"):
        return {"dtensor": "dtensor", "torch": "torch"}.get(leaf_kind(spec))
    if isinstance(spec, np.ndarray):
        return "numpy"
    if mod.startswith("jax"):
        if hasattr(spec, "addressable_shards"):
            return "jax"
        if type(spec).__name__ == "ShapeDtypeStruct":
            return "abstract"
        if hasattr(spec, "device_set"):
            return "sharding"
        return None
    if isinstance(spec, ArrayType):
        return "layout"
    if isinstance(spec, tuple) and len(spec) == 2:
        if hasattr(spec[0], "mesh_dim_names"):
            return "placements"
        if isinstance(spec[0], (str, Mesh)):
            return "layout"
    return None


def _refuse_target(spec: Any, where: str) -> CheckpointError:
    return CheckpointError(f"{where}: a target {type(spec).__name__} is none of the kinds load takes: "
                           f"{'; '.join(TARGET_KINDS)}")


def _dtype_name(dtype: Any) -> str:
    """A torch, JAX or numpy dtype's name (``float32``, ``bfloat16``), also of one verishard does not move."""
    try:
        return dtypes.name_of(dtype)
    except DtypeError:
        return str(dtype)


def _check_leaf(e: Any, dtype: Any, shape: tuple[int, ...], where: str) -> None:
    """A target leaf of its own dtype and global shape must match the stored
    entry's (a scalar saved as one element fills a 0-d leaf): one error
    naming both."""
    stored = getattr(e, "dtype", None)
    g = e.t.global_shape
    shape = tuple(shape)
    same_shape = shape == g or (shape == () and g == (1,) and getattr(e, "scalar", True))
    if same_shape and (stored is None or _dtype_name(stored) == _dtype_name(dtype)):
        return
    raise CheckpointError(f"{where}: the checkpoint holds {_dtype_name(stored) if stored is not None else 'an array'} "
                          f"of global shape {g}, the target is {_dtype_name(dtype)} of global shape {shape}: pass a "
                          f"target of the stored dtype and shape, or None for the array as saved")


def _memory_of(x: Any, dtype: np.dtype | None, shape: tuple[int, ...]) -> np.ndarray | None:
    """The torch tensor ``x``'s own memory as a C-contiguous numpy array of
    ``dtype`` and ``shape`` (what a block is read into, so that loading
    makes no second copy), or None where it has none (not on the CPU, not
    contiguous, another dtype): then the block is read apart and copied in."""
    if dtype is None or x.device.type != "cpu" or not x.is_contiguous() or x.is_conj() or x.is_neg():
        return None
    try:
        v = dtypes.torch_to_numpy(x)   # on the CPU, contiguous: a view (bfloat16, float8: of the same bytes)
    except (DtypeError, TypeError, RuntimeError):
        return None
    if (v.dtype != dtype or v.size != math.prod(shape) or not v.flags.c_contiguous or not v.flags.writeable
            or (v.size and v.__array_interface__["data"][0] != x.data_ptr())):
        return None
    return v.reshape(shape)


def _fill(leaf: Any, local: Any, into: np.ndarray | None, where: str):
    """finish for a target filled in place: the block was read straight into
    ``into`` (the local tensor's memory) where there was one, else it is
    copied into ``local``; gives back the leaf itself."""
    def finish(blocks):
        if _dtype_name(blocks[0].dtype) != _dtype_name(local.dtype):   # (a DCP entry's dtype is known only now)
            raise CheckpointError(f"{where}: the checkpoint holds {_dtype_name(blocks[0].dtype)}, the target is "
                                  f"{_dtype_name(local.dtype)}: pass a target of the stored dtype, or None for "
                                  f"the array as saved")
        if into is None or blocks[0] is not into:
            if isinstance(local, np.ndarray):
                local[...] = blocks[0].reshape(local.shape)
            else:
                import torch
                with torch.no_grad():
                    local.copy_(dtypes.numpy_to_torch(blocks[0]).reshape(local.shape))
        return leaf
    finish.into = [into] if into is not None else None
    return finish


def _saved_kind(e: Any, blocks: list[np.ndarray]) -> Any:
    """The whole array as the kind it was saved from (the manifest's
    ``like``): a torch tensor from torch tensors and DTensors, a jax.Array
    from JAX where JAX holds the dtype as it is (64-bit ones need JAX's x64),
    numpy otherwise (or where that package is not installed)."""
    like = getattr(e, "like", "numpy")
    a = blocks[0]
    try:
        if like in ("torch", "dtensor"):
            return dtypes.numpy_to_torch(a)
        if like == "jax":
            import jax
            if jax.dtypes.canonicalize_dtype(a.dtype) == a.dtype:   # 64-bit dtypes without x64: numpy, exact
                return jax.device_put(a)
    except ImportError:
        pass
    return a


def _jax_target(sh: Any, e: Any, shape: tuple[int, ...], where: str):
    """(type, our ranks to load, finish) of a jax sharding: the blocks of this
    process's devices, made into one jax.Array of ``shape`` with that sharding."""
    import jax
    g = e.t.global_shape
    if not isinstance(sh, jax.sharding.NamedSharding):
        if len(sh.device_set) != 1:
            raise CheckpointError(f"{where}: a {type(sh).__name__} over {len(sh.device_set)} devices; load takes a "
                                  f"NamedSharding (or a sharding on one device)")
        return (ArrayType.parse(f"[{', '.join(map(str, g))}]", "one=1"), [0],
                lambda blocks: jax.device_put(blocks[0].reshape(shape), sh))
    from ..jax.sharding import from_named_sharding
    t = from_named_sharding(sh, g)
    devices = list(sh.mesh.devices.flat)
    mine = [r for r, d in enumerate(devices) if d.process_index == jax.process_index()]

    def finish(blocks):
        if shape != g:   # a scalar saved as one element, replicated: each device's block is the value
            blocks = [b.reshape(shape) for b in blocks]
        arrays = [jax.device_put(blocks[k], devices[r]) for k, r in enumerate(mine)]
        return jax.make_array_from_single_device_arrays(shape, sh, arrays)
    return t, mine, finish


def _dtensor_target(dm: Any, placements: Any, e: Any, rank: int | None, where: str):
    """(type, or Boxes where our types cannot express the layout; [our rank]) of a DTensor layout."""
    from torch.distributed.tensor.placement_types import _StridedShard
    from ..torch.dtensor import UnsupportedLayout, from_placements
    from ..torch import planning_mesh
    g = e.t.global_shape
    r = mesh_rank(dm) if rank is None else int(rank)
    try:
        t = from_placements(planning_mesh(dm), g, placements)
    except ShardingError as err:
        # layouts our types cannot express (uneven nested torch.chunk shards, _StridedShard interleaving
        # that has no shard order): DTensor's own split as boxes; no pending reductions there
        boxes = isinstance(err, UnsupportedLayout) or any(isinstance(p, _StridedShard) for p in placements)
        if not boxes or len(placements) != dm.ndim or any(p.is_partial() for p in placements):
            raise
        if not 0 <= r < dm.mesh.numel():
            raise CheckpointError(f"{where}: rank {r} is not a rank of the DeviceMesh") from None
        t = Boxes.of_dtensor(g, dm, placements, r, where)   # DTensor's own split: read its boxes
    return t, r


def target_of(spec: Any, e: F.Entry, rank: int | None, where: str):
    """(type, or Boxes where our types cannot express a DTensor layout; our ranks to load; finish: the
    loaded blocks as the target's kind) for one load target. A finish whose ``into`` is set names, per
    rank, the target's own memory to read that block into (filled in place)."""
    g = e.t.global_shape
    kind = _target_kind(spec)
    whole = ArrayType.parse(f"[{', '.join(map(str, g))}]", "one=1")
    if kind == "none":
        return whole, [0], lambda blocks: _saved_kind(e, blocks)
    if kind in ("torch", "numpy"):
        _check_leaf(e, spec.dtype, spec.shape, where)
        if kind == "numpy":
            if not spec.flags.writeable:
                raise CheckpointError(f"{where}: the target numpy array is read-only; pass a writable one")
            into = spec.reshape(g) if spec.flags.c_contiguous else None
        else:
            into = _memory_of(spec, getattr(e, "dtype", None), g)
        return whole, [0], _fill(spec, spec, into, where)
    if kind in ("jax", "abstract", "sharding"):
        sh = spec if kind == "sharding" else spec.sharding
        if sh is None:
            raise CheckpointError(f"{where}: a ShapeDtypeStruct without a sharding; give it one "
                                  f"(sharding=NamedSharding(mesh, spec)) so load knows where each block goes")
        shape = g
        if kind != "sharding":
            _check_leaf(e, spec.dtype, spec.shape, where)
            shape = tuple(spec.shape)
        return _jax_target(sh, e, shape, where)
    if kind == "dtensor":
        import torch
        _check_leaf(e, spec.dtype, spec.shape, where)
        if any(p.is_partial() for p in spec.placements):
            raise CheckpointError(f"{where}: the target DTensor has placements {list(spec.placements)} with a "
                                  f"pending reduction (Partial); load into a Shard/Replicate one")
        t, r = _dtensor_target(spec.device_mesh, spec.placements, e, rank, where)
        with torch.no_grad():
            local = spec.to_local()
        want = t.local_shape if isinstance(t, Boxes) else t.valid_shape(r)
        if tuple(local.shape) != tuple(want):
            raise CheckpointError(f"{where}: the target DTensor's local tensor has shape {tuple(local.shape)}; its "
                                  f"placements give rank {r} a block of shape {tuple(want)}")
        return t, [r], _fill(spec, local, _memory_of(local, getattr(e, "dtype", None), tuple(want)), where)
    if kind == "placements":
        import torch
        from torch.distributed.tensor import DTensor
        dm, placements = spec
        t, r = _dtensor_target(dm, placements, e, rank, where)
        stride = tuple(math.prod(g[d + 1:]) for d in range(len(g)))

        def finish(blocks):
            return DTensor.from_local(dtypes.numpy_to_torch(blocks[0]), dm, list(placements), run_check=False,
                                      shape=torch.Size(g), stride=stride)
        return t, [r], finish
    if kind != "layout":
        raise _refuse_target(spec, where)
    t = layout_type(spec, where)
    if rank is None:
        raise CheckpointError(f"{where}: a target in verishard's notation needs rank= (which block to load)")
    if not 0 <= int(rank) < t.mesh.num_devices:
        raise CheckpointError(f"{where}: rank {rank} is not a device of {t.mesh}")
    return t, [int(rank)], lambda blocks: blocks[0]


def finish_target(finish, blocks: list[np.ndarray], where: str) -> Any:
    """The loaded blocks as the target's kind; what JAX or torch refuse (an
    indivisible NamedSharding, a DeviceMesh this process is not in) is one error."""
    try:
        return finish(blocks)
    except VerishardError:
        raise
    except (ValueError, TypeError, RuntimeError, IndexError) as err:
        raise CheckpointError(f"{where}: the loaded blocks do not make the target ({type(err).__name__}: "
                              f"{str(err)[:200]})") from None


def nest(flat: dict[tuple[str, ...], Any]) -> dict:
    """A nested dict from one keyed by tuples of names."""
    out: dict = {}
    for key, v in flat.items():
        d = out
        for k in key[:-1]:
            d = d.setdefault(k, {})
        d[key[-1]] = v
    return out


def _key_name(k: Any) -> str:
    """One step of a JAX key path as a name (a dict key, an attribute, an index)."""
    for field in ("key", "name", "idx"):
        if hasattr(k, field):
            return str(getattr(k, field))
    return str(k)


def is_one_target(targets: Any, type_: Any) -> bool:
    """Whether ``load`` was called the one-array way: ``load(path, mesh, type,
    rank)`` or ``load(path, target)`` with one target of :data:`TARGET_KINDS`."""
    if type_ is not None:
        return True
    return targets is not None and not isinstance(targets, (Mapping, str)) and _target_kind(targets) is not None


def select(targets: Any, names: list[tuple[str, ...]], path: str, split: str | None = None):
    """(name -> target of every entry to load; give_back: the loaded values
    (name -> value) in the shape of ``targets``). ``targets``: None (every
    entry, as saved), a name (``"model"`` or ``"model/layer"``: that subtree),
    a nested dict of names to targets (None at a subtree's name loads all of
    it as saved) or, with JAX, any pytree of targets. ``split``: a separator
    inside the targets' keys that the names are split at (DCP's ``.``: a
    flat ``model.state_dict()`` names nested entries), the result keeping
    the targets' own keys."""
    if targets is None:
        return {k: None for k in names}, nest
    if isinstance(targets, str):
        parts = tuple(targets.split("/"))
        if not all(parts):
            raise CheckpointError(f"{path}: {targets!r} is not a name of the checkpoint (names are joined by '/')")
        targets = nest({parts: None})
    treedef = None
    if isinstance(targets, Mapping):
        flat = flatten(targets)
    else:
        try:
            import jax
        except ImportError:
            jax = None
        if jax is None:
            raise CheckpointError(f"{path}: targets are a dict of names to targets, a name, or None, not "
                                  f"{type(targets).__name__} (a pytree of targets needs JAX)")
        leaves, treedef = jax.tree_util.tree_flatten_with_path(
            targets, is_leaf=lambda x: x is None or _target_kind(x) is not None)
        flat = [(tuple(_key_name(k) for k in kp), v) for kp, v in leaves]
        if any(not key for key, _ in flat):   # not a container JAX knows: one leaf, named nothing
            raise CheckpointError(f"{path}: targets are None, a name, a dict of names to targets or a pytree of "
                                  f"them, not {type(targets).__name__}; each target is one of: "
                                  f"{'; '.join(TARGET_KINDS)}")
    have = set(names)
    wanted: dict = {}
    own = [key for key, _ in flat]   # the targets' keys, for the result
    if split is not None:
        flat = [(tuple(p for k in key for p in k.split(split)), spec) for key, spec in flat]
    for key, spec in flat:
        if key in have:
            wanted[key] = spec
            continue
        under = [k for k in names if k[:len(key)] == key]
        if not under:
            raise CheckpointError(f"{path}: no entry {'/'.join(key)!r} (it holds "
                                  f"{', '.join('/'.join(k) for k in names[:8])}{', ...' if len(names) > 8 else ''})")
        if spec is not None:
            raise CheckpointError(f"{path}: {'/'.join(key)!r} names {len(under)} entries; its target is None (all "
                                  f"of them as saved) or a dict of targets by name, not one "
                                  f"{type(spec).__name__}")
        wanted.update((k, None) for k in under)

    def give_back(out: dict) -> Any:
        values = [out[key] if key in out else nest({k[len(key):]: v for k, v in out.items() if k[:len(key)] == key})
                  for key, _ in flat]
        if treedef is None:
            return nest(dict(zip(own, values)))
        return jax.tree_util.tree_unflatten(treedef, values)
    return wanted, give_back
