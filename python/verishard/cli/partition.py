"""``verishard partition MODEL --platform P --objective latency|throughput``: the logic behind
the subcommand (the shared :mod:`verishard.cli` only registers it).

>>> import contextlib, io
>>> from verishard.cli import main
>>> buf = io.StringIO()
>>> with contextlib.redirect_stdout(buf):
...     code = main(["partition", "tiny-transformer", "--platform", "cpu+2gpu", "--batch", "2"])
>>> code, "lower bound" in buf.getvalue()
(0, True)
"""

from __future__ import annotations

import argparse

EXAMPLES = """examples:
  verishard partition resnet18 --platform cpu+2gpu --objective latency
  verishard partition vgg11 --platform cpu+2gpu --objective throughput --picture vgg.png
  verishard partition transformer --platform 4x-cpu+2gpu --method split
  verishard partition graph.json --platform my-platform.json

models: resnet18, vgg11, transformer, randwire-ws, randwire-er, tiny-resnet, tiny-transformer,
tiny-randwire (or a graph JSON file); platforms: cpu+2gpu, 4x-cpu+2gpu, local-2cpu (or a JSON file).
See docs/partition.md."""


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, not {text!r}")
    return v


def add_parser(sub, common) -> None:
    from .options import int_option
    from ..partition import METHODS, OBJECTIVES

    p = sub.add_parser("partition", parents=[common], help="place a DNN's operators on a heterogeneous platform",
                       description="Partition a model's operators over a platform's devices (MILP, modularity "
                                   "split or baselines); transfers priced by verified redistribution plans.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES)
    p.add_argument("model", help="a model name or a graph JSON file")
    p.add_argument("--platform", required=True, help="a shipped platform name or a platform JSON file")
    p.add_argument("--objective", choices=OBJECTIVES, default="latency")
    p.add_argument("--method", choices=METHODS, default="milp", help="default milp (exact, within --time-limit)")
    p.add_argument("--batch", type=int_option("--batch", 1, 4096), default=8,
                   help="batch size of the traced model (default 8)")
    p.add_argument("--time-limit", type=_positive_float, default=60.0, help="MILP time limit, seconds (default 60)")
    p.add_argument("--no-sharding", action="store_true", help="single-device options only")
    p.add_argument("--picture", metavar="FILE", help="draw the graph coloured by device (.png, .svg, .pdf)")
    p.set_defaults(handler=run)


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f} ms"


def run(args, out) -> int:
    from ..partition import partition
    from ..partition.graph import PartitionError

    if args.picture and not args.picture.lower().endswith((".png", ".svg", ".pdf")):
        raise PartitionError(f"--picture must end in .png, .svg or .pdf, not {args.picture!r}")
    rep = partition(args.model, args.platform, args.objective, args.method, args.batch, args.time_limit,
                    sharding=not args.no_sharding)
    pb, best = rep.problem, rep.best
    if best.assign is None:
        raise PartitionError(f"{best.method}: no placement fits in the devices' memory ({best.note})")
    lines = [f"model {pb.graph.name}: {len(pb.order)} operators, {len(pb.edges)} tensors; "
             f"platform {pb.pf.name}: {', '.join(f'{d} ({pb.pf.kind[d]})' for d in pb.pf.devices)}",
             f"objective {args.objective}; method {best.method} ({best.note or 'done'}, {best.seconds:.2f} s)",
             "placement:"]
    _, start = pb.simulate(best.assign, best.order)
    w = max(len(str(v)) for v in pb.order)
    lines.append(f"  {'operator'.ljust(w)}  {'option':<22} {'start':>11} {'time':>11}")
    for v in best.order:
        i = best.assign[v]
        lines.append(f"  {str(v).ljust(w)}  {str(pb.opts[v][i]):<22} {_ms(start[v]):>11} {_ms(pb.time[v][i]):>11}")
    lines.append(f"predicted latency {_ms(best.latency)}; throughput {best.throughput:.1f} inferences/s "
                 f"(period {_ms(best.period)})")
    lb = rep.lower_bound
    if args.objective == "latency":
        lines.append(f"lower bound {_ms(lb)}; gap {rep.gap(best) * 100:.1f}%")
    else:
        lines.append(f"lower bound on the period {_ms(lb)} ({1 / lb:.1f} inferences/s); gap {rep.gap(best) * 100:.1f}%")
    lines.append("baselines:")
    for key, r in rep.results.items():
        if r is best:
            continue
        if r.assign is None:
            lines.append(f"  {r.method:<22} infeasible ({r.note})")
            continue
        ratio = rep.value(r) / rep.value(best)
        extra = f" on {r.note}" if key == "fastest" else ""
        lines.append(f"  {r.method + extra:<22} latency {_ms(r.latency)}, period {_ms(r.period)}; "
                     f"{ratio:.2f}x the {args.objective == 'latency' and 'latency' or 'period'} of {best.method}")
    if args.picture:
        from ..partition.draw import draw

        draw(pb, best.assign, args.picture, f"{pb.graph.name} on {pb.pf.name}, {args.objective} ({best.method})")
        lines.append(f"wrote {args.picture}")
    out.write("\n".join(lines) + "\n")
    return 0


__all__ = ["EXAMPLES", "add_parser", "run"]
