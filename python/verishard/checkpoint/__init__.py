"""Sharded checkpoints of whole training states: save a nested dict of arrays
(numpy, JAX arrays, torch tensors and DTensors, each with its own mesh and
layout) and plain values from N ranks, load any of it onto M ranks with
other meshes and layouts, each rank reading only what the verified
cross-mesh schedule (``Crossmesh.xplan``, ``Crossmeshproof.xplan_correct``)
assigns it, and checking exactly what it reads.

The format and its defensive reading are :mod:`verishard.checkpoint.format`;
PyTorch DCP directories are read by :mod:`verishard.checkpoint.dcp`.

>>> import numpy as np, tempfile
>>> from verishard import checkpoint
>>> A = np.arange(48, dtype=np.float32).reshape(6, 8)
>>> d = tempfile.mkdtemp()
>>> _ = checkpoint.save({"w": A, "step": 7}, d, {"w": ("x=2,y=2", "[3{x}6, 4{y}8]")})
>>> out = checkpoint.load(d, {"w": ("u=3", "[6, 3{u}8]"), "step": None}, rank=2)   # rank 2: columns 6-7
>>> out["step"], out["w"].shape, bool((out["w"] == A[:, 6:]).all())
(7, (6, 2), True)

The one-array calls of earlier versions stay:
``save(A, mesh, type, path)`` and ``load(path, mesh, type, rank)``.

Saving: every file is written under a temporary name, flushed, and linked
to its final name (never over an existing file: every save has a fresh id);
the manifest is written last the same way and renamed over the previous
one under a lock, then the files of other saves are removed (except those
of a save still running, whose writer holds a lock on its marker; and only
files a save provably wrote: ``_sweep``). A crash at any point leaves the
previous complete checkpoint or none; leftovers of killed writers are
removed by the next save. Every file of the directory is opened as a
regular file only (``format.open_regular``: a FIFO is refused,
never waited on). Loading opens every file first (a load racing a re-save
reads the old or the new checkpoint, or says the checkpoint changed),
checks the manifest's digest and schema (no two blocks sharing bytes),
each block's header against the manifest, and every tile it reads against
its digest; every failure is one :class:`~verishard.errors.CheckpointError`.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import math
import os
import re
import stat
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import format as F
from .. import dtypes
from .format import CheckpointError
from ..crossmesh import crossmesh_plan
from ..errors import DtypeError, VerishardError
from ..mesh import Mesh
from ..sharding import ArrayType
# TARGET_KINDS and nest are verishard.checkpoint's names too
from .targets import (TARGET_KINDS, Boxes, box_pieces, finish_target, flatten, is_one_target,  # noqa: F401
                      layout_type, leaf_kind, mesh_rank, nest, select, target_of)

__all__ = ["save", "commit", "load", "verify", "reshard", "read_manifest", "DEFAULT_READ_BUFFER"]

DEFAULT_READ_BUFFER = 2 << 20
RETRIES = 5


# --- the directory --------------------------------------------------------------

def _fsync_dir(dirfd: int) -> None:
    with contextlib.suppress(OSError):
        os.fsync(dirfd)


def _dir_name(path: Any, what: str) -> str:
    """The checkpoint directory argument as a path string, else one error."""
    p = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(p, str):
        raise CheckpointError(f"{what}: the checkpoint path must be a directory name (str or os.PathLike), not "
                              f"{type(path).__name__}")
    return p


def _count(v: Any, name: str, lo: int, none: bool = False) -> int | None:
    """An integer argument (rank, read_buffer) of at least ``lo``, else one error."""
    if v is None and none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise CheckpointError(f"{name} {v!r}: an integer of at least {lo}{' or None' if none else ''}")
    return int(v)


@contextlib.contextmanager
def _directory(path: Any, create: bool = False):
    path = _dir_name(path, "checkpoint")
    if create:
        try:
            os.makedirs(path, exist_ok=True)
        except FileExistsError:
            raise CheckpointError(f"{path}: exists and is not a directory") from None
        except OSError as e:
            raise CheckpointError(f"{path}: cannot create the checkpoint directory ({e.strerror})") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such directory") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot open the checkpoint directory ({e.strerror})") from None
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _flock(dirfd: int, name: str, mode: int):
    fd = F.open_regular(dirfd, name, name, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, mode)
        yield fd
    finally:
        os.close(fd)


# What save writes besides manifest.json, and nothing else matches: a writer's marker
# (.writer-<token>), its temporary files (.tmp-<token>+<final name>), a commit's temporary manifest;
# a token is <save id>~<pid>-<8 hex digits>.
TOKEN = rf"(?:{F.ID_RE.pattern})~\d{{1,10}}-[0-9a-f]{{8}}"
MARKER_RE = re.compile(rf"\.writer-({TOKEN})")
TMP_RE = re.compile(rf"\.tmp-({TOKEN}|commit-[0-9a-f]{{8}})\+(?:{F.FILE_RE.pattern}|{re.escape(F.MANIFEST)})")


def _is_regular(dirfd: int, name: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _is_dead(dirfd: int, marker: str) -> bool | None:
    """True when no live process holds the writer marker (its writer ended or
    was killed); None when it is not a regular file (not a marker save made)."""
    try:
        fd = F.open_regular(dirfd, marker, marker, os.O_RDWR)
    except FileNotFoundError:
        return True
    except CheckpointError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _written_by_save(dirfd: int, name: str, save_id: str, ext: str) -> bool:
    """Whether the data file or note ``name`` of save ``save_id`` holds what a
    save writes there (a block header of that save first; a note of that
    save): the proof ``_sweep`` needs before it removes a file whose name
    merely looks like a save's."""
    try:
        fd = F.open_regular(dirfd, name, name)
    except (OSError, CheckpointError):
        return False
    try:
        head = os.pread(fd, F.MAX_HEADER_BYTES, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    if ext == "json":   # a note's canonical JSON starts with its sorted first keys
        return head.startswith(F.canonical({"format": F.FORMAT, "id": save_id})[:-1] + b",")
    try:
        header, _ = json.JSONDecoder().raw_decode(head.decode("latin-1"))
    except (ValueError, RecursionError):
        return False
    return isinstance(header, dict) and header.get("format") == F.BLOCK_FORMAT and header.get("id") == save_id


def _sweep(dirfd: int, committed: str | None) -> None:
    """Remove what killed writers left (temporary files, markers) and, once a
    save is committed (``committed``: its id), every other save's files
    whose writers are gone. Only files save wrote are removed: names of the
    patterns above (which carry a save's token), and data files and notes
    whose content shows they are a save's (:func:`_written_by_save`); a
    user's file whose name merely looks like one stays. Called under the
    commit lock."""
    names = os.listdir(dirfd)
    live_ids, live_tokens = set(), set()
    for n in names:
        m = MARKER_RE.fullmatch(n)
        if m is None:
            continue
        dead = _is_dead(dirfd, n)
        if dead:
            with contextlib.suppress(OSError):
                os.unlink(n, dir_fd=dirfd)
        elif dead is not None:
            live_tokens.add(m.group(1))
            live_ids.add(m.group(1).rsplit("~", 1)[0])
    for n in names:
        stale = False
        if (m := TMP_RE.fullmatch(n)) is not None:
            stale = m.group(1) not in live_tokens and _is_regular(dirfd, n)
        elif committed is not None and (m := F.FILE_RE.fullmatch(n)) is not None:
            stale = ((m.group(1) != committed or m.group(3) == "json")   # notes once committed
                     and m.group(1) not in live_ids and _written_by_save(dirfd, n, m.group(1), m.group(3)))
        if stale:
            with contextlib.suppress(OSError):
                os.unlink(n, dir_fd=dirfd)


def _refuse_odd_manifest(dirfd: int) -> None:
    """A save replaces ``manifest.json``: only ever a regular file (a FIFO, a
    symbolic link or a directory of that name is not a checkpoint's, and
    stays)."""
    try:
        mode = os.stat(F.MANIFEST, dir_fd=dirfd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise CheckpointError(f"{F.MANIFEST}: cannot check it ({e.strerror})") from None
    if not stat.S_ISREG(mode):
        raise CheckpointError(f"{F.MANIFEST} is not a regular file ({F.file_kind(mode)}): not a checkpoint's; "
                              f"save elsewhere or remove it")


def _committed_id(dirfd: int) -> str | None:
    """The id of the committed manifest, or None (none, or unreadable)."""
    try:
        fd = F.open_in(dirfd, F.MANIFEST, F.MANIFEST)
    except (OSError, CheckpointError):
        return None
    try:
        raw = os.read(fd, F.MAX_MANIFEST_BYTES + 1)
        man = F.parse_json(raw, F.MANIFEST)
    except (OSError, CheckpointError):
        return None
    finally:
        os.close(fd)
    return man.get("id") if isinstance(man, dict) and isinstance(man.get("id"), str) else None


class _Writer:
    """One process's part of a save: its marker (held locked while it writes),
    its data file (temporary until finished) and the entries of its blocks."""

    def __init__(self, dirfd: int, save_id: str, process: int):
        self.dirfd, self.id, self.process = dirfd, save_id, process
        self.token = f"{save_id}~{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with _flock(dirfd, F.LOCK, fcntl.LOCK_EX):
            # created and locked under the directory's lock: another writer's sweep, which runs under it
            # too, must never see this marker unlocked and take its writer for dead
            self.marker = os.open(f".writer-{self.token}", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                                  0o644, dir_fd=dirfd)
            fcntl.flock(self.marker, fcntl.LOCK_EX)
            try:
                _refuse_odd_manifest(dirfd)
            except CheckpointError:
                self.release()
                raise
            _sweep(dirfd, None)
            if _committed_id(dirfd) == save_id:
                self.release()
                raise CheckpointError(f"save id {save_id!r} is the committed checkpoint's; every save needs a "
                                      f"fresh id (its files are never overwritten)")
        self.name = F.data_name(save_id, process)
        self.tmp = f".tmp-{self.token}+{self.name}"
        self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dirfd)
        self.offset = 0
        self.entries: list[dict] = []

    def _write(self, data) -> None:
        view = memoryview(data).cast("B")
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.offset += len(memoryview(data).cast("B"))

    def add(self, path: tuple[str, ...], rank: int, block: np.ndarray, t: ArrayType, like: str,
            scalar: bool) -> None:
        valid = t.valid_shape(rank)
        if tuple(block.shape) != valid:   # larger is as wrong as smaller: which part would be rank's?
            starts = t.block_starts(rank)
            box = ", ".join(f"{s}:{s + v}" for s, v in zip(starts, valid))
            raise CheckpointError(f"{'/'.join(path)!r}, rank {rank}: a local block of shape {tuple(block.shape)}; "
                                  f"{t} on {t.mesh} gives rank {rank} the block [{box}] of the global "
                                  f"{t.global_shape}, shape {valid}: pass exactly that block (or save the global "
                                  f"array without rank=)")
        name = F.dtype_name(block.dtype, f"{'/'.join(path)!r}")
        # the stored bytes are the dtype's native ones (a byte-swapped numpy array is swapped here)
        data = np.ascontiguousarray(block, dtype=dtypes.numpy_dtype(name))
        header = F.canonical(F.header_fields(self.id, path, rank, name, t))
        header += b" " * (-len(header) % 8)
        rc, cc = F.tiles(t.global_shape, t.block_starts(rank), valid, data.dtype.itemsize)
        table = F.table_of(data, rc, cc)
        entry = {"rank": rank, "file": self.name, "header": self.offset, "header_bytes": len(header),
                 "table": self.offset + len(header), "data": self.offset + len(header) + len(table)}
        self._write(header)
        self._write(table)
        if data.nbytes:
            self._write(data.reshape(-1).view(np.uint8))
        self.entries.append({"path": list(path), "kind": "array", "mesh": str(t.mesh), "type": str(t),
                             "dtype": name, "like": like, "scalar": scalar, "blocks": [entry]})

    def finish(self) -> dict:
        """Flush, fsync and link the data file to its final name; what the
        committer needs: the file, its size and the entries."""
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = None
        if not self.offset:   # no block: no file (the manifest lists none), nothing to leave behind
            os.unlink(self.tmp, dir_fd=self.dirfd)
            return {"file": {"name": self.name, "bytes": 0}, "entries": self.entries}
        try:
            os.link(self.tmp, self.name, src_dir_fd=self.dirfd, dst_dir_fd=self.dirfd)
        except FileExistsError:
            raise CheckpointError(f"{self.name} exists already: save id {self.id!r} was used before; pass a "
                                  f"fresh one") from None
        os.unlink(self.tmp, dir_fd=self.dirfd)
        _fsync_dir(self.dirfd)
        return {"file": {"name": self.name, "bytes": self.offset}, "entries": self.entries}

    def note(self, raw: bytes) -> None:
        """Leave this process's part for :func:`commit` (its writer's marker still held)."""
        name = F.data_name(self.id, self.process, "json")
        tmp = f".tmp-{self.token}+{name}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=self.dirfd)
        try:
            os.write(fd, raw)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=self.dirfd, dst_dir_fd=self.dirfd)
        _fsync_dir(self.dirfd)

    def release(self) -> None:
        if getattr(self, "fd", None) is not None:
            os.close(self.fd)
            with contextlib.suppress(OSError):
                os.unlink(self.tmp, dir_fd=self.dirfd)
            self.fd = None
        if self.marker is not None:
            with contextlib.suppress(OSError):
                os.unlink(f".writer-{self.token}", dir_fd=self.dirfd)
            os.close(self.marker)
            self.marker = None


