"""Benchmark: planning a weight sync at the size of real RL clusters, one
process standing in for every rank (torch's fake process group; DTensors
on the ``meta`` device, so no weight is ever allocated).

    python bench/weight_sync_scale.py                       # writes bench/results/weight_sync_scale.md
    python bench/weight_sync_scale.py --before /work/main/python --cases 70b-dptp:32:16 --out -

Shapes of Llama-3-8B (291 tensors), Llama-3-70B (723 tensors) and a
DeepSeek-V3-like MoE with N routed experts per layer (``moeN``: 61 layers,
three 7168 x 2048 matrices per expert, norms, embeddings). Training
either FSDP ``Shard(0)`` over T ranks (``fsdp``) or a (T/8, 8) mesh with
Megatron's placements (``dptp``: q, k, v, gate, up, embeddings
``[Replicate, Shard(0)]``; o, down ``[Replicate, Shard(1)]``; norms
replicated); inference TP 8 replicated over I/8 groups with the same
placements, on ranks T..T+I-1. Each case runs ``plan_transfer`` once in a
fresh process (``--before``: also with another checkout's package, e.g. the
main branch, in the same run) and reports planning seconds, the schedule's
cuts and rounds, the process's peak memory above what it held before
planning, and the busiest sender's bytes against the mean over source ranks.
Seconds are CPU seconds of the planning process (``time.process_time``): the
cores here are shared with other jobs, which makes wall time vary several-fold.
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


def one_case(case: str, budget_mib: float) -> dict:
    """Plan one case in this process; the figures as a dict."""
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
    dist.init_process_group("fake", rank=0, world_size=t + i, store=FakeStore())
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
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.process_time()
    error = None
    try:
        sched = plan_transfer(tensors, targets, budget_bytes=int(budget_mib * MiB))
    except verishard.VerishardError as e:
        sched, error = None, f"{type(e).__name__}: {str(e).splitlines()[-1].strip()[:160]}"
    seconds = time.process_time() - t0
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    out = {"case": case, "tensors": len(tensors), "seconds": seconds, "peak_mib": peak, "error": error}
    if sched is not None:   # the next sync: the same layouts, dtypes and budget
        t0 = time.process_time()
        plan_transfer(tensors, targets, budget_bytes=int(budget_mib * MiB))
        out["again_seconds"] = time.process_time() - t0
    if sched is not None:
        size = {m.name: m.dtype.itemsize for m in sched.moves}
        sent: dict[int, int] = {}
        cuts = 0
        for rd in sched.rounds:
            for key, a, b, box in rd:
                cuts += 1
                if a != b:
                    n = size[key if isinstance(key, str) else key[0]]
                    for _, length in box:
                        n *= length
                    sent[a] = sent.get(a, 0) + n
        mean = sum(sent.values()) / t
        out |= {"cuts": cuts, "rounds": len(sched.rounds), "busiest_sent_gib": max(sent.values()) / 2**30,
                "busiest_over_mean": max(sent.values()) / mean}
    dist.destroy_process_group()
    return out


def _parse(case: str):
    name, t, i = case.split(":")
    model, training = name.split("-")
    return model, training, int(t), int(i)


def run_case(case: str, budget_mib: float, pythonpath: str, timeout: float) -> dict:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    cmd = [sys.executable, os.path.abspath(__file__), "--one", case, "--budget-mib", str(budget_mib)]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"case": case, "error": f"over {timeout:.0f} s"}
    if p.returncode != 0:
        return {"case": case, "error": (p.stderr.strip().splitlines() or ["?"])[-1][:160]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def report(rows, args, command) -> str:
    lines = ["# Weight-sync planning at scale", "",
             f"Command: `{command}`", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared); Python {platform.python_version()}. "
             "One process plans for every rank (torch's fake process group, DTensors on the meta device); "
             f"budget {args.budget_mib:g} MiB per round; bf16. Seconds: CPU seconds of the planning process "
             "(the cores are shared; wall time varies with the load). 'before': the same calls with the "
             "package at --before (another checkout), in the same run. Peak: the process's RSS high-water mark above "
             "what it held before planning. Busiest sender / mean: the bytes the busiest source rank sends "
             "over the mean over all source ranks. Again s: planning the same sync a second time.", "",
             "| code | model, training layout | T -> I | tensors | planning s | again s | cuts | rounds | peak MiB | "
             "busiest sender GiB | busiest / mean |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, r in rows:
        model, training, t, i = _parse(r["case"])
        what = f"{model.upper()}, {'FSDP' if training == 'fsdp' else '(dp, tp)'}"
        if r.get("error"):
            lines.append(f"| {label} | {what} | {t} -> {i} | {r.get('tensors', '')} | "
                         f"{r.get('seconds', float('nan')):.2f} | | refused: {r['error']} | | | | |")
            continue
        lines.append(f"| {label} | {what} | {t} -> {i} | {r['tensors']} | {r['seconds']:.2f} | "
                     f"{r['again_seconds']:.2f} | {r['cuts']:,} | "
                     f"{r['rounds']} | {r['peak_mib']:.0f} | {r['busiest_sent_gib']:.2f} | "
                     f"{r['busiest_over_mean']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=DEFAULT_CASES, help=f"model-training:T:I, comma separated (default {DEFAULT_CASES})")
    p.add_argument("--budget-mib", type=float, default=64, help="round budget in MiB (default 64)")
    p.add_argument("--before", default=None, help="another checkout's python/ directory, planned in the same run")
    p.add_argument("--timeout", type=float, default=240, help="seconds per case and code (default 240)")
    p.add_argument("--out", default=os.path.join(HERE, "results", "weight_sync_scale.md"), help="markdown file, or -")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one_case(args.one, args.budget_mib)))
        return 0
    codes = [("this", os.path.join(ROOT, "python"))] + ([("before", args.before)] if args.before else [])
    rows = []
    for case in args.cases.split(","):
        for label, path in codes:
            r = run_case(case, args.budget_mib, path, args.timeout)
            rows.append((label, r))
            print(label, r, file=sys.stderr, flush=True)
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
