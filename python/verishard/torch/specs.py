"""What :func:`verishard.torch.redistribute` and :func:`verishard.torch.transfer`
both read off their arguments: our mesh for a ``DeviceMesh``
(:func:`planning_mesh`), our types for DTensor specs and what they cannot
describe (:func:`spec_types`), a layout as boxes of world ranks
(:func:`holdings`), a mesh's rank layout as the ranks compare it
(:func:`mesh_ranks`), the placements checked (:func:`normalise_placements`),
the default group (:func:`require_initialized`) and the agreement policy
(:func:`agreement_policy`). Problems are ``(INVALID | UNSUPPORTED, text)``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor.placement_types import Placement, _StridedShard

from . import dtensor as _conv
from ..errors import VerishardError
from ..limits import check_seconds
from ..mesh import Mesh
from .backend import RedistributionRefused

__all__ = ["INVALID", "UNSUPPORTED", "planning_mesh", "dim_label", "spec_types", "mesh_ranks", "holdings",
           "normalise_placements", "require_initialized", "CHECKS", "agreement_policy"]

INVALID, UNSUPPORTED = "invalid", "unsupported"


_MESHES: dict[Any, Mesh] = {}


def planning_mesh(device_mesh: DeviceMesh) -> Mesh:
    """Our mesh for a ``DeviceMesh``: its shape, with its ``mesh_dim_names``
    (``dim0``, ``dim1``, ... when it has none). Cached per mesh.

    >>> from verishard.torch.dtensor import planning_mesh as fake_mesh
    >>> planning_mesh(fake_mesh("x=2,y=2"))
    {x:2, y:2}
    """
    m = _MESHES.get(device_mesh)
    if m is None:
        shape = tuple(int(s) for s in device_mesh.mesh.shape)
        names = device_mesh.mesh_dim_names or tuple(f"dim{i}" for i in range(len(shape)))
        m = _MESHES[device_mesh] = Mesh(tuple(zip(names, shape)))
    return m


def dim_label(device_mesh: DeviceMesh, i: int) -> str:
    names = device_mesh.mesh_dim_names
    return f"mesh dimension {i}" + (f" ({names[i]!r})" if names else "")


def spec_types(mesh: Mesh | tuple[Mesh, Mesh], src: DTensorSpec, dst: DTensorSpec,
           what: tuple[str, str] = ("source", "target")) -> tuple[Any, Any, list[tuple[str, str]]]:
    """Our types for the two specs (on one mesh, or on the source's and the
    target's), and the problems: layouts our types do
    not describe (:class:`verishard.torch.dtensor.UnsupportedLayout`: an uneven
    dimension DTensor splits otherwise than our blocks, checked shard by
    shard against DTensor's own offsets; Partial with an uneven dimension)
    and a Partial type next to an uneven one (the verified core plans
    pending reductions over even blocks only): unsupported; anything else
    the conversion refuses: invalid (unsupported for ``_StridedShard``
    placements DTensor cannot order)."""
    types, out = [], []
    meshes = mesh if isinstance(mesh, tuple) else (mesh, mesh)
    for m, spec, w in zip(meshes, (src, dst), what):
        try:
            types.append(_conv.from_spec(m, spec))
        except (_conv.UnsupportedLayout, _conv.UnsupportedReduction) as e:
            out.append((UNSUPPORTED, f"the {w}: {e}"))
        except VerishardError as e:
            out.append((UNSUPPORTED if "_StridedShard" in str(e) else INVALID, f"the {w}: {e}"))
    if out:
        return None, None, out
    s, d = types
    return s, d, out


def mesh_ranks(device_mesh: DeviceMesh) -> str:
    """A DeviceMesh's rank layout as the ranks compare it: its ``mesh``
    tensor as a list (shortened, with its sha256, when long). Two meshes of
    one shape whose ranks are laid out differently give different plans.

    >>> import torch
    >>> from types import SimpleNamespace
    >>> mesh_ranks(SimpleNamespace(mesh=torch.tensor([[0, 2], [1, 3]])))
    '[[0, 2], [1, 3]]'
    """
    import hashlib
    import json
    text = json.dumps(device_mesh.mesh.tolist())
    if len(text) <= 200:
        return text
    return f"{text[:120]}... (sha256 {hashlib.sha256(text.encode()).hexdigest()[:16]})"


def holdings(spec: DTensorSpec, mesh_obj: DeviceMesh) -> tuple[tuple, tuple]:
    """``spec``'s layout on ``mesh_obj`` as explicit boxes of world ranks, and
    every mesh rank's local shape (:func:`verishard.torch.dtensor.layout_boxes`)."""
    order = None if spec.use_strided_shard_as_shard_order else spec.shard_order
    return _conv.layout_boxes(spec.tensor_meta.shape, tuple(mesh_obj.mesh.shape), spec.placements, order,
                              [int(r) for r in mesh_obj.mesh.flatten().tolist()])


def normalise_placements(placements: Any, x: DTensor, device_mesh: DeviceMesh) -> tuple[tuple | None, list]:
    if placements is None:
        return None, [(INVALID, "placements is needed for redistribute!")]
    if isinstance(placements, (str, bytes)) or not isinstance(placements, Sequence):
        return None, [(INVALID, f"placements must be a sequence of Placement objects, not "
                                f"{type(placements).__name__}")]
    bad = [p for p in placements if not isinstance(p, Placement)]
    if bad:
        return None, [(INVALID, f"placement {bad[0]!r} is not a Placement (Shard(d), Replicate(), _StridedShard, "
                                f"Partial(op))")]
    if len(placements) != device_mesh.ndim:
        names = f" {tuple(device_mesh.mesh_dim_names)}" if device_mesh.mesh_dim_names else ""
        return None, [(INVALID, f"placements {tuple(placements)} has {len(placements)} entries but the DeviceMesh "
                                f"has {device_mesh.ndim} dimensions{names}; give one placement per mesh dimension")]
    ndim, out, problems = x.ndim, [], []
    for i, p in enumerate(placements):
        if isinstance(p, (Shard, _StridedShard)):
            if not -ndim <= p.dim < ndim:
                problems.append((INVALID, f"{p} on {dim_label(device_mesh, i)} names no dimension of a tensor of "
                                          f"rank {ndim} (shape {tuple(x.shape)}); valid dims are "
                                          f"{-ndim}..{ndim - 1}" if ndim else
                                 f"{p} on {dim_label(device_mesh, i)}: a tensor of rank 0 has no dimension"))
                continue
            if p.dim < 0:
                p = (_StridedShard(p.dim + ndim, split_factor=p.split_factor) if isinstance(p, _StridedShard)
                     else Shard(p.dim + ndim))
        out.append(p)
    return (tuple(out) if not problems else None), problems


def require_initialized() -> None:
    if not dist.is_initialized():
        raise RuntimeError("verishard.torch.redistribute needs an initialized default process group "
                           "(torch.distributed.init_process_group, or launch with torchrun)")


CHECKS = ("first", "always", False)


def agreement_policy(check_agreement: Any, deadline_s: Any) -> tuple[str | bool, float | None]:
    """``(mode, deadline)`` from :func:`redistribute`'s arguments: True is
    "first"; ``deadline_s`` checked by ``verishard.limits.check_seconds``
    (a number greater than 0, at most ``MAX_SECONDS``; None: the default,
    :func:`verishard.torch.backend.deadline`, checked when the agreement
    waits)."""
    mode = "first" if check_agreement is True else check_agreement
    try:
        ok = mode in CHECKS and not (isinstance(mode, int) and mode is not False)
    except (TypeError, ValueError):   # unhashable, or an array
        ok = False
    if not ok:
        raise RedistributionRefused(f"check_agreement must be True or 'first' (agree when a plan is first used), "
                                    f"'always', or False, not {check_agreement!r}")
    if deadline_s is not None:
        deadline_s = check_seconds(deadline_s, "deadline_s", error=RedistributionRefused)
    return mode, deadline_s
