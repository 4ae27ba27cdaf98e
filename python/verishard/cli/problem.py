"""The problem ``verishard plan`` and ``verishard show`` read: the
``--mesh --src --dst [--shape] [--jax|--dtensor]`` options (or a plan
file), as a plan or, for a DTensor layout no type describes, a box schedule."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from ..errors import ParseError, PlanError, ShardingError, VerishardError, show
from ..limits import MAX_DIMS, check_count, check_text, parse_int
from ..mesh import Mesh
from ..sharding import ArrayType
from .document import check_document, load_plan_file
from .options import UsageError

__all__ = ["add_problem_options", "parse_shape", "plan_from_args", "notation_lines", "DTensorLayout", "BoxSchedule"]

BOX_SCHEMA = "verishard.boxes/1"  # a box schedule printed with --format json (not read back by `check`)


def _in(e: VerishardError, opt: str) -> VerishardError:
    """``e`` with ``in <opt>`` inserted before the first ``; `` of its message."""
    msg = str(e)
    head, sep, tail = msg.partition("; ")
    new = f"{head} in {opt}{sep}{tail}" if sep else f"{msg} (in {opt})"
    out = type(e)(new)
    if isinstance(e, PlanError):
        out.step, out.reason = e.step, e.reason
    return out


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse ``--shape``: ``16,16``, ``(16, 16)``, ``16x16`` or ``6``.

    >>> parse_shape("16,16"), parse_shape("(6, 4)"), parse_shape("8x2"), parse_shape("6")
    ((16, 16), (6, 4), (8, 2), (6,))
    >>> parse_shape("6,-1")
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: size '-1' in shape '6,-1' must be at least 1
    """
    body = check_text(text, "shape").strip()
    if body.startswith("(") or body.startswith("["):
        close = ")" if body[0] == "(" else "]"
        if not body.endswith(close):
            raise ParseError(f"unbalanced brackets in shape {show(text)}")
        body = body[1:-1]
    parts = [p.strip() for p in body.replace("x", ",").split(",")]
    if parts and parts[-1] == "" and len(parts) > 1:
        parts = parts[:-1]
    check_count(len(parts), f"shape {show(text)} has {len(parts)} dimensions", MAX_DIMS, "MAX_DIMS")
    out = []
    for p in parts:
        if not p:
            raise ParseError(f"empty size in shape {show(text)}")
        v = parse_int(p, f"size in shape {show(text)}:")
        if v < 1:
            raise ShardingError(f"size {show(p)} in shape {show(text)} must be at least 1")
        out.append(v)
    return tuple(out)


def _problem(args) -> tuple[Mesh, ArrayType, ArrayType, str | None]:
    """Mesh, source and target types from ``--mesh --src --dst [--shape] [--jax|--dtensor]``."""
    from .. import notation

    for opt in ("mesh", "src", "dst"):
        if getattr(args, opt) is None:
            raise UsageError(f"missing --{opt} (see 'verishard {args.command} --help')")
    try:
        mesh = Mesh.parse(args.mesh)
    except VerishardError as e:
        raise _in(e, "--mesh") from None
    shape = None
    if args.shape is not None:
        try:
            shape = parse_shape(args.shape)
        except VerishardError as e:
            raise _in(e, "--shape") from None
    kind = "jax" if args.jax else "dtensor" if args.dtensor else None
    if kind and shape is None:
        raise UsageError(f"--{kind} needs --shape (the global shape, e.g. --shape 16,16)")
    types = []
    for opt in ("src", "dst"):
        text = getattr(args, opt)
        try:
            if kind == "jax":
                t = notation.from_partition_spec(mesh, shape, notation.parse_partition_spec(text))
            elif kind == "dtensor":
                t = _dtensor_type(mesh, shape, notation.parse_placements(text))
            else:
                t = ArrayType.parse(text, mesh)
                if shape is not None and t.global_shape != shape:
                    raise ShardingError(f"global shape {t.global_shape} of {t} does not match --shape {shape}")
        except VerishardError as e:
            hint = _notation_hint(text, kind)
            raise _in(type(e)(f"{e}{hint}") if hint else e, f"--{opt}") from None
        types.append(t)
    src, dst = types
    if isinstance(src, DTensorLayout) or isinstance(dst, DTensorLayout):
        return mesh, src, dst, kind
    if src.global_shape != dst.global_shape:
        raise ShardingError(f"global shapes differ: --src {src} has {src.global_shape}, "
                            f"--dst {dst} has {dst.global_shape}")
    return mesh, src, dst, kind


