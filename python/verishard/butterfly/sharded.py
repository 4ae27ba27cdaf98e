"""Monarch and butterfly layers sharded over a torch ``DeviceMesh``.

The feature dimension is sharded over one mesh dimension (``features``,
``P`` devices, each holding a contiguous block of the features) and the
batch, optionally, over another (``batch``). Each device holds ``1/P`` of
the weights, by block, and nothing of them twice. Between the factors, the
computation is local along a dimension no mesh axis shards
(``Commuteproof.along_commutes``); every permutation that crosses devices is
an array redistribution planned by :func:`verishard.plan.plan` and run by
verishard's torch runtime (:func:`verishard.torch.backend.run_plan`), so the
sharded layer computes the layer (``Commuteproof.along_then_pipeline`` for
the plans :func:`~verishard.plan.plan` returns between even types, which
:class:`ShardedMonarch` runs; ``along_then_eplan`` for those of
``plan(..., exchange=True)``, the pipeline's plan or the exchange, which
:class:`ShardedButterfly` runs).
Backward runs the reverse plan on the gradient.

* :class:`ShardedMonarch`: ``R`` on each device's blocks, then the middle
  reshape-transpose, which on the ``[q, nblocks]`` view is ``[q{x}, nblocks]
  -> [q, nblocks{x}]`` (one all-to-all, at the transfer lower bound), then
  ``L`` on each device's blocks. The output block is contiguous.
* :class:`ShardedButterfly`: the block index's top ``log2 P`` bits are
  sharded; factors on the other bits run locally, and before a factor on a
  sharded bit the sharded bits are swapped with the lowest local ones
  (``[P{x}, M, P] -> [P, M, P{x}]`` on the ``[P, M, P]`` view of the blocks;
  ``plan(..., exchange=True)`` takes an exchange where it moves strictly less);
  the layout returns at the end. The ``fft`` init's bit-reversed input is one
  redistribution onto the swapped layout with the sharded bits reversed,
  then a local bit reversal.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ..mesh import Mesh
from ..plan import Plan, plan
from ..torch.backend import mesh_groups, run_plan
from ..torch import planning_mesh
from . import forms
from .forms import TORCH, LayerError
from .modules import Butterfly, Monarch

__all__ = ["ShardedMonarch", "ShardedButterfly"]


class _Move(torch.autograd.Function):
    """A verified redistribution of this rank's block; its backward is the
    reverse redistribution of the gradient."""

    @staticmethod
    def forward(ctx, x, forward_plan, backward_plan, groups):  # type: ignore[override]
        ctx.backward_plan, ctx.groups = backward_plan, groups
        return run_plan(forward_plan, x.contiguous(), groups)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return run_plan(ctx.backward_plan, grad.contiguous(), ctx.groups), None, None, None


def _dim(size: int, axes: tuple[str, ...], mesh: Mesh) -> str:
    """One dimension in the type notation: ``"8"`` or ``"2{x}8"`` (local size, axes, global size)."""
    if not axes:
        return str(size)
    n = math.prod(mesh.part_sizes[p] for a in axes for p in mesh.resolve(a))
    return f"{size // n}{{{','.join(axes)}}}{size}"


def _type(mesh: Mesh, dims: list[tuple[int, tuple[str, ...]]]) -> str:
    return "[" + ", ".join(_dim(g, a, mesh) for g, a in dims) + "]"


class _Sharded(nn.Module):
    """The mesh bookkeeping the sharded layers share."""

    def _take(self, layer: Any, device_mesh: Any, features: str, batch: str | None) -> None:  # pragma: no cover
        raise NotImplementedError

    @classmethod
    def from_module(cls, layer: Any, device_mesh: Any, *, features: str, batch: str | None = None) -> Any:
        """This rank's share of ``layer`` (the same ``layer`` on every rank)."""
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self._take(layer, device_mesh, features, batch)
        return self

    def _setup(self, device_mesh: Any, features: str, batch: str | None) -> None:
        if not dist.is_initialized():
            raise LayerError(f"{type(self).__name__} runs over torch.distributed: call dist.init_process_group "
                             f"first (and build the DeviceMesh over it)")
        names = tuple(device_mesh.mesh_dim_names or ())
        for what, name in (("features", features), ("batch", batch)):
            if name is not None and name not in names:
                raise LayerError(f"{what}={name!r} is not a dimension of the DeviceMesh (its dimensions: {names}); "
                                 f"build the mesh with mesh_dim_names")
        if batch == features:
            raise LayerError(f"features and batch must be different mesh dimensions, both are {features!r}")
        if dist.get_world_size() != device_mesh.mesh.numel():
            raise LayerError(f"the DeviceMesh has {device_mesh.mesh.numel()} ranks but the default process group "
                             f"has {dist.get_world_size()}: the mesh must span every rank")
        self.device_mesh, self.features, self.batch = device_mesh, features, batch
        self.mesh = planning_mesh(device_mesh)
        self.P = int(device_mesh.size(names.index(features)))
        self.index = int(device_mesh.get_local_rank(features))    # this rank's feature block
        self.groups = mesh_groups(device_mesh)
        self.plans: list[Plan] = []          # the plans the last forward ran, in order (for inspection)

    def _batch_dim(self, b: int) -> tuple[int, tuple[str, ...]]:
        if self.batch is None:
            return (b, ())
        return (b * int(self.device_mesh.size(self.device_mesh.mesh_dim_names.index(self.batch))), (self.batch,))

    def _move(self, y: torch.Tensor, mesh: Mesh, src: list, dst: list, exchange: bool = False) -> torch.Tensor:
        fwd = plan(mesh, _type(mesh, src), _type(mesh, dst), exchange=exchange)
        back = plan(mesh, _type(mesh, dst), _type(mesh, src), exchange=exchange)
        self.plans.append(fwd)
        return _Move.apply(y, fwd, back, self.groups)

    def _flat_batch(self, x: torch.Tensor, width: int) -> tuple[torch.Tensor, tuple[int, ...]]:
        if x.shape[-1] != width:
            raise LayerError(f"{type(self).__name__} on {self.P} devices takes this rank's {width} features on the "
                             f"last dimension, got shape {tuple(x.shape)}")
        return x.reshape(-1, width), tuple(x.shape[:-1])


