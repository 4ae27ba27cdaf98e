"""Hostile PyTorch DCP checkpoints (issue 39 part 1, and the DCP items of
parts 2, 4 and 6): pickles written by hand, opcode by opcode, that would run
code, write files or build other objects than DCP's if an unpickler let
them; each is planted in ``.metadata`` and in a chunk's ``data.pkl`` and must
give a CheckpointError with no side effect (the marker file a payload would
create does not exist, the file it would empty is intact). Then values that
unpickle but are wrong (offsets, lengths, dtypes, empty chunks) and FIFOs in
the folder, each refused at once."""

from __future__ import annotations

import io
import os
import pickle
import struct
import subprocess
import sys
import textwrap
import warnings
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from verishard import checkpoint, checkpoint_dcp  # noqa: E402
from verishard.errors import CheckpointError  # noqa: E402

W = np.arange(12, dtype=np.float32).reshape(3, 4)
MD = "torch.distributed.checkpoint.metadata"
FS = "torch.distributed.checkpoint.filesystem"


# --- pickles by hand ---------------------------------------------------------

def s(x: str) -> bytes:
    b = x.encode()
    return pickle.BINUNICODE + struct.pack("<I", len(b)) + b


def i(n: int) -> bytes:   # LONG1 or LONG4: any int, negative or huge
    b = n.to_bytes(max(1, (n.bit_length() + 8) // 8), "little", signed=True)
    return pickle.LONG1 + bytes([len(b)]) + b if len(b) < 256 else pickle.LONG4 + struct.pack("<i", len(b)) + b


def stack_global(module: str, name: str) -> bytes:
    return s(module) + s(name) + pickle.STACK_GLOBAL


def text_global(module: str, name: str) -> bytes:
    return pickle.GLOBAL + module.encode() + b"\n" + name.encode() + b"\n"


def tup(*items: bytes) -> bytes:
    return pickle.MARK + b"".join(items) + pickle.TUPLE


def call(fn: bytes, *args: bytes) -> bytes:
    return fn + tup(*args) + pickle.REDUCE


def dict_(**items: bytes) -> bytes:
    return pickle.EMPTY_DICT + pickle.MARK + b"".join(s(k) + v for k, v in items.items()) + pickle.SETITEMS


def whole(*values: bytes) -> bytes:
    """A pickle of the values, the last one its result."""
    return b"\x80\x04" + pickle.POP.join(values) + pickle.STOP


def data_pkl(offset: bytes = i(0), size=(3, 4), stride=(4, 1), storage=("torch", "FloatStorage"), numel=12,
             pid: bytes | None = None, rebuild: str = "_rebuild_tensor_v2", more: tuple = ()) -> bytes:
    """torch.save's data.pkl of one tensor, as torch writes it (protocol 2),
    with any field replaced."""
    pid = pid if pid is not None else tup(s("storage"), text_global(*storage), s("0"), s("cpu"), i(numel))
    body = call(text_global("torch._utils", rebuild), pid + pickle.BINPERSID, offset, tup(*map(i, size)),
                tup(*map(i, stride)), pickle.NEWFALSE, call(text_global("collections", "OrderedDict")), *more)
    return b"\x80\x02" + body + pickle.STOP


def code_payloads(marker, victim, g):
    """Values whose building runs a command (creating ``marker``) or empties
    ``victim``, by the globals ``g(module, name)`` names."""
    touch = f"touch {marker}"
    walk = call(g(FS, "operator.attrgetter"), s("__init__.__globals__"))   # the walk to os.system
    os_module = call(call(g(FS, "operator.methodcaller"), s("get"), s("os")), call(walk, g(FS, "FileSystemReader")))
    libc = call(g(MD, "torch.ctypes.CDLL"), pickle.NONE)
    return {
        "operator.attrgetter/methodcaller": call(call(g(FS, "operator.methodcaller"), s("system"), s(touch)),
                                                 os_module),
        "io.FileIO": call(g(FS, "io.FileIO"), s(str(victim)), s("w")),
        "ctypes via torch.ctypes": call(call(g(FS, "operator.methodcaller"), s("system"),
                                             pickle.SHORT_BINBYTES + bytes([len(touch)]) + touch.encode()), libc),
        "os.system": call(g("os", "system"), s(touch)),
        "posix.system": call(g("posix", "system"), s(touch)),
        "subprocess": call(g("subprocess", "getoutput"), s(touch)),
        "builtins.eval": call(g("builtins", "eval"), s(f"__import__('os').system({touch!r})")),
        "builtins.exec": call(g("builtins", "exec"), s(f"open({str(marker)!r}, 'w')")),
        "builtins.getattr": call(call(g("builtins", "getattr"), call(g("builtins", "__import__"), s("os")),
                                      s("system")), s(touch)),
        "torch.load": call(g("torch", "load"), s(str(victim))),
        "a dotted name below an allowed class": call(g(MD, "TensorProperties.create_from_tensor"), pickle.NONE),
    }


# --- planting ----------------------------------------------------------------

@pytest.fixture
def saved(tmp_path):
    d = tmp_path / "ck"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # DCP warns that it saves from one process
        dcp.save({"w": torch.from_numpy(W.copy()), "step": 3}, checkpoint_id=str(d), no_dist=True)
    return d


@pytest.fixture
def bystanders(tmp_path):
    """A marker a payload would create and a file it would empty, outside the checkpoint."""
    marker, victim = tmp_path / "ran", tmp_path / "victim.txt"
    victim.write_text("keep me")
    return marker, victim


def untouched(marker, victim) -> None:
    assert not marker.exists(), "a payload ran"
    assert victim.read_text() == "keep me", "a payload wrote a file"


def genuine_metadata(d) -> object:
    return pickle.loads((d / ".metadata").read_bytes())   # our own fresh save: trusted here


def rewrite_metadata(d, md) -> None:
    (d / ".metadata").write_bytes(pickle.dumps(md))


def plant_data_pkl(d, raw: bytes) -> None:
    """Replace w's chunk's data.pkl by ``raw``: the chunk's archive rewritten
    with every other member as it was, and its byte range in the metadata
    moved to match."""
    md = genuine_metadata(d)
    info = next(v for k, v in md.storage_data.items() if k.fqn == "w")
    f = d / info.relative_path
    blob = f.read_bytes()
    old = zipfile.ZipFile(io.BytesIO(blob[info.offset:info.offset + info.length]))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for m in old.infolist():
            z.writestr(m.filename, raw if m.filename.endswith("/data.pkl") else old.read(m))
    new = out.getvalue()
    f.write_bytes(blob[:info.offset] + new + blob[info.offset + info.length:])
    for v in md.storage_data.values():
        if v.relative_path == info.relative_path and v.offset > info.offset:
            v.offset += len(new) - info.length
    info.length = len(new)
    rewrite_metadata(d, md)


def refused(d, match: str = "") -> CheckpointError:
    with pytest.raises(CheckpointError, match=match) as e:
        checkpoint.load(str(d))
    return e.value


# --- the harness works: the hand-written pickles load when they are DCP's -----

def test_hand_written_pickles_load(saved):
    """The reference points: a hand-written data.pkl of the genuine values,
    and each genuine pickle behind a harmless value (the form of the
    'payload, then a valid object' variants below) load exactly."""
    plant_data_pkl(saved, data_pkl())
    assert np.array_equal(checkpoint.load(str(saved))["w"], W)
    plant_data_pkl(saved, b"\x80\x02" + pickle.NONE + pickle.POP + data_pkl()[2:])
    assert np.array_equal(checkpoint.load(str(saved))["w"], W)
    md = pickle.dumps(genuine_metadata(saved), protocol=2)
    (saved / ".metadata").write_bytes(md[:2] + pickle.NONE + pickle.POP + md[2:])
    got = checkpoint.load(str(saved))
    assert np.array_equal(got["w"], W) and got["step"] == 3


# --- part 1: nothing in a pickle runs ----------------------------------------

PAYLOADS = list(code_payloads("m", "v", stack_global))


@pytest.mark.parametrize("where", [".metadata", "data.pkl"])
@pytest.mark.parametrize("then_valid", [False, True], ids=["alone", "then-valid"])
@pytest.mark.parametrize("name", PAYLOADS)
def test_code_payloads_never_run(saved, bystanders, name, where, then_valid):
    """Each payload of the issue (STACK_GLOBAL in .metadata, GLOBAL in
    data.pkl), alone and followed by a valid object: refused, nothing run,
    no file touched."""
    marker, victim = bystanders
    if where == ".metadata":
        payload = code_payloads(marker, victim, stack_global)[name]
        valid = pickle.dumps(genuine_metadata(saved), protocol=2)[2:-1] if then_valid else None
        (saved / ".metadata").write_bytes(whole(payload, valid) if valid else whole(payload))
    else:
        payload = code_payloads(marker, victim, text_global)[name]
        plant_data_pkl(saved, whole(payload, data_pkl()[2:-1]) if then_valid else whole(payload))
    e = refused(saved, "not a DCP pickle")
    assert "nothing in it was run" in str(e)
    untouched(marker, victim)


def test_torch_globals_of_the_other_pickle_refused(saved):
    """What one pickle may name the other may not: a tensor rebuild in
    .metadata, DCP's classes or a layout lookup in data.pkl."""
    (saved / ".metadata").write_bytes(whole(call(stack_global("torch._utils", "_rebuild_tensor_v2"))))
    refused(saved, "_rebuild_tensor_v2' is not part of a DCP checkpoint")
    for g in (text_global(MD, "Metadata") + pickle.EMPTY_TUPLE + pickle.NEWOBJ,
              call(text_global("torch.serialization", "_get_layout"), s("torch.strided"))):
        d = saved.parent / f"ck{len(g)}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save({"w": torch.from_numpy(W.copy())}, checkpoint_id=str(d), no_dist=True)
        plant_data_pkl(d, whole(g))
        refused(d, "not part of a DCP checkpoint")


def _dataclass(name: str, **fields: bytes) -> bytes:
    return stack_global(MD, name) + pickle.EMPTY_TUPLE + pickle.NEWOBJ + dict_(**fields) + pickle.BUILD


BUILD_TRICKS = {
    # a field DCP's schema does not have (the state dict is set as is by pickle's BUILD)
    "unknown field": _dataclass("Metadata", state_dict_metadata=pickle.EMPTY_DICT, __class__=pickle.NONE),
    # a field of the wrong type
    "field type": _dataclass("MetadataIndex", fqn=pickle.EMPTY_LIST),
    # pickle's (state, slotstate) form: setattr on the object
    "slot state": stack_global(MD, "Metadata") + pickle.EMPTY_TUPLE + pickle.NEWOBJ
    + tup(pickle.EMPTY_DICT, dict_(state_dict_metadata=pickle.EMPTY_DICT)) + pickle.BUILD,
    # filling an object twice (after it was checked, or hashed as a key)
    "second BUILD": _dataclass("Metadata", state_dict_metadata=pickle.EMPTY_DICT, storage_data=pickle.EMPTY_DICT)
    + dict_(storage_data=pickle.EMPTY_DICT) + pickle.BUILD,
    # BUILD on an allowed non-dataclass, and on a class itself
    "BUILD on torch.Size": call(stack_global("torch", "Size"), pickle.EMPTY_TUPLE) + dict_(x=pickle.NONE)
    + pickle.BUILD,
    "BUILD on a class": stack_global(MD, "Metadata") + dict_(x=pickle.NONE) + pickle.BUILD,
    # __setstate__'s tuple with another memory format code
    "__setstate__ tuple": stack_global(MD, "TensorProperties") + pickle.EMPTY_TUPLE + pickle.NEWOBJ
    + tup(stack_global("torch", "float32"), pickle.NONE, pickle.NEWFALSE, i(0), pickle.NEWFALSE) + pickle.BUILD,
    # NEWOBJ of something that is not a DCP dataclass, or with arguments
    "NEWOBJ of a function": stack_global("torch", "Size") + pickle.EMPTY_TUPLE + pickle.NEWOBJ,
    "NEWOBJ with arguments": stack_global(MD, "Metadata") + tup(i(1)) + pickle.NEWOBJ,
    # REDUCE of a dataclass (calls its __init__), of an allowed function with other arguments
    "REDUCE of a class": call(stack_global(MD, "Metadata"), pickle.EMPTY_DICT),
    "torch.Size of strings": call(stack_global("torch", "Size"), tup(s("x"))),
    "a layout by another name": call(stack_global("torch.serialization", "_get_layout"), s("torch.ctypes")),
    # appends and item sets to what is not a list or dict
    "SETITEM on a dataclass": stack_global(MD, "Metadata") + pickle.EMPTY_TUPLE + pickle.NEWOBJ + s("k") + s("v")
    + pickle.SETITEM,
    "APPEND to a class": stack_global(MD, "Metadata") + pickle.NONE + pickle.APPEND,
    # opcodes DCP does not write
    "INST": pickle.MARK + pickle.INST + b"os\nsystem\n",
    "OBJ": pickle.MARK + stack_global("os", "system") + pickle.OBJ,
    "EXT1": pickle.EXT1 + b"\x01",
    "NEWOBJ_EX": stack_global(MD, "Metadata") + pickle.EMPTY_TUPLE + pickle.EMPTY_DICT + pickle.NEWOBJ_EX,
    "persistent id in .metadata": tup(s("storage"), stack_global("torch", "FloatStorage"), s("0"), s("cpu"), i(1))
    + pickle.BINPERSID,
}


_ORDERED_DICT = call(text_global("collections", "OrderedDict"))
CHUNK_TRICKS = {
    # torch's weights-only unpickler lets BUILD update an OrderedDict's __dict__
    "BUILD on OrderedDict": _ORDERED_DICT + dict_(x=pickle.NONE) + pickle.BUILD,
    "BUILD on the tensor": data_pkl()[2:-1] + dict_(x=pickle.NONE) + pickle.BUILD,
    "NEWOBJ of OrderedDict": text_global("collections", "OrderedDict") + pickle.EMPTY_TUPLE + pickle.NEWOBJ,
    "REDUCE of a storage class": call(text_global("torch", "FloatStorage"), i(3)),
    "SETITEM on OrderedDict": _ORDERED_DICT + s("k") + s("v") + pickle.SETITEM,
    "APPEND to a storage": tup(s("storage"), text_global("torch", "FloatStorage"), s("0"), s("cpu"), i(12))
    + pickle.BINPERSID + pickle.NONE + pickle.APPEND,
    "DCP's classes": text_global(MD, "Metadata") + pickle.EMPTY_TUPLE + pickle.NEWOBJ,
}


@pytest.mark.parametrize("where,name", [(".metadata", n) for n in BUILD_TRICKS]
                         + [("data.pkl", n) for n in CHUNK_TRICKS])
def test_build_and_setstate_tricks_refused(saved, where, name):
    """BUILD, NEWOBJ, REDUCE and item tricks on what each pickle may name."""
    if where == ".metadata":
        (saved / ".metadata").write_bytes(whole(BUILD_TRICKS[name]))
    else:
        plant_data_pkl(saved, whole(CHUNK_TRICKS[name]))
    refused(saved, "not a DCP pickle")


def _pid(kind=text_global("torch", "FloatStorage"), key=s("0"), location=s("cpu"), numel=i(12), head=s("storage"),
         extra=()) -> bytes:
    return tup(head, kind, key, location, numel, *extra)


@pytest.mark.parametrize("pid", [
    _pid(kind=s("FloatStorage")),                      # a type by name, not the storage class
    _pid(head=s("module")),                            # not a storage
    _pid(key=s("../../etc/passwd")), _pid(key=i(0)),   # a key that is not the archive's digits
    _pid(location=i(0)), _pid(numel=i(-1)), _pid(numel=s("12")),
    _pid(extra=(i(0),)),                               # six fields
    i(0),                                              # an int id
    _pid(kind=text_global("torch.storage", "TypedStorage")),
], ids=["type-name", "module", "path-key", "int-key", "int-location", "negative-numel", "str-numel", "six",
        "int-id", "TypedStorage"])
def test_bad_persistent_ids_refused(saved, pid):
    plant_data_pkl(saved, data_pkl(pid=pid))
    refused(saved, "not a DCP pickle")


# --- every value checked before a byte is read ---------------------------------

def _id(x: dict) -> str:
    """A test id of a parameter dict: its fields and values, huge ints as 2^k."""
    big = (lambda v: isinstance(v, int) and abs(v).bit_length() > 40)
    return ",".join(f"{k}={('-' if v < 0 else '') + f'2^{abs(v).bit_length() - 1}' if big(v) else repr(v)}"
                    for k, v in x.items())


@pytest.mark.parametrize("kw,match", [
    ({"offset": i(-3)}, "storage offset -3"),                      # bytes before the chunk
    ({"offset": b"G" + struct.pack(">d", 1.5)}, "storage offset"),   # not an int
    ({"offset": s("0")}, "storage offset"),
    ({"offset": i(1)}, "shorter than the chunk"),                  # the tensor's bytes past the storage
    ({"offset": i(1 << 70)}, "storage offset"),
    ({"offset": i(10**5000)}, r"storage offset ~2\*\*16609"),   # more digits than str() gives
    ({"numel": 11}, "has 48 bytes, data.pkl says 44"),             # storage bytes against the archive
    ({"numel": 1 << 61}, "not a DCP pickle|data.pkl says"),
    ({"storage": ("torch", "IntStorage")}, "holds torch.int32, the metadata says torch.float32"),
    ({"storage": ("torch", "DoubleStorage"), "numel": 6}, "holds torch.float64"),
    ({"size": (4, 3), "stride": (3, 1)}, "stored as"),
    ({"stride": (1, 3)}, "stored as"),
    ({"size": (3, -4)}, "size or stride"),
    ({"more": (i(5),)}, "a tensor with metadata"),
    ({"more": (pickle.NONE, pickle.NONE)}, "rebuilt from 8 arguments"),
    ({"rebuild": "_rebuild_tensor_v3"}, "arguments"),
], ids=["offset=-3", "offset=1.5", "offset='0'", "offset=1", "offset=2^70", "offset=10^5000", "numel=11",
        "numel=2^61", "IntStorage", "DoubleStorage", "size-4x3", "stride-1x3", "size-negative", "metadata-5",
        "8-arguments", "v3-of-6"])
def test_chunk_values_checked(saved, kw, match):
    plant_data_pkl(saved, data_pkl(**kw))
    refused(saved, match)


def test_dtype_edited_in_metadata(saved):
    """float32 -> int32 (same element size: only the storage's dtype tells)
    and float32 -> float64 (element size x numel against the storage bytes)."""
    for dtype, match in ((torch.int32, "holds torch.float32, the metadata says torch.int32"),
                         (torch.float64, "holds torch.float32, the metadata says torch.float64")):
        md = genuine_metadata(saved)
        md.state_dict_metadata["w"].properties.dtype = dtype
        rewrite_metadata(saved, md)
        refused(saved, match)


def _edit_storage(d, **fields):
    md = genuine_metadata(d)
    info = next(v for k, v in md.storage_data.items() if k.fqn == "w")
    vars(info).update(fields)
    rewrite_metadata(d, md)


STORAGE_CASES = [
    ({"offset": -1}, "not ints >= 0"), ({"offset": 1.5}, "not a DCP pickle"), ({"offset": "0"}, "not a DCP pickle"),
    ({"length": -5}, "not ints >= 0"), ({"length": 1 << 63}, "not ints >= 0"), ({"length": 1 << 61}, "which has"),
    ({"length": (1 << 40)}, "which has"), ({"offset": 1 << 40}, "which has"),
    ({"length": 2.0}, "not a DCP pickle"), ({"length": -10**5000}, r"-~2\*\*16609 bytes long: not ints >= 0"),
    ({"offset": 10**5000}, "at byte ~2"),
    ({"relative_path": "../elsewhere.distcp"}, "not a file of the directory"),
    ({"relative_path": "/etc/passwd"}, "not a file of the directory"),
    ({"relative_path": 3}, "not a DCP pickle"),
]


@pytest.mark.parametrize("fields,match", STORAGE_CASES, ids=[_id(f) for f, _ in STORAGE_CASES])
def test_storage_ranges_checked(saved, fields, match):
    """Offsets and lengths in the metadata: ints >= 0 inside the file (no
    TypeError, MemoryError or OSError), paths inside the folder."""
    _edit_storage(saved, **fields)
    refused(saved, match)


def test_value_ranges_checked(saved):
    """A plain value's byte range too (read whole and torch.load-ed)."""
    md = genuine_metadata(saved)
    next(v for k, v in md.storage_data.items() if k.fqn == "step").length = 1 << 40
    rewrite_metadata(saved, md)
    refused(saved, "which has")


@pytest.mark.parametrize("edit,match", [
    (lambda m: setattr(m, "chunks", []), "chunks hold 0 elements"),
    (lambda m: setattr(m.chunks[0], "sizes", torch.Size([0, 4])), "chunks hold 0 elements"),
    (lambda m: setattr(m.chunks[0], "offsets", torch.Size([-1, 0])), "not ints >= 0"),
    (lambda m: setattr(m.chunks[0], "offsets", torch.Size([1, 0])), "not inside its size"),
    (lambda m: setattr(m.chunks[0], "sizes", torch.Size([3])), "not inside its size"),
    (lambda m: setattr(m, "size", torch.Size([3, -4])), "not ints >= 0"),
    (lambda m: setattr(m, "size", torch.Size([1 << 40, 1 << 20])), "chunks hold 12 elements"),
    (lambda m: setattr(m, "chunks", [m.chunks[0], m.chunks[0]]), "chunks hold 24 elements"),
    (lambda m: setattr(m.properties, "layout", torch.sparse_coo), "only dense"),
], ids=["no-chunks", "empty-chunk", "negative-offset", "outside", "rank", "negative-size", "huge", "twice",
        "sparse"])
def test_chunk_boxes_checked(saved, edit, match):
    """Chunk boxes inside their tensor and covering it (DCP's chunks
    partition a tensor): no ZeroDivisionError on empty chunk lists, no
    allocation beyond what the files hold."""
    md = genuine_metadata(saved)
    edit(md.state_dict_metadata["w"])
    rewrite_metadata(saved, md)
    refused(saved, match)


def test_empty_tensors_load(tmp_path):
    """Empty tensors (a real save) load whole as empty arrays; onto a
    layout, one clear error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"e": torch.zeros(0, 3), "w": torch.from_numpy(W.copy())}, checkpoint_id=str(tmp_path),
                 no_dist=True)
    got = checkpoint.load(str(tmp_path))
    assert got["e"].shape == (0, 3) and got["e"].dtype == np.float32 and np.array_equal(got["w"], W)
    with pytest.raises(CheckpointError, match="'e' is empty .*load it whole"):
        checkpoint.load(str(tmp_path), {"e": ("u=1", "[1, 3]")}, rank=0)


def test_metadata_schema_checked(saved):
    """The metadata's own fields: an entry that is not DCP's, a storage key
    of another class, a missing field."""
    raw = (saved / ".metadata").read_bytes()
    md = pickle.loads(raw)
    md.state_dict_metadata["w"] = "tensor"
    rewrite_metadata(saved, md)
    refused(saved, "is a str, not DCP's TensorStorageMetadata")
    md = pickle.loads(raw)
    md.storage_data = {("w", k): v for k, v in enumerate(md.storage_data.values())}
    rewrite_metadata(saved, md)
    refused(saved, "a storage key is a tuple, not DCP's MetadataIndex")
    md = pickle.loads(raw)
    del md.state_dict_metadata["w"].chunks[0].sizes
    rewrite_metadata(saved, md)
    refused(saved, "has no sizes")


# --- files that are not regular ------------------------------------------------

FIFO_SCRIPT = textwrap.dedent("""
    import sys, time
    import torch.distributed.checkpoint   # imported before the clock starts
    from verishard import checkpoint, checkpoint_dcp
    from verishard.errors import CheckpointError
    for path in sys.argv[1:]:
        for load in (checkpoint_dcp.load, checkpoint.load):
            t = time.monotonic()
            try:
                load(path)
                print("LOADED", path, flush=True)
            except CheckpointError as e:
                print(f"REFUSED {time.monotonic() - t:.2f} {e}", flush=True)
""")


def test_non_regular_files_refused_at_once(tmp_path):
    """A FIFO named .metadata or like a chunk file (nobody writes it: an
    open without O_NONBLOCK would wait forever), and a directory named like
    a chunk file: refused at once, by the DCP reader and by
    checkpoint.load. Run in a subprocess with a timeout, so that a hang
    fails the test instead of stopping it."""
    dirs = []
    for which in (".metadata", ".distcp", "directory"):
        d = tmp_path / which.strip(".")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save({"w": torch.from_numpy(W.copy())}, checkpoint_id=str(d), no_dist=True)
        target = d / ".metadata" if which == ".metadata" else next(d.glob("*.distcp"))
        target.unlink()
        target.mkdir() if which == "directory" else os.mkfifo(target)
        dirs.append(str(d))
    try:
        res = subprocess.run([sys.executable, "-c", FIFO_SCRIPT, *dirs], capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("loading a checkpoint with a FIFO hung")
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(("REFUSED", "LOADED"))]
    assert len(lines) == 6 and all(ln.startswith("REFUSED") for ln in lines), res.stdout + res.stderr[-2000:]
    # well under a second on a quiet machine; the bound leaves room for a loaded one
    assert all(float(ln.split()[1]) < 10 for ln in lines), lines
    # the DCP reader names the file; checkpoint.load reads a folder whose
    # .metadata is not a regular file as one of its own format (no manifest)
    assert all("not a regular file" in ln for ln in lines[:1] + lines[2:]), lines


def test_shared_chunks_and_dimensions_bounded(saved):
    """A pickle may share one chunk list among many entries (each walked
    and loaded again: a load quadratic in the file) or give a tensor
    thousands of dimensions: both refused, as DCP writes neither."""
    raw = (saved / ".metadata").read_bytes()
    md = pickle.loads(raw)
    w = md.state_dict_metadata["w"]
    md.state_dict_metadata["w2"] = type(w)(properties=w.properties, size=w.size, chunks=w.chunks)
    rewrite_metadata(saved, md)
    refused(saved, "'w2' shares its chunks")
    md = pickle.loads(raw)
    md.state_dict_metadata["w"].size = torch.Size([1] * 65)
    rewrite_metadata(saved, md)
    refused(saved, "65 dimensions; at most 64")


# what torch's DCP and torch.save write: the whole allowlist (docs/checkpoint.md)
METADATA_GLOBALS = {(MD, n) for n in ("Metadata", "StorageMeta", "TensorStorageMetadata", "ChunkStorageMetadata",
                                      "TensorProperties", "BytesStorageMetadata", "MetadataIndex",
                                      "_MEM_FORMAT_ENCODING")} | {
    (FS, "_StorageInfo"), ("torch", "Size"), ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "PureWindowsPath")}
CHUNK_GLOBALS = {("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_tensor_v3"),
                 ("collections", "OrderedDict"), ("torch.storage", "UntypedStorage")}


def test_real_saves_name_only_the_allowlist(tmp_path):
    """A real save of every storage kind (typed storages; float8 through
    UntypedStorage and _rebuild_tensor_v3): its pickles name only the
    allowlisted pairs (dtypes and storage classes of torch aside), and its
    entries numpy holds load exactly."""
    dtypes = [torch.float32, torch.float64, torch.float16, torch.int8, torch.uint8, torch.int16, torch.int32,
              torch.int64, torch.bool, torch.complex64, torch.bfloat16, torch.float8_e4m3fn]
    state = {str(dt).split(".")[1]: (torch.arange(6) % 2).to(dt).reshape(2, 3) for dt in dtypes}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(tmp_path), no_dist=True)
    named = {".metadata": set(), "data.pkl": set()}

    class Recorder(pickle.Unpickler):   # our own fresh save: trusted here
        def __init__(self, raw, into):
            super().__init__(io.BytesIO(raw))
            self.into = into

        def find_class(self, module, name):
            self.into.add((module, name))
            return super().find_class(module, name)

        def persistent_load(self, pid):
            return None

    md = Recorder((tmp_path / ".metadata").read_bytes(), named[".metadata"]).load()
    for info in md.storage_data.values():
        blob = (tmp_path / info.relative_path).read_bytes()[info.offset:info.offset + info.length]
        z = zipfile.ZipFile(io.BytesIO(blob))
        try:
            Recorder(z.read(next(n for n in z.namelist() if n.endswith("/data.pkl"))), named["data.pkl"]).load()
        except Exception:   # noqa: BLE001  (rebuilding from a None storage fails after every global is named)
            pass
    torch_names = {(m, n) for m, n in named[".metadata"] | named["data.pkl"] if m == "torch" and n != "Size"}
    assert all(isinstance(getattr(torch, n), torch.dtype) or n.endswith("Storage") for _, n in torch_names)
    assert named[".metadata"] - torch_names <= METADATA_GLOBALS, named[".metadata"]
    assert named["data.pkl"] - torch_names <= CHUNK_GLOBALS, named["data.pkl"]
    assert all("." not in n for _, n in named[".metadata"] | named["data.pkl"])
    ck = checkpoint_dcp.DCPCheckpoint(str(tmp_path))   # every entry's metadata and schema
    ck.close()
    holdable = [k for k in state if k not in ("bfloat16", "float8_e4m3fn")]   # numpy's own dtypes
    got = checkpoint.load(str(tmp_path), {k: None for k in holdable})
    assert all(np.array_equal(got[k], state[k].numpy()) and got[k].dtype == state[k].numpy().dtype for k in holdable)


def _loads_exactly_or_refuses(d) -> str:
    """'refused' on a CheckpointError; 'loaded' when every array loaded is
    W exactly and every other value the saved step (a changed name may load
    under that name); anything else fails the test."""
    try:
        got = checkpoint.load(str(d))
    except CheckpointError:
        return "refused"
    for name, v in got.items():
        assert (isinstance(v, np.ndarray) and v.dtype == W.dtype and np.array_equal(v, W)) or \
            (not isinstance(v, np.ndarray) and v == 3), (name, v)
    return "loaded"


def test_every_one_byte_change_refused_or_exact(saved):
    """Every byte of .metadata and of data.pkl changed (its low bit
    flipped: an opcode, a length, an int, a letter of a name becomes its
    neighbour), and truncations every 16 bytes: each gives a CheckpointError
    or the saved values exactly, never another exception or wrong data."""
    meta = (saved / ".metadata").read_bytes()
    files = {p.name: p.read_bytes() for p in saved.iterdir()}
    seen = {"refused": 0, "loaded": 0}

    def changed(raw: bytes) -> list[bytes]:
        return [raw[:k] + bytes([raw[k] ^ 1]) + raw[k + 1:] for k in range(len(raw))] + \
            [raw[:k] for k in range(0, len(raw), 16)]

    for raw in changed(meta):
        (saved / ".metadata").write_bytes(raw)
        seen[_loads_exactly_or_refuses(saved)] += 1
    for raw in changed(data_pkl()):
        for name, blob in files.items():
            (saved / name).write_bytes(blob)
        plant_data_pkl(saved, raw)
        seen[_loads_exactly_or_refuses(saved)] += 1
    assert seen["refused"] > 0 and seen["loaded"] > 0, seen   # the changes reach both outcomes


def test_storage_header_changes_refused_or_exact(saved):
    """Every bit of the storage's zip local header (its name and extra
    field lengths say where the tensor's bytes start; no checksum a reader of
    pieces can check covers them) and of its name and extra field flipped:
    a CheckpointError or W exactly, never bytes read from a shifted place."""
    md = genuine_metadata(saved)
    info = next(v for k, v in md.storage_data.items() if k.fqn == "w")
    f = saved / info.relative_path
    blob = f.read_bytes()
    z = zipfile.ZipFile(io.BytesIO(blob[info.offset:info.offset + info.length]))
    m = next(m for m in z.infolist() if m.filename.endswith("/data/0"))
    at = info.offset + m.header_offset
    name_len, extra_len = struct.unpack("<HH", blob[at + 26:at + 30])
    seen = {"refused": 0, "loaded": 0}
    for k in range(at, at + 30 + name_len + min(extra_len, 8)):
        for bit in range(8):
            changed = bytearray(blob)
            changed[k] ^= 1 << bit
            f.write_bytes(bytes(changed))
            seen[_loads_exactly_or_refuses(saved)] += 1
    assert seen["refused"] > 0, seen


def test_checkpoint_id_paths_load(saved):
    """The checkpoint's name in StorageMeta, as DCP keeps what it was given
    (a str, a POSIX or a Windows path): built as a pure path, and loads."""
    import pathlib
    raw = (saved / ".metadata").read_bytes()
    for p in (pathlib.PureWindowsPath("C:/runs/ck"), pathlib.PurePosixPath("/runs/ck"), "/runs/ck", None):
        md = pickle.loads(raw)
        md.storage_meta.checkpoint_id = p
        rewrite_metadata(saved, md)
        assert np.array_equal(checkpoint.load(str(saved))["w"], W)