@dataclass(frozen=True)
class DTensorLayout:
    """DTensor placements (notation tuples) over an array of ``shape`` whose
    layout verishard's types do not describe: a dimension that several mesh
    axes shard unevenly, which DTensor splits by ``torch.chunk`` of each
    chunk. Planned as a box schedule, as :func:`verishard.torch.redistribute` does."""

    placements: tuple
    shape: tuple[int, ...]


def _dtensor_type(mesh: Mesh, shape: tuple[int, ...], placements: tuple) -> "ArrayType | DTensorLayout":
    """The type of DTensor placements as the Python API reads them
    (:func:`verishard.torch.dtensor.from_placements`): even shapes through the
    notation (numpy only), uneven ones our blocks where DTensor's shards are
    those blocks (read with torch, which says where DTensor puts each shard),
    else a :class:`DTensorLayout`."""
    from .. import notation

    t = notation.from_placements(mesh, shape, placements, uneven=True)
    if not t.uneven:
        return t
    from ..torch import dtensor   # needs torch: DTensor's own shard offsets decide

    try:
        return dtensor.from_placements(mesh, shape, dtensor.tuples_to_placements(placements))
    except dtensor.UnsupportedLayout:
        return DTensorLayout(placements, shape)


def _box_schedule(mesh: Mesh, shape: tuple[int, ...], placements: tuple[tuple, tuple], dtype_name: str):
    """The verified box schedule between two DTensor layouts (notation
    tuples), what :func:`verishard.torch.redistribute` runs where the types
    cannot describe one of them (:func:`verishard.torch.dtensor.layout_boxes`,
    ``BoxPlan.build``), for elements of ``dtype_name``; and the placements as objects."""
    import torch

    from ..torch import dtensor
    from ..runtime.crossmesh_mpi import DEFAULT_BUDGET
    from ..torch.backend import BoxPlan

    name = dtype_name.removeprefix("torch.")
    dtype = getattr(torch, name, None) if name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise UsageError(f"--dtype {show(dtype_name)} names no torch dtype; give e.g. float32, bfloat16, int64")
    ops = {p[1] for pl in placements for p in pl if p[0] == "partial"}
    if len(ops) > 1:
        raise ShardingError(f"the source and the target pend different reductions ({' and '.join(sorted(ops))}): a "
                            f"redistribution keeps the pending reduction")
    objs = tuple(dtensor.tuples_to_placements(pl) for pl in placements)
    s, _ = dtensor.layout_boxes(shape, mesh.axis_sizes, objs[0])
    d, _ = dtensor.layout_boxes(shape, mesh.axis_sizes, objs[1])
    return BoxPlan.build(shape, s, d, dtype.itemsize, DEFAULT_BUDGET), objs, name


def _box_notes(mesh: Mesh, placements: tuple) -> str:
    """What happens around the pieces when a side is Partial (as verishard.torch does it)."""
    names = mesh.axis_names
    lines = []
    for what, pl in zip(("source", "target"), placements):
        pending = [names[i] for i, p in enumerate(pl) if p.is_partial()]
        if not pending:
            continue
        op = next(p.reduce_op for p in pl if p.is_partial())
        if what == "source":
            lines.append(f"first: the source's pending {op} is all-reduced over {', '.join(pending)}")
        else:
            lines.append(f"then: the target is made pending {op} over {', '.join(pending)} (the rank with index 0 "
                         f"of each group keeps the value, the others the identity)")
    return "".join(line + "\n" for line in lines)


def _notation_hint(text: str, kind: str | None) -> str:
    """When ``text`` is written in another notation than ``kind`` (None: ours)
    says: the flag that reads it.

    >>> print(_notation_hint("P('x', None)", None))
     (this looks like a JAX PartitionSpec: add --jax and --shape)
    >>> _notation_hint("[3{x}6]", "jax")
    ' (this looks like our type notation: drop --jax)'
    >>> _notation_hint("[3{x}6", None)
    ''
    >>> _notation_hint("[Shard(0), Shard(0)]", "dtensor"), _notation_hint("[Shard(0)]", None)
    ('', ' (this looks like DTensor placements: add --dtensor and --shape)')
    """
    head = text.lstrip()
    # "[Shard(0), Shard(0)]" is how DTensor prints placements, not our notation
    placements = head.lstrip("[(").lstrip().startswith(("Shard(", "Replicate(", "Partial(", "_StridedShard("))
    if head.startswith(("P(", "PartitionSpec(", "P (")) and kind != "jax":
        return " (this looks like a JAX PartitionSpec: add --jax and --shape)"
    if placements and kind != "dtensor":
        return " (this looks like DTensor placements: add --dtensor and --shape)"
    if head.startswith("[") and kind is not None and not placements:
        return f" (this looks like our type notation: drop --{kind})"
    return ""


