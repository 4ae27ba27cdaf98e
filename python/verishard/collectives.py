"""The collectives of the model, with text, JSON and integer encodings: the
four of plain types, and the three that reduce or create pending axes of
partial types (``AllReduce``, ``ReduceScatter``, ``ToPartial``).

``axes`` are axis or part names as written (``"y"`` or ``"y.0"``); they are
resolved to mesh parts only when encoding.

>>> m = Mesh.parse("x=2,y=3")
>>> steps = [DynSlice(0, "y"), AllPermute(ArrayType.parse("[1{y,x}6]", m)), AllGather(0, "x")]
>>> [str(s) for s in steps]
['DynSlice(0, y)', 'AllPermute([1{y,x}6])', 'AllGather(0, x)']
>>> [s.encode(m) for s in steps]
[[1, 0, 1, 1], [3, 1, 6, 2, 1, 0], [0, 0, 1, 0]]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from .errors import ParseError, PlanError, ShardingError, VerishardError, show
from .limits import MAX_INDEX, check_int, check_text
from .mesh import Mesh
from .sharding import ArrayType, raw


def _axes(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (tuple, list)):
        raise PlanError(f"axes {value!r} must be a name or a sequence of names")
    for a in value:
        if not isinstance(a, str):
            raise PlanError(f"axis {a!r} is not a name")
    return tuple(value)


def _show_axes(axes: tuple[str, ...]) -> str:
    return axes[0] if len(axes) == 1 else "{" + ",".join(axes) + "}"


def _resolve(mesh: Mesh, axes: tuple[str, ...]) -> tuple[int, ...]:
    if not isinstance(mesh, Mesh):
        raise ShardingError(f"expected a Mesh, not {type(mesh).__name__}")
    return tuple(p for a in axes for p in mesh.resolve(a))


class Collective:
    """Base class of the four collectives.

    >>> m = Mesh.parse("x=2")
    >>> c = Collective.parse("AllGather(0, x)", m)
    >>> isinstance(c, Collective), c
    (True, AllGather(dim=0, axes=('x',)))
    """

    def parts(self, mesh: Mesh) -> tuple[int, ...]:
        """The mesh parts this collective acts over, in order.

        >>> AllGather(0, "y").parts(Mesh.parse("x=2,y=2*2"))
        (1, 2)
        """
        return _resolve(mesh, getattr(self, "axes", ()))

    def encode(self, mesh: Mesh) -> list[int]:  # pragma: no cover - overridden
        """The integer encoding the verified core reads (see each subclass).

        >>> DynSlice(0, "x").encode(Mesh.parse("x=2"))
        [1, 0, 1, 0]
        """
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:  # pragma: no cover - overridden
        """JSON object of this collective (see each subclass); ``from_json`` reads it back.

        >>> m = Mesh.parse("x=2")
        >>> Collective.from_json(AllToAll(0, 1, "x").to_json(), m)
        AllToAll(src_dim=0, dst_dim=1, axes=('x',))
        """
        raise NotImplementedError

    @staticmethod
    def decode(mesh: Mesh, ints: Sequence[int], pos: int = 0) -> tuple["Collective", int]:
        """Decode one collective from ``ints[pos:]``; returns it and the next position.

        >>> m = Mesh.parse("x=2,y=2*2")
        >>> Collective.decode(m, [2, 0, 1, 2, 1, 2])
        (AllToAll(src_dim=0, dst_dim=1, axes=('y',)), 6)
        """
        # Only the verified core's answers are decoded (well-formed by
        # construction), so the objects are built without re-validation;
        # steps named by axes are read off their extent in the encoding and
        # built from it (_decoded_step, cached: plans repeat the same steps).
        start = pos
        try:
            tag = ints[pos]
            if tag in (0, 1, 5):
                pos += 3 + ints[pos + 2]
            elif tag == 2:
                pos += 4 + ints[pos + 3]
            elif tag == 3:
                t, pos = ArrayType.decode(mesh, ints, pos + 1)
                return raw(AllPermute, target=t), pos
            elif tag == 7:
                t, pos = ArrayType.decode(mesh, ints, pos + 1)
                return raw(Exchange, target=t, dim=None), pos
            elif tag in (4, 6):
                pos += 2 + ints[pos + 1]
            else:
                raise ParseError(f"unknown collective tag {tag!r} at position {pos}")
        except IndexError:
            pos = len(ints) + 1
        if pos > len(ints):
            raise ParseError(f"truncated collective encoding at position {pos}")
        return _decoded_step(mesh, tuple(ints[start:pos])), pos

    @staticmethod
    def from_json(obj: object, mesh: Mesh) -> "Collective":
        """Build a collective from its JSON object (see ``to_json``); names are checked against ``mesh``.

        >>> Collective.from_json({"op": "all_to_all", "src_dim": 0, "dst_dim": 1, "axes": ["x"]}, Mesh.parse("x=2"))
        AllToAll(src_dim=0, dst_dim=1, axes=('x',))
        """
        if not isinstance(obj, dict):
            raise ParseError(f"a collective must be a JSON object, not {type(obj).__name__}")
        op = obj.get("op")
        fields = {"all_gather": ("dim", "axes"), "dyn_slice": ("dim", "axes"),
                  "all_to_all": ("src_dim", "dst_dim", "axes"), "all_permute": ("target",),
                  "all_reduce": ("axes",), "reduce_scatter": ("dim", "axes"), "to_partial": ("axes",),
                  "exchange": ("target",)}
        if not isinstance(op, str) or op not in fields:
            raise ParseError(f"unknown collective op {show(op) if isinstance(op, str) else repr(op)}; "
                             f"expected one of {', '.join(fields)}")
        want = set(fields[op]) | {"op"} | ({"dim"} if op == "exchange" else set())
        for key in obj:
            if key not in want:
                raise ParseError(f"unexpected key {show(key) if isinstance(key, str) else repr(key)} in {op} object")
        for key in fields[op]:
            if key not in obj:
                raise ParseError(f"missing key {key!r} in {op} object")
        try:
            if op in ("all_permute", "exchange"):
                target = obj["target"]
                if not isinstance(target, str):
                    raise ParseError(f"{op} target {target!r} must be a type string like '[1{{y,x}}6]'")
                if op == "exchange":
                    return Exchange(ArrayType.parse(target, mesh), obj.get("dim"))
                return AllPermute(ArrayType.parse(target, mesh))
            if not isinstance(obj["axes"], list):
                raise ParseError(f"axes {obj['axes']!r} of {op} must be a list of names")
            c: Collective
            if op == "all_to_all":
                c = AllToAll(obj["src_dim"], obj["dst_dim"], tuple(obj["axes"]))
            elif op == "all_gather":
                c = AllGather(obj["dim"], tuple(obj["axes"]))
            elif op == "all_reduce":
                c = AllReduce(tuple(obj["axes"]))
            elif op == "to_partial":
                c = ToPartial(tuple(obj["axes"]))
            elif op == "reduce_scatter":
                c = ReduceScatter(obj["dim"], tuple(obj["axes"]))
            else:
                c = DynSlice(obj["dim"], tuple(obj["axes"]))
            c.parts(mesh)
            return c
        except ParseError:
            raise
        except VerishardError as e:
            raise type(e)(f"in {op} object: {e}") from None

    @staticmethod
    def parse(text: str, mesh: Mesh) -> "Collective":
        """Parse the printed form of a collective; names are checked against ``mesh``.

        >>> m = Mesh.parse("x=2,y=3")
        >>> Collective.parse("AllGather(0, {x,y})", m)
        AllGather(dim=0, axes=('x', 'y'))
        >>> str(Collective.parse("AllPermute([1{y,x}6])", m))
        'AllPermute([1{y,x}6])'
        """
        check_text(text, "collective text")
        name = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[0-9]+)?"
        axes = rf"({name}|\{{\s*(?:{name}(?:\s*,\s*{name})*)?\s*\}})"
        m = re.fullmatch(rf"\s*(AllGather|DynSlice|ReduceScatter)\s*\(\s*([0-9]{{1,9}})\s*,\s*{axes}\s*\)\s*", text)
        if m:
            cls = {"AllGather": AllGather, "DynSlice": DynSlice, "ReduceScatter": ReduceScatter}[m.group(1)]
            c: Collective = cls(int(m.group(2)), _split_axes(m.group(3)))
        elif m := re.fullmatch(rf"\s*(AllReduce|ToPartial)\s*\(\s*{axes}\s*\)\s*", text):
            c = (AllReduce if m.group(1) == "AllReduce" else ToPartial)(_split_axes(m.group(2)))
        elif m := re.fullmatch(rf"\s*AllToAll\s*\(\s*([0-9]{{1,9}})\s*->\s*([0-9]{{1,9}})\s*,\s*{axes}\s*\)\s*", text):
            c = AllToAll(int(m.group(1)), int(m.group(2)), _split_axes(m.group(3)))
        elif m := re.fullmatch(r"\s*AllPermute\s*\((.*)\)\s*", text, re.S):
            return AllPermute(ArrayType.parse(m.group(1), mesh))
        elif m := re.fullmatch(r"\s*Exchange\s*\((.*?)(?:,\s*dim\s*=\s*([0-9]{1,9}))?\s*\)\s*", text, re.S):
            return Exchange(ArrayType.parse(m.group(1), mesh), None if m.group(2) is None else int(m.group(2)))
        else:
            raise ParseError(f"cannot parse collective {show(text)}")
        c.parts(mesh)
        return c


@lru_cache(maxsize=16384)
def _decoded_step(mesh: Mesh, code: tuple[int, ...]) -> Collective:
    """The step named by axes of the core's encoding ``code`` (its extent read
    by :meth:`Collective.decode`), not re-validated (a dimension past
    ``MAX_INDEX`` goes through the constructor's check)."""
    tag = code[0]
    if tag in (0, 1, 5):
        d, names = code[1], mesh.names(code[3:])
        cls = AllGather if tag == 0 else DynSlice if tag == 1 else ReduceScatter
        return raw(cls, dim=d, axes=names) if d <= MAX_INDEX else cls(d, names)
    if tag == 2:
        d, e, names = code[1], code[2], mesh.names(code[4:])
        return raw(AllToAll, src_dim=d, dst_dim=e, axes=names) if max(d, e) <= MAX_INDEX else AllToAll(d, e, names)
    return raw(AllReduce if tag == 4 else ToPartial, axes=mesh.names(code[2:]))


def _split_axes(text: str) -> tuple[str, ...]:
    text = text.strip().strip("{}")
    return tuple(a.strip() for a in text.split(",") if a.strip())


@dataclass(frozen=True)
class _DimStep(Collective):
    """A step named by a dimension and axes (``AllGather``, ``DynSlice``,
    ``ReduceScatter``): tag ``_TAG``, JSON op ``_OP``; encoded
    ``[tag, d, m, parts...]``.

    >>> AllGather(0, "y").encode(Mesh.parse("y=2*2")), DynSlice(1, "y.1").encode(Mesh.parse("y=2*2"))
    ([0, 0, 2, 0, 1], [1, 1, 1, 1])
    >>> AllGather(0, "x").to_json()
    {'op': 'all_gather', 'dim': 0, 'axes': ['x']}
    """

    _TAG: ClassVar[int]
    _OP: ClassVar[str]
    dim: int
    axes: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "dim", check_int(self.dim, "dimension", type(self).__name__))
        object.__setattr__(self, "axes", _axes(self.axes))

    def encode(self, mesh: Mesh) -> list[int]:
        ps = self.parts(mesh)
        return [self._TAG, self.dim, len(ps), *ps]

    def to_json(self) -> dict[str, Any]:
        return {"op": self._OP, "dim": self.dim, "axes": list(self.axes)}

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.dim}, {_show_axes(self.axes)})"


