"""The plan JSON document (schema ``verishard.plan/1``, docs/plan.md) and
the guarantees the Coq development gives a plan, as the CLI prints them."""

from __future__ import annotations

import json
import sys
from typing import Any

from ..errors import ParseError, PlanError, VerishardError, show

__all__ = ["SCHEMA", "dumps", "plan_document", "guarantees", "format_guarantees", "check_document", "load_plan_file",
           "parse_plan_text"]

SCHEMA = "verishard.plan/1"
MAX_PLAN_FILE = 16 * 2**20


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


def format_guarantees(plan) -> str:
    rows = [(n or "(no theorem)", c) for n, c in guarantees(plan)]
    w = max(len(n) for n, _ in rows)
    return "guarantees:\n" + "\n".join(f"  {n.ljust(w)}  {c}" for n, c in rows)


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
