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
  Exec.check_exec                            the whole plan moves the source distribution of any global ...
  (no theorem)                               memory: peak 4 meets the bound max(size(src), size(dst)) = 4 ...
  Trafficproof.accepted_traffic_lower_bound  traffic 2 = the lower bound 2: traffic-minimal, ...
OK: the verified checker accepts .../plan.json
0
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ParseError, PlanError, ShardingError, VerishardError, show
from ..limits import DEMO_RANKS_PER_CPU, MAX_DEVICES, MAX_DIMS, check_count, check_text, parse_int
from ..mesh import Mesh
from ..sharding import ArrayType
from .options import int_option

__all__ = ["main", "SCHEMA", "dumps", "plan_document", "guarantees", "check_document", "load_plan_file", "DEMO_CASES",
           "int_option", "OPTIONAL_PACKAGES", "OutputLost", "demo_rank_cap"]

SCHEMA = "verishard.plan/1"
BOX_SCHEMA = "verishard.boxes/1"  # a box schedule printed with --format json (not read back by `check`)
MAX_PLAN_FILE = 16 * 2**20

EXIT_OK, EXIT_REJECTED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3

# The optional packages a command may need, and the extra of pyproject.toml that installs each
# (``verishard partition`` needs the whole ``partition`` extra, whichever of them is missing).
OPTIONAL_PACKAGES = {"matplotlib": "picture", "networkx": "partition", "scipy": "partition", "torch": "torch",
                     "jax": "jax", "jaxlib": "jax", "mpi4py": "mpi"}
DEMO_RANKS = 8  # the MPI demo's own rank count (verishard.runtime.demo_job.NRANKS), never capped below


class UsageError(VerishardError):
    """A command-line argument is missing or malformed.

    >>> build_parser().parse_args(["check"])
    Traceback (most recent call last):
    ...
    verishard.cli.UsageError: the following arguments are required: file (see 'verishard check --help')
    """


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (exit code 2)."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


# ---------------------------------------------------------------------------
# What the plan is guaranteed to do


def guarantees(plan) -> list[tuple[str | None, str]]:
    """``(theorem, claim)`` for every guarantee the Coq development gives
    ``plan``, then ``(None, claim)`` for what is measured but not proved.

    >>> from verishard import check, AllGather
    >>> [name for name, _ in guarantees(check("x=2", "[2{x}4]", "[4]", [AllGather(0, "x")]))]
    ['Checker.check_ok_iff', 'Rules.step_wf', 'Semantics.movement_correct', 'Exec.check_exec', None, 'Trafficproof.accepted_traffic_lower_bound']
    """
    from ..collectives import AllPermute, Exchange

    if plan.partial and plan.uneven:
        return _puneven_guarantees(plan)
    if any(isinstance(c, Exchange) for c in plan.collectives):
        return _exchange_guarantees(plan)
    if plan.partial:
        return _partial_guarantees(plan)
    if plan.uneven:
        return _uneven_guarantees(plan)
    out = [
        ("Checker.check_ok_iff", "each step is well typed, the plan ends at the target, "
                                 "and the peak and traffic shown are the checker's"),
        ("Rules.step_wf", "every intermediate type is well formed"),
        ("Semantics.movement_correct", "each step's data movement yields exactly the distribution "
                                       "its type names, for any global array"),
        ("Exec.check_exec", "the whole plan moves the source distribution of any global array to its "
                            "target distribution"),
    ]
    if any(isinstance(c, AllPermute) for c in plan.collectives):
        out.append(("Permute.permute_table_perm", "each AllPermute is a bijection of devices"))
        out.append(("Permute.perm_src_blocks", "... sending every device exactly the block it needs"))
        out.append(("Permute.perm_src_fixed", "... and nothing to a device whose block does not change"))
    if plan.guaranteed:
        out.append(("Pipelineproof.plan_spec", "the plan comes from the verified pipeline: accepted by the "
                                               "checker, moving every rank's source block to its target block"))
        out.append(("Pipelineproof.plan_spec", f"memory: peak {plan.peak} <= max(size(src), size(dst)), "
                                               f"the least any plan can reach"))
        out.append(("Pipelineproof.plan_spec", "normal form: slices first, gathers last; slices add only axes "
                                               "the target uses, gathers remove only axes it does not"))
    elif plan.minimal:
        out.append(("Minimalproof.mplan_spec", f"memory: every type along the plan is within max(size(src), "
                                               f"size(dst)) = {plan.bound} (peak {plan.peak})"))
    else:
        out.append(_measured_memory(plan))
    if plan.traffic == plan.lower_bound:
        where = " on this mesh or any split of it" if plan.guaranteed else " on this mesh"
        out.append(("Pipelineproof.plan_traffic_optimal" if plan.guaranteed else
                    "Trafficproof.accepted_traffic_lower_bound",
                    f"traffic {plan.traffic} = the lower bound {plan.lower_bound}: traffic-minimal, no accepted "
                    f"plan{where} receives less"))
    else:
        out.append(("Trafficproof.accepted_traffic_lower_bound",
                    f"traffic {plan.traffic} >= the lower bound {plan.lower_bound}, which no accepted plan beats"))
        if not plan.minimal:
            out.append((None, f"traffic / lower bound {plan.traffic_ratio:.2f}: measured, not proved minimal "
                              f"(the synthesizer keeps the cheapest of the plans it builds and searches; "
                              f"--minimal certifies the least)"))
    if plan.minimal:
        out.append(_least_of_both(plan))
    return out


