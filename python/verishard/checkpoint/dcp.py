"""PyTorch DCP checkpoints read as they are: a directory written by
``torch.distributed.checkpoint.save`` (``.metadata`` and ``*.distcp``)
loaded onto any target of :func:`verishard.checkpoint.load`, reading only the
byte ranges of the stored chunks that the target's blocks need.

Each stored tensor chunk is a ``torch.save`` archive (a zip, stored
uncompressed) inside a ``.distcp`` file; its central directory and
``data.pkl`` (the storage, offset, size and stride) are read, and the data
is then read in place, row run by row run. Plain values (DCP's byte items)
are ``torch.load``-ed with ``weights_only=True``.

Nothing in a checkpoint runs. ``.metadata`` and each ``data.pkl`` are
pickles, read by Python's own pure-Python unpickler with its opcodes
narrowed to an exact allowlist (:class:`_Unpickler`):

- a global (GLOBAL, STACK_GLOBAL) is one of an exact list of ``(module,
  name)`` pairs, never a dotted name. ``.metadata``: DCP's dataclasses
  ``Metadata``, ``StorageMeta``, ``TensorStorageMetadata``,
  ``ChunkStorageMetadata``, ``TensorProperties``, ``BytesStorageMetadata``,
  ``MetadataIndex`` (``torch.distributed.checkpoint.metadata``) and
  ``_StorageInfo`` (``.filesystem``), the enum ``_MEM_FORMAT_ENCODING``,
  ``torch.Size``, ``torch.serialization._get_layout``, ``pathlib``'s
  ``PosixPath``, ``WindowsPath`` and their pure forms (the checkpoint's
  name, built as a pure path) and torch's dtypes by their canonical names. ``data.pkl``:
  ``torch._utils._rebuild_tensor_v2``/``_v3``, ``collections.OrderedDict``,
  torch's twelve typed storage classes, ``torch.storage.UntypedStorage`` and
  the dtypes. What comes back is a marker, never the object itself;
- REDUCE calls only our own constructor for the marker (a ``torch.Size`` of
  ints, a layout by its name, a memory format code, a pure path of strings,
  an empty OrderedDict, a tensor record of type-checked fields), NEWOBJ
  makes only an empty DCP dataclass, BUILD fills only a DCP dataclass not
  yet filled, only with the fields of DCP's schema, each of its type (never
  ``__setstate__``: ``TensorProperties``' tuple is read by our code), and
  appends and item sets go only to lists, dicts and sets;
- a persistent id is only ``("storage", storage class, key of digits,
  location, count >= 0)``; the other opcodes that build objects (INST, OBJ,
  NEWOBJ_EX, EXT*, out-of-band buffers) and protocol 0's text opcodes but
  GLOBAL are refused.

This is tighter than torch's weights-only unpickler (which calls the
allowlisted classes' own ``__setstate__`` and torch's rebuild functions,
and allows many more globals), which also cannot read DCP's protocol-4
``.metadata``. Then every value is checked against DCP's schema before a
byte of tensor data is read: each object of its class with all its fields;
names strings; tensor sizes and chunk offsets and sizes ints in [0,
2**62), at most ``MAX_DIMS`` of them, each chunk inside its tensor and the
chunks' elements summing to the tensor's (DCP's chunks partition a tensor),
no chunk list shared; storage offsets and lengths ints >= 0 lying inside
their file, which is a plain name of the directory. Per chunk: the archive's
``data.pkl`` stored and small, the storage's dtype the metadata's, its byte
count (count x element size) the archive member's, its zip entry header the
directory's (name, CRC and sizes, an extra field of whole records: where
the data starts hangs on it), the tensor (C order, from an element offset
>= 0) inside the storage and the storage inside the chunk's byte range. Every file is opened ``O_NOFOLLOW | O_NONBLOCK`` and
refused unless ``fstat`` says it is a regular file, before any read.

When a tensor's chunks are the blocks of one of our types (DTensor
``Shard`` saves: a grid of ``ceil(g / n)`` blocks) and the target is a type,
the pieces each target block needs come from the verified cross-mesh
schedule, as for our own checkpoints; otherwise (other chunks, or a DTensor
target our types cannot express: nested uneven shards, uneven
``_StridedShard``) from the verified box schedule between the chunks and the
target rank's boxes (``core.bplan``). DCP stores no checksums a reader of
pieces can check (the zip's CRC-32 of a storage covers all of it): a chunk
whose tensor bytes were changed, or whose metadata and ``data.pkl`` were
changed alike (both saying int32), loads what its bytes say. An empty tensor (a size of
0) loads whole only, as an empty array: no type of ours has a size of 0.
"""

