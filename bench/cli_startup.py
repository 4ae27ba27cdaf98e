"""Start-up time of the ``verishard`` command against ``import verishard``
(issue 32: ``verishard plan`` within 2x of the import).

Each command runs REPEAT times in a fresh process, alternating, and the
median wall time is reported; then which heavy libraries each command
loaded. Writes bench/results/cli_startup.md.

    python bench/cli_startup.py [--repeat 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "cli_startup.md"
HEAVY = ("torch", "scipy", "jax", "networkx", "matplotlib", "mpi4py")

PLAN = ["plan", "--mesh", "x=2,y=3", "--src", "[3{x}6]", "--dst", "[2{y}6]"]
COMMANDS = {
    "python -c 'import verishard'": [sys.executable, "-c", "import verishard"],
    "verishard plan --mesh x=2,y=3 --src '[3{x}6]' --dst '[2{y}6]'": [sys.executable, "-m", "verishard.cli", *PLAN],
    "verishard plan ... --format json": [sys.executable, "-m", "verishard.cli", *PLAN, "--format", "json"],
    "verishard show --mesh x=2,y=3 --src '[3{x}6]' --dst '[2{y}6]'":
        [sys.executable, "-m", "verishard.cli", "show", *PLAN[1:]],
    "verishard --help": [sys.executable, "-m", "verishard.cli", "--help"],
}


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def loaded(argv: list[str]) -> list[str]:
    """The heavy libraries a command imports (its argv run under a probe)."""
    code = ("import runpy, sys; sys.argv = sys.argv[1:]\n"
            "try:\n    runpy.run_module(sys.argv[0][3:] if sys.argv[0].startswith('-m ') else 'verishard.cli',"
            " run_name='__main__')\nexcept SystemExit: pass\n"
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    if argv[1] == "-c":
        probe = [sys.executable, "-c", argv[2] + f"\nimport sys; print(' '.join(m for m in {HEAVY!r} "
                                                 f"if m in sys.modules), file=sys.stderr)"]
    else:
        probe = [sys.executable, "-c", code, "verishard", *argv[3:]]
    r = subprocess.run(probe, capture_output=True, text=True, cwd=ROOT)
    return r.stderr.strip().splitlines()[-1].split() if r.stderr.strip() else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    for k, argv in COMMANDS.items():  # warm the file cache
        timed(argv)
    for _ in range(args.repeat):
        for k, argv in COMMANDS.items():
            times[k].append(timed(argv))
    base = statistics.median(times["python -c 'import verishard'"])
    rows = []
    for k, ts in times.items():
        med = statistics.median(ts)
        rows.append(f"| `{k}` | {med * 1e3:.0f} | {min(ts) * 1e3:.0f} | {max(ts) * 1e3:.0f} | {med / base:.2f} | "
                    f"{', '.join(loaded(COMMANDS[k])) or '(none)'} |")
    text = "\n".join([
        "# CLI start-up",
        "",
        f"Command: `python bench/cli_startup.py --repeat {args.repeat}` ({os.cpu_count()} CPUs; each command "
        f"in a fresh process, {args.repeat} runs, alternating; wall time).",
        "",
        "| command | median ms | min ms | max ms | / import verishard | heavy libraries loaded |",
        "|---|---:|---:|---:|---:|---|",
        *rows,
        "",
        "Target (issue 32): `verishard plan` within 2x of `import verishard`. Before the partitioner's "
        "imports were made lazy, `verishard plan` loaded torch, scipy and networkx at start-up "
        "(building the `partition` subcommand's options).",
        "",
    ])
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