def _least_of_both(plan) -> tuple[str, str]:
    """The claim of ``plan(..., minimal=True)``: ``Eminimalproof.emplan_least``."""
    why = ("the exchange receives the lower bound" if plan.exchange else
           "a certificate from an untrusted search, accepted at the plan's own traffic")
    return ("Eminimalproof.emplan_least",
            f"traffic {plan.traffic} is the least of any plan within the bound {plan.bound}: of any plan of "
            f"collectives the checker accepts over the mesh given or its prime sub-axes "
            f"{plan.src.mesh.prime_parts()[0]}, and of the exchange where a free dimension lets it run in pieces "
            f"({why}; the one verified call Eminimal.emplan_problem)")


def _puneven_guarantees(plan) -> list[tuple[str | None, str]]:
    """The guarantees of a plan between partial types over uneven dimensions.

    >>> from verishard import plan, check, AllReduce, AllGather
    >>> [name for name, _ in guarantees(plan("x=2,y=2", "[3{x}5] partial{y}", "[5]"))]  # doctest: +NORMALIZE_WHITESPACE
    ['Pucheckerproof.pucheck_correct', 'Pucheckerproof.pucheck_peak', 'Pucheckerproof.pucheck_lower_bound',
     'Pucheckerproof.puplan_checked_total', 'Puexchangeproof.puplan_peak', None]
    >>> [name for name, _ in guarantees(check("x=2,y=2", "[3{x}5] partial{y}", "[5]", [AllReduce("y"), AllGather(0, "x")]))]
    ['Pucheckerproof.pucheck_correct', 'Pucheckerproof.pucheck_peak', 'Pucheckerproof.pucheck_lower_bound']
    """
    out = [
        ("Pucheckerproof.pucheck_correct", "accepted by the verified checker Puchecker.pucheck (reduce every "
                                           "pending axis, collectives or one exchange, make pending): over any "
                                           "commutative monoid, the target's padded buffers reduce to the array "
                                           "at every valid position, whatever the padding holds"),
        ("Pucheckerproof.pucheck_peak", f"memory: every type along the plan has a padded buffer within the peak "
                                        f"{plan.peak}, and so have both ends"),
        ("Pucheckerproof.pucheck_lower_bound", f"traffic {plan.traffic} >= the lower bound {plan.lower_bound} of "
                                               f"the array types (positions only: the reduction's own traffic is "
                                               f"not bounded)"),
    ]
    if plan.guaranteed:
        out += [
            ("Pucheckerproof.puplan_checked_total", "every valid problem of this kind gets the planner's plan "
                                                    "(Puexchange.puplan_problem), accepted by that checker"),
            ("Puexchangeproof.puplan_peak", f"memory: peak {plan.peak} = the padded bound {plan.bound} (every "
                                            f"type along the plan, the source's, the one the reduction leaves and "
                                            f"the target's, has a padded buffer within it)"),
            (None, "the planner takes a reduce-scatter where it and the exchange after it receive less than an "
                   "all-reduce and its exchange; the least of two, not a search"),
        ]
    return out


