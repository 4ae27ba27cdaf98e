"""The import rule of python/verishard (docs/internals.md, "Layers of the
Python package"): every import of a verishard module, at module level or
inside a function, goes to the same layer or one below; a framework or an
application imports no other package of its own layer; no module imports a
module that imports it back (directly or around a longer circle); no private
name (``_name``) is imported from another package; nothing inside verishard
imports an old module path (verishard.moved)."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verishard.moved import MOVED

PKG = Path(__file__).resolve().parent.parent / "python" / "verishard"

# (layer, module-name prefixes), lowest first; a module belongs to the longest prefix that names it
LAYERS = [
    ("model", ["verishard.errors", "verishard.limits", "verishard.dtypes", "verishard.mesh", "verishard.sharding",
               "verishard.notation", "verishard.collectives", "verishard.moved"]),
    ("planning", ["verishard._core", "verishard.core", "verishard.plan", "verishard.optimal", "verishard.crossmesh",
                  "verishard.picture"]),
    ("runtime", ["verishard.runtime", "verishard"]),
    ("frameworks", ["verishard.torch", "verishard.jax"]),
    ("applications", ["verishard.checkpoint", "verishard.butterfly", "verishard.partition", "verishard.crosscheck"]),
    ("cli", ["verishard.cli"]),
]
# layers whose packages stand side by side: none of them imports another
SIDE_BY_SIDE = {"frameworks", "applications"}


def owner(mod: str) -> tuple[int, str]:
    """(layer index, the prefix it is under) of a module name."""
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and (best is None or len(p) > len(best[1])):
                best = (i, p)
    assert best is not None, f"{mod} is in no layer of tests/test_layers.py"
    return best


def modules() -> dict[str, tuple[Path | None, bool]]:
    """Every module under python/verishard: name -> (file, is a package); the extension module has no source."""
    out = {}
    for dirpath, _, files in os.walk(PKG):
        for f in files:
            p = Path(dirpath) / f
            rel = p.relative_to(PKG.parent)
            if f.endswith(".py"):
                name = ".".join(rel.with_suffix("").parts)
                pkg = name.endswith(".__init__")
                out[name[:-len(".__init__")] if pkg else name] = (p, pkg)
            elif f.endswith(".so"):
                out[".".join(rel.parent.parts + (f.split(".")[0],))] = (None, False)
    return out


MODULES = modules()


def package_of(mod: str) -> str:
    return mod if MODULES[mod][1] else mod.rpartition(".")[0]


def imports(mod: str):
    """(imported module, the name taken from it or None, line) for every verishard import in ``mod``."""
    path, is_pkg = MODULES[mod]
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "verishard":
                    yield a.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            if src.split(".")[0] != "verishard":
                continue
            for a in node.names:
                sub = f"{src}.{a.name}"
                yield (sub, None, node.lineno) if sub in MODULES or sub in MOVED else (src, a.name, node.lineno)


def edges() -> list[tuple[str, str, str | None, int]]:
    out = []
    for mod, (path, _) in MODULES.items():
        if path is None:
            continue
        for target, name, line in imports(mod):
            out.append((mod, target, name, line))
    return out


EDGES = edges()


def test_every_module_is_in_a_layer():
    for mod in MODULES:
        owner(mod)


def test_no_module_imports_an_old_path():
    bad = [f"{m}:{line} imports {t} (now {MOVED[t]})" for m, t, _, line in EDGES if t in MOVED]
    assert not bad, "\n".join(bad)


def test_every_import_names_a_module():
    bad = [f"{m}:{line} imports {t}" for m, t, _, line in EDGES if t not in MODULES and t not in MOVED]
    assert not bad, "\n".join(bad)


def layer_problems(edges) -> list[str]:
    bad = []
    for m, t, _, line in edges:
        (lm, pm), (lt, pt) = owner(m), owner(t)
        if lt > lm:
            bad.append(f"{m}:{line} ({LAYERS[lm][0]}) imports {t} ({LAYERS[lt][0]}, above)")
        elif lt == lm and LAYERS[lm][0] in SIDE_BY_SIDE and pm != pt:
            bad.append(f"{m}:{line} imports {t}: {pm} and {pt} stand side by side ({LAYERS[lm][0]})")
    return bad


def test_no_import_goes_up_or_across_a_layer():
    bad = layer_problems(EDGES)
    assert not bad, "\n".join(bad)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m, t, _, _ in EDGES:
        if t in MODULES and t != m:
            graph[m].add(t)
    assert circles(graph) == []


def private_problems(edges) -> list[str]:
    bad = []
    for m, t, name, line in edges:
        private = (name or t.rpartition(".")[2]).startswith("_") and not (name or "").startswith("__")
        if name is None and t in MODULES and MODULES[t][0] is None:
            private = False   # the extension module verishard._core, imported by core.py only (below)
        if private and t in MODULES and package_of(t) != package_of(m):
            bad.append(f"{m}:{line} imports {name or t} from {t}")
    return bad


def test_no_private_name_imported_across_packages():
    bad = private_problems(EDGES)
    assert not bad, "\n".join(bad)


def test_only_core_imports_the_extension():
    users = {m for m, t, name, _ in EDGES if t == "verishard._core" or (t == "verishard" and name == "_core")}
    assert users == {"verishard.core"}


def test_planted_imports_are_caught():
    # the three rules on edges as the real files would give them
    assert layer_problems([("verishard.runtime.mpi", "verishard.torch.backend", None, 1)])          # up
    assert layer_problems([("verishard.plan", "verishard.runtime", "execute", 1)])                   # up
    assert layer_problems([("verishard.checkpoint", "verishard.crosscheck.trace", None, 1)])        # across
    assert layer_problems([("verishard.jax.backend", "verishard.torch.backend", None, 1)])          # across
    assert not layer_problems([("verishard.cli", "verishard.checkpoint", None, 1),
                               ("verishard.torch.crossmesh", "verishard.torch.specs", None, 1)])
    assert private_problems([("verishard.torch", "verishard.plan", "_made", 1)])
    assert not private_problems([("verishard.torch.crossmesh", "verishard.torch.backend", "_device_of", 1)])


# Inside verishard.cli: the command groups (one module each) stand side by side above the modules they
# share, which stand one above the other (lowest first); __init__ assembles the groups, __main__ runs it.
CLI_GROUPS = {"plan", "check", "show", "demo", "partition", "crossmesh"}
CLI_SHARED = ["options", "output", "document", "problem"]


def cli_problems(edges) -> list[str]:
    bad = []
    for m, t, _, line in edges:
        if not m.startswith("verishard.cli.") or not (t == "verishard.cli" or t.startswith("verishard.cli.")):
            continue
        ms, ts = m.split(".")[2], (t.split(".")[2] if t != "verishard.cli" else "__init__")
        if ms == "__main__":
            continue
        if ts == "__init__":
            bad.append(f"{m}:{line} imports verishard.cli, which imports every command group")
        elif ms in CLI_GROUPS and ts in CLI_GROUPS and ms != ts:
            bad.append(f"{m}:{line} imports {t}: the command groups stand side by side")
        elif ms in CLI_SHARED and (ts in CLI_GROUPS or CLI_SHARED.index(ts) > CLI_SHARED.index(ms)):
            bad.append(f"{m}:{line} imports {t}, above it")
    return bad


def test_cli_groups_import_only_the_shared_modules_below_them():
    cli = {m.split(".")[2] for m in MODULES if m.startswith("verishard.cli.")}
    assert cli == CLI_GROUPS | set(CLI_SHARED) | {"__main__"}, "a new module of verishard.cli: place it in the lists"
    bad = cli_problems(EDGES)
    assert not bad, "\n".join(bad)
    assert cli_problems([("verishard.cli.show", "verishard.cli.plan", None, 1)])          # across
    assert cli_problems([("verishard.cli.options", "verishard.cli.problem", None, 1)])    # up
    assert cli_problems([("verishard.cli.demo", "verishard.cli", "build_parser", 1)])    # the assembly
    assert not cli_problems([("verishard.cli.show", "verishard.cli.problem", None, 1),
                             ("verishard.cli", "verishard.cli.show", None, 1)])


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_paths_are_the_new_modules(old):
    pytest.importorskip("torch" if ".torch" in MOVED[old] or "dtensor" in old else "numpy")
    if ".jax" in MOVED[old]:
        pytest.importorskip("jax")
    assert importlib.import_module(old) is importlib.import_module(MOVED[old])


def test_python_m_of_an_old_path_runs_the_new_module():
    # verishard.crossmesh_cli is verishard.cli.crossmesh, which only defines its parsers: runs and exits 0
    proc = subprocess.run([sys.executable, "-m", "verishard.crossmesh_cli"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "verishard.nothing_moved_here"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "No module named verishard.nothing_moved_here" in proc.stderr
