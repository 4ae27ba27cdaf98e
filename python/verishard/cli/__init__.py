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
  (no theorem)                               memory: peak 4 meets the bound max(size(src), size(dst)) = 4 ...
  Trafficproof.accepted_traffic_lower_bound  traffic 2 = the lower bound 2: traffic-minimal, ...
OK: the verified checker accepts .../plan.json
0
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import PlanError, VerishardError, show
from ..limits import DEMO_RANKS_PER_CPU, MAX_DEVICES
from .check import cmd_check
from .demo import DEMO_CASES, DEMO_RANKS, cmd_demo, demo_rank_cap
from .document import SCHEMA, check_document, dumps, guarantees, load_plan_file, plan_document
from .options import EXIT_INTERNAL, EXIT_OK, EXIT_REJECTED, EXIT_USAGE, UsageError, _Parser, int_option
from .output import OPTIONAL_PACKAGES, OutputLost, _fail, _missing_package, _Out, _output_lost, _silence_stdout
from .plan import _PLAN_EXAMPLES, cmd_plan
from .problem import _problem_options
from .show import cmd_show

__all__ = ["main", "SCHEMA", "dumps", "plan_document", "guarantees", "check_document", "load_plan_file", "DEMO_CASES",
           "int_option", "OPTIONAL_PACKAGES", "OutputLost", "demo_rank_cap"]

def cmd_partition(args, out) -> int:
    """``verishard partition``: the logic is :func:`verishard.cli.partition.run`."""
    from .partition import run

    return run(args, out)


def cmd_crossmesh(args, out) -> int:
    """``verishard crossmesh`` and ``reshard-checkpoint``: the logic is :func:`verishard.cli.crossmesh.run`."""
    from .crossmesh import run

    return run(args, out)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (its ``error`` raises :class:`UsageError`).

    >>> build_parser().parse_args(["check", "p.json"]).command
    'check'
    """
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="print a traceback on errors")
    parser = _Parser(prog="verishard", description="Verified array redistribution for SPMD programs.",
                     parents=[common])
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"verishard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{plan,check,show,demo,partition,crossmesh,reshard-checkpoint}", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("plan", parents=[common], help="synthesize a plan and print it",
                       description="Synthesize a redistribution with the verified core and print it.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_PLAN_EXAMPLES)
    _problem_options(p)
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    p.add_argument("--exchange", action="store_true",
                   help="allow one exchange step (Alltoallv of exactly what each device needs; simulator and "
                        "MPI backends) where it receives less than the collectives")
    p.add_argument("--minimal", action="store_true",
                   help="certify the least traffic within the memory bound (branch-and-bound; a cheaper plan "
                        "where one exists; Minimalproof.mplan_spec)")

    c = sub.add_parser("check", parents=[common], help="validate a plan JSON file with the verified checker",
                       description="Validate a plan file (schema verishard.plan/1) with the verified checker.")
    c.add_argument("file", help="plan JSON file, or - for stdin")
    c.add_argument("--format", choices=("table", "json"), default="table", help="output format")

    s = sub.add_parser("show", parents=[common], help="draw a plan (text, or PNG/SVG with --picture)",
                       description="Draw a plan given as a file or as --mesh/--src/--dst.")
    s.add_argument("file", nargs="?", help="plan JSON file (instead of --mesh/--src/--dst)")
    _problem_options(s)
    s.add_argument("--picture", metavar="FILE", help="also write a picture: FILE.png or FILE.svg")

    d = sub.add_parser("demo", parents=[common], help="plan and check a dozen redistributions (make demo)",
                       description="Plan and check a dozen instructive redistributions, then run the MPI demo.")
    d.add_argument("--no-mpi", action="store_true", help="skip the MPI runtime demo")
    d.add_argument("--nranks", type=int_option("--nranks", 1, MAX_DEVICES), default=DEMO_RANKS,
                   help=f"MPI ranks for the runtime demo (default {DEMO_RANKS}; at most {DEMO_RANKS_PER_CPU} per "
                        f"core, and at least {DEMO_RANKS} allowed)")
    from .partition import add_parser as _add_partition_parser  # verishard.partition owns its options

    _add_partition_parser(sub, common)
    from .crossmesh import add_parsers as _add_crossmesh_parsers  # verishard.cli.crossmesh owns its options

    _add_crossmesh_parsers(sub, common)
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
        return _output_lost("standard output is closed")
    out = _Out(sys.stdout)
    command = None
    try:
        args = build_parser().parse_args(argv)
        command = args.command
        handler = {"plan": cmd_plan, "check": cmd_check, "show": cmd_show, "demo": cmd_demo,
                   "partition": cmd_partition, "crossmesh": cmd_crossmesh,
                   "reshard-checkpoint": cmd_crossmesh}[args.command]
        code = handler(args, out)
        out.flush()
        return code
    except OutputLost as e:
        return _output_lost(str(e))
    except PlanError as e:
        return _fail(e, EXIT_REJECTED if (e.step is not None or e.reason is not None) else EXIT_USAGE, debug)
    except VerishardError as e:
        return _fail(e, EXIT_USAGE, debug)
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else EXIT_OK
    except BrokenPipeError:  # the reader left (verishard demo | head): what it read is all it wanted
        _silence_stdout()
        return EXIT_OK
    except ModuleNotFoundError as e:
        missing = _missing_package(e, command)
        if missing is None:
            return _fail(e, EXIT_INTERNAL, debug, internal=True)
        return _fail(missing, EXIT_USAGE, debug)
    except OSError as e:  # a path named on the command line: missing, unreadable, a directory, existing, ...
        where = f" {show(e.filename, 200)}" if e.filename is not None else ""
        return _fail(UsageError(f"cannot use{where}: {e.strerror or e}"), EXIT_USAGE, debug)
    except MemoryError:
        return _fail(UsageError("out of memory: the input is too large for this machine"), EXIT_USAGE, debug)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - a bug: still one line unless --debug
        return _fail(e, EXIT_INTERNAL, debug, internal=True)
