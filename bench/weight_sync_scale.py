"""Benchmark: planning a weight sync at the size of real RL clusters, per
rank: each case plans one rank's own part (``plan_transfer`` under torch's
fake process group as that rank; DTensors on the ``meta`` device, so no
weight is ever allocated), once for a source rank (rank 0) and once for a
target rank (rank T), each in a fresh process.

    python bench/weight_sync_scale.py                       # writes bench/results/weight_sync_scale.md
    python bench/weight_sync_scale.py --before /work/main/python --cases 70b-dptp:32:16 --out -

Shapes of Llama-3-8B (291 tensors), Llama-3-70B (723 tensors) and a
DeepSeek-V3-like MoE with N routed experts per layer (``moeN``: 61 layers,
three 7168 x 2048 matrices per expert, norms, embeddings). Training
either FSDP ``Shard(0)`` over T ranks (``fsdp``) or a (T/8, 8) mesh with
Megatron's placements (``dptp``: q, k, v, gate, up, embeddings
``[Replicate, Shard(0)]``; o, down ``[Replicate, Shard(1)]``; norms
replicated); inference TP 8 replicated over I/8 groups with the same
placements, on ranks T..T+I-1. ``--before``: the same calls with another
checkout's package (e.g. the main branch) in the same run; a package whose
``plan_transfer`` plans every rank's schedule at once (main before
per-rank planning) is timed once, for the whole world. Reported: planning
seconds, the rank's cuts and rounds, the process's peak memory above what
it held before planning, and the busiest sender's bytes against the mean
over source ranks (per rank: from the verified world schedule of each
tensor layout, ``core.wplan``, whose restriction each rank plans). Seconds
are CPU seconds of the planning process (``time.process_time``): the cores
here are shared with other jobs, which makes wall time vary several-fold.
Each timed call starts after ``gc.collect()``: otherwise whichever call
happens to trip the full collection of the 47k DTensors built for the case
pays for it (0.4-0.6 s for the MoE).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB = 1 << 20

MODELS = {   # hidden, layers, intermediate, kv width, vocab
    "8b": (4096, 32, 14336, 1024, 128256),
    "70b": (8192, 80, 28672, 1024, 128256),
}
DEFAULT_CASES = ("8b-fsdp:32:16,8b-fsdp:64:32,70b-dptp:32:16,70b-dptp:64:32,70b-dptp:128:64,70b-dptp:256:128")


def layout(model: str):
    """``{name: (shape, kind)}``; kind: column, row, norm."""
    if model.startswith("moe"):   # DeepSeek-V3-like: 61 layers of routed experts (7168 x 2048 matrices), moeN: N experts
        h, inter, layers = 7168, 2048, 61
        out = {"model.embed_tokens.weight": ((129280, h), "column"), "lm_head.weight": ((129280, h), "column"),
               "model.norm.weight": ((h,), "norm")}
        for i in range(layers):
            p = f"model.layers.{i}."
            out.update({p + "input_layernorm.weight": ((h,), "norm"),
                        p + "post_attention_layernorm.weight": ((h,), "norm")})
            for e in range(int(model[3:])):
                q = f"{p}mlp.experts.{e}."
                out.update({q + "gate_proj.weight": ((inter, h), "column"), q + "up_proj.weight": ((inter, h), "column"),
                            q + "down_proj.weight": ((h, inter), "row")})
        return out
    h, layers, inter, kv, vocab = MODELS[model]
    out = {"model.embed_tokens.weight": ((vocab, h), "column"), "lm_head.weight": ((vocab, h), "column"),
           "model.norm.weight": ((h,), "norm")}
    for i in range(layers):
        p = f"model.layers.{i}."
        out.update({p + "self_attn.q_proj.weight": ((h, h), "column"),
                    p + "self_attn.k_proj.weight": ((kv, h), "column"),
                    p + "self_attn.v_proj.weight": ((kv, h), "column"),
                    p + "self_attn.o_proj.weight": ((h, h), "row"),
                    p + "mlp.gate_proj.weight": ((inter, h), "column"),
                    p + "mlp.up_proj.weight": ((inter, h), "column"),
                    p + "mlp.down_proj.weight": ((h, inter), "row"),
                    p + "input_layernorm.weight": ((h,), "norm"),
                    p + "post_attention_layernorm.weight": ((h,), "norm")})
    return out


def _tp(kind: str):
    from torch.distributed.tensor import Replicate, Shard
    return {"column": Shard(0), "row": Shard(1), "norm": Replicate()}[kind]


def one_case(case: str, budget_mib: float, role: str) -> dict:
    """Plan one case in this process as rank 0 (``role`` "source") or rank
    T ("target"); the figures as a dict."""
    import gc
    import inspect
    import resource

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import verishard
    import verishard.torch  # noqa: F401 - plan_transfer imports it on first use: not part of planning
    from verishard.torch.crossmesh import plan_transfer

    model, training, t, i = _parse(case)
    per_rank = "rank" in inspect.signature(plan_transfer).parameters
    rank = t if per_rank and role == "target" else 0
    dist.init_process_group("fake", rank=rank, world_size=t + i, store=FakeStore())
    if training == "fsdp":
        src_mesh = DeviceMesh("cpu", torch.arange(t))
    else:
        src_mesh = DeviceMesh("cpu", torch.arange(t).reshape(t // 8, 8))
    dst_mesh = DeviceMesh("cpu", torch.arange(t, t + i).reshape(i // 8, 8))
    tensors, targets = {}, {}
    for name, (shape, kind) in layout(model).items():
        pl = (Shard(0),) if training == "fsdp" else (Replicate(), _tp(kind))
        local = list(shape)
        for p, n in zip(pl, src_mesh.mesh.shape):
            if isinstance(p, Shard):
                local[p.dim] //= n
        tensors[name] = DTensor.from_local(torch.empty(local, dtype=torch.bfloat16, device="meta"), src_mesh, pl,
                                           run_check=False, shape=torch.Size(shape),
                                           stride=torch.empty(shape, device="meta").stride())
        targets[name] = (dst_mesh, (Replicate(), _tp(kind)))
    gc.collect()   # each timed call starts from a collected heap: it pays for the collections its own objects cause
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.process_time()
    error = None
    try:
        sched = plan_transfer(tensors, targets, budget_bytes=int(budget_mib * MiB))
    except verishard.VerishardError as e:
        sched, error = None, f"{type(e).__name__}: {str(e).splitlines()[-1].strip()[:160]}"
    seconds = time.process_time() - t0
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    out = {"case": case, "rank": rank if per_rank else "all", "tensors": len(tensors), "seconds": seconds,
           "peak_mib": peak, "error": error}
    if sched is not None:   # the next sync: the same layouts, dtypes and budget
        gc.collect()
        t0 = time.process_time()
        plan_transfer(tensors, targets, budget_bytes=int(budget_mib * MiB))
        out["again_seconds"] = time.process_time() - t0
        sent = _sent_per_rank(sched) if per_rank else _sent_in_rounds(sched)
        mean = sum(sent.values()) / t
        out |= {"cuts": sum(len(rd) for rd in sched.rounds), "rounds": len(sched.rounds),
                "busiest_sent_gib": max(sent.values()) / 2**30, "busiest_over_mean": max(sent.values()) / mean}
    dist.destroy_process_group()
    return out


def _sent_in_rounds(sched) -> dict[int, int]:
    """Bytes each rank sends, read off a world schedule's rounds."""
    size = {m.name: m.dtype.itemsize for m in sched.moves}
    sent: dict[int, int] = {}
    for rd in sched.rounds:
        for key, a, b, box in rd:
            if a != b:
                n = size[key if isinstance(key, str) else key[0]]
                for _, length in box:
                    n *= length
                sent[a] = sent.get(a, 0) + n
    return sent


