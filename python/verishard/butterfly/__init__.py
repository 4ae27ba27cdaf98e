"""Structured linear layers: butterfly, block butterfly, Monarch and
Pixelfly, pure torch (:mod:`.modules`) and JAX (:mod:`.jax`), and sharded
over a torch ``DeviceMesh`` with their permutations moved by verified plans
(:mod:`.sharded`). See docs/butterfly.md.
"""
from .forms import LayerError
from .modules import BlockButterfly, Butterfly, Monarch, Pixelfly

__all__ = ["Butterfly", "BlockButterfly", "Monarch", "Pixelfly", "LayerError", "ShardedMonarch", "ShardedButterfly"]


def __getattr__(name: str):
    # the sharded layers import torch.distributed and the planner: only when asked for
    if name in ("ShardedMonarch", "ShardedButterfly"):
        from . import sharded
        return getattr(sharded, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
