"""Distributed array types: ``[3{x}6, 4]`` over a :class:`~verishard.mesh.Mesh`.

Canonically a type is, per dimension, its global size and the tuple of mesh
part indices sharding it (major to minor), so whole-axis and part notation
of the same type are equal.

>>> m = Mesh.parse("x=2,y=2*2")
>>> t = ArrayType.parse("[2{y}8, 3{x}6]", m)
>>> t == ArrayType.parse("[2{y.0, y.1}8, 3{x}6]", m)
True
>>> t, t.local_shape, t.size, t.encode()
([2{y}8, 3{x}6], (2, 3), 6, [2, 8, 2, 1, 2, 6, 1, 0])

A partial type is a value pending a reduction over some mesh axes (the
output of a matmul whose contraction dimension was sharded): each device
holds an array of the local shape, and the global value is the reduction
(sum by default; max or min) over the devices of each pending group.

>>> p = ArrayType.parse("[8, 3{x}6] partial{y}", m)
>>> p, p.partial, p.local_shape, p.pencode()
([8, 3{x}6] partial{y}, (1, 2), (8, 3), [2, 1, 2, 2, 8, 0, 6, 1, 0])
>>> ArrayType.parse("[8] partial(max){x}", m).reduce
'max'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .errors import LimitError, ParseError, ShardingError, show
from .limits import MAX_DIMS, MAX_ELEMENTS, MAX_INDEX, check_count, check_int, check_text, parse_int
from .mesh import Mesh


@dataclass(frozen=True)
class DimType:
    """One dimension: global size and the mesh parts sharding it, major to minor.

    >>> DimType(6, (0,))
    DimType(global_size=6, parts=(0,))
    """

    global_size: int
    parts: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        # at least 1 is checked by ArrayType, which can name the dimension
        object.__setattr__(self, "global_size", check_int(self.global_size, "global size", low=None,
                                                          high=MAX_ELEMENTS, error=ShardingError))
        parts = self.parts
        if isinstance(parts, (str, bytes)) or not isinstance(parts, Iterable):
            raise ShardingError(f"parts {parts!r} of a dimension must be a sequence of part indices")
        parts = tuple(check_int(p, "part index", high=MAX_INDEX, error=ShardingError) for p in parts)
        object.__setattr__(self, "parts", parts)


def _as_dim(d: object) -> DimType:
    if isinstance(d, DimType):
        return d
    if isinstance(d, (tuple, list)) and len(d) == 2:
        return DimType(d[0], d[1])
    return DimType(d)


# The reductions a pending value can wait for (DTensor's Partial("sum" | "max" | "min")).
REDUCE_OPS = ("sum", "max", "min")


def _render(mesh: Mesh, dims: Sequence[DimType], partial: tuple[int, ...] = (), reduce: str = "sum") -> str:
    text = _render_dims(mesh, dims)
    if partial:
        op = "" if reduce == "sum" else f"({reduce})"
        text += f" partial{op}{{{','.join(mesh.names(partial))}}}"
    return text


def _render_dims(mesh: Mesh, dims: Sequence[DimType]) -> str:
    out = []
    for d in dims:
        if not d.parts:
            out.append(str(d.global_size))
            continue
        n = 1
        for p in d.parts:
            n *= mesh.part_sizes[p]
        local = str(-(-d.global_size // n))  # ceil(g / n): the block size (uneven when n does not divide g)
        out.append(f"{local}{{{','.join(mesh.names(d.parts))}}}{d.global_size}")
    return "[" + ", ".join(out) + "]"


@dataclass(frozen=True, repr=False)
class ArrayType:
    """A well-formed distributed array type over ``mesh``.

    ``dims`` holds a :class:`DimType` (or a ``(global_size, parts)`` pair, or a
    bare global size) per dimension; parts are indices into ``mesh.parts``.
    ``partial`` lists the pending parts (kept sorted: their order does not
    matter), none of which may shard a dimension; ``reduce`` is the pending
    reduction, one of ``REDUCE_OPS`` ("sum" when nothing is pending).

    >>> m = Mesh.parse("x=2,y=3")
    >>> ArrayType(m, [(6, (0, 1)), 4])
    [1{x,y}6, 4]
    >>> ArrayType(m, [(6, (1,)), 4], partial=(0,))
    [2{y}6, 4] partial{x}
    """

    mesh: Mesh
    dims: tuple[DimType, ...]
    partial: tuple[int, ...] = ()
    reduce: str = "sum"

    def __post_init__(self) -> None:
        mesh = self.mesh
        if not isinstance(mesh, Mesh):
            raise ShardingError(f"the mesh of an array type must be a Mesh, not {type(mesh).__name__}")
        raw = self.dims
        if isinstance(raw, (str, bytes)) or not isinstance(raw, Iterable):
            raise ShardingError(f"dims {raw!r} must be a sequence of dimension types")
        if not isinstance(raw, tuple):
            raw = tuple(raw)
        if len(raw) > MAX_DIMS:
            check_count(len(raw), f"an array type of {len(raw)} dimensions", MAX_DIMS, "MAX_DIMS")
        dims = tuple(_as_dim(d) for d in raw)
        object.__setattr__(self, "dims", dims)
        if not dims:
            raise ShardingError("an array type has at least one dimension")
        sizes = mesh.part_sizes
        for i, d in enumerate(dims):
            for p in d.parts:
                if p >= len(sizes):
                    raise ShardingError(
                        f"unknown part {p} in dimension {i}; the mesh has parts "
                        f"{', '.join(name for name, _ in mesh.parts)}")
            if d.global_size < 1:
                raise ShardingError(f"global size {d.global_size} of dimension {i} must be at least 1")
        total = 1
        for d in dims:
            total *= d.global_size
            if total > MAX_ELEMENTS:
                shape = "(" + ", ".join(str(d.global_size) for d in dims) + ")"
                raise LimitError(f"global shape {shape} has more than 2**50 elements")
        seen = set()
        for d in dims:
            for p in d.parts:
                if p in seen:
                    raise ShardingError(f"duplicate axis {show(mesh.part_name(p))} in {_render(mesh, dims)}")
                seen.add(p)
        # uneven dimensions (the number of blocks does not divide the global
        # size) are types too: blocks of ceil(g / n), the trailing ones short
        # or empty (Uneven.v), pending axes or not (Puexchange.v)
        self._check_partial(seen)

    def _uneven_reason(self) -> str:
        for i, d in enumerate(self.dims):
            n = self._group(d)
            if d.global_size % n:
                return (f"global size {d.global_size} of dimension {i} is not divisible by {n} "
                        f"(axes {', '.join(self.mesh.names(d.parts))})")
        return ""

    def require_even(self, where: str = "") -> "ArrayType":
        """``self`` when every dimension is even; else a :class:`ShardingError`
        naming the first uneven dimension (for the paths that run even types only).

        >>> ArrayType.parse("[4{x}7]", "x=2").require_even()
        Traceback (most recent call last):
        ...
        verishard.errors.ShardingError: global size 7 of dimension 0 is not divisible by 2 (axes x)
        """
        if self.uneven:
            raise ShardingError(self._uneven_reason() + (f" {where}" if where else ""))
        return self

    def _check_partial(self, used: set[int]) -> None:
        mesh, raw = self.mesh, self.partial
        if isinstance(raw, (str, bytes)) or not isinstance(raw, Iterable):
            raise ShardingError(f"partial {raw!r} must be a sequence of part indices")
        parts = tuple(check_int(p, "part index", high=MAX_INDEX, error=ShardingError) for p in raw)
        for p in parts:
            if p >= len(mesh.part_sizes):
                raise ShardingError(f"unknown pending part {p}; the mesh has parts "
                                    f"{', '.join(name for name, _ in mesh.parts)}")
        if len(set(parts)) != len(parts):
            dup = next(p for p in parts if parts.count(p) > 1)
            raise ShardingError(f"duplicate pending axis {show(mesh.part_name(dup))}")
        for p in parts:
            if p in used:
                raise ShardingError(f"axis {show(mesh.part_name(p))} both shards "
                                    f"{_render_dims(mesh, self.dims)} and is pending")
        if self.reduce not in REDUCE_OPS:
            raise ShardingError(f"unknown reduction {self.reduce!r}; expected one of {', '.join(REDUCE_OPS)}")
        object.__setattr__(self, "partial", tuple(sorted(parts)))
        if not parts:
            object.__setattr__(self, "reduce", "sum")

    # construction -----------------------------------------------------------

    @classmethod
    def from_parts(cls, mesh: Mesh, global_shape: Sequence[int],
                   parts_per_dim: Sequence[Sequence[int]]) -> "ArrayType":
        """Build from global shape and part indices per dimension.

        >>> ArrayType.from_parts(Mesh.parse("x=2,y=3"), (6, 4), [(1, 0), ()])
        [1{y,x}6, 4]
        """
        global_shape, parts_per_dim = tuple(global_shape), tuple(parts_per_dim)
        if len(global_shape) != len(parts_per_dim):
            raise ShardingError(
                f"global shape has {len(global_shape)} dimensions but {len(parts_per_dim)} part lists were given")
        return cls(mesh, tuple(DimType(g, ps) for g, ps in zip(global_shape, parts_per_dim)))

    @classmethod
    def from_axes(cls, mesh: Mesh, global_shape: Sequence[int],
                  axes_per_dim: Sequence[Sequence[str] | str | None]) -> "ArrayType":
        """Build from global shape and axis (or part) names per dimension; a
        dimension's entry may be a tuple of names, one name, or None.

        >>> m = Mesh.parse("x=2,y=2*2")
        >>> ArrayType.from_axes(m, (8, 6), [("y",), "x"])
        [2{y}8, 3{x}6]
        """
        parts_per_dim = []
        for axes in axes_per_dim:
            if axes is None:
                axes = ()
            elif isinstance(axes, str):
                axes = (axes,)
            parts_per_dim.append(tuple(p for a in axes for p in mesh.resolve(a)))
        return cls.from_parts(mesh, global_shape, parts_per_dim)

    @classmethod
    def parse(cls, text: str, mesh: Mesh | str) -> "ArrayType":
        """Parse ``[3{x}6, 4]``; each dimension is ``g`` or ``l{a,...}g`` where
        the written local size ``l`` must equal ``g / prod(axis sizes)``.

        >>> m = Mesh.parse("x=2,y=3")
        >>> ArrayType.parse("[ 3 {x} 6 , 4]", m)
        [3{x}6, 4]
        >>> ArrayType.parse("[6{}6]", m) == ArrayType.parse("[6]", m)
        True
        """
        if isinstance(mesh, str):
            mesh = Mesh.parse(mesh)
        if not isinstance(mesh, Mesh):
            raise ShardingError(f"the mesh of an array type must be a Mesh, not {type(mesh).__name__}")
        toks = _tokens(check_text(text, "type text"))
        pos = 0

        def peek() -> str | None:
            return toks[pos] if pos < len(toks) else None

        def take(what: str) -> str:
            nonlocal pos
            if pos >= len(toks):
                raise ParseError(f"expected {what}, found end of text in {show(text)}")
            pos += 1
            return toks[pos - 1]

        def expect(tok: str, after: str) -> None:
            got = take(repr(tok))
            if got != tok:
                raise ParseError(f"expected {tok!r} {after}, found {show(got)} in {show(text)}")

        def integer(what: str) -> int:
            tok = take(what)
            if not re.fullmatch(r"-?[0-9]+", tok):
                raise ParseError(f"expected {what}, found {show(tok)} in {show(text)}")
            return parse_int(tok, what)

        def axis_names(what: str) -> list[str]:
            """``a, b, ...}``: one or more names, then the closing brace."""
            names = []
            while True:
                tok = take(what)
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[0-9]+)?", tok):
                    raise ParseError(f"expected {what}, found {show(tok)} in {show(text)}")
                names.append(tok)
                sep = take("',' or '}'")
                if sep == "}":
                    return names
                if sep != ",":
                    raise ParseError(f"expected ',' or '}}' after axis {show(tok)}, found {show(sep)} in {show(text)}")

        expect("[", "at the start")
        if peek() == "]":
            raise ParseError(f"empty type {show(text)}; an array type has at least one dimension")
        dims, written = [], []
        while True:
            i = len(dims)
            first = integer(f"a size for dimension {i}")
            if peek() == "{":
                take("'{'")
                if peek() == "}":  # "{}": no axes
                    take("'}'")
                    names = []
                else:
                    names = axis_names(f"an axis name in dimension {i}")
                g = integer(f"the global size of dimension {i}")
                parts = tuple(p for a in names for p in mesh.resolve(a))
                dims.append(DimType(g, parts))
                written.append(first)
            else:
                dims.append(DimType(first, ()))
                written.append(None)
            sep = take("',' or ']'")
            if sep == "]":
                break
            if sep != ",":
                raise ParseError(f"expected ',' or ']' after dimension {i}, found {show(sep)} in {show(text)}")
        partial, reduce = (), "sum"
        if peek() == "partial":
            take("'partial'")
            if peek() == "(":
                take("'('")
                reduce = take("a reduction")
                if reduce not in REDUCE_OPS:
                    raise ParseError(f"unknown reduction {show(reduce)} in {show(text)}; "
                                     f"expected one of {', '.join(REDUCE_OPS)}")
                expect(")", "after the reduction")
            expect("{", "after 'partial'")
            partial = tuple(p for a in axis_names("a pending axis name") for p in mesh.resolve(a))
        if pos != len(toks):
            raise ParseError(f"unexpected {show(toks[pos])} after the type in {show(text)}")
        t = cls(mesh, tuple(dims), partial, reduce)
        for i, (l, local) in enumerate(zip(written, t.local_shape)):
            if l is not None and l != local:
                g, n = t.dims[i].global_size, t._group(t.dims[i])
                how = f"{g} / {n}" if g % n == 0 else f"ceil({g} / {n})"
                raise ShardingError(
                    f"local size {l} written for dimension {i} does not match {how} = {local}")
        return t

    # properties -------------------------------------------------------------

    @property
    def rank(self) -> int:
        """Number of dimensions.

        >>> ArrayType.parse("[3{x}6, 4]", "x=2").rank
        2
        """
        return len(self.dims)

    ndim = rank

    @property
    def global_shape(self) -> tuple[int, ...]:
        """Global sizes.

        >>> ArrayType.parse("[3{x}6, 4]", "x=2").global_shape
        (6, 4)
        """
        g = self.__dict__.get("_shape")   # immutable: computed once (planning asks every call)
        if g is None:
            g = tuple([d.global_size for d in self.dims])
            object.__setattr__(self, "_shape", g)
        return g

    def _group(self, d: DimType) -> int:
        n = 1
        for p in d.parts:
            n *= self.mesh.part_sizes[p]
        return n

    @property
    def local_shape(self) -> tuple[int, ...]:
        """Local sizes, per device: the block sizes ``ceil(g / n)``, which on an
        uneven dimension is the padded buffer every device allocates.

        >>> ArrayType.parse("[3{x}6, 4]", "x=2").local_shape
        (3, 4)
        >>> ArrayType.parse("[3{x}5, 4]", "x=2").local_shape
        (3, 4)
        """
        return tuple(-(-d.global_size // self._group(d)) for d in self.dims)

    @property
    def uneven(self) -> bool:
        """Whether some dimension's number of blocks does not divide its global size.

        >>> ArrayType.parse("[3{x}6]", "x=2").uneven, ArrayType.parse("[3{x}5]", "x=2").uneven
        (False, True)
        """
        u = self.__dict__.get("_uneven")  # immutable: computed once (planning asks every call)
        if u is None:
            sizes, u = self.mesh.part_sizes, False
            for d in self.dims:
                n = 1
                for p in d.parts:
                    n *= sizes[p]
                if d.global_size % n:
                    u = True
                    break
            object.__setattr__(self, "_uneven", u)
        return u

    def blocks(self, rank: int) -> tuple[int, ...]:
        """The block number device ``rank`` holds in every dimension (mixed
        radix of its coordinates over the dimension's parts, major first).

        >>> ArrayType.parse("[2{y,x}5]", "x=2,y=2").blocks(1)
        (2,)
        """
        coords = self.mesh.part_coords(rank)
        out = []
        for d in self.dims:
            b = 0
            for p in d.parts:
                b = b * self.mesh.part_sizes[p] + coords[p]
            out.append(b)
        return tuple(out)

    def block_starts(self, rank: int) -> tuple[int, ...]:
        """The first global index of device ``rank``'s block in every dimension
        (``block * ceil(g / n)``, which may be past the end for an empty block).

        >>> ArrayType.parse("[2{x}3]", "x=2").block_starts(1)
        (2,)
        """
        return tuple(b * l for b, l in zip(self.blocks(rank), self.local_shape))

    def valid_shape(self, rank: int) -> tuple[int, ...]:
        """The valid part of device ``rank``'s block: the shape of its chunked
        (``torch.chunk``) buffer, ``max(0, min(g, (b+1) c) - b c)`` per
        dimension; the rest of the padded buffer (``local_shape``) is padding.

        >>> t = ArrayType.parse("[2{x}3]", "x=2")
        >>> t.valid_shape(0), t.valid_shape(1)
        ((2,), (1,))
        >>> ArrayType.parse("[2{x}5]", "x=4").valid_shape(3)
        (0,)
        """
        return tuple(max(0, min(d.global_size, s + l) - s)
                     for d, s, l in zip(self.dims, self.block_starts(rank), self.local_shape))

    @property
    def size(self) -> int:
        """Local elements per device.

        >>> ArrayType.parse("[3{x}6, 4]", "x=2").size
        12
        """
        n = 1
        for l in self.local_shape:
            n *= l
        return n

    @property
    def used_parts(self) -> frozenset[int]:
        """Part indices that shard some dimension (the others are replicated).

        >>> sorted(ArrayType.parse("[3{y}6]", "x=2,y=2").used_parts)
        [1]
        """
        return frozenset(p for d in self.dims for p in d.parts)

    def dim_parts(self, d: int) -> tuple[int, ...]:
        """Part indices of dimension ``d``, major to minor.

        >>> ArrayType.parse("[1{y,x}6]", "x=2,y=3").dim_parts(0)
        (1, 0)
        """
        return self.dims[d].parts

    def dim_axes(self, d: int) -> tuple[str, ...]:
        """Axis names of dimension ``d`` as printed.

        >>> ArrayType.parse("[2{y.1,x}8]", "x=2,y=2*2").dim_axes(0)
        ('y.1', 'x')
        """
        return self.mesh.names(self.dims[d].parts)

    @lru_cache(maxsize=4096)  # immutable; planning asks for it repeatedly
    def refined(self) -> "ArrayType":
        """The same type over ``mesh.refined()``.

        >>> r = ArrayType.parse("[1{y,x}24]", "x=2,y=12").refined()
        >>> r, r.mesh, r.dim_parts(0)
        ([1{y,x}24], {x:2, y:2*2*3}, (1, 2, 3, 0))
        """
        table = self.mesh.refinement()
        return ArrayType(self.mesh.refined(),
                         tuple(DimType(d.global_size, tuple(q for p in d.parts for q in table[p])) for d in self.dims),
                         tuple(q for p in self.partial for q in table[p]), self.reduce)

    @property
    def plain(self) -> "ArrayType":
        """The array type of the local arrays, without the pending reduction.

        >>> ArrayType.parse("[4] partial{x}", "x=2").plain
        [4]
        """
        return self if not self.partial else _raw_type(self.mesh, self.dims)

    # encoding and printing ----------------------------------------------------

    def encode(self) -> list[int]:
        """The core's encoding ``[r, g, m, parts..., ...]``.

        >>> ArrayType.parse("[3{x}6, 4]", "x=2").encode()
        [2, 6, 1, 0, 4, 0]
        """
        code = self.__dict__.get("_code")  # immutable: encoded once, a fresh list each call
        if code is None:
            out = [len(self.dims)]
            for d in self.dims:
                out += [d.global_size, len(d.parts), *d.parts]
            code = tuple(out)
            object.__setattr__(self, "_code", code)
        return list(code)

    def pencode(self) -> list[int]:
        """The core's encoding of a partial type: ``[len, pending..., type...]``.

        >>> ArrayType.parse("[4] partial{x}", "x=2").pencode()
        [1, 0, 1, 4, 0]
        """
        return list(self.pcode())

    def pcode(self) -> tuple[int, ...]:
        """``pencode()`` as a tuple, computed once (the planner's input).

        >>> ArrayType.parse("[4] partial{x}", "x=2").pcode()
        (1, 0, 1, 4, 0)
        """
        code = self.__dict__.get("_pcode")
        if code is None:
            code = (len(self.partial), *self.partial, *self.encode())
            object.__setattr__(self, "_pcode", code)
        return code

    @classmethod
    def pdecode(cls, mesh: Mesh, ints: Sequence[int], pos: int = 0, reduce: str = "sum") -> tuple["ArrayType", int]:
        """Decode a partial type (see ``pencode``), with reduction ``reduce``
        (the core's types do not carry it: its theorems hold for every
        commutative monoid).

        >>> ArrayType.pdecode(Mesh.parse("x=2"), [1, 0, 1, 4, 0])
        ([4] partial{x}, 5)
        """
        try:
            k = ints[pos]
        except IndexError:
            raise ParseError(f"truncated type encoding at position {pos}") from None
        if k == 0:  # nothing pending (the common case)
            return cls.decode(mesh, ints, pos + 1)
        partial = tuple(sorted(ints[pos + 1:pos + 1 + k]))
        if pos + 1 + k > len(ints):
            raise ParseError(f"truncated type encoding at position {pos}")
        t, end = cls.decode(mesh, ints, pos + 1 + k)
        return raw(ArrayType, mesh=mesh, dims=t.dims, partial=partial, reduce=reduce), end

    @classmethod
    def decode(cls, mesh: Mesh, ints: Sequence[int], pos: int = 0) -> tuple["ArrayType", int]:
        """Decode a type from ``ints[pos:]``; returns the type and the next position.

        >>> m = Mesh.parse("x=2")
        >>> ArrayType.decode(m, [9, 2, 6, 1, 0, 4, 0], 1)
        ([3{x}6, 4], 7)
        """
        # Only the verified core's answers are decoded, and every type it
        # reports is well formed (Checker.check_ok_iff, Rules.step_wf), so the
        # objects are built without re-running the validation above. (Callers
        # that see the same encodings again cache what this returns: the
        # reports' caches in core.py.)
        if type(ints) is not tuple:
            ints = tuple(ints)
        n, start, dims = len(ints), pos, []
        try:
            r = ints[pos]
            pos += 1
            for _ in range(r):
                end = pos + 2 + ints[pos + 1]
                if end > n:
                    raise IndexError
                dims.append(_raw_dim(ints[pos], ints[pos + 2:end]))
                pos = end
        except IndexError:
            raise ParseError(f"truncated type encoding at position {start}") from None
        t = object.__new__(ArrayType)   # as raw(ArrayType, mesh=mesh, dims=...): partial and reduce the defaults
        t.__dict__.update(mesh=mesh, dims=tuple(dims))
        return t, pos

    def __hash__(self) -> int:
        # immutable, and a key of the planning caches: hash once
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.mesh, self.dims, self.partial, self.reduce))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:
        # the cached hash depends on the process's string-hash seed: never ship
        # it (nor the other values cached under private names, recomputed on demand)
        return {k: v for k, v in self.__dict__.items() if k not in _CACHED}

    def __str__(self) -> str:
        return _render(self.mesh, self.dims, self.partial, self.reduce)

    def __repr__(self) -> str:
        return str(self)


def raw(cls, **fields):
    """An instance of the frozen dataclass ``cls`` with ``fields``, not
    re-validated: for decoding the verified core's answers, which are well
    formed by construction."""
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


@lru_cache(maxsize=16384)
def _raw_dim(global_size: int, parts: tuple[int, ...]) -> DimType:
    return raw(DimType, global_size=global_size, parts=parts)


@lru_cache(maxsize=16384)
def _raw_type(mesh: Mesh, dims: tuple[DimType, ...]) -> ArrayType:
    return raw(ArrayType, mesh=mesh, dims=dims)


# Values an ArrayType caches in its __dict__ (see __hash__, uneven, encode, global_shape, pcode)
_CACHED = frozenset(("_hash", "_uneven", "_code", "_shape", "_pcode"))


_TOKEN = re.compile(r"\s*(?:(-?[0-9]+)|([A-Za-z_][A-Za-z0-9_]*(?:\.[0-9]+)?)|([\[\]{},()]))")


def _tokens(text: str) -> list[str]:
    toks, pos = [], 0
    end = len(text.rstrip())
    while pos < end:
        m = _TOKEN.match(text, pos)
        if not m:
            bad = text[pos:].lstrip()[:1]
            raise ParseError(f"unexpected character {bad!r} in {show(text)}")
        toks.append(m.group(m.lastindex))
        pos = m.end()
    return toks


def as_type(t: ArrayType | str, mesh: Mesh | str | None = None) -> ArrayType:
    """``t`` as an ArrayType over ``mesh`` (parsed when it is a string).

    >>> t = as_type("[2{x}4]", "x=2")
    >>> t, t.mesh, as_type(t) is t
    ([2{x}4], {x:2}, True)
    """
    if isinstance(t, str):
        if mesh is None:
            raise ShardingError(f"type {t!r} given as text needs a mesh")
        return ArrayType.parse(t, Mesh.coerce(mesh))
    if not isinstance(t, ArrayType):
        raise ShardingError(f"expected an ArrayType or its notation, not {type(t).__name__}")
    if mesh is not None:
        m = Mesh.coerce(mesh)
        if t.mesh != m and (t.mesh.axis_names, t.mesh.axis_sizes) != (m.axis_names, m.axis_sizes):
            # a type over a partial refinement of ``mesh`` (same axes, some split) is fine: same ranks
            raise ShardingError(f"type {t} is over mesh {t.mesh}, not {m}")
    return t


__all__ = ["DimType", "ArrayType", "REDUCE_OPS", "raw", "as_type"]
