"""Cross-checking other planners against the verified checker.

Adapters, one per planner, take a mesh and two types (same global shape) and
return that planner's plan in our collective IR, or why it has none
(:class:`PlannerResult`):

* :func:`verishard.crosscheck.xla.xla_plan`: XLA (GSPMD/Shardy) via JAX;
* :func:`verishard.crosscheck.torch_dtensor.dtensor_plan`: PyTorch DTensor,
  greedy or minimum-cost;
* :func:`naive` (gather every axis, then slice) and :func:`ours_plan`
  (:func:`verishard.plan`).

A result has ``status == "valid"`` only when the verified checker accepted
its plan; programs that end in the wrong layout are ``wrong_data``. The
harness (:mod:`verishard.crosscheck.harness`) runs cases and writes the
table and summary that ``bench/crosscheck.py`` reports.

Partial-sum sources (:mod:`verishard.crosscheck.partial`) and uneven shapes
(:mod:`verishard.crosscheck.uneven`) are judged by execution instead: each
planner's program runs on the same array and its result is compared with
numpy.

The XLA adapter imports JAX and the DTensor adapter torch, on first use.
"""

from .harness import (PLANNERS, Case, Row, all_types, grid_cases, known_cases, naive, ours_plan, read_table,
                      run_case, run_planner, summarize, table_markdown)
from .result import STATUSES, PlannerResult, judge
from .trace import Event, NotExpressible, infer_type, translate

__all__ = ["PLANNERS", "STATUSES", "Case", "Row", "PlannerResult", "Event", "NotExpressible", "all_types",
           "grid_cases", "known_cases", "naive", "ours_plan", "run_case", "run_planner", "summarize",
           "table_markdown", "read_table", "judge", "infer_type", "translate"]
