"""The structured forms, written once for torch and for JAX.

Each form is a function of an array namespace ``ops`` (:data:`TORCH` or
``verishard.butterfly.jax.JAX``), the input ``x`` (features on the last
dimension, any batch dimensions before) and the form's parameters; the torch
modules and the JAX functions call the same code, so the two compute the same
thing by construction (``tests/test_butterfly.py`` checks it too).

Sizes (all padding is zeros on the input and a cut of the output):

* Butterfly / block butterfly with block size ``b``: ``n = b * 2**k`` is the
  least such size ``>= in_features``; ``nstacks = ceil(out_features / n)``
  butterflies of size ``n`` read the same padded input and their outputs are
  concatenated and cut to ``out_features``.
* Monarch with ``nblocks`` blocks: the input is padded to ``nblocks * p``
  (``p = ceil(in_features / nblocks)``), the output is ``nblocks * s`` cut to
  ``out_features`` (``s = ceil(out_features / nblocks)``); the middle has
  ``nblocks * q`` channels, ``q = max(p, s)``.
* Pixelfly with block size ``b``: input and output padded to one square size
  ``n = b * 2**k >= max(in_features, out_features)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..errors import LimitError, VerishardError
from ..limits import MAX_LAYER_PARAMETERS, show_int

__all__ = ["LayerError", "check_parameters", "check_finite", "Ops", "ButterflyShape", "MonarchShape", "PixelflyShape", "butterfly_factor", "bit_reverse",
           "butterfly_apply", "butterfly_init", "monarch_mix", "monarch_apply", "monarch_init", "monarch_project",
           "pixelfly_apply", "pixelfly_init"]


class LayerError(VerishardError):
    """A structured layer asked for with sizes, an init or a mesh it cannot have."""


@dataclass(frozen=True)
class Ops:
    """The few array operations the forms use that torch and JAX spell differently."""

    einsum: Callable
    stack: Callable            # stack(list, axis)
    permute: Callable          # permute(x, axes)
    pad_last: Callable         # pad_last(x, n): zeros appended on the last dimension up to n
    concat: Callable           # concat(list, axis)


def _torch_ops() -> Ops:
    import torch
    import torch.nn.functional as F
    return Ops(torch.einsum, torch.stack, lambda x, axes: x.permute(*axes),
               lambda x, n: x if x.shape[-1] == n else F.pad(x, (0, n - x.shape[-1])), torch.cat)


class _Lazy:
    """:data:`TORCH` built on first use, so that the JAX functions do not import torch."""

    def __init__(self, make):
        self._make, self._ops = make, None

    def __getattr__(self, name):
        if self._ops is None:
            self._ops = self._make()
        return getattr(self._ops, name)


TORCH: Any = _Lazy(_torch_ops)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise LayerError(message)


def _positive(name: str, v: Any) -> int:
    _require(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1,
             f"{name} must be a positive integer, got {v!r}")
    return int(v)


def check_parameters(layer: str, n: int) -> None:
    """Refuse a layer of more than :data:`~verishard.limits.MAX_LAYER_PARAMETERS`
    parameters, from its sizes alone (before anything is allocated).

    >>> check_parameters("Monarch(1073741824, 1073741824, nblocks=2)", 2**61)
    Traceback (most recent call last):
    ...
    verishard.errors.LimitError: Monarch(1073741824, 1073741824, nblocks=2) has ~2**61 parameters; at most 2**34 (verishard.limits.MAX_LAYER_PARAMETERS)
    """
    if n > MAX_LAYER_PARAMETERS:
        shown = f"~2**{n.bit_length() - 1}" if n >= 2**40 else str(n)   # the exact count of a huge layer says nothing
        raise LimitError(f"{layer} has {shown} parameters; at most 2**{MAX_LAYER_PARAMETERS.bit_length() - 1} "
                         f"(verishard.limits.MAX_LAYER_PARAMETERS)")


def check_finite(W: np.ndarray, what: str = "from_dense: W") -> None:
    """Refuse a matrix holding inf or NaN (an SVD of it does not converge, or never returns).

    >>> check_finite(np.array([[1.0, np.inf]]))
    Traceback (most recent call last):
    ...
    verishard.butterfly.forms.LayerError: from_dense: W holds 1 non-finite entry (inf or NaN), the first at (0, 1); the nearest structured matrix needs finite entries
    """
    bad = ~np.isfinite(W)
    if bad.any():
        n, at = int(bad.sum()), tuple(int(i) for i in np.argwhere(bad)[0])
        raise LayerError(f"{what} holds {n} non-finite entr{'y' if n == 1 else 'ies'} (inf or NaN), the first at "
                         f"{at}; the nearest structured matrix needs finite entries")


# ---------------------------------------------------------------------------
# butterfly


@dataclass(frozen=True)
class ButterflyShape:
    """The sizes of a (block) butterfly layer; ``twiddle`` has shape
    ``(nstacks, nblocks, log_n, n // (2 * b), 2, 2, b, b)``: factor ``j`` of
    block ``c`` of stack ``st``, pair ``i = g * s + t`` (stride ``s`` in
    blocks), output half ``a`` from input half ``e``, a ``b x b`` block.

    >>> sh = ButterflyShape.of(1024, 1024)
    >>> sh.n, sh.log_n, sh.nstacks, sh.parameters
    (1024, 10, 1, 20480)
    >>> ButterflyShape.of(100, 300, block=4).n, ButterflyShape.of(100, 300, block=4).nstacks
    (128, 3)
    """

    in_features: int
    out_features: int
    block: int
    n: int
    log_n: int
    nstacks: int
    nblocks: int
    increasing_stride: bool

    @staticmethod
    def of(in_features: int, out_features: int, *, block: int = 1, nblocks: int = 1,
           increasing_stride: bool = True) -> "ButterflyShape":
        in_features, out_features = _positive("in_features", in_features), _positive("out_features", out_features)
        block, nblocks = _positive("block", block), _positive("nblocks", nblocks)
        log_n = max(1, (-(-in_features // block) - 1).bit_length())   # least k with block * 2**k >= in_features
        n = block << log_n
        sh = ButterflyShape(in_features, out_features, block, n, log_n, -(-out_features // n), nblocks,
                            bool(increasing_stride))
        check_parameters(f"Butterfly({show_int(in_features)}, {show_int(out_features)}, block={block}, "
                         f"nblocks={nblocks})", sh.parameters)
        return sh

    @property
    def twiddle_shape(self) -> tuple[int, ...]:
        b = self.block
        return (self.nstacks, self.nblocks, self.log_n, self.n // (2 * b), 2, 2, b, b)

    @property
    def parameters(self) -> int:
        return math.prod(self.twiddle_shape)   # Python ints: no overflow for any size asked for

    def bits(self) -> list[tuple[int, int, int]]:
        """(block c, factor j, bit e) in the order applied: factor ``j`` of
        block ``c`` mixes the blocks whose indices differ in bit ``e`` (stride ``2**e``)."""
        out, inc = [], self.increasing_stride
        for c in range(self.nblocks):
            for j in range(self.log_n):
                out.append((c, j, j if inc else self.log_n - 1 - j))
            inc = not inc
        return out


def butterfly_factor(ops: Ops, x: Any, tw: Any, stride: int) -> Any:
    """One factor on ``x`` of shape ``[..., S, m, b]`` (``m`` blocks of ``b``):
    the blocks ``g*2s + e*s + t`` (``e`` in {0, 1}) are mixed by ``tw[S, g*s + t, a, e]``
    (shape ``[S, m // 2, 2, 2, b, b]``) into the blocks ``g*2s + a*s + t``."""
    *batch, S, m, b = x.shape
    g = m // (2 * stride)
    xv = x.reshape(*batch, S, g, 2, stride, b)
    t = tw.reshape(S, g, stride, 2, 2, b, b)
    if b == 1:  # four products and two sums per pair: what a 2 x 2 contraction costs
        x0, x1 = xv[..., 0, :, 0], xv[..., 1, :, 0]
        t = t[..., 0, 0]
        y = ops.stack([t[..., 0, 0] * x0 + t[..., 0, 1] * x1, t[..., 1, 0] * x0 + t[..., 1, 1] * x1], -2)
        return y.reshape(*batch, S, m, 1)
    y = ops.einsum("sgtaeij,...sgetj->...sgati", t, xv)
    return y.reshape(*batch, S, m, b)


def bit_reverse(ops: Ops, x: Any, log_n: int) -> Any:
    """``x`` (last dimension ``2**log_n``) with its index bits reversed: the
    reversal of the axes of its ``[..., 2, 2, ..., 2]`` view.

    >>> import torch
    >>> bit_reverse(TORCH, torch.arange(8), 3).tolist()
    [0, 4, 2, 6, 1, 5, 3, 7]
    """
    *batch, n = x.shape
    nb = len(batch)
    v = x.reshape(*batch, *([2] * log_n))
    v = ops.permute(v, list(range(nb)) + [nb + log_n - 1 - i for i in range(log_n)])
    return v.reshape(*batch, n)


def butterfly_apply(ops: Ops, x: Any, twiddle: Any, sh: ButterflyShape, bit_reversed_input: bool = False) -> Any:
    """The butterfly layer without bias: ``x[..., in_features] -> [..., out_features]``."""
    *batch, _ = x.shape
    x = ops.pad_last(x, sh.n)
    if bit_reversed_input:
        x = bit_reverse(ops, x, sh.log_n)
    m, b = sh.n // sh.block, sh.block
    y = ops.stack([x] * sh.nstacks, -2).reshape(*batch, sh.nstacks, m, b)
    for c, j, e in sh.bits():
        y = butterfly_factor(ops, y, twiddle[:, c, j], 1 << e)
    return y.reshape(*batch, sh.nstacks * sh.n)[..., :sh.out_features]


def butterfly_init(sh: ButterflyShape, init: str, rng: np.random.Generator) -> np.ndarray:
    """Twiddles (float64, or complex128 for ``"fft"``) for ``init`` in
    ``identity``, ``random`` (Gaussian, variance-preserving per factor),
    ``orthogonal`` (each 2b x 2b pair block a random orthogonal matrix),
    ``hadamard`` (each pair ``[[1, 1], [1, -1]]``: the product is Sylvester's
    Hadamard matrix) and ``fft`` (radix-2 decimation in time: with the
    bit-reversed input the product is the DFT ``exp(-2 pi i j k / n)``)."""
    shape, b = sh.twiddle_shape, sh.block
    if init == "identity":
        return np.broadcast_to(np.einsum("ae,ij->aeij", np.eye(2), np.eye(b)), shape).copy()
    if init == "random":
        return rng.normal(0.0, math.sqrt(1.0 / (2 * b)), shape)
    if init == "orthogonal":
        q, r = np.linalg.qr(rng.normal(size=shape[:4] + (2 * b, 2 * b)))
        q = q * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[..., None, :]
        return q.reshape(shape[:4] + (2, b, 2, b)).transpose(0, 1, 2, 3, 4, 6, 5, 7).copy()
    if init in ("hadamard", "fft"):
        _require(b == 1 and sh.nstacks == 1 and sh.in_features == sh.out_features == sh.n,
                 f"init={init!r} is the {init} of size n = 2**k: it needs block=1 and "
                 f"in_features == out_features a power of two, got {sh.in_features} -> {sh.out_features}")
        if init == "hadamard":
            return np.broadcast_to(np.array([[1.0, 1.0], [1.0, -1.0]])[:, :, None, None], shape).copy()
        _require(sh.nblocks == 1 and sh.increasing_stride,
                 "init='fft' is one block of increasing stride (nblocks=1, increasing_stride=True)")
        tw = np.zeros(shape, dtype=np.complex128)
        for j in range(sh.log_n):
            s = 1 << j
            w = np.exp(-2j * np.pi * (np.arange(sh.n // 2) % s) / (2 * s))
            tw[0, 0, j, :, 0, 0, 0, 0] = 1
            tw[0, 0, j, :, 0, 1, 0, 0] = w
            tw[0, 0, j, :, 1, 0, 0, 0] = 1
            tw[0, 0, j, :, 1, 1, 0, 0] = -w
        return tw
    raise LayerError(f"unknown init {init!r}: use identity, random, orthogonal, hadamard or fft")


# ---------------------------------------------------------------------------
# Monarch


@dataclass(frozen=True)
class MonarchShape:
    """Sizes of a Monarch layer: ``R`` has shape ``(nblocks, q, p)``, ``L``
    ``(nblocks, s, q)``.

    >>> m = MonarchShape.of(1024, 1024, 32)
    >>> (m.p, m.q, m.s, m.parameters, 2 * 1024 ** 2 // 32)
    (32, 32, 32, 65536, 65536)
    """

    in_features: int
    out_features: int
    nblocks: int
    p: int
    q: int
    s: int

    @staticmethod
    def of(in_features: int, out_features: int, nblocks: int) -> "MonarchShape":
        in_features, out_features = _positive("in_features", in_features), _positive("out_features", out_features)
        nblocks = _positive("nblocks", nblocks)
        p, s = -(-in_features // nblocks), -(-out_features // nblocks)
        sh = MonarchShape(in_features, out_features, nblocks, p, max(p, s), s)
        check_parameters(f"Monarch({show_int(in_features)}, {show_int(out_features)}, nblocks={nblocks})", sh.parameters)
        return sh

    @property
    def parameters(self) -> int:
        return self.nblocks * self.q * (self.p + self.s)

    def channels(self) -> np.ndarray:
        """For every middle channel ``(k, c)`` (``R``'s block ``k``, row ``c``):
        ``[l, r, j]``: it feeds ``L``'s block ``l`` at column ``r``, and it is
        the ``j``-th channel joining input block ``k`` to output block ``l``.
        The middle permutation is the reshape-transpose: channel ``k*q + c``
        of the ``[nblocks, q]`` output of ``R`` is read as ``[q, nblocks]``
        and transposed, so it lands at ``[l, r] = [f % nblocks, f // nblocks]``."""
        K, Q = self.nblocks, self.q
        f = np.arange(K * Q).reshape(K, Q)
        lr = np.stack([f % K, f // K], -1)
        j = np.zeros((K, Q), dtype=np.int64)
        seen: dict[tuple[int, int], int] = {}
        for k in range(K):
            for c in range(Q):
                key = (k, int(lr[k, c, 0]))
                j[k, c] = seen.get(key, 0)
                seen[key] = j[k, c] + 1
        return np.concatenate([lr, j[..., None]], -1)


def monarch_mix(ops: Ops, y: Any, nblocks: int) -> Any:
    """The middle permutation on ``[..., nblocks, q]``: reshape to ``[..., q, nblocks]``, transpose."""
    *batch, K, Q = y.shape
    y = y.reshape(*batch, Q, K)
    return ops.permute(y, list(range(len(batch))) + [len(batch) + 1, len(batch)])


def monarch_apply(ops: Ops, x: Any, R: Any, L: Any, sh: MonarchShape) -> Any:
    """The Monarch layer without bias: ``L`` (block-diagonal) after the
    reshape-transpose permutation after ``R`` (block-diagonal): two batched
    matrix products and a transpose."""
    *batch, _ = x.shape
    x = ops.pad_last(x, sh.nblocks * sh.p).reshape(*batch, sh.nblocks, sh.p)
    y = monarch_mix(ops, ops.einsum("kcp,...kp->...kc", R, x), sh.nblocks)
    z = ops.einsum("ksr,...kr->...ks", L, y)
    return z.reshape(*batch, sh.nblocks * sh.s)[..., :sh.out_features]


def monarch_init(sh: MonarchShape, init: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(R, L)`` float64: ``random`` (uniform as ``nn.Linear``'s, by each factor's
    fan-in) or ``identity`` (``in_features == out_features``: the product is the identity)."""
    K, p, q, s = sh.nblocks, sh.p, sh.q, sh.s
    if init == "random":
        R = rng.uniform(-1, 1, (K, q, p)) / math.sqrt(p)
        L = rng.uniform(-1, 1, (K, s, q)) / math.sqrt(q)
        return R, L
    if init == "identity":
        _require(sh.in_features == sh.out_features, "init='identity' needs in_features == out_features")
        return monarch_project(np.eye(sh.out_features, sh.in_features), sh)
    raise LayerError(f"unknown init {init!r}: use random or identity")


def monarch_project(W: np.ndarray, sh: MonarchShape) -> tuple[np.ndarray, np.ndarray]:
    """The ``(R, L)`` whose Monarch matrix is nearest ``W`` (``out x in``) in
    Frobenius norm. Block ``(l, k)`` (``s x p``) of the Monarch matrix is
    ``sum_j L[l, :, r_j] R[k, c_j, :]^T`` over the channels joining ``k`` to
    ``l``, and distinct blocks share no parameter; so the problem splits into
    one best-rank-``c`` approximation per block, whose optimum is the
    truncated SVD (Eckart-Young). Padding rows and columns of ``W`` are zero
    and stay zero in its truncated SVD, so the optimum over the padded matrix
    is the optimum over ``W``'s entries."""
    W = np.asarray(W)
    _require(W.ndim == 2 and W.shape == (sh.out_features, sh.in_features),
             f"from_dense: W must have shape (out_features, in_features) = "
             f"({sh.out_features}, {sh.in_features}), got {W.shape}")
    check_finite(W)
    K, p, q, s = sh.nblocks, sh.p, sh.q, sh.s
    Wp = np.zeros((K * s, K * p), dtype=W.dtype)
    Wp[:sh.out_features, :sh.in_features] = W
    blocks = Wp.reshape(K, s, K, p).transpose(0, 2, 1, 3)          # [l, k, s, p]
    U, S, Vh = np.linalg.svd(blocks, full_matrices=False)           # [l,k,s,m], [l,k,m], [l,k,m,p]
    rank = S.shape[-1]
    R = np.zeros((K, q, p), dtype=W.dtype)
    L = np.zeros((K, s, q), dtype=W.dtype)
    ch = sh.channels()
    for k in range(K):
        for c in range(q):
            l, r, j = (int(v) for v in ch[k, c])
            if j < rank:
                root = math.sqrt(S[l, k, j])
                R[k, c] = root * Vh[l, k, j]
                L[l, :, r] = root * U[l, k, :, j]
    return R, L


# ---------------------------------------------------------------------------
# Pixelfly


@dataclass(frozen=True)
class PixelflyShape:
    """Sizes of a Pixelfly layer: the flat block butterfly of ``factors``
    factors at block size ``block`` on the padded square size ``n`` (block
    row ``I`` holds block columns ``I`` and ``I xor 2**j`` for ``j < factors``),
    plus a rank-``rank`` term ``U V^T``.

    >>> p = PixelflyShape.of(256, 256, block=16, factors=4, rank=8)
    >>> p.n, p.parameters, p.columns()[5].tolist()
    (256, 24576, [5, 4, 7, 1, 13])
    """

    in_features: int
    out_features: int
    block: int
    factors: int
    rank: int
    n: int

    @staticmethod
    def of(in_features: int, out_features: int, *, block: int, factors: int | None = None,
           rank: int = 0) -> "PixelflyShape":
        in_features, out_features = _positive("in_features", in_features), _positive("out_features", out_features)
        block = _positive("block", block)
        log_m = max(1, (-(-max(in_features, out_features) // block) - 1).bit_length())
        factors = log_m if factors is None else factors
        _require(isinstance(factors, int) and 0 <= factors <= log_m,
                 f"factors must be in 0..{log_m} (log2 of the number of blocks), got {factors!r}")
        _require(isinstance(rank, int) and rank >= 0, f"rank must be a non-negative integer, got {rank!r}")
        sh = PixelflyShape(in_features, out_features, block, factors, rank, block << log_m)
        check_parameters(f"Pixelfly({show_int(in_features)}, {show_int(out_features)}, block={block}, "
                         f"factors={factors}, rank={show_int(rank)})", sh.parameters)
        return sh

    def columns(self) -> np.ndarray:
        m = self.n // self.block
        rows = np.arange(m)[:, None]
        return np.concatenate([rows, rows ^ (1 << np.arange(self.factors))[None, :]], 1)

    @property
    def parameters(self) -> int:
        m = self.n // self.block
        return m * (self.factors + 1) * self.block ** 2 + 2 * self.rank * self.n

    def mask(self) -> np.ndarray:
        """The ``n x n`` 0/1 sparsity of the flat block butterfly."""
        m, b = self.n // self.block, self.block
        blk = np.zeros((m, m))
        blk[np.arange(m)[:, None], self.columns()] = 1
        return np.kron(blk, np.ones((b, b)))


def pixelfly_apply(ops: Ops, x: Any, blocks: Any, U: Any, V: Any, sh: PixelflyShape, columns: Any) -> Any:
    """The Pixelfly layer without bias: ``blocks`` ``[m, factors + 1, b, b]``
    on the block columns ``columns`` (``sh.columns()``), plus ``(x V) U^T``."""
    *batch, _ = x.shape
    m, b = sh.n // sh.block, sh.block
    x = ops.pad_last(x, sh.n)
    gathered = x.reshape(*batch, m, b)[..., columns, :]                 # [..., m, f+1, b]
    y = ops.einsum("mfij,...mfj->...mi", blocks, gathered).reshape(*batch, sh.n)
    if sh.rank:
        y = y + (x @ V) @ ops.permute(U, [1, 0])
    return y[..., :sh.out_features]


def pixelfly_init(sh: PixelflyShape, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(blocks, U, V)`` float64, uniform by fan-in as ``nn.Linear``'s."""
    m, b, f = sh.n // sh.block, sh.block, sh.factors
    fan_in = (f + 1) * b + sh.rank
    blocks = rng.uniform(-1, 1, (m, f + 1, b, b)) / math.sqrt(fan_in)
    U = rng.uniform(-1, 1, (sh.n, sh.rank)) / math.sqrt(max(sh.rank, 1))
    V = rng.uniform(-1, 1, (sh.n, sh.rank)) / math.sqrt(fan_in)
    return blocks, U, V
