"""Targets laid out as inference engines hold their weights, for
:func:`verishard.torch.transfer`: :func:`fused` (a rank's local tensor is the
concatenation of its shards of several source tensors: vLLM's and SGLang's
``QKVParallelLinear`` and ``MergedColumnParallelLinear``, Megatron's
per-group interleaved QKV, vocabulary-padded embeddings) and
:func:`block_fp8` (a target quantized to FP8 in blocks, DeepSeek-V3's
``weight`` and ``weight_scale_inv``).

Both only describe where each element of each source tensor lands: as
explicit boxes of the source tensor, each with the world rank that receives
it and where the box starts in that rank's local buffer (the layout
:class:`~verishard.torch.backend.BoxPlan` takes). The verified box schedule
moves them (``core.bplan``, ``Boxesworldproof.brounds_correct``: every target
rank gets each element of its boxes once, from a rank holding it, receiving
exactly what it does not hold), and the receiving rank writes each piece
straight into its place in the buffer; no tensor is staged whole anywhere.
Nothing here plans: it converts layouts to boxes, and after the move, for
:func:`block_fp8`, quantizes what a rank received.

Importing this module imports torch; see ``docs/torch.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

from . import dtensor as _conv
from ..errors import ShardingError

__all__ = ["fused", "block_fp8", "Fused", "BlockFP8", "BlockFP8Shard", "quantize_block_fp8", "AMAX_FLOOR"]

# The smallest amax a block's scale is computed from: an all-zero block gets a
# finite scale (and quantizes to zeros) instead of 0 / 0.
AMAX_FLOOR = 1e-4


@dataclass(frozen=True)
class Fused:
    """A target made of several source tensors (:func:`fused`)."""

    mesh: DeviceMesh
    placements: tuple
    parts: tuple[tuple[str, int | None], ...]   # (source name, heads or None)
    dim: int = 0
    groups: int | None = None
    size: int | None = None
    out: torch.Tensor | None = field(default=None, compare=False)
    convert: BlockFP8 | None = None

    def describe(self) -> str:
        return (f"fused(parts={self.parts}, dim={self.dim}, groups={self.groups}, size={self.size}"
                + (f", convert={self.convert.describe()})" if self.convert is not None else ")"))


@dataclass(frozen=True)
class BlockFP8:
    """A target conversion: quantize to ``dtype`` in blocks of ``block`` (:func:`block_fp8`)."""

    block: tuple[int, int] = (128, 128)
    dtype: torch.dtype = torch.float8_e4m3fn

    def describe(self) -> str:
        return f"block_fp8(block={self.block}, dtype={self.dtype})"


class BlockFP8Shard(NamedTuple):
    """What a :func:`block_fp8` target gives a rank: its shard of the
    quantized tensor (a DTensor of the target's mesh and placements, dtype the
    FP8 type) and the scales of every block that shard touches (float32,
    DeepSeek's ``weight_scale_inv``: dequantized = weight * scale, one scale
    per block), and the index of the first of those blocks."""

    weight: DTensor
    weight_scale_inv: torch.Tensor
    first_block: tuple[int, int]


def fused(mesh: DeviceMesh, placements: Sequence[Any], parts: Sequence[Any], dim: int = 0, *,
          groups: int | None = None, size: int | None = None, out: torch.Tensor | None = None,
          convert: BlockFP8 | None = None) -> Fused:
    """A :func:`~verishard.torch.transfer` target whose local tensor on each
    rank of ``mesh`` is the concatenation along ``dim`` of that rank's shards
    (under ``placements``) of the source tensors ``parts``, in order.

    ``parts``: source names, or ``(name, heads)`` for a tensor of ``heads``
    equal heads along ``dim`` sharded by whole heads: where there are fewer
    heads than shards along ``dim`` each head is replicated (shard ``s`` of
    ``S`` holds head ``s // (S / heads)``; ``S`` a multiple of ``heads``), as
    vLLM's ``QKVParallelLinear`` holds k and v. ``groups``: Megatron's
    interleaved QKV: every part is cut into ``groups`` equal groups along
    ``dim``, the groups are sharded, and a rank's local tensor is, per group
    it holds, the parts' slices of that group in order. ``size``: every part
    is laid out as if it had ``size`` along ``dim`` (vocabulary padding):
    positions past its own extent are not written (left as they are in
    ``out``, zeros in a new buffer). ``out``: this rank's local tensor to
    write into (an engine's parameter), else a new one.

    ``transfer`` returns the rank's local tensor (a plain tensor, ``out``
    itself where given) under the target's name; the parts are source names
    only, not names of the result.

    ``convert=block_fp8(...)`` (2-D parts fused along dim 0, without
    ``groups``, ``size`` or ``out``): every part is quantized in blocks of its
    own, as vLLM's block-FP8 ``QKVParallelLinear`` holds them; each rank
    receives every block its part shards touch and the result is a
    :class:`BlockFP8Shard` whose ``weight`` is the fused FP8 local tensor
    (plain) and ``weight_scale_inv`` the parts' scales of those blocks
    concatenated along dim 0 (``first_block`` that of the first part)."""
    return Fused(mesh, tuple(placements) if isinstance(placements, (list, tuple)) else placements,
                 tuple((p, None) if isinstance(p, str) else tuple(p) for p in parts), dim, groups, size, out,
                 convert)


def block_fp8(block: Sequence[int] = (128, 128), dtype: torch.dtype = torch.float8_e4m3fn) -> BlockFP8:
    """A target conversion, the third element of a target ``(mesh,
    placements, block_fp8())``: the 2-D tensor is quantized in blocks of
    ``block`` (DeepSeek-V3's recipe, :func:`quantize_block_fp8`) on the
    receiving side. A rank whose shard cuts through blocks receives the
    elements of every block its shard touches (its box widened to block
    boundaries, moved by the verified box schedule), quantizes them and keeps
    its shard and the scales of those blocks (:class:`BlockFP8Shard`): bit for
    bit what quantizing the whole tensor and sharding the result gives."""
    return BlockFP8(tuple(int(b) for b in block), dtype)


def quantize_block_fp8(x: torch.Tensor, block: Sequence[int] = (128, 128),
                       dtype: torch.dtype = torch.float8_e4m3fn) -> tuple[torch.Tensor, torch.Tensor]:
    """A 2-D tensor quantized per block: ``(q, scale)`` with ``scale`` the
    float32 ``ceil(rows / b0) x ceil(cols / b1)`` per-block amax (at least
    :data:`AMAX_FLOOR`) divided by ``dtype``'s largest value, and ``q = x /
    scale`` (in float32, clamped to that value) cast to ``dtype``; blocks at
    the edges are the ones the tensor leaves. Every element depends only on
    its own block, so a tensor cut at block boundaries quantizes to the same
    bits piece by piece."""
    if x.ndim != 2 or len(block) != 2 or min(block) < 1:
        raise ShardingError(f"quantize_block_fp8 takes a 2-D tensor and two positive block sizes, not a tensor of "
                            f"shape {tuple(x.shape)} and block {tuple(block)}")
    rows, cols = x.shape
    b0, b1 = block
    nr, nc = -(-rows // b0), -(-cols // b1)
    fmax = torch.finfo(dtype).max
    xf = torch.nn.functional.pad(x.float(), (0, nc * b1 - cols, 0, nr * b0 - rows)).view(nr, b0, nc, b1)
    scale = xf.abs().amax(dim=(1, 3)).clamp(min=AMAX_FLOOR) / fmax
    q = (xf / scale[:, None, :, None]).clamp(-fmax, fmax).to(dtype).view(nr * b0, nc * b1)[:rows, :cols]
    return q.contiguous(), scale


# ---------------------------------------------------------------------------
# what transfer sees: one target per source tensor, its boxes


@dataclass(frozen=True, eq=False)
class BoxTarget:
    """The target of one source tensor for :func:`verishard.torch.crossmesh`:
    ``key`` names the result, ``spec`` is the :class:`Fused` (this tensor its
    part ``index``) or the :class:`BlockFP8` conversion."""

    key: str
    mesh: DeviceMesh
    placements: Any
    spec: Fused | BlockFP8
    index: int = 0
    shapes: tuple = ()          # every part's global shape (Fused)
    layout: dict = field(default_factory=dict)   # the fused layout, computed once for all its parts

    def describe(self) -> str:
        return f"{self.key}: {self.spec.describe()}"

    def holdings(self, spec: DTensorSpec) -> tuple[tuple, tuple]:
        """This tensor's target boxes ``(world rank, global box, local start)``
        and every mesh rank's local buffer shape, mesh order (``spec``: the
        target's DTensorSpec with normalised placements); raises ShardingError."""
        ranks = [int(r) for r in self.mesh.mesh.flatten().tolist()]
        sizes = tuple(self.mesh.mesh.shape)
        if isinstance(self.spec, BlockFP8):
            return _widened(self.spec, spec, sizes, ranks, self.layout)
        if "boxes" not in self.layout:
            self.layout["boxes"], self.layout["shapes"] = _fused_layout(self.spec, self.shapes, spec.placements,
                                                                        sizes, ranks)
            if self.spec.convert is not None:   # receive every part's widened boxes, stacked; quantize each after
                self.layout["fused"], self.layout["fused_shapes"] = self.layout["boxes"], self.layout["shapes"]
                self.layout["boxes"], self.layout["shapes"] = _stacked_widened(self.spec.convert, self.shapes,
                                                                               self.layout["fused"], ranks)
        me, out, shapes = dist.get_rank(), self.spec.out, self.layout["shapes"]
        if self.index == 0 and out is not None and me in ranks and tuple(out.shape) != shapes[ranks.index(me)]:
            raise ShardingError(f"{self.key}: out has shape {tuple(out.shape)} but rank {me}'s fused local tensor "
                                f"has shape {shapes[ranks.index(me)]}")
        return self.layout["boxes"][self.index], shapes

    def buffer(self, buffers: dict, shape: tuple, dtype: torch.dtype, device: torch.device, me: int) -> torch.Tensor:
        """This rank's local buffer of the target (shared by a fused target's
        parts), ``out`` where given; zeros where the target does not cover it."""
        if self.key not in buffers:
            out = self.spec.out if isinstance(self.spec, Fused) else None
            if out is None:
                covered = (sum(_volume(box) for part in self.layout["boxes"] for r, box, _ in part if r == me)
                           if isinstance(self.spec, Fused) else math.prod(shape))
                out = (torch.empty if covered == math.prod(shape) else torch.zeros)(shape, dtype=dtype, device=device)
            buffers[self.key] = (self, out)
        return buffers[self.key][1]

    def finish(self, buf: torch.Tensor, meta: TensorMeta, me: int) -> Any:
        """The result on this rank: the fused buffer, or the quantized shard and its scales."""
        if isinstance(self.spec, Fused):
            return buf if self.spec.convert is None else self._finish_fused_fp8(buf, me)
        shard, widened = self.layout["shard"].get(me), self.layout["widened"].get(me)
        b0, b1 = self.spec.block
        fp8_meta = TensorMeta(meta.shape, meta.stride, self.spec.dtype)
        spec = DTensorSpec(self.mesh, tuple(self.layout["placements"]), tensor_meta=fp8_meta)
        if shard is None:
            local = torch.empty(self.layout["empty_shape"][me], dtype=self.spec.dtype, device=buf.device)
            return BlockFP8Shard(DTensor(local, spec, requires_grad=False),
                                 torch.empty((0, 0), dtype=torch.float32, device=buf.device), (0, 0))
        q, scale = quantize_block_fp8(buf, self.spec.block, self.spec.dtype)
        cut = tuple(slice(s - w, s - w + n) for (s, n), (w, _) in zip(shard, widened))
        return BlockFP8Shard(DTensor(q[cut].contiguous(), spec, requires_grad=False), scale,
                             (widened[0][0] // b0, widened[1][0] // b1))


    def _finish_fused_fp8(self, buf: torch.Tensor, me: int) -> BlockFP8Shard:
        """Each part's stacked widened region quantized, its shard written at
        its place in the fused FP8 tensor, the parts' scales concatenated."""
        conv, ranks = self.spec.convert, [int(r) for r in self.mesh.mesh.flatten().tolist()]
        shape = self.layout["fused_shapes"][ranks.index(me)]
        out = torch.empty(shape, dtype=conv.dtype, device=buf.device)
        scales, first = [], (0, 0)
        for q, (part, stacked) in enumerate(zip(self.layout["fused"], self.layout["boxes"])):
            mine = [(box, at) for r, box, at in part if r == me]
            if not mine:
                continue
            (box, at), ((_, wide, (row, _)),) = mine[0], [h for h in stacked if h[0] == me]
            qz, scale = quantize_block_fp8(buf[row:row + wide[0][1]], conv.block, conv.dtype)
            cut = tuple(slice(s - w, s - w + n) for (s, n), (w, _) in zip(box, wide))
            out[tuple(slice(a, a + n) for a, (_, n) in zip(at, box))] = qz[cut]
            scales.append(scale)
            if len(scales) == 1:
                first = (wide[0][0] // conv.block[0], wide[1][0] // conv.block[1])
        scale = torch.cat(scales) if scales else torch.empty((0, 0), dtype=torch.float32, device=buf.device)
        return BlockFP8Shard(out, scale, first)


def per_source(targets: Mapping[str, Any], tensors: Mapping[str, Any]) -> tuple[dict, list[str]]:
    """``targets`` with every :func:`fused` target replaced by one
    :class:`BoxTarget` per part (under the part's name) and every ``(mesh,
    placements, block_fp8(...))`` by one :class:`BoxTarget`; other targets as
    they are. Also the problems (a source named by two targets, parts that do
    not fit together)."""
    if not any(isinstance(t, Fused) or (isinstance(t, (tuple, list)) and len(t) == 3) for t in targets.values()):
        return dict(targets), []   # no target to replace (a state dict's usual case: one pass, no sorting)
    out: dict[str, Any] = {}
    problems: list[str] = []

    def put(name, t):
        if name in out:
            problems.append(f"{name}: named by two targets (a source tensor goes to one target; pass a second "
                            "name for a copy of it)")
        out[name] = t

    for key in sorted(targets, key=str):
        t = targets[key]
        if isinstance(t, Fused):
            p = _fused_problems(str(key), t, tensors)
            if p:
                problems += p
                continue
            shared: dict = {}
            shapes = tuple(tuple(tensors[n].shape) for n, _ in t.parts)
            for i, (n, _) in enumerate(t.parts):
                put(n, BoxTarget(str(key), t.mesh, t.placements, t, i, shapes, shared))
        elif isinstance(t, (tuple, list)) and len(t) == 3 and isinstance(t[2], BlockFP8):
            p = _fp8_problems(str(key), t, tensors.get(key))
            if p:
                problems += p
                continue
            put(key, BoxTarget(str(key), t[0], tuple(t[1]) if isinstance(t[1], (list, tuple)) else t[1], t[2]))
        else:
            put(key, t)
    return out, problems


def finish(buffers: dict, moves: Sequence[Any], me: int) -> dict[str, Any]:
    """Every box target's result on this rank, by target name (after the rounds ran)."""
    meta = {m.into.key: m.meta for m in moves if getattr(m, "into", None) is not None}
    return {key: t.finish(buf, meta[key], me) for key, (t, buf) in buffers.items()}


# ---------------------------------------------------------------------------
# layouts as boxes


def _volume(box) -> int:
    return math.prod(n for _, n in box)


def _fused_problems(key: str, t: Fused, tensors: Mapping[str, Any]) -> list[str]:
    if not isinstance(t.mesh, DeviceMesh):
        return [f"{key}: fused() needs a DeviceMesh, not {type(t.mesh).__name__}"]
    if not t.parts:
        return [f"{key}: fused() needs at least one part"]
    missing = [n for n, _ in t.parts if n not in tensors]
    if missing:
        return [f"{key}: fused part {missing[0]!r} is not among the source tensors (every rank passes every name)"]
    xs = [tensors[n] for n, _ in t.parts]
    if not all(isinstance(x, torch.Tensor) for x in xs):
        return [f"{key}: fused parts must be tensors (DTensors or plain tensors)"]
    ndim = xs[0].ndim
    if any(x.ndim != ndim for x in xs) or not -ndim <= t.dim < ndim:
        return [f"{key}: fused parts of ranks {[x.ndim for x in xs]} along dim {t.dim}: give parts of one rank "
                f"and a dim among their dimensions"]
    d = t.dim % ndim
    if len({tuple(x.shape[:d]) + tuple(x.shape[d + 1:]) for x in xs}) > 1:
        return [f"{key}: fused parts {[tuple(x.shape) for x in xs]} differ outside dim {d}; they must agree there "
                "to be concatenated along it"]
    if len({x.dtype for x in xs}) > 1:
        return [f"{key}: fused parts of dtypes {sorted({str(x.dtype) for x in xs})}: a fused tensor has one dtype"]
    for n, h in t.parts:
        if h is not None and (not isinstance(h, int) or h < 1 or tensors[n].shape[d] % h):
            return [f"{key}: part {n!r} of extent {tensors[n].shape[d]} along dim {d} cannot have {h!r} equal heads "
                    "(give its number of heads, which divides the extent)"]
    if t.groups is not None:
        if not isinstance(t.groups, int) or t.groups < 1 or any(x.shape[d] % t.groups for x in xs):
            return [f"{key}: groups={t.groups!r} must be a positive integer dividing every part along dim {d} "
                    f"({[x.shape[d] for x in xs]})"]
        if t.size is not None or any(h is not None for _, h in t.parts):
            return [f"{key}: groups= takes plain part names, without size= or heads"]
    if t.size is not None and (not isinstance(t.size, int) or any(t.size < x.shape[d] for x in xs)
                               or any(h is not None for _, h in t.parts)):
        return [f"{key}: size={t.size!r} must be an integer at least every part's extent along dim {d} "
                f"({[x.shape[d] for x in xs]}), with plain part names"]
    if t.convert is not None:
        if not isinstance(t.convert, BlockFP8):
            return [f"{key}: convert={t.convert!r} is not a block_fp8(...) conversion"]
        if ndim != 2 or d != 0 or t.groups is not None or t.size is not None or t.out is not None:
            return [f"{key}: fused(..., convert=block_fp8()) takes 2-D parts fused along dim 0, without groups=, "
                    "size= or out="]
        p = _fp8_problems(key, (t.mesh, t.placements, t.convert), xs[0])
        if p:
            return p
    if t.out is not None and (not isinstance(t.out, torch.Tensor) or t.out.dtype != xs[0].dtype):
        return [f"{key}: out must be a tensor of the parts' dtype {xs[0].dtype}"]
    return []


def _fp8_problems(key: str, t: tuple, x: Any) -> list[str]:
    conv = t[2]
    if not isinstance(t[0], DeviceMesh):
        return [f"{key}: the target must be (DeviceMesh, placements, block_fp8(...)), not {t!r}"]
    if not isinstance(x, torch.Tensor) or x.ndim != 2:
        return [f"{key}: block_fp8 quantizes 2-D weights; this source is "
                + (f"of rank {x.ndim}" if isinstance(x, torch.Tensor) else "not a tensor")]
    if len(conv.block) != 2 or min(conv.block) < 1:
        return [f"{key}: block_fp8 block={conv.block} must be two positive integers"]
    if not x.dtype.is_floating_point or x.dtype.itemsize < 2:
        return [f"{key}: block_fp8 quantizes a floating source of 2 or more bytes, not {x.dtype}"]
    if conv.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
        return [f"{key}: block_fp8 dtype {conv.dtype} is not torch.float8_e4m3fn or torch.float8_e5m2"]
    return []


def _shards_along(placements: Sequence[Any], sizes: Sequence[int], d: int) -> int:
    return math.prod(n for p, n in zip(placements, sizes) if isinstance(p, Shard) and p.dim == d)


def _part_boxes(shape: tuple, heads: int | None, size: int | None, d: int, placements: Sequence[Any],
                sizes: tuple, ranks: list[int]) -> tuple[list, tuple]:
    """One part's holdings ``(rank, global box, local start)`` and every mesh
    rank's local shape, before the part's offset in the fused buffer."""
    def along(shape_d):
        return tuple(shape[:d]) + (shape_d,) + tuple(shape[d + 1:])

    if heads is None:
        hs, shapes = _conv.layout_boxes(along(size if size is not None else shape[d]), sizes, placements, None, ranks)
        if size is None:
            return list(hs), shapes
        clipped = []
        for r, box, at in hs:   # vocabulary padding: positions past the part's extent are not written
            s, n = box[d]
            n = max(0, min(s + n, shape[d]) - s)
            if n:
                clipped.append((r, box[:d] + ((s, n),) + box[d + 1:], at))
        return clipped, shapes
    unit, count = shape[d] // heads, _shards_along(placements, sizes, d)
    if any(not isinstance(p, Shard) and getattr(p, "dim", None) == d for p in placements):
        raise ShardingError(f"parts with heads are sharded along dim {d} by Shard placements only, not "
                            f"{tuple(placements)}")
    if heads >= count:
        hs, shapes = _conv.layout_boxes(along(heads), sizes, placements, None, ranks)
        per = lambda s, n: (s * unit, n * unit)   # noqa: E731
    else:
        if count % heads:
            raise ShardingError(f"{heads} heads replicated over {count} shards: the shards must be a multiple of "
                                "the heads (as vLLM requires)")
        hs, shapes = _conv.layout_boxes(along(count), sizes, placements, None, ranks)
        per = lambda s, n: (s // (count // heads) * unit, n * unit)   # noqa: E731
    out = [(r, box[:d] + (per(*box[d]),) + box[d + 1:], at[:d] + (at[d] * unit,) + at[d + 1:]) for r, box, at in hs]
    return out, tuple(sh[:d] + (sh[d] * unit,) + sh[d + 1:] for sh in shapes)


def _fused_layout(t: Fused, shapes: tuple, placements: Sequence[Any], sizes: tuple,
                  ranks: list[int]) -> tuple[list, tuple]:
    """Per part its holdings in the fused buffers, and every mesh rank's buffer shape."""
    d = t.dim % len(shapes[0])
    if t.groups is not None:
        g_shape = tuple(shapes[0][:d]) + (t.groups,) + tuple(shapes[0][d + 1:])
        hs, gshapes = _conv.layout_boxes(g_shape, sizes, placements, None, ranks)
        width = [s[d] // t.groups for s in shapes]
        boxes: list[list] = [[] for _ in shapes]
        for r, box, at in hs:
            s, n = box[d]
            for i in range(n):
                for q, w in enumerate(width):
                    boxes[q].append((r, box[:d] + (((s + i) * w, w),) + box[d + 1:],
                                     at[:d] + ((at[d] + i) * sum(width) + sum(width[:q]),) + at[d + 1:]))
        return boxes, tuple(sh[:d] + (sh[d] * sum(width),) + sh[d + 1:] for sh in gshapes)
    per_part = [_part_boxes(shape, h, t.size, d, placements, sizes, ranks) for shape, (_, h) in zip(shapes, t.parts)]
    offset = {r: 0 for r in ranks}
    boxes = []
    for hs, pshapes in per_part:
        boxes.append([(r, box, at[:d] + (at[d] + offset[r],) + at[d + 1:]) for r, box, at in hs])
        for r, sh in zip(ranks, pshapes):
            offset[r] += sh[d]
    first = per_part[0][1]
    return boxes, tuple(sh[:d] + (offset[r],) + sh[d + 1:] for r, sh in zip(ranks, first))


def _widen(box: tuple, block: Sequence[int], shape: Sequence[int]) -> tuple:
    """``box`` widened to the boundaries of the blocks it touches (the last ones clipped to ``shape``)."""
    return tuple((s // b * b, min(-(-(s + n) // b) * b, g) - s // b * b) for (s, n), b, g in zip(box, block, shape))


def _widened(conv: BlockFP8, spec: DTensorSpec, sizes: tuple, ranks: list[int], layout: dict) -> tuple[list, tuple]:
    """Every rank's shard widened to block boundaries (local start 0) and its
    buffer shape; ``layout`` records each rank's shard and widened box."""
    shape = tuple(spec.tensor_meta.shape)
    hs, shapes = _conv.layout_boxes(shape, sizes, spec.placements, None, ranks)
    counts = {r: sum(1 for q, _, _ in hs if q == r) for r in ranks}
    if max(counts.values(), default=0) > 1:
        raise ShardingError(f"block_fp8 takes layouts in which every rank holds one box; {tuple(spec.placements)} "
                            "gives a rank several (an interleaving _StridedShard)")
    shard, widened, out = {}, {}, []
    for r, box, _ in hs:
        wide = _widen(box, conv.block, shape)
        shard[r], widened[r] = box, wide
        out.append((r, wide, (0,) * len(wide)))
    layout.update(shard=shard, widened=widened, empty_shape=dict(zip(ranks, shapes)), placements=spec.placements)
    return out, tuple(tuple(n for _, n in widened[r]) if r in widened else sh for r, sh in zip(ranks, shapes))


def _stacked_widened(conv: BlockFP8, shapes: tuple, fused_boxes: list, ranks: list[int]) -> tuple[list, tuple]:
    """Per part, every rank's box widened to the part's block boundaries,
    stacked along dim 0 in part order in the rank's receive buffer (local
    start (row, 0)); and every rank's buffer shape."""
    rows = {r: 0 for r in ranks}
    cols: dict[int, int] = {}
    out = []
    for shape, part in zip(shapes, fused_boxes):
        if len({r for r, _, _ in part}) != len(part):
            raise ShardingError("fused(..., convert=block_fp8()) takes layouts in which every rank holds one box of "
                                "each part")
        stacked = []
        for r, box, _ in part:
            wide = _widen(box, conv.block, shape)
            stacked.append((r, wide, (rows[r], 0)))
            rows[r] += wide[0][1]
            cols[r] = wide[1][1]
        out.append(stacked)
    return out, tuple((rows[r], cols.get(r, 0)) for r in ranks)
