"""The on-disk format of :mod:`verishard.checkpoint`, and everything that
reads it defensively: the manifest's schema, the block headers, the digest
tiles, and the directory's file names.

A checkpoint directory holds:

* ``manifest.json``: the commit point. Its ``digest`` is the sha256 of its
  own canonical content (every other key, sorted, compact JSON); ``files``
  names every data file and its size; ``entries`` lists every saved name:
  a plain value, or an array (mesh, type, dtype, and per source rank the
  file and offsets of its block).
* ``<id>-p00003.bin``: the blocks process 3 saved under save id ``<id>``.
  Each block is a header (JSON: format, save id, name, rank, dtype, global
  shape, block start and shape), a digest table, then the block's valid
  part in C order. The digest table holds the 2-D prefix sums (mod 2**64)
  of a 64-bit blake2b digest per *tile* (:func:`tiles`, :func:`table_of`).
* while a save runs: ``.tmp-<token>+<name>`` files, ``.writer-<token>``
  markers (a token is ``<id>~<pid>-<8 hex>``; a live writer holds an
  ``flock`` on its marker) and, for ranks saving without a communicator,
  ``<id>-p00003.json`` notes; ``.lock`` serialises commits.

Blocks never share bytes (a manifest whose blocks overlap is refused), and
every file is opened by :func:`open_regular` (regular files only).

Tiles: a block is viewed as rows (every dimension but the last; a 1-D block
as rows of one element) by columns (the last dimension). Columns are cut at
the block boundaries of every split into ``n <= 8`` blocks, flat (``k *
ceil(g / n)``: the uneven blocks of our types and ``torch.chunk``) or nested
(DTensor's ``torch.chunk`` of each chunk over several mesh dimensions, for
every ordered factoring of ``n``; most of its ``_StridedShard`` splits start
there too), rows at
those of the first dimension and every ``G`` rows (tiles of about 64 KiB on
average); blocks under 16 KiB are cut every ``G`` rows only. A reader
checks any rectangle of tiles with four table entries (32 bytes): one whose
box starts and ends on cuts (any target that splits a dimension into at
most 8 blocks, flat or nested) reads exactly its bytes plus 32 per
rectangle; otherwise it reads the tiles around its box. The table costs 8
bytes per tile (at most about 40 x 40 tiles plus the row groups per block).

>>> cols = tiles((4096, 64), (0, 0), (2048, 64), 4)[1]   # columns: where 2..8 blocks of 64 start
>>> cols[:5], 22 in cols, 11 in cols                       # 3 blocks of 22, 6 of 11, ...
((0, 8, 10, 11, 13), True, True)
"""

from __future__ import annotations

import bisect
import errno
import fcntl
import hashlib
import json
import math
import os
import re
import stat
import struct
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from .. import dtypes
from ..errors import CheckpointError, DtypeError, VerishardError, show
from ..limits import MAX_ELEMENTS
from ..mesh import Mesh
from ..sharding import ArrayType

__all__ = ["FORMAT", "VERSION", "MANIFEST", "digest", "data_name", "tiles", "table_entries", "as_rows",
           "tile_hash", "tile_sum", "table_of", "span", "parse_json", "canonical", "manifest_digest", "need",
           "need_int", "need_text", "need_list", "need_path", "parse_layout", "parse_dtype", "dtype_name",
           "value_to_json", "value_from_json", "Block", "Entry", "Manifest", "check_header", "header_fields",
           "file_kind", "open_regular", "open_in", "least_table_entries"]

