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

from ..errors import CheckpointError, ShardingError, show
from ..limits import MAX_DEVICES, MAX_INDEX, check_count, check_int, check_text, parse_int
from ..mesh import Mesh


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
    from .options import int_option

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
                       help="rewrite a checkpoint (a whole saved state) onto new layouts, offline",
                       description="Read the checkpoint SRC_DIR and write it to DST_DIR with new layouts: "
                                   "--layouts FILE maps name patterns to layouts (entries no pattern matches, "
                                   "and plain values, are copied as they are), or --mesh and --type put every "
                                   "array on one layout. One target block at a time (memory: one target block "
                                   "plus the read buffer), each read checked against its chunk digest.")
    r.add_argument("src_dir")
    r.add_argument("dst_dir")
    r.add_argument("--layouts", metavar="FILE",
                   help="JSON (or YAML, with PyYAML installed) map of name patterns (fnmatch, names joined by '/') "
                        "to layouts {\"mesh\": M, \"type\"|\"spec\"|\"placements\": ...}; the first matching "
                        "pattern wins")
    r.add_argument("--mesh", help="target mesh of every array (with --type)")
    r.add_argument("--type", help="target type of every array (with --mesh)")
    r.add_argument("--read-buffer", type=int_option("--read-buffer", 1, 2**32), default=8 << 20,
                   help="read buffer in bytes (default 8 MiB)")
    for p in (c, r):
        p.set_defaults(handler=run)


def run(args, out) -> int:
    if args.command == "crossmesh":
        from ..crossmesh import crossmesh_plan
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
    from .. import checkpoint
    stats: dict = {}
    if args.layouts is not None:
        if args.mesh is not None or args.type is not None:
            raise CheckpointError("reshard-checkpoint: pass --layouts FILE, or --mesh and --type, not both")
        layouts = read_layouts(args.layouts)
        what = f"{len(layouts)} pattern{'s' if len(layouts) != 1 else ''} of {args.layouts}"
        path = checkpoint.reshard(args.src_dir, args.dst_dir, layouts, read_buffer=args.read_buffer, stats=stats)
    else:
        if args.mesh is None or args.type is None:
            raise CheckpointError("reshard-checkpoint: pass --layouts FILE (name patterns to layouts), or --mesh "
                                  "and --type (one layout for every array)")
        what = f"{args.type} on {Mesh.parse(args.mesh)}"
        path = checkpoint.reshard(args.src_dir, args.dst_dir, Mesh.parse(args.mesh), args.type,
                                  read_buffer=args.read_buffer, stats=stats)
    print(f"wrote {path} ({what}): {stats.get('resharded', 0)} arrays resharded, {stats.get('copied', 0)} "
          f"entries copied as they were; read {stats.get('bytes_read', 0)} bytes in {stats.get('pieces', 0)} "
          f"pieces", file=out)
    return 0


def read_layouts(path: str) -> dict:
    """The ``--layouts`` file: a JSON object (or, named ``*.yaml``/``*.yml``, a
    YAML mapping; PyYAML needed) of name patterns to layouts, in its order."""
    import json
    import os
    import stat
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):   # a FIFO would be waited on
            raise CheckpointError(f"--layouts {path}: not a regular file")
        with open(path, encoding="utf-8") as f:
            text = f.read((1 << 20) + 1)
        if len(text) > 1 << 20:
            raise CheckpointError(f"--layouts {path}: more than 1 MiB")
    except OSError as e:
        raise CheckpointError(f"--layouts {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CheckpointError(f"--layouts {path}: not UTF-8 text") from None
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise CheckpointError(f"--layouts {path}: reading YAML needs PyYAML (pip install pyyaml), or write "
                                  f"the map as JSON") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise CheckpointError(f"--layouts {path}: not YAML ({str(e)[:200]})") from None
    else:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise CheckpointError(f"--layouts {path}: not JSON ({str(e)[:200]})") from None
    if not isinstance(data, dict) or not data:
        raise CheckpointError(f"--layouts {path}: a non-empty map of name patterns to layouts, e.g. "
                              f"{{\"model/*\": {{\"mesh\": \"x=4\", \"spec\": \"P('x')\"}}}}")
    return data


def build() -> argparse.ArgumentParser:
    """A parser with just these subcommands (for the doctest)."""
    parser = argparse.ArgumentParser(prog="verishard")
    sub = parser.add_subparsers(dest="command")
    add_parsers(sub, argparse.ArgumentParser(add_help=False))
    return parser


__all__ = ["add_parsers", "run", "build", "read_layouts"]
