"""Cross-check of partial-sum redistributions: ours, XLA and DTensor.

A partial source (the output of a matmul whose contraction dimension was
sharded: JAX ``unreduced``, DTensor ``Partial("sum")``) is given to each
planner, and each planner's program runs on the same random integer
representation of one global array (:func:`~verishard.runtime.split_partial`):

* ``ours``: :func:`verishard.plan`'s plan (accepted by the verified checker,
  ``Pchecker.pcheck``), executed by the simulator;
* ``xla``: ``jit(identity)`` from the unreduced sharding to the target,
  compiled by XLA; its HLO is executed by the cross-check's interpreter
  (:mod:`verishard.crosscheck.hlo`), and by XLA itself on the devices;
* ``dtensor-greedy`` / ``dtensor-mincost``: DTensor's transforms for the
  ``Partial`` placements, replayed with DTensor's data semantics
  (:func:`verishard.crosscheck.torch_dtensor.replay`; its Replicate ->
  Partial("sum") divides by the group size, so the replay runs in float64).

A result is ``correct`` when the value every device represents (the sum of
its pending group's arrays; the arrays themselves for a plain target) is the
target block of the global array, on every device. The checker judges only
our plans here: the other planners' programs are judged by that execution
(translating a reduction back into our IR from observed values, as the plain
cross-check does for data movement, is not done). Peak is the largest local
array a program holds at a step, per device, in elements (type level, as in
the plain cross-check); received is per step the most any device receives,
summed, with an all-reduce counted as a ring (``2 (s - s / n)``) and a
reduce-scatter as ``s - s / n``, for every planner.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import VerishardError
from ..mesh import Mesh
from ..sharding import ArrayType
from .harness import Case, all_types

__all__ = ["PartialResult", "partial_types", "partial_cases", "run_partial", "PLANNERS"]

PLANNERS = ("ours", "xla", "dtensor-greedy", "dtensor-mincost")


@dataclass
class PartialResult:
    """One planner on one case: ``status`` is ``correct``, ``wrong_data``,
    ``unsupported`` (the planner refused) or ``error``."""

    planner: str
    status: str
    reason: str = ""
    program: tuple[str, ...] = ()
    peak: int | None = None
    received: int | None = None
    kinds: dict[str, int] = field(default_factory=dict)


def partial_types(mesh: Mesh, shape: Sequence[int]) -> list[ArrayType]:
    """Every type over whole axes with at least one axis pending a sum (the
    axes left unused by a plain type, any non-empty subset of them).

    >>> [str(t) for t in partial_types(Mesh.parse("x=2,y=2"), (4,))]
    ['[2{x}4] partial{y}', '[2{y}4] partial{x}', '[4] partial{x,y}', '[4] partial{x}', '[4] partial{y}']
    """
    out = set()
    for t in all_types(mesh, shape):
        free = [p for p in range(len(mesh.parts)) if p not in {q for d in t.dims for q in d.parts}]
        for k in range(1, len(free) + 1):
            for pend in itertools.combinations(free, k):
                out.add(ArrayType(mesh, t.dims, partial=pend))
    return sorted(out, key=str)


def partial_cases(mesh: Mesh | str, shape: Sequence[int], limit: int | None = None,
                  seed: int = 0) -> tuple[list[Case], int]:
    """Pairs (partial source, any plain or partial target), every one or a
    deterministic sample of ``limit``, and the number of pairs.

    >>> cases, total = partial_cases("x=2", (4,))
    >>> total, [(str(c.src), str(c.dst)) for c in cases]
    (3, [('[4] partial{x}', '[2{x}4]'), ('[4] partial{x}', '[4]'), ('[4] partial{x}', '[4] partial{x}')])
    """
    if isinstance(mesh, str):
        mesh = Mesh.parse(mesh)
    srcs = partial_types(mesh, shape)
    dsts = sorted(all_types(mesh, shape), key=str) + srcs
    total = len(srcs) * len(dsts)
    idx = range(total)
    if limit is not None and limit < total:
        idx = sorted(np.random.default_rng(seed).choice(total, size=limit, replace=False).tolist())
    return [Case(mesh, srcs[k // len(dsts)], dsts[k % len(dsts)]) for k in idx], total


def _expected(case: Case, A: np.ndarray) -> list[np.ndarray]:
    from ..runtime import distribute
    return distribute(A, case.mesh, case.dst.plain)


def _correct(case: Case, outs: Sequence[np.ndarray], A: np.ndarray) -> bool:
    from ..runtime import represented
    want = _expected(case, A)
    got = represented([np.asarray(o) for o in outs], case.dst)
    return all(g.shape == w.shape and np.array_equal(g, w) for g, w in zip(got, want))


def _ours(case: Case, terms: list[np.ndarray], A: np.ndarray) -> PartialResult:
    from ..plan import plan
    from ..runtime import simulate
    p = plan(case.mesh, case.src, case.dst)
    r = simulate(p, terms, check_data=False)
    kinds: dict[str, int] = {}
    for c in p.collectives:
        kinds[type(c).__name__] = kinds.get(type(c).__name__, 0) + 1
    ok = _correct(case, r.outputs, A)
    return PartialResult("ours", "correct" if ok else "wrong_data", "", tuple(map(str, p.collectives)),
                         p.peak, p.traffic, kinds)


def _xla(case: Case, terms: list[np.ndarray], A: np.ndarray) -> PartialResult:
    import jax

    from .hlo import HloError, Interpreter, parse_module
    from .xla import _CaptureStderr
    from ..jax import to_named_sharding
    try:
        s = to_named_sharding(case.src)
        d = to_named_sharding(case.dst, s.mesh)
        fn = jax.jit(lambda a: a, in_shardings=s, out_shardings=d)
        with _CaptureStderr():
            compiled = fn.lower(jax.ShapeDtypeStruct(case.src.global_shape, terms[0].dtype, sharding=s)).compile()
    except Exception as e:  # XLA refused the case
        return PartialResult("xla", "unsupported", f"JAX/XLA refused: {type(e).__name__}: {str(e)[:160]}")
    text = compiled.as_text()
    try:
        run = Interpreter(parse_module(text), case.mesh.num_devices).run([terms])
    except (HloError, KeyError, ValueError, IndexError) as e:
        return PartialResult("xla", "error", f"the HLO interpreter cannot run it: {e}")
    kinds: dict[str, int] = {}
    for ev in run.collectives:
        kinds[ev.opcode] = kinds.get(ev.opcode, 0) + 1
    program = tuple(f"{ev.opcode} %{ev.name}" for ev in run.collectives)
    received = sum(int(ev.received.max()) for ev in run.collectives)
    ok = _correct(case, run.outputs, A)
    reason = ""
    try:  # XLA's own run on the devices, on the same terms
        devices = list(s.mesh.devices.flat)
        x = jax.make_array_from_single_device_arrays(
            case.src.global_shape, s, [jax.device_put(terms[r], dev) for r, dev in enumerate(devices)])
        y = compiled(x)
        order = {dev.id: r for r, dev in enumerate(d.mesh.devices.flat)}
        got: list = [None] * case.mesh.num_devices
        for shard in y.addressable_shards:
            got[order[shard.device.id]] = np.asarray(shard.data)
        if _correct(case, got, A) != ok:
            return PartialResult("xla", "error", "our HLO interpreter disagrees with XLA's own result",
                                 program, run.peak_elements, received, kinds)
        if not ok and case.dst.partial:  # JAX's own reading of its result: reduce it with JAX
            plain = to_named_sharding(case.dst.plain, s.mesh)
            z = jax.jit(lambda a: jax.sharding.reshard(a, plain))(y)
            same = np.array_equal(np.asarray(z), A)
            reason = ("JAX's own reduction of XLA's result (jax.sharding.reshard to "
                      f"{plain.spec}) {'gives' if same else 'does not give'} the array either")
    except Exception as e:  # XLA cannot take or give these buffers as arrays: interpreter only
        reason = f"judged by the HLO interpreter only (XLA's own run: {type(e).__name__})"
    return PartialResult("xla", "correct" if ok else "wrong_data", reason, program, run.peak_elements,
                         received, kinds)


def _dtensor(case: Case, terms: list[np.ndarray], A: np.ndarray, min_cost: bool) -> PartialResult:
    from ..torch.dtensor import describe_transform
    from .torch_dtensor import dtensor_transforms, replay
    name = "dtensor-mincost" if min_cost else "dtensor-greedy"
    if len(case.mesh.parts) != len(case.mesh.axes):
        return PartialResult(name, "unsupported", "DTensor mesh dimensions are whole axes; the mesh splits one")
    try:
        infos, _ = dtensor_transforms(case.mesh, case.src, case.dst, min_cost)
    except Exception as e:  # the planner refused
        return PartialResult(name, "unsupported", f"DTensor's planner refused: {type(e).__name__}: {e}")
    xs = [t.astype(np.float64) for t in terms]
    peak, received, kinds, program = case.src.size, 0, {}, []
    for info in infos:
        step = replay(case.mesh, info, xs)
        if step is None:
            continue
        kind, xs, rec = step
        program.append(describe_transform(info))
        if kind == "unsupported":
            a, b = info.src_dst_placements
            why = (f"DTensor's redistribute refuses {describe_transform(info)} when it runs (Shard to Partial: "
                   f"'not supported yet')" if a.is_shard() and b.is_partial()
                   else f"transform {describe_transform(info)} is not modelled")
            return PartialResult(name, "unsupported", why, tuple(program))
        if kind not in ("local", "to-partial"):
            kinds[kind] = kinds.get(kind, 0) + 1
        received += int(rec.max())
        peak = max(peak, max(x.size for x in xs))
    ok = _correct(case, xs, A.astype(np.float64))
    return PartialResult(name, "correct" if ok else "wrong_data", "", tuple(program), peak, received, kinds)


def run_partial(case: Case, planners: Sequence[str] = PLANNERS, seed: int = 0) -> list[PartialResult]:
    """Every planner on one case, on one random integer representation.

    >>> m = Mesh.parse("x=2,y=2")
    >>> c = Case(m, ArrayType.parse("[4, 4] partial{x}", m), ArrayType.parse("[2{x}4, 4]", m))
    >>> [(r.planner, r.status, r.program, r.peak) for r in run_partial(c, ("ours",))]
    [('ours', 'correct', ('ReduceScatter(0, x)',), 16)]
    """
    from ..runtime import split_partial
    from .trace import global_values
    A = global_values(case.src.global_shape).astype(np.int32)
    terms = split_partial(A, case.mesh, case.src, np.random.default_rng(seed))
    out = []
    for name in planners:
        try:
            if name == "ours":
                out.append(_ours(case, terms, A))
            elif name == "xla":
                out.append(_xla(case, terms, A))
            elif name in ("dtensor-greedy", "dtensor-mincost"):
                out.append(_dtensor(case, terms, A, name == "dtensor-mincost"))
            else:
                raise ValueError(f"unknown planner {name!r}; known: {', '.join(PLANNERS)}")
        except (VerishardError, RuntimeError) as e:
            out.append(PartialResult(name, "error", f"{type(e).__name__}: {e}"))
    return out
