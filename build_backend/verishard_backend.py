"""PEP 517 build backend: setuptools' own, after building the verified core.

``pip install .`` (and ``pip install git+URL``, ``python -m build``) call this module
(``pyproject.toml``: ``build-backend``, ``backend-path``). Before setuptools packs a wheel it
runs ``make core``: the Makefile's rules for the Coq build, the extraction to OCaml and the
OCaml/pybind11 link into ``python/verishard/_core*.so``, for the Python running this backend
(the build environment's, which is the target's). Missing tools fail here with one message
naming them and the Debian packages that provide them, not later as a broken import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401  (the hooks this backend leaves as they are)
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_wheel", "build_editable", "build_sdist",
    "get_requires_for_build_wheel", "get_requires_for_build_editable", "get_requires_for_build_sdist",
    "prepare_metadata_for_build_wheel", "prepare_metadata_for_build_editable",
]

ROOT = Path(__file__).resolve().parent.parent
# Each tool the core's build runs, and the Debian package that has it.
TOOLS = {"coqc": "coq", "coq_makefile": "coq", "ocamlfind": "ocaml-findlib", "ocamlopt": "ocaml-nox",
         "make": "make", "gcc": "gcc", "g++": "g++"}


def missing_tools_message(missing: list[str]) -> str:
    """The one message for a machine without the core's toolchain.

    >>> print(missing_tools_message(["coqc", "ocamlfind"]))  # doctest: +NORMALIZE_WHITESPACE
    verishard: building the verified core needs coqc, ocamlfind, not found on PATH.
    Install them (Debian/Ubuntu): apt-get install coq ocaml-findlib
    (the full set: apt-get install coq ocaml-nox ocaml-findlib make gcc g++), then run pip install again.
    """
    packages = " ".join(dict.fromkeys(TOOLS[t] for t in missing))
    return (f"verishard: building the verified core needs {', '.join(missing)}, not found on PATH.\n"
            f"Install them (Debian/Ubuntu): apt-get install {packages}\n"
            "(the full set: apt-get install coq ocaml-nox ocaml-findlib make gcc g++), "
            "then run pip install again.")


def build_core() -> None:
    """``make core`` for this Python; exits with one clear message if a tool is missing or it fails."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise SystemExit(missing_tools_message(missing))
    # Called from `make bindings` (the venv's editable install), this is a nested make: it must not
    # inherit the outer one's job-server flags, which name file descriptors it does not have.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    jobs = str(max(1, min(os.cpu_count() or 1, 4)))
    command = ["make", "--no-print-directory", "-C", str(ROOT), "core", f"JOBS={jobs}",
               f"CORE_PY={sys.executable}", "CORE_SETUP="]
    print("verishard: building the verified core (Coq build, extraction, OCaml and pybind11 link; "
          "a minute or more the first time):", " ".join(command), file=sys.stderr, flush=True)
    done = subprocess.run(command, env=env, stdout=sys.stderr)
    if done.returncode != 0:
        raise SystemExit(f"verishard: `{' '.join(command)}` failed (exit {done.returncode}); "
                         "its output is above.")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    build_core()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    build_core()
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
