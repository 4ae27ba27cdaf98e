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

Text is bounded before it is parsed, so that no input spends long in
parsing or validation: a mesh, type, PartitionSpec, placements or
collective text has at most :data:`MAX_TEXT` characters
(:func:`check_text`), an integer in it at most :data:`MAX_DIGITS` digits
(:func:`parse_int`); a mesh has at most :data:`MAX_MESH_PARTS` axes (each
factor of a split axis counted) and an array type at most :data:`MAX_DIMS`
dimensions (:func:`check_count`). A mesh of ``2**20`` devices has at most
20 axes of size 2 or more, and numpy's arrays at most 64 dimensions, so
these leave room for any real program while keeping every plan quick.

A certificate entry (``core.certify``, ``core.mplan``) from which the
checker would enumerate more than :data:`MAX_CERTIFY_STEPS` steps
(``core.certify_steps``: every arrangement of the mesh's free axes, factorial
in their number) is refused before the core is called; whatever a call
builds, the glue stops it with a :class:`~verishard.errors.LimitError`
before the process runs out of memory (``bindings/glue.ml``).

So every size, product, offset and traffic figure the core computes stays
below ``2**51``. The binding checks again, refusing any integer outside
``[0, 2**62)`` with a :class:`ValueError`.

Every deadline and timeout (``deadline_s=``, ``VERISHARD_DEADLINE_S``,
:func:`verishard.torch.backend.set_deadline`, the MPI backends'
``timeout=``) is a number of seconds greater than 0 and at most
:data:`MAX_SECONDS`, checked by :func:`check_seconds` when the call that
waits is made (never at import).

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

import math
import operator
import re

from .errors import LimitError, ParseError, PlanError, show

MAX_DEVICES = 2**20
MAX_ELEMENTS = 2**50
MAX_INDEX = 2**50
CORE_INT_LIMIT = 2**62  # the binding takes integers in [0, 2**62)
MAX_DIGITS = 30  # 2**62 has 19 digits; longer tokens are refused before int() (Python's own limit is 4,300)
MAX_TEXT = 10_000  # characters of one mesh, type, PartitionSpec, placements or collective text
MAX_MESH_PARTS = 64  # axes of a mesh, each factor of a split axis counted
MAX_DIMS = 64  # dimensions of an array type (numpy's own limit)
MAX_SECONDS = 10**8  # a deadline or timeout (about 3 years; timedelta and the stores' clocks overflow far above)
MAX_ROUND_CUTS = 4096  # cuts of a staged cross-mesh transfer (each cut is one message)
MAX_CERTIFY_STEPS = 2**20  # steps the certificate checker enumerates from one entry (core.certify_steps)
# Parameters of one structured layer (verishard.butterfly), checked from the sizes before anything is allocated:
# 2**34 is 64 GiB in float32, beyond any one device's memory today; the float64 init arrays are twice that.
MAX_LAYER_PARAMETERS = 2**34
# Ranks `verishard demo --nranks` starts on this machine: mpirun oversubscribes the cores, and each rank is a
# Python process of about 100 MB, so past a few per core the demo only thrashes (the CLI names this cap).
DEMO_RANKS_PER_CPU = 4

_INT = re.compile(r"-?[0-9]+\Z")


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

