"""JAX ``PartitionSpec`` and PyTorch DTensor placements, as text and as data.

Both notations are read by a small tokenizer and a recursive-descent parser
of their grammar (never ``eval``), and converted to and from
:class:`~verishard.sharding.ArrayType`.

A PartitionSpec is held as a tuple with one entry per array dimension: None
(replicated) or a tuple of mesh axis names, major to minor.

>>> from verishard import Mesh
>>> m = Mesh.parse("x=2,y=3")
>>> spec = parse_partition_spec("P('x', None)")
>>> spec
(('x',), None)
>>> t = from_partition_spec(m, (6, 4), spec)
>>> t, format_partition_spec(to_partition_spec(t))
([3{x}6, 4], "P('x', None)")

DTensor placements are held as tuples ``("shard", d)``, ``("replicate",)`` and
``("partial", op)`` (a pending reduction, ``op`` one of sum, max, min), one
per mesh axis:

>>> pl = parse_placements("Shard(0), Replicate()")
>>> pl
(('shard', 0), ('replicate',))
>>> t = from_placements(m, (6, 4), pl)
>>> t, to_placements(t)
([3{x}6, 4], ((('shard', 0), ('replicate',)), None))
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Mapping, Sequence

from .errors import ParseError, ShardingError, show
from .limits import check_text, parse_int
from .mesh import Mesh
from .sharding import REDUCE_OPS, ArrayType

__all__ = [
    "parse_partition_spec", "format_partition_spec", "from_partition_spec", "to_partition_spec",
    "parse_placements", "format_placements", "from_placements", "to_placements",
]

PartitionSpecEntries = tuple  # tuple[None | tuple[str, ...], ...]
Placement = tuple  # ("shard", d) | ("replicate",)

UNCONSTRAINED_MESSAGE = "unconstrained dimensions are not a sharding"
PARTIAL_MESSAGE = "Partial() placements (pending reductions) are not a sharding"


# ---------------------------------------------------------------------------
# Tokenizer shared by both grammars


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>'[^'\\\n\r]*'|"[^"\\\n\r]*")
      | (?P<int>-?[0-9]+)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)*)
      | (?P<punct>[()\[\],=])
    )""",
    re.X,
)


class _Tokens:
    """A list of ``(kind, text)`` tokens with a cursor; errors quote the whole input."""

    def __init__(self, text: object, what: str):
        self.text, self.what = check_text(text, what), what
        self.toks: list[tuple[str, str]] = []
        pos, end = 0, len(text.rstrip())
        while pos < end:
            m = _TOKEN.match(text, pos)
            if not m:
                bad = text[pos:].lstrip()[:1]
                if bad in "'\"":
                    raise ParseError(f"unterminated or escaped string starting at {show(text[pos:].lstrip())} "
                                     f"in {what} {show(text)}")
                raise ParseError(f"unexpected character {bad!r} in {what} {show(text)}")
            kind = m.lastgroup
            tok = m.group(kind)
            if kind == "name":
                tok = re.sub(r"\s+", "", tok)
            self.toks.append((kind, tok))
            pos = m.end()
        self.pos = 0

    def peek(self, k: int = 0) -> tuple[str, str] | None:
        i = self.pos + k
        return self.toks[i] if i < len(self.toks) else None

    def next(self, expected: str) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise ParseError(f"expected {expected}, found end of text in {self.what} {show(self.text)}")
        self.pos += 1
        return tok

    def fail(self, expected: str, tok: tuple[str, str]) -> ParseError:
        return ParseError(f"expected {expected}, found {show(tok[1])} in {self.what} {show(self.text)}")

    def expect(self, punct: str, after: str) -> None:
        tok = self.next(f"{punct!r} {after}")
        if tok != ("punct", punct):
            raise self.fail(f"{punct!r} {after}", tok)

    def at(self, punct: str) -> bool:
        return self.peek() == ("punct", punct)

    def done(self) -> None:
        tok = self.peek()
        if tok is not None:
            raise ParseError(f"unexpected {show(tok[1])} after the end of {self.what} {show(self.text)}")


def _last_name(dotted: str) -> str:
    return dotted.rsplit(".", 1)[-1]