def _merge(parts: list[dict], values: list[dict], save_id: str) -> dict:
    """The manifest of a save from its writers' parts (files and block entries) and its values."""
    files, arrays = [], {}
    for part in parts:
        if part["file"]["bytes"]:
            files.append(part["file"])
        for e in part["entries"]:
            key = tuple(e["path"])
            have = arrays.get(key)
            if have is None:
                arrays[key] = dict(e, blocks=list(e["blocks"]))
                continue
            for field in ("mesh", "type", "dtype"):
                if have[field] != e[field]:
                    raise CheckpointError(f"{'/'.join(key)!r}: ranks saved different {field}s: "
                                          f"{have[field]!r} and {e[field]!r}")
            have["blocks"].extend(e["blocks"])
    entries = []
    for key, e in arrays.items():
        t = F.parse_layout(e["mesh"], e["type"], "/".join(key))
        ranks = sorted(b["rank"] for b in e["blocks"])
        if ranks != list(range(t.mesh.num_devices)):
            missing = sorted(set(range(t.mesh.num_devices)) - set(ranks))
            raise CheckpointError(f"{'/'.join(key)!r}: no block saved for ranks {missing[:16]}" if missing else
                                  f"{'/'.join(key)!r}: ranks saved twice: {ranks[:16]}")
        e["blocks"].sort(key=lambda b: b["rank"])
        entries.append(e)
    for v in values:
        if tuple(v["path"]) in arrays:
            raise CheckpointError(f"{'/'.join(v['path'])!r} is both a value and an array")
        entries.append(v)
    man = {"format": F.FORMAT, "version": F.VERSION, "id": save_id,
           "files": sorted(files, key=lambda f: f["name"]), "entries": entries}
    man["digest"] = F.manifest_digest(man)
    return man