from __future__ import annotations

import collections
import functools
import io
import itertools
import math
import os
import pickle
import struct
import zipfile
from typing import Any

import numpy as np

from .. import dtypes
from .format import MAX_MANIFEST_BYTES, dtype_name, open_regular
from ..errors import CheckpointError, DtypeError, VerishardError, show
from ..limits import CORE_INT_LIMIT, MAX_DIMS, show_int
from ..sharding import ArrayType

__all__ = ["DCPCheckpoint", "load"]

METADATA = ".metadata"
_MAX_INT = CORE_INT_LIMIT   # offsets, lengths and sizes this large are no file's
_ARCHIVE_READ = 1 << 20     # a chunk's torch.save directory and data.pkl (one tensor): a few hundred bytes
# torch.save's legacy storage classes (a frozen set: newer dtypes are saved as
# UntypedStorage with _rebuild_tensor_v3) and the dtype each holds
_TYPED_STORAGES = {"ByteStorage": "uint8", "CharStorage": "int8", "ShortStorage": "int16", "IntStorage": "int32",
                   "LongStorage": "int64", "HalfStorage": "float16", "FloatStorage": "float32",
                   "DoubleStorage": "float64", "BFloat16Storage": "bfloat16", "BoolStorage": "bool",
                   "ComplexFloatStorage": "complex64", "ComplexDoubleStorage": "complex128"}


def _want(ok: bool, what) -> None:
    """Refuse unless ``ok``; ``what`` says why (a string, or a function
    giving it, so that a message is only formatted when it is raised)."""
    if not ok:
        raise pickle.UnpicklingError(what() if callable(what) else what)


def _show(v: Any) -> str:   # an int of any size (str() refuses 4,300 digits), or a token
    return show_int(v) if type(v) is int else show(v)


def _is_ints(seq: Any) -> bool:
    return type(seq) in (tuple, list) and all(type(x) is int for x in seq)


class _Global:
    """An allowlisted global as the unpickler holds it: never the class or
    function itself, only what REDUCE (``call``, our own constructor of
    type-checked arguments) or NEWOBJ (``cls``, a DCP dataclass made empty
    and filled by a checked BUILD) may make of it."""

    def __init__(self, name: str, call=None, cls: type | None = None):
        self.name, self.call, self.cls = name, call, cls

    def __repr__(self):
        return self.name


class _StorageType:
    """A storage class named in a chunk's persistent id: the dtype of its
    elements (None: ``UntypedStorage``, counted in bytes)."""

    def __init__(self, dtype):
        self.dtype = dtype


class _StorageRef:
    """The persistent id ``("storage", type, key, location, numel)``."""

    def __init__(self, dtype, key: str, nbytes: int):
        self.dtype, self.key, self.nbytes = dtype, key, nbytes


class _Rebuilt:
    """What ``torch._utils._rebuild_tensor_v2``/``_v3`` would have built:
    the storage, the element offset in it, size, stride and dtype."""

    def __init__(self, storage: _StorageRef, offset: int, size: tuple, stride: tuple, dtype):
        self.storage, self.offset, self.size, self.stride, self.dtype = storage, offset, size, stride, dtype


def _rebuild_tensor(args: tuple, v3: bool) -> _Rebuilt:
    n = 7 if v3 else 6   # (storage, offset, size, stride, requires_grad, backward_hooks[, dtype][, metadata])
    _want(len(args) in (n, n + 1), f"a tensor rebuilt from {len(args)} arguments")
    storage, offset, size, stride, requires_grad, hooks = args[:6]
    _want(type(storage) is _StorageRef, "a tensor whose storage is not a storage")
    _want(type(offset) is int and 0 <= offset < _MAX_INT, lambda: f"a storage offset {_show(offset)}, not an int >= 0")
    _want(_is_ints(size) and all(0 <= x < _MAX_INT for x in size) and _is_ints(stride)
          and all(0 <= x < _MAX_INT for x in stride), "a tensor size or stride that is not ints >= 0")
    _want(type(requires_grad) is bool and type(hooks) is collections.OrderedDict and not hooks,
          "a tensor with backward hooks")
    _want(len(args) == n or args[n] is None or (type(args[n]) is dict and not args[n]), "a tensor with metadata")
    if v3:
        import torch
        _want(type(args[6]) is torch.dtype and storage.dtype is None, "a _rebuild_tensor_v3 of a typed storage")
        return _Rebuilt(storage, offset, tuple(size), tuple(stride), args[6])
    _want(storage.dtype is not None, "a _rebuild_tensor_v2 of an untyped storage")
    return _Rebuilt(storage, offset, tuple(size), tuple(stride), storage.dtype)


