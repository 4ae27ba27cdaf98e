"""PyTorch DCP checkpoints read as they are: a directory written by
``torch.distributed.checkpoint.save`` (``.metadata`` and ``*.distcp``)
loaded onto any target of :func:`verishard.checkpoint.load`, reading only the
byte ranges of the stored chunks that the target's blocks need.

DCP's ``.metadata`` is a pickle: it is read by an unpickler that builds only
DCP's metadata classes and the few torch objects they hold (sizes, dtypes,
layouts), anything else being refused. Each stored tensor chunk is a
``torch.save`` archive (a zip, stored uncompressed) inside a ``.distcp``
file; its central directory and ``data.pkl`` (the storage key, offset, size
and stride) are read and parsed the same way, and the data is then read in
place, row run by row run, from the storage's first byte. Plain values
(DCP's byte items) are ``torch.load``-ed with ``weights_only=True``.

When a tensor's chunks are the blocks of one of our types (DTensor
``Shard`` saves: a grid of ``ceil(g / n)`` blocks) and the target is a type,
the pieces each target block needs come from the verified cross-mesh
schedule, as for our own checkpoints; otherwise (other chunks, or a DTensor
target our types cannot express: nested uneven shards, uneven
``_StridedShard``) from the verified box schedule between the chunks and the
target rank's boxes (``core.bplan``). DCP stores no checksums, so nothing is
checked beyond the archive's structure, the sizes and the dtypes.
"""

from __future__ import annotations

import collections
import io
import itertools
import math
import os
import pathlib
import pickle
import struct
import zipfile
from typing import Any

import numpy as np

from .checkpoint_format import MAX_MANIFEST_BYTES
from .errors import CheckpointError, VerishardError, show
from .sharding import ArrayType

__all__ = ["DCPCheckpoint", "load"]

METADATA = ".metadata"
_METADATA_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem",
                     "torch.distributed.checkpoint.planner")


class _Rebuilt:
    """What ``torch._utils._rebuild_tensor_v2`` would have built: the storage
    (persistent id), the offset, size and stride."""

    def __init__(self, storage, offset, size, stride, *rest):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)


class _Unpickler(pickle.Unpickler):
    """Builds DCP metadata and torch.save headers, nothing else."""

    def find_class(self, module: str, name: str):
        import torch
        if module in _METADATA_MODULES:
            cls = super().find_class(module, name)
            if isinstance(cls, type):   # DCP's dataclasses and enums, no functions
                return cls
        if module == "torch" and name == "Size":
            return torch.Size
        if module == "torch" and isinstance(getattr(torch, name, None), (torch.dtype, torch.memory_format,
                                                                         torch.layout)):
            return getattr(torch, name)
        if module == "torch" and name.endswith("Storage"):
            return name
        if (module, name) in (("torch.serialization", "_get_layout"),):
            return super().find_class(module, name)
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _Rebuilt
        if (module, name) in (("collections", "OrderedDict"), ("pathlib", "PosixPath"),
                              ("pathlib", "PurePosixPath")):
            return {"OrderedDict": collections.OrderedDict, "PosixPath": pathlib.PurePosixPath,
                    "PurePosixPath": pathlib.PurePosixPath}[name]
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a DCP checkpoint")

    def persistent_load(self, pid):
        if isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage":
            return {"type": pid[1], "key": str(pid[2]), "numel": int(pid[4])}
        raise pickle.UnpicklingError(f"persistent id {pid!r} is not a storage")


def _unpickle(raw: bytes, where: str):
    try:
        return _Unpickler(io.BytesIO(raw)).load()
    except CheckpointError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            RecursionError, MemoryError, OverflowError, struct.error) as e:
        raise CheckpointError(f"{where}: not a DCP pickle ({type(e).__name__}: {str(e)[:120]})") from None


class _Window(io.RawIOBase):
    """Bytes [start, start + length) of an open file, as a seekable file (for
    zipfile), counting what is read."""

    def __init__(self, fd: int, start: int, length: int, counter: list):
        self.fd, self.start, self.length, self.pos, self.counter = fd, start, length, 0, counter

    def seekable(self):
        return True

    def readable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, off, whence=0):
        self.pos = off if whence == 0 else self.pos + off if whence == 1 else self.length + off
        return self.pos

    def readinto(self, b):
        n = max(0, min(len(b), self.length - self.pos))
        got = os.preadv(self.fd, [memoryview(b)[:n]], self.start + self.pos) if n else 0
        self.pos += got
        self.counter[0] += got
        return got