def _is_unconstrained(tok: tuple[str, str]) -> bool:
    return tok[0] == "name" and _last_name(tok[1]) == "UNCONSTRAINED"


# ---------------------------------------------------------------------------
# JAX PartitionSpec


_SPEC_NAMES = {"P", "PartitionSpec"}


def parse_partition_spec(text: str) -> PartitionSpecEntries:
    """Parse a JAX PartitionSpec written as Python: ``P('x', None)``,
    ``PartitionSpec('x', ('y', 'z'))``, ``P()`` or a bare tuple ``('x', None)``.

    Returns one entry per dimension: None, or a tuple of axis names (major to
    minor). A single name ``'x'`` becomes ``('x',)``; an empty tuple ``()``
    means replicated and becomes None. Any dotted prefix is accepted
    (``jax.sharding.PartitionSpec(...)``).

    >>> parse_partition_spec("P('x', None)")
    (('x',), None)
    >>> parse_partition_spec('jax.sharding.PartitionSpec(None, ("y", "z"),)')
    (None, ('y', 'z'))
    >>> parse_partition_spec("P()"), parse_partition_spec("('x',)")
    ((), (('x',),))
    >>> parse_partition_spec("P('x', P.UNCONSTRAINED)")
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: unconstrained dimensions are not a sharding: 'P.UNCONSTRAINED' in PartitionSpec "P('x', P.UNCONSTRAINED)"
    >>> parse_partition_spec("P('x', y)")
    Traceback (most recent call last):
    ...
    verishard.errors.ParseError: expected None, a quoted axis name or a tuple of names, found 'y' in PartitionSpec "P('x', y)"
    """
    toks = _Tokens(text, "PartitionSpec")
    first = toks.peek()
    if first is None:
        raise ParseError(f"empty PartitionSpec {show(text)}; write P() for a replicated array")
    if first[0] == "name":
        if _is_unconstrained(first):
            raise ShardingError(f"{UNCONSTRAINED_MESSAGE}: {show(first[1])} in PartitionSpec {show(text)}")
        if _last_name(first[1]) not in _SPEC_NAMES:
            raise ParseError(f"expected P(...) or PartitionSpec(...), found {show(first[1])} "
                             f"in PartitionSpec {show(text)}")
        toks.next("a name")
    toks.expect("(", "to open the PartitionSpec")
    entries: list[tuple[str, ...] | None] = []
    while not toks.at(")"):
        entries.append(_spec_entry(toks))
        if toks.at(","):
            toks.next("','")
        elif not toks.at(")"):
            tok = toks.next("',' or ')'")
            raise toks.fail("',' or ')' after an entry", tok)
    toks.expect(")", "to close the PartitionSpec")
    toks.done()
    return tuple(entries)


def _string(tok: tuple[str, str], toks: _Tokens) -> str:
    name = tok[1][1:-1]
    if not name:
        raise ParseError(f"empty axis name {tok[1]} in {toks.what} {show(toks.text)}")
    return name


def _spec_entry(toks: _Tokens) -> tuple[str, ...] | None:
    want = "None, a quoted axis name or a tuple of names"
    tok = toks.next(want)
    if tok == ("name", "None"):
        return None
    if tok[0] == "str":
        return (_string(tok, toks),)
    if _is_unconstrained(tok):
        raise ShardingError(f"{UNCONSTRAINED_MESSAGE}: {show(tok[1])} in {toks.what} {show(toks.text)}")
    if tok != ("punct", "("):
        raise toks.fail(want, tok)
    names: list[str] = []
    while not toks.at(")"):
        t = toks.next("a quoted axis name")
        if t[0] != "str":
            if _is_unconstrained(t):
                raise ShardingError(f"{UNCONSTRAINED_MESSAGE}: {show(t[1])} in {toks.what} {show(toks.text)}")
            raise toks.fail("a quoted axis name inside a tuple entry", t)
        names.append(_string(t, toks))
        if toks.at(","):
            toks.next("','")
        elif not toks.at(")"):
            t = toks.next("',' or ')'")
            raise toks.fail("',' or ')' inside a tuple entry", t)
    toks.expect(")", "to close a tuple entry")
    return tuple(names) if names else None


