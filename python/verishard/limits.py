"""The integer limits of verishard, and the one helper that enforces them.

The verified core computes with OCaml native ints, which agree with Coq's
naturals below ``2**62`` (README, "Extraction bound"). Every integer that
reaches the core comes from a :class:`~verishard.mesh.Mesh`, an
:class:`~verishard.sharding.ArrayType` or a collective, and each of those
checks its integer fields with :func:`check_int` when it is built:

- mesh axis sizes: at least 1, at most ``2**20`` (and at most ``2**20``
  devices in all);
- global sizes: at least 1, at most ``2**50`` (and at most ``2**50``
  elements in all);
- dimension indices and part (axis) indices: at least 0, at most ``2**50``.

So every size, product, offset and traffic figure the core computes stays
below ``2**51``. The binding checks again, refusing any integer outside
``[0, 2**62)`` with a :class:`ValueError`.

>>> check_int(3, "dimension", "DynSlice")
3
>>> check_int(2**62, "dimension", "DynSlice")
Traceback (most recent call last):
...
verishard.errors.LimitError: dimension 4611686018427387904 of DynSlice is too large (at most 2**50)
>>> check_int(-1, "dimension", "AllGather")
Traceback (most recent call last):
...
verishard.errors.PlanError: dimension -1 of AllGather is negative
"""

from __future__ import annotations

import operator

from .errors import LimitError, PlanError, show

MAX_DEVICES = 2**20
MAX_ELEMENTS = 2**50
MAX_INDEX = 2**50
CORE_INT_LIMIT = 2**62  # the binding takes integers in [0, 2**62)


def _power(n: int) -> str:
    """``2**k`` for a large power of two, else the number."""
    return f"2**{n.bit_length() - 1}" if n >= 1024 and n & (n - 1) == 0 else str(n)


def _short_repr(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def show_int(v: int) -> str:
    """An integer for a message: its digits, or ``~2**k`` when it is huge.

    >>> show_int(12), show_int(-3), show_int(2**300)
    ('12', '-3', '~2**300')
    """
    if abs(v) < 2**128:
        return str(v)
    return ("-" if v < 0 else "") + f"~2**{abs(v).bit_length() - 1}"


def check_int(value: object, what: str, owner: str | None = None, *, low: int | None = 0,
              high: int = MAX_INDEX, error: type = PlanError) -> int:
    """``value`` as a Python int in ``[low, high]``, else one error naming
    ``what`` (and ``owner``, e.g. the collective) and the value
    (``low=None``: no lower bound).

    Not an integer (bool and float included) or below ``low``: ``error``;
    above ``high``: :class:`~verishard.errors.LimitError`.

    >>> check_int(True, "dimension")
    Traceback (most recent call last):
    ...
    verishard.errors.PlanError: dimension True is not an integer
    >>> from verishard.errors import MeshError
    >>> check_int(0, "size", "axis 'x'", low=1, high=MAX_DEVICES, error=MeshError)
    Traceback (most recent call last):
    ...
    verishard.errors.MeshError: size 0 of axis 'x' must be at least 1
    """
    if type(value) is int and (low is None or value >= low) and value <= high:
        return value  # the common case, kept cheap: types are built in planning loops
    of = f" of {owner}" if owner else ""
    if isinstance(value, bool):
        raise error(f"{what} {value!r}{of} is not an integer")
    try:
        v = operator.index(value)
    except TypeError:
        shown = show(value) if isinstance(value, str) else _short_repr(value)
        raise error(f"{what} {shown}{of} is not an integer") from None
    if low is not None and v < low:
        if low == 0:
            raise error(f"{what} {show_int(v)}{of} is negative")
        raise error(f"{what} {show_int(v)}{of} must be at least {low}")
    if v > high:
        raise LimitError(f"{what} {show_int(v)}{of} is too large (at most {_power(high)})")
    return v

__all__ = ["MAX_DEVICES", "MAX_ELEMENTS", "MAX_INDEX", "CORE_INT_LIMIT", "check_int", "show_int"]