class ShardedMonarch(_Sharded):
    """A :class:`~verishard.butterfly.Monarch` layer with its features over
    mesh dimension ``features`` (and its batch over ``batch``): this rank
    holds ``nblocks / P`` blocks of ``R`` and of ``L`` and its slice of the
    bias, takes its block of ``in_features / P`` input features and returns
    its block of ``out_features / P`` output features. Requires ``P`` to
    divide ``nblocks`` and ``q``, and ``in_features``, ``out_features`` to
    be multiples of ``nblocks`` (no padding).

    Built like :class:`Monarch` (every rank makes the same layer from
    ``seed`` and keeps its blocks), or from one with :meth:`from_module`.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, nblocks: int, device_mesh: Any,
                 features: str, batch: str | None = None, seed: int = 0, dtype: torch.dtype | None = None):
        super().__init__()
        self._take(Monarch(in_features, out_features, bias, nblocks=nblocks, seed=seed, dtype=dtype),
                   device_mesh, features, batch)

    def _take(self, layer: Monarch, device_mesh: Any, features: str, batch: str | None) -> None:
        self._setup(device_mesh, features, batch)
        sh, P = layer.shape, self.P
        if sh.nblocks % P or sh.q % P or sh.in_features != sh.nblocks * sh.p or sh.out_features != sh.nblocks * sh.s:
            raise LayerError(f"ShardedMonarch over {P} devices needs nblocks ({sh.nblocks}) and q ({sh.q}) divisible "
                             f"by {P} and in/out features ({sh.in_features}, {sh.out_features}) multiples of nblocks; "
                             f"choose nblocks a multiple of {P} that divides both")
        self.shape, self.in_features, self.out_features = sh, sh.in_features, sh.out_features
        kb = sh.nblocks // P
        mine = slice(self.index * kb, (self.index + 1) * kb)
        self.R = nn.Parameter(layer.R.detach()[mine].clone())
        self.L = nn.Parameter(layer.L.detach()[mine].clone())
        if layer.bias is not None:
            w = kb * sh.s
            self.bias = nn.Parameter(layer.bias.detach()[self.index * w:(self.index + 1) * w].clone())
        else:
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sh, P = self.shape, self.P
        kb = sh.nblocks // P
        self.plans = []
        x, batch_shape = self._flat_batch(x, kb * sh.p)
        b = x.shape[0]
        y = torch.einsum("kcp,bkp->bkc", self.R, x.reshape(b, kb, sh.p))      # this rank's rows of [nblocks, q]
        y = y.reshape(b, sh.q // P, sh.nblocks)                               # its rows of the [q, nblocks] view
        B = self._batch_dim(b)
        y = self._move(y, self.mesh, [B, (sh.q, (self.features,)), (sh.nblocks, ())],
                       [B, (sh.q, ()), (sh.nblocks, (self.features,))])        # [b, q, nblocks / P]
        z = torch.einsum("ksr,brk->bks", self.L, y)
        z = z.reshape(*batch_shape, kb * sh.s)
        return z if self.bias is None else z + self.bias


class ShardedButterfly(_Sharded):
    """A :class:`~verishard.butterfly.Butterfly` (or block butterfly) of size
    ``n = in_features = out_features`` with its blocks over mesh dimension
    ``features`` (``P`` a power of two, ``P * P`` at most the number of
    blocks ``n / block``): this rank holds ``1/P`` of every factor's
    twiddles and of the bias, takes its ``n / P`` input features and returns
    its ``n / P`` output features (the single-device layer's, in order).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, device_mesh: Any,
                 features: str, batch: str | None = None, **kw: Any):
        super().__init__()
        self._take(Butterfly(in_features, out_features, bias, **kw), device_mesh, features, batch)

    def _take(self, layer: Butterfly, device_mesh: Any, features: str, batch: str | None) -> None:
        self._setup(device_mesh, features, batch)
        sh, P = layer.shape, self.P
        m = sh.n // sh.block                      # blocks, 2**log_n
        mlog = P.bit_length() - 1
        if (1 << mlog) != P or P * P > m or not (sh.in_features == sh.out_features == sh.n):
            raise LayerError(f"ShardedButterfly over {P} devices needs P a power of two with P * P <= n / block "
                             f"({m}) and in_features == out_features == n = block * 2**k, got "
                             f"{sh.in_features} -> {sh.out_features}, n = {sh.n}")
        self.shape, self.in_features, self.out_features = sh, sh.in_features, sh.out_features
        self.bit_reversed_input, self.mlog, self.m = layer.bit_reversed_input, mlog, m
        # The schedule: for each factor the layout it runs in (natural: top bits sharded;
        # swapped: the lowest log2 P bits sharded), switching only when its bit is sharded.
        layout = "natural"      # (the fft init's reversal ends in it too)
        steps, maps = [], []
        for c, j, e in sh.bits():
            local = e < sh.log_n - mlog if layout == "natural" else e >= mlog
            if not local:
                layout = "swapped" if layout == "natural" else "natural"
            steps.append((c, j, e, layout))
            maps.append(self._pair_map(e, layout))
        self.steps = steps
        tw = layer.twiddle.detach()
        local_tw = torch.stack([tw[:, c, j][:, torch.as_tensor(mp)] for (c, j, _, _), mp in zip(steps, maps)], 1)
        self.twiddle = nn.Parameter(local_tw)       # [S, factors, m / (2P), 2, 2, b, b]
        if layer.bias is not None:
            w = sh.n // P
            self.bias = nn.Parameter(layer.bias.detach()[self.index * w:(self.index + 1) * w].clone())
        else:
            self.register_parameter("bias", None)

    def _position(self, u: np.ndarray, layout: str) -> np.ndarray:
        """Global block index of this rank's local block ``u`` in ``layout``."""
        P, mp = self.P, self.m // self.P
        if layout == "natural":
            return self.index * mp + u
        M = self.m // (P * P)
        return (u // M) * mp + (u % M) * P + self.index

    def _local_bit(self, e: int, layout: str) -> int:
        return e if layout == "natural" else e - self.mlog

    def _pair_map(self, e: int, layout: str) -> np.ndarray:
        """For each local pair of the factor on bit ``e``, its global pair index."""
        s_local, s = 1 << self._local_bit(e, layout), 1 << e
        half = self.m // (2 * self.P)
        g, t = np.divmod(np.arange(half), s_local)
        p = self._position(g * 2 * s_local + t, layout)
        return (p // (2 * s)) * s + p % s

    def _views(self, B: tuple, lead: tuple[str, ...], low: tuple[str, ...]) -> tuple[list, list]:
        """The types of the ``[batch, P, M, P, block]`` view of the blocks:
        the top bits sharded over ``lead``, resp. the lowest bits over ``low``."""
        P, M, b = self.P, self.m // (self.P * self.P), self.shape.block
        return ([B, (P, lead), (M, ()), (P, ()), (b, ())], [B, (P, ()), (M, ()), (P, low), (b, ())])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sh, P = self.shape, self.P
        w = sh.n // P
        self.plans = []
        x, batch_shape = self._flat_batch(x, w)
        bsz = x.shape[0]
        if self.twiddle.is_complex() and not x.is_complex():
            x = x.to(self.twiddle.dtype)
        B = self._batch_dim(bsz)
        natural, swapped = self._views(B, (self.features,), (self.features,))
        ml, b, M = self.m // P, sh.block, self.m // (P * P)
        layout = "natural"
        y = x.reshape(bsz, 1, M, P, b)
        if self.bit_reversed_input:
            # device d takes the blocks whose lowest bits are reverse(d), then reverses its local bits
            rmesh, rparts = self._reversed_mesh()
            y = self._move(y, rmesh, *self._views(B, (self.features,), rparts), exchange=True)
            y = forms.bit_reverse(TORCH, y.reshape(bsz, ml), sh.log_n - self.mlog).reshape(bsz, 1, M, P, b)
        for k, (c, j, e, want) in enumerate(self.steps):
            if want != layout:
                y = y.reshape(bsz, *((1, M, P) if layout == "natural" else (P, M, 1)), b)
                src, dst = (natural, swapped) if layout == "natural" else (swapped, natural)
                y = self._move(y, self.mesh, src, dst, exchange=True)
                layout = want
            z = y.reshape(bsz, 1, ml, b)
            z = forms.butterfly_factor(TORCH, z, self.twiddle[:, k], 1 << self._local_bit(e, layout))
            y = z
        if layout != "natural":
            y = self._move(y.reshape(bsz, P, M, 1, b), self.mesh, swapped, natural, exchange=True)
        out = y.reshape(*batch_shape, w)
        return out if self.bias is None else out + self.bias

    def _reversed_mesh(self) -> tuple[Mesh, tuple[str, ...]]:
        """The planning mesh with the feature dimension split into its bits,
        and those bits in reverse order (a block index of reversed bits)."""
        if self.mlog <= 1:
            return self.mesh, (self.features,)
        text = ",".join(f"{name}={'*'.join(['2'] * self.mlog)}" if name == self.features else f"{name}={size}"
                        for name, size in self.mesh.axes)
        return Mesh.parse(text), tuple(f"{self.features}.{i}" for i in reversed(range(self.mlog)))