def format_partition_spec(entries: Iterable[object]) -> str:
    """Print entries as ``P(...)``; one-name tuples print as the bare name.

    >>> format_partition_spec([("x",), None])
    "P('x', None)"
    >>> format_partition_spec([("x", "y"), None]), format_partition_spec(())
    ("P(('x', 'y'), None)", 'P()')
    """
    out = []
    for e in _normalise_entries(entries):
        if e is None:
            out.append("None")
        elif len(e) == 1:
            out.append(repr(e[0]))
        else:
            out.append("(" + ", ".join(repr(a) for a in e) + ")")
    return "P(" + ", ".join(out) + ")"


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise ShardingError(f"axis name {name!r} in a PartitionSpec is not a string")
    if not name or re.search(r"['\"\\\x00-\x1f]", name):
        raise ShardingError(f"axis name {show(name)} in a PartitionSpec is empty or has quotes or control characters")
    return name


def _normalise_entries(entries: object) -> tuple[tuple[str, ...] | None, ...]:
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Iterable):
        raise ShardingError(f"PartitionSpec entries must be a sequence, not {type(entries).__name__}")
    out: list[tuple[str, ...] | None] = []
    for e in entries:
        if e is None:
            out.append(None)
        elif isinstance(e, str):
            out.append((_check_name(e),))
        elif isinstance(e, (tuple, list)):
            names = tuple(_check_name(a) for a in e)
            out.append(names or None)
        elif "UNCONSTRAINED" in repr(e):
            raise ShardingError(f"{UNCONSTRAINED_MESSAGE}: {e!r}")
        else:
            raise ShardingError(f"PartitionSpec entry {e!r} is not None, an axis name or a tuple of names")
    return tuple(out)


def _shape(global_shape: object) -> tuple[int, ...]:
    if isinstance(global_shape, (str, bytes)) or not isinstance(global_shape, Iterable):
        raise ShardingError(f"global shape {global_shape!r} must be a sequence of integers")
    out = []
    for g in global_shape:
        if isinstance(g, bool):
            raise ShardingError(f"global size {g!r} is not an integer")
        try:
            out.append(operator.index(g))
        except TypeError:
            raise ShardingError(f"global size {g!r} is not an integer") from None
    if not out:
        raise ShardingError("global shape () has no dimensions; an array type has at least one")
    return tuple(out)


def from_partition_spec(mesh: Mesh | str, global_shape: Sequence[int], entries: Iterable[object]) -> ArrayType:
    """The array type of a PartitionSpec over ``mesh`` for an array of ``global_shape``.

    Entries may be None, a name or a tuple of names (major to minor, as in
    JAX); fewer entries than dimensions are padded with None, as JAX does.
    A size the entry's devices do not divide is an uneven type: blocks of
    ``ceil(g / n)``, the trailing ones short or empty, which is where XLA puts
    the elements of such a sharding (``P(('x', 'y'))`` over 4 devices on
    size 5: 2, 2, 1, 0).

    >>> m = Mesh.parse("x=2,y=3")
    >>> from_partition_spec(m, (12, 4), [("y", "x")])
    [2{y,x}12, 4]
    >>> t = from_partition_spec(m, (5,), ["y"])
    >>> t, t.uneven, [t.valid_shape(r) for r in (0, 1, 2)]
    ([2{y}5], True, [(2,), (2,), (1,)])
    >>> from_partition_spec(m, (6,), [None, "x"])
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: PartitionSpec P(None, 'x') has 2 entries but the array has rank 1 (shape (6,))
    """
    mesh = Mesh.coerce(mesh)
    shape = _shape(global_shape)
    spec = _normalise_entries(entries)
    if len(spec) > len(shape):
        raise ShardingError(f"PartitionSpec {format_partition_spec(spec)} has {len(spec)} entries "
                            f"but the array has rank {len(shape)} (shape {shape})")
    spec = spec + (None,) * (len(shape) - len(spec))
    return ArrayType.from_axes(mesh, shape, [e or () for e in spec])


