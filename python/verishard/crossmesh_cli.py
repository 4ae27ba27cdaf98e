"""The ``crossmesh`` and ``reshard-checkpoint`` subcommands of ``verishard``
(registered by :mod:`verishard.cli`; the logic is here).

>>> import sys
>>> run(build().parse_args(["crossmesh", "--src-mesh", "x=2", "--src", "[2{x}4]",
...                         "--dst-mesh", "u=2", "--dst", "[2{u}4]",
...                         "--dst-ranks", "1,2"]), sys.stdout)
cross-mesh plan: [2{x}4] on {x:2} ranks 0-1
             to [2{u}4] on {u:2} ranks 1-2
  sender -> receiver  elements
       0 -> 1                2
       1 -> 2                2
  target  block  received  lower bound
       1      2         2            2
       2      2         2            2
every target gets exactly its block; traffic = block - held (guaranteed by Crossmeshproof.xplan_correct)
0
"""

from __future__ import annotations

import argparse

from .errors import ShardingError, show
from .limits import MAX_DEVICES, MAX_INDEX, check_count, check_int, check_text, parse_int
from .mesh import Mesh


def _ranks(text: str | None, option: str):
    """``--src-ranks``/``--dst-ranks``: ``0-3,8,9`` as a list of world ranks
    (at most ``MAX_DEVICES`` of them, each below ``MAX_INDEX``)."""
    if text is None:
        return None
    out: list[int] = []
    for tok in check_text(text, option).split(","):
        a, dash, b = tok.strip().partition("-")
        if dash and not a:
            raise ShardingError(f"rank {show(tok)} in {option} is negative")
        lo = check_int(parse_int(a, f"rank in {option}", ShardingError), f"rank in {option}", error=ShardingError)
        hi = lo if not dash else check_int(parse_int(b, f"rank in {option}", ShardingError), f"rank in {option}",
                                           error=ShardingError)
        if hi < lo:
            raise ShardingError(f"rank range {show(tok)} in {option} is empty")
        check_count(len(out) + hi - lo + 1, f"{option} lists more than {MAX_DEVICES} ranks", MAX_DEVICES,
                    "MAX_DEVICES")
        out += range(lo, hi + 1)
    return out


def add_parsers(sub, common) -> None:
    from .cli import int_option

    c = sub.add_parser("crossmesh", parents=[common], help="print the verified cross-mesh schedule",
                       description="Plan moving an array from one mesh and type (on some world ranks) to "
                                   "another, point to point, with the verified builder (Crossmesh.xplan); "
                                   "print the per-pair volumes and per-target traffic.")
    c.add_argument("--src-mesh", required=True, help="source mesh, e.g. x=2,y=2")
    c.add_argument("--src", required=True, help="source type, e.g. '[4{x}8, 6{y}12]'")
    c.add_argument("--dst-mesh", required=True, help="target mesh, e.g. u=3,v=2")
    c.add_argument("--dst", required=True, help="target type")
    c.add_argument("--src-ranks", help="world ranks of the source devices (default 0..N-1), e.g. 0-7")
    c.add_argument("--dst-ranks", help="world ranks of the target devices (default right after)")
    c.add_argument("--world-size", type=int_option("--world-size", 1, MAX_INDEX), help="refuse ranks at or above this")
    c.add_argument("--format", choices=("table", "json"), default="table")
    r = sub.add_parser("reshard-checkpoint", parents=[common],
                       help="rewrite a checkpoint for another mesh and type, offline",
                       description="Read the checkpoint SRC_DIR and write it to DST_DIR with --type on "
                                   "--mesh, one target block at a time (memory: one target block plus "
                                   "the read buffer), each read checked against its chunk digest.")
    r.add_argument("src_dir")
    r.add_argument("dst_dir")
    r.add_argument("--mesh", required=True, help="target mesh")
    r.add_argument("--type", required=True, help="target type")
    r.add_argument("--read-buffer", type=int_option("--read-buffer", 1, 2**32), default=8 << 20,
                   help="read buffer in bytes (default 8 MiB)")


def run(args, out) -> int:
    if args.command == "crossmesh":
        from .crossmesh import crossmesh_plan
        p = crossmesh_plan(args.src, args.dst, _ranks(args.src_ranks, "--src-ranks"),
                           _ranks(args.dst_ranks, "--dst-ranks"),
                           src_mesh=Mesh.parse(args.src_mesh), dst_mesh=Mesh.parse(args.dst_mesh),
                           world_size=args.world_size)
        if args.format == "json":
            import json
            print(json.dumps({
                "src": str(p.src), "src_mesh": str(p.src.mesh), "src_ranks": list(p.src_ranks),
                "dst": str(p.dst), "dst_mesh": str(p.dst.mesh), "dst_ranks": list(p.dst_ranks),
                "pieces": [[{"src": q.src, "box": [list(b) for b in q.box]} for q in ps] for ps in p.pieces],
                "volumes": [[a, b, v] for (a, b), v in p.volumes().items()]}), file=out)
        else:
            print(p.describe(), file=out)
        return 0
    from . import checkpoint
    stats: dict = {}
    path = checkpoint.reshard(args.src_dir, args.dst_dir, Mesh.parse(args.mesh), args.type,
                              read_buffer=args.read_buffer, stats=stats)
    print(f"wrote {path} ({args.type} on {Mesh.parse(args.mesh)}); read {stats.get('bytes_read', 0)} bytes "
          f"in {stats.get('pieces', 0)} pieces", file=out)
    return 0


def build() -> argparse.ArgumentParser:
    """A parser with just these subcommands (for the doctest)."""
    parser = argparse.ArgumentParser(prog="verishard")
    sub = parser.add_subparsers(dest="command")
    add_parsers(sub, argparse.ArgumentParser(add_help=False))
    return parser


__all__ = ["add_parsers", "run", "build"]