def _exchange_guarantees(plan) -> list[tuple[str | None, str]]:
    """The guarantees of the one-step exchange plan.

    >>> from verishard import plan
    >>> p = plan("x=2,y=2", "[1{x,y}4, 4, 2]", "[4, 1{y,x}4, 2]", exchange=True)
    >>> [name for name, _ in guarantees(p)]  # doctest: +NORMALIZE_WHITESPACE
    ['Exchangeproof.echeck_spec', 'Exchangeproof.exchange_correct', 'Exchangeproof.exchange_lower_bound',
     'Exchangeproof.exchange_chunk', 'Exchangeproof.eplan_spec']
    """
    if plan.uneven:
        out = [
            ("Exchangeproof.uecheck_spec", "the uneven checker accepts the exchange to the target; the peak "
                                           "(the larger padded buffer, which no plan goes below) and traffic "
                                           "shown are its report"),
            ("Exchangeproof.uexchange_correct", "every valid position of every device gets its element of any "
                                                "global array, whatever the padding holds"),
            ("Exchangeproof.uexchange_lower_bound", f"traffic {plan.traffic} = the lower bound {plan.lower_bound}: "
                                                    f"every device receives exactly the valid elements of its "
                                                    f"block it does not hold"),
        ]
    else:
        out = [
            ("Exchangeproof.echeck_spec", "the checker accepts the exchange to the target; the peak and traffic "
                                          "shown are its report"),
            ("Exchangeproof.exchange_correct", "every device assembles exactly its target block of any global "
                                               "array, each element from a device holding it"),
            ("Exchangeproof.exchange_lower_bound", f"traffic {plan.traffic} = the lower bound {plan.lower_bound}: "
                                                   f"every device receives exactly what it does not hold"),
        ]
    dim = plan.collectives[0].dim
    if dim is not None:
        out.append(("Exchangeproof.exchange_chunk", f"along dimension {dim}, which neither type shards, piece p "
                                                    f"of the output reads only piece p of the input (chunked "
                                                    f"within max(in, out) + min(in, out)/k, Chunkproof.held_bound)"))
    if plan.guaranteed and plan.uneven:
        out.append(("Exchangeproof.ueplan_spec", f"taken by the verified planner only because it receives "
                                                 f"strictly less than the collective plan (with a free dimension) "
                                                 f"or that plan exceeds the padded bound"))
        out.append(("Exchangeproof.ueplan_peak", f"peak {plan.peak} = the padded bound max(padded size(src), "
                                                 f"padded size(dst)), which no plan goes below"))
    elif plan.guaranteed and plan.minimal:
        out.append(("Eminimalproof.emplan_spec", f"taken by the verified call Eminimal.emplan_problem only because "
                                                 f"it receives strictly less than the plan of collectives checked "
                                                 f"there; peak {plan.peak} = max(size(src), size(dst))"))
        out.append(_least_of_both(plan))
    elif plan.guaranteed:
        out.append(("Exchangeproof.eplan_spec", f"taken by the verified planner only because it receives "
                                                f"strictly less than the collective plan; peak {plan.peak} = "
                                                f"max(size(src), size(dst))"))
    return out


def _measured_memory(plan) -> tuple[None, str]:
    if plan.peak == plan.bound:
        return (None, f"memory: peak {plan.peak} meets the bound max(size(src), size(dst)) = {plan.bound} "
                      f"(measured by the checker; no plan can do better)")
    if plan.guaranteed is None:
        return (None, f"memory: a given plan: peak {plan.peak} exceeds the bound {plan.bound} "
                      f"(measured by the checker)")
    return (None, f"memory: the fallback plan: peak {plan.peak} exceeds the bound {plan.bound}; "
                  f"no memory guarantee")


def _partial_guarantees(plan) -> list[tuple[str | None, str]]:
    """The guarantees of a plan between partial types (pending reductions).

    >>> from verishard import plan
    >>> [name for name, _ in guarantees(plan("x=2", "[4] partial{x}", "[2{x}4]"))]
    ['Pchecker.pcheck_ok', 'Pchecker.pcheck_correct', 'Ppipelineproof.pplan_spec', 'Ppipelineproof.pplan_spec', 'Ptrafficproof.pcheck_traffic_lower_bound']
    """
    out = [
        ("Pchecker.pcheck_ok", "each step is well typed on partial types, the plan ends at the target, "
                               "and the peak and traffic shown are the checker's"),
        ("Pchecker.pcheck_correct", "executing it keeps the represented value: for any global array and any "
                                    "local arrays whose reduction over the pending groups is it, over any "
                                    "commutative monoid (sum, max, min)"),
    ]
    if plan.guaranteed:
        out.append(("Ppipelineproof.pplan_spec", "the plan comes from the verified partial pipeline, accepted "
                                                 "by the partial checker over the refined mesh"))
        out.append(("Ppipelineproof.pplan_spec", f"memory: peak {plan.peak} <= max(size(src), size(dst)), "
                                                 f"the least any plan can reach"))
    else:
        out.append(_measured_memory(plan))
    out.append(("Ptrafficproof.pcheck_traffic_lower_bound",
                f"traffic {plan.traffic} >= {plan.lower_bound}, the lower bound of the array types, which no "
                f"accepted plan beats (it counts positions, not the reduction's own traffic)"))
    return out


def _uneven_guarantees(plan) -> list[tuple[str | None, str]]:
    """The guarantees of a plan over uneven types (padded blocks of ``ceil(g / n)``).

    >>> from verishard import plan
    >>> [name for name, _ in guarantees(plan("x=2", "[3{x}5]", "[5]"))]
    ['Ucheckerproof.ucheck_ok', 'Ucheckerproof.usrc_sound', 'Ucheckerproof.ucheck_correct', 'Upipelineproof.uplan_spec', None, 'Utrafficproof.ucheck_traffic_lower_bound']
    """
    out = [
        ("Ucheckerproof.ucheck_ok", "each step is well typed on uneven types, the plan ends at the target, "
                                    "and the peak (largest padded buffer) and traffic shown are the checker's"),
        ("Ucheckerproof.usrc_sound", "no padding element ever reaches a valid position"),
        ("Ucheckerproof.ucheck_correct", "executed on padded buffers (any padding value) or chunked ones "
                                         "(ucheck_correct_chunked), every valid position gets its element "
                                         "of any global array"),
    ]
    if plan.guaranteed:
        out.append(("Upipelineproof.uplan_spec", "the plan comes from the verified uneven pipeline, accepted "
                                                 "by the uneven checker over the refined mesh"))
    where = "within" if plan.within_bound else "ABOVE"
    out.append((None, f"memory: peak {plan.peak} is {where} max(padded size(src), padded size(dst)) = {plan.bound} "
                      f"(the checker's figure; not proved for this planner's plans; plan(..., exchange=True) "
                      f"always reaches the bound: Exchangeproof.ueplan_peak)"))
    out.append(("Utrafficproof.ucheck_traffic_lower_bound",
                f"traffic {plan.traffic} (the checker's figure on padded buffers) >= {plan.lower_bound}, the valid "
                f"elements the worst device lacks, which no accepted plan beats"))
    return out