def to_partition_spec(t: ArrayType) -> PartitionSpecEntries:
    """The PartitionSpec entries of ``t`` (one per dimension; whole axes only).

    >>> to_partition_spec(ArrayType.parse("[1{y,x}6, 4]", "x=2,y=3"))
    (('y', 'x'), None)
    >>> to_partition_spec(ArrayType.parse("[2{y.0}4]", "y=2*2"))
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: sub-axis 'y.0' in [2{y.0}4] is not a whole mesh axis; a PartitionSpec names whole axes
    """
    if not isinstance(t, ArrayType):
        raise ShardingError(f"expected an ArrayType, not {type(t).__name__}")
    if t.partial:  # the text notation has no unreduced axes yet: never drop them silently
        raise ShardingError(f"{t} has pending axes; this PartitionSpec text has no unreduced axes")
    out: list[tuple[str, ...] | None] = []
    for d in range(t.rank):
        names = t.dim_axes(d)
        for n in names:
            if n not in t.mesh.axis_names:
                raise ShardingError(f"sub-axis {show(n)} in {t} is not a whole mesh axis; "
                                    f"a PartitionSpec names whole axes")
        out.append(names or None)
    return tuple(out)


# ---------------------------------------------------------------------------
# DTensor placements


def parse_placements(text: str) -> tuple[Placement, ...]:
    """Parse DTensor placements: ``Shard(0),Replicate()``, ``[Shard(0), Shard(0)]``,
    ``(Replicate(), Shard(dim=1))``; any dotted prefix (``dt.Shard``) is accepted.

    ``Shard(-1)`` is kept as written; :func:`from_placements` resolves it.

    >>> parse_placements("[Shard(0), Shard(dim=0)]")
    (('shard', 0), ('shard', 0))
    >>> parse_placements("(Replicate(), torch.distributed.tensor.Shard(1),)")
    (('replicate',), ('shard', 1))
    >>> parse_placements("Shard(0), Partial(), Partial('max'), Partial(reduce_op='min')")
    (('shard', 0), ('partial', 'sum'), ('partial', 'max'), ('partial', 'min'))
    """
    toks = _Tokens(text, "placements")
    if toks.peek() is None:
        raise ParseError(f"empty placements {show(text)}; write one placement per mesh axis")
    close = None
    if toks.at("[") or toks.at("("):
        close = "]" if toks.next("'['")[1] == "[" else ")"
    out: list[Placement] = []
    end = ("punct", close) if close else None
    while toks.peek() != end:
        out.append(_placement(toks))
        if toks.peek() == end:
            break
        tok = toks.next(f"',' or {close!r}" if close else "',' or the end")
        if tok != ("punct", ","):
            raise toks.fail("',' between placements", tok)
    if close:
        toks.expect(close, "to close the placements")
    toks.done()
    return tuple(out)


def _placement(toks: _Tokens) -> Placement:
    want = "Shard(d), Replicate() or Partial()"
    tok = toks.next(want)
    kind = _last_name(tok[1]) if tok[0] == "name" else None
    if kind not in ("Shard", "Replicate", "Partial"):
        raise toks.fail(want, tok)
    toks.expect("(", f"after {kind}")
    if kind == "Partial":  # Partial(), Partial('max'), Partial(reduce_op="min")
        op = "sum"
        if toks.peek() == ("name", "reduce_op") and toks.peek(1) == ("punct", "="):
            toks.next("reduce_op")
            toks.next("'='")
        if not toks.at(")"):
            t = toks.next("a reduction in quotes")
            if t[0] != "str":
                raise toks.fail("a reduction in quotes in Partial(...)", t)
            op = t[1][1:-1]
        toks.expect(")", "after Partial(")
        return _partial_placement(op, toks.text)
    if kind == "Replicate":
        toks.expect(")", "after Replicate(")
        return ("replicate",)
    if toks.peek() == ("name", "dim") and toks.peek(1) == ("punct", "="):
        toks.next("dim")
        toks.next("'='")
    t = toks.next("a dimension number")
    if t[0] != "int":
        raise toks.fail("a dimension number in Shard(...)", t)
    dim = parse_int(t[1], "dimension of Shard in placements")
    if toks.at(","):
        toks.next("','")
    toks.expect(")", "after the dimension of Shard")
    return ("shard", dim)


