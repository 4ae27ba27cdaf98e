"""Errors raised by verishard.

Every error is a :class:`VerishardError`, itself a :class:`ValueError`, and
its message is one line naming the problem and the offending token.

>>> from verishard.errors import ShardingError, VerishardError
>>> issubclass(ShardingError, VerishardError) and issubclass(ShardingError, ValueError)
True
"""

from __future__ import annotations


class VerishardError(ValueError):
    """Base class of every error verishard raises on bad input.

    >>> from verishard import Mesh
    >>> try:
    ...     Mesh.parse("x=0")
    ... except VerishardError as e:
    ...     print(type(e).__name__, isinstance(e, ValueError))
    MeshError True
    """


class ParseError(VerishardError):
    """Text (a mesh, a type, a collective, a JSON plan) is malformed.

    >>> from verishard import Collective, Mesh
    >>> Collective.parse("Gather(0, x)", Mesh.parse("x=2"))
    Traceback (most recent call last):
    ...
    verishard.errors.ParseError: cannot parse collective 'Gather(0, x)'
    """


class MeshError(VerishardError):
    """A mesh is ill-formed: bad axis name, duplicate axis, size < 1, ...

    >>> from verishard import Mesh
    >>> Mesh.parse("x=2,x=3")
    Traceback (most recent call last):
    ...
    verishard.errors.MeshError: duplicate axis 'x' in the mesh
    """


class ShardingError(VerishardError):
    """An array type is ill-formed: unknown or duplicate axis, sizes that do not divide, ...

    >>> from verishard import ArrayType
    >>> ArrayType.parse("[2{z}4]", "x=2")
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: unknown axis 'z'; the mesh has x
    """


class PlanError(VerishardError):
    """A plan is rejected.

    ``step`` is the index of the offending step (0 for the source, target or
    mesh themselves, ``i`` for the i-th collective) or None when not tied to a
    step; ``reason`` is a short machine-readable reason (or None).

    >>> e = PlanError("step 2: axis 'x' is not the minor axis of dimension 0", step=2, reason="not_suffix")
    >>> (e.step, e.reason, str(e))
    (2, 'not_suffix', "step 2: axis 'x' is not the minor axis of dimension 0")
    """

    def __init__(self, message: str, step: int | None = None, reason: str | None = None):
        super().__init__(message)
        self.step = step
        self.reason = reason


class LimitError(VerishardError):
    """An input exceeds the supported limits (2**20 devices, 2**50 global elements).

    >>> from verishard import Mesh
    >>> Mesh.parse("x=2048,y=1024")
    Traceback (most recent call last):
    ...
    verishard.errors.LimitError: mesh {x:2048, y:1024} has more than 2**20 devices
    """


class CheckpointError(VerishardError):
    """A checkpoint cannot be loaded: no manifest, a file missing, truncated,
    of another dtype or failing its checksum, or asked for another shape.

    >>> raise CheckpointError("rank-00001.bin: 1024 bytes, the manifest says 2048")
    Traceback (most recent call last):
    ...
    verishard.errors.CheckpointError: rank-00001.bin: 1024 bytes, the manifest says 2048
    """


class DtypeError(VerishardError):
    """An element type verishard does not move or store (strings, objects,
    records, 4-bit types), or one that needs a package not installed.

    >>> raise DtypeError("dtype <U3 is not one verishard moves")
    Traceback (most recent call last):
    ...
    verishard.errors.DtypeError: dtype <U3 is not one verishard moves
    """


def show(token: object, limit: int = 40) -> str:
    """Quote a token for an error message, shortened to about ``limit`` characters.

    >>> show('z')
    "'z'"
    >>> show('9' * 100)
    "'9999999999999999999999999999999999999999...'"
    """
    text = token if isinstance(token, str) else str(token)
    if len(text) > limit:
        text = text[:limit] + "..."
    return repr(text)


_RAW = (TypeError, ValueError, IndexError, KeyError, AttributeError, OverflowError, ZeroDivisionError)


def refusing_raw_errors(error: type = ShardingError):
    """Decorator for a public entry point that reads foreign objects (DTensor
    placements, JAX specs and meshes): a raw Python error raised while it
    reads malformed arguments becomes one ``error`` naming the function and
    the cause (chained, so ``--debug`` tracebacks keep it); a
    :class:`VerishardError` passes unchanged.

    >>> @refusing_raw_errors()
    ... def first(xs):
    ...     return xs[0]
    >>> first([])
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: first: malformed argument (IndexError: list index out of range)
    """
    import functools

    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except VerishardError:
                raise
            except _RAW as e:
                cause = " ".join(str(e).split())[:200]
                raise error(f"{fn.__name__}: malformed argument ({type(e).__name__}: {cause})") from e
        return call
    return wrap


__all__ = ["VerishardError", "ParseError", "MeshError", "ShardingError", "PlanError", "LimitError", "DtypeError",
           "CheckpointError", "refusing_raw_errors"]