@functools.cache
def _allowlists() -> tuple[dict, dict, dict, dict]:
    """The exact ``(module, name)`` pairs a DCP ``.metadata`` and a chunk's
    ``data.pkl`` may name (what torch's DCP and torch.save write), the
    schema every BUILD is checked against (``{class: {field: check}}``) and
    the classes whose state is a tuple (read as their ``__setstate__``
    would, by our own code)."""
    import pathlib
    import torch
    from torch.distributed.checkpoint import filesystem
    from torch.distributed.checkpoint import metadata as M
    is_, Size = (lambda t: lambda v: type(v) is t), torch.Size
    opt = (lambda t: lambda v: v is None or type(v) is t)
    strs = (lambda v: type(v) in (list, tuple) and all(type(x) is str for x in v))
    schema = {
        M.Metadata: {"state_dict_metadata": is_(dict), "planner_data": lambda v: True, "storage_data": is_(dict),
                     "storage_meta": opt(M.StorageMeta), "version": opt(str)},
        M.StorageMeta: {"checkpoint_id": lambda v: v is None or type(v) in (str, pathlib.PurePosixPath,
                                                                           pathlib.PureWindowsPath),
                        "save_id": opt(str), "load_id": opt(str), "modules": strs},
        M.TensorStorageMetadata: {"properties": is_(M.TensorProperties), "size": is_(Size), "chunks": is_(list)},
        M.ChunkStorageMetadata: {"offsets": is_(Size), "sizes": is_(Size)},
        M.TensorProperties: {"dtype": is_(torch.dtype), "layout": is_(torch.layout), "requires_grad": is_(bool),
                             "memory_format": is_(torch.memory_format), "pin_memory": is_(bool)},
        M.BytesStorageMetadata: {},
        M.MetadataIndex: {"fqn": is_(str), "offset": opt(Size), "index": opt(int)},
        filesystem._StorageInfo: {"relative_path": is_(str), "offset": is_(int), "length": is_(int),
                                  "transform_descriptors": lambda v: v is None or strs(v)},
    }
    # canonical names only (torch.float32, not the alias torch.float): what a dtype pickles as
    dtypes = {("torch", n): v for n, v in vars(torch).items() if isinstance(v, torch.dtype) and str(v) == f"torch.{n}"}
    layouts = {str(v): v for v in vars(torch).values() if isinstance(v, torch.layout)}

    def size(*args):
        _want(len(args) == 1 and _is_ints(args[0]), "a torch.Size of something other than ints")
        return torch.Size(args[0])

    def layout(*args):
        _want(len(args) == 1 and type(args[0]) is str and args[0] in layouts, "not a torch layout")
        return layouts[args[0]]

    def mem_format(*args):
        _want(len(args) == 1 and type(args[0]) is int, "not a memory format code")
        return M._MEM_FORMAT_ENCODING(args[0])

    def pure_path(pure: type):   # a name only: never a path object that touches the file system
        def make(*args):
            _want(all(type(a) is str for a in args), "a path of something other than strings")
            return pure(*args)
        return make

    formats = {M._MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT: torch.contiguous_format,
               M._MEM_FORMAT_ENCODING.TORCH_CHANNELS_LAST: torch.channels_last,
               M._MEM_FORMAT_ENCODING.TORCH_PRESERVE_FORMAT: torch.preserve_format}

    def properties_state(state):   # TensorProperties.__getstate__'s tuple
        _want(type(state) is tuple and len(state) == 5 and type(state[3]) is M._MEM_FORMAT_ENCODING,
              "TensorProperties of another state than DCP's")
        dtype, layout, requires_grad, code, pin_memory = state
        return {"dtype": dtype, "layout": layout, "requires_grad": requires_grad, "memory_format": formats[code],
                "pin_memory": pin_memory}

    def ordered_dict(*args):
        _want(not args, "an OrderedDict built from arguments")
        return collections.OrderedDict()

    metadata = {(c.__module__, c.__name__): _Global(f"{c.__module__}.{c.__name__}", cls=c) for c in schema}
    metadata.update({(M.__name__, "_MEM_FORMAT_ENCODING"): _Global("_MEM_FORMAT_ENCODING", mem_format),
                     ("torch", "Size"): _Global("torch.Size", size),
                     ("torch.serialization", "_get_layout"): _Global("_get_layout", layout),
                     **{("pathlib", n): _Global(n, pure_path(pure)) for n, pure in (
                         ("PosixPath", pathlib.PurePosixPath), ("PurePosixPath", pathlib.PurePosixPath),
                         ("WindowsPath", pathlib.PureWindowsPath), ("PureWindowsPath", pathlib.PureWindowsPath))},
                     **dtypes})
    chunk = {("torch._utils", "_rebuild_tensor_v2"): _Global("_rebuild_tensor_v2",
                                                           lambda *a: _rebuild_tensor(a, False)),
             ("torch._utils", "_rebuild_tensor_v3"): _Global("_rebuild_tensor_v3", lambda *a: _rebuild_tensor(a, True)),
             ("collections", "OrderedDict"): _Global("OrderedDict", ordered_dict),
             ("torch.storage", "UntypedStorage"): _StorageType(None), **dtypes}
    chunk.update({("torch", n): _StorageType(getattr(torch, d)) for n, d in _TYPED_STORAGES.items()})
    return metadata, chunk, schema, {M.TensorProperties: properties_state}


