"""The partitioner's GPU cost model against a real GPU (run where CUDA is present).

The shipped platforms price a node on a GPU from its spec sheet:
``launch * kernels + flops / (peak_flops * efficiency) + bytes / (mem_bw * efficiency)``
(``verishard.partition.platform``), with efficiencies and launch cost assumed, not measured.
This script checks that model on the GPU at hand: a kind built from that GPU's spec-sheet
peak FP32 rate and memory bandwidth (``--peak-flops``, ``--mem-bw``) with the shipped GPU
kinds' efficiencies and launch cost, against the measured time of every node of the
benchmark's graphs (``profile_fx(device="cuda")``: the fx graph run node by node, each
node between two synchronizations, median of ``--repeats`` runs), in strict FP32 (TF32 off,
the arithmetic the model's FP32 peak describes) and with PyTorch's defaults (cuDNN may use
TF32 tensor cores for convolutions). Also the whole forward pass (no interpreter) for scale.

Usage: python bench/partition_gpu.py --gpu-name "NVIDIA H200" --peak-flops 67e12 --mem-bw 4.8e12 --out FILE.md
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys
import time

import torch

from verishard.partition import model_graph
from verishard.partition.platform import load_platform, platform_from_json
from verishard.partition.profile import attach_times, profile_fx

MODELS = ["resnet18", "vgg11", "transformer", "randwire-ws"]


def gpu_platform(name: str, peak_flops: float, mem_bw: float):
    """One-device platform of a GPU kind from its spec sheet, with the shipped GPU kinds' assumptions."""
    shipped = load_platform("cpu+2gpu").doc["kinds"]["v100-pcie"]
    doc = {"name": "gpu", "host": "gpu",
           "kinds": {"gpu": {"peak_flops": peak_flops, "mem_bw": mem_bw, "launch": shipped["launch"],
                             "efficiency": dict(shipped["efficiency"])}},
           "devices": [{"name": "gpu", "kind": "gpu", "memory": 1e12}],
           "default_link": {"alpha": 0.0, "beta": 1e30}, "links": [], "groups": []}
    return platform_from_json(doc)


def whole_forward(g, repeats: int) -> float:
    gm, x = g.meta["gm"].to("cuda"), g.meta["example"].to("cuda")
    ts = []
    with torch.no_grad():
        for _ in range(repeats + 3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            gm(x)
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts[3:])


def geomean(xs):
    xs = [x for x in xs if x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu-name", required=True)
    ap.add_argument("--peak-flops", type=float, required=True, help="spec-sheet FP32 FLOP/s (no tensor cores)")
    ap.add_argument("--mem-bw", type=float, required=True, help="spec-sheet memory bandwidth, bytes/s")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    pf = gpu_platform(args.gpu_name, args.peak_flops, args.mem_bw)
    lines = [f"# The partitioner's GPU cost model on a {torch.cuda.get_device_name()}", "",
             f"Produced by `python bench/partition_gpu.py {' '.join(sys.argv[1:])}` on {datetime.date.today()} "
             f"(torch {torch.__version__}). Spec-sheet figures given: {args.peak_flops / 1e12:g} TFLOP/s FP32, "
             f"{args.mem_bw / 1e12:g} TB/s; efficiencies and launch cost as the shipped GPU kinds "
             f"({pf.doc['kinds']['gpu']['efficiency']}, {pf.doc['kinds']['gpu']['launch'] * 1e6:g} us per kernel).",
             "Measured: each graph node (after contraction) between two `torch.cuda.synchronize()`, median of "
             f"{args.repeats} runs after a warm-up; ratio = measured / predicted. `strict FP32`: "
             "`torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False`.", "",
             "| model | mode | nodes | predicted ms (sum) | measured ms (sum of nodes) | measured / predicted | "
             "node ratio geomean | node ratio min / max | whole forward ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for model in args.models.split(","):
        for mode, tf32 in (("strict FP32", False), ("defaults", None)):
            if tf32 is None:
                torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = True, False
            else:
                torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tf32
            g = model_graph(model, batch=8)
            pred = {n: pf.node_time(a, "gpu") for n, a in g.g.nodes(data=True)}
            attach_times(g, profile_fx(g, repeats=args.repeats, device="cuda"), kind="measured")
            meas = {n: a["time"]["measured"] for n, a in g.g.nodes(data=True)}
            ratios = [meas[n] / pred[n] for n in pred if pred[n] > 0 and meas[n] > 0]
            whole = whole_forward(g, args.repeats)
            lines.append(f"| {model} | {mode} | {len(pred)} | {sum(pred.values()) * 1e3:.3f} | "
                         f"{sum(meas.values()) * 1e3:.3f} | {sum(meas.values()) / sum(pred.values()):.2f} | "
                         f"{geomean(ratios):.2f} | {min(ratios):.2f} / {max(ratios):.2f} | {whole * 1e3:.3f} |")
            print(lines[-1], flush=True)
    lines.append("")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