def _commit_manifest(dirfd: int, man: dict) -> None:
    """Write the manifest atomically and make it the checkpoint, then sweep."""
    raw = F.canonical(man)
    if len(raw) > F.MAX_MANIFEST_BYTES:
        raise CheckpointError(f"the manifest would have {len(raw)} bytes (at most {F.MAX_MANIFEST_BYTES})")
    F.Manifest(F.parse_json(raw, F.MANIFEST), F.MANIFEST)   # what a reader will check, checked now
    with _flock(dirfd, F.LOCK, fcntl.LOCK_EX):
        _refuse_odd_manifest(dirfd)
        for f in man["files"]:
            try:
                size = os.stat(f["name"], dir_fd=dirfd, follow_symlinks=False).st_size
            except FileNotFoundError:
                raise CheckpointError(f"{f['name']}: missing at commit (removed by another save's commit? "
                                      f"commit before starting another save in the directory)") from None
            if size != f["bytes"]:
                raise CheckpointError(f"{f['name']}: {size} bytes at commit, written {f['bytes']}")
        tmp = f".tmp-commit-{uuid.uuid4().hex[:8]}+{F.MANIFEST}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dirfd)
        try:
            os.write(fd, raw)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, F.MANIFEST, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        _fsync_dir(dirfd)
        # its writers' markers go now: they kept its files from other saves' sweeps until this commit, and
        # once a later save is committed those files must go even while a writer has not let go yet
        for n in os.listdir(dirfd):
            m = MARKER_RE.fullmatch(n)
            if m is not None and m.group(1).rsplit("~", 1)[0] == man["id"] and _is_regular(dirfd, n):
                with contextlib.suppress(OSError):
                    os.unlink(n, dir_fd=dirfd)
        _sweep(dirfd, man["id"])


# --- what is saved ---------------------------------------------------------------

def _single_device(x: Any) -> bool:
    """A jax.Array wholly on one device (a SingleDeviceSharding, as ``jnp`` and
    ``jax.device_put`` without a sharding make): saved and loaded as a global array."""
    return len(x.sharding.device_set) == 1 and x.is_fully_addressable


