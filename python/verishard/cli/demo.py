"""``verishard demo``: plan and check a dozen instructive redistributions,
then run the MPI demo where it can."""

from __future__ import annotations

import importlib
import json
import os
import shutil

from ..errors import PlanError, VerishardError
from ..limits import DEMO_RANKS_PER_CPU, MAX_DEVICES
from ..mesh import Mesh
from .document import check_document, plan_document
from .options import EXIT_OK, EXIT_REJECTED, UsageError, int_option

__all__ = ["DEMO_CASES", "DEMO_RANKS", "demo_rank_cap", "cmd_demo", "add_parser"]

DEMO_RANKS = 8  # the MPI demo's own rank count (verishard.runtime.demo_job.NRANKS), never capped below


# (title, mesh, src, dst, what it teaches)
DEMO_CASES: tuple[tuple[str, str, str, str, str], ...] = (
    ("the spec's worked example", "x=2,y=3", "[3{x}6]", "[2{y}6]",
     "dimension 0 moves from x to y; slice, permute, gather meets the bound max(3, 2) = 3"),
    ("a bound that needs a split axis", "x=2,y=4", "[2{x}4]", "[1{y}4]",
     "over whole axes only a full gather works; with y split into y.0, y.1 the peak is 2"),
    ("transpose of a sharding", "x=2,y=2", "[4{x}8, 4{y}8]", "[4{y}8, 4{x}8]",
     "the two dimensions trade axes at the same local shape: one permute suffices"),
    ("reorder the axes of a dimension", "x=2,y=3", "[2{x,y}12]", "[2{y,x}12]",
     "major and minor axes swap: blocks move between devices, local size stays 2"),
    ("all-to-all", "x=4", "[2{x}8, 8]", "[8, 2{x}8]",
     "the sharding moves from dimension 0 to 1; one all-to-all keeps the local size at 16"),
    ("multi-axis all-to-all", "x=2,y=2", "[2{x,y}8, 8]", "[8, 2{x,y}8]",
     "both axes move together; one all-to-all over the group of 4 receives 3/4 of the local array"),
    ("splitting an axis", "x=2*2", "[2{x}8, 8]", "[4{x.0}8, 4{x.1}8]",
     "an axis written as two factors; its minor half x.1 moves to dimension 1"),
    ("replicate to shard", "x=2,y=3", "[6, 4]", "[2{y}6, 2{x}4]",
     "every device slices its own block: no communication at all"),
    ("shard to replicate", "x=2,y=3", "[1{x,y}6, 4]", "[6, 4]",
     "one all-gather over both axes; the target itself is the peak"),
    ("multi-dimensional, three axes", "x=2,y=2,z=2", "[4{x}8, 2{y,z}8]", "[2{z,y}8, 4{x}8]",
     "three axes rearranged across two dimensions at constant local size 8"),
    ("three-dimensional array", "x=2,y=2", "[2{x}4, 2{y}4, 4]", "[4, 2{x}4, 2{y}4]",
     "each axis shifts one dimension to the right"),
    ("uneven mesh", "x=4,y=2", "[4{x}16, 8{y}16]", "[2{y,x}16, 16]",
     "two dimensions' axes combine on dimension 0 at constant local size 32"),
)


# Planned with minimal=True: the pipeline's plan receives 30, the least within the bound is 21.
DEMO_MINIMAL = ("certified least traffic (--minimal)", "x=2,y=3", "[9, 2{y}6, 2]", "[3{y}9, 3{x}6, 2]",
                "the pipeline's plan receives 30; a branch-and-bound finds one receiving 21, and the "
                "verified certificate checker proves no plan within the bound receives less")


def _run_demo_case(i: int, title: str, mesh: str, src: str, dst: str, what: str, out,
                   minimal: bool = False) -> bool:
    import verishard
    from .. import picture

    out.write(f"\n== {i}. {title}: {Mesh.parse(mesh)}  {src} -> {dst}\n   {what}\n")
    try:
        p = verishard.plan(mesh, src, dst, minimal=minimal)
        again = verishard.check(p.mesh, p.src, p.dst, list(p.collectives))
        via_json = check_document(json.loads(json.dumps(plan_document(p))))
        if (again.types, again.peak) != (p.types, p.peak) or (via_json.types, via_json.peak) != (p.types, p.peak):
            raise PlanError("re-checking the plan gave another result")
        if p.peak < p.bound:
            raise PlanError(f"peak {p.peak} is below the bound {p.bound}, which is impossible")
    except VerishardError as e:
        out.write(f"FAILED: {e}\n")
        return False
    out.write(str(p) + "\n")
    if i == 1:
        out.write("\n" + picture.text_picture(p) + "\n")
    out.write("checked: the verified checker accepts it again, directly and through its JSON document\n")
    return True


def demo_rank_cap() -> int:
    """The most ranks ``verishard demo --nranks`` starts on this machine:
    :data:`~verishard.limits.DEMO_RANKS_PER_CPU` per core (``os.cpu_count()``),
    and never fewer than the demo's own :data:`DEMO_RANKS`.

    >>> demo_rank_cap() >= DEMO_RANKS
    True
    """
    return max(DEMO_RANKS, (os.cpu_count() or 1) * DEMO_RANKS_PER_CPU)


