"""The agreement's verdict, shared by the MPI and torch backends: the ranks'
records (what each rank planned and any problem it found) to one message
naming every problem and disagreement, identical on every rank."""

from __future__ import annotations

__all__ = ["rank_list", "AGREED", "agreement_verdict"]


def rank_list(rs: list[int]) -> str:
    """Ranks as the agreement names them: runs of consecutive ranks as ``a-b``.

    >>> rank_list([3]), rank_list([0, 1, 2, 5, 7, 8])
    ('rank 3', 'ranks 0-2,5,7-8')
    """
    out, i = [], 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ("rank " if len(rs) == 1 else "ranks ") + ",".join(out)


# what the ranks must agree on: (record key, record key of its description, what it is called)
AGREED = (("mesh_ranks", "mesh_ranks", "device mesh ranks"), ("src_ranks", "src_ranks", "source ranks (src_ranks)"),
          ("check_agreement", "check_agreement", "check_agreement policy"),
          ("plan", "desc", "plan"), ("dtype", "dtype_name", "dtype"),
          ("chunking", "chunking", "chunking (budget_bytes, chunks)"), ("budget", "budget", "round budget"))


def agreement_verdict(records: list[dict]) -> str | None:
    """One message naming every problem, identical on every rank, or None."""
    errors: dict[str, list[int]] = {}
    for r, rec in enumerate(records):
        for e in rec.get("errors", []):
            errors.setdefault(e, []).append(r)
    lines = [f"{rank_list(rs)}: {e}" for e, rs in errors.items()]
    named = False
    for key, label, what in AGREED:
        seen: dict[str, list[int]] = {}
        for r, rec in enumerate(records):
            if key in rec:
                seen.setdefault(rec[key], []).append(r)
        if (len(seen) > 1 and key == "plan" and named
                and len({records[rs[0]].get(label) for rs in seen.values()}) == 1):
            continue   # the plans differ only by a field named above (their descriptions are the same)
        if len(seen) > 1:
            named = True
            parts = [f"{rank_list(rs)}: {records[rs[0]].get(label, v)}" + (f" [{v}]" if label != key else "")
                     for v, rs in sorted(seen.items(), key=lambda kv: kv[1][0])]
            lines.append(f"the ranks disagree on the {what}: " + "; ".join(parts))
    if not lines:
        return None
    return "redistribution refused before any data moved:\n  " + "\n  ".join(lines)
