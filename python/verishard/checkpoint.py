"""Sharded checkpoints: save from N ranks, load onto M ranks with another
mesh and type, each rank reading only what the verified cross-mesh schedule
(``Crossmesh.xplan``, ``Crossmeshproof.xplan_correct``) assigns it.

Layout of a checkpoint directory:

* one file per source rank, ``rank-00003-<id>.bin``: the valid part of its
  block, C order, raw bytes;
* ``manifest.json``: format and version, the mesh and type (our notation),
  dtype, global shape, and per file its rank, name, byte offset and length,
  block shape and start, the sha256 of the whole file and a blake2b digest
  of every 16 KiB chunk (what a partial read checks).

Atomicity: every file is written under a temporary name, flushed and
renamed (``os.replace``); the manifest is written last, the same way, so a
crash at any point leaves either the previous manifest (whose files, named
by another save id, are untouched) or no manifest, never one pointing at
partial data.

Loading (:func:`load`) checks the manifest against the files (present, the
recorded size, the recorded dtype) before reading anything, then reads, for
each piece of the schedule, the 16 KiB chunks its bytes lie in, through one
reusable read buffer, and checks every chunk's digest: peak memory is the
target block plus the read buffer. Any problem is one
:class:`~verishard.errors.CheckpointError`.

>>> import numpy as np, tempfile
>>> from verishard import checkpoint
>>> A = np.arange(48, dtype=np.float32).reshape(6, 8)
>>> d = tempfile.mkdtemp()
>>> _ = checkpoint.save(A, "x=2,y=2", "[3{x}6, 4{y}8]", d)      # a global array: every rank's file
>>> B = checkpoint.load(d, "u=3", "[6, 3{u}8]", rank=2)         # uneven: rank 2 holds columns 6-7
>>> B.shape, bool((B == A[:, 6:]).all())
((6, 2), True)
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .crossmesh import CrossMeshPlan, as_type, crossmesh_plan
from .errors import CheckpointError, VerishardError
from .mesh import Mesh
from .sharding import ArrayType

__all__ = ["save", "commit", "load", "verify", "reshard", "read_manifest", "CHUNK"]

FORMAT = "verishard-checkpoint"
VERSION = 1
CHUNK = 16 << 10
MANIFEST = "manifest.json"
DEFAULT_READ_BUFFER = 8 << 20


# --- writing -------------------------------------------------------------------

def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(path: str, data_iter) -> None:
    tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, "wb") as f:
            for chunk in data_iter:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _shard_name(rank: int, save_id: str) -> str:
    return f"rank-{rank:05d}-{save_id}.bin"


def _write_shard(path: str, rank: int, block: np.ndarray, t: ArrayType, save_id: str,
                 chunk: int = CHUNK) -> dict:
    """Write one rank's valid block; its manifest entry."""
    valid = t.valid_shape(rank)
    if block.ndim != len(valid) or any(a < v for a, v in zip(block.shape, valid)):
        raise CheckpointError(f"rank {rank}: local block of shape {block.shape}, expected {valid} for {t}")
    data = np.ascontiguousarray(block[tuple(slice(0, v) for v in valid)])
    raw = memoryview(data.reshape(-1).view(np.uint8))
    whole = hashlib.sha256()
    chunks = []

    def gen():
        for a in range(0, len(raw), chunk):
            piece = raw[a:a + chunk]
            whole.update(piece)
            chunks.append(hashlib.blake2b(piece, digest_size=16).hexdigest())
            yield piece

    name = _shard_name(rank, save_id)
    _atomic_write(os.path.join(path, name), gen())
    return {"rank": rank, "file": name, "offset": 0, "nbytes": len(raw), "shape": list(valid),
            "start": list(t.block_starts(rank)), "dtype": data.dtype.str, "sha256": whole.hexdigest(),
            "chunk_bytes": chunk, "chunks": chunks}


def _manifest(mesh: Mesh, t: ArrayType, dtype: np.dtype, entries: Sequence[dict], save_id: str) -> dict:
    return {"format": FORMAT, "version": VERSION, "save_id": save_id, "mesh": str(mesh), "type": str(t),
            "dtype": np.dtype(dtype).str, "global_shape": list(t.global_shape),
            "files": sorted(entries, key=lambda e: e["rank"])}