def _format_guarantees(plan) -> str:
    rows = [(n or "(no theorem)", c) for n, c in guarantees(plan)]
    w = max(len(n) for n, _ in rows)
    return "guarantees:\n" + "\n".join(f"  {n.ljust(w)}  {c}" for n, c in rows)


# ---------------------------------------------------------------------------
# The plan JSON document

_DERIVED = ("types", "local_sizes", "received", "peak", "bound", "traffic", "lower_bound")
# ("minimal" is written for a certified plan; on reading it is not trusted: plan(..., minimal=True) re-certifies)
_KEYS = {"schema", "mesh", "src", "dst", "steps", "guaranteed", "minimal", "theorems", "comment", *_DERIVED}


def plan_document(plan) -> dict[str, Any]:
    """The JSON document of a plan (schema ``verishard.plan/1``, see ``docs/plan.md``).

    >>> from verishard import check, AllGather
    >>> doc = plan_document(check("x=2", "[2{x}4]", "[4]", [AllGather(0, "x")]))
    >>> doc["schema"], doc["steps"], doc["local_sizes"], doc["peak"]
    ('verishard.plan/1', [{'op': 'all_gather', 'dim': 0, 'axes': ['x']}], [2, 4], 4)
    """
    doc = {"schema": SCHEMA}
    doc.update(plan.to_json())
    doc["local_sizes"] = [t.size for t in plan.types]
    doc["theorems"] = [{"name": n, "claim": c} for n, c in guarantees(plan)]
    order = ["schema", "mesh", "src", "dst", "steps", "types", "local_sizes", "received",
             "peak", "bound", "traffic", "lower_bound", "guaranteed", "theorems"]
    return {k: doc[k] for k in order if k in doc} | {k: v for k, v in doc.items() if k not in order}


def dumps(doc: dict[str, Any]) -> str:
    """JSON text of a plan document: one top-level key per line, one step per line.

    >>> print(dumps({"mesh": "{x:2}", "steps": [{"op": "all_gather", "dim": 0, "axes": ["x"]}], "peak": 4}))
    {
      "mesh": "{x:2}",
      "steps": [
        {"op": "all_gather", "dim": 0, "axes": ["x"]}
      ],
      "peak": 4
    }
    """
    lines = []
    for key, value in doc.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            inner = ",\n".join("    " + json.dumps(v) for v in value)
            lines.append(f"  {json.dumps(key)}: [\n{inner}\n  ]")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}"


def _reject_constant(name: str):
    raise ParseError(f"JSON constant {name} is not allowed in a plan file")