FORMAT = "verishard-checkpoint"
BLOCK_FORMAT = "verishard-block"
VERSION = 4                        # 3: tiles also cut where nested splits start; 4: dtypes by name
READS = (3, 4)                     # version 3 stored numpy's dtype text ("<f4"): still read
MANIFEST = "manifest.json"
LOCK = ".lock"
MAX_MANIFEST_BYTES = 64 << 20      # a manifest is names and offsets: far below this
MAX_HEADER_BYTES = 64 << 10
MAX_TEXT = 4096                    # a mesh or type in the manifest
MAX_NAME = 255                     # one key of a state dict
MAX_DEPTH = 32                     # nesting of a state dict
MAX_ENTRIES = 1 << 20
MAX_OFFSET = 1 << 50
DIGEST_BYTES = 8
SPLITS = 8
TILE_BYTES = 64 << 10
MAX_TILE_BYTES = 1 << 20
SMALL_BLOCK = 16 << 10        # smaller blocks are cut every G rows only
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
FILE_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]{0,63})-p(\d{5,7})\.(bin|json)")
# version 3's dtypes: numpy's text of numbers and booleans, never objects, strings or raw bytes
DTYPE_RE = re.compile(r"[<>|](b1|i[1248]|u[1248]|f[248]|c(8|16))")
MAX_DTYPE = 16                     # the longest name of verishard.dtypes.NAMES, and more


def digest(data) -> bytes:
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()


def data_name(save_id: str, process: int, ext: str = "bin") -> str:
    return f"{save_id}-p{process:05d}.{ext}"


# --- tiles ----------------------------------------------------------------------