def _sent_per_rank(sched) -> dict[int, int]:
    """Bytes each rank sends, from the verified world schedule of each
    layout (``core.wplan``, once per layout, rotation and item size: the
    schedule each rank plans its part of), weighted by its tensors."""
    from collections import Counter

    from verishard import core
    groups = Counter((m.plan.src, m.plan.src_ranks, m.plan.dst, m.plan.dst_ranks, m.plan.start, m.dtype.itemsize)
                     for m in sched.moves)
    sent: dict[int, int] = {}
    for (s, r1, d, r2, start, size), count in groups.items():
        for j, ps in enumerate(core.wplan(s, r1, d, r2, start)):
            for p in ps:
                if p.src != r2[j]:
                    n = count * size
                    for _, length in p.box:
                        n *= length
                    sent[p.src] = sent.get(p.src, 0) + n
    return sent


def _parse(case: str):
    name, t, i = case.split(":")
    model, training = name.split("-")
    return model, training, int(t), int(i)


def run_case(case: str, budget_mib: float, pythonpath: str, timeout: float, role: str) -> dict:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    cmd = [sys.executable, os.path.abspath(__file__), "--one", case, "--role", role, "--budget-mib", str(budget_mib)]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"case": case, "error": f"over {timeout:.0f} s"}
    if p.returncode != 0:
        return {"case": case, "error": (p.stderr.strip().splitlines() or ["?"])[-1][:160]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def report(rows, args, command) -> str:
    lines = ["# Weight-sync planning at scale, per rank", "",
             f"Command: `{command}`", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared); Python {platform.python_version()}. "
             "'this': one process plans one rank's own part (torch's fake process group as that rank, DTensors on "
             "the meta device), for rank 0 (a source) and for rank T (a target), each in a fresh process. "
             "'before': the package at --before (another checkout) in the same run; where it plans every rank's "
             "schedule at once (rank 'all'), that is its cost per rank too. "
             f"Budget {args.budget_mib:g} MiB per round; bf16. Seconds: CPU seconds of the planning process "
             "(the cores are shared; wall time varies with the load), each timed call after a full garbage "
             "collection (it pays for the collections its own objects cause, not the setup's). Peak: the process's RSS high-water mark above "
             "what it held before planning. Cuts and rounds: the rank's own (all ranks' for 'all'). Busiest sender / "
             "mean: the bytes the busiest source rank sends over the mean over all source ranks (per rank: from "
             "the verified world schedule of each tensor layout, which every rank's part restricts). Again s: "
             "planning the same sync a second time.", "",
             "| code | model, training layout | T -> I | tensors | rank | planning s | again s | cuts | rounds | "
             "peak MiB | busiest sender GiB | busiest / mean |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, r in rows:
        model, training, t, i = _parse(r["case"])
        what = f"{model.upper()}, {'FSDP' if training == 'fsdp' else '(dp, tp)'}"
        if r.get("error"):
            lines.append(f"| {label} | {what} | {t} -> {i} | {r.get('tensors', '')} | {r.get('rank', '')} | "
                         f"{r.get('seconds', float('nan')):.2f} | | refused: {r['error']} | | | | |")
            continue
        lines.append(f"| {label} | {what} | {t} -> {i} | {r['tensors']} | {r['rank']} | {r['seconds']:.2f} | "
                     f"{r['again_seconds']:.2f} | {r['cuts']:,} | "
                     f"{r['rounds']} | {r['peak_mib']:.0f} | {r['busiest_sent_gib']:.2f} | "
                     f"{r['busiest_over_mean']:.2f} |")
    growth = _growth(rows)
    if growth:
        lines += ["", "Growth: the exponent of planning seconds against the ranks (T + I) and against the rank's own "
                  "cuts (where they grow), fitted (least squares on logs) over a series' sizes; the slower of its two ranks "
                  "per size.", "",
                  "| code | model, training layout | sizes | exponent in ranks | exponent in own cuts |",
                  "|---|---|---|---:|---:|"] + growth
    return "\n".join(lines) + "\n"


def _growth(rows) -> list[str]:
    import math
    series: dict[tuple, dict] = {}
    for label, r in rows:
        if r.get("error") or r.get("seconds", 0) <= 0:
            continue
        model, training, t, i = _parse(r["case"])
        slot = series.setdefault((label, model, training), {})
        if (t + i) not in slot or slot[t + i][0] < r["seconds"]:
            slot[t + i] = (r["seconds"], max(r["cuts"], 1))
    out = []
    for (label, model, training), pts in series.items():
        if len(pts) < 2:
            continue

        def slope(xs, ys):
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            den = sum((x - mx) ** 2 for x in xs)
            return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else float("nan")
        ns = sorted(pts)
        ys = [math.log(pts[n][0]) for n in ns]
        cuts = [pts[n][1] for n in ns]   # in own cuts only where they grow (a constant count has no exponent)
        in_cuts = f"{slope([math.log(c) for c in cuts], ys):.2f}" if max(cuts) >= 2 * min(cuts) else "-"
        out.append(f"| {label} | {model.upper()}, {'FSDP' if training == 'fsdp' else '(dp, tp)'} | "
                   f"{', '.join(map(str, ns))} | {slope([math.log(n) for n in ns], ys):.2f} | {in_cuts} |")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=DEFAULT_CASES, help=f"model-training:T:I, comma separated (default {DEFAULT_CASES})")
    p.add_argument("--budget-mib", type=float, default=64, help="round budget in MiB (default 64)")
    p.add_argument("--before", default=None, help="another checkout's python/ directory, planned in the same run")
    p.add_argument("--timeout", type=float, default=240, help="seconds per case and code (default 240)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "weight_sync_scale.md"), help="markdown file, or -")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    p.add_argument("--role", default="source", choices=("source", "target"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one_case(args.one, args.budget_mib, args.role)))
        return 0
    codes = [("this", os.path.join(ROOT, "python"))] + ([("before", args.before)] if args.before else [])
    rows = []
    for case in args.cases.split(","):
        for label, path in codes:
            for role in ("source", "target"):
                r = run_case(case, args.budget_mib, path, args.timeout, role)
                rows.append((label, r))
                print(label, r, file=sys.stderr, flush=True)
                if r.get("rank") == "all" or (r.get("error") or "").startswith("over"):
                    break    # one world plan stands for every rank; a timeout would only repeat
    command = "python bench/weight_sync_scale.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    text = report(rows, args, command)
    if args.out == "-":
        print(text)
    else:
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