class _Unpickler(pickle._Unpickler):
    """Python's own unpickler (the pure-Python one, whose opcodes can be
    replaced one by one) with an exact allowlist: the protocol 2-5 opcodes
    that build plain data (no INST, OBJ, NEWOBJ_EX, EXT*, out-of-band
    buffers, nor protocol 0's text opcodes but GLOBAL), and the few that can
    call code replaced by ours: GLOBAL/STACK_GLOBAL give only a marker of an
    allowed ``(module, name)`` (never a dotted name), REDUCE calls only our
    constructors of checked arguments, NEWOBJ makes only an empty DCP
    dataclass, BUILD fills only a DCP dataclass not yet filled, field by
    field against DCP's schema (never ``__setstate__``), and appends and
    item sets go only to lists, dicts and sets. About 2.6 times as slow as
    the C unpickler (2.5 MB of metadata, 16,000 chunks: 2.6 s against 1.0
    s on the shared cores), and only ``.metadata`` is large."""

    def __init__(self, raw: bytes, allowed: dict, schema: dict, states: dict):
        super().__init__(io.BytesIO(raw), fix_imports=False)
        self.allowed, self.schema, self.states = allowed, schema, states

    def find_class(self, module: str, name: str):
        _want("." not in name, lambda: f"the dotted name {show(module)}, {show(name)} (a walk through attributes)")
        found = self.allowed.get((module, name))
        _want(found is not None, lambda: f"{show(f'{module}.{name}', 80)} is not part of a DCP checkpoint")
        return found

    def persistent_load(self, pid):
        _want(type(pid) is tuple and len(pid) == 5 and pid[0] == "storage",
              lambda: f"persistent id {show(pid)} is not a storage")
        _, kind, key, location, numel = pid
        _want(type(kind) is _StorageType and type(key) is str and key.isdigit() and len(key) <= 20
              and type(location) is str and type(numel) is int and 0 <= numel < _MAX_INT,
              lambda: f"persistent id {show(pid)} is not (\"storage\", a storage class, a key, a location, a "
                      f"count)")
        return _StorageRef(kind.dtype, key, numel * (kind.dtype.itemsize if kind.dtype is not None else 1))

    def load_reduce(self):
        args, func = self.stack.pop(), self.stack[-1]
        _want(type(func) is _Global and func.call is not None and type(args) is tuple,
              lambda: f"a call of {show(func)}")
        self.stack[-1] = func.call(*args)

    def load_newobj(self):
        args, cls = self.stack.pop(), self.stack.pop()
        _want(type(cls) is _Global and cls.cls is not None and type(args) is tuple and not args,
              lambda: f"an object of {show(cls)}")
        self.append(object.__new__(cls.cls))

    def load_build(self):
        state, inst = self.stack.pop(), self.stack[-1]
        fields = self.schema.get(type(inst))
        _want(fields is not None and not vars(inst), lambda: f"a BUILD (__setstate__) of {show(type(inst).__name__)}")
        if type(inst) in self.states:   # a tuple, read as DCP's __setstate__ reads it
            state = self.states[type(inst)](state)
        _want(type(state) is dict and all(type(k) is str and k in fields and fields[k](v) for k, v in state.items()),
              lambda: f"{type(inst).__name__} with fields of other names or types than DCP's")
        vars(inst).update(state)

    def load_append(self):
        _want(type(self.stack[-2]) is list, "an append to something other than a list")
        super().load_append()

    def load_appends(self):
        _want(len(self.metastack) > 0 and type(self.metastack[-1][-1]) is list, "an append to something other than "
              "a list")
        super().load_appends()

    def load_setitem(self):
        _want(type(self.stack[-3]) is dict, "an item set on something other than a dict")
        super().load_setitem()

    def load_setitems(self):
        _want(len(self.metastack) > 0 and type(self.metastack[-1][-1]) is dict, "an item set on something other "
              "than a dict")
        super().load_setitems()

    def load_additems(self):
        _want(len(self.metastack) > 0 and type(self.metastack[-1][-1]) is set, "an add to something other than a set")
        super().load_additems()

    def refuse(self):
        raise pickle.UnpicklingError("an opcode DCP does not write")

    _PLAIN = ("PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP", "NONE", "NEWTRUE", "NEWFALSE", "BININT",
              "BININT1", "BININT2", "LONG1", "LONG4", "BINFLOAT", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8",
              "SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
              "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "FROZENSET", "BINGET", "LONG_BINGET", "BINPUT",
              "LONG_BINPUT", "MEMOIZE", "GLOBAL", "STACK_GLOBAL", "BINPERSID")
    dispatch = dict.fromkeys(range(256), refuse)
    dispatch.update({getattr(pickle, op)[0]: pickle._Unpickler.dispatch[getattr(pickle, op)[0]] for op in _PLAIN})
    dispatch.update({pickle.REDUCE[0]: load_reduce, pickle.NEWOBJ[0]: load_newobj, pickle.BUILD[0]: load_build,
                     pickle.APPEND[0]: load_append, pickle.APPENDS[0]: load_appends, pickle.SETITEM[0]: load_setitem,
                     pickle.SETITEMS[0]: load_setitems, pickle.ADDITEMS[0]: load_additems})