def _factorings(n: int) -> list[tuple[int, ...]]:
    """Every ordered factoring of ``n`` into factors of 2 or more (``(n,)`` included; ``()`` for 1)."""
    if n == 1:
        return [()]
    return [(f, *rest) for f in range(2, n + 1) if n % f == 0 for rest in _factorings(n // f)]


NESTINGS = tuple(f for n in range(2, SPLITS + 1) for f in _factorings(n))


def _nested_starts(lo: int, g: int, splits: tuple[int, ...], out: set) -> None:
    """Where the pieces of ``torch.chunk`` of [lo, lo + g) into ``splits[0]``, each chunked again by the rest, start."""
    c = -(-g // splits[0])
    for k in range(splits[0]):
        if k * c >= g:
            break
        out.add(lo + k * c)
        if len(splits) > 1:
            _nested_starts(lo + k * c, min(g - k * c, c), splits[1:], out)


@lru_cache(maxsize=4096)
def _cuts(g: int) -> list[int]:
    """Where the blocks of a split of ``g`` into 2..SPLITS blocks start:
    flat (``ceil(g / n)``: our uneven blocks, ``torch.chunk``) or nested
    (every ordered factoring of ``n``: DTensor's ``torch.chunk`` of each
    chunk over several mesh dimensions; its ``_StridedShard`` splits start
    there too, but for a few uneven ones over three mesh dimensions).

    >>> 766 in _cuts(1021)   # [Shard(0), Shard(0)] over 2 x 2: the chunk of rows 511-1020 chunked at 511 + 255
    True
    """
    out: set = set()
    for splits in NESTINGS:
        _nested_starts(0, g, splits, out)
    return sorted(out - {0})


def _grid(global_shape: tuple[int, ...], start: tuple[int, ...], shape: tuple[int, ...],
          itemsize: int) -> tuple[int, int, bool, tuple[int, ...], int]:
    """A block's rows, rows per dimension-0 index, whether it is small, its
    column cuts and its rows per row group (module docstring)."""
    if len(shape) == 1:
        rows, cols, lead = shape[0], 1, 1
    else:
        rows, cols, lead = math.prod(shape[:-1]), shape[-1], math.prod(shape[1:-1])
    small = rows * cols * itemsize < SMALL_BLOCK
    col_cuts = {0, cols}
    if len(shape) > 1 and not small:
        col_cuts |= {b - start[-1] for b in _cuts(global_shape[-1]) if start[-1] < b < start[-1] + cols}
    row_bytes = max(1, cols * itemsize)
    per = max(1, min(-(-TILE_BYTES * (len(col_cuts) - 1) // row_bytes), MAX_TILE_BYTES // row_bytes))
    return rows, lead, small, tuple(sorted(col_cuts)), per


def least_table_entries(global_shape: tuple[int, ...], start: tuple[int, ...], shape: tuple[int, ...],
                        itemsize: int) -> int:
    """A lower bound of :func:`table_entries` of a block, without listing its
    cuts (a reader checks it against the bytes the table has in its file
    before listing them)."""
    rows, _, _, col_cuts, per = _grid(global_shape, start, shape, itemsize)
    return (-(-rows // per) + 1) * len(col_cuts)


@lru_cache(maxsize=4096)
def tiles(global_shape: tuple[int, ...], start: tuple[int, ...], shape: tuple[int, ...],
          itemsize: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Row cuts and column cuts of a block (module docstring)."""
    rows, lead, small, col_cuts, per = _grid(global_shape, start, shape, itemsize)
    row_cuts = set(range(0, rows, per)) | {rows}
    if not small:
        row_cuts |= {(b - start[0]) * lead for b in _cuts(global_shape[0]) if start[0] < b < start[0] + shape[0]}
    return tuple(sorted(row_cuts)), col_cuts


def table_entries(row_cuts, col_cuts) -> int:
    return len(row_cuts) * len(col_cuts)


def as_rows(block: np.ndarray) -> np.ndarray:
    """The block as a 2-D array of raw bytes: rows by (columns x itemsize)."""
    if block.ndim == 1:
        return block.reshape(-1, 1).view(np.uint8)
    return block.reshape(math.prod(block.shape[:-1]), block.shape[-1]).view(np.uint8)


def tile_hash(i: int, j: int, data) -> int:
    """The 64-bit digest of tile (i, j): blake2b keyed by the tile's position
    (so that moved tiles do not add up the same)."""
    h = hashlib.blake2b(digest_size=DIGEST_BYTES, person=struct.pack("<QQ", i, j))
    h.update(data)
    return int.from_bytes(h.digest(), "little")


def tile_sum(raw: np.ndarray, row_cuts, col_cuts, g: int, h: int, s: int, e: int, r0: int, c0: int,
             itemsize: int) -> int:
    """The sum (mod 2**64) of the digests of tiles [g, h) x [s, e), whose bytes
    ``raw`` holds from row ``r0`` and column ``c0`` on."""
    total = 0
    for j in range(s, e):
        x0, x1 = (col_cuts[j] - c0) * itemsize, (col_cuts[j + 1] - c0) * itemsize
        for i in range(g, h):
            total += tile_hash(i, j, np.ascontiguousarray(raw[row_cuts[i] - r0:row_cuts[i + 1] - r0, x0:x1]))
    return total % (1 << 64)


def table_of(block: np.ndarray, row_cuts, col_cuts) -> bytes:
    """The digest table of a C-contiguous block: the 2-D prefix sums (mod
    2**64) of its tiles' digests, ``(len(row_cuts), len(col_cuts))`` little-
    endian uint64, so that a reader checks any rectangle of tiles with four
    entries."""
    raw = as_rows(block)
    isz = block.dtype.itemsize
    sums = np.zeros((len(row_cuts), len(col_cuts)), dtype=np.uint64)
    for i in range(len(row_cuts) - 1):
        for j in range(len(col_cuts) - 1):
            sums[i + 1, j + 1] = tile_sum(raw, row_cuts, col_cuts, i, i + 1, j, j + 1, 0, 0, isz)
    sums = sums.cumsum(axis=0, dtype=np.uint64).cumsum(axis=1, dtype=np.uint64)   # wraps: mod 2**64
    return sums.astype("<u8").tobytes()


def span(cuts, lo: int, hi: int) -> tuple[int, int]:
    """Indices (i, j) of the cuts around ``[lo, hi)``: cuts[i] <= lo, cuts[j] >= hi."""
    return bisect.bisect_right(cuts, lo) - 1, bisect.bisect_left(cuts, hi)


# --- strict JSON ----------------------------------------------------------------

def _no_constant(name):
    raise ValueError(f"{name} is not allowed")


def _no_float(text):
    raise ValueError(f"a non-integer number {text[:20]}")


def parse_json(raw: bytes, where: str) -> Any:
    """JSON of the format: objects, lists, strings, integers, true/false/null;
    any other content, a nesting too deep for Python, or bad UTF-8 is one
    :class:`CheckpointError`."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant, parse_float=_no_float)
    except RecursionError:
        raise CheckpointError(f"{where}: nested too deeply (not a manifest of this format)") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{where}: not valid JSON ({str(e)[:120]})") from None


def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def manifest_digest(man: dict) -> str:
    return hashlib.sha256(canonical({k: v for k, v in man.items() if k != "digest"})).hexdigest()


# --- schema ---------------------------------------------------------------------

def need(obj: Any, key: str, kind: type | tuple, where: str) -> Any:
    """``obj[key]`` of ``kind`` (obj a dict), else one error naming the field."""
    if not isinstance(obj, dict):
        raise CheckpointError(f"{where}: expected a JSON object, found {type(obj).__name__}")
    if key not in obj:
        raise CheckpointError(f"{where}: no field {key!r}")
    v = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds):
        raise CheckpointError(f"{where}: field {key!r} is a {type(v).__name__}, not "
                              f"{' or '.join(k.__name__ for k in kinds)}")
    return v


def need_int(obj: Any, key: str, where: str, lo: int = 0, hi: int = MAX_OFFSET) -> int:
    v = need(obj, key, int, where)
    if not lo <= v <= hi:
        raise CheckpointError(f"{where}: field {key!r} = {show(v)} is outside [{lo}, {hi}]")
    return v


def need_text(obj: Any, key: str, where: str, limit: int = MAX_TEXT, pattern: re.Pattern | None = None) -> str:
    v = need(obj, key, str, where)
    if len(v) > limit:
        raise CheckpointError(f"{where}: field {key!r} is longer than {limit} characters")
    if pattern is not None and not pattern.fullmatch(v):
        raise CheckpointError(f"{where}: field {key!r} = {show(v)} is not a valid {key}")
    return v


def need_list(obj: Any, key: str, where: str, limit: int) -> list:
    v = need(obj, key, list, where)
    if len(v) > limit:
        raise CheckpointError(f"{where}: field {key!r} has more than {limit} items")
    return v


def need_path(obj: Any, where: str) -> tuple[str, ...]:
    v = need_list(obj, "path", where, MAX_DEPTH)
    if not v or any(not isinstance(k, str) or not 0 < len(k) <= MAX_NAME for k in v):
        raise CheckpointError(f"{where}: field 'path' is not 1 to {MAX_DEPTH} keys of 1 to {MAX_NAME} characters")
    return tuple(v)


def parse_layout(mesh_text: str, type_text: str, where: str) -> ArrayType:
    """The saved mesh and type, any parsing problem named as the manifest's."""
    try:
        return ArrayType.parse(type_text, Mesh.parse(mesh_text))
    except VerishardError as e:
        raise CheckpointError(f"{where}: mesh {show(mesh_text)} / type {show(type_text)}: {e}") from None
    except (RecursionError, MemoryError, OverflowError):
        raise CheckpointError(f"{where}: mesh {show(mesh_text)} / type {show(type_text)} cannot be read") from None


def parse_dtype(text: str, where: str) -> np.dtype:
    """The numpy dtype of a stored dtype: a name of :data:`verishard.dtypes.NAMES`
    (bfloat16 and float8 through ml_dtypes), or version 3's numpy text."""
    if DTYPE_RE.fullmatch(text):
        return np.dtype(text)
    try:
        return dtypes.numpy_dtype(text)
    except DtypeError as e:
        raise CheckpointError(f"{where}: {e}") from None


def dtype_name(dtype: Any, where: str) -> str:
    """The name a block of ``dtype`` is stored under; one error for a dtype
    this format does not store."""
    try:
        return dtypes.name_of(dtype)
    except DtypeError as e:
        raise CheckpointError(f"{where}: {e}") from None


def value_to_json(v: Any, where: str) -> dict:
    """A plain value (None, bool, int, float, str) as a manifest object; floats
    exactly (``float.hex``), ints as decimal text."""
    if v is None or isinstance(v, (bool, np.bool_)):
        return {"kind": "value", "value": None if v is None else bool(v)}
    if isinstance(v, (int, np.integer)):
        text = str(int(v))
        if len(text) > 1000:
            raise CheckpointError(f"{where}: an integer of {len(text)} digits (at most 1000)")
        return {"kind": "int", "value": text}
    if isinstance(v, (float, np.floating)):
        return {"kind": "float", "value": float(v).hex()}
    if isinstance(v, str):
        if len(v) > 1 << 20:
            raise CheckpointError(f"{where}: a string of {len(v)} characters (at most 2**20)")
        return {"kind": "str", "value": v}
    raise CheckpointError(f"{where}: a {type(v).__name__} is neither an array nor a plain value "
                          f"(None, bool, int, float, str)")


def value_from_json(e: dict, where: str) -> Any:
    kind = need(e, "kind", str, where)
    if kind == "value":
        v = e.get("value")
        if v is not None and not isinstance(v, bool):
            raise CheckpointError(f"{where}: field 'value' is not null, true or false")
        return v
    text = need_text(e, "value", where, limit=(1 << 20) if kind == "str" else 1000)
    try:
        if kind == "int":
            if not re.fullmatch(r"-?\d{1,1000}", text):
                raise ValueError(text)
            return int(text)
        if kind == "float":
            return float.fromhex(text)
    except (ValueError, OverflowError):
        raise CheckpointError(f"{where}: field 'value' = {show(text)} is not a {kind}") from None
    if kind == "str":
        return text
    raise CheckpointError(f"{where}: field 'kind' = {show(kind)} is not a kind of entry")


class Block:
    """One saved block, validated: where it lies and what it must be."""

    __slots__ = ("rank", "file", "header", "header_bytes", "table", "data", "nbytes", "start", "shape",
                 "row_cuts", "col_cuts")

    def __init__(self, raw: Any, t: ArrayType, dtype: np.dtype, files: dict[str, int], where: str):
        self.rank = need_int(raw, "rank", where, 0, t.mesh.num_devices - 1)
        where = f"{where}, rank {self.rank}"
        self.file = need_text(raw, "file", where, pattern=FILE_RE)
        if self.file not in files:
            raise CheckpointError(f"{where}: file {show(self.file)} is not among the manifest's files")
        self.header = need_int(raw, "header", where)
        self.header_bytes = need_int(raw, "header_bytes", where, 1, MAX_HEADER_BYTES)
        self.table = need_int(raw, "table", where)
        self.data = need_int(raw, "data", where)
        self.start, self.shape = t.block_starts(self.rank), t.valid_shape(self.rank)
        self.nbytes = math.prod(self.shape) * dtype.itemsize
        if self.table != self.header + self.header_bytes:
            raise CheckpointError(f"{where}: digest table at byte {self.table}, its header ends at "
                                  f"{self.header + self.header_bytes}")
        if self.data < self.table:
            raise CheckpointError(f"{where}: data at byte {self.data}, before its digest table at {self.table}")
        if self.data + self.nbytes > files[self.file]:
            raise CheckpointError(f"{where}: the block ends at byte {self.data + self.nbytes}, past the end of "
                                  f"{self.file} ({files[self.file]} bytes)")
        # the table's size before its cuts are listed: a type of huge (or empty but long) blocks in a small
        # file is refused without listing them
        least = least_table_entries(t.global_shape, self.start, self.shape, dtype.itemsize)
        if DIGEST_BYTES * least > self.data - self.table:
            raise CheckpointError(f"{where}: a digest table of {self.data - self.table} bytes, the block "
                                  f"{self.shape} of {dtype} needs at least {DIGEST_BYTES * least}")
        self.row_cuts, self.col_cuts = tiles(t.global_shape, self.start, self.shape, dtype.itemsize)
        end = self.table + DIGEST_BYTES * table_entries(self.row_cuts, self.col_cuts)
        if self.data != end:
            raise CheckpointError(f"{where}: data at byte {self.data}, the digest table ends at {end}")

    @property
    def end(self) -> int:
        """Where the block's bytes (header, table, data) end in its file."""
        return self.data + self.nbytes


class Entry:
    """One saved name, validated: a plain value or an array."""

    __slots__ = ("path", "value", "t", "dtype", "dtype_text", "like", "scalar", "blocks", "raw")

    def __init__(self, raw: Any, files: dict[str, int], where: str):
        self.path = need_path(raw, where)
        where = f"{where} {'/'.join(self.path)!r}"
        self.raw = raw
        self.t = None
        kind = need(raw, "kind", str, where)
        if kind != "array":
            self.value = value_from_json(raw, where)
            return
        self.t = parse_layout(need_text(raw, "mesh", where), need_text(raw, "type", where), where)
        if self.t.partial:
            raise CheckpointError(f"{where}: type {self.t} has pending axes")
        self.dtype_text = need_text(raw, "dtype", where, limit=MAX_DTYPE)
        self.dtype = parse_dtype(self.dtype_text, where)
        self.like = need_text(raw, "like", where, limit=16)
        self.scalar = need(raw, "scalar", bool, where)
        if self.scalar and self.t.global_shape != (1,):
            raise CheckpointError(f"{where}: a scalar (field 'scalar' true) is saved as one element, global shape "
                                  f"(1,), not {self.t.global_shape}")
        if math.prod(self.t.global_shape) * self.dtype.itemsize > MAX_ELEMENTS:
            raise CheckpointError(f"{where}: {self.t.global_shape} of {self.dtype} is larger than 2**50 bytes")
        blocks = need_list(raw, "blocks", where, self.t.mesh.num_devices)
        self.blocks = [Block(b, self.t, self.dtype, files, where) for b in blocks]
        ranks = sorted(b.rank for b in self.blocks)
        if ranks != list(range(self.t.mesh.num_devices)):
            raise CheckpointError(f"{where}: blocks for ranks {ranks[:16]}, the mesh {self.t.mesh} has "
                                  f"{self.t.mesh.num_devices} devices (one block each)")
        self.blocks.sort(key=lambda b: b.rank)


class Manifest:
    """A manifest read from a directory and validated in full before use."""

    def __init__(self, raw: Any, where: str, check_files: Callable[["Manifest"], None] | None = None):
        """``check_files`` runs once ``id`` and ``files`` (names and sizes) are
        read, before the entries: a reader opens the files there and checks
        their sizes, so that every offset and length of a block is checked
        against a real file's size."""
        if not isinstance(raw, dict):
            raise CheckpointError(f"{where}: the manifest is a JSON {type(raw).__name__}, not an object")
        fmt = raw.get("format")
        if fmt != FORMAT:
            raise CheckpointError(f"{where}: not a {FORMAT} manifest (format {show(fmt)})")
        version = raw.get("version")
        if version not in READS:
            raise CheckpointError(f"{where}: format version {show(version)}; this verishard reads versions "
                                  f"{', '.join(map(str, READS))} (re-save the checkpoint)")
        got = need_text(raw, "digest", where, limit=64)
        if got != manifest_digest(raw):
            raise CheckpointError(f"{where}: its digest does not match its content (edited or corrupted after "
                                  f"the save)")
        self.id = need_text(raw, "id", where, pattern=ID_RE)
        files = need_list(raw, "files", where, MAX_ENTRIES)
        self.files: dict[str, int] = {}
        for k, f in enumerate(files):
            name = need_text(f, "name", f"{where}, files[{k}]", pattern=FILE_RE)
            if name in self.files:
                raise CheckpointError(f"{where}: file {name} listed twice")
            self.files[name] = need_int(f, "bytes", f"{where}, files[{k}]")
        if check_files is not None:
            check_files(self)
        entries = need_list(raw, "entries", where, MAX_ENTRIES)
        self.entries: dict[tuple[str, ...], Entry] = {}
        for k, e in enumerate(entries):
            entry = Entry(e, self.files, f"{where}, entry {k}")
            if entry.path in self.entries:
                raise CheckpointError(f"{where}: name {'/'.join(entry.path)!r} saved twice")
            self.entries[entry.path] = entry
        self._refuse_aliases(where)
        self.raw = raw

    def _refuse_aliases(self, where: str) -> None:
        """Every block has bytes of its own: a save writes each block (header,
        table, data) once, one after another, so two blocks (of one name or of
        two) whose byte ranges overlap are a rewritten manifest pointing them
        at one place, refused whatever their headers say."""
        spans = sorted((b.file, b.header, b.end, "/".join(e.path), b.rank)
                       for e in self.entries.values() if e.t is not None for b in e.blocks)
        for (f0, a0, z0, n0, r0), (f1, a1, z1, n1, r1) in zip(spans, spans[1:]):
            if f0 == f1 and a1 < z0:
                raise CheckpointError(f"{where}: {n0!r} rank {r0} and {n1!r} rank {r1} both point at bytes "
                                      f"{a1}-{min(z0, z1)} of {f0} (every block has bytes of its own: the "
                                      f"manifest was rewritten)")


def check_header(raw: bytes, want: dict, where: str) -> None:
    """The block header read from a data file against what the manifest says it
    must be; the first field that differs is named."""
    got = parse_json(raw.rstrip(b" "), where)
    if not isinstance(got, dict):
        raise CheckpointError(f"{where}: the block header is not a JSON object")
    for key, value in want.items():
        if got.get(key) != value:
            raise CheckpointError(f"{where}: the block header's {key} is {show(got.get(key))}, the manifest's "
                                  f"{show(value)} (the manifest or the file was changed after the save)")


def header_fields(save_id: str, path: tuple[str, ...], rank: int, dtype: str, t: ArrayType) -> dict:
    """The block header: ``dtype`` as the manifest stores it (a name; version 3: numpy's text)."""
    return {"format": BLOCK_FORMAT, "id": save_id, "path": list(path), "rank": rank, "dtype": dtype,
            "global_shape": list(t.global_shape), "start": list(t.block_starts(rank)),
            "shape": list(t.valid_shape(rank))}


def open_regular(dirfd: int, name: str, where: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """Open ``name`` in the directory ``dirfd`` as a regular file, and nothing
    else: a plain name (no path separator), never through a symbolic link
    (``O_NOFOLLOW``), and opened ``O_NONBLOCK`` then ``fstat``-checked before
    the descriptor is returned, so that a FIFO, a device or a socket of that
    name is refused at once instead of blocking the open or a later read or
    lock. ``O_NONBLOCK`` is cleared again on the returned descriptor (regular
    files ignore it; it is cleared so that nothing depends on that).
    ``FileNotFoundError`` (without ``O_CREAT``) is left to the caller; every
    other failure is one :class:`CheckpointError`."""
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise CheckpointError(f"{where}: {show(name)} is not a plain file name")
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode, dir_fd=dirfd)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno in (errno.ELOOP, getattr(errno, "EMLINK", -1)):
            raise CheckpointError(f"{where}: {name} is a symbolic link; a checkpoint's files must lie in its "
                                  f"directory") from None
        if e.errno in (errno.ENXIO, errno.EISDIR, errno.ENODEV, errno.EOPNOTSUPP):   # a FIFO without reader, ...
            raise CheckpointError(f"{where}: {name} is not a regular file") from None
        raise CheckpointError(f"{where}: cannot open {name} ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{where}: {name} is not a regular file ({file_kind(st.st_mode)}); a "
                                  f"checkpoint directory holds regular files only")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words (for errors)."""
    return {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
            stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory", stat.S_IFLNK: "a symbolic link",
            stat.S_IFREG: "a regular file"}.get(stat.S_IFMT(mode), "a special file")


def open_in(dirfd: int, name: str, where: str, flags: int = os.O_RDONLY) -> int:
    """Open the file ``name`` of the checkpoint directory ``dirfd``: a name of
    this format (no path separator, no leading dot), through
    :func:`open_regular`."""
    if not FILE_RE.fullmatch(name) and name != MANIFEST:
        raise CheckpointError(f"{where}: {show(name)} is not a file name of this format")
    return open_regular(dirfd, name, where, flags)
