"""A small reader and interpreter for the compiled (post-SPMD) HLO text that
XLA emits for a resharding program.

It understands the ops XLA's CPU backend uses when it reshards an array
(collectives, fusions of slicing/reshaping/copying, index arithmetic on
``partition-id``) and executes them on every device with NumPy. Values are
integers: the array being resharded carries ``1 + global flat index`` in every
element, so that after the run every device's buffers say exactly which
elements of the global array they hold (0 means "no data": padding, zeros).

Nothing here decides whether a plan is valid; :mod:`verishard.crosscheck.xla`
turns the trace into our collective IR and the verified checker judges it.

>>> m = parse_module('''HloModule m, num_partitions=2
... ENTRY %main (p: f32[2]) -> f32[4] {
...   %p = f32[2]{0} parameter(0)
...   ROOT %ag = f32[4]{0} all-gather(%p), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
... }''')
>>> run = Interpreter(m).run([[np.array([1, 2]), np.array([3, 4])]])
>>> [v.tolist() for v in run.outputs]
[[1, 2, 3, 4], [1, 2, 3, 4]]
>>> [(e.opcode, e.received.tolist()) for e in run.collectives]
[('all-gather', [2, 2])]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np

__all__ = ["HloError", "Shape", "Instruction", "Computation", "Module", "parse_module",
           "parse_replica_groups", "Interpreter", "CollectiveEvent", "Run", "COLLECTIVES"]


class HloError(Exception):
    """The HLO text uses something this reader does not understand.

    >>> parse_module("HloModule m")
    Traceback (most recent call last):
    ...
    verishard.crosscheck.hlo.HloError: no ENTRY computation in the HLO text
    """


COLLECTIVES = {"all-gather", "all-to-all", "collective-permute", "all-reduce", "reduce-scatter",
               "collective-broadcast", "ragged-all-to-all"}
_ASYNC = {"all-gather-start": "all-gather", "all-reduce-start": "all-reduce",
          "collective-permute-start": "collective-permute"}
_DONE = {"all-gather-done", "all-reduce-done", "collective-permute-done", "async-done", "copy-done"}


# --------------------------------------------------------------------------
# shapes


@dataclass(frozen=True)
class Shape:
    """An array shape (``dtype``, ``dims``, ``layout`` minor-to-major) or a tuple of shapes.

    >>> s = Shape("f32", (2, 3), (1, 0))
    >>> s.is_tuple, s.elements, s.nbytes
    (False, 6, 24)
    """

    dtype: str = ""
    dims: tuple[int, ...] = ()
    layout: tuple[int, ...] | None = None
    tuple_shapes: tuple["Shape", ...] | None = None

    @property
    def is_tuple(self) -> bool:
        """Whether this is a tuple of shapes.

        >>> Shape("f32", (2,)).is_tuple, Shape(tuple_shapes=(Shape("f32", (2,)),)).is_tuple
        (False, True)
        """
        return self.tuple_shapes is not None

    @property
    def elements(self) -> int:
        """Element count (summed over tuple elements).

        >>> Shape(tuple_shapes=(Shape("f32", (2, 3)), Shape("s8", (4,)))).elements
        10
        """
        if self.is_tuple:
            return sum(s.elements for s in self.tuple_shapes)
        return prod(self.dims)

    @property
    def nbytes(self) -> int:
        """Bytes (summed over tuple elements), from the HLO element type.

        >>> Shape(tuple_shapes=(Shape("f32", (2, 3)), Shape("s8", (4,)))).nbytes
        28
        """
        if self.is_tuple:
            return sum(s.nbytes for s in self.tuple_shapes)
        return prod(self.dims) * _ITEMSIZE.get(self.dtype, 4)


_ITEMSIZE = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
             "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "token": 0}

_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([0-9,]*)\](\{[^}]*\})?")


def _parse_shape(text: str, pos: int = 0) -> tuple[Shape, int]:
    """Parse a shape starting at ``text[pos]``; return it and the position after it."""
    while text[pos] == " ":
        pos += 1
    if text[pos] == "(":
        pos += 1
        parts = []
        while True:
            while text[pos] in " ,":
                pos += 1
            if text[pos] == ")":
                return Shape(tuple_shapes=tuple(parts)), pos + 1
            s, pos = _parse_shape(text, pos)
            parts.append(s)
    m = _ARRAY_SHAPE.match(text, pos)
    if not m:
        raise HloError(f"cannot parse a shape at {text[pos:pos + 40]!r}")
    dims = tuple(int(d) for d in m.group(2).split(",") if d)
    layout = None
    if m.group(3):
        body = m.group(3)[1:-1].split(":")[0]
        layout = tuple(int(d) for d in body.split(",") if d.strip())
    return Shape(m.group(1), dims, layout), m.end()


# --------------------------------------------------------------------------
# module structure


@dataclass
class Instruction:
    """One HLO instruction: result shape, opcode, operand names and attributes.

    >>> m = parse_module('''HloModule m, num_partitions=2
    ... ENTRY %main (p: s32[2]) -> s32[4] {
    ...   %p = s32[2]{0} parameter(0)
    ...   ROOT %ag = s32[4]{0} all-gather(%p), replica_groups={{0,1}}, dimensions={0}
    ... }''')
    >>> ins = m.entry.root
    >>> ins.name, ins.opcode, ins.operands, ins.attrs, ins.is_root
    ('ag', 'all-gather', ['p'], {'replica_groups': '{{0,1}}', 'dimensions': '{0}'}, True)
    """

    name: str
    shape: Shape
    opcode: str
    operands: list[str]
    attrs: dict[str, str]
    raw_operands: str = ""
    is_root: bool = False


@dataclass
class Computation:
    """A named list of instructions (the ``ENTRY`` one, or a called one).

    >>> m = parse_module('''HloModule m, num_partitions=2
    ... ENTRY %main (p: s32[2]) -> s32[4] {
    ...   %p = s32[2]{0} parameter(0)
    ...   ROOT %ag = s32[4]{0} all-gather(%p), replica_groups={{0,1}}, dimensions={0}
    ... }''')
    >>> c = m.entry
    >>> c.name, c.is_entry, [i.name for i in c.instructions]
    ('main', True, ['p', 'ag'])
    """

    name: str
    instructions: list[Instruction]
    is_entry: bool = False

    @property
    def root(self) -> Instruction:
        """The ``ROOT`` instruction (else the last one).

        >>> m = parse_module('''HloModule m, num_partitions=2
        ... ENTRY %main (p: s32[2]) -> s32[4] {
        ...   %p = s32[2]{0} parameter(0)
        ...   ROOT %ag = s32[4]{0} all-gather(%p), replica_groups={{0,1}}, dimensions={0}
        ... }''')
        >>> m.entry.root.name
        'ag'
        """
        for ins in self.instructions:
            if ins.is_root:
                return ins
        return self.instructions[-1]

    def parameters(self) -> list[Instruction]:
        """The ``parameter`` instructions, by parameter number.

        >>> m = parse_module('''HloModule m, num_partitions=2
        ... ENTRY %main (p: s32[2]) -> s32[4] {
        ...   %p = s32[2]{0} parameter(0)
        ...   ROOT %ag = s32[4]{0} all-gather(%p), replica_groups={{0,1}}, dimensions={0}
        ... }''')
        >>> [(i.name, i.raw_operands, i.shape.dims) for i in m.entry.parameters()]
        [('p', '0', (2,))]
        """
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(params, key=lambda i: int(i.raw_operands))


@dataclass
class Module:
    """A parsed HLO module: its computations by name, the entry one, and the partition count.

    >>> m = parse_module('''HloModule m, num_partitions=2
    ... ENTRY %main (p: s32[2]) -> s32[4] {
    ...   %p = s32[2]{0} parameter(0)
    ...   ROOT %ag = s32[4]{0} all-gather(%p), replica_groups={{0,1}}, dimensions={0}
    ... }''')
    >>> m.name, list(m.computations), m.entry.name, m.num_partitions
    ('m', ['main'], 'main', 2)
    """

    name: str
    computations: dict[str, Computation]
    entry: Computation
    num_partitions: int = 1

    def collectives(self) -> list[Instruction]:
        """Collective instructions of the entry computation, in program order.

        >>> m = parse_module('''HloModule m, num_partitions=2
        ... ENTRY %main (p: s32[2]) -> s32[4] {
        ...   %p = s32[2]{0} parameter(0)
        ...   ROOT %ag = s32[4]{0} all-gather(%p), replica_groups={{0,1}}, dimensions={0}
        ... }''')
        >>> [(i.name, i.opcode) for i in m.collectives()]
        [('ag', 'all-gather')]
        """
        out = []
        for ins in self.entry.instructions:
            op = _ASYNC.get(ins.opcode, ins.opcode)
            if op in COLLECTIVES:
                out.append(ins)
        return out


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside brackets and quotes."""
    out, depth, cur, quote = [], 0, [], None
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def _matching(text: str, pos: int) -> int:
    """Index of the bracket closing the one at ``text[pos]``."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack, quote = [], None
    for i in range(pos, len(text)):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in pairs:
            stack.append(pairs[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack:
                return i
    raise HloError(f"unbalanced brackets in {text[pos:pos + 60]!r}")


_INSTR = re.compile(r"\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_COMP = re.compile(r"\s*(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\))?\s*->.*\{\s*$")


def parse_module(text: str) -> Module:
    """Parse the text of an HLO module (``compiled.as_text()``).

    >>> m = parse_module('''HloModule m, num_partitions=2
    ... ENTRY %main (p: s32[2]) -> s32[4] {
    ...   %p = s32[2]{0} parameter(0)
    ...   ROOT %ag = s32[4]{0} all-gather(%p), replica_groups={{0,1}}, dimensions={0}
    ... }''')
    >>> [(i.name, i.opcode, i.shape.dims) for i in m.entry.instructions]
    [('p', 'parameter', (2,)), ('ag', 'all-gather', (4,))]
    """
    text = re.sub(r"/\*.*?\*/", "", text)
    comps: dict[str, Computation] = {}
    entry = None
    name, nparts = "module", 1
    cur: Computation | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("HloModule"):
            name = line.split()[1].rstrip(",")
            m = re.search(r"num_partitions=(\d+)", line)
            if m:
                nparts = int(m.group(1))
            continue
        if cur is None:
            m = _COMP.match(line)
            if m:
                cur = Computation(m.group(2), [], bool(m.group(1)))
            continue
        if line.strip() == "}":
            comps[cur.name] = cur
            if cur.is_entry:
                entry = cur
            cur = None
            continue
        cur.instructions.append(_parse_instruction(line))
    if entry is None:
        raise HloError("no ENTRY computation in the HLO text")
    return Module(name, comps, entry, nparts)


def _parse_instruction(line: str) -> Instruction:
    m = _INSTR.match(line)
    if not m:
        raise HloError(f"cannot parse HLO instruction {line.strip()[:80]!r}")
    shape, pos = _parse_shape(line, m.end())
    om = re.compile(r"\s*([a-z][a-z0-9\-]*)\(").match(line, pos)
    if not om:
        raise HloError(f"cannot find the opcode in {line.strip()[:80]!r}")
    opcode = om.group(1)
    start = om.end() - 1
    end = _matching(line, start)
    raw = line[start + 1:end]
    operands = []
    if opcode not in ("constant", "parameter"):
        for tok in _split_top(raw):
            tok = tok.strip()
            if tok:
                operands.append(tok.split()[-1].lstrip("%"))
    attrs = {}
    for item in _split_top(line[end + 1:]):
        item = item.strip()
        if "=" in item:
            k, v = item.split("=", 1)
            attrs[k.strip()] = v.strip()
    return Instruction(m.group(2), shape, opcode, operands, attrs, raw.strip(), bool(m.group(1)))


# --------------------------------------------------------------------------
# replica groups


def _iota_list(dims: list[int], perm: list[int] | None) -> np.ndarray:
    a = np.arange(prod(dims)).reshape(dims)
    if perm is not None:
        a = a.transpose(perm)
    return a.reshape(-1)


def _parse_iota(text: str) -> np.ndarray:
    """``[4,2]T(1,0)`` or ``[8]`` as a flat list of device ids."""
    m = re.fullmatch(r"\s*\[([0-9,]+)\](?:T\(([0-9,]+)\))?\s*", text)
    if not m:
        raise HloError(f"cannot parse device list {text!r}")
    dims = [int(x) for x in m.group(1).split(",")]
    perm = [int(x) for x in m.group(2).split(",")] if m.group(2) else None
    return _iota_list(dims, perm)


def parse_replica_groups(text: str, num_devices: int) -> list[list[int]]:
    """The replica groups of a collective, as lists of device (partition) ids.

    Understands explicit lists ``{{0,1},{2,3}}``, iota lists ``[2,4]<=[4,2]T(1,0)``
    and mesh-axes lists ``mesh['a'=2,'b'=4], device_ids=(...) {'b'}`` (with
    sub-axes ``'b':(1)2``), following XLA's ``replica_group.cc``.

    >>> parse_replica_groups("{{0,2},{1,3}}", 4)
    [[0, 2], [1, 3]]
    >>> parse_replica_groups("[2,2]<=[2,2]T(1,0)", 4)
    [[0, 2], [1, 3]]
    >>> parse_replica_groups("mesh['a'=2,'b'=2] {'a'}", 4)
    [[0, 2], [1, 3]]
    >>> parse_replica_groups("mesh['a'=4] {'a':(2)2}", 4)
    [[0, 1], [2, 3]]
    >>> parse_replica_groups("mesh['a'=4] {'a':(1)2}", 4)
    [[0, 2], [1, 3]]
    """
    text = text.strip()
    if text in ("{}", ""):
        return [list(range(num_devices))]
    if text.startswith("{"):
        groups = re.findall(r"\{([0-9,\s]*)\}", text[1:-1])
        return [[int(x) for x in g.split(",") if x.strip()] for g in groups]
    m = re.fullmatch(r"\[([0-9,]+)\]<=(.*)", text)
    if m:
        shape = [int(x) for x in m.group(1).split(",")]
        return _parse_iota(m.group(2)).reshape(shape).tolist()
    m = re.fullmatch(r"mesh\[(.*?)\](?:\s*,\s*device_ids=\((.*?)\))?\s*\{(.*)\}", text, re.S)
    if m:
        names, sizes = [], []
        for item in _split_top(m.group(1)):
            k, v = item.split("=")
            names.append(k.strip().strip("'\""))
            sizes.append(int(v))
        devices = _parse_iota(m.group(2)) if m.group(2) else np.arange(prod(sizes))
        refs = []  # (axis index, pre_size, size) ; pre_size None for a whole axis
        for item in _split_top(m.group(3)):
            item = item.strip()
            if not item:
                continue
            sm = re.fullmatch(r"['\"]?([^'\":]+)['\"]?(?::\((\d+)\)(\d+))?", item)
            if not sm or sm.group(1) not in names:
                raise HloError(f"cannot parse mesh axis {item!r} in replica groups {text!r}")
            a = names.index(sm.group(1))
            refs.append((a, int(sm.group(2)), int(sm.group(3))) if sm.group(2) else (a, None, sizes[a]))
        return _mesh_groups(sizes, devices, refs)
    raise HloError(f"cannot parse replica groups {text!r}")


def _mesh_groups(sizes: list[int], devices: np.ndarray, refs) -> list[list[int]]:
    """Groups of a mesh-axes replica group list: every axis is cut into pieces
    (major first) at the sub-axis boundaries; devices that differ only in the
    grouped pieces form a group, enumerated in the order the pieces are listed."""
    piece_sizes, ref_pos = [], [None] * len(refs)
    for a, n in enumerate(sizes):
        mine = [(k, pre, size) for k, (b, pre, size) in enumerate(refs) if b == a]
        cuts = {1, n}
        for _, pre, size in mine:
            if pre is not None:
                cuts |= {pre, pre * size}
        cuts = sorted(cuts)
        if len(cuts) == 1:
            cuts = [1, 1]
        for lo, hi in zip(cuts, cuts[1:]):
            for k, pre, size in mine:
                if (1 if pre is None else pre) == lo and lo * size == hi:
                    ref_pos[k] = len(piece_sizes)
            piece_sizes.append(hi // lo)
    if any(p is None for p in ref_pos):
        raise HloError(f"replica group axes {refs} do not match the mesh {sizes}")
    rest = [k for k in range(len(piece_sizes)) if k not in ref_pos]
    arr = devices.reshape(piece_sizes).transpose(rest + ref_pos)
    gsize = prod(piece_sizes[k] for k in ref_pos)
    return arr.reshape(-1, gsize).tolist()


def _source_target_pairs(text: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", text)]


# --------------------------------------------------------------------------
# constants


def _parse_constant(ins: Instruction) -> np.ndarray:
    raw = ins.raw_operands
    dims = ins.shape.dims
    nums = re.findall(r"-?(?:inf|nan|[0-9.]+(?:e[-+]?[0-9]+)?)|true|false", raw)
    vals = []
    for n in nums:
        if n in ("true", "false"):
            vals.append(n == "true")
        elif n in ("inf", "-inf", "nan", "-nan"):
            raise HloError(f"constant {ins.name} holds {n}")
        else:
            f = float(n)
            if f != int(f):
                raise HloError(f"constant {ins.name} holds the non-integer {n}")
            vals.append(int(f))
    if ins.shape.dtype == "pred":
        arr = np.array(vals, dtype=bool)
    else:
        arr = np.array(vals, dtype=np.int64)
    if arr.size == 1 and prod(dims) != 1:
        return np.full(dims, arr[0], dtype=arr.dtype)
    if arr.size != prod(dims):
        raise HloError(f"constant {ins.name}: {arr.size} values for shape {dims}")
    return arr.reshape(dims)


# --------------------------------------------------------------------------
# interpreter


@dataclass
class CollectiveEvent:
    """One executed collective: its inputs and outputs on every device and
    the elements each device received from other devices.

    >>> m = parse_module('''HloModule m, num_partitions=2
    ... ENTRY %main (p: s32[2]) -> s32[4] {
    ...   %p = s32[2]{0} parameter(0)
    ...   ROOT %ag = s32[4]{0} all-gather(%p), replica_groups={{0,1}}, dimensions={0}
    ... }''')
    >>> e = Interpreter(m).run([[np.array([1, 2]), np.array([3, 4])]]).collectives[0]
    >>> e.opcode, e.name, e.groups, e.group_size, e.received.tolist(), [o[0].tolist() for o in e.outputs]
    ('all-gather', 'ag', [[0, 1]], 2, [2, 2], [[1, 2, 3, 4], [1, 2, 3, 4]])
    """

    index: int
    opcode: str
    name: str
    inputs: list[list[np.ndarray]]      # per device: operand arrays
    outputs: list[list[np.ndarray]]     # per device: result arrays (tuple elements)
    received: np.ndarray                # per device element counts
    groups: list[list[int]] | None
    group_size: int
    text: str


@dataclass
class Run:
    """What :meth:`Interpreter.run` returns: the root's array on every device,
    the collectives executed, and the largest data-carrying value (elements).

    >>> m = parse_module('''HloModule m, num_partitions=2
    ... ENTRY %main (p: s32[2]) -> s32[4] {
    ...   %p = s32[2]{0} parameter(0)
    ...   ROOT %ag = s32[4]{0} all-gather(%p), replica_groups={{0,1}}, dimensions={0}
    ... }''')
    >>> r = Interpreter(m).run([[np.array([1, 2]), np.array([3, 4])]])
    >>> [v.tolist() for v in r.outputs], len(r.collectives), r.peak_elements, r.data_values
    ([[1, 2, 3, 4], [1, 2, 3, 4]], 1, 4, [('p', 2), ('ag', 4)])
    """

    outputs: list[np.ndarray]
    collectives: list[CollectiveEvent]
    peak_elements: int                  # largest data-carrying entry value (elements, tuples summed)
    data_values: list[tuple[str, int]] = field(default_factory=list)


def _tuple_index(attrs: dict[str, str]) -> int:
    return int(attrs["index"])


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", text)]


def _to_physical(x: np.ndarray, layout: tuple[int, ...] | None) -> np.ndarray:
    if layout is None or x.ndim <= 1:
        return x.reshape(-1)
    return np.transpose(x, tuple(reversed(layout))).reshape(-1)


def _from_physical(flat: np.ndarray, dims: tuple[int, ...], layout: tuple[int, ...] | None) -> np.ndarray:
    if layout is None or len(dims) <= 1:
        return flat.reshape(dims)
    major_to_minor = tuple(reversed(layout))
    arr = flat.reshape([dims[i] for i in major_to_minor])
    return np.transpose(arr, np.argsort(major_to_minor))


def _cast(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "pred":
        return np.asarray(x).astype(bool)
    return np.asarray(x).astype(np.int64)


def _int_div(a, b):
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if np.any(b == 0):
        raise HloError("division by zero")
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) ^ (b < 0), -q, q)


_BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
    "minimum": np.minimum, "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,  # bitwise on ints
    "divide": _int_div, "remainder": lambda a, b: a - _int_div(a, b) * b,
    "shift-left": np.left_shift, "shift-right-logical": np.right_shift,
    "shift-right-arithmetic": np.right_shift,
}
_COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
            "GT": np.greater, "GE": np.greater_equal}


class Interpreter:
    """Execute a parsed module on every partition at once.

    ``run(params)`` takes, per entry parameter, a list with one array per
    device, and returns the root's arrays and every collective executed.

    A collective-permute that swaps the two devices' arrays:

    >>> m = parse_module('''HloModule m, num_partitions=2
    ... ENTRY %main (p: s32[2]) -> s32[2] {
    ...   %p = s32[2]{0} parameter(0)
    ...   ROOT %cp = s32[2]{0} collective-permute(%p), source_target_pairs={{0,1},{1,0}}
    ... }''')
    >>> r = Interpreter(m).run([[np.array([1, 2]), np.array([3, 4])]])
    >>> [v.tolist() for v in r.outputs], r.collectives[0].received.tolist()
    ([[3, 4], [1, 2]], [2, 2])
    """

    def __init__(self, module: Module, num_devices: int | None = None):
        self.module = module
        self.n = num_devices or module.num_partitions

    # -- local (per device) evaluation ---------------------------------------

    def _eval_local(self, comp: Computation, args: list[Any], device: int) -> Any:
        env: dict[str, Any] = {}
        shapes = {i.name: i.shape for i in comp.instructions}
        params = {int(i.raw_operands): i.name for i in comp.instructions if i.opcode == "parameter"}
        for k, name in params.items():
            env[name] = args[k]
        for ins in comp.instructions:
            if ins.opcode == "parameter":
                continue
            env[ins.name] = self._local_op(ins, [env[o] for o in ins.operands],
                                           [shapes.get(o) for o in ins.operands], device)
        return env[comp.root.name]

    def _local_op(self, ins: Instruction, ops: list[Any], op_shapes: list[Shape | None], device: int) -> Any:
        op, a, sh = ins.opcode, ins.attrs, ins.shape
        if op == "constant":
            return _parse_constant(ins)
        if op == "partition-id":
            return np.array(device, dtype=np.int64)
        if op == "replica-id":
            return np.array(0, dtype=np.int64)
        if op == "iota":
            d = int(a["iota_dimension"])
            shape = [1] * len(sh.dims)
            shape[d] = sh.dims[d]
            return np.broadcast_to(np.arange(sh.dims[d]).reshape(shape), sh.dims).astype(np.int64)
        if op in ("copy", "optimization-barrier"):
            return ops[0]
        if op == "convert":
            return _cast(ops[0], sh.dtype)
        if op == "bitcast":
            src_shape = op_shapes[0]
            flat = _to_physical(np.asarray(ops[0]), src_shape.layout if src_shape else None)
            return _from_physical(flat, sh.dims, sh.layout)
        if op == "reshape":
            return np.asarray(ops[0]).reshape(sh.dims)
        if op == "transpose":
            return np.transpose(ops[0], _ints(a["dimensions"]))
        if op == "broadcast":
            dims = _ints(a.get("dimensions", "{}"))
            x = np.asarray(ops[0])
            shape = [1] * len(sh.dims)
            for i, d in enumerate(dims):
                shape[d] = x.shape[i]
            return np.broadcast_to(x.reshape(shape), sh.dims).copy()
        if op == "slice":
            sl = []
            for lo, hi, *st in re.findall(r"\[(-?\d+):(-?\d+)(?::(-?\d+))?\]", a["slice"]):
                sl.append(slice(int(lo), int(hi), int(st[0]) if st and st[0] else 1))
            return np.asarray(ops[0])[tuple(sl)]
        if op == "dynamic-slice":
            x = np.asarray(ops[0])
            sizes = _ints(a["dynamic_slice_sizes"])
            sl = []
            for d, (s, n) in enumerate(zip(ops[1:], sizes)):
                s = int(np.clip(int(s), 0, x.shape[d] - n))
                sl.append(slice(s, s + n))
            return x[tuple(sl)]
        if op == "dynamic-update-slice":
            x = np.array(ops[0], copy=True)
            u = np.asarray(ops[1])
            sl = []
            for d, s in enumerate(ops[2:]):
                s = int(np.clip(int(s), 0, x.shape[d] - u.shape[d]))
                sl.append(slice(s, s + u.shape[d]))
            x[tuple(sl)] = u
            return x
        if op == "concatenate":
            return np.concatenate([np.asarray(o) for o in ops], axis=_ints(a["dimensions"])[0])
        if op == "pad":
            x, v = np.asarray(ops[0]), int(ops[1])
            cfg = [tuple(int(t) for t in p.split("_")) for p in a["padding"].split("x")]
            for d, c in enumerate(cfg):
                lo, hi = c[0], c[1]
                interior = c[2] if len(c) > 2 else 0
                if interior:
                    n = x.shape[d]
                    shape = list(x.shape)
                    shape[d] = n + (n - 1) * interior
                    y = np.full(shape, v, dtype=x.dtype)
                    idx = [slice(None)] * x.ndim
                    idx[d] = slice(0, None, interior + 1)
                    y[tuple(idx)] = x
                    x = y
                if lo < 0 or hi < 0:
                    idx = [slice(None)] * x.ndim
                    idx[d] = slice(max(-lo, 0), x.shape[d] - max(-hi, 0))
                    x = x[tuple(idx)]
                    lo, hi = max(lo, 0), max(hi, 0)
                widths = [(0, 0)] * x.ndim
                widths[d] = (lo, hi)
                x = np.pad(x, widths, constant_values=v)
            return x
        if op in _BINARY:
            return _cast(_BINARY[op](np.asarray(ops[0]), np.asarray(ops[1])), sh.dtype)
        if op == "compare":
            return _COMPARE[a["direction"]](np.asarray(ops[0]), np.asarray(ops[1]))
        if op == "select":
            return np.where(np.asarray(ops[0]), ops[1], ops[2])
        if op == "clamp":
            return np.clip(ops[1], ops[0], ops[2])
        if op == "not":
            x = np.asarray(ops[0])
            return np.logical_not(x) if x.dtype == bool else ~x
        if op == "negate":
            return -np.asarray(ops[0])
        if op == "abs":
            return np.abs(ops[0])
        if op == "tuple":
            return list(ops)
        if op == "get-tuple-element":
            return ops[0][_tuple_index(a)]
        if op in ("fusion", "call"):
            callee = a.get("calls", a.get("to_apply", "")).lstrip("%")
            return self._eval_local(self.module.computations[callee], ops, device)
        raise HloError(f"unsupported HLO op {op!r} ({ins.name})")

    # -- entry evaluation, all devices in lock step ----------------------------

    def run(self, params: list[list[np.ndarray]]) -> Run:
        """Execute the entry computation; ``params[i][device]`` is parameter ``i`` on ``device``.

        >>> m = parse_module('''HloModule m, num_partitions=2
        ... ENTRY %main (p: s32[2]) -> s32[4] {
        ...   %p = s32[2]{0} parameter(0)
        ...   ROOT %ag = s32[4]{0} all-gather(%p), replica_groups={{0,1}}, dimensions={0}
        ... }''')
        >>> [v.tolist() for v in Interpreter(m).run([[np.array([1, 2]), np.array([3, 4])]]).outputs]
        [[1, 2, 3, 4], [1, 2, 3, 4]]
        """
        n = self.n
        comp = self.module.entry
        shapes = {i.name: i.shape for i in comp.instructions}
        last_use: dict[str, int] = {}
        for k, ins in enumerate(comp.instructions):
            for o in ins.operands:
                last_use[o] = k
        env: dict[str, list[Any]] = {}
        tainted: set[str] = set()
        events: list[CollectiveEvent] = []
        peak, data_values = 0, []
        for k, ins in enumerate(comp.instructions):
            if ins.opcode == "parameter":
                env[ins.name] = params[int(ins.raw_operands)]
                tainted.add(ins.name)
            else:
                ops = [env[o] for o in ins.operands]
                op = _ASYNC.get(ins.opcode, ins.opcode)
                if op in COLLECTIVES:
                    env[ins.name] = self._collective(ins, op, ops, events)
                elif ins.opcode in _DONE:
                    env[ins.name] = ops[0]
                else:
                    env[ins.name] = [self._local_op(ins, [o[c] for o in ops],
                                                    [shapes.get(o) for o in ins.operands], c)
                                     for c in range(n)]
                if any(o in tainted for o in ins.operands):
                    tainted.add(ins.name)
            if ins.name in tainted and ins.opcode not in ("get-tuple-element", "bitcast", "tuple") \
                    and ins.opcode not in _DONE:
                peak = max(peak, ins.shape.elements)
                data_values.append((ins.name, ins.shape.elements))
            for o in ins.operands:
                if last_use.get(o) == k and o != comp.root.name:
                    env.pop(o, None)
        out = env[comp.root.name]
        return Run([np.asarray(v) for v in out], events, peak, data_values)

    def _groups(self, ins: Instruction) -> list[list[int]]:
        text = ins.attrs.get("replica_groups", "{}")
        if "device_ids" in ins.attrs:  # split off by the attribute reader: `mesh[...], device_ids=(...) {axes}`
            text = f"{text}, device_ids={ins.attrs['device_ids']}"
        groups = parse_replica_groups(text, self.n)
        seen = sorted(d for g in groups for d in g)
        if seen != list(range(self.n)):
            raise HloError(f"replica groups of {ins.name} do not cover the {self.n} devices once: {text}")
        return groups

    def _collective(self, ins: Instruction, op: str, ops: list[list[Any]], events: list[CollectiveEvent]):
        n = self.n
        a = ins.attrs
        inputs = [[np.asarray(o[c]) for o in ops] for c in range(n)]
        received = np.zeros(n, dtype=np.int64)
        groups = None
        if op == "collective-permute":
            pairs = _source_target_pairs(a.get("source_target_pairs", ""))
            outs = [np.zeros_like(inputs[c][0]) for c in range(n)]
            for s, t in pairs:
                outs[t] = inputs[s][0].copy()
                if s != t:
                    received[t] += inputs[s][0].size
            result: list[Any] = outs
            out_arrays = [[o] for o in outs]
            gsize = 2
        else:
            groups = self._groups(ins)
            gsize = len(groups[0])
            result = [None] * n
            out_arrays = [None] * n
            for g in groups:
                if op == "all-gather":
                    d = _ints(a["dimensions"])[0]
                    full = np.concatenate([inputs[c][0] for c in g], axis=d)
                    for c in g:
                        result[c] = full.copy()
                        out_arrays[c] = [full]
                        received[c] += full.size - inputs[c][0].size
                elif op == "all-to-all":
                    if "dimensions" in a:
                        d = _ints(a["dimensions"])[0]
                        pieces = {c: np.split(inputs[c][0], len(g), axis=d) for c in g}
                        for i, c in enumerate(g):
                            got = [pieces[s][i] for s in g]
                            result[c] = np.concatenate(got, axis=d)
                            out_arrays[c] = [result[c]]
                            received[c] += sum(p.size for j, p in enumerate(got) if g[j] != c)
                    else:
                        for i, c in enumerate(g):
                            got = [inputs[s][i] for s in g]
                            result[c] = list(got)
                            out_arrays[c] = list(got)
                            received[c] += sum(p.size for j, p in enumerate(got) if g[j] != c)
                elif op in ("all-reduce", "reduce-scatter"):
                    reducer = self._reducer(a)
                    xs = [inputs[c] for c in g]
                    if len(ops) != 1:
                        raise HloError(f"{op} with {len(ops)} operands is not supported")
                    total = xs[0][0]
                    for x in xs[1:]:
                        total = reducer(total, x[0])
                    for i, c in enumerate(g):
                        if op == "all-reduce":
                            result[c] = np.array(total, copy=True)
                            received[c] += 2 * (len(g) - 1) * total.size // len(g)
                        else:
                            d = _ints(a["dimensions"])[0]
                            result[c] = np.split(total, len(g), axis=d)[i].copy()
                            received[c] += (len(g) - 1) * result[c].size
                        out_arrays[c] = [result[c]]
                elif op == "collective-broadcast":
                    for c in g:
                        result[c] = inputs[g[0]][0].copy()
                        out_arrays[c] = [result[c]]
                        if c != g[0]:
                            received[c] += result[c].size
                else:
                    raise HloError(f"unsupported collective {op!r} ({ins.name})")
        events.append(CollectiveEvent(len(events), op, ins.name, inputs, out_arrays, received,
                                      groups, gsize, _summary(ins)))
        return result

    def _reducer(self, attrs: dict[str, str]):
        callee = attrs.get("to_apply", "").lstrip("%")
        comp = self.module.computations.get(callee)
        root = comp.root.opcode if comp else "add"
        fns = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum, "multiply": np.multiply,
               "or": np.bitwise_or, "and": np.bitwise_and}
        if root not in fns:
            raise HloError(f"unsupported reduction {root!r}")
        return fns[root]


def _summary(ins: Instruction) -> str:
    keep = [f"{k}={v}" for k, v in ins.attrs.items()
            if k in ("replica_groups", "dimensions", "source_target_pairs")]
    return ins.opcode + (" " + ", ".join(keep) if keep else "")