def _torch_numpy(x) -> np.ndarray:
    """A torch tensor's bytes as numpy (bfloat16 and float8 through ml_dtypes)."""
    try:
        return dtypes.torch_to_numpy(x)
    except DtypeError as e:
        raise CheckpointError(f"a torch tensor: {e}") from None


def _blocks(obj: Any, lay: Any, rank: int | None, where: str):
    """(type, {rank: local block}, like, scalar) of one array to save."""
    kind = leaf_kind(obj)
    if kind == "jax" and _single_device(obj):
        obj = np.asarray(obj)   # one device's array: a global array, like numpy's
    elif kind == "jax":
        from ..jax.sharding import from_named_sharding
        sh = obj.sharding
        t = from_named_sharding(sh, obj.shape)
        devices = list(sh.mesh.devices.flat)
        return t, {devices.index(s.device): np.asarray(s.data) for s in obj.addressable_shards}, "jax", False
    if kind == "dtensor":
        import torch.distributed as dist
        from ..torch.dtensor import UnsupportedLayout, from_spec
        from ..torch import planning_mesh
        dm = obj.device_mesh
        try:
            t = from_spec(planning_mesh(dm), obj._spec)
        except UnsupportedLayout as err:
            raise CheckpointError(f"{where}: {err}; a checkpoint stores blocks of verishard's types: save the "
                                  f"DTensor redistributed to such a layout (it loads back onto this one)") from None
        r = mesh_rank(dm)
        return t, {r: _torch_numpy(obj.to_local())}, "dtensor", False
    a = _torch_numpy(obj) if kind == "torch" else np.asarray(obj)
    scalar = a.ndim == 0
    if scalar:
        a = a.reshape(1)
    if lay is None:
        t = ArrayType.parse(f"[{', '.join(map(str, a.shape))}]", "one=1")
    else:
        t = layout_type(lay, where)
    if rank is not None:
        return t, {int(rank): a}, kind, scalar
    if tuple(a.shape) != t.global_shape:
        raise CheckpointError(f"{where}: a global array of shape {a.shape} for {t} of shape {t.global_shape}; "
                              f"pass rank= to save one local block")
    return t, {r: a[tuple(slice(s, s + n) for s, n in zip(t.block_starts(r), t.valid_shape(r)))]
               for r in range(t.mesh.num_devices)}, kind, scalar


class _Group:
    """The saving processes: an mpi4py communicator, torch.distributed's default
    group, or this process alone."""

    def __init__(self, comm: Any):
        self.comm, self.torch = comm, False
        if comm is None:
            try:
                import sys
                dist = sys.modules.get("torch.distributed")
                self.torch = bool(dist and dist.is_available() and dist.is_initialized()
                                  and dist.get_backend() != "fake")
            except (RuntimeError, ValueError):
                self.torch = False
        if comm is not None:
            self.rank, self.size = comm.Get_rank(), comm.Get_size()
        elif self.torch:
            import torch.distributed as dist
            self.rank, self.size = dist.get_rank(), dist.get_world_size()
        else:
            self.rank, self.size = 0, 1

    @property
    def alone(self) -> bool:
        return self.comm is None and not self.torch

    def bcast(self, obj):
        if self.comm is not None:
            return self.comm.bcast(obj, root=0)
        if self.torch:
            import torch.distributed as dist
            box = [obj]
            dist.broadcast_object_list(box, src=0)
            return box[0]
        return obj

    def gather(self, obj):
        if self.comm is not None:
            return self.comm.gather(obj, root=0)
        if self.torch:
            import torch.distributed as dist
            out = [None] * self.size if self.rank == 0 else None
            dist.gather_object(obj, out, dst=0)
            return out
        return [obj]


def _new_id() -> str:
    return uuid.uuid4().hex[:16]