def _unpickle(raw: bytes, where: str, chunk: bool = False):
    metadata, data_pkl, schema, states = _allowlists()
    try:
        return _Unpickler(raw, data_pkl if chunk else metadata, schema, states).load()
    except Exception as e:   # noqa: BLE001  (it runs only our own constructors: any error is a malformed pickle)
        raise CheckpointError(f"{where}: not a DCP pickle ({type(e).__name__}: {str(e)[:160]}); nothing in it was "
                              f"run") from None


def _check_metadata(md: Any, where: str) -> None:
    """Every value the metadata's reader uses, against DCP's schema: the
    classes, that each holds its fields (the BUILD checked their types),
    tensor sizes and chunk boxes of ints >= 0 inside their tensor, storage
    offsets and lengths ints >= 0. Where they lie in their files is checked
    when a file is opened."""
    import torch
    from torch.distributed.checkpoint import filesystem
    from torch.distributed.checkpoint import metadata as M
    schema = _allowlists()[2]

    def complete(obj, cls, what):
        if type(obj) is not cls:
            raise CheckpointError(f"{where}: {what} is a {type(obj).__name__}, not DCP's {cls.__name__}")
        missing = [f for f in schema[cls] if f not in vars(obj) and not hasattr(cls, f)]
        if missing:
            raise CheckpointError(f"{where}: {what} has no {', '.join(missing)}")

    def sizes(seq, what):
        if len(seq) > MAX_DIMS:
            raise CheckpointError(f"{where}: {what} has {len(seq)} dimensions; at most {MAX_DIMS} "
                                  f"(verishard.limits.MAX_DIMS)")
        if not all(0 <= x < _MAX_INT for x in seq):
            raise CheckpointError(f"{where}: {what} {list(seq)} is not ints >= 0")

    if type(md) is not M.Metadata:
        raise CheckpointError(f"{where}: not DCP metadata (a {type(md).__name__})")
    complete(md, M.Metadata, "the metadata")
    seen: set[int] = set()
    for fqn, meta in md.state_dict_metadata.items():
        what = f"entry {show(fqn)}"
        if type(fqn) is not str:
            raise CheckpointError(f"{where}: an entry named by a {type(fqn).__name__}, not a string")
        if type(meta) is M.BytesStorageMetadata:
            continue
        complete(meta, M.TensorStorageMetadata, what)
        # each tensor's chunk list is its own (as DCP writes them): the walk
        # and the loads stay linear in the file, whatever a pickle shares
        if id(meta.chunks) in seen or any(id(c) in seen for c in meta.chunks):
            raise CheckpointError(f"{where}: {what} shares its chunks with another entry")
        seen.update(map(id, meta.chunks))
        seen.add(id(meta.chunks))
        complete(meta.properties, M.TensorProperties, f"{what}'s properties")
        if meta.properties.layout is not torch.strided:
            raise CheckpointError(f"{where}: {what} has layout {meta.properties.layout}; only dense (strided) "
                                  f"tensors are read")
        sizes(meta.size, f"{what}'s size")
        for c in meta.chunks:
            complete(c, M.ChunkStorageMetadata, f"a chunk of {what}")
            sizes(c.offsets, f"a chunk offset of {what}")
            sizes(c.sizes, f"a chunk size of {what}")
            if not len(c.offsets) == len(c.sizes) == len(meta.size) or \
                    any(o + n > g for o, n, g in zip(c.offsets, c.sizes, meta.size)):
                raise CheckpointError(f"{where}: {what}'s chunk at {list(c.offsets)} of size {list(c.sizes)} is not "
                                      f"inside its size {list(meta.size)}")
    for k, v in md.storage_data.items():
        complete(k, M.MetadataIndex, "a storage key")
        if k.offset is not None:
            sizes(k.offset, f"the storage key offset of {show(k.fqn)}")
        complete(v, filesystem._StorageInfo, f"the storage of {show(k.fqn)}")
        if not (0 <= v.offset < _MAX_INT and 0 <= v.length < _MAX_INT):
            raise CheckpointError(f"{where}: the storage of {show(k.fqn)} at byte {show_int(v.offset)}, "
                                  f"{show_int(v.length)} bytes long: not ints >= 0")


