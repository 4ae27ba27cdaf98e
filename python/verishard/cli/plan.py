"""``verishard plan``: synthesize a plan and print it."""

from __future__ import annotations

import argparse

from .document import dumps, format_guarantees, plan_document
from .options import EXIT_OK
from .output import emit
from .problem import BoxSchedule, add_problem_options, notation_lines, plan_from_args

__all__ = ["cmd_plan", "add_parser"]

def cmd_plan(args, out) -> int:
    """``verishard plan``: synthesize a plan and write it (table or JSON) to ``out``.

    >>> import sys
    >>> from verishard.cli import build_parser
    >>> args = build_parser().parse_args(["plan", "--mesh", "x=2", "--src", "[2{x}4]", "--dst", "[4]"])
    >>> cmd_plan(args, sys.stdout)  # doctest: +ELLIPSIS
    plan on {x:2}: [2{x}4] -> [4]
      step  collective       type after  local size  received/device
         0  (source)         [2{x}4]              2                0
         1  AllGather(0, x)  [4]                  4                2
    peak 4 elements/device; bound max(2, 4) = 4 (guaranteed by Pipelineproof.plan_spec)
    traffic 2 elements/device; lower bound 2 (ratio 1.00)
    guarantees:
      Checker.check_ok_iff                each step is well typed, ...
      Pipelineproof.plan_traffic_optimal  traffic 2 = the lower bound 2: traffic-minimal, ...
    0
    """
    p, kind = plan_from_args(args)
    if isinstance(p, BoxSchedule):
        emit(dumps(p.document()) if args.format == "json" else p.text(), out)
    elif args.format == "json":
        emit(dumps(plan_document(p)), out)
    else:
        emit(notation_lines(p, kind) + str(p) + "\n" + format_guarantees(p), out)
    return EXIT_OK


_PLAN_EXAMPLES = """examples:
  verishard plan --mesh x=2,y=3 --src '[3{x}6]' --dst '[2{y}6]'
  verishard plan --mesh x=2,y=3 --src '[3{x}6]' --dst '[2{y}6]' --format json > plan.json
  verishard plan --mesh x=2,y=2 --src '[1{x,y}4, 4, 2]' --dst '[4, 1{y,x}4, 2]' --exchange
  verishard plan --mesh x=2,y=2 --shape 16,16 --jax --src "P('x', None)" --dst "P(None, 'x')"
  verishard plan --mesh x=2,y=2 --shape 16,16 --dtensor --src "Shard(0),Replicate()" --dst "Replicate(),Shard(1)"

notations: docs/types.md, docs/jax.md, docs/dtensor.md; reading the output: docs/reading-a-plan.md"""


def add_parser(sub, common) -> None:
    """Register ``verishard plan`` on the subparsers ``sub``."""
    p = sub.add_parser("plan", parents=[common], help="synthesize a plan and print it",
                       description="Synthesize a redistribution with the verified core and print it.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_PLAN_EXAMPLES)
    add_problem_options(p)
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    p.add_argument("--exchange", action="store_true",
                   help="allow one exchange step (Alltoallv of exactly what each device needs; simulator and "
                        "MPI backends) where it receives less than the collectives")
    p.add_argument("--minimal", action="store_true",
                   help="certify the least traffic within the memory bound (branch-and-bound; a cheaper plan "
                        "where one exists; Minimalproof.mplan_spec)")
    p.set_defaults(handler=cmd_plan)