def notation_lines(plan, kind: str | None) -> str:
    from .. import notation

    if kind is None:
        return ""
    lines = []
    for what, t in (("source", plan.src), ("target", plan.dst)):
        try:
            if kind == "jax":
                text = notation.format_partition_spec(notation.to_partition_spec(t))
            else:
                text = notation.format_placements(*notation.to_placements(t))
        except VerishardError:
            text = "(not expressible)"
        lines.append(f"{what} {text} = {t}")
    return "\n".join(lines) + "\n"


def plan_from_args(args):
    from ..plan import plan as synthesize

    if getattr(args, "file", None) is not None:
        if any(getattr(args, o) is not None for o in ("mesh", "src", "dst", "shape")) or args.jax or args.dtensor:
            raise UsageError("give either a plan file or --mesh/--src/--dst, not both")
        return check_document(load_plan_file(args.file)), None
    mesh, src, dst, kind = _problem(args)
    if isinstance(src, DTensorLayout) or isinstance(dst, DTensorLayout):
        from .. import notation

        placements = (notation.parse_placements(args.src), notation.parse_placements(args.dst))
        shape = src.shape if isinstance(src, DTensorLayout) else src.global_shape
        boxes, objs, dtype = _box_schedule(mesh, shape, placements, args.dtype)
        return BoxSchedule(mesh, src, dst, shape, boxes, placements, objs, dtype), kind
    return synthesize(mesh, src, dst, exchange=bool(getattr(args, "exchange", False)),
                      minimal=bool(getattr(args, "minimal", False))), kind


class BoxSchedule:
    """A box schedule the CLI prints: the problem as given (a type, or a
    :class:`DTensorLayout`, per side), the verified ``BoxPlan``, the
    placements it was built from and the element type."""

    def __init__(self, mesh, src, dst, shape, boxes, placements, objects, dtype: str):
        self.mesh, self.src, self.dst, self.shape = mesh, src, dst, shape
        self.boxes, self.placements, self.objects, self.dtype = boxes, placements, objects, dtype

    def _placements_text(self) -> tuple[str, str]:
        from .. import notation

        return tuple(notation.format_placements(pl) for pl in self.placements)

    def text(self) -> str:
        untyped = "(DTensor layout; no type describes it)"
        head = "".join(f"{what} {pl} = {untyped if isinstance(t, DTensorLayout) else t}\n"
                       for what, pl, t in zip(("source", "target"), self._placements_text(), (self.src, self.dst)))
        why = (f"DTensor splits a dimension that several mesh axes shard unevenly by torch.chunk of each chunk, "
               f"which no type describes: planned as boxes of {self.dtype} elements (--dtype), as "
               f"verishard.torch.redistribute does\n")
        return head + why + _box_notes(self.mesh, self.objects) + str(self.boxes)

    def document(self) -> dict[str, Any]:
        src, dst = self._placements_text()
        return {"schema": BOX_SCHEMA, "mesh": str(self.mesh), "shape": list(self.shape), "src": src, "dst": dst,
                "dtype": self.dtype} | self.boxes.to_json()


def add_problem_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mesh", help="the mesh: x=2,y=3 or {x:2, y:3} (split axes: y=2*2)")
    p.add_argument("--src", help="the source sharding (our type notation unless --jax/--dtensor)")
    p.add_argument("--dst", help="the target sharding")
    p.add_argument("--shape", help="global shape, e.g. 16,16 (needed with --jax and --dtensor)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--jax", action="store_true", help="--src/--dst are JAX PartitionSpecs: \"P('x', None)\"")
    g.add_argument("--dtensor", action="store_true",
                   help="--src/--dst are DTensor placements, one per mesh axis: \"Shard(0),Replicate()\"")
    p.add_argument("--dtype", default="float32",
                   help="with --dtensor: the element type of a box schedule (its bytes and per-round budget), "
                        "as torch names it (default float32)")