@dataclass(frozen=True)
class AllGather(_DimStep):
    """Remove the suffix ``axes`` of dimension ``dim``'s axes.

    >>> str(AllGather(0, "x")), str(AllGather(0, ("x", "y")))
    ('AllGather(0, x)', 'AllGather(0, {x,y})')
    """

    _TAG: ClassVar[int] = 0
    _OP: ClassVar[str] = "all_gather"


@dataclass(frozen=True)
class DynSlice(_DimStep):
    """Append the replicated ``axes`` to dimension ``dim``.

    >>> str(DynSlice(1, "y"))
    'DynSlice(1, y)'
    """

    _TAG: ClassVar[int] = 1
    _OP: ClassVar[str] = "dyn_slice"


@dataclass(frozen=True)
class AllToAll(Collective):
    """Move the suffix ``axes`` of ``src_dim`` to the minor end of ``dst_dim``.

    >>> str(AllToAll(0, 1, "x"))
    'AllToAll(0->1, x)'
    """

    src_dim: int
    dst_dim: int
    axes: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "src_dim", check_int(self.src_dim, "source dimension", "AllToAll"))
        object.__setattr__(self, "dst_dim", check_int(self.dst_dim, "target dimension", "AllToAll"))
        object.__setattr__(self, "axes", _axes(self.axes))

    def encode(self, mesh: Mesh) -> list[int]:
        """``[2, d, e, m, parts...]``.

        >>> AllToAll(0, 1, "x").encode(Mesh.parse("x=2"))
        [2, 0, 1, 1, 0]
        """
        ps = self.parts(mesh)
        return [2, self.src_dim, self.dst_dim, len(ps), *ps]

    def to_json(self) -> dict[str, Any]:
        """JSON object of this collective.

        >>> AllToAll(0, 1, "x").to_json()
        {'op': 'all_to_all', 'src_dim': 0, 'dst_dim': 1, 'axes': ['x']}
        """
        return {"op": "all_to_all", "src_dim": self.src_dim, "dst_dim": self.dst_dim, "axes": list(self.axes)}

    def __str__(self) -> str:
        return f"AllToAll({self.src_dim}->{self.dst_dim}, {_show_axes(self.axes)})"