def save(state: Any, path: Any = None, layouts: Any = None, legacy_path: str | None = None, *,
         rank: int | None = None, comm: Any = None, save_id: str | None = None) -> str | None:
    """Save ``state`` into the directory ``path``; the manifest's path once committed.

    ``state`` maps names to arrays, plain values (None, bool, int, float,
    str) or nested dicts of them. An array is a numpy array or a torch
    tensor (global, split by its layout in ``layouts``, a dict of the same
    names whose layouts are ``(mesh, type)`` in our notation; without one,
    one block), a JAX array (the shards this process holds; its sharding
    gives the layout) or a DTensor (this rank's shard; its placements give
    the layout). With ``rank=``, numpy arrays are that rank's local blocks.

    Every process of a job calls ``save`` with its part: with ``comm`` (an
    mpi4py communicator) or an initialized ``torch.distributed``, rank 0
    picks the save id, gathers the entries and commits, and every rank
    returns once the checkpoint is committed. Ranks saving without either
    pass the same fresh ``save_id`` and one of them calls :func:`commit`
    afterwards.

    ``save(array, mesh, type, path)`` saves one array as before."""
    if not isinstance(state, Mapping):   # the one-array call: save(array, mesh, type, path)
        if leaf_kind(state) in ("jax", "dtensor") and layouts is None and legacy_path is None:
            directory, lay = path, None
        else:
            if path is None or layouts is None:
                raise CheckpointError("save(array, mesh, type, path): a numpy array needs its mesh and type")
            directory, lay = (legacy_path if legacy_path is not None else "."), (path, layouts)
        return save({"array": state}, directory, {"array": lay} if lay is not None else None, rank=rank,
                    comm=comm, save_id=save_id)
    path = _dir_name(path, "save")
    rank = _count(rank, "rank", 0, none=True)
    if layouts is not None and not isinstance(layouts, Mapping):
        raise CheckpointError(f"save: layouts is a dict of the state's names, not {type(layouts).__name__}")
    layouts = dict(layouts or {})
    group = _Group(comm)
    items = flatten(state)
    partial_save = rank is not None or any(leaf_kind(v) == "dtensor" for _, v in items) or (
        any(leaf_kind(v) == "jax" and not v.is_fully_addressable for _, v in items))
    if save_id is None:
        if group.alone and partial_save:
            raise CheckpointError("ranks saving their own blocks without a communicator must agree on a save id: "
                                  "pass save_id= (the same fresh text on every rank, e.g. the step) and call "
                                  "checkpoint.commit(path, save_id) once every rank has saved")
        save_id = group.bcast(_new_id() if group.rank == 0 else None)
    if not isinstance(save_id, str) or not F.ID_RE.fullmatch(save_id):
        raise CheckpointError(f"save id {save_id!r}: 1 to 64 letters, digits, '_', '.', '-', not starting with "
                              f"'.', '_' or '-'")
    flat_layouts = dict(flatten(layouts)) if layouts else {}
    with _directory(path, create=True) as dirfd:
        writer = None
        try:
            outcome, part, values = None, None, []
            try:
                writer = _Writer(dirfd, save_id, group.rank if not group.alone or rank is None else int(rank))
                for key, obj in items:
                    where = "/".join(key)
                    kind = leaf_kind(obj)
                    if kind == "value":
                        if group.rank == 0:
                            values.append({"path": list(key), **F.value_to_json(obj, where)})
                        continue
                    if (kind in ("numpy", "torch") or kind == "jax" and _single_device(obj)) and rank is None \
                            and group.rank != 0:
                        continue   # a global array: rank 0 writes all of it
                    t, blocks, like, scalar = _blocks(obj, flat_layouts.get(key), rank, where)
                    if t.partial:
                        raise CheckpointError(f"{where}: {t} has pending axes; reduce before saving")
                    for r, b in sorted(blocks.items()):
                        writer.add(key, r, np.asarray(b), t, like, scalar)
                part = writer.finish()
            except (VerishardError, OSError) as e:
                outcome = f"rank {group.rank}: {e}" if isinstance(e, VerishardError) else \
                    f"rank {group.rank}: {e.strerror or e} writing {path}"
            if group.alone and partial_save:
                if outcome:
                    raise CheckpointError(outcome)
                writer.note(F.canonical({"format": F.FORMAT, "id": save_id, "part": part, "values": values}))
                return None
            parts = group.gather((outcome, part, values))
            result = None
            if group.rank == 0:
                errors = [p[0] for p in parts if p[0]]
                if errors:
                    result = ("error", "; ".join(errors))
                else:
                    try:
                        man = _merge([p[1] for p in parts], [v for p in parts for v in p[2]], save_id)
                        _commit_manifest(dirfd, man)
                        result = ("ok", os.path.join(path, F.MANIFEST))
                    except (VerishardError, OSError) as e:
                        result = ("error", str(e))
            result = group.bcast(result)
            if result[0] == "error":
                raise CheckpointError(result[1])
            return result[1]
        finally:
            if writer is not None:
                writer.release()


def commit(path: str, save_id: str) -> str:
    """Commit a save whose ranks saved independently (``save(..., rank=r,
    save_id=...)`` on every rank, or DTensors without a process group that
    verishard can use): writes the manifest once every rank's note is there."""
    if not isinstance(save_id, str) or not F.ID_RE.fullmatch(save_id):
        raise CheckpointError(f"save id {save_id!r} is not a save id")
    with _directory(path) as dirfd:
        notes = sorted(n for n in os.listdir(dirfd) if (m := F.FILE_RE.fullmatch(n))
                       and m.group(1) == save_id and m.group(3) == "json")
        if not notes:
            raise CheckpointError(f"{path}: no rank has saved under id {save_id!r}")
        parts, values = [], None
        for n in notes:
            fd = F.open_in(dirfd, n, n)
            try:
                raw = os.read(fd, F.MAX_MANIFEST_BYTES + 1)
            finally:
                os.close(fd)
            note = F.parse_json(raw, n)
            if not isinstance(note, dict) or note.get("id") != save_id or not isinstance(note.get("part"), dict):
                raise CheckpointError(f"{n}: not a note of save {save_id!r}")
            parts.append(note["part"])
            if values is None and isinstance(note.get("values"), list):
                values = note["values"]
        try:
            man = _merge(parts, values or [], save_id)
        except (KeyError, TypeError, AttributeError):
            raise CheckpointError(f"{path}: the notes of save {save_id!r} are malformed") from None
        _commit_manifest(dirfd, man)
        return os.path.join(path, F.MANIFEST)


# --- reading ----------------------------------------------------------------------

class _Checkpoint:
    """A committed checkpoint opened for reading: the validated manifest and
    an open descriptor per data file (so a re-save that removes them after
    this point does not disturb the read)."""

    def __init__(self, path: str, dirfd: int):
        self.path = path
        where = os.path.join(path, F.MANIFEST)
        try:
            fd = F.open_in(dirfd, F.MANIFEST, where)
        except FileNotFoundError:
            raise CheckpointError(f"{path}: no {F.MANIFEST} (not a checkpoint, or its save did not finish)") from None
        try:
            size = os.fstat(fd).st_size
            if size > F.MAX_MANIFEST_BYTES:
                raise CheckpointError(f"{where}: {size} bytes, more than a manifest may have "
                                      f"({F.MAX_MANIFEST_BYTES})")
            raw = os.pread(fd, size + 1, 0)
        finally:
            os.close(fd)
        self.fds: dict[str, int] = {}
        try:
            self.man = F.Manifest(F.parse_json(raw, where), where, lambda man: self._open_files(dirfd, man))
        except BaseException:
            self.close()
            raise
        self.bytes_read = 0
        self.pieces = 0
        self.headers_checked: set[tuple] = set()

    def _open_files(self, dirfd: int, man: F.Manifest) -> None:
        """Open every data file the manifest lists and check its size (before
        its entries are read: their offsets are checked against these sizes)."""
        for name, size in man.files.items():
            try:
                fd = F.open_in(dirfd, name, self.path)
            except FileNotFoundError:
                raise _Missing(man.id, name) from None
            self.fds[name] = fd
            got = os.fstat(fd).st_size
            if got != size:
                raise CheckpointError(f"{name}: {got} bytes, the manifest says {size} (truncated or "
                                      f"overwritten)")

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}

    def pread(self, name: str, n: int, offset: int, into=None) -> memoryview:
        buf = into if into is not None else bytearray(n)
        got = os.preadv(self.fds[name], [memoryview(buf)[:n]], offset)
        if got != n:
            raise CheckpointError(f"{name}: short read at byte {offset} (truncated?)")
        self.bytes_read += n
        return memoryview(buf)[:n]

    def check_header(self, e: F.Entry, b: F.Block) -> None:
        """The header of block ``b`` of entry ``e`` against everything it binds
        (save id, name, rank, dtype, global shape, start, shape), read once per
        block: the cache key is where the header lies and all it must say, so
        a header that another block or name points at is checked for each."""
        want = F.header_fields(self.man.id, e.path, b.rank, e.dtype_text, e.t)
        key = (b.file, b.header, b.header_bytes, F.canonical(want))
        if key in self.headers_checked:
            return
        raw = bytes(self.pread(b.file, b.header_bytes, b.header))
        F.check_header(raw, want, f"{b.file} ({'/'.join(e.path)!r}, rank {b.rank})")
        self.headers_checked.add(key)


