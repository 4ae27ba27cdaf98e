"""``verishard show``: draw a plan (text, or PNG/SVG with ``--picture``)."""

from __future__ import annotations

from .options import EXIT_OK, UsageError
from .output import emit
from .problem import BoxSchedule, add_problem_options, notation_lines, plan_from_args

__all__ = ["cmd_show", "add_parser"]

def cmd_show(args, out) -> int:
    """``verishard show``: the plan, then which block every device holds after each step.

    >>> import sys
    >>> from verishard.cli import build_parser
    >>> args = build_parser().parse_args(["show", "--mesh", "x=2", "--src", "[2{x}4]", "--dst", "[4]"])
    >>> cmd_show(args, sys.stdout)  # doctest: +ELLIPSIS
    plan on {x:2}: [2{x}4] -> [4]
    ...
    step 0: source [2{x}4], local size 2
         x=0     x=1
      A 0..1  B 2..3
        |  AllGather(0, x)
        v
    step 1: target [4], local size 4
         x=0     x=1
      A 0..3  A 0..3
    0
    """
    from .. import picture

    p, kind = plan_from_args(args)
    if isinstance(p, BoxSchedule):
        if args.picture:
            raise UsageError("--picture draws plans of types; this DTensor layout is a box schedule, printed "
                             "without --picture")
        emit(p.text(), out)
        return EXIT_OK
    text = notation_lines(p, kind) + str(p) + "\n\n" + picture.text_picture(p)
    if args.picture:
        n = picture.draw(p, args.picture)
        text += f"\nwrote {args.picture} ({n} panels)"
    emit(text, out)
    return EXIT_OK


def add_parser(sub, common) -> None:
    """Register ``verishard show`` on the subparsers ``sub``."""
    s = sub.add_parser("show", parents=[common], help="draw a plan (text, or PNG/SVG with --picture)",
                       description="Draw a plan given as a file or as --mesh/--src/--dst.")
    s.add_argument("file", nargs="?", help="plan JSON file (instead of --mesh/--src/--dst)")
    add_problem_options(s)
    s.add_argument("--picture", metavar="FILE", help="also write a picture: FILE.png or FILE.svg")
    s.set_defaults(handler=cmd_show)