def _write_manifest(path: str, man: dict) -> None:
    _atomic_write(os.path.join(path, MANIFEST), [json.dumps(man, indent=1).encode()])
    _fsync_dir(path)
    keep = {e["file"] for e in man["files"]} | {MANIFEST}
    for f in os.listdir(path):  # older generations and per-rank notes
        if f.startswith("rank-") and f not in keep and ".tmp-" not in f:
            try:
                os.remove(os.path.join(path, f))
            except OSError:
                pass


def _source_of(obj: Any, mesh, t, rank):
    """(mesh, type, {rank: local block}) from a numpy global or local array, a
    JAX array or a torch DTensor."""
    mod = type(obj).__module__
    if mod.startswith("jax") and hasattr(obj, "sharding"):
        from .jax_sharding import from_named_sharding, mesh_from_jax
        sh = obj.sharding
        m = mesh_from_jax(sh.mesh)
        at = from_named_sharding(sh, obj.shape)
        if t is not None and as_type(t, mesh or m, "saved") != at:
            raise CheckpointError(f"the array's sharding is {at}, not {t}")
        devices = list(sh.mesh.devices.flat)
        blocks = {}
        for s in obj.addressable_shards:
            r = devices.index(s.device)
            blocks[r] = np.asarray(s.data)
        return m, at, blocks
    if mod.startswith("torch") and hasattr(obj, "to_local") and hasattr(obj, "device_mesh"):
        from .dtensor import from_spec
        dm = obj.device_mesh
        names = dm.mesh_dim_names or tuple(f"d{i}" for i in range(dm.ndim))
        m = Mesh.from_dict(dict(zip(names, dm.mesh.shape)))
        at = from_spec(m, obj._spec)
        import torch.distributed as dist
        r = dm.mesh.flatten().tolist().index(dist.get_rank())
        return m, at, {r: obj.to_local().detach().cpu().numpy()}
    if mesh is None or t is None:
        raise CheckpointError("save needs mesh= and type= for a numpy array")
    m = Mesh.coerce(mesh)
    at = as_type(t, m, "saved")
    a = np.asarray(obj)
    if rank is None:
        if tuple(a.shape) != at.global_shape:
            raise CheckpointError(f"a global array of shape {a.shape} for {at} of shape {at.global_shape}; "
                                  f"pass rank= to save one local block")
        return m, at, {r: a[tuple(slice(s, s + l) for s, l in zip(at.block_starts(r), at.valid_shape(r)))]
                       for r in range(m.num_devices)}
    return m, at, {int(rank): a}


def save(obj: Any, mesh: Mesh | str | None = None, type: ArrayType | str | None = None, path: str = ".", *,
         rank: int | None = None, comm: Any = None, save_id: str | None = None) -> str | None:
    """Save a sharded array into the directory ``path``.

    ``obj`` is a numpy global array (every rank's file is written, then the
    manifest), a numpy local block with ``rank=`` (that rank's file), a JAX
    array (the shards this process holds; the mesh and type are read from its
    sharding) or a torch DTensor (this rank's shard; placements read from it).
    With ``comm`` (an mpi4py communicator over the saving ranks) the ranks
    agree on the save id, rank 0 gathers the entries and writes the manifest,
    and every rank returns once it is written. Without one, a rank saving
    only its own block leaves a note next to its file and :func:`commit`
    writes the manifest once every rank has saved (pass the same ``save_id``
    on every rank). Returns the manifest's path when this call wrote it."""
    os.makedirs(path, exist_ok=True)
    m, t, blocks = _source_of(obj, mesh, type, rank)
    if t.partial:
        raise CheckpointError(f"{t} has pending axes; reduce before saving")
    if comm is not None:
        save_id = comm.bcast(save_id or uuid.uuid4().hex[:12], root=0)
    elif save_id is None:
        save_id = uuid.uuid4().hex[:12] if len(blocks) == m.num_devices else "shared"
    entries = [_write_shard(path, r, np.asarray(b), t, save_id) for r, b in sorted(blocks.items())]
    dtypes = {e["dtype"] for e in entries}
    if comm is not None:
        everything = comm.gather(entries, root=0)
        out = None
        if comm.Get_rank() == 0:
            flat = [e for es in everything for e in es]
            out = _commit_entries(path, m, t, flat, save_id)
        comm.Barrier()
        return out
    if len(blocks) == m.num_devices:
        return _commit_entries(path, m, t, entries, save_id)
    if len(dtypes) != 1:
        raise CheckpointError(f"blocks of several dtypes: {sorted(dtypes)}")
    for e in entries:
        note = {"mesh": str(m), "type": str(t), "save_id": save_id, "entry": e}
        _atomic_write(os.path.join(path, f"rank-{e['rank']:05d}-{save_id}.json"),
                      [json.dumps(note).encode()])
    return None