class _Missing(Exception):
    """A data file the manifest names is not there (perhaps removed by a newer save's commit)."""

    def __init__(self, save_id: str, name: str):
        super().__init__(name)
        self.id, self.name = save_id, name


@contextlib.contextmanager
def _opened(path: str):
    """The committed checkpoint, its files open. A file missing because a
    newer save was committed meanwhile (the manifest's id changed): read the
    new manifest; missing otherwise: one error."""
    with _directory(path) as dirfd:
        for attempt in range(RETRIES):
            try:
                ck = _Checkpoint(path, dirfd)
                break
            except _Missing as m:
                if _committed_id(dirfd) == m.id:
                    raise CheckpointError(f"{m.name}: missing (a data file of the checkpoint in {path})") from None
        else:
            raise CheckpointError(f"{path}: the checkpoint was saved again {RETRIES} times while it was being "
                                  f"opened; load again")
        try:
            yield ck
        finally:
            ck.close()


def _read_box(ck: _Checkpoint, e: F.Entry, b: F.Block, sbox: tuple[slice, ...], out: np.ndarray,
              read_buffer: int) -> None:
    """Copy the local box ``sbox`` of block ``b`` into ``out`` (of its shape),
    reading the tiles it covers (exactly the box when it lies on tile cuts),
    each checked against its digest."""
    ck.check_header(e, b)
    shape, isz = b.shape, e.dtype.itemsize
    if len(shape) == 1:
        runs = [((sbox[0].start, sbox[0].stop), out.reshape(-1, 1))]
        c0, c1, ncols = 0, 1, 1
    else:
        c0, c1, ncols = sbox[-1].start, sbox[-1].stop, shape[-1]
        lead = [range(s.start, s.stop) for s in sbox[:-2]]
        strides = [math.prod(shape[d + 1:-1]) for d in range(len(shape) - 1)]
        runs = []
        for idx in itertools.product(*lead):
            base = sum(i * s for i, s in zip(idx, strides))
            dst = out[tuple(i - s.start for i, s in zip(idx, sbox))] if idx else out
            runs.append(((base + sbox[-2].start * strides[-1], base + sbox[-2].stop * strides[-1]), dst))
    rc, cc = b.row_cuts, b.col_cuts
    s_lo, s_hi = F.span(cc, c0, c1)
    ca, cb = cc[s_lo], cc[s_hi]
    width = (cb - ca) * isz
    row_bytes = ncols * isz
    buf = bytearray(0)
    for (a, z), dst in runs:
        if z <= a or c1 <= c0:
            continue
        g, g_end = F.span(rc, a, z)
        while g < g_end:
            h = g + 1   # row groups g..h-1 in this read: at least one, within the buffer otherwise
            while h < g_end and (rc[h + 1] - rc[g]) * width <= read_buffer:
                h += 1
            ra, rb = rc[g], rc[h]
            need = (rb - ra) * width
            if len(buf) < need:
                buf = bytearray(need)
            if width == row_bytes:
                ck.pread(b.file, need, b.data + ra * row_bytes, buf)
            else:
                mv = memoryview(buf)
                for i in range(rb - ra):
                    ck.pread(b.file, width, b.data + (ra + i) * row_bytes + ca * isz, mv[i * width:(i + 1) * width])
            raw = np.frombuffer(buf, dtype=np.uint8, count=need).reshape(rb - ra, width)
            corners = [int.from_bytes(ck.pread(b.file, F.DIGEST_BYTES, b.table + F.DIGEST_BYTES * (i * len(cc) + j)),
                                      "little") for i in (g, h) for j in (s_lo, s_hi)]
            want = (corners[3] - corners[1] - corners[2] + corners[0]) % (1 << 64)
            if F.tile_sum(raw, rc, cc, g, h, s_lo, s_hi, ra, ca, isz) != want:
                raise CheckpointError(f"{b.file}: {'/'.join(e.path)!r}, rank {b.rank}: rows {ra}-{rb}, columns "
                                      f"{ca}-{cb} of the block fail their digest (corrupted)")
            typed = raw.view(e.dtype)
            lo, hi = max(a, ra), min(z, rb)
            dst[lo - a:hi - a] = typed[lo - ra:hi - ra, c0 - ca:c1 - ca]
            g = h


