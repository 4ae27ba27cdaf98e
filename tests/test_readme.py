"""The README's quickstarts run, and its benchmark figures agree with their reports and with docs/."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
NUMBER = r"\d+(?:\.\d+)?"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)


def quickstart(marker: str) -> str:
    (block,) = [b for b in python_blocks(README) if marker in b]
    return block


def test_jax_quickstart_runs(tmp_path):
    pytest.importorskip("jax")
    script = tmp_path / "jax_quickstart.py"
    script.write_text(quickstart("verishard.jax"))
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "guaranteed by Pipelineproof.plan_spec" in out.stdout  # plan_for printed the verified plan


def test_torch_quickstart_runs(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "torch_quickstart.py"
    script.write_text(quickstart("verishard.torch"))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          str(script)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert out.stdout.count("guaranteed by Pipelineproof.plan_spec") == 2  # one plan printed per process


def test_checkpoint_example_runs(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "checkpoint_example.py"
    script.write_text(quickstart("from verishard import checkpoint"))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          str(script)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert (tmp_path / "ckpt" / "manifest.json").is_file()     # saved by the two ranks, loaded by both


def test_monarch_example_runs(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "monarch_example.py"
    script.write_text(quickstart("verishard.butterfly"))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["65536", "weights", "instead", "of", "1048576"]


def benchmark_rows() -> list[tuple[str, str, Path]]:
    """(claim, figure, report) of every row of the README's benchmark table."""
    section = README.split("\n## Benchmarks\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (.+?) \| (.+?) \| \[[^\]]+\]\((bench/results/[^)]+)\) \|$", section, re.M)
    return [(claim, figure, ROOT / report) for claim, figure, report in rows]


def mentions(text: str, number: str) -> bool:
    """``number`` is one of the numbers written in ``text`` (94 and 94.0 are the same figure)."""
    return any(float(n) == float(number) for n in re.findall(rf"(?<![\d.]){NUMBER}", text))


def test_benchmark_table_has_one_row_per_report():
    rows = benchmark_rows()
    assert len(rows) >= 8
    assert len({report for _, _, report in rows}) == len(rows)


@pytest.mark.parametrize("claim,figure,report", benchmark_rows(), ids=lambda v: getattr(v, "name", None))
def test_benchmark_figures_agree_everywhere(claim, figure, report):
    """Every number of a row's figure is in its report; the headline (the first) is in every paragraph of
    the README and docs/ that links the same report, so no page quotes another figure for the claim."""
    numbers = re.findall(NUMBER, figure)
    assert numbers, figure
    text = report.read_text()
    for n in numbers:
        assert mentions(text, n), f"{report.name} does not say {n} ({claim})"
    headline, link = numbers[0], report.name
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        body = page.read_text()
        if page.name == "README.md":
            body = body.replace(README.split("\n## Benchmarks\n", 1)[1].split("\n## ", 1)[0], "")
        for paragraph in re.split(r"\n\s*\n|\n(?=- )", body):
            if f"bench/results/{link})" in paragraph:
                assert mentions(paragraph, headline), \
                    f"{page.name}: a paragraph linking {link} does not give the README's figure {headline}x " \
                    f"for '{claim}':\n{paragraph[:400]}"


def test_overview_python_example_runs(tmp_path):
    """docs/overview.md's script (not a doctest) runs as written."""
    (block,) = python_blocks((ROOT / "docs" / "overview.md").read_text())
    script = tmp_path / "overview_example.py"
    script.write_text(block)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "3 3" in out.stdout  # the worked example's peak and bound
