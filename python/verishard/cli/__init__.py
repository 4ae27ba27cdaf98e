"""The ``verishard`` command line.

::

    verishard plan  --mesh x=2,y=3 --src '[3{x}6]' --dst '[2{y}6]' [--format json]
    verishard plan  --mesh x=2,y=2 --shape 16,16 --jax --src "P('x', None)" --dst "P(None, 'x')"
    verishard plan  --mesh x=2,y=2 --shape 16,16 --dtensor --src "Shard(0),Replicate()" --dst "Replicate(),Shard(1)"
    verishard check plan.json
    verishard show  --mesh x=2,y=3 --src '[3{x}6]' --dst '[2{y}6]' [--picture plan.png]
    verishard show  plan.json --picture plan.svg
    verishard demo

Exit codes: 0 success; 1 a plan was rejected by the verified checker (or a
demo case failed, or standard output is closed or cannot be written: one
line on stderr, nothing else); 2 bad input (one line on stderr naming the
problem and the offending token), a missing optional package included (the
line names the ``pip install 'verishard[extra]'`` that brings it); 3 an
internal error. ``--debug`` adds the traceback. ``verishard --version``
prints the version.

Everything the CLI prints about a plan comes from :mod:`verishard.plan`,
that is from the verified checker's report.

One module per command group registers its parser and the function that
runs it (``add_parser``): :mod:`~verishard.cli.plan`, :mod:`~verishard.cli.check`,
:mod:`~verishard.cli.show`, :mod:`~verishard.cli.demo`,
:mod:`~verishard.cli.partition`, :mod:`~verishard.cli.crossmesh` (crossmesh,
reshard-checkpoint). Below them: :mod:`~verishard.cli.problem` (the
``--mesh --src --dst`` problem plan and show read), :mod:`~verishard.cli.document`
(the plan JSON document and its guarantees), :mod:`~verishard.cli.output`
(the output stream and the one error line), :mod:`~verishard.cli.options`
(exit codes, the usage error, the parser class, ``int_option``). This module
assembles the parser and runs :func:`main`.

>>> import json, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "plan.json")
>>> with open(path, "w") as f:
...     json.dump({"mesh": "x=2", "src": "[2{x}4]", "dst": "[4]",
...                "steps": [{"op": "all_gather", "dim": 0, "axes": ["x"]}]}, f)
>>> main(["check", path])  # doctest: +ELLIPSIS
plan on {x:2}: [2{x}4] -> [4]
  step  collective       type after  local size  received/device
     0  (source)         [2{x}4]              2                0
     1  AllGather(0, x)  [4]                  4                2
peak 4 elements/device; bound max(2, 4) = 4
traffic 2 elements/device; lower bound 2 (ratio 1.00)
guarantees:
  Checker.check_ok_iff                       each step is well typed, the plan ends at the target, ...
  Rules.step_wf                              every intermediate type is well formed
  Semantics.movement_correct                 each step's data movement yields exactly the distribution ...
  Exec.check_exec                            the whole plan moves the source distribution of any global ...
  (no theorem)                               memory: peak 4 meets the bound max(size(src), size(dst)) = 4 ...
  Trafficproof.accepted_traffic_lower_bound  traffic 2 = the lower bound 2: traffic-minimal, ...
OK: the verified checker accepts .../plan.json
0
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import errors
from ..errors import PlanError, VerishardError
from . import check, crossmesh, demo, partition, plan, show   # the command groups, one module each
from .demo import DEMO_CASES, demo_rank_cap
from .document import SCHEMA, check_document, dumps, guarantees, load_plan_file, plan_document
from .options import EXIT_INTERNAL, EXIT_OK, EXIT_REJECTED, EXIT_USAGE, Parser, UsageError, int_option
from .output import (OPTIONAL_PACKAGES, Output, OutputLost, missing_package, output_lost, report_failure,
                     silence_stdout)

__all__ = ["main", "SCHEMA", "dumps", "plan_document", "guarantees", "check_document", "load_plan_file", "DEMO_CASES",
           "int_option", "OPTIONAL_PACKAGES", "OutputLost", "demo_rank_cap"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (its ``error`` raises :class:`UsageError`): the
    options every command takes, then each command group's parser, registered
    by its module (each sets ``handler``, the function that runs it).

    >>> build_parser().parse_args(["check", "p.json"]).command
    'check'
    """
    common = Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="print a traceback on errors")
    parser = Parser(prog="verishard", description="Verified array redistribution for SPMD programs.",
                    parents=[common])
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"verishard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{plan,check,show,demo,partition,crossmesh,reshard-checkpoint}", parser_class=Parser)
    sub.required = True
    for group in (plan, check, show, demo, partition):
        group.add_parser(sub, common)
    crossmesh.add_parsers(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (``sys.exit(main())`` in the script).

    >>> import contextlib, sys
    >>> with contextlib.redirect_stderr(sys.stdout):
    ...     main(["plan", "--mesh", "x=2,y=3", "--src", "[3{z}6]", "--dst", "[6]"])
    verishard: error: unknown axis 'z' in --src; the mesh has x, y
    2
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if sys.stdout is None:   # started with stdout closed (verishard plan ... >&-): no result can be written
        return output_lost("standard output is closed")
    out = Output(sys.stdout)
    command = None
    try:
        args = build_parser().parse_args(argv)
        command = args.command
        code = args.handler(args, out)
        out.flush()
        return code
    except OutputLost as e:
        return output_lost(str(e))
    except PlanError as e:
        return report_failure(e, EXIT_REJECTED if (e.step is not None or e.reason is not None) else EXIT_USAGE, debug)
    except VerishardError as e:
        return report_failure(e, EXIT_USAGE, debug)
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else EXIT_OK
    except BrokenPipeError:  # the reader left (verishard demo | head): what it read is all it wanted
        silence_stdout()
        return EXIT_OK
    except ModuleNotFoundError as e:
        missing = missing_package(e, command)
        if missing is None:
            return report_failure(e, EXIT_INTERNAL, debug, internal=True)
        return report_failure(missing, EXIT_USAGE, debug)
    except OSError as e:  # a path named on the command line: missing, unreadable, a directory, existing, ...
        where = f" {errors.show(e.filename, 200)}" if e.filename is not None else ""
        return report_failure(UsageError(f"cannot use{where}: {e.strerror or e}"), EXIT_USAGE, debug)
    except MemoryError:
        return report_failure(UsageError("out of memory: the input is too large for this machine"), EXIT_USAGE, debug)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - a bug: still one line unless --debug
        return report_failure(e, EXIT_INTERNAL, debug, internal=True)