def _load_block(ck: _Checkpoint, e: F.Entry, t: ArrayType | Boxes, j: int, read_buffer: int,
                out: np.ndarray | None = None) -> np.ndarray:
    """Target device ``j``'s block of entry ``e`` under ``t``, read piece by
    piece along the verified schedule (the cross-mesh one between types, the
    box one onto a layout our types cannot express), into ``out`` (a view of
    a target's own memory, of the block's shape and the entry's dtype) or a
    new array."""
    if isinstance(t, Boxes):
        out = np.empty(t.local_shape, dtype=e.dtype) if out is None else out
        pieces = box_pieces([tuple(zip(b.start, b.shape)) for b in e.blocks], t)
        ck.pieces += len(pieces)
        for i, box, dst in pieces:
            b = e.blocks[i]
            _read_box(ck, e, b, tuple(slice(s - o, s - o + m) for (s, m), o in zip(box, b.start)), out[dst],
                      read_buffer)
        return out
    st = e.t
    n1 = st.mesh.num_devices
    plan = crossmesh_plan(st, t, range(n1), range(n1, n1 + t.mesh.num_devices))
    out = np.empty(t.valid_shape(j), dtype=e.dtype) if out is None else out
    ck.pieces += len(plan.pieces[j])
    for p in plan.pieces[j]:
        _read_box(ck, e, e.blocks[p.src], plan.src_local(p), out[plan.dst_local(j, p)], read_buffer)
    return out


def load(path: str, targets: Any = None, type: Any = None, rank: int | None = None, *, dtype: Any = None,
         read_buffer: int = DEFAULT_READ_BUFFER, stats: dict | None = None) -> Any:
    """Load from the checkpoint directory ``path`` (ours, or a PyTorch DCP one).

    ``targets`` says what to load and where each array goes: None (every
    entry), a name (``"model"``: that subtree), a nested dict like the saved
    state, or with JAX any pytree (names from its key paths). Each leaf is
    one of :data:`TARGET_KINDS`: ``None`` (the whole array as the type it was
    saved from, per the manifest's ``like``: a torch tensor, a jax.Array or
    numpy; a plain value as itself; None at a subtree's name: all of it);
    a torch tensor, numpy array or DTensor (filled in place: each block is
    read straight into its memory, and the result holds the same object);
    a jax.Array, ShapeDtypeStruct with a sharding, or jax sharding (a new
    jax.Array of this process's devices with that sharding); ``(DeviceMesh,
    placements)`` (a new DTensor of this rank's block); ``(mesh, type)`` in
    our notation or an ArrayType (block ``rank`` of it, numpy). A leaf with
    a dtype and shape of its own must match the stored ones. Each rank reads
    only the pieces of its blocks that the verified schedule assigns it, and
    checks each tile it reads. ``stats`` receives ``bytes_read`` (data,
    digests and headers), ``bytes_needed`` and ``pieces`` (of the schedule).

    ``load(path, mesh, type, rank)`` (or ``load(path, target)``) loads the
    one array of a one-array checkpoint as before."""
    path = _dir_name(path, "load")
    read_buffer = _count(read_buffer, "read_buffer", 1)
    rank = _count(rank, "rank", 0, none=True)
    if os.path.lexists(os.path.join(path, ".metadata")) and not os.path.lexists(os.path.join(path, F.MANIFEST)):
        from . import dcp
        return dcp.load(path, targets, type, rank, dtype=dtype, read_buffer=read_buffer, stats=stats)
    legacy = is_one_target(targets, type)
    with _opened(path) as ck:
        names = list(ck.man.entries)
        if legacy:
            arrays = [k for k, e in ck.man.entries.items() if e.t is not None]
            if len(ck.man.entries) != 1 or not arrays:
                raise CheckpointError(f"{path}: holds {len(ck.man.entries)} entries; pass a dict of targets")
            wanted, give_back = {arrays[0]: (targets, type) if type is not None else targets}, None
        else:
            wanted, give_back = select(targets, names, path)
        out, needed = {}, 0
        for key, spec in wanted.items():
            e = ck.man.entries[key]
            where = f"{path}: {'/'.join(key)!r}"
            if e.t is None:
                out[key] = e.value
                continue
            if dtype is not None and F.dtype_name(dtype, where) != F.dtype_name(e.dtype, where):
                raise CheckpointError(f"{where}: the checkpoint holds {e.dtype}, not {F.dtype_name(dtype, where)}")
            try:
                t, ranks, finish = target_of(spec, e, rank, where)
                if t.global_shape != e.t.global_shape:
                    raise CheckpointError(f"{where}: the checkpoint's global shape is {e.t.global_shape}, the "
                                          f"target's {t.global_shape}")
                into = getattr(finish, "into", None) or [None] * len(ranks)
                blocks = [_load_block(ck, e, t, j, read_buffer, o) for j, o in zip(ranks, into)]
            except CheckpointError:
                raise
            except VerishardError as err:
                raise CheckpointError(f"{where}: {err}") from None
            needed += sum(x.nbytes for x in blocks)
            if e.scalar and spec is None:
                blocks = [blocks[0].reshape(())]
            out[key] = finish_target(finish, blocks, where)
        if stats is not None:
            stats["bytes_read"] = stats.get("bytes_read", 0) + ck.bytes_read
            stats["bytes_needed"] = stats.get("bytes_needed", 0) + needed
            stats["pieces"] = stats.get("pieces", 0) + ck.pieces
    if legacy:
        return next(iter(out.values()))
    return give_back(out)


def read_manifest(path: str) -> F.Manifest:
    """The validated manifest of the checkpoint in ``path`` (its files opened
    and their sizes checked, nothing read): ``.id``, ``.entries`` (name
    tuple to entry: ``.t``, ``.dtype``, ``.blocks`` or ``.value``), ``.raw``."""
    with _opened(path) as ck:
        return ck.man


def verify(path: str) -> int:
    """Read every block of every array whole, checking every header and tile;
    the number of blocks checked."""
    n = 0
    with _opened(path) as ck:
        for e in ck.man.entries.values():
            if e.t is None:
                continue
            for b in e.blocks:
                _read_box(ck, e, b, tuple(slice(0, s) for s in b.shape), np.empty(b.shape, e.dtype),
                          DEFAULT_READ_BUFFER)
                n += 1
    return n