@dataclass(frozen=True)
class AllPermute(Collective):
    """Move whole local arrays so that the result has type ``target``.

    >>> t = ArrayType.parse("[1{y,x}6]", "x=2,y=3")
    >>> str(AllPermute(t)), AllPermute(t).to_json()
    ('AllPermute([1{y,x}6])', {'op': 'all_permute', 'target': '[1{y,x}6]'})
    """

    target: ArrayType

    def __post_init__(self) -> None:
        if not isinstance(self.target, ArrayType):
            raise PlanError(f"AllPermute target {self.target!r} is not an ArrayType")

    def parts(self, mesh: Mesh) -> tuple[int, ...]:
        """No axes: a permute names none.

        >>> AllPermute(ArrayType.parse("[2{x}4]", "x=2")).parts(Mesh.parse("x=2"))
        ()
        """
        return ()

    def encode(self, mesh: Mesh) -> list[int]:
        """``[3, type...]``.

        >>> t = ArrayType.parse("[3{x}6]", "x=2")
        >>> AllPermute(t).encode(t.mesh)
        [3, 1, 6, 1, 0]
        """
        if self.target.mesh != mesh:
            raise ShardingError(f"AllPermute target {self.target} is over mesh {self.target.mesh}, not {mesh}")
        return [3, *self.target.encode()]

    def to_json(self) -> dict[str, Any]:
        """JSON object of this collective; the target is written in type notation.

        >>> AllPermute(ArrayType.parse("[1{y,x}6]", "x=2,y=3")).to_json()
        {'op': 'all_permute', 'target': '[1{y,x}6]'}
        """
        return {"op": "all_permute", "target": str(self.target)}

    def __str__(self) -> str:
        return f"AllPermute({self.target})"


