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


def coq_error_constructors() -> list[str]:
    text = (ROOT / "coq" / "theories" / "Rules.v").read_text()
    body = text[text.index("Inductive error :="):]
    body = body[:body.index(".\n")]
    return re.findall(r"^\|\s*([A-Z][A-Za-z]*)", body, re.M)


def test_python_reason_codes_follow_the_coq_constructors():
    names = coq_error_constructors()
    assert len(names) == 15
    assert [key for key, _ in REASONS] == [_camel_to_snake(n) for n in names]


def test_glue_reason_codes_follow_the_coq_constructors():
    glue = (ROOT / "bindings" / "glue.ml").read_text()
    pairs = re.findall(r"\b([A-Z][A-Za-z]*)(?: [a-z])? -> \((\d+), ", glue)
    codes = {name: int(code) for name, code in pairs}
    assert [codes[n] for n in coq_error_constructors()] == list(range(len(REASONS)))
