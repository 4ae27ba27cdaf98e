"""The 4-process job of tests/test_torch_targets.py: ``python
tests/torch_targets_job.py OUTDIR`` forks 4 gloo processes; every rank runs
every case and writes ``OUTDIR/rank<r>.json``.

Training holds every tensor FSDP-style (``Shard(0)`` over ranks 0 and 1, bf16);
inference is tensor parallel over all 4 ranks. One ``transfer`` moves them into
the layouts inference engines hold (``verishard.torch.fused`` and
``block_fp8`` targets), in rounds of a small budget. Each rank compares its
result with a vLLM-style reference built here: the full tensors (as a
gather would give them), then the engine's own split (vLLM's
``QKVParallelLinear`` / ``MergedColumnParallelLinear`` / ``VocabParallelEmbedding``
weight loaders, Megatron's interleaved QKV) or a per-block FP8 quantization of
the full tensor written out block by block; and its bytes received with the
reference's (every full tensor it uses).
"""

from __future__ import annotations

import sys
import traceback

from torch_job import error_record, run_cases, same

NPROCS = 4
TP = 4
BUDGET = 1024
HIDDEN, HEAD_DIM, HEADS, KV_HEADS = 16, 4, 8, 2        # kv heads fewer than TP: replicated
M_GROUPS = 4                                            # Megatron: query groups (kv heads)
VOCAB, PADDED = 50, 64
FP8_SHAPES = {"w8": ((300, 200), "tp"), "w8_2d": ((260, 300), "2d")}
SENTINEL = -7.0
F_HEAD_DIM, F_HIDDEN, F_BLOCK = 12, 40, (16, 16)        # fused block-FP8 QKV: shards cut 16 x 16 blocks


def full(shape, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float32)
    if len(shape) == 2 and shape[0] > 128:
        x[:128, :128] = 0            # an all-zero block
        x[128:256, :] *= 1e-3        # small blocks
    return x.to(torch.bfloat16)