def _mpi_missing() -> str | None:
    """Why the MPI demo cannot run here (None: it can): mpi4py or mpirun missing."""
    try:
        importlib.import_module("mpi4py")   # the package only: importing mpi4py.MPI would start MPI
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "mpi4py":
            return f"mpi4py cannot be imported ({e})"
        return "mpi4py is not installed (pip install 'verishard[mpi]')"
    except ImportError as e:   # installed but broken: say so rather than "not installed"
        return f"mpi4py cannot be imported ({' '.join(str(e).split())[:200]})"
    if not (shutil.which("mpirun") or shutil.which("mpiexec")):
        return "mpirun is not on PATH (install Open MPI: apt-get install openmpi-bin libopenmpi-dev)"
    return None


def _run_mpi_demo(nranks: int, out) -> bool:
    missing = _mpi_missing()
    if missing:
        out.write(f"\nMPI demo: skipped: {missing}\n")
        return True
    try:
        runtime = importlib.import_module("verishard.runtime")
    except ModuleNotFoundError as e:
        if e.name in ("verishard.runtime",):
            out.write("\nMPI demo: verishard.runtime is not available; skipped\n")
            return True
        out.write(f"\nMPI demo FAILED: cannot import verishard.runtime: {e}\n")
        return False
    except Exception as e:  # noqa: BLE001 - a broken runtime is a demo failure, reported in one line
        out.write(f"\nMPI demo FAILED: cannot import verishard.runtime: {type(e).__name__}: {e}\n")
        return False
    fn = getattr(runtime, "run_mpi_demo", None)
    if fn is None:
        out.write("\nMPI demo: verishard.runtime.run_mpi_demo is not available; skipped\n")
        return True
    out.write(f"\nMPI demo: running verishard.runtime.run_mpi_demo(nranks={nranks})\n")
    out.flush()
    try:
        rc = fn(nranks=nranks)
    except Exception as e:  # noqa: BLE001
        out.write(f"MPI demo FAILED: {type(e).__name__}: {e}\n")
        return False
    if rc != 0:
        out.write(f"MPI demo FAILED: exit code {rc}\n")
        return False
    out.write("MPI demo: ok\n")
    return True


def cmd_demo(args, out) -> int:
    """``verishard demo``: plan and check :data:`DEMO_CASES`, then (unless
    ``--no-mpi``) run the MPI demo where mpi4py and mpirun are installed
    (else one line says which is missing and it is skipped); 0 when
    everything that ran passed. ``--nranks`` above :func:`demo_rank_cap` is
    a usage error.

    >>> import sys
    >>> from verishard.cli import build_parser
    >>> cmd_demo(build_parser().parse_args(["demo", "--no-mpi"]), sys.stdout)  # doctest: +ELLIPSIS
    verishard demo: redistributions planned and checked through the verified core
    <BLANKLINE>
    == 1. the spec's worked example: {x:2, y:3}  [3{x}6] -> [2{y}6]
    ...
    13 of 13 redistributions planned and checked
    <BLANKLINE>
    MPI demo: skipped (--no-mpi)
    0
    """
    if not args.no_mpi and args.nranks > demo_rank_cap():
        raise UsageError(f"--nranks {args.nranks} is more than this machine runs: at most {demo_rank_cap()} "
                         f"({DEMO_RANKS_PER_CPU} per core of {os.cpu_count() or 1}, "
                         f"verishard.limits.DEMO_RANKS_PER_CPU; the demo itself uses {DEMO_RANKS})")
    out.write("verishard demo: redistributions planned and checked through the verified core\n")
    ok = 0
    for i, case in enumerate(DEMO_CASES, 1):
        ok += _run_demo_case(i, *case, out)
    ok += _run_demo_case(len(DEMO_CASES) + 1, *DEMO_MINIMAL, out, minimal=True)
    total = len(DEMO_CASES) + 1
    failed = total - ok
    out.write(f"\n{ok} of {total} redistributions planned and checked"
              + (f"; {failed} FAILED\n" if failed else "\n"))
    if args.no_mpi:
        out.write("\nMPI demo: skipped (--no-mpi)\n")
    mpi_ok = True if args.no_mpi else _run_mpi_demo(args.nranks, out)
    out.flush()
    return EXIT_OK if not failed and mpi_ok else EXIT_REJECTED


def add_parser(sub, common) -> None:
    """Register ``verishard demo`` on the subparsers ``sub``."""
    d = sub.add_parser("demo", parents=[common], help="plan and check a dozen redistributions (make demo)",
                       description="Plan and check a dozen instructive redistributions, then run the MPI demo.")
    d.add_argument("--no-mpi", action="store_true", help="skip the MPI runtime demo")
    d.add_argument("--nranks", type=int_option("--nranks", 1, MAX_DEVICES), default=DEMO_RANKS,
                   help=f"MPI ranks for the runtime demo (default {DEMO_RANKS}; at most {DEMO_RANKS_PER_CPU} per "
                        f"core, and at least {DEMO_RANKS} allowed)")
    d.set_defaults(handler=cmd_demo)
