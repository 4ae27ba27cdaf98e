"""The structured forms as functions of JAX arrays (the same code as the torch
modules: :mod:`verishard.butterfly.forms`, on :data:`JAX`'s operations).

Parameters are plain arrays of the shapes the torch modules hold (and can be
taken from them: ``jnp.asarray(layer.R.detach().numpy())``); every function
maps ``x[..., in_features]`` to ``[..., out_features]`` without bias.

>>> import jax.numpy as jnp
>>> sh = ButterflyShape.of(8, 8)
>>> tw = jnp.asarray(butterfly_init(sh, "hadamard", None))
>>> butterfly(jnp.eye(8), tw, sh)[3].astype(int).tolist()
[1, -1, -1, 1, 1, -1, -1, 1]
"""
from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from . import forms
from .forms import (ButterflyShape, MonarchShape, Ops, PixelflyShape, butterfly_init, monarch_init,  # noqa: F401
                    monarch_project, pixelfly_init)

__all__ = ["butterfly", "monarch", "pixelfly"]


def _pad_last(x: Any, n: int) -> Any:
    return x if x.shape[-1] == n else jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, n - x.shape[-1])])


JAX = Ops(jnp.einsum, jnp.stack, jnp.transpose, _pad_last, jnp.concatenate)


def butterfly(x: Any, twiddle: Any, shape: ButterflyShape, bit_reversed_input: bool = False) -> Any:
    """:class:`verishard.butterfly.Butterfly` without bias (``bit_reversed_input`` for the ``fft`` init)."""
    if jnp.iscomplexobj(twiddle):
        x = x.astype(twiddle.dtype)
    return forms.butterfly_apply(JAX, x, twiddle, shape, bit_reversed_input)


def monarch(x: Any, R: Any, L: Any, shape: MonarchShape) -> Any:
    """:class:`verishard.butterfly.Monarch` without bias."""
    return forms.monarch_apply(JAX, x, R, L, shape)


def pixelfly(x: Any, blocks: Any, U: Any, V: Any, shape: PixelflyShape) -> Any:
    """:class:`verishard.butterfly.Pixelfly` without bias."""
    return forms.pixelfly_apply(JAX, x, blocks, U, V, shape, jnp.asarray(shape.columns()))
