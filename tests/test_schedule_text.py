"""Box schedules print as the type plans do: a table of round, sender ->
receiver, global box and bytes, long lists elided with a count, and plain
JSON; through verishard.torch (plan_for, plan_transfer) and the CLI."""
from __future__ import annotations

import json
import re

import pytest
import torch
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard

import verishard.torch as vt
from verishard.torch.dtensor import device_mesh, fake_process_group, layout_boxes
from verishard.plan import MAX_SHOWN_PIECES, box_text
from verishard.torch.backend import BoxPlan

from test_cli import main, one_error_line

ROW = re.compile(r"^\s+(\d+)\s+(\d+) -> (\d+)\s+(\[[0-9:, ]+\])\s+(\d+)$")


def rows(text: str) -> list[tuple[int, int, int, str, int]]:
    return [(int(a), int(b), int(c), d, int(e)) for a, b, c, d, e in
            (m.groups() for m in map(ROW.match, text.splitlines()) if m)]


def schedule(shape, mesh_sizes, src, dst, itemsize=4) -> BoxPlan:
    s, _ = layout_boxes(shape, mesh_sizes, src)
    d, _ = layout_boxes(shape, mesh_sizes, dst)
    return BoxPlan.build(shape, s, d, itemsize, 64 << 20)


def test_box_schedule_prints_a_table_of_every_piece():
    bp = schedule((5, 6), (2, 2), [Shard(0), Shard(0)], [Replicate(), Shard(1)], itemsize=2)
    text = str(bp)
    lines = text.splitlines()
    assert lines[0].startswith("box schedule on ranks 0..3: 4 source boxes -> 4 target boxes; 12 pieces sent in 1 "
                               "round, 4 kept in place (2 bytes per element; Boxesworldproof.brounds_correct)")
    assert lines[1].split() == ["round", "sender", "->", "receiver", "box", "bytes"]
    got = rows(text)
    want = [(i, a, b, box_text(box), 2 * n) for i, rd in enumerate(bp.rounds, 1) for _, a, b, box in rd if a != b
            for n in [__import__("math").prod(length for _, length in box)]]
    assert got == want and len(got) == 12
    per_rank = {r: sum(n for _, _, b, _, n in got if b == r) for r in range(4)}
    assert per_rank == {r: 2 * bp.received(r) for r in range(4)}
    worst = max(per_rank.values())
    assert lines[-1].startswith(f"received: at most {worst} bytes per rank")
    assert all(len(line) < 200 for line in lines)                     # not a one-line dump
    assert repr(bp) == "<BoxPlan: 4 source boxes -> 4 target boxes on ranks 0..3, 12 pieces in 1 rounds, itemsize 2>"


def test_long_schedules_are_elided_with_a_count():
    bp = schedule((397, 64), (8,), [Shard(0)], [Shard(1)])
    pieces = sum(1 for rd in bp.rounds for _, a, b, _ in rd if a != b)
    assert pieces == 56
    text = str(bp)
    assert len(rows(text)) == MAX_SHOWN_PIECES
    assert f"  ... {pieces - MAX_SHOWN_PIECES} more pieces" in text.splitlines()
    assert len(text) < 2500


def test_box_schedule_json_is_plain_data_of_the_same_figures():
    bp = schedule((5, 6), (2, 2), [Shard(0), Shard(0)], [Replicate(), Shard(1)])
    doc = json.loads(json.dumps(bp.to_json()))
    assert doc["kind"] == "boxes" and doc["itemsize"] == 4 and doc["rounds"] == len(bp.rounds)
    assert [(p["round"], p["sender"], p["receiver"], box_text(p["box"]), p["bytes"]) for p in doc["pieces"]] == \
        rows(str(bp))
    assert [h["box"] for h in doc["src_boxes"]] == [[list(x) for x in b] for _, b, _ in bp.src]
    assert {r["rank"]: r["received"] for r in doc["ranks"]} == {r: 4 * bp.received(r) for r in range(4)}