class _Window(io.RawIOBase):
    """Bytes [start, start + length) of an open file, as a seekable file (for
    zipfile), counting what is read; one read returns at most
    ``_ARCHIVE_READ`` bytes, so a hostile archive cannot make zipfile
    allocate more (nor read a directory larger than that)."""

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

    def read(self, n=-1):
        n = self.length - self.pos if n is None or n < 0 else n
        b = bytearray(max(0, min(n, self.length - self.pos, _ARCHIVE_READ)))
        return bytes(b[:self.readinto(b)])

    def readall(self):
        return self.read()

    def readinto(self, b):
        n = max(0, min(len(b), self.length - self.pos))
        got = os.preadv(self.fd, [memoryview(b)[:n]], self.start + self.pos) if n and self.pos >= 0 else 0
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
        try:
            import torch.distributed.checkpoint  # noqa: F401  (DCP's classes: what its metadata is made of)
        except ImportError as e:
            raise CheckpointError(f"{path}: a PyTorch DCP checkpoint; reading it needs torch with "
                                  f"torch.distributed ({e})") from None
        self.path, self.fds, self.counter = path, {}, [0]
        try:
            self.dirfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            raise CheckpointError(f"{path}: cannot open ({e.strerror})") from None
        try:
            raw = self._read_small(METADATA)
            self.md = _unpickle(raw, os.path.join(path, METADATA))
            _check_metadata(self.md, os.path.join(path, METADATA))
        except BaseException:
            self.close()
            raise
        self.storage = {(k.fqn, None if k.offset is None else tuple(k.offset)): v
                        for k, v in self.md.storage_data.items()}

    def _read_small(self, name: str) -> bytes:
        fd = self._open(name)
        size = os.fstat(fd).st_size
        if size > MAX_MANIFEST_BYTES:
            raise CheckpointError(f"{self.path}/{name}: {size} bytes, more than metadata may have")
        self.counter[0] += size
        return os.pread(fd, size, 0)

    def _open(self, name: str) -> int:
        """The file ``name`` of the directory, opened by
        :func:`verishard.checkpoint.format.open_regular` (a regular file only, checked
        before any read: a FIFO does not block)."""
        if not isinstance(name, str) or "/" in name or "\0" in name or name in ("", ".", "..") or len(name) > 255:
            raise CheckpointError(f"{self.path}: DCP file name {show(name)} is not a file of the directory")
        if name not in self.fds:
            try:
                fd = open_regular(self.dirfd, name, f"{self.path}/{name}")
            except FileNotFoundError:
                raise CheckpointError(f"{self.path}/{name}: missing") from None
            self.fds[name] = fd
        return self.fds[name]

    def _stored(self, info: Any, where: str) -> int:
        """The open file of a storage entry, whose byte range lies inside it."""
        fd = self._open(info.relative_path)
        size = os.fstat(fd).st_size
        if info.offset + info.length > size:
            raise CheckpointError(f"{where}: bytes {info.offset} to {info.offset + info.length} of "
                                  f"{info.relative_path}, which has {size} (truncated?)")
        return fd

    def _local_header(self, fd: int, at: int, member: zipfile.ZipInfo, where: str) -> int:
        """The length of ``member``'s local header at byte ``at``, checked."""
        local = bytes(os.pread(fd, 30, at))
        if len(local) == 30:
            name_len, extra_len = struct.unpack("<HH", local[26:30])
            local += bytes(os.pread(fd, name_len + extra_len, at + 30))
        self.counter[0] += len(local)
        n = _local_header_length(local, member)
        if n is None:
            raise CheckpointError(f"{where}: the zip entry header of its storage is not the directory's (changed?)")
        return n

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}
        os.close(self.dirfd)

    def names(self) -> list[str]:
        return list(self.md.state_dict_metadata)

    def value(self, fqn: str):
        import torch
        info = self.storage.get((fqn, None))
        if info is None:
            raise CheckpointError(f"{self.path}: no stored bytes for {fqn!r}")
        fd = self._stored(info, f"{self.path}: {fqn!r}")
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
            dtype = dtypes.numpy_dtype(dtypes.name_of(meta.properties.dtype))   # bfloat16, float8: ml_dtypes
        except DtypeError as e:
            raise CheckpointError(f"{self.path}: {fqn!r}: {e}") from None
        shape = tuple(int(s) for s in meta.size) or (1,)   # a 0-d tensor: one element
        # DCP's chunks partition the tensor: with every chunk inside its file,
        # nothing larger than the files is ever allocated
        volume = sum(math.prod(c.sizes) for c in meta.chunks)
        if volume != math.prod(meta.size):
            raise CheckpointError(f"{self.path}: {fqn!r}'s chunks hold {volume} elements, its size "
                                  f"{list(meta.size)} {math.prod(meta.size)}")
        chunks = [self._chunk(fqn, c, meta.properties.dtype) for c in meta.chunks]
        return shape, dtype, chunks

    def _chunk(self, fqn: str, c, dtype) -> _Chunk:
        """A chunk's torch.save archive: its directory and data.pkl read and
        checked (the storage's dtype and byte count against the metadata's
        dtype, the tensor's bytes inside the storage, the storage inside the
        chunk's byte range) before any of its data is."""
        offsets, sizes = tuple(c.offsets) or (0,), tuple(c.sizes) or (1,)
        info = self.storage.get((fqn, tuple(c.offsets)))
        where = f"{self.path}: {fqn!r} chunk at {offsets}"
        if info is None:
            raise CheckpointError(f"{where}: no storage entry")
        if info.transform_descriptors:
            raise CheckpointError(f"{where}: stored with transforms {list(info.transform_descriptors)} "
                                  f"(compressed?); only plain torch.save chunks are read in place")
        fd = self._stored(info, where)
        win = _Window(fd, info.offset, info.length, self.counter)
        try:
            z = zipfile.ZipFile(win)
            pkls = [m for m in z.infolist() if m.filename.endswith("/data.pkl")]
            if len(pkls) != 1 or pkls[0].compress_type != zipfile.ZIP_STORED or pkls[0].file_size > _ARCHIVE_READ:
                raise CheckpointError(f"{where}: not a torch.save archive (no single stored data.pkl)")
            rebuilt = _unpickle(z.read(pkls[0]), where, chunk=True)
            if not isinstance(rebuilt, _Rebuilt):
                raise CheckpointError(f"{where}: the chunk is not a tensor")
            member = z.getinfo(f"{pkls[0].filename[:-len('data.pkl')]}data/{rebuilt.storage.key}")
        except CheckpointError:
            raise
        except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, KeyError, OSError,
                ValueError, EOFError, OverflowError, MemoryError, struct.error) as e:
            raise CheckpointError(f"{where}: not a torch.save archive ({type(e).__name__}: {e})") from None
        if member.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(f"{where}: its storage is compressed")
        if rebuilt.dtype != dtype:
            raise CheckpointError(f"{where}: its storage holds {rebuilt.dtype}, the metadata says {dtype}")
        if member.file_size != rebuilt.storage.nbytes:
            raise CheckpointError(f"{where}: its storage has {member.file_size} bytes, data.pkl says "
                                  f"{rebuilt.storage.nbytes}")
        if not 0 <= member.header_offset <= info.length - 30:
            raise CheckpointError(f"{where}: bad zip entry header")
        start = member.header_offset + self._local_header(fd, info.offset + member.header_offset, member, where)
        contiguous = tuple(math.prod(rebuilt.size[d + 1:]) for d in range(len(rebuilt.size)))
        if (rebuilt.size or (1,)) != sizes or (math.prod(sizes) > 1 and rebuilt.stride != contiguous):
            raise CheckpointError(f"{where}: stored as {rebuilt.size} with stride {rebuilt.stride}, the metadata "
                                  f"says {sizes} (C order)")
        if (rebuilt.offset + math.prod(sizes)) * dtype.itemsize > member.file_size:
            raise CheckpointError(f"{where}: its storage of {member.file_size} bytes is shorter than the chunk "
                                  f"({math.prod(sizes)} elements of {dtype} from element {rebuilt.offset})")
        if start + member.file_size > info.length:
            raise CheckpointError(f"{where}: its storage ends after the chunk's {info.length} bytes")
        return _Chunk(offsets, sizes, fd, info.offset + start + rebuilt.offset * dtype.itemsize, info.relative_path)