@dataclass(frozen=True)
class _GroupStep(Collective):
    """A step named by its axes alone (``AllReduce``, ``ToPartial``): tag
    ``_TAG``, JSON op ``_OP``; encoded ``[tag, m, parts...]``."""

    _TAG: ClassVar[int]
    _OP: ClassVar[str]
    axes: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes", _axes(self.axes))

    def encode(self, mesh: Mesh) -> list[int]:
        ps = self.parts(mesh)
        return [self._TAG, len(ps), *ps]

    def to_json(self) -> dict[str, Any]:
        return {"op": self._OP, "axes": list(self.axes)}

    def __str__(self) -> str:
        return f"{type(self).__name__}({_show_axes(self.axes)})"


@dataclass(frozen=True)
class AllReduce(_GroupStep):
    """Reduce over the pending ``axes``: every device of a group gets the
    reduction of the group's local arrays, and the axes become replicated.

    >>> c = AllReduce("x")
    >>> str(c), c.encode(Mesh.parse("x=2")), c.to_json()
    ('AllReduce(x)', [4, 1, 0], {'op': 'all_reduce', 'axes': ['x']})
    """

    _TAG: ClassVar[int] = 4
    _OP: ClassVar[str] = "all_reduce"


@dataclass(frozen=True)
class ReduceScatter(_DimStep):
    """Reduce over the pending ``axes``, each device keeping its piece along
    ``dim``: the axes move to the minor end of dimension ``dim``.

    >>> c = ReduceScatter(0, "x")
    >>> str(c), c.encode(Mesh.parse("x=2")), c.to_json()
    ('ReduceScatter(0, x)', [5, 0, 1, 0], {'op': 'reduce_scatter', 'dim': 0, 'axes': ['x']})
    """

    _TAG: ClassVar[int] = 5
    _OP: ClassVar[str] = "reduce_scatter"