def _normalise_placements(placements: object) -> tuple[Placement, ...]:
    if isinstance(placements, (str, bytes)) or not isinstance(placements, Iterable):
        raise ShardingError(f"placements must be a sequence, not {type(placements).__name__}")
    out: list[Placement] = []
    for p in placements:
        if isinstance(p, (tuple, list)) and len(p) == 1 and p[0] == "replicate":
            out.append(("replicate",))
        elif isinstance(p, (tuple, list)) and len(p) == 2 and p[0] == "shard":
            d = p[1]
            if isinstance(d, bool):
                raise ShardingError(f"placement {p!r} has a non-integer dimension")
            try:
                out.append(("shard", operator.index(d)))
            except TypeError:
                raise ShardingError(f"placement {p!r} has a non-integer dimension") from None
        elif isinstance(p, (tuple, list)) and len(p) == 2 and p[0] == "partial":
            out.append(_partial_placement(p[1], repr(p)))
        else:
            raise ShardingError(f"placement {p!r} is not ('shard', d), ('replicate',) or ('partial', op)")
    return tuple(out)


def _partial_placement(op: object, where: str) -> Placement:
    if op not in REDUCE_OPS:
        raise ShardingError(f"Partial reduction {op!r} in {show(where)} is not one of {', '.join(REDUCE_OPS)}")
    return ("partial", op)


def _format_placement(p: Placement) -> str:
    if p[0] == "shard":
        return f"Shard({p[1]})"
    if p[0] == "partial":
        return "Partial()" if p[1] == "sum" else f"Partial({p[1]!r})"
    return "Replicate()"


def format_placements(placements: Iterable[object], shard_order: Mapping[int, Sequence[int]] | None = None) -> str:
    """Print placements as DTensor writes them in code; a non-default
    ``shard_order`` is appended as ``shard_order={d: (i, ...)}`` (for display only).

    >>> format_placements([("shard", 0), ("replicate",), ("partial", "max")])
    "[Shard(0), Replicate(), Partial('max')]"
    >>> format_placements([("shard", 0), ("shard", 0)], {0: (1, 0)})
    '[Shard(0), Shard(0)] shard_order={0: (1, 0)}'
    """
    pl = _normalise_placements(placements)
    text = "[" + ", ".join(_format_placement(p) for p in pl) + "]"
    if shard_order:
        items = ", ".join(f"{int(d)}: ({', '.join(str(int(i)) for i in order)}{',' if len(order) == 1 else ''})"
                          for d, order in sorted(shard_order.items()))
        text += " shard_order={" + items + "}"
    return text