def test_plan_for_and_plan_transfer_print_tables():
    with fake_process_group(4):
        dm = device_mesh("x=2,y=2")
        x = DTensor.from_local(torch.zeros(2, 6), dm, [Shard(0), Shard(0)], shape=torch.Size((5, 6)),
                               stride=(6, 1), run_check=False)
        p = vt.plan_for(x, [Replicate(), Shard(1)])
        assert isinstance(p, BoxPlan) and str(p).startswith("box schedule on ranks 0..3")
        assert len(rows(str(p))) == 12
        a, b = DeviceMesh("cpu", [0, 1]), DeviceMesh("cpu", [2, 3])
        t = DTensor.from_local(torch.zeros(3, 4), a, [Shard(0)], shape=torch.Size((6, 4)), stride=(4, 1),
                               run_check=False)
        state, targets = {"w": t, "v": t}, {"w": (b, [Shard(1)]), "v": (b, [Replicate()])}
        own = vt.plan_transfer(state, targets)
        sched = vt.plan_transfer_world(state, targets)
    # rank 0's own part: the cuts it sends, and its loads alone
    assert str(own).splitlines()[0].startswith("transfer schedule over ranks 0..3, rank 0's part: 2 tensors; 4 pieces")
    assert own.loads() == {0: (sched.sent(0), 0)}
    text = str(sched)
    lines = text.splitlines()
    assert lines[0].startswith("transfer schedule over ranks 0..3: 2 tensors; 8 pieces sent in 3 rounds")
    assert any(line.startswith("  w: float32, [3{dim0}6, 4] on ranks 0, 1 -> [6, 2{dim0}4] on ranks 2, 3")
               for line in lines)
    assert lines[3].split()[:2] == ["round", "tensor"]
    table = [line.split() for line in lines[4:-2]]
    assert len(table) == 8 and {r[1] for r in table} == {"v", "w"}
    loads = sched.loads()
    assert lines[-2] == f"sent: at most {max(sent for sent, _ in loads.values())} bytes per rank (rank 0); " \
                        f"{(loads[0][0] + loads[1][0]) / 2:.0f} on average over the 2 sending ranks"
    assert sum(int(r[-1]) for r in table if r[4] == "2") == sched.received(2)
    assert lines[-1] == f"received: at most {sched.received(2)} bytes per rank (rank 2); lower bound " \
                        f"{sched.lower_bound(2)} bytes"
    assert repr(sched) == "<TransferSchedule: 2 tensors over ranks 0..3, 8 pieces in 3 rounds, budget 67108864 bytes>"
    doc = json.loads(json.dumps(sched.to_json()))
    assert doc["kind"] == "transfer" and len(doc["pieces"]) == 8
    assert {r["rank"]: r["received"] for r in doc["ranks"]} == {r: sched.received(r) for r in range(4)}


# ---------------------------------------------------------------------------
# the CLI: --dtensor takes uneven shapes as the Python API does

DTENSOR = ("plan", "--mesh", "x=2,y=2", "--shape", "5,6", "--dtensor")


def test_cli_dtensor_uneven_on_one_mesh_axis_is_a_type_plan():
    code, out, err = main(*DTENSOR, "--src", "Shard(0),Replicate()", "--dst", "Replicate(),Shard(1)")
    assert code == 0, err
    assert out.startswith("source [Shard(0), Replicate()] = [3{x}5, 6]\ntarget [Replicate(), Shard(1)] = [5, 3{y}6]")
    assert "plan on {x:2, y:2}: [3{x}5, 6] -> [5, 3{y}6]" in out


