"""``verishard check FILE``: re-check a plan file with the verified checker."""

from __future__ import annotations

from ..errors import PlanError, VerishardError
from .document import check_document, dumps, format_guarantees, load_plan_file, plan_document
from .options import EXIT_OK
from .output import emit

__all__ = ["cmd_check", "add_parser"]

def cmd_check(args, out) -> int:
    """``verishard check FILE``: re-check a plan file with the verified checker.

    >>> import os, sys, tempfile
    >>> from verishard.cli import build_parser
    >>> path = os.path.join(tempfile.mkdtemp(), "plan.json")
    >>> with open(path, "w") as f:
    ...     _ = f.write('{"mesh": "x=2", "src": "[2{x}4]", "dst": "[4]", '
    ...                 '"steps": [{"op": "all_gather", "dim": 0, "axes": ["x"]}]}')
    >>> cmd_check(build_parser().parse_args(["check", path]), sys.stdout)  # doctest: +ELLIPSIS
    plan on {x:2}: [2{x}4] -> [4]
    ...
    OK: the verified checker accepts .../plan.json
    0
    >>> with open(path, "w") as f:
    ...     _ = f.write('{"mesh": "x=2", "src": "[2{x}4]", "dst": "[4]", "steps": []}')
    >>> cmd_check(build_parser().parse_args(["check", path]), sys.stdout)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    verishard.errors.PlanError: .../plan.json: rejected: the empty plan: the plan does not end at the target type
    """
    doc = load_plan_file(args.file)
    try:
        p = check_document(doc)
    except PlanError as e:
        if e.step is None and e.reason is None:
            raise PlanError(f"{args.file}: {e}") from None
        raise PlanError(f"{args.file}: rejected: {e}", step=e.step, reason=e.reason) from None
    except VerishardError as e:
        raise type(e)(f"{args.file}: {e}") from None
    if args.format == "json":
        emit(dumps(plan_document(p)), out)
    else:
        emit(str(p) + "\n" + format_guarantees(p) + f"\nOK: the verified checker accepts {args.file}", out)
    return EXIT_OK


def add_parser(sub, common) -> None:
    """Register ``verishard check`` on the subparsers ``sub``."""
    c = sub.add_parser("check", parents=[common], help="validate a plan JSON file with the verified checker",
                       description="Validate a plan file (schema verishard.plan/1) with the verified checker.")
    c.add_argument("file", help="plan JSON file, or - for stdin")
    c.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    c.set_defaults(handler=cmd_check)