def _commit_entries(path, m, t, entries, save_id):
    ranks = sorted(e["rank"] for e in entries)
    if ranks != list(range(m.num_devices)):
        missing = sorted(set(range(m.num_devices)) - set(ranks))
        raise CheckpointError(f"no file for ranks {missing}" if missing else f"ranks saved twice: {ranks}")
    dtypes = {e["dtype"] for e in entries}
    if len(dtypes) != 1:
        raise CheckpointError(f"ranks saved blocks of several dtypes: {sorted(dtypes)}")
    man = _manifest(m, t, np.dtype(dtypes.pop()), entries, save_id)
    _write_manifest(path, man)
    return os.path.join(path, MANIFEST)


def commit(path: str, save_id: str = "shared") -> str:
    """Write the manifest of a save whose ranks saved independently (their
    notes must all be there, of one mesh and type)."""
    notes = [f for f in os.listdir(path) if f.startswith("rank-") and f.endswith(f"-{save_id}.json")]
    if not notes:
        raise CheckpointError(f"{path}: no rank has saved under id {save_id!r}")
    loaded = []
    for f in notes:
        with open(os.path.join(path, f)) as fh:
            loaded.append(json.load(fh))
    kinds = {(n["mesh"], n["type"]) for n in loaded}
    if len(kinds) != 1:
        raise CheckpointError(f"{path}: ranks saved different meshes or types: {sorted(kinds)}")
    mtext, ttext = kinds.pop()
    m = Mesh.parse(mtext)
    return _commit_entries(path, m, ArrayType.parse(ttext, m), [n["entry"] for n in loaded], save_id)


# --- reading -------------------------------------------------------------------