class _Chunk:
    """One stored chunk: its global box and where its C-order data starts."""

    def __init__(self, offsets, sizes, fd: int, data: int, name: str):
        self.offsets, self.sizes, self.fd, self.data, self.name = tuple(offsets), tuple(sizes), fd, data, name


class DCPCheckpoint:
    """A DCP directory opened for reading: metadata, open files, chunk locations."""

    def __init__(self, path: str):
        import torch
        self.path, self.fds, self.counter = path, {}, [0]
        try:
            self.dirfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise CheckpointError(f"{path}: cannot open ({e.strerror})") from None
        raw = self._read_small(METADATA)
        self.md = _unpickle(raw, os.path.join(path, METADATA))
        M = torch.distributed.checkpoint.metadata
        if not isinstance(self.md, M.Metadata) or not isinstance(self.md.state_dict_metadata, dict) \
                or not isinstance(self.md.storage_data, dict):
            raise CheckpointError(f"{path}/{METADATA}: not DCP metadata")
        self.storage = {}
        for k, v in self.md.storage_data.items():
            if not isinstance(k, M.MetadataIndex):
                raise CheckpointError(f"{path}/{METADATA}: a storage key of type {type(k).__name__}")
            self.storage[(k.fqn, None if k.offset is None else tuple(k.offset))] = v

    def _read_small(self, name: str) -> bytes:
        fd = self._open(name)
        size = os.fstat(fd).st_size
        if size > MAX_MANIFEST_BYTES:
            raise CheckpointError(f"{self.path}/{name}: {size} bytes, more than metadata may have")
        self.counter[0] += size
        return os.pread(fd, size, 0)

    def _open(self, name: str) -> int:
        if not isinstance(name, str) or "/" in name or name in ("", ".", "..") or len(name) > 255:
            raise CheckpointError(f"{self.path}: DCP file name {show(name)} is not a file of the directory")
        if name not in self.fds:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=self.dirfd)
            except FileNotFoundError:
                raise CheckpointError(f"{self.path}/{name}: missing") from None
            except OSError as e:
                raise CheckpointError(f"{self.path}/{name}: cannot open ({e.strerror}; symbolic links are "
                                      f"refused)") from None
            self.fds[name] = fd
        return self.fds[name]

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        os.close(self.dirfd)

    def names(self) -> list[str]:
        return list(self.md.state_dict_metadata)

    def value(self, fqn: str):
        import torch
        info = self.storage.get((fqn, None))
        if info is None:
            raise CheckpointError(f"{self.path}: no stored bytes for {fqn!r}")
        fd = self._open(info.relative_path)
        raw = os.pread(fd, info.length, info.offset)
        self.counter[0] += len(raw)
        try:
            return torch.load(io.BytesIO(raw), weights_only=True)
        except Exception as e:   # noqa: BLE001  (torch's loader raises many kinds)
            raise CheckpointError(f"{self.path}: {fqn!r} is not a value torch.load reads safely ({e})") from None

    def tensor(self, fqn: str):
        """(global shape, numpy dtype, chunks) of a stored tensor."""
        import torch
        M = torch.distributed.checkpoint.metadata
        meta = self.md.state_dict_metadata[fqn]
        if not isinstance(meta, M.TensorStorageMetadata):
            raise CheckpointError(f"{self.path}: {fqn!r} is not a tensor")
        try:
            dtype = torch.empty(0, dtype=meta.properties.dtype).numpy().dtype
        except (TypeError, RuntimeError):
            raise CheckpointError(f"{self.path}: {fqn!r} has dtype {meta.properties.dtype}, which numpy does "
                                  f"not hold") from None
        shape = tuple(int(s) for s in meta.size) or (1,)   # a 0-d tensor: one element
        chunks = [self._chunk(fqn, c, dtype) for c in meta.chunks]
        return shape, dtype, chunks

    def _chunk(self, fqn: str, c, dtype: np.dtype) -> _Chunk:
        offsets, sizes = tuple(int(x) for x in c.offsets) or (0,), tuple(int(x) for x in c.sizes) or (1,)
        info = self.storage.get((fqn, tuple(int(x) for x in c.offsets)))
        where = f"{self.path}: {fqn!r} chunk at {offsets}"
        if info is None:
            raise CheckpointError(f"{where}: no storage entry")
        if getattr(info, "transform_descriptors", None):
            raise CheckpointError(f"{where}: stored with transforms {list(info.transform_descriptors)} "
                                  f"(compressed?); only plain torch.save chunks are read in place")
        fd = self._open(info.relative_path)
        if info.offset + info.length > os.fstat(fd).st_size:
            raise CheckpointError(f"{where}: {info.relative_path} ends before the chunk (truncated)")
        win = _Window(fd, info.offset, info.length, self.counter)
        try:
            z = zipfile.ZipFile(win)
            pkl = next(n for n in z.namelist() if n.endswith("/data.pkl"))
            rebuilt = _unpickle(z.read(pkl), where)
            if not isinstance(rebuilt, _Rebuilt):
                raise CheckpointError(f"{where}: the chunk is not a tensor")
            member = z.getinfo(f"{pkl[:-len('data.pkl')]}data/{rebuilt.storage['key']}")
        except (zipfile.BadZipFile, StopIteration, KeyError, OSError, ValueError, EOFError) as e:
            raise CheckpointError(f"{where}: not a torch.save archive ({type(e).__name__}: {e})") from None
        if member.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(f"{where}: its storage is compressed")
        local = bytes(os.pread(fd, 30, info.offset + member.header_offset))
        self.counter[0] += 30
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise CheckpointError(f"{where}: bad zip entry header")
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        start = member.header_offset + 30 + name_len + extra_len
        contiguous = tuple(math.prod(rebuilt.size[d + 1:]) for d in range(len(rebuilt.size)))
        if (rebuilt.size or (1,)) != sizes or (math.prod(sizes) > 1 and rebuilt.stride != contiguous):
            raise CheckpointError(f"{where}: stored as {rebuilt.size} with stride {rebuilt.stride}, the metadata "
                                  f"says {sizes} (C order)")
        end = start + (rebuilt.offset + math.prod(sizes)) * dtype.itemsize
        if member.file_size < (rebuilt.offset + math.prod(sizes)) * dtype.itemsize or end > info.length:
            raise CheckpointError(f"{where}: its storage is shorter than the chunk")
        return _Chunk(offsets, sizes, fd, info.offset + start + rebuilt.offset * dtype.itemsize, info.relative_path)


