"""The reason codes are written once in Coq (the constructors of
``Rules.error``); the glue and Python follow that order. This test reads the
three and fails if they drift apart."""

from __future__ import annotations

import re
from pathlib import Path

from verishard.core import REASONS

ROOT = Path(__file__).resolve().parent.parent


def _camel_to_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def coq_constructors(inductive: str, file: str = "Rules.v") -> list[str]:
    """The constructors of ``Inductive <inductive>`` in ``file``, in order."""
    text = (ROOT / "coq" / "theories" / file).read_text()
    body = text[text.index(f"Inductive {inductive} :="):]
    body = body[:body.index(".\n")]
    return re.findall(r"^\|\s*([A-Z][A-Za-z]*)", body, re.M)


def coq_error_constructors() -> list[str]:
    return coq_constructors("error")


def partial_error_constructors() -> list[str]:
    """``Partial.perror``'s own reasons (after ``CollError``, which wraps ``Rules.error``)."""
    names = coq_constructors("perror", "Partial.v")
    assert names[0] == "CollError"
    return names[1:]


def test_python_reason_codes_follow_the_coq_constructors():
    names = coq_error_constructors()
    assert len(names) == 15
    assert [key for key, _ in REASONS] == [_camel_to_snake(n) for n in names + partial_error_constructors()]


def test_glue_partial_reason_codes_follow_the_coq_constructors():
    glue = (ROOT / "bindings" / "glue.ml").read_text()
    codes = {name: int(code) for name, code in re.findall(r"\b([A-Z][A-Za-z]*) a -> \((\d+), a\)", glue)}
    assert [codes[n] for n in partial_error_constructors()] == [15, 16]


def test_partial_collective_tags_agree_in_coq_glue_and_python():
    """Tags 4, 5, 6: the constructors of ``Partial.pcoll`` after ``PColl``
    (which carries the four collectives with their own tags)."""
    from verishard import AllReduce, Collective, Mesh, ReduceScatter, ToPartial

    names = coq_constructors("pcoll", "Partial.v")
    assert names[0] == "PColl"
    tags = {n: 3 + i for i, n in enumerate(names) if i}
    glue = (ROOT / "bindings" / "glue.ml").read_text()
    read = {n: int(k) for k, n in re.findall(r"\| (\d) -> (?:let [^|]*? in )*([A-Z][A-Za-z]*) \(", glue) if n in tags}
    write = {n: int(k) for n, k in re.findall(r"\| ([A-Z][A-Za-z]*) [^|]*?-> Buffer.add_int buf (\d)", glue) if n in tags}
    assert read == write == tags
    m = Mesh.parse("x=2,y=2")
    for c in (AllReduce(("x", "y")), ReduceScatter(1, "y"), ToPartial("x")):
        code = c.encode(m)
        assert code[0] == tags[type(c).__name__]
        assert Collective.decode(m, code) == (c, len(code))


def test_glue_reason_codes_follow_the_coq_constructors():
    glue = (ROOT / "bindings" / "glue.ml").read_text()
    pairs = re.findall(r"\b([A-Z][A-Za-z]*)(?: [a-z])? -> \((\d+), ", glue)
    codes = {name: int(code) for name, code in pairs}
    assert [codes[n] for n in coq_error_constructors()] == list(range(15))


def test_collective_tags_agree_in_coq_glue_and_python():
    """The tag of a collective is its constructor's index in ``Rules.coll``;
    the glue's reader and writer and Python's encoder and decoder use it."""
    from verishard import AllGather, AllPermute, AllToAll, ArrayType, Collective, DynSlice, Mesh

    names = coq_constructors("coll")
    assert names == ["AllGather", "DynSlice", "AllToAll", "AllPermute"]
    glue = (ROOT / "bindings" / "glue.ml").read_text()
    read = dict((n, int(k)) for k, n in re.findall(r"\| (\d) -> (?:let [^|]*? in )*([A-Z][A-Za-z]*) \(", glue)
                if n in names)
    write = {n: int(k) for n, k in re.findall(r"\| ([A-Z][A-Za-z]*) [^|]*?-> [^|]*?(?:\[|add_int buf )(\d)", glue)
             if n in names}
    assert read == write == {n: i for i, n in enumerate(names)}
    m = Mesh.parse("x=2,y=2")
    t = ArrayType.parse("[2{x}4, 4]", m)
    for c in (AllGather(0, "x"), DynSlice(1, "y"), AllToAll(0, 1, "x"), AllPermute(t)):
        code = c.encode(m)
        assert code[0] == read[type(c).__name__]
        assert Collective.decode(m, code) == (c, len(code))


def test_uneven_entry_points_are_wired():
    """The uneven checker, planner and movement table (Uchecker.v, Upipeline.v)
    are registered in the glue, exported by the module and extracted."""
    glue = (ROOT / "bindings" / "glue.ml").read_text()
    module = (ROOT / "bindings" / "module.cpp").read_text()
    extract = (ROOT / "coq" / "theories" / "Extract.v").read_text()
    for name in ("ucheck", "uplan", "umovement"):
        assert f'Callback.register "vs_{name}"' in glue
        assert f'm.def("{name}"' in module
    command = re.search(r'^Extraction "verishard_core.ml"(.*?)\.\s*$', extract, re.M | re.S).group(1)
    for fn in ("ucheck", "uplan_problem", "umovement"):
        assert re.search(rf"\bVS\.\w+\.{fn}\b", command), fn