def load_plan_file(path: str) -> dict[str, Any]:
    """Read a plan file (``-`` for stdin) as JSON data (never code).

    >>> load_plan_file("/nonexistent/plan.json")
    Traceback (most recent call last):
    ...
    verishard.errors.ParseError: cannot read plan file '/nonexistent/plan.json': No such file or directory
    """
    try:
        if path == "-":
            text = sys.stdin.read(MAX_PLAN_FILE + 1)
        else:
            with open(path, "rb") as f:
                raw = f.read(MAX_PLAN_FILE + 1)
            if len(raw) > MAX_PLAN_FILE:
                raise ParseError(f"plan file {show(path, 200)} is larger than {MAX_PLAN_FILE} bytes")
            text = raw.decode("utf-8")
    except OSError as e:
        raise ParseError(f"cannot read plan file {show(path, 200)}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ParseError(f"plan file {show(path, 200)} is not UTF-8 text (byte {e.start})") from None
    if len(text) > MAX_PLAN_FILE:
        raise ParseError(f"plan file {show(path, 200)} is larger than {MAX_PLAN_FILE} bytes")
    return parse_plan_text(text, path)


def parse_plan_text(text: str, where: str = "plan") -> dict[str, Any]:
    """Parse plan JSON text into a dict; any malformation is a :class:`ParseError`.

    >>> parse_plan_text('{"mesh": "x=2"}')
    {'mesh': 'x=2'}
    >>> parse_plan_text('[1, 2]')
    Traceback (most recent call last):
    ...
    verishard.errors.ParseError: plan must hold a JSON object, not list
    """
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise ParseError(f"{where} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ParseError(f"{where} is nested too deeply") from None
    except ValueError as e:  # huge integers
        if isinstance(e, VerishardError):
            raise ParseError(f"{where}: {e}") from None
        raise ParseError(f"{where} is not valid JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(obj, dict):
        raise ParseError(f"{where} must hold a JSON object, not {type(obj).__name__}")
    return obj


def check_document(doc: dict[str, Any]):
    """Re-check a plan document with the verified checker; return the :class:`~verishard.plan.Plan`.

    Only ``mesh``, ``src``, ``dst`` and ``steps`` are read as input; the
    derived fields (``types``, ``local_sizes``, ``received``, ``peak``,
    ``bound``, ``traffic``, ``lower_bound``), where present, must equal what
    the checker computes, else :class:`~verishard.errors.PlanError`.

    >>> from verishard import check, AllGather
    >>> doc = plan_document(check("x=2", "[2{x}4]", "[4]", [AllGather(0, "x")]))
    >>> check_document(doc).peak
    4
    >>> check_document(doc | {"peak": 2})
    Traceback (most recent call last):
    ...
    verishard.errors.PlanError: field 'peak' says 2 but the verified checker computes 4
    """
    from ..plan import Plan

    if not isinstance(doc, dict):
        raise ParseError(f"a plan must be a JSON object, not {type(doc).__name__}")
    for key in doc:
        if key not in _KEYS:
            raise ParseError(f"unexpected key {show(key)} in plan object; expected {', '.join(sorted(_KEYS))}")
    if "schema" in doc and doc["schema"] != SCHEMA:
        raise ParseError(f"unknown schema {show(str(doc['schema']))}; this verishard reads {SCHEMA!r}")
    checked = Plan.from_json(doc)
    ours = plan_document(checked)
    for key in _DERIVED:
        if key in doc and doc[key] != ours[key]:
            raise PlanError(f"field {key!r} says {_short(doc[key])} but the verified checker computes "
                            f"{_short(ours[key])}", step=None, reason="wrong_claim")
    return checked


def _short(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:60] + "..."


# ---------------------------------------------------------------------------
# Reading the problem from the command line


def _in(e: VerishardError, opt: str) -> VerishardError:
    """``e`` with ``in <opt>`` inserted before the first ``; `` of its message."""
    msg = str(e)
    head, sep, tail = msg.partition("; ")
    new = f"{head} in {opt}{sep}{tail}" if sep else f"{msg} (in {opt})"
    out = type(e)(new)
    if isinstance(e, PlanError):
        out.step, out.reason = e.step, e.reason
    return out


def parse_shape(text: str) -> tuple[int, ...]:
    """Parse ``--shape``: ``16,16``, ``(16, 16)``, ``16x16`` or ``6``.

    >>> parse_shape("16,16"), parse_shape("(6, 4)"), parse_shape("8x2"), parse_shape("6")
    ((16, 16), (6, 4), (8, 2), (6,))
    >>> parse_shape("6,-1")
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: size '-1' in shape '6,-1' must be at least 1
    """
    body = check_text(text, "shape").strip()
    if body.startswith("(") or body.startswith("["):
        close = ")" if body[0] == "(" else "]"
        if not body.endswith(close):
            raise ParseError(f"unbalanced brackets in shape {show(text)}")
        body = body[1:-1]
    parts = [p.strip() for p in body.replace("x", ",").split(",")]
    if parts and parts[-1] == "" and len(parts) > 1:
        parts = parts[:-1]
    check_count(len(parts), f"shape {show(text)} has {len(parts)} dimensions", MAX_DIMS, "MAX_DIMS")
    out = []
    for p in parts:
        if not p:
            raise ParseError(f"empty size in shape {show(text)}")
        v = parse_int(p, f"size in shape {show(text)}:")
        if v < 1:
            raise ShardingError(f"size {show(p)} in shape {show(text)} must be at least 1")
        out.append(v)
    return tuple(out)


def _problem(args) -> tuple[Mesh, ArrayType, ArrayType, str | None]:
    """Mesh, source and target types from ``--mesh --src --dst [--shape] [--jax|--dtensor]``."""
    from .. import notation

    for opt in ("mesh", "src", "dst"):
        if getattr(args, opt) is None:
            raise UsageError(f"missing --{opt} (see 'verishard {args.command} --help')")
    try:
        mesh = Mesh.parse(args.mesh)
    except VerishardError as e:
        raise _in(e, "--mesh") from None
    shape = None
    if args.shape is not None:
        try:
            shape = parse_shape(args.shape)
        except VerishardError as e:
            raise _in(e, "--shape") from None
    kind = "jax" if args.jax else "dtensor" if args.dtensor else None
    if kind and shape is None:
        raise UsageError(f"--{kind} needs --shape (the global shape, e.g. --shape 16,16)")
    types = []
    for opt in ("src", "dst"):
        text = getattr(args, opt)
        try:
            if kind == "jax":
                t = notation.from_partition_spec(mesh, shape, notation.parse_partition_spec(text))
            elif kind == "dtensor":
                t = _dtensor_type(mesh, shape, notation.parse_placements(text))
            else:
                t = ArrayType.parse(text, mesh)
                if shape is not None and t.global_shape != shape:
                    raise ShardingError(f"global shape {t.global_shape} of {t} does not match --shape {shape}")
        except VerishardError as e:
            hint = _notation_hint(text, kind)
            raise _in(type(e)(f"{e}{hint}") if hint else e, f"--{opt}") from None
        types.append(t)
    src, dst = types
    if isinstance(src, DTensorLayout) or isinstance(dst, DTensorLayout):
        return mesh, src, dst, kind
    if src.global_shape != dst.global_shape:
        raise ShardingError(f"global shapes differ: --src {src} has {src.global_shape}, "
                            f"--dst {dst} has {dst.global_shape}")
    return mesh, src, dst, kind


@dataclass(frozen=True)
class DTensorLayout:
    """DTensor placements (notation tuples) over an array of ``shape`` whose
    layout verishard's types do not describe: a dimension that several mesh
    axes shard unevenly, which DTensor splits by ``torch.chunk`` of each
    chunk. Planned as a box schedule, as :func:`verishard.torch.redistribute` does."""

    placements: tuple
    shape: tuple[int, ...]


def _dtensor_type(mesh: Mesh, shape: tuple[int, ...], placements: tuple) -> "ArrayType | DTensorLayout":
    """The type of DTensor placements as the Python API reads them
    (:func:`verishard.torch.dtensor.from_placements`): even shapes through the
    notation (numpy only), uneven ones our blocks where DTensor's shards are
    those blocks (read with torch, which says where DTensor puts each shard),
    else a :class:`DTensorLayout`."""
    from .. import notation

    t = notation.from_placements(mesh, shape, placements, uneven=True)
    if not t.uneven:
        return t
    from ..torch import dtensor   # needs torch: DTensor's own shard offsets decide

    try:
        return dtensor.from_placements(mesh, shape, dtensor.tuples_to_placements(placements))
    except dtensor.UnsupportedLayout:
        return DTensorLayout(placements, shape)


def _box_schedule(mesh: Mesh, shape: tuple[int, ...], placements: tuple[tuple, tuple], dtype_name: str):
    """The verified box schedule between two DTensor layouts (notation
    tuples), what :func:`verishard.torch.redistribute` runs where the types
    cannot describe one of them (:func:`verishard.torch.dtensor.layout_boxes`,
    ``BoxPlan.build``), for elements of ``dtype_name``; and the placements as objects."""
    import torch

    from ..torch import dtensor
    from ..runtime.crossmesh_mpi import DEFAULT_BUDGET
    from ..torch.backend import BoxPlan

    name = dtype_name.removeprefix("torch.")
    dtype = getattr(torch, name, None) if name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise UsageError(f"--dtype {show(dtype_name)} names no torch dtype; give e.g. float32, bfloat16, int64")
    ops = {p[1] for pl in placements for p in pl if p[0] == "partial"}
    if len(ops) > 1:
        raise ShardingError(f"the source and the target pend different reductions ({' and '.join(sorted(ops))}): a "
                            f"redistribution keeps the pending reduction")
    objs = tuple(dtensor.tuples_to_placements(pl) for pl in placements)
    s, _ = dtensor.layout_boxes(shape, mesh.axis_sizes, objs[0])
    d, _ = dtensor.layout_boxes(shape, mesh.axis_sizes, objs[1])
    return BoxPlan.build(shape, s, d, dtype.itemsize, DEFAULT_BUDGET), objs, name


def _box_notes(mesh: Mesh, placements: tuple) -> str:
    """What happens around the pieces when a side is Partial (as verishard.torch does it)."""
    names = mesh.axis_names
    lines = []
    for what, pl in zip(("source", "target"), placements):
        pending = [names[i] for i, p in enumerate(pl) if p.is_partial()]
        if not pending:
            continue
        op = next(p.reduce_op for p in pl if p.is_partial())
        if what == "source":
            lines.append(f"first: the source's pending {op} is all-reduced over {', '.join(pending)}")
        else:
            lines.append(f"then: the target is made pending {op} over {', '.join(pending)} (the rank with index 0 "
                         f"of each group keeps the value, the others the identity)")
    return "".join(line + "\n" for line in lines)


def _notation_hint(text: str, kind: str | None) -> str:
    """When ``text`` is written in another notation than ``kind`` (None: ours)
    says: the flag that reads it.

    >>> print(_notation_hint("P('x', None)", None))
     (this looks like a JAX PartitionSpec: add --jax and --shape)
    >>> _notation_hint("[3{x}6]", "jax")
    ' (this looks like our type notation: drop --jax)'
    >>> _notation_hint("[3{x}6", None)
    ''
    >>> _notation_hint("[Shard(0), Shard(0)]", "dtensor"), _notation_hint("[Shard(0)]", None)
    ('', ' (this looks like DTensor placements: add --dtensor and --shape)')
    """
    head = text.lstrip()
    # "[Shard(0), Shard(0)]" is how DTensor prints placements, not our notation
    placements = head.lstrip("[(").lstrip().startswith(("Shard(", "Replicate(", "Partial(", "_StridedShard("))
    if head.startswith(("P(", "PartitionSpec(", "P (")) and kind != "jax":
        return " (this looks like a JAX PartitionSpec: add --jax and --shape)"
    if placements and kind != "dtensor":
        return " (this looks like DTensor placements: add --dtensor and --shape)"
    if head.startswith("[") and kind is not None and not placements:
        return f" (this looks like our type notation: drop --{kind})"
    return ""


def _notation_lines(plan, kind: str | None) -> str:
    from .. import notation

    if kind is None:
        return ""
    lines = []
    for what, t in (("source", plan.src), ("target", plan.dst)):
        try:
            if kind == "jax":
                text = notation.format_partition_spec(notation.to_partition_spec(t))
            else:
                text = notation.format_placements(*notation.to_placements(t))
        except VerishardError:
            text = "(not expressible)"
        lines.append(f"{what} {text} = {t}")
    return "\n".join(lines) + "\n"


def _plan_from_args(args):
    from ..plan import plan as synthesize

    if getattr(args, "file", None) is not None:
        if any(getattr(args, o) is not None for o in ("mesh", "src", "dst", "shape")) or args.jax or args.dtensor:
            raise UsageError("give either a plan file or --mesh/--src/--dst, not both")
        return check_document(load_plan_file(args.file)), None
    mesh, src, dst, kind = _problem(args)
    if isinstance(src, DTensorLayout) or isinstance(dst, DTensorLayout):
        from .. import notation

        placements = (notation.parse_placements(args.src), notation.parse_placements(args.dst))
        shape = src.shape if isinstance(src, DTensorLayout) else src.global_shape
        boxes, objs, dtype = _box_schedule(mesh, shape, placements, args.dtype)
        return BoxSchedule(mesh, src, dst, shape, boxes, placements, objs, dtype), kind
    return synthesize(mesh, src, dst, exchange=bool(getattr(args, "exchange", False)),
                      minimal=bool(getattr(args, "minimal", False))), kind


class BoxSchedule:
    """A box schedule the CLI prints: the problem as given (a type, or a
    :class:`DTensorLayout`, per side), the verified ``BoxPlan``, the
    placements it was built from and the element type."""

    def __init__(self, mesh, src, dst, shape, boxes, placements, objects, dtype: str):
        self.mesh, self.src, self.dst, self.shape = mesh, src, dst, shape
        self.boxes, self.placements, self.objects, self.dtype = boxes, placements, objects, dtype

    def _placements_text(self) -> tuple[str, str]:
        from .. import notation

        return tuple(notation.format_placements(pl) for pl in self.placements)

    def text(self) -> str:
        untyped = "(DTensor layout; no type describes it)"
        head = "".join(f"{what} {pl} = {untyped if isinstance(t, DTensorLayout) else t}\n"
                       for what, pl, t in zip(("source", "target"), self._placements_text(), (self.src, self.dst)))
        why = (f"DTensor splits a dimension that several mesh axes shard unevenly by torch.chunk of each chunk, "
               f"which no type describes: planned as boxes of {self.dtype} elements (--dtype), as "
               f"verishard.torch.redistribute does\n")
        return head + why + _box_notes(self.mesh, self.objects) + str(self.boxes)

    def document(self) -> dict[str, Any]:
        src, dst = self._placements_text()
        return {"schema": BOX_SCHEMA, "mesh": str(self.mesh), "shape": list(self.shape), "src": src, "dst": dst,
                "dtype": self.dtype} | self.boxes.to_json()


# ---------------------------------------------------------------------------
# Commands


def _emit(text: str, out) -> None:
    out.write(text if text.endswith("\n") else text + "\n")


def cmd_plan(args, out) -> int:
    """``verishard plan``: synthesize a plan and write it (table or JSON) to ``out``.

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


def cmd_check(args, out) -> int:
    """``verishard check FILE``: re-check a plan file with the verified checker.

    >>> import os, tempfile
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
        _emit(dumps(plan_document(p)), out)
    else:
        _emit(str(p) + "\n" + _format_guarantees(p) + f"\nOK: the verified checker accepts {args.file}", out)
    return EXIT_OK


def cmd_show(args, out) -> int:
    """``verishard show``: the plan, then which block every device holds after each step.

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


def cmd_partition(args, out) -> int:
    """``verishard partition``: the logic is :func:`verishard.cli.partition.run`."""
    from .partition import run

    return run(args, out)


def cmd_crossmesh(args, out) -> int:
    """``verishard crossmesh`` and ``reshard-checkpoint``: the logic is :func:`verishard.cli.crossmesh.run`."""
    from .crossmesh import run

    return run(args, out)


def cmd_demo(args, out) -> int:
    """``verishard demo``: plan and check :data:`DEMO_CASES`, then (unless
    ``--no-mpi``) run the MPI demo where mpi4py and mpirun are installed
    (else one line says which is missing and it is skipped); 0 when
    everything that ran passed. ``--nranks`` above :func:`demo_rank_cap` is
    a usage error.

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


# ---------------------------------------------------------------------------
# Entry point


def _problem_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mesh", help="the mesh: x=2,y=3 or {x:2, y:3} (split axes: y=2*2)")
    p.add_argument("--src", help="the source sharding (our type notation unless --jax/--dtensor)")
    p.add_argument("--dst", help="the target sharding")
    p.add_argument("--shape", help="global shape, e.g. 16,16 (needed with --jax and --dtensor)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--jax", action="store_true", help="--src/--dst are JAX PartitionSpecs: \"P('x', None)\"")
    g.add_argument("--dtensor", action="store_true",
                   help="--src/--dst are DTensor placements, one per mesh axis: \"Shard(0),Replicate()\"")
    p.add_argument("--dtype", default="float32",
                   help="with --dtensor: the element type of a box schedule (its bytes and per-round budget), "
                        "as torch names it (default float32)")


_PLAN_EXAMPLES = """examples:
  verishard plan --mesh x=2,y=3 --src '[3{x}6]' --dst '[2{y}6]'
  verishard plan --mesh x=2,y=3 --src '[3{x}6]' --dst '[2{y}6]' --format json > plan.json
  verishard plan --mesh x=2,y=2 --src '[1{x,y}4, 4, 2]' --dst '[4, 1{y,x}4, 2]' --exchange
  verishard plan --mesh x=2,y=2 --shape 16,16 --jax --src "P('x', None)" --dst "P(None, 'x')"
  verishard plan --mesh x=2,y=2 --shape 16,16 --dtensor --src "Shard(0),Replicate()" --dst "Replicate(),Shard(1)"

notations: docs/types.md, docs/jax.md, docs/dtensor.md; reading the output: docs/reading-a-plan.md"""


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


class OutputLost(VerishardError):
    """Standard output cannot be written (closed, a full disk): exit 1, one line on stderr."""


def _missing_package(e: ModuleNotFoundError, command: str | None) -> UsageError | None:
    """The usage error for an optional package that is not installed (None:
    ``e`` is about another module, a bug).

    >>> print(_missing_package(ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib"), "show"))
    verishard show needs matplotlib, which is not installed: pip install 'verishard[picture]'
    >>> _missing_package(ModuleNotFoundError("No module named 'verishard._core'", name="verishard._core"), "plan")
    """
    top = (e.name or "").split(".")[0]
    if top not in OPTIONAL_PACKAGES:
        return None
    extra = "partition" if command == "partition" else OPTIONAL_PACKAGES[top]
    return UsageError(f"verishard {command or ''}".rstrip() + f" needs {top}, which is not installed: "
                      f"pip install 'verishard[{extra}]'")


def _silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so that the interpreter's last
    flush of what is still buffered does not fail again at exit."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, AttributeError, ValueError):
        pass


def _output_lost(why: str) -> int:
    if sys.stdout is not None:
        _silence_stdout()
    _say_error(f"{why}; nothing was written")
    return EXIT_REJECTED


def _say_error(msg: str) -> None:
    """The one error line on stderr, if there is a stderr that can still take it."""
    if sys.stderr is not None:
        try:
            print(f"verishard: error: {msg}", file=_Out(sys.stderr))
        except (OSError, VerishardError):
            pass


class _Out:
    """A text stream whose ``write`` escapes what the stream cannot encode
    (a lone surrogate from a command-line argument echoed back) instead of
    raising ``UnicodeEncodeError``, and reports a stream that cannot be
    written (closed, ``/dev/full``) as :class:`OutputLost`.
    """

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        encoding = getattr(self.stream, "encoding", None) or "utf-8"
        try:
            try:
                return self.stream.write(text)
            except UnicodeEncodeError:
                return self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as e:   # ValueError: a closed file object
            raise OutputLost(f"cannot write to standard output: {getattr(e, 'strerror', None) or e}") from None

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as e:
            raise OutputLost(f"cannot write to standard output: {getattr(e, 'strerror', None) or e}") from None

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def _fail(e: BaseException, code: int, debug: bool, internal: bool = False) -> int:
    if debug:
        traceback.print_exc()
    msg = " ".join(str(e).split()) or type(e).__name__
    if internal:
        msg = f"internal error: {type(e).__name__}: {msg}" + ("" if debug else " (rerun with --debug)")
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass
    _say_error(msg)
    return code

