"""Where a benchmark's markdown report goes: ``-`` for standard output, else a file."""

from __future__ import annotations

import os
import sys


def emit_report(text: str, out: str) -> None:
    """Write ``text`` to the file ``out`` (its folder made if needed) and say so on
    standard error, or to standard output when ``out`` is ``-``."""
    if out == "-":
        sys.stdout.write(text)
        return
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    print(f"wrote {out}", file=sys.stderr)
