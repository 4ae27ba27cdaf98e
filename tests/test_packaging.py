"""Packaging: the PEP 517 backend, the wheel's tag, the extras, ``__version__`` and ``__all__``.

A full ``pip install .`` from a fresh clone builds Coq (a minute or more): it is not run here (``make
test`` has built the core once already, and the venv's editable install went through the same backend).
Building the wheel here runs the backend's ``make core``, a no-op on the built tree.
"""

import importlib
import importlib.metadata
import os
import pkgutil
import subprocess
import sys
import tomllib
import types
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import verishard

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
OPTIONAL = ("jax", "jaxlib", "torch", "scipy", "networkx", "mpi4py", "matplotlib", "ml_dtypes")


def test_version_is_the_metadata_version():
    assert verishard.__version__ == importlib.metadata.version("verishard")
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "verishard.__version__"}


def test_import_needs_only_numpy():
    """``import verishard`` (and the console script's module) load no optional dependency."""
    code = ("import sys, verishard, verishard.cli; "
            f"print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _modules():
    for info in pkgutil.walk_packages(verishard.__path__, "verishard."):
        if info.name.rsplit(".", 1)[-1].startswith("_"):
            continue
        yield info.name


@pytest.mark.parametrize("name", sorted(_modules()))
def test_every_public_module_declares_all(name):
    """``__all__`` names only what the module defines or deliberately re-exports, never a module it imports."""
    try:
        module = importlib.import_module(name)
    except ImportError as e:  # an optional dependency (mpi4py, torch, ...) is not installed here
        pytest.skip(f"{name}: {e}")
    assert isinstance(getattr(module, "__all__", None), list), f"{name} has no __all__"
    for n in module.__all__:
        assert hasattr(module, n), f"{name}.__all__ names {n!r}, which it does not define"
        assert not isinstance(getattr(module, n), types.ModuleType), f"{name}.__all__ exports the module {n!r}"
    imported = {k for k, v in vars(module).items() if isinstance(v, types.ModuleType)}
    assert not imported & set(module.__all__)


def test_extras_declared_and_ranges_admit_the_tested_releases():
    """Every optional dependency is in an extra; the stated ranges admit what requirements.txt pins (the
    releases the suite runs on), and torch's upper end stops below the next minor release."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"jax", "torch", "mpi", "partition", "all"} <= set(extras)
    assert [Requirement(r).name for r in PYPROJECT["project"]["dependencies"]] == ["numpy"]
    declared = {Requirement(r).name: Requirement(r) for group in extras.values() for r in group}
    for name in OPTIONAL:
        assert name in declared, f"{name} is in no extra"
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            req = Requirement(line.split("#")[0].strip())
            pins[req.name] = next(iter(req.specifier)).version
    for name in ("jax", "jaxlib", "torch"):
        assert declared[name].specifier.contains(pins[name]), (name, declared[name], pins[name])
    torch = declared["torch"].specifier
    major, minor = (int(v) for v in pins["torch"].split(".")[:2])
    assert not torch.contains(f"{major}.{minor + 1}.0"), "a range admitting newer torch pulls a CUDA build"


def test_missing_toolchain_is_one_clear_message(tmp_path):
    """Without coqc/ocamlfind on PATH the backend stops before building, naming them and the apt-get line."""
    code = ("import sys; sys.path.insert(0, 'build_backend'); import verishard_backend as b; "
            "b.build_wheel('unused')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PATH": str(tmp_path)})
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert "needs coqc, coq_makefile, ocamlfind, ocamlopt" in out.stderr
    assert "apt-get install coq ocaml-nox ocaml-findlib" in out.stderr


def test_wheel_is_a_platform_wheel_with_the_core(tmp_path):
    """``pip wheel .`` through the in-tree backend gives a CPython/platform-tagged wheel holding _core."""
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    (wheel,) = tmp_path.glob("verishard-*.whl")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name.endswith(f"-{tag}-{tag}-linux_x86_64.whl") or not sys.platform.startswith("linux"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Root-Is-Purelib: false" in meta
    assert any(n.startswith("verishard/_core") and n.endswith(".so") for n in names)
    assert "verishard/partition/platforms/cpu+2gpu.json" in names
    assert "Provides-Extra: all" in metadata and f"Version: {verishard.__version__}" in metadata


def test_backend_make_core_installs_nothing():
    """The backend's ``make core CORE_SETUP=`` neither installs Debian packages nor makes the venv, and
    links pybind11 for the Python it names; plain ``make`` keeps the project's venv."""
    backend = subprocess.run(["make", "-n", "-B", "core", f"CORE_PY={sys.executable}", "CORE_SETUP="], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    assert "apt-get" not in backend and "-m venv" not in backend and "requirements.txt" not in backend
    assert f"{sys.executable} -m pybind11 --includes" in backend
    default = subprocess.run(["make", "-n", "-B", "core"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    assert ".venv/bin/python -m pybind11 --includes" in default