def _reshard_layout(lay: Any, shape: tuple[int, ...], where: str) -> ArrayType:
    """One layout of :func:`reshard`'s map for an entry of global ``shape``:
    ``{"mesh": M, "type": T}`` (verishard's notation, global shape included),
    ``{"mesh": M, "spec": "P('x', None)"}`` (a JAX PartitionSpec) or
    ``{"mesh": M, "placements": "Shard(0), Replicate()"}`` (DTensor's), the
    last two for any shape; or ``(mesh, type)``, ``[mesh, type]``, an ArrayType."""
    from .. import notation
    if isinstance(lay, list) and len(lay) == 2:
        lay = tuple(lay)
    if not isinstance(lay, Mapping):
        return layout_type(lay, where)
    forms = [k for k in ("type", "spec", "placements") if k in lay]
    if "mesh" not in lay or len(forms) != 1 or set(lay) - {"mesh", forms[0]}:
        raise CheckpointError(f"{where}: a layout is {{'mesh': M}} with one of 'type' (verishard's notation, e.g. "
                              f"'[4{{x}}8, 6]'), 'spec' (a PartitionSpec, e.g. \"P('x', None)\") or 'placements' "
                              f"(DTensor's, e.g. 'Shard(0), Replicate()'); not the keys {sorted(map(str, lay))}")
    text = lay[forms[0]]
    if forms[0] == "type":
        return layout_type((lay["mesh"], text), where)
    try:
        mesh = Mesh.coerce(lay["mesh"])
        if forms[0] == "spec":
            return notation.from_partition_spec(mesh, shape, notation.parse_partition_spec(text))
        return notation.from_placements(mesh, shape, notation.parse_placements(text))
    except VerishardError as e:
        raise CheckpointError(f"{where}: {e}") from None


def reshard(src: str, dst: str, layouts: Any, type: Any = None, *, read_buffer: int = DEFAULT_READ_BUFFER,
            stats: dict | None = None) -> str:
    """Offline: rewrite the checkpoint ``src`` (every entry) as ``dst`` with
    new layouts, one target block at a time (memory: the largest target block
    plus the read buffer), each read checked against its digests.

    ``layouts`` maps name patterns (``fnmatch``, on names joined by ``/``:
    ``"model/*"``, ``"optim/*/exp_avg*"``) to layouts (see
    :func:`_reshard_layout`); an entry takes the first pattern that matches
    it, in the map's order. Entries no pattern matches, and plain values,
    are copied as they are (their blocks re-read and checked, their layout
    kept). A pattern that matches no entry is refused (a misspelt name would
    otherwise change nothing), as is any layout that does not fit its
    entries; all of it before anything is written. ``dst`` may be ``src``
    (the rewrite is committed like a save: the old files go once it is).

    ``reshard(src, dst, mesh, type)`` puts every array on ``type`` over
    ``mesh`` (the one-array call of earlier versions)."""
    import fnmatch
    read_buffer = _count(read_buffer, "read_buffer", 1)
    if type is not None:
        layouts = {"*": (layouts, type)}
    if not isinstance(layouts, Mapping) or not layouts:
        raise CheckpointError(f"reshard: layouts is a non-empty dict of name patterns to layouts (or pass mesh "
                              f"and type), not {layouts!r}"[:300])
    patterns = list(layouts.items())
    for p, _ in patterns:
        if not isinstance(p, str) or not 0 < len(p) <= F.MAX_NAME * F.MAX_DEPTH:
            raise CheckpointError(f"reshard: pattern {p!r} is not a name pattern (a non-empty string, e.g. "
                                  f"'model/*')")
    save_id = _new_id()
    with _opened(src) as ck:
        todo, values, used = [], [], set()
        for key, e in ck.man.entries.items():
            name = "/".join(key)
            hit = next((p for p, _ in patterns if fnmatch.fnmatchcase(name, p)), None)
            if hit is not None:
                used.add(hit)
            if e.t is None:
                values.append(dict(e.raw))
                continue
            where = f"{src}: {name!r} (pattern {hit!r})"
            t = e.t if hit is None else _reshard_layout(layouts[hit], e.t.global_shape, where)
            if t.global_shape != e.t.global_shape:
                raise CheckpointError(f"{where}: the checkpoint's global shape is {e.t.global_shape}, the "
                                      f"layout's {t.global_shape}")
            if t.partial:
                raise CheckpointError(f"{where}: {t} has pending axes; a checkpoint holds reduced arrays")
            todo.append((key, e, t, hit is not None))
        unused = [p for p, _ in patterns if p not in used]
        if unused:
            names = ["/".join(k) for k in ck.man.entries]
            raise CheckpointError(f"{src}: pattern {unused[0]!r} matches no entry (it holds "
                                  f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''})")
        with _directory(dst, create=True) as dirfd:
            parts = []
            # rank by rank, as that many ranks would save it: one data file (one writer) open at a time
            for r in range(max((t.mesh.num_devices for _, _, t, _ in todo), default=0)):
                w = _Writer(dirfd, save_id, r)
                try:
                    for key, e, t, _ in todo:
                        if r < t.mesh.num_devices:
                            w.add(key, r, _load_block(ck, e, t, r, read_buffer), t, e.like, e.scalar)
                    parts.append(w.finish())
                finally:
                    w.release()
            _commit_manifest(dirfd, _merge(parts, values, save_id))
        if stats is not None:
            stats["bytes_read"] = stats.get("bytes_read", 0) + ck.bytes_read
            stats["pieces"] = stats.get("pieces", 0) + ck.pieces
            stats["resharded"] = stats.get("resharded", 0) + sum(1 for *_, hit in todo if hit)
            stats["copied"] = stats.get("copied", 0) + sum(1 for *_, hit in todo if not hit) + len(values)
    return os.path.join(dst, F.MANIFEST)
