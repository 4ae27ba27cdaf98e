"""The element types verishard moves and stores, by name, and their numpy and
torch forms.

Every surface (checkpoints, DCP reads, ``verishard.torch``, ``verishard.jax``,
the MPI runtime) moves these dtypes bit-exactly: bool; int8-64; uint8-64;
float16, bfloat16, float32, float64; complex64, complex128; and the float8
types that torch and JAX share (float8_e4m3fn, float8_e5m2, float8_e8m0fnu,
float8_e4m3fnuz, float8_e5m2fnuz). numpy holds bfloat16 and the float8 types
through ``ml_dtypes`` (the package JAX itself uses), imported only when such a
dtype is used. A checkpoint stores a dtype by its name here.

>>> name_of(np.dtype("<f4")), numpy_dtype("int16").str
('float32', '<i2')
>>> numpy_dtype("bfloat16").itemsize, numpy_dtype("float8_e4m3fn").name
(2, 'float8_e4m3fn')
>>> name_of(np.dtype("U3"))
Traceback (most recent call last):
...
verishard.errors.DtypeError: dtype <U3 is not a number type verishard moves (bool, int8-64, uint8-64, float16, bfloat16, float32, float64, complex64, complex128, float8_e4m3fn, float8_e5m2, float8_e8m0fnu, float8_e4m3fnuz, float8_e5m2fnuz)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DtypeError, show

__all__ = ["NAMES", "NUMPY_NAMES", "LOW_PRECISION", "numpy_dtype", "name_of", "torch_dtype", "torch_to_numpy",
           "numpy_to_torch", "same_size_uint", "has_infinity", "reduction_unit"]

# the dtypes numpy holds itself
NUMPY_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "float32", "float64", "complex64", "complex128")
# the dtypes numpy holds through ml_dtypes (torch and JAX both have each of them)
LOW_PRECISION = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float8_e4m3fnuz",
                 "float8_e5m2fnuz")
NAMES = NUMPY_NAMES + LOW_PRECISION
_SUMMARY = ("bool, int8-64, uint8-64, float16, bfloat16, float32, float64, complex64, complex128, "
            + ", ".join(LOW_PRECISION[1:]))
# floating dtypes that hold +-inf (the others saturate or turn it into NaN)
_WITH_INFINITY = ("float16", "bfloat16", "float32", "float64", "float8_e5m2")


def _ml_dtypes(name: str):
    try:
        import ml_dtypes
    except ImportError:
        raise DtypeError(f"dtype {name} needs the package ml_dtypes (numpy's bfloat16 and float8 types, the one "
                         f"JAX uses): pip install ml_dtypes") from None
    return ml_dtypes


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of one of :data:`NAMES` (native byte order)."""
    if name in NUMPY_NAMES:
        return np.dtype(name)
    if name in LOW_PRECISION:
        return np.dtype(getattr(_ml_dtypes(name), name))
    raise DtypeError(f"dtype {show(name)} is not a number type verishard moves ({_SUMMARY})")


def name_of(dtype: Any) -> str:
    """The name (:data:`NAMES`) of a numpy, ml_dtypes, JAX or torch dtype (or
    of the name itself);
    one :class:`DtypeError` naming any other (strings, objects, records,
    complex32, the 4-bit and quantized types)."""
    if isinstance(dtype, str) and dtype in NAMES:
        return dtype
    mod = type(dtype).__module__
    if mod.startswith("torch"):
        text = str(dtype)
        name = text[len("torch."):] if text.startswith("torch.") else text
        if name in NAMES:
            return name
        raise DtypeError(f"dtype {text} is not a number type verishard moves ({_SUMMARY})")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise DtypeError(f"dtype {show(dtype)} is not a number type verishard moves ({_SUMMARY})") from None
    if dt.name in NUMPY_NAMES and dt.kind in "biufc":
        return dt.name
    if dt.name in LOW_PRECISION and dt.names is None and dt == numpy_dtype(dt.name):
        return dt.name
    raise DtypeError(f"dtype {dt.str if dt.kind in 'OSUVMm' else dt} is not a number type verishard moves ({_SUMMARY})")


def torch_dtype(name: str):
    """The torch dtype of one of :data:`NAMES`."""
    import torch
    if name not in NAMES:
        raise DtypeError(f"dtype {show(name)} is not a number type verishard moves ({_SUMMARY})")
    return getattr(torch, name)


def same_size_uint(itemsize: int) -> str:
    """The unsigned integer dtype name of ``itemsize`` bytes (1, 2, 4 or 8)."""
    return {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}[itemsize]


def torch_to_numpy(x) -> np.ndarray:
    """A torch tensor's values as a numpy array of the same dtype (bfloat16 and
    float8 through ml_dtypes: the bytes viewed, never converted)."""
    name = name_of(x.dtype)
    x = x.detach().cpu()
    if name in NUMPY_NAMES:
        return x.numpy()
    import torch
    raw = x.contiguous().view(getattr(torch, same_size_uint(x.dtype.itemsize))).numpy()
    return raw.view(numpy_dtype(name))


def numpy_to_torch(a: np.ndarray):
    """A numpy array (any dtype of :data:`NAMES`) as a torch tensor of the same
    dtype, sharing its memory where torch can (bfloat16 and float8: the bytes
    viewed as the torch dtype)."""
    import torch
    name = name_of(a.dtype)
    if name in NUMPY_NAMES:
        return torch.from_numpy(a)
    raw = (a if a.flags.c_contiguous else a.copy(order="C")).view(same_size_uint(a.dtype.itemsize))   # (0-d kept)
    return torch.from_numpy(raw).view(torch_dtype(name))


def has_infinity(name: str) -> bool:
    return name in _WITH_INFINITY


def reduction_unit(name: str, op: str):
    """The unit of reduction ``op`` ("sum", "max", "min") for the dtype named
    ``name``: 0 for a sum; the lowest value for a max and the highest for a
    min (infinities where the dtype holds them, else its finite extremes:
    the float8 types without infinities). float8_e8m0fnu holds no zero: a sum
    of it is one :class:`DtypeError`.

    >>> reduction_unit("int8", "max"), reduction_unit("float8_e4m3fn", "min"), reduction_unit("bool", "min")
    (-128, 448.0, True)
    """
    if op == "sum":
        if name == "float8_e8m0fnu":
            raise DtypeError("dtype float8_e8m0fnu holds no zero: a sum of it (a Partial sum) cannot be reduced; "
                             "reduce in float32 and cast")
        return 0
    high = op == "min"
    if name == "bool":
        return high
    dt = numpy_dtype(name) if name in NUMPY_NAMES else None
    if dt is not None and dt.kind in "iu":
        info = np.iinfo(dt)
        return int(info.max if high else info.min)
    if has_infinity(name) or dt is not None:
        return float("inf") if high else float("-inf")
    info = _ml_dtypes(name).finfo(numpy_dtype(name))
    return float(info.max if high else info.min)