def reference_fp8(x, block):
    """DeepSeek-V3's recipe written block by block on the full tensor:
    scale = max(amax, 1e-4) / float8 max, q = x / scale cast to float8."""
    import torch
    b0, b1 = block
    fmax = torch.finfo(torch.float8_e4m3fn).max
    rows, cols = x.shape
    nr, nc = -(-rows // b0), -(-cols // b1)
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    scale = torch.empty(nr, nc, dtype=torch.float32)
    for i in range(nr):
        for j in range(nc):
            blk = x[i * b0:(i + 1) * b0, j * b1:(j + 1) * b1].float()
            s = torch.clamp(blk.abs().max(), min=1e-4) / fmax
            scale[i, j] = s
            q[i * b0:(i + 1) * b0, j * b1:(j + 1) * b1] = (blk / s).clamp(-fmax, fmax).to(torch.float8_e4m3fn)
    return q, scale


def targets_case(add, rank) -> None:
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from verishard.torch import block_fp8, fused, plan_transfer, transfer
    train = DeviceMesh("cpu", [0, 1])
    tp = DeviceMesh("cpu", list(range(TP)), mesh_dim_names=("tp",))
    m22 = DeviceMesh("cpu", [[0, 1], [2, 3]])
    shapes = {"q": (HEADS * HEAD_DIM, HIDDEN), "k": (KV_HEADS * HEAD_DIM, HIDDEN), "v": (KV_HEADS * HEAD_DIM, HIDDEN),
              "gate": (24, HIDDEN), "up": (24, HIDDEN),
              "mq": (HEADS * HEAD_DIM, HIDDEN), "mk": (M_GROUPS * HEAD_DIM, HIDDEN),
              "mv": (M_GROUPS * HEAD_DIM, HIDDEN),
              "embed": (VOCAB, HIDDEN), "fq": (HEADS * F_HEAD_DIM, F_HIDDEN), "fk": (KV_HEADS * F_HEAD_DIM, F_HIDDEN),
              "fv": (KV_HEADS * F_HEAD_DIM, F_HIDDEN)} | {n: s for n, (s, _) in FP8_SHAPES.items()}
    G = {n: full(s, seed=10 + i) for i, (n, s) in enumerate(sorted(shapes.items()))}
    tensors = {n: distribute_tensor(g, train, (Shard(0),), src_data_rank=None) for n, g in G.items()}
    embed_out = torch.full((PADDED // TP, HIDDEN), SENTINEL, dtype=torch.bfloat16)
    targets = {
        "qkv_proj": fused(tp, [Shard(0)], [("q", HEADS), ("k", KV_HEADS), ("v", KV_HEADS)]),
        "gate_up_proj": fused(tp, [Shard(0)], ["gate", "up"]),
        "linear_qkv": fused(tp, [Shard(0)], ["mq", "mk", "mv"], groups=M_GROUPS),
        "embed_tokens": fused(tp, [Shard(0)], ["embed"], size=PADDED, out=embed_out),
        "fp8_qkv": fused(tp, [Shard(0)], [("fq", HEADS), ("fk", KV_HEADS), ("fv", KV_HEADS)],
                         convert=block_fp8(F_BLOCK)),
        "w8": (tp, [Shard(0)], block_fp8((128, 128))),
        "w8_2d": (m22, [Shard(0), Shard(1)], block_fp8((128, 128))),
    }
    # the vLLM-style reference: full tensors, then the engine's own split
    r = rank
    kv = r // (TP // KV_HEADS)
    want = {
        "qkv_proj": torch.cat([G["q"].chunk(TP)[r], G["k"][kv * HEAD_DIM:(kv + 1) * HEAD_DIM],
                               G["v"][kv * HEAD_DIM:(kv + 1) * HEAD_DIM]]),
        "gate_up_proj": torch.cat([G["gate"].chunk(TP)[r], G["up"].chunk(TP)[r]]),
    }
    per = HEADS // M_GROUPS * HEAD_DIM
    megatron = torch.cat([torch.cat([G["mq"][g * per:(g + 1) * per], G["mk"][g * HEAD_DIM:(g + 1) * HEAD_DIM],
                                     G["mv"][g * HEAD_DIM:(g + 1) * HEAD_DIM]]) for g in range(M_GROUPS)])
    want["linear_qkv"] = megatron.chunk(TP)[r]
    emb = torch.full((PADDED // TP, HIDDEN), SENTINEL, dtype=torch.bfloat16)
    lo, hi = r * PADDED // TP, min((r + 1) * PADDED // TP, VOCAB)
    if hi > lo:
        emb[:hi - lo] = G["embed"][lo:hi]
    want["embed_tokens"] = emb
    # vLLM's block-FP8 QKV: every part quantized whole, then split as above; the scales of the blocks each
    # part's shard touches, concatenated
    fq, fs, first = [], [], None
    for name, lo, n in (("fq", r * HEADS * F_HEAD_DIM // TP, HEADS * F_HEAD_DIM // TP),
                        ("fk", kv * F_HEAD_DIM, F_HEAD_DIM), ("fv", kv * F_HEAD_DIM, F_HEAD_DIM)):
        q8, s8 = reference_fp8(G[name], F_BLOCK)
        fq.append(q8[lo:lo + n].view(torch.uint8))
        fs.append(s8[lo // F_BLOCK[0]:(lo + n - 1) // F_BLOCK[0] + 1])
        first = first or (lo // F_BLOCK[0], 0)
    want_fp8_qkv = (torch.cat(fq), torch.cat(fs), first)
    parts = {"fp8_qkv": ["fq", "fk", "fv"], "qkv_proj": ["q", "k", "v"], "gate_up_proj": ["gate", "up"], "linear_qkv": ["mq", "mk", "mv"],
             "embed_tokens": ["embed"], "w8": ["w8"], "w8_2d": ["w8_2d"]}
    rec = {"case": "targets"}
    try:
        sched = plan_transfer(tensors, targets, budget_bytes=BUDGET)
        got = transfer(tensors, targets, budget_bytes=BUDGET)
        rec["names"] = sorted(got)
        rec["same"] = {n: same(got[n], want[n]) for n in want}
        rec["out_is_param"] = got["embed_tokens"] is embed_out
        res = got["fp8_qkv"]
        rec["same"]["fp8_qkv"] = (res.weight.dtype == torch.float8_e4m3fn
                                  and same(res.weight.view(torch.uint8), want_fp8_qkv[0]))
        rec["same"]["fp8_qkv.scale"] = same(res.weight_scale_inv, want_fp8_qkv[1])
        rec["same"]["fp8_qkv.first_block"] = tuple(res.first_block) == want_fp8_qkv[2]
        for n, (shape, on) in FP8_SHAPES.items():
            q, scale = reference_fp8(G[n], (128, 128))
            mesh, pl = targets[n][0], targets[n][1]
            want_q = distribute_tensor(q.view(torch.uint8), mesh, pl, src_data_rank=None).to_local()
            res = got[n]
            # the scales of the blocks the shard touches, read off the full scale tensor
            coord = mesh.get_coordinate()
            rows = torch.arange(shape[0]).chunk(mesh.size(0))[coord[0]]
            cols = (torch.arange(shape[1]).chunk(mesh.size(1))[coord[1]] if on == "2d" else torch.arange(shape[1]))
            want_s = scale[rows[0] // 128:(rows[-1] // 128) + 1, cols[0] // 128:(cols[-1] // 128) + 1]
            rec["same"][n] = same(res.weight.to_local().view(torch.uint8), want_q)
            rec["same"][n + ".scale"] = same(res.weight_scale_inv, want_s)
            rec["same"][n + ".first_block"] = tuple(res.first_block) == (int(rows[0]) // 128, int(cols[0]) // 128)
            rec["same"][n + ".spec"] = (res.weight.placements == tuple(pl) and res.weight.dtype == torch.float8_e4m3fn
                                        and tuple(res.weight.shape) == shape)
        rec["received"], rec["lower_bound"] = sched.received(rank), sched.lower_bound(rank)
        # the reference gathers every full tensor it uses: all of it but what its own source shard holds
        rec["reference_received"] = sum((G[p].numel() - tensors[p].to_local().numel()) * G[p].itemsize
                                        for ps in parts.values() for p in ps)
        rec["loads"] = sched.round_loads(rank)
        rec["single_cut_rounds"] = [len(rd) == 1 for rd in sched.rounds]
        rec["rounds"] = len(sched.rounds)
        text = str(sched)
        rec["text"] = [line for line in text.splitlines() if "fused(" in line or "block_fp8(" in line]
    except Exception as e:  # noqa: BLE001
        rec["error"] = error_record(e)
        rec["traceback"] = traceback.format_exc()
    add(**rec)

    # refusals: the same error on every rank, before any data moved
    wrong_out = torch.empty(3, HIDDEN, dtype=torch.bfloat16)
    for label, bad in (("heads do not divide", {"qkv_proj": fused(tp, [Shard(0)], ["q", ("k", 3), ("v", 3)])}),
                       ("a part in two targets", {"qk": fused(tp, [Shard(0)], ["q", "k"]),
                                                  "kv": fused(tp, [Shard(0)], ["k", "v"])}),
                       ("out of another shape", {"qkv_proj": fused(tp, [Shard(0)], ["q", "k", "v"], out=wrong_out)}),
                       ("fp8 of a 1-D tensor", None)):
        rec = {"case": "targets_error", "label": label}
        try:
            if bad is None:
                x = distribute_tensor(full((64,), 3), train, (Shard(0),), src_data_rank=None)
                transfer({"b": x}, {"b": (tp, [Shard(0)], block_fp8())})
            else:
                transfer({n: tensors[n] for n in ("q", "k", "v")}, bad)
            rec["error"] = None
        except Exception as e:  # noqa: BLE001
            rec["error"] = error_record(e)
        # a good call still works afterwards
        try:
            again = transfer({n: tensors[n] for n in ("gate", "up")}, {"gate_up_proj": targets["gate_up_proj"]})
            rec["ok_after"] = same(again["gate_up_proj"], want["gate_up_proj"])
        except Exception as e:  # noqa: BLE001
            rec["ok_after"] = False
            rec["after_error"] = error_record(e)
        add(**rec)


def sub_mesh_refusal_case(add, rank) -> None:
    """A refused fused transfer between ranks 0 and 1 only: transfer is
    collective over the default group, so ranks 2 and 3 (on neither side)
    call it too, and all four get the same refusal at once (no wait for the
    deadline)."""
    import time
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from verishard.torch import fused, transfer
    pair = DeviceMesh("cpu", [0, 1])
    xs = {n: distribute_tensor(full((8, 4), seed=i), pair, (Shard(0),), src_data_rank=None)
          for i, n in enumerate(("a", "b"))}
    rec, t = {"case": "sub_mesh_refusal"}, time.monotonic()
    try:
        transfer(xs, {"ab": fused(pair, [Shard(0)], [("a", 3), "b"])}, deadline_s=20)
        rec["error"] = None
    except Exception as e:  # noqa: BLE001
        rec["error"] = error_record(e)
    rec["seconds"] = time.monotonic() - t
    add(**rec)


def main(outdir: str) -> None:
    import torch.distributed.tensor  # noqa: F401  (import once, then fork)
    import verishard.torch  # noqa: F401
    run_cases(outdir, NPROCS, {"targets": targets_case, "sub-mesh refusal": sub_mesh_refusal_case})


if __name__ == "__main__":
    main(sys.argv[1])