def test_cli_dtensor_nested_chunks_are_a_box_schedule():
    code, out, err = main(*DTENSOR, "--src", "Shard(0),Shard(0)", "--dst", "Replicate(),Shard(1)")
    assert code == 0, err
    assert "source [Shard(0), Shard(0)] = (DTensor layout; no type describes it)" in out
    assert "box schedule on ranks 0..3" in out
    bp = schedule((5, 6), (2, 2), [Shard(0), Shard(0)], [Replicate(), Shard(1)])
    assert rows(out) == rows(str(bp)) and len(rows(out)) == 12
    code, out16, _ = main(*DTENSOR, "--src", "Shard(0),Shard(0)", "--dst", "Replicate(),Shard(1)", "--dtype",
                          "bfloat16")
    assert code == 0 and [r[-1] for r in rows(out16)] == [r[-1] // 2 for r in rows(out)]


def test_cli_box_schedule_as_json():
    code, out, err = main(*DTENSOR, "--src", "Shard(0),Shard(0)", "--dst", "Replicate(),Shard(1)", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "verishard.boxes/1" and doc["shape"] == [5, 6] and doc["dtype"] == "float32"
    assert doc["src"] == "[Shard(0), Shard(0)]" and doc["dst"] == "[Replicate(), Shard(1)]"
    bp = schedule((5, 6), (2, 2), [Shard(0), Shard(0)], [Replicate(), Shard(1)])
    assert {k: v for k, v in doc.items() if k not in ("schema", "mesh", "shape", "src", "dst", "dtype")} == \
        json.loads(json.dumps(bp.to_json()))


def test_cli_box_schedule_with_partial_says_what_happens_around_the_pieces():
    code, out, err = main(*DTENSOR, "--src", "Partial(),Shard(0)", "--dst", "Shard(0),Shard(0)")
    assert code == 0, err
    assert "first: the source's pending sum is all-reduced over x" in out
    code, out, err = main(*DTENSOR, "--src", "Shard(0),Shard(0)", "--dst", "Partial('max'),Shard(0)")
    assert code == 0 and "then: the target is made pending max over x" in out


@pytest.mark.parametrize("extra, token", [
    (["--dtype", "float99"], "--dtype 'float99' names no torch dtype"),
    (["--format", "json", "--src", "Partial(),Shard(0)", "--dst", "Partial('max'),Shard(0)"], "reduction"),
])
def test_cli_box_schedule_errors(extra, token):
    args = list(DTENSOR) + (extra if "--src" in extra else extra + ["--src", "Shard(0),Shard(0)", "--dst",
                                                                      "Replicate(),Shard(1)"])
    code, out, err = main(*args)
    assert code == 2 and out == "" and token in one_error_line(err)


def test_cli_show_of_a_box_schedule(tmp_path):
    code, out, err = main("show", "--mesh", "x=2,y=2", "--shape", "5,6", "--dtensor", "--src", "Shard(0),Shard(0)",
                          "--dst", "Replicate(),Shard(1)")
    assert code == 0 and len(rows(out)) == 12, err
    code, out, err = main("show", "--mesh", "x=2,y=2", "--shape", "5,6", "--dtensor", "--src", "Shard(0),Shard(0)",
                          "--dst", "Replicate(),Shard(1)", "--picture", str(tmp_path / "p.png"))
    assert code == 2 and "--picture draws plans of types" in one_error_line(err)


def test_cli_dtensor_takes_placements_as_dtensor_prints_them():
    """``[Shard(0), Shard(0)]`` (DTensor's own printing) is placements, not our notation: it plans, and an
    error in it gets no hint to drop --dtensor (the wrong hint of issue 40)."""
    code, out, err = main(*DTENSOR, "--src", "[Shard(0), Shard(0)]", "--dst", "(Replicate(), Shard(1))")
    assert code == 0 and len(rows(out)) == 12, err
    code, _, err = main(*DTENSOR, "--src", "[Shard(2), Replicate()]", "--dst", "Replicate(),Shard(1)")
    line = one_error_line(err)
    assert code == 2 and "Shard(2) on mesh axis 'x' names no dimension" in line and "drop --dtensor" not in line
    code, _, err = main(*DTENSOR, "--src", "[3{x}5, 6]", "--dst", "Replicate(),Shard(1)")
    assert code == 2 and "this looks like our type notation: drop --dtensor" in one_error_line(err)
