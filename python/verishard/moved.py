"""Old module paths of the modules that moved into the framework and
application packages, kept for one release.

Each old path is an alias: ``import verishard.dtensor`` gives the module
object ``verishard.torch.dtensor`` itself (so attributes, private names and
``monkeypatch`` work as before), and ``python -m`` of an old path runs the
new module. No file lives at an old path; :func:`install` (called by
``verishard/__init__.py``) puts one finder on ``sys.meta_path`` that answers
for the names in :data:`MOVED` only. Code inside verishard imports the new
paths (tests/test_layers.py checks it).

>>> import verishard.dtensor, verishard.torch.dtensor
>>> verishard.dtensor is verishard.torch.dtensor
True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

__all__ = ["MOVED", "install"]

# old path -> new path
MOVED = {
    "verishard.dtensor": "verishard.torch.dtensor",
    "verishard.torch_transfer": "verishard.torch.crossmesh",
    "verishard.torch_targets": "verishard.torch.targets",
    "verishard.runtime.torch": "verishard.torch.backend",
    "verishard.runtime.torch_demo": "verishard.torch.demo",
    "verishard.jax_sharding": "verishard.jax.sharding",
    "verishard.runtime.jax": "verishard.jax.backend",
    "verishard.runtime.chunked_jax": "verishard.jax.chunked",
    "verishard.checkpoint_format": "verishard.checkpoint.format",
    "verishard.checkpoint_dcp": "verishard.checkpoint.dcp",
    "verishard.crossmesh_cli": "verishard.cli.crossmesh",
    "verishard.partition.cli": "verishard.cli.partition",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        # The import system returns whatever sys.modules holds under the name
        # once this returns: the new module, not the placeholder.
        sys.modules[module.__name__] = importlib.import_module(MOVED[module.__name__])

    def get_code(self, name):   # python -m <old path>
        return compile(f"import runpy\nrunpy.run_module({MOVED[name]!r}, run_name='__main__', alter_sys=True)\n",
                       f"<{name}: moved to {MOVED[name]}>", "exec")

    def is_package(self, name):
        return False


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
