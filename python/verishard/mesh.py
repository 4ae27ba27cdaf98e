"""Device meshes: ordered named axes, each possibly split into factors (parts).

>>> m = Mesh.parse("x=2, y=2*2")
>>> m
{x:2, y:2*2}
>>> m.parts
(('x', 2), ('y.0', 2), ('y.1', 2))
>>> m.resolve("y"), m.resolve("y.1")
((1, 2), (2,))
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache

from .errors import LimitError, MeshError, ParseError, ShardingError, show
from .limits import MAX_DEVICES, MAX_DIGITS, MAX_MESH_PARTS, check_count, check_int, check_text, parse_int


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\.([0-9]+)\Z")


def _as_int(value: object, what: str, error: type) -> int:
    """``value`` as a Python int (bool and float rejected), else ``error``."""
    if isinstance(value, bool):
        raise error(f"{what} {value!r} is not an integer")
    try:
        return operator.index(value)
    except TypeError:
        raise error(f"{what} {show(value) if isinstance(value, str) else repr(value)} is not an integer") from None


def _prime_factors(n: int) -> tuple[int, ...]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return tuple(out)


@dataclass(frozen=True, repr=False)
class Mesh:
    """An ordered list of named axes; each axis is one or more factors (parts).

    ``axes`` is a sequence (or mapping) of ``(name, size)`` where ``size`` is an
    int (an unsplit axis) or a sequence of ints (the factors of a split axis,
    major first). It is stored as ``((name, (factor, ...)), ...)``.

    >>> Mesh([("x", 2), ("y", (2, 3))])
    {x:2, y:2*3}
    >>> Mesh({"x": 2}) == Mesh.from_dict({"x": 2}) == Mesh.parse("{x: 2}")
    True
    """

    axes: tuple[tuple[str, tuple[int, ...]], ...]

    def __post_init__(self) -> None:
        raw = self.axes
        if isinstance(raw, Mapping):
            raw = list(raw.items())
        if isinstance(raw, (str, bytes)) or not isinstance(raw, Iterable):
            raise MeshError(f"mesh axes must be a list of (name, size) pairs, not {raw!r}")
        axes, seen, nparts = [], set(), 0
        for item in raw:
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise MeshError(f"mesh axis {item!r} is not a (name, size) pair")
            name, size = item
            if not isinstance(name, str):
                raise MeshError(f"axis name {name!r} is not a string")
            if "." in name and _PART.match(name):
                raise MeshError(f"axis name {show(name)} is reserved for parts of split axes")
            if not _IDENT.match(name):
                raise MeshError(f"axis name {show(name)} is not an identifier")
            if name in seen:
                raise MeshError(f"duplicate axis {show(name)} in the mesh")
            seen.add(name)
            factors = size if isinstance(size, (tuple, list)) else (size,)
            if not factors:
                raise MeshError(f"axis {show(name)} has no factors")
            nparts += len(factors)
            if nparts > MAX_MESH_PARTS:
                check_count(nparts, f"the mesh has {nparts} or more axes, each factor of a split axis counted "
                                    f"(up to axis {show(name)})", MAX_MESH_PARTS, "MAX_MESH_PARTS")
            ints = []
            for f in factors:
                ints.append(check_int(f, "size", f"axis {show(name)}", low=1, high=MAX_DEVICES, error=MeshError))
            axes.append((name, tuple(ints)))
        if not axes:
            raise MeshError("empty mesh; a mesh has at least one axis")
        object.__setattr__(self, "axes", tuple(axes))
        n = 1
        for _, fs in axes:
            for f in fs:
                n *= f
                if n > MAX_DEVICES:
                    raise LimitError(f"mesh {self} has more than 2**20 devices")

    # construction -----------------------------------------------------------

    @classmethod
    def parse(cls, text: str) -> "Mesh":
        """Parse ``x=2,y=3``, ``{x:2, y:3}`` or split axes ``x=2,y=2*2``.

        >>> Mesh.parse("x=2,y=3") == Mesh.parse("{x: 2, y: 3}")
        True
        >>> Mesh.parse("{x:2, y:2*2}").parts
        (('x', 2), ('y.0', 2), ('y.1', 2))
        """
        body = check_text(text, "mesh text").strip()
        if body.startswith("{") or body.endswith("}"):
            if not (body.startswith("{") and body.endswith("}") and len(body) >= 2):
                raise ParseError(f"unbalanced braces in mesh {show(text)}")
            body = body[1:-1].strip()
        if not body:
            raise MeshError(f"empty mesh {show(text)}; a mesh has at least one axis")
        axes = []
        for entry in body.split(","):
            entry = entry.strip()
            if not entry:
                raise ParseError(f"empty entry in mesh {show(text)}")
            m = re.fullmatch(r"([^=:]*)[=:](.*)", entry, re.S)
            if not m:
                raise ParseError(f"mesh entry {show(entry)} is not name=size or name:size")
            name, value = m.group(1).strip(), m.group(2)
            if not _IDENT.match(name):
                raise ParseError(f"axis name {show(name)} in mesh entry {show(entry)} is not an identifier")
            factors = tuple(parse_int(f, f"size of axis {show(name)}:") for f in value.split("*"))
            axes.append((name, factors[0] if len(factors) == 1 else factors))
        return cls(tuple(axes))

    @classmethod
    def coerce(cls, mesh: "Mesh | str") -> "Mesh":
        """``mesh`` itself, or parsed from its notation.

        >>> Mesh.coerce("x=2") == Mesh.coerce(Mesh.parse("{x:2}"))
        True
        """
        if isinstance(mesh, str):
            return cls.parse(mesh)
        if not isinstance(mesh, Mesh):
            raise ShardingError(f"expected a Mesh or its notation, not {type(mesh).__name__}")
        return mesh

    @classmethod
    def from_dict(cls, sizes: Mapping[str, object]) -> "Mesh":
        """Build a mesh from ``{name: size}`` (size an int or a tuple of factors).

        >>> Mesh.from_dict({"x": 2, "y": (2, 2)})
        {x:2, y:2*2}
        """
        if not isinstance(sizes, Mapping):
            raise MeshError(f"from_dict needs a mapping of axis sizes, not {type(sizes).__name__}")
        return cls(tuple(sizes.items()))

    # axes and parts ---------------------------------------------------------

    @cached_property
    def axis_names(self) -> tuple[str, ...]:
        """Names of the whole axes, in order.

        >>> Mesh.parse("x=2,y=2*2").axis_names
        ('x', 'y')
        """
        return tuple(name for name, _ in self.axes)

    @cached_property
    def axis_sizes(self) -> tuple[int, ...]:
        """Sizes of the whole axes (product of their factors).

        >>> Mesh.parse("x=2,y=2*3").axis_sizes
        (2, 6)
        """
        out = []
        for _, fs in self.axes:
            n = 1
            for f in fs:
                n *= f
            out.append(n)
        return tuple(out)

    @cached_property
    def num_devices(self) -> int:
        """Number of devices.

        >>> Mesh.parse("x=2,y=3").num_devices
        6
        """
        n = 1
        for s in self.axis_sizes:
            n *= s
        return n

    @cached_property
    def parts(self) -> tuple[tuple[str, int], ...]:
        """``(part_name, size)`` of every part in order (the flat mesh of the core).

        >>> Mesh.parse("x=2,y=3").parts
        (('x', 2), ('y', 3))
        """
        out = []
        for name, fs in self.axes:
            if len(fs) == 1:
                out.append((name, fs[0]))
            else:
                out.extend((f"{name}.{j}", f) for j, f in enumerate(fs))
        return tuple(out)

    @cached_property
    def part_sizes(self) -> tuple[int, ...]:
        """Sizes of the parts.

        >>> Mesh.parse("x=2,y=2*3").part_sizes
        (2, 2, 3)
        """
        return tuple(f for _, fs in self.axes for f in fs)

    def part_name(self, i: int) -> str:
        """Name of part ``i``.

        >>> Mesh.parse("x=2,y=2*2").part_name(2)
        'y.1'
        """
        parts = self.parts
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(parts):
            raise ShardingError(f"unknown part {i!r}; the mesh {self} has {len(parts)} parts")
        return parts[i][0]

    @lru_cache(maxsize=4096)  # meshes are immutable; planning calls these often
    def _axis_ranges(self) -> dict[str, tuple[int, int]]:
        out, start = {}, 0
        for name, fs in self.axes:
            out[name] = (start, start + len(fs))
            start += len(fs)
        return out

    def resolve(self, name: str) -> tuple[int, ...]:
        """Part indices of an axis (all its parts, major first) or of one part ``y.j``.

        >>> m = Mesh.parse("x=2,y=2*2")
        >>> m.resolve("x"), m.resolve("y"), m.resolve("y.0")
        ((0,), (1, 2), (1,))
        """
        ranges = self._axis_ranges()
        if isinstance(name, str):
            if name in ranges:
                return tuple(range(*ranges[name]))
            m = _PART.match(name)
            if m and m.group(1) in ranges:
                s, e = ranges[m.group(1)]
                j = int(m.group(2)) if len(m.group(2)) <= MAX_DIGITS else e
                if e - s > 1 and s + j < e and str(j) == m.group(2):
                    return (s + j,)
        known = []
        for axis, fs in self.axes:
            known.append(axis)
            if len(fs) > 1:
                known.extend(f"{axis}.{j}" for j in range(len(fs)))
        shown = show(name) if isinstance(name, str) else repr(name)
        raise ShardingError(f"unknown axis {shown}; the mesh has {', '.join(known)}")

    def names(self, parts: Iterable[int]) -> tuple[str, ...]:
        """Names for a list of part indices: a whole axis where all its parts
        appear adjacent and in order, else part names.

        >>> m = Mesh.parse("x=2,y=2*2")
        >>> m.names((1, 2, 0)), m.names((2, 1))
        (('y', 'x'), ('y.1', 'y.0'))
        """
        return self._names(tuple(parts))

    @lru_cache(maxsize=16384)  # meshes are immutable; decoding plans asks for the same lists
    def _names(self, parts: tuple[int, ...]) -> tuple[str, ...]:
        owner = {}
        for start, end in self._axis_ranges().values():
            for p in range(start, end):
                owner[p] = (start, end)
        out, i = [], 0
        while i < len(parts):
            p = parts[i]
            start, end = owner.get(p, (None, None))
            if start is not None and end - start > 1 and parts[i:i + end - start] == tuple(range(start, end)):
                out.append(self.axes[self._axis_of_part(p)][0])
                i += end - start
            else:
                out.append(self.part_name(p))
                i += 1
        return tuple(out)

    def _axis_of_part(self, p: int) -> int:
        for a, (s, e) in enumerate(self._axis_ranges().values()):
            if s <= p < e:
                return a
        raise ShardingError(f"unknown part {p!r}; the mesh {self} has {len(self.part_sizes)} parts")

    @lru_cache(maxsize=4096)  # meshes are immutable; planning calls these often
    def refinement(self) -> tuple[tuple[int, ...], ...]:
        """For each part, the indices of the parts that replace it in :meth:`refined`.

        >>> Mesh.parse("x=2,y=6*2").refinement()
        ((0,), (1, 2), (3,))
        """
        out, k = [], 0
        for f in self.part_sizes:
            n = max(1, len(_prime_factors(f)))
            out.append(tuple(range(k, k + n)))
            k += n
        return tuple(out)

    @lru_cache(maxsize=4096)  # meshes are immutable; planning calls these often
    def refined(self) -> "Mesh":
        """Every part split into its prime factors (ascending); parts of prime
        size or size 1 stay as they are.

        >>> Mesh.parse("x=2,y=12").refined()
        {x:2, y:2*2*3}
        >>> Mesh.parse("x=1,y=6*2").refined()
        {x:1, y:2*3*2}
        """
        axes = []
        for name, fs in self.axes:
            new = []
            for f in fs:
                new.extend(_prime_factors(f) or (f,))
            axes.append((name, tuple(new)))
        return Mesh(tuple(axes))

    def prime_parts(self) -> tuple["Mesh | None", tuple[tuple[int, ...], ...]]:
        """The mesh of :meth:`refined` without its parts of size 1 (they shard
        nothing; an axis left with none is left out), and for each part of
        this mesh the indices of its sub-axes there: the split traffic
        certificates are checked over (``Certify.certify_split``). The mesh
        is None when no part has size 2 or more.

        >>> Mesh.parse("x=1,y=6*2").prime_parts()
        ({y:2*3*2}, ((), (0, 1), (2,)))
        """
        axes, groups, k = [], [], 0
        for name, fs in self.axes:
            new = []
            for f in fs:
                primes = _prime_factors(f) if f > 1 else ()
                groups.append(tuple(range(k, k + len(primes))))
                k += len(primes)
                new.extend(primes)
            if new:
                axes.append((name, tuple(new)))
        return (Mesh(tuple(axes)) if axes else None), tuple(groups)

    # devices ----------------------------------------------------------------

    def _check_rank(self, rank: int) -> int:
        r = _as_int(rank, "rank", MeshError)
        if not 0 <= r < self.num_devices:
            raise MeshError(f"rank {r} is out of range for {self.num_devices} devices")
        return r

    @staticmethod
    def _digits(r: int, sizes: tuple[int, ...]) -> tuple[int, ...]:
        out = []
        for n in reversed(sizes):
            r, c = divmod(r, n)
            out.append(c)
        return tuple(reversed(out))

    def coords(self, rank: int) -> tuple[int, ...]:
        """Coordinates (one per whole axis) of a device; row-major, first axis most significant.

        >>> Mesh.parse("x=2,y=3").coords(4)
        (1, 1)
        """
        return self._digits(self._check_rank(rank), self.axis_sizes)

    def part_coords(self, rank: int) -> tuple[int, ...]:
        """Coordinates of a device on every part.

        >>> Mesh.parse("x=2,y=2*2").part_coords(3)
        (0, 1, 1)
        """
        return self._digits(self._check_rank(rank), self.part_sizes)

    def rank(self, coords: Iterable[int]) -> int:
        """Linear rank of a device given its whole-axis coordinates.

        >>> Mesh.parse("x=2,y=3").rank((1, 1))
        4
        """
        coords = tuple(coords)
        sizes = self.axis_sizes
        if len(coords) != len(sizes):
            raise MeshError(f"coordinates {coords!r} do not have one entry per axis of {self}")
        r = 0
        for c, n, name in zip(coords, sizes, self.axis_names):
            c = _as_int(c, f"coordinate on axis {show(name)}", MeshError)
            if not 0 <= c < n:
                raise MeshError(f"coordinate {c} on axis {show(name)} is out of range 0..{n - 1}")
            r = r * n + c
        return r

    # encoding and printing ----------------------------------------------------

    def encode(self) -> list[int]:
        """The core's encoding ``[k, part sizes...]``.

        >>> Mesh.parse("x=2,y=2*2").encode()
        [3, 2, 2, 2]
        """
        return list(self.encoded)

    @cached_property
    def encoded(self) -> tuple[int, ...]:
        """``encode()`` as a tuple, computed once (the planner's input).

        >>> Mesh.parse("x=2,y=2*2").encoded
        (3, 2, 2, 2)
        """
        sizes = self.part_sizes
        return (len(sizes), *sizes)

    def __hash__(self) -> int:
        # immutable, and a key of the planning caches: hash once
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(self.axes)
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:
        # the cached hash depends on the process's string-hash seed: never ship it (nor
        # the planner's caches of decoded reports, core._report_mesh)
        return {k: v for k, v in self.__dict__.items() if k not in ("_hash", "_reports")}

    def __str__(self) -> str:
        return "{" + ", ".join(f"{n}:{'*'.join(map(str, fs))}" for n, fs in self.axes) + "}"

    __repr__ = __str__


__all__ = ["MAX_DIGITS", "parse_int", "Mesh"]
