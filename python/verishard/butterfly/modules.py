"""Butterfly, block butterfly, Monarch and Pixelfly as ``torch.nn`` modules.

Each is built as ``(in_features, out_features, bias=True, ...)`` and is a
drop-in for ``nn.Linear`` on the last dimension: ``layer(x) == x @
layer.to_dense().T + layer.bias``. Pure torch (no compiled extension); the
forms themselves are :mod:`verishard.butterfly.forms`'s, shared with JAX.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import LimitError
from . import forms
from .forms import TORCH, ButterflyShape, LayerError, MonarchShape, PixelflyShape

__all__ = ["Butterfly", "BlockButterfly", "Monarch", "Pixelfly", "layer_dtype", "layer_device"]


class _Structured(nn.Module):
    """What the four layers share: the bias, ``to_dense``, the parameter count."""

    in_features: int
    out_features: int

    def _init_bias(self, bias: bool, dtype: torch.dtype, device: Any, rng: np.random.Generator) -> None:
        # from the layer's own generator: the same seed gives the same layer on every rank
        if bias:
            bound = 1 / math.sqrt(self.in_features)
            b = rng.uniform(-bound, bound, self.out_features)
            self.bias = nn.Parameter(torch.as_tensor(b, device=device).to(dtype))
        else:
            self.register_parameter("bias", None)

    def _apply_form(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - each layer has one
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise LayerError(f"{type(self).__name__} takes {self.in_features} features on the last dimension, "
                             f"got shape {tuple(x.shape)}")
        device = next(self.parameters()).device
        if x.device != device:
            raise LayerError(f"{type(self).__name__} holds its weights on {device}, the input is on {x.device}; "
                             f"move one of them (layer.to(x.device) or x.to({str(device)!r}))")
        y = self._apply_form(x)
        return y if self.bias is None else y + self.bias

    def to_dense(self) -> torch.Tensor:
        """The weight ``W`` (``out_features x in_features``) of the equivalent
        ``nn.Linear``: the layer (without bias) applied to the identity, transposed."""
        p = next(self.parameters())
        return self._apply_form(torch.eye(self.in_features, dtype=p.dtype, device=p.device)).T

    def num_parameters(self, *, bias: bool = False) -> int:
        """Parameters of the structured weight (and of the bias with ``bias=True``)."""
        return sum(p.numel() for name, p in self.named_parameters() if bias or name != "bias")


def layer_dtype(dtype: Any) -> torch.dtype:
    """The floating or complex torch dtype ``dtype`` names: a ``torch.dtype``,
    its name as torch spells it (``"float32"``, ``"bfloat16"``,
    ``"torch.float64"``), or None for torch's default; anything else is one
    :class:`LayerError`.

    >>> layer_dtype("bfloat16"), layer_dtype(torch.float64), layer_dtype(None) == torch.get_default_dtype()
    (torch.bfloat16, torch.float64, True)
    >>> layer_dtype("int32")
    Traceback (most recent call last):
    ...
    verishard.butterfly.forms.LayerError: dtype torch.int32 is not a floating or complex dtype: a structured layer's weights are real or complex numbers (float32, bfloat16, float64, complex64, ...)
    >>> layer_dtype("float33")
    Traceback (most recent call last):
    ...
    verishard.butterfly.forms.LayerError: dtype 'float33' names no torch dtype; give a torch.dtype or its name, e.g. torch.float32 or "float32", "bfloat16"
    """
    if dtype is None:
        return torch.get_default_dtype()
    if isinstance(dtype, str):
        name = dtype.removeprefix("torch.")
        found = getattr(torch, name, None) if name.isidentifier() else None
        if not isinstance(found, torch.dtype):
            raise LayerError(f"dtype {dtype!r} names no torch dtype; give a torch.dtype or its name, e.g. "
                             f"torch.float32 or \"float32\", \"bfloat16\"")
        dtype = found
    if not isinstance(dtype, torch.dtype):
        raise LayerError(f"dtype must be a torch.dtype or its name (\"float32\"), not {type(dtype).__name__} "
                         f"{dtype!r}"[:200])
    if not (dtype.is_floating_point or dtype.is_complex):
        raise LayerError(f"dtype {dtype} is not a floating or complex dtype: a structured layer's weights are real "
                         f"or complex numbers (float32, bfloat16, float64, complex64, ...)")
    return dtype


def layer_device(device: Any) -> torch.device | None:
    """``device`` as a ``torch.device`` (None stays None: torch's default), else one :class:`LayerError`."""
    if device is None or isinstance(device, torch.device):
        return device
    try:
        return torch.device(device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise LayerError(f"device {device!r} is not a torch device ({' '.join(str(e).split())[:120]}); give e.g. "
                         f"\"cpu\", \"cuda:0\" or \"meta\"") from None


@contextlib.contextmanager
def _allocating(layer: str, parameters: int):
    """A layer within :data:`~verishard.limits.MAX_LAYER_PARAMETERS` that this
    machine still cannot hold: one :class:`~verishard.errors.LimitError`, not numpy's or torch's MemoryError."""
    try:
        yield
    except MemoryError:
        raise LimitError(f"{layer}: {parameters} parameters (and their float64 init) do not fit in this "
                         f"machine's memory; use fewer features or more blocks") from None
    except RuntimeError as e:
        if "alloc" not in str(e).lower() and "out of memory" not in str(e).lower():
            raise
        raise LimitError(f"{layer}: {parameters} parameters do not fit in the device's memory "
                         f"({' '.join(str(e).split())[:120]})") from None


def _tensor(a: np.ndarray, dtype: torch.dtype, device: Any) -> torch.Tensor:
    if np.iscomplexobj(a) and not dtype.is_complex:
        dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    return torch.as_tensor(a, device=device).to(dtype)


class Butterfly(_Structured):
    """A product of ``log2 n`` butterfly factors per block (``n = block * 2**k``,
    the least ``>= in_features``): factor ``j`` mixes the pairs of ``b x b``
    blocks ``(i, i xor 2**j)`` with four learned diagonals (``block=1``) or
    four learned ``b x b`` blocks: ``2 n b`` parameters per factor, ``2 n
    log2 n`` in all for ``block=1, nblocks=1``. ``nblocks`` butterflies in
    a row alternate increasing and decreasing stride. ``out_features > n``
    stacks ``ceil(out / n)`` butterflies on the same input; outputs are cut
    to ``out_features``.

    ``init``: ``"random"`` (default), ``"identity"``, ``"orthogonal"``,
    ``"hadamard"`` or ``"fft"`` (complex: the layer is the DFT
    ``exp(-2 pi i j k / n)``, its input read in bit-reversed order).

    >>> import torch
    >>> h = Butterfly(8, 8, bias=False, init="hadamard", dtype=torch.float64)
    >>> h.to_dense().int().tolist()[3]
    [1, -1, -1, 1, 1, -1, -1, 1]
    >>> h.num_parameters() == 2 * 8 * 3
    True
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, block: int = 1,
                 nblocks: int = 1, increasing_stride: bool = True, init: str = "random", seed: int | None = None,
                 dtype: torch.dtype | None = None, device: Any = None):
        super().__init__()
        self.shape = ButterflyShape.of(in_features, out_features, block=block, nblocks=nblocks,
                                       increasing_stride=increasing_stride)
        self.in_features, self.out_features = self.shape.in_features, self.shape.out_features
        self.bit_reversed_input = init == "fft"
        dtype, device = layer_dtype(dtype), layer_device(device)
        rng = np.random.default_rng(seed if seed is not None else torch.randint(2 ** 31, ()).item())
        with _allocating(f"{type(self).__name__}({in_features}, {out_features})", self.shape.parameters):
            tw = _tensor(forms.butterfly_init(self.shape, init, rng), dtype, device)
        self.twiddle = nn.Parameter(tw)
        self._init_bias(bias and init not in ("fft", "hadamard"), tw.dtype, device, rng)

    def _apply_form(self, x: torch.Tensor) -> torch.Tensor:
        if self.twiddle.is_complex() and not x.is_complex():
            x = x.to(self.twiddle.dtype)
        return forms.butterfly_apply(TORCH, x, self.twiddle, self.shape, self.bit_reversed_input)


class BlockButterfly(Butterfly):
    """:class:`Butterfly` of ``b x b`` blocks (``block`` is required)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, block: int, **kw: Any):
        super().__init__(in_features, out_features, bias, block=block, **kw)


class Monarch(_Structured):
    """``M = L P R``: ``R`` block-diagonal (``nblocks`` blocks of ``q x p``),
    ``P`` the reshape-transpose permutation of the ``nblocks * q`` middle
    channels (read ``[nblocks, q]`` as ``[q, nblocks]``, transpose), ``L``
    block-diagonal (``nblocks`` blocks of ``s x q``). This is the class
    ``P L P^T R`` of Dao et al. (2022) with the output permutation dropped
    (a fixed permutation of the outputs is absorbed by whatever reads them,
    and without it each device's output block is contiguous when sharded).
    ``nblocks * q * (p + s)`` parameters: ``2 n**2 / nblocks`` when square,
    ``2 n sqrt(n)`` at ``nblocks = sqrt(n)``. Applied as batched matrix
    product, transpose, batched matrix product.

    >>> import torch
    >>> W = torch.randn(6, 10, dtype=torch.float64)
    >>> m = Monarch.from_dense(W, nblocks=2)
    >>> m(torch.eye(10, dtype=torch.float64)).shape, m.num_parameters()
    (torch.Size([10, 6]), 80)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, nblocks: int = 4,
                 init: str = "random", seed: int | None = None, dtype: torch.dtype | None = None,
                 device: Any = None):
        super().__init__()
        self.shape = MonarchShape.of(in_features, out_features, nblocks)
        self.in_features, self.out_features, self.nblocks = in_features, out_features, nblocks
        dtype, device = layer_dtype(dtype), layer_device(device)
        rng = np.random.default_rng(seed if seed is not None else torch.randint(2 ** 31, ()).item())
        with _allocating(f"Monarch({in_features}, {out_features}, nblocks={nblocks})", self.shape.parameters):
            R, L = forms.monarch_init(self.shape, init, rng)
            self.R = nn.Parameter(_tensor(R, dtype, device))
            self.L = nn.Parameter(_tensor(L, dtype, device))
        self._init_bias(bias, self.R.dtype, device, rng)

    def _apply_form(self, x: torch.Tensor) -> torch.Tensor:
        return forms.monarch_apply(TORCH, x, self.R, self.L, self.shape)

    @classmethod
    def from_dense(cls, W: torch.Tensor, *, nblocks: int, bias: torch.Tensor | None = None) -> "Monarch":
        """The Monarch layer nearest ``W`` (``out x in``) in Frobenius norm
        (:func:`verishard.butterfly.forms.monarch_project`: one truncated SVD
        per block), with ``bias`` if given; dtype and device of ``W``."""
        if not isinstance(W, torch.Tensor):
            W = torch.as_tensor(np.asarray(W))
        if W.ndim != 2:
            raise LayerError(f"from_dense takes a matrix (out_features, in_features), got shape {tuple(W.shape)}")
        if W.is_meta:
            raise LayerError("from_dense: W is on the meta device and holds no values; give the matrix itself "
                             "(Monarch(in_features, out_features, device='meta') builds a layer without values)")
        if bias is not None:
            if not isinstance(bias, torch.Tensor) or bias.shape != (W.shape[0],):
                raise LayerError(f"from_dense: bias must be a tensor of shape ({W.shape[0]},) (out_features), got "
                                 f"{tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__}")
            if bias.device != W.device:
                raise LayerError(f"from_dense: W is on {W.device} but bias is on {bias.device}; put both on one "
                                 f"device")
        layer_dtype(W.dtype)   # a floating or complex matrix, before anything is built
        W = W.detach()
        host = (W.to(torch.complex128) if W.is_complex() else W.double()).cpu().numpy()   # never drop a part
        forms.check_finite(host)   # before the layer's init and before the SVD (which never returns on inf)
        layer = cls(W.shape[1], W.shape[0], bias is not None, nblocks=nblocks, dtype=W.dtype, device=W.device)
        R, L = forms.monarch_project(host, layer.shape)
        with torch.no_grad():
            layer.R.copy_(torch.as_tensor(R))
            layer.L.copy_(torch.as_tensor(L))
            if bias is not None:
                layer.bias.copy_(bias)
        return layer


class Pixelfly(_Structured):
    """Pixelated butterfly: the flat block butterfly (block row ``I`` holds
    the ``b x b`` blocks at columns ``I`` and ``I xor 2**j`` for ``j <
    factors``, the union of the first ``factors`` butterfly factors' masks)
    plus a rank-``rank`` term ``U V^T``. Input and output are padded to one
    square size ``n = block * 2**k >= max(in, out)``; the output is cut.

    >>> p = Pixelfly(64, 64, block=8, factors=3, rank=4)
    >>> p.num_parameters(), int(p.shape.mask().sum())
    (2560, 2048)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, block: int = 16,
                 factors: int | None = None, rank: int = 0, seed: int | None = None,
                 dtype: torch.dtype | None = None, device: Any = None):
        super().__init__()
        self.shape = PixelflyShape.of(in_features, out_features, block=block, factors=factors, rank=rank)
        self.in_features, self.out_features = in_features, out_features
        dtype, device = layer_dtype(dtype), layer_device(device)
        rng = np.random.default_rng(seed if seed is not None else torch.randint(2 ** 31, ()).item())
        with _allocating(f"Pixelfly({in_features}, {out_features})", self.shape.parameters):
            blocks, U, V = forms.pixelfly_init(self.shape, rng)
            self.blocks = nn.Parameter(_tensor(blocks, dtype, device))
            self.U = nn.Parameter(_tensor(U, dtype, device))
            self.V = nn.Parameter(_tensor(V, dtype, device))
        self.register_buffer("columns", torch.as_tensor(self.shape.columns(), device=device), persistent=False)
        self._init_bias(bias, self.blocks.dtype, device, rng)

    def _apply_form(self, x: torch.Tensor) -> torch.Tensor:
        return forms.pixelfly_apply(TORCH, x, self.blocks, self.U, self.V, self.shape, self.columns)