def _local_header_length(local: bytes, member: zipfile.ZipInfo) -> int | None:
    """The length of the zip local header ``local`` (its 30 fixed bytes, then
    at least its name and extra field) of ``member``, if it is that member's:
    the signature, the name the central directory's, the CRC and sizes too
    where the header holds them, and the extra field whole records; else
    None. Where the storage's bytes start hangs on it, and no checksum a
    reader of pieces can check covers that."""
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        return None
    flags, crc, csize, size, name_len, extra_len = struct.unpack("<xxxxxxH6xIIIHH", local[:30])
    name = member.orig_filename.encode("utf-8" if flags & 0x800 else "cp437", "replace")
    if len(local) < 30 + name_len + extra_len or local[30:30 + name_len] != name:
        return None
    if not flags & 0x08 and (crc != member.CRC or (size != 0xFFFFFFFF and (csize, size) !=
                                                   (member.compress_size, member.file_size))):
        return None
    extra, k = local[30 + name_len:30 + name_len + extra_len], 0
    while k + 4 <= len(extra):
        k += 4 + struct.unpack("<H", extra[k + 2:k + 4])[0]
    return 30 + name_len + extra_len if k == len(extra) else None


def _grid_type(shape: tuple[int, ...], chunks: list[_Chunk]) -> tuple[ArrayType, list[int]] | None:
    """Our type whose blocks are exactly the chunks (one mesh axis per split
    dimension, blocks of ceil(g / n)), and the chunk of every rank; or None."""
    axes, dims, starts = [], [], []
    if not chunks:   # an empty tensor
        return None
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
        from ..mesh import Mesh
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
        buf = memoryview(flat[pos:pos + run // isz].view(np.uint8)) if run else b""   # (ml_dtypes: no buffer)
        if run:
            got = os.preadv(chunk.fd, [buf], off)
            if got != run:
                raise CheckpointError(f"{chunk.name}: short read at byte {off} (truncated?)")
            counter[0] += got
        pos += run // isz


def _load_tensor(ck: DCPCheckpoint, fqn: str, t: Any, j: int) -> np.ndarray:
    """Target device ``j``'s block under ``t`` (our type, or the target
    rank's boxes of a layout our types cannot express), piece by piece."""
    from .targets import Boxes, box_pieces
    from ..crossmesh import crossmesh_plan
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
        boxes = t if isinstance(t, Boxes) else Boxes.of_block(t, j)
        out = np.empty(boxes.local_shape, dtype=dtype)
        pieces = [(chunks[i], box, dst) for i, box, dst in
                  box_pieces([tuple(zip(c.offsets, c.sizes)) for c in chunks], boxes)]
    for c, box, dst in pieces:
        piece = np.empty(tuple(n for _, n in box), dtype=dtype)
        _read_into(c, box, piece, dtype, ck.counter)
        out[dst] = piece
    return out


def load(path: str, targets: Any = None, type: Any = None, rank: int | None = None, *, dtype: Any = None,
         read_buffer: int = 0, stats: dict | None = None) -> Any:
    """:func:`verishard.checkpoint.load` on a DCP directory (same targets and
    results; names are DCP's flattened names, nested at ``.``)."""
    from .targets import finish_target, is_one_target, select, target_of
    ck = DCPCheckpoint(path)
    try:
        legacy = is_one_target(targets, type)
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
            if dtype is not None and dtype_name(dtype, path) != dtypes.name_of(dt):
                raise CheckpointError(f"{path}: {fqn!r} is {dt}, not {dtype_name(dtype, path)}")
            if 0 in shape:   # an empty tensor: no type of ours holds it, so it loads whole only
                if spec is not None:
                    raise CheckpointError(f"{path}: {fqn!r} is empty (size {list(shape)}); load it whole (target None)")
                out[key] = np.empty(shape, dtype=dt)
                continue
            try:
                t, ranks, finish = target_of(spec, _Shape(shape), rank, f"{path}: {fqn!r}")
                blocks = [_load_tensor(ck, fqn, t, j) for j in ranks]
            except CheckpointError:
                raise
            except VerishardError as e:
                raise CheckpointError(f"{path}: {fqn!r}: {e}") from None
            needed += sum(b.nbytes for b in blocks)
            if spec is None and not ck.md.state_dict_metadata[fqn].size:   # a 0-d tensor
                blocks = [blocks[0].reshape(())]
            out[key] = finish_target(finish, blocks, f"{path}: {fqn!r}")
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
    """What :func:`verishard.checkpoint.targets.target_of` needs of an entry: its type's global shape."""

    def __init__(self, shape):
        self.t = ArrayType.parse(f"[{', '.join(map(str, shape))}]", "one=1")