def check_seconds(value: object, what: str, *, error: type = PlanError, text: bool = False) -> float:
    """``value`` as a float number of seconds, greater than 0 and at most
    :data:`MAX_SECONDS` (so finite), else one ``error`` naming ``what``, the
    value and the valid range: the
    one check of every deadline and timeout (``deadline_s=``,
    ``VERISHARD_DEADLINE_S``, the MPI backends' ``timeout=``). ``text``:
    ``value`` may be a string holding the number (an environment
    variable); otherwise bool, strings and other non-numbers are refused.

    >>> check_seconds(2, "deadline_s"), check_seconds(" 1.5 ", "VERISHARD_DEADLINE_S", text=True)
    (2.0, 1.5)
    >>> check_seconds(float("inf"), "deadline_s")
    Traceback (most recent call last):
    ...
    verishard.errors.PlanError: deadline_s inf is not a valid number of seconds: give a number greater than 0 and at most 1e+08 (verishard.limits.MAX_SECONDS)
    >>> check_seconds("abc", "VERISHARD_DEADLINE_S", text=True)
    Traceback (most recent call last):
    ...
    verishard.errors.PlanError: VERISHARD_DEADLINE_S 'abc' is not a valid number of seconds: give a number greater than 0 and at most 1e+08 (verishard.limits.MAX_SECONDS)
    """
    seconds: float | None = None
    if isinstance(value, str) and text:
        try:
            seconds = float(value.strip()) if len(value) <= MAX_DIGITS + 10 else None
        except ValueError:
            seconds = None
    elif not isinstance(value, (bool, str, bytes)):
        try:
            seconds = float(operator.index(value)) if isinstance(value, int) else float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            seconds = None
    if seconds is None or not math.isfinite(seconds) or not 0 < seconds <= MAX_SECONDS:
        raise error(f"{what} {_short_repr(value)} is not a valid number of seconds: give a number greater than 0 "
                    f"and at most {MAX_SECONDS:.0e} (verishard.limits.MAX_SECONDS)")
    return seconds


def check_text(text: object, what: str) -> str:
    """``text`` when it is a string of at most :data:`MAX_TEXT` characters,
    else a :class:`~verishard.errors.ParseError` (not a string) or a
    :class:`~verishard.errors.LimitError` naming the limit.

    >>> check_text("x=2", "mesh")
    'x=2'
    >>> check_text("x" * 20_000, "mesh")
    Traceback (most recent call last):
    ...
    verishard.errors.LimitError: mesh 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' has 20000 characters; at most 10000 (verishard.limits.MAX_TEXT)
    """
    if not isinstance(text, str):
        raise ParseError(f"{what} must be a string, not {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise LimitError(f"{what} {show(text)} has {len(text)} characters; at most {MAX_TEXT} "
                         f"(verishard.limits.MAX_TEXT)")
    return text


def check_count(n: int, what: str, limit: int, name: str) -> int:
    """``n`` when at most ``limit``, else a :class:`~verishard.errors.LimitError`
    naming the limit (``name``, a constant of this module).

    >>> check_count(65, "the mesh {a0:1, ...} has 65 axes", MAX_MESH_PARTS, "MAX_MESH_PARTS")
    Traceback (most recent call last):
    ...
    verishard.errors.LimitError: the mesh {a0:1, ...} has 65 axes; at most 64 (verishard.limits.MAX_MESH_PARTS)
    """
    if n > limit:
        raise LimitError(f"{what}; at most {limit} (verishard.limits.{name})")
    return n


def parse_int(token: str, what: str, error: type = ParseError) -> int:
    """Parse a decimal integer token (ASCII digits, optional '-') of at most
    :data:`MAX_DIGITS` digits; anything else (``'²'``, ``'١٢'``, 4,400
    digits) is one error naming ``what``.

    >>> parse_int(" 12", "size")
    12
    >>> parse_int("²", "size")
    Traceback (most recent call last):
    ...
    verishard.errors.ParseError: size '²' is not an integer
    >>> parse_int("9" * 4400, "size")
    Traceback (most recent call last):
    ...
    verishard.errors.LimitError: size '9999999999999999999999999999999999999999...' is too large: 4400 digits; at most 30 (verishard.limits.MAX_DIGITS)
    """
    if not isinstance(token, str):
        raise error(f"{what} {token!r} is not an integer")
    token = token.strip()
    if not _INT.match(token):
        raise error(f"{what} {show(token)} is not an integer")
    if len(token) > MAX_DIGITS:
        raise LimitError(f"{what} {show(token)} is too large: {len(token.lstrip('-'))} digits; at most "
                         f"{MAX_DIGITS} (verishard.limits.MAX_DIGITS)")
    return int(token)


__all__ = ["MAX_DEVICES", "MAX_ELEMENTS", "MAX_INDEX", "CORE_INT_LIMIT", "MAX_DIGITS", "MAX_TEXT",
           "MAX_MESH_PARTS", "MAX_DIMS", "MAX_ROUND_CUTS", "MAX_CERTIFY_STEPS", "MAX_LAYER_PARAMETERS",
           "DEMO_RANKS_PER_CPU", "MAX_SECONDS", "check_int", "check_seconds", "show_int", "check_text", "check_count",
           "parse_int"]
