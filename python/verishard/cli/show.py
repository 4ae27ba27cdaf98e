"""``verishard show``: draw a plan (text, or PNG/SVG with ``--picture``)."""

from __future__ import annotations

from .options import EXIT_OK, UsageError
from .output import _emit
from .problem import BoxSchedule, _notation_lines, _plan_from_args

__all__ = ["cmd_show"]

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

    p, kind = _plan_from_args(args)
    if isinstance(p, BoxSchedule):
        if args.picture:
            raise UsageError("--picture draws plans of types; this DTensor layout is a box schedule, printed "
                             "without --picture")
        _emit(p.text(), out)
        return EXIT_OK
    text = _notation_lines(p, kind) + str(p) + "\n\n" + picture.text_picture(p)
    if args.picture:
        n = picture.draw(p, args.picture)
        text += f"\nwrote {args.picture} ({n} panels)"
    _emit(text, out)
    return EXIT_OK