@dataclass(frozen=True)
class ToPartial(_GroupStep):
    """Make the replicated ``axes`` pending: the device numbered 0 in each
    group keeps its array, the others hold the reduction's unit. No
    communication.

    >>> c = ToPartial("y")
    >>> str(c), c.encode(Mesh.parse("y=2")), c.to_json()
    ('ToPartial(y)', [6, 1, 0], {'op': 'to_partial', 'axes': ['y']})
    """

    _TAG: ClassVar[int] = 6
    _OP: ClassVar[str] = "to_partial"


@dataclass(frozen=True)
class Exchange(Collective):
    """Every device receives from the others exactly the elements of its
    block of ``target`` that it does not hold: an ``Alltoallv`` with the send
    lists of the verified schedule (``Exchange.exchange``, the cross-mesh
    schedule on one mesh; ``Exchangeproof.exchange_correct``). It is a
    plan's only step. ``dim`` is the free dimension (sharded by neither
    type) along which the planner may run it in pieces
    (``Exchangeproof.exchange_chunk``); None when it runs whole.

    >>> t = ArrayType.parse("[2{x}4, 3]", "x=2")
    >>> c = Exchange(t, 1)
    >>> str(c), c.encode(t.mesh), c.to_json()
    ('Exchange([2{x}4, 3], dim=1)', [7, 2, 4, 1, 0, 3, 0], {'op': 'exchange', 'target': '[2{x}4, 3]', 'dim': 1})
    """

    target: ArrayType
    dim: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.target, ArrayType):
            raise PlanError(f"Exchange target {self.target!r} is not an ArrayType")
        if self.dim is not None:
            check_int(self.dim, "exchange dimension")
            if self.dim >= self.target.rank:
                raise PlanError(f"Exchange dimension {self.dim} is not a dimension of {self.target}")

    def parts(self, mesh: Mesh) -> tuple[int, ...]:
        """No axes: an exchange names none.

        >>> Exchange(ArrayType.parse("[4]", "x=2")).parts(Mesh.parse("x=2"))
        ()
        """
        return ()

    def encode(self, mesh: Mesh) -> list[int]:
        """``[7, type...]`` (the dimension is the planner's, not the checker's).

        >>> Exchange(ArrayType.parse("[2{x}4]", "x=2")).encode(Mesh.parse("x=2"))
        [7, 1, 4, 1, 0]
        """
        if self.target.mesh != mesh:
            raise ShardingError(f"Exchange target {self.target} is over mesh {self.target.mesh}, not {mesh}")
        return [7, *self.target.encode()]

    def to_json(self) -> dict[str, Any]:
        """JSON object; the target in type notation, the dimension when there is one.

        >>> Exchange(ArrayType.parse("[4]", "x=2")).to_json()
        {'op': 'exchange', 'target': '[4]'}
        """
        obj: dict[str, Any] = {"op": "exchange", "target": str(self.target)}
        if self.dim is not None:
            obj["dim"] = self.dim
        return obj

    def __str__(self) -> str:
        return f"Exchange({self.target})" if self.dim is None else f"Exchange({self.target}, dim={self.dim})"


decode = Collective.decode
from_json = Collective.from_json
parse = Collective.parse

__all__ = ["Collective", "AllGather", "DynSlice", "AllToAll", "AllPermute", "AllReduce", "ReduceScatter",
           "ToPartial", "Exchange", "decode", "from_json", "parse"]