def read_manifest(path: str) -> dict:
    """The manifest, checked against the files (present, of the recorded
    size and dtype) without reading them."""
    mp = os.path.join(path, MANIFEST)
    try:
        with open(mp) as f:
            man = json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no {MANIFEST} (not a checkpoint, or its save did not finish)") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{mp}: unreadable manifest ({e})") from None
    try:
        if man.get("format") != FORMAT or man.get("version") != VERSION:
            raise CheckpointError(f"{mp}: not a {FORMAT} version {VERSION} manifest")
        dtype = np.dtype(man["dtype"])
        m = Mesh.parse(man["mesh"])
        t = ArrayType.parse(man["type"], m)
        if list(t.global_shape) != list(man["global_shape"]):
            raise CheckpointError(f"{mp}: type {t} does not have the recorded global shape {man['global_shape']}")
        files = man["files"]
        if [e["rank"] for e in files] != list(range(m.num_devices)):
            raise CheckpointError(f"{mp}: files for ranks {[e['rank'] for e in files]}, "
                                  f"the mesh has {m.num_devices}")
        for e in files:
            fp = os.path.join(path, e["file"])
            if os.path.basename(e["file"]) != e["file"]:
                raise CheckpointError(f"{mp}: file name {e['file']!r} is not inside the checkpoint")
            if np.dtype(e["dtype"]) != dtype:
                raise CheckpointError(f"{e['file']}: dtype {np.dtype(e['dtype'])}, the manifest says {dtype}")
            shape = tuple(t.valid_shape(e["rank"]))
            if tuple(e["shape"]) != shape or tuple(e["start"]) != t.block_starts(e["rank"]):
                raise CheckpointError(f"{e['file']}: block {e['shape']} at {e['start']} is not rank "
                                      f"{e['rank']}'s block of {t}")
            want = int(np.prod(shape)) * dtype.itemsize
            if e["nbytes"] != want:
                raise CheckpointError(f"{e['file']}: {e['nbytes']} bytes recorded, a {shape} block of "
                                      f"{dtype} has {want}")
            cb = e["chunk_bytes"]
            if not isinstance(cb, int) or cb < 1 or len(e["chunks"]) != -(-want // cb):
                raise CheckpointError(f"{e['file']}: chunk digests do not cover the file")
            try:
                size = os.stat(fp).st_size
            except FileNotFoundError:
                raise CheckpointError(f"{e['file']}: missing (rank {e['rank']}'s block)") from None
            if size != e["offset"] + e["nbytes"]:
                raise CheckpointError(f"{e['file']}: {size} bytes, the manifest says "
                                      f"{e['offset'] + e['nbytes']} (truncated or overwritten)")
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{mp}: malformed manifest ({type(e).__name__}: {e})") from None
    man["_mesh"], man["_type"], man["_dtype"] = m, t, dtype
    return man


def _touched_chunks(file_shape, box, rows, itemsize, CHUNK):
    """Chunk indices holding bytes of rows ``rows`` (a range along dimension 0,
    absolute) of the local box ``box`` (slices) of a C-order file."""
    k = len(file_shape)
    strides = [itemsize] * k
    for d in range(k - 2, -1, -1):
        strides[d] = strides[d + 1] * file_shape[d + 1]
    ranges = [np.arange(rows.start, rows.stop)] + [np.arange(s.start, s.stop) for s in box[1:]]
    if k == 1:
        starts = np.array([rows.start * itemsize])
        run = (rows.stop - rows.start) * itemsize
    else:
        grids = np.ix_(*ranges[:-1])
        starts = sum(g * strides[d] for d, g in enumerate(grids)).reshape(-1) + box[-1].start * itemsize
        run = (box[-1].stop - box[-1].start) * itemsize
    if run == 0 or starts.size == 0:
        return np.zeros(0, dtype=np.int64)
    a = starts // CHUNK
    b = (starts + run - 1) // CHUNK
    if (b - a).max() <= 1:
        return np.unique(np.concatenate([a, b]))
    return np.unique(np.concatenate([np.arange(x, y + 1) for x, y in zip(a, b)]))


def load(path: str, mesh: Mesh | str, type: ArrayType | str, rank: int, *, dtype: Any = None,
         read_buffer: int = DEFAULT_READ_BUFFER, stats: dict | None = None, man: dict | None = None) -> np.ndarray:
    """Rank ``rank``'s block (its valid part) of the checkpoint in ``path``
    under ``type`` on ``mesh``: reads only the chunks of the pieces the
    verified schedule assigns it, checking each one's digest. ``stats``, if
    given, receives ``bytes_read`` and ``pieces``."""
    if man is None:
        man = read_manifest(path)
    sm, st, sdt = man["_mesh"], man["_type"], man["_dtype"]
    m = Mesh.coerce(mesh)
    t = as_type(type, m, "target")
    if dtype is not None and np.dtype(dtype) != sdt:
        raise CheckpointError(f"{path}: the checkpoint holds {sdt}, not {np.dtype(dtype)}")
    if t.global_shape != st.global_shape:
        raise CheckpointError(f"{path}: the checkpoint's global shape is {st.global_shape}, "
                              f"the target type's {t.global_shape}")
    if not 0 <= int(rank) < m.num_devices:
        raise CheckpointError(f"rank {rank} is not a device of {m}")
    n1 = sm.num_devices
    plan = crossmesh_plan(st, t, range(n1), range(n1, n1 + m.num_devices))
    j = int(rank)
    out = np.empty(t.valid_shape(j), dtype=sdt)
    buf = None
    read = 0
    fds: dict[int, int] = {}
    try:
        for p in plan.pieces[j]:
            e = man["files"][p.src]
            fshape = tuple(e["shape"])
            sbox = plan.src_local(p)
            dbox = plan.dst_local(j, p)
            rowbytes = int(np.prod(fshape[1:], dtype=np.int64)) * sdt.itemsize if len(fshape) > 1 else sdt.itemsize
            CHUNK = e["chunk_bytes"]
            per = max(1, read_buffer // max(1, rowbytes))
            need = per * rowbytes + 2 * CHUNK
            if buf is None or len(buf) < need:
                buf = bytearray(need)
            mv = memoryview(buf)
            if p.src not in fds:
                fds[p.src] = os.open(os.path.join(path, e["file"]), os.O_RDONLY)
            fd = fds[p.src]
            r0, r1 = sbox[0].start, sbox[0].stop
            for a in range(r0, r1, per):
                rows = range(a, min(a + per, r1))
                first = (a * rowbytes) // CHUNK
                touched = _touched_chunks(fshape, sbox, rows, sdt.itemsize, CHUNK).tolist()
                k0 = 0
                while k0 < len(touched):  # runs of consecutive chunks: one read each
                    k1 = k0
                    while k1 + 1 < len(touched) and touched[k1 + 1] == touched[k1] + 1:
                        k1 += 1
                    lo = touched[k0] * CHUNK
                    hi = min((touched[k1] + 1) * CHUNK, e["nbytes"])
                    at = lo - first * CHUNK
                    got = os.preadv(fd, [mv[at:at + hi - lo]], e["offset"] + lo)
                    if got != hi - lo:
                        raise CheckpointError(f"{e['file']}: short read at byte {lo} (truncated?)")
                    read += got
                    for c in touched[k0:k1 + 1]:
                        c0 = c * CHUNK - first * CHUNK
                        n = min(CHUNK, e["nbytes"] - c * CHUNK)
                        if hashlib.blake2b(mv[c0:c0 + n], digest_size=16).hexdigest() != e["chunks"][c]:
                            raise CheckpointError(f"{e['file']}: chunk {c} (bytes {c * CHUNK}-{c * CHUNK + n}) "
                                                  f"fails its checksum")
                    k0 = k1 + 1
                off = a * rowbytes - first * CHUNK
                k = len(rows)
                slab = np.frombuffer(buf, dtype=sdt, count=k * (rowbytes // sdt.itemsize),
                                     offset=off).reshape((k,) + fshape[1:])
                dst = (slice(dbox[0].start + (a - r0), dbox[0].start + (a - r0) + k),) + dbox[1:]
                out[dst] = slab[(slice(None),) + sbox[1:]]
                del slab
    finally:
        for fd in fds.values():
            os.close(fd)
    if stats is not None:
        stats["bytes_read"] = stats.get("bytes_read", 0) + read
        stats["pieces"] = stats.get("pieces", 0) + len(plan.pieces[j])
    return out


def verify(path: str) -> int:
    """Check every file's sha256 (reads everything); the number of files."""
    man = read_manifest(path)
    for e in man["files"]:
        h = hashlib.sha256()
        with open(os.path.join(path, e["file"]), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != e["sha256"]:
            raise CheckpointError(f"{e['file']}: sha256 mismatch")
    return len(man["files"])


def reshard(src: str, dst: str, mesh: Mesh | str, type: ArrayType | str, *,
            read_buffer: int = DEFAULT_READ_BUFFER, stats: dict | None = None) -> str:
    """Offline: rewrite the checkpoint ``src`` as ``dst`` with ``type`` on
    ``mesh``, one target block at a time (memory: the largest target block
    plus the read buffer)."""
    man = read_manifest(src)
    m = Mesh.coerce(mesh)
    t = as_type(type, m, "target")
    os.makedirs(dst, exist_ok=True)
    save_id = uuid.uuid4().hex[:12]
    entries = []
    for r in range(m.num_devices):
        block = load(src, m, t, r, read_buffer=read_buffer, stats=stats, man=man)
        entries.append(_write_shard(dst, r, block, t, save_id))
        del block
    return _commit_entries(dst, m, t, entries, save_id)
