"""What an adapter reports for one case, and how it is judged.

The only way to get ``status == "valid"`` is a :class:`~verishard.plan.Plan`
that the verified checker accepted: :class:`PlannerResult` re-checks it on
construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import PlanError, VerishardError
from ..mesh import Mesh
from ..plan import Plan
from ..sharding import ArrayType
from .trace import Event, NotExpressible, express, global_values, held_sets, matches_layout, translate

__all__ = ["STATUSES", "PlannerResult", "judge"]

STATUSES = (
    "valid",            # translated into our IR, accepted by the verified checker
    "not_expressible",  # the planner's program is correct but has no faithful plan in our IR
    "wrong_data",       # the planner's program does not produce the target layout
    "rejected",         # translated, but the checker refused a step (not a wrong result)
    "unsupported",      # the planner refuses or cannot represent the case
    "error",            # the adapter failed (a bug of ours, or of the tool under test)
)


@dataclass
class PlannerResult:
    """One planner's answer for one case: a status from :data:`STATUSES`, why,
    and (when ``valid``) the Plan the verified checker accepted, with the
    program as the planner wrote it and its figures (elements per device).

    >>> PlannerResult("xla", "unsupported", "JAX/XLA refused").summary()
    'xla: unsupported (JAX/XLA refused)'
    >>> PlannerResult("mine", "valid")
    Traceback (most recent call last):
    ...
    ValueError: a valid result needs the checked Plan
    """

    planner: str
    status: str
    reason: str = ""
    plan: Plan | None = None
    program: tuple[str, ...] = ()
    n_collectives: int | None = None
    peak_elements: int | None = None
    received_elements: int | None = None
    output_correct: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")
        if self.status == "valid":
            from ..runtime.backend import validate_plan
            if not isinstance(self.plan, Plan):
                raise ValueError("a valid result needs the checked Plan")
            self.plan = validate_plan(self.plan)  # the verified checker, again

    @property
    def valid(self) -> bool:
        """Whether the verified checker accepted the plan (``status == "valid"``).

        >>> from verishard import plan
        >>> PlannerResult("ours", "valid", plan=plan("x=2", "[2{x}4]", "[4]")).valid
        True
        >>> PlannerResult("xla", "wrong_data").valid
        False
        """
        return self.status == "valid"

    def summary(self) -> str:
        """``planner: status``, with the reason in parentheses when there is one.

        >>> PlannerResult("dtensor-greedy", "not_expressible", "uses an all-reduce").summary()
        'dtensor-greedy: not_expressible (uses an all-reduce)'
        """
        s = f"{self.planner}: {self.status}"
        return s + (f" ({self.reason})" if self.reason else "")


def judge(planner: str, mesh: Mesh, src: ArrayType, dst: ArrayType, events: list[Event],
          final_arrays: list[np.ndarray], **info: Any) -> PlannerResult:
    """Translate observed events into our IR, check, and classify.

    ``final_arrays`` are the program's result on every device (values
    ``1 + global index``); ``info`` fills the other fields of the result.

    >>> m = Mesh.parse("x=2")
    >>> src, dst = ArrayType.parse("[2{x}4]", m), ArrayType.parse("[4]", m)
    >>> G = global_values((4,))
    >>> gather = Event("all-gather", held_sets([G, G]))
    >>> r = judge("mine", m, src, dst, [gather], [G, G])
    >>> r.summary(), r.plan.collectives
    ('mine: valid', (AllGather(dim=0, axes=('x',)),))
    >>> judge("mine", m, src, dst, [gather], [G[::-1], G]).summary()
    'mine: wrong_data (every device holds the right elements in the wrong local order)'
    """
    G = global_values(src.global_shape)
    correct = matches_layout(final_arrays, dst, G)
    info.setdefault("output_correct", correct)
    try:
        fine = translate(mesh, src, events, held_sets(final_arrays))
    except NotExpressible as e:
        if correct:
            return PlannerResult(planner, "not_expressible", f"not expressible: {e}", **info)
        return PlannerResult(planner, "wrong_data", f"the result is not the target layout ({e})", **info)
    try:
        plan = express(mesh, src, dst, fine)
    except PlanError as e:
        if e.reason == "wrong_result" or not correct:
            return PlannerResult(planner, "wrong_data", f"moves the wrong data: checker: {e}", **info)
        return PlannerResult(planner, "rejected", f"checker: {e}", **info)
    except VerishardError as e:
        return PlannerResult(planner, "error", f"{type(e).__name__}: {e}", **info)
    if not correct:
        return PlannerResult(planner, "wrong_data",
                             "every device holds the right elements in the wrong local order", **info)
    return PlannerResult(planner, "valid", "", plan=plan, **info)