def from_placements(mesh: Mesh | str, global_shape: Sequence[int], placements: Iterable[object],
                    shard_order: Mapping[int, Sequence[int]] | None = None, *, uneven: bool = False) -> ArrayType:
    """The array type of DTensor placements over ``mesh`` (one per mesh axis).

    The mesh axes with ``Shard(d)`` shard dimension ``d``, by default in
    mesh-axis order (lower mesh axis major, as DTensor does); ``shard_order``
    maps ``d`` to the mesh axis indices of its shards, major to minor.

    A dimension that its number of shards does not divide is refused unless
    ``uneven=True``; then it is typed with verishard's uneven blocks of
    ``ceil(g / n)``. That is DTensor's ``torch.chunk`` layout where one mesh
    axis shards the dimension, but where several do, DTensor chunks each
    chunk again, which can differ (5 over two axes of 2: DTensor's lengths
    2, 1, 1, 1, our blocks 2, 2, 1, 0). This text notation cannot tell, so
    the caller must: :func:`verishard.torch.dtensor.from_placements` compares every
    shard with DTensor's own offsets and refuses the layouts that differ.

    >>> m = Mesh.parse("x=2,y=3")
    >>> from_placements(m, (12,), [("shard", 0), ("shard", 0)])
    [2{x,y}12]
    >>> from_placements(m, (12,), [("shard", 0), ("shard", 0)], shard_order={0: (1, 0)})
    [2{y,x}12]
    >>> from_placements(m, (7,), [("shard", 0), ("replicate",)], uneven=True)
    [4{x}7]
    >>> from_placements(m, (6,), [("partial", "max"), ("shard", 0)])
    [2{y}6] partial(max){x}
    >>> from_placements(m, (6, 4), [("shard", 0)])
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: 1 placements [Shard(0)] for a mesh with 2 axes (x, y); give one per mesh axis
    """
    mesh = Mesh.coerce(mesh)
    shape = _shape(global_shape)
    pl = _normalise_placements(placements)
    names = mesh.axis_names
    if len(pl) != len(names):
        raise ShardingError(f"{len(pl)} placements {format_placements(pl)} for a mesh with {len(names)} axes "
                            f"({', '.join(names)}); give one per mesh axis")
    rank = len(shape)
    ops = {p[1] for p in pl if p[0] == "partial"}
    if len(ops) > 1:
        raise ShardingError(f"placements {format_placements(pl)} pend {' and '.join(sorted(ops))} reductions; "
                            f"a type has one pending reduction")
    pending = tuple(q for i, p in enumerate(pl) if p[0] == "partial" for q in mesh.resolve(names[i]))
    by_dim: dict[int, list[int]] = {}
    for i, p in enumerate(pl):
        if p[0] != "shard":
            continue
        d = p[1]
        if not -rank <= d < rank:
            raise ShardingError(f"Shard({d}) on mesh axis {show(names[i])} names no dimension of an array "
                                f"of rank {rank} (shape {shape})")
        by_dim.setdefault(d % rank, []).append(i)
    if shard_order is not None:
        if not isinstance(shard_order, Mapping):
            raise ShardingError(f"shard_order must be a mapping from dimension to mesh axes, not "
                                f"{type(shard_order).__name__}")
        for d, order in shard_order.items():
            if isinstance(d, bool) or not isinstance(d, int) or not -rank <= d < rank:
                raise ShardingError(f"shard_order key {d!r} names no dimension of an array of rank {rank}")
            if isinstance(order, (str, bytes)) or not isinstance(order, Iterable):
                raise ShardingError(f"shard_order[{d}] = {order!r} must be a sequence of mesh axis indices")
            order = tuple(order)
            want = by_dim.get(d % rank, [])
            if any(isinstance(i, bool) or not isinstance(i, int) for i in order) or sorted(order) != want:
                raise ShardingError(f"shard_order[{d}] = {order!r} must order exactly the mesh axes "
                                    f"{tuple(want)} that carry Shard({d % rank})")
            by_dim[d % rank] = list(order)
    axes = [tuple(names[i] for i in by_dim.get(d, ())) for d in range(rank)]
    t = ArrayType.from_axes(mesh, shape, axes)
    if pending:
        t = ArrayType(mesh, t.dims, partial=pending, reduce=ops.pop())
    return t if uneven else t.require_even()


def to_placements(t: ArrayType) -> tuple[tuple[Placement, ...], dict[int, tuple[int, ...]] | None]:
    """The placements of ``t`` (one per mesh axis) and its shard order: None
    when every dimension's axes are in mesh-axis order, else a dict with the
    dimensions that are not.

    >>> to_placements(ArrayType.parse("[2{y,x}12, 4]", "x=2,y=3"))
    ((('shard', 0), ('shard', 0)), {0: (1, 0)})
    >>> to_placements(ArrayType.parse("[3{x}6]", "x=2,y=2*2"))
    ((('shard', 0), ('replicate',)), None)
    >>> to_placements(ArrayType.parse("[3{x}6] partial(min){y}", "x=2,y=3"))
    ((('shard', 0), ('partial', 'min')), None)
    """
    if not isinstance(t, ArrayType):
        raise ShardingError(f"expected an ArrayType, not {type(t).__name__}")
    names = t.mesh.axis_names
    pl: list[Placement] = [("replicate",)] * len(names)
    for n in t.mesh.names(t.partial):
        if n not in names:
            raise ShardingError(f"pending sub-axis {show(n)} in {t} is not a whole mesh axis; "
                                f"DTensor placements name whole mesh dimensions")
        pl[names.index(n)] = ("partial", t.reduce)
    order: dict[int, tuple[int, ...]] = {}
    for d in range(t.rank):
        idx = []
        for n in t.dim_axes(d):
            if n not in names:
                raise ShardingError(f"sub-axis {show(n)} in {t} is not a whole mesh axis; "
                                    f"DTensor placements name whole mesh dimensions")
            i = names.index(n)
            pl[i] = ("shard", d)
            idx.append(i)
        if idx != sorted(idx):
            order[d] = tuple(idx)
    return tuple(pl), (order or None)
