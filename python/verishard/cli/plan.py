"""``verishard plan``: synthesize a plan and print it."""

from __future__ import annotations

from .document import _format_guarantees, dumps, plan_document
from .options import EXIT_OK
from .output import _emit
from .problem import BoxSchedule, _notation_lines, _plan_from_args

__all__ = ["cmd_plan"]

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
    p, kind = _plan_from_args(args)
    if isinstance(p, BoxSchedule):
        _emit(dumps(p.document()) if args.format == "json" else p.text(), out)
    elif args.format == "json":
        _emit(dumps(plan_document(p)), out)
    else:
        _emit(_notation_lines(p, kind) + str(p) + "\n" + _format_guarantees(p), out)
    return EXIT_OK


_PLAN_EXAMPLES = """examples:
  verishard plan --mesh x=2,y=3 --src '[3{x}6]' --dst '[2{y}6]'
  verishard plan --mesh x=2,y=3 --src '[3{x}6]' --dst '[2{y}6]' --format json > plan.json
  verishard plan --mesh x=2,y=2 --src '[1{x,y}4, 4, 2]' --dst '[4, 1{y,x}4, 2]' --exchange
  verishard plan --mesh x=2,y=2 --shape 16,16 --jax --src "P('x', None)" --dst "P(None, 'x')"
  verishard plan --mesh x=2,y=2 --shape 16,16 --dtensor --src "Shard(0),Replicate()" --dst "Replicate(),Shard(1)"

notations: docs/types.md, docs/jax.md, docs/dtensor.md; reading the output: docs/reading-a-plan.md"""