def _grid_type(shape: tuple[int, ...], chunks: list[_Chunk]) -> tuple[ArrayType, list[int]] | None:
    """Our type whose blocks are exactly the chunks (one mesh axis per split
    dimension, blocks of ceil(g / n)), and the chunk of every rank; or None."""
    axes, dims, starts = [], [], []
    for d, g in enumerate(shape):
        ivs = sorted({(c.offsets[d], c.sizes[d]) for c in chunks})
        n = len(ivs)
        b = -(-g // n) if g else 0
        if [iv for iv in ivs] != [(k * b, min(g, (k + 1) * b) - k * b) for k in range(n)] or any(s <= 0 for _, s in ivs):
            return None
        starts.append([iv[0] for iv in ivs])
        if n > 1:
            axes.append((f"d{d}", n))
            dims.append(f"{b}{{d{d}}}{g}")
        else:
            dims.append(str(g))
    if math.prod(len(s) for s in starts) != len(chunks):
        return None
    try:
        from .mesh import Mesh
        mesh = Mesh.parse(",".join(f"{a}={n}" for a, n in axes) or "one=1")
        t = ArrayType.parse(f"[{', '.join(dims)}]", mesh)
    except VerishardError:
        return None
    where = {c.offsets: k for k, c in enumerate(chunks)}
    try:
        order = [where[tuple(t.block_starts(r))] for r in range(mesh.num_devices)]
    except KeyError:
        return None
    return t, order


def _read_into(chunk: _Chunk, box: tuple[tuple[int, int], ...], out: np.ndarray, dtype: np.dtype,
               counter: list) -> None:
    """Copy the global box ``box`` ((start, length) per dimension, inside the
    chunk) into ``out``, one pread per contiguous run."""
    k = len(box)
    local = [(s - o, n) for (s, n), o in zip(box, chunk.offsets)]
    isz = dtype.itemsize
    strides = [math.prod(chunk.sizes[d + 1:]) * isz for d in range(k)]
    # the trailing dimensions taken whole are one run
    t = k - 1
    while t > 0 and local[t] == (0, chunk.sizes[t]):
        t -= 1
    run = local[t][1] * strides[t]
    heads = [range(s, s + n) for s, n in local[:t]]
    flat = out.reshape(-1)
    pos = 0
    for idx in itertools.product(*heads):
        off = chunk.data + sum(i * st for i, st in zip(idx, strides)) + local[t][0] * strides[t]
        buf = memoryview(flat[pos:pos + run // isz]).cast("B") if run else b""
        if run:
            got = os.preadv(chunk.fd, [buf], off)
            if got != run:
                raise CheckpointError(f"{chunk.name}: short read at byte {off} (truncated?)")
            counter[0] += got
        pos += run // isz


def _load_tensor(ck: DCPCheckpoint, fqn: str, t: Any, j: int) -> np.ndarray:
    """Target device ``j``'s block under ``t`` (our type, or the target
    rank's boxes of a layout our types cannot express), piece by piece."""
    from .checkpoint import _box_pieces, _Boxes
    from .crossmesh import crossmesh_plan
    shape, dtype, chunks = ck.tensor(fqn)
    if t.global_shape != shape:
        raise CheckpointError(f"{ck.path}: {fqn!r} has global shape {shape}, the target {t.global_shape}")
    grid = _grid_type(shape, chunks) if isinstance(t, ArrayType) else None
    if grid is not None:   # the verified cross-mesh schedule between types
        out = np.empty(t.valid_shape(j), dtype=dtype)
        st, order = grid
        n1 = st.mesh.num_devices
        plan = crossmesh_plan(st, t, range(n1), range(n1, n1 + t.mesh.num_devices))
        pieces = [(chunks[order[p.src]], p.box, plan.dst_local(j, p)) for p in plan.pieces[j]]
    else:   # chunks of no grid, or a target of no type: the verified box schedule
        boxes = t if isinstance(t, _Boxes) else _Boxes.of_block(t, j)
        out = np.empty(boxes.local_shape, dtype=dtype)
        pieces = [(chunks[i], box, dst) for i, box, dst in
                  _box_pieces([tuple(zip(c.offsets, c.sizes)) for c in chunks], boxes)]
    for c, box, dst in pieces:
        piece = np.empty(tuple(n for _, n in box), dtype=dtype)
        _read_into(c, box, piece, dtype, ck.counter)
        out[dst] = piece
    return out


def load(path: str, targets: Any = None, type: Any = None, rank: int | None = None, *, dtype: Any = None,
         read_buffer: int = 0, stats: dict | None = None) -> Any:
    """:func:`verishard.checkpoint.load` on a DCP directory (same targets and
    results; names are DCP's flattened names, nested at ``.``)."""
    from .checkpoint import _finish, _is_one_target, _target, select
    ck = DCPCheckpoint(path)
    try:
        legacy = _is_one_target(targets, type)
        if legacy:
            tensors = [n for n in ck.names() if not _is_bytes(ck, n)]
            if len(tensors) != 1:
                raise CheckpointError(f"{path}: holds {len(tensors)} tensors; pass a dict of targets")
            wanted = {(tensors[0],): (targets, type) if type is not None else targets}
        else:
            wanted, give_back = select(targets, [tuple(n.split(".")) for n in ck.names()], path, split=".")
        out, needed = {}, 0
        for key, spec in wanted.items():
            fqn = ".".join(key)
            if fqn not in ck.md.state_dict_metadata:
                raise CheckpointError(f"{path}: no entry {fqn!r} (it holds {', '.join(ck.names()[:8])})")
            if _is_bytes(ck, fqn):
                out[key] = ck.value(fqn)
                continue
            shape, dt, _ = ck.tensor(fqn)
            if dtype is not None and np.dtype(dtype) != dt:
                raise CheckpointError(f"{path}: {fqn!r} is {dt}, not {np.dtype(dtype)}")
            entry = _Shape(shape)
            try:
                t, ranks, finish = _target(spec, entry, rank, f"{path}: {fqn!r}")
                blocks = [_load_tensor(ck, fqn, t, j) for j in ranks]
            except CheckpointError:
                raise
            except VerishardError as e:
                raise CheckpointError(f"{path}: {fqn!r}: {e}") from None
            needed += sum(b.nbytes for b in blocks)
            if spec is None and not ck.md.state_dict_metadata[fqn].size:   # a 0-d tensor
                blocks = [blocks[0].reshape(())]
            out[key] = _finish(finish, blocks, f"{path}: {fqn!r}")
        if stats is not None:
            stats["bytes_read"] = stats.get("bytes_read", 0) + ck.counter[0]
            stats["bytes_needed"] = stats.get("bytes_needed", 0) + needed
    finally:
        ck.close()
    if legacy:
        return next(iter(out.values()))
    return give_back(out)


def _is_bytes(ck: DCPCheckpoint, fqn: str) -> bool:
    import torch
    return isinstance(ck.md.state_dict_metadata[fqn], torch.distributed.checkpoint.metadata.BytesStorageMetadata)


class _Shape:
    """What :func:`verishard.checkpoint._target` needs of an entry: its type's global shape."""

    def __init__(self, shape):
        self.t = ArrayType.parse(f"[{', '.join(map(str, shape))}]", "one=1")
