"""The trust check (coq/check_assumptions.sh) refuses every planted hole.

Each case copies coq/ (the built .vo files included) and docs/proofs.md into
a temporary folder, plants one hole there (compiling only the planted file),
runs the check on the copy and expects it to fail with a message naming the
hole. The unplanted copy passes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COQ = ROOT / "coq"

pytestmark = pytest.mark.skipif(shutil.which("coqc") is None, reason="coqc is not installed")


def _copy(dst: Path) -> Path:
    """coq/ and docs/proofs.md under ``dst``, as the check reads them."""
    shutil.copytree(COQ, dst / "coq", ignore=shutil.ignore_patterns("extract", "*.glob", "*.vok", "*.vos", ".*.aux"))
    (dst / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "proofs.md", dst / "docs" / "proofs.md")
    return dst / "coq"


def _check(coq: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(coq / "check_assumptions.sh")], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A checked, unplanted copy (its Print Assumptions answers cached, so
    that a planted copy asks coqc only about what the plant changed)."""
    if not (COQ / "theories" / "Extract.vo").exists():
        pytest.skip("the theories are not built (make coq)")
    root = tmp_path_factory.mktemp("trust-base")
    coq = _copy(root)
    run = _check(coq)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "OK: the trust statement holds" in run.stdout
    return root


@pytest.fixture
def copy(base, tmp_path) -> Path:
    shutil.copytree(base / "coq", tmp_path / "coq")
    shutil.copytree(base / "docs", tmp_path / "docs")
    return tmp_path / "coq"


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def _add_theorem(coq: Path, module: str, source: str, names: list[str], compiled: str | None = None,
                 pin: dict[str, str] | None = None, assumptions_extra: str = "") -> None:
    """A new file theories/<module>.v compiled from ``compiled`` (default
    ``source``) and left holding ``source``, in _CoqProject, its theorems in
    the table and in Assumptions.v, their statements pinned as ``pin`` says."""
    v = coq / "theories" / f"{module}.v"
    v.write_text(compiled or source)
    r = subprocess.run(["coqc", "-Q", "theories", "VS", f"theories/{module}.v"], cwd=coq,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    v.write_text(source)
    _append(coq / "_CoqProject", f"theories/{module}.v\n")
    for name in names:
        _append(coq.parent / "docs" / "proofs.md", f"| `{name}` | {module}.v | planted |\n")
    _append(coq / "Assumptions.v", f"\nFrom VS Require Import {module}.\n"
            + "".join(f"Print Assumptions VS.{module}.{n}.\n" for n in names) + assumptions_extra)
    for qual, statement in (pin or {}).items():
        _append(coq / "statements.txt", f"\n== {qual}\n{statement}\n")


def _fails(coq: Path, *needles: str) -> str:
    run = _check(coq)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    fails = "\n".join(line for line in out.splitlines() if line.startswith("FAIL"))
    for needle in needles:
        assert needle in fails, f"{needle!r} not among the failures:\n{fails}"
    return fails


def test_false_theorem_under_unset_guard_checking(copy):
    # The audit's plant: 1 = 2 through a non-terminating fixpoint, with its table
    # row, its Print Assumptions line and a `Print All Dependencies` line that adds
    # one more "Closed under the global context" to coqc's output.
    src = ("Unset Guard Checking.\nFixpoint spin (n : nat) : False := spin n.\nSet Guard Checking.\n"
           "Theorem one_is_two : 1 = 2.\nProof. destruct (spin 0). Qed.\n")
    _add_theorem(copy, "Spin", src, ["one_is_two"], pin={"VS.Spin.one_is_two": "Spin.one_is_two\n     : 1 = 2"},
                 assumptions_extra="Print All Dependencies VS.Spin.one_is_two.\n")
    fails = _fails(copy, "coq/theories/Spin.v:1: a kernel check switched",
                   "VS.Spin.one_is_two is not closed under the global context",
                   "coq/Assumptions.v")
    assert "assumed to be guarded" in fails and "Print All Dependencies" in fails


def test_stale_vo_with_an_axiom_and_a_decoy_of_the_same_name(copy):
    # Leaf.vo was compiled with an axiom the source no longer shows (the scan of the
    # sources passes); a module Assumptions.v imports after it declares a closed
    # `leaf : True`. The unqualified `Print Assumptions leaf` would read the decoy.
    _add_theorem(copy, "Decoy", "Theorem leaf : True.\nProof. exact I. Qed.\n", [])
    src = "Theorem leaf : 1 = 2.\nProof. exact cheat. Qed.\n"
    _add_theorem(copy, "Leaf", src, ["leaf"], compiled="Axiom cheat : 1 = 2.\n" + src,
                 pin={"VS.Leaf.leaf": "Leaf.leaf\n     : 1 = 2"},
                 assumptions_extra="From VS Require Import Decoy.\n")
    fails = _fails(copy, "VS.Leaf.leaf is not closed under the global context")
    assert "cheat" in fails
    assert "Leaf.v" not in fails.replace("VS.Leaf.leaf", "")  # the sources themselves were clean


def test_decoy_plan_spec_in_another_file(copy):
    # A row repointed to a file declaring a closed `plan_spec : True`.
    _add_theorem(copy, "Decoy", "Theorem plan_spec : True.\nProof. exact I. Qed.\n", [])
    proofs = copy.parent / "docs" / "proofs.md"
    proofs.write_text(proofs.read_text().replace("| `plan_spec` | Pipelineproof.v |", "| `plan_spec` | Decoy.v |"))
    ass = copy / "Assumptions.v"
    ass.write_text(ass.read_text().replace("VS.Pipelineproof.plan_spec.", "VS.Decoy.plan_spec."))
    _fails(copy, "VS.Decoy.plan_spec: its statement is not pinned",
           "VS.Pipelineproof.plan_spec is pinned in coq/statements.txt but not in docs/proofs.md's table")


def test_row_naming_the_wrong_file(copy):
    proofs = copy.parent / "docs" / "proofs.md"
    proofs.write_text(proofs.read_text().replace("| `plan_spec` | Pipelineproof.v |", "| `plan_spec` | Checker.v |"))
    _fails(copy, "plan_spec is not declared (Theorem/Lemma/...) at the top level of coq/theories/Checker.v")


def test_changed_statement(copy):
    st = copy / "statements.txt"
    text = st.read_text()
    start = text.index("== VS.Pipelineproof.plan_spec\n")
    line_end = text.index("\n", text.index("\n", start) + 1)
    st.write_text(text[:line_end] + "\n       True ->" + text[line_end:])
    _fails(copy, "VS.Pipelineproof.plan_spec: its statement differs from the one pinned")


def test_extra_sentence_in_assumptions(copy):
    _append(copy / "Assumptions.v", "\nPrint All Dependencies VS.Pipelineproof.plan_spec.\n")
    _fails(copy, "coq/Assumptions.v:", "Print All Dependencies")


def test_theorem_missing_from_the_table(copy):
    proofs = copy.parent / "docs" / "proofs.md"
    proofs.write_text("\n".join(line for line in proofs.read_text().splitlines()
                                if not line.startswith("| `plan_traffic` |")) + "\n")
    _fails(copy, "plan_traffic is in coq/Assumptions.v")


def test_changed_realizer_body(copy):
    ex = copy / "theories" / "Extract.v"
    text = ex.read_text()
    old = 'Extract Constant Coq.Init.Nat.sub => "fun (n : int) (m : int) -> if n > m then n - m else 0".'
    assert old in text
    ex.write_text(text.replace(old, old.replace("n - m", "n - m + 1")))
    _fails(copy, "the realizer of Coq.Init.Nat.sub is not the pinned one")


def test_realizer_not_allowed(copy):
    _append(copy / "theories" / "Extract.v",
            '\nExtract Constant List.fold_right => "fun f a l -> List.fold_right f l a".\n')
    _fails(copy, "List.fold_right is realized but not in coq/realizers.allow")


def test_directive_outside_extract(copy):
    _append(copy / "Outside.v", 'Extract Constant List.map => "List.map".\n')
    _fails(copy, "coq/Outside.v:1: extraction directive outside coq/theories/Extract.v")


def test_flag_in_coqproject(copy):
    _append(copy / "_CoqProject", "-arg -type-in-type\n")
    _fails(copy, "coq/_CoqProject:", "-type-in-type")


# One sentence each, planted (static scan) in a .v file under coq/: outside
# theories/ (the scan covers everything under coq/) or appended to a theory.
HOLES = [
    ("Lemma hole : 1 = 2. Proof. Admitted.", "Admitted/admit"),
    ("Lemma hole : 1 = 2. Proof. split; admit. Qed.", "Admitted/admit"),
    ("ADMIT OBLIGATIONS.", "Admitted/admit"),
    ("Admit Obligations.", "Admitted/admit"),
    ("Axiom cheat : False.", "Axiom"),
    ("Local Axiom cheat : False.", "Axiom"),
    ("Parameter cheat : False.", "Parameter"),
    ("Parameters a b : False.", "Parameter"),
    ("Conjecture cheat : False.", "Conjecture"),
    ("Hypothesis cheat : False.", "outside a Section"),
    ("Hypotheses cheat : False.", "outside a Section"),
    ("Variable cheat : False.", "outside a Section"),
    ("Variables a b : False.", "outside a Section"),
    ("Context (cheat : False).", "outside a Section"),
    ("Module M. Context (cheat : False). End M.", "outside a Section"),
    ("Unset Guard Checking.", "a kernel check switched"),
    ("Unset Universe Checking.", "a kernel check switched"),
    ("Unset Positivity Checking.", "a kernel check switched"),
    ("#[bypass_check(guard)] Fixpoint f (n : nat) : nat := f n.", "bypass_check"),
    ("#[bypass_check(positivity=yes)] Inductive I := C : (I -> False) -> I.", "bypass_check"),
    ('Declare ML Module "evil_plugin".', "Declare ML Module"),
    ('Load "/tmp/outside".', "Load"),
    ("Load Verbose outside.", "Load"),
    ("Set Printing All.", "a printing option"),
    ("Global Set Printing Width 10.", "a printing option"),
    ("#[export] Set Implicit Arguments.", "an option set beyond its file"),
    ('Add LoadPath "/tmp" as Evil.', "a load-path command"),
    ("Primitive int := #int63_type.", "Primitive/Register"),
]


def _scan(coq: Path) -> str:
    """The failures of the check's static part (holes, extraction directives)
    on ``coq``, run in this process: the same code as the script, without the
    seconds coqc takes to load the theories."""
    spec = importlib.util.spec_from_file_location("check_trust_copy", coq / "check_trust.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with contextlib.redirect_stdout(io.StringIO()):
        module.scan_holes()
        module.check_extraction(module.read_allow())
    return "\n".join(module.failures)


@pytest.mark.parametrize("where", ["Extra.v", "theories/Prelude.v", "nested/.deep/X.v"])
@pytest.mark.parametrize("sentence,message", HOLES, ids=[h[0][:30] for h in HOLES])
def test_hole_is_refused(copy, where, sentence, message):
    target = copy / where
    target.parent.mkdir(parents=True, exist_ok=True)
    _append(target, "\n" + sentence + "\n")
    fails = _scan(copy)
    assert f"coq/{where}:" in fails and message in fails, fails


def test_hole_fails_the_script(copy):
    _append(copy / "Extra.v", "\nUnset Guard Checking.\n")
    _fails(copy, "coq/Extra.v:2: a kernel check switched")


def test_comments_strings_and_section_variables_pass(copy):
    # Words in comments and strings, a Section's Context (a hypothesis of each
    # statement once the section closes), Ltac's `context [...]`: not holes.
    _append(copy / "Extra.v", '(* Admitted. Axiom x : False. *)\nDefinition s := "Unset Guard Checking".\n'
            "Section S. Context (n : nat). Variable m : nat. Definition k := n + m. End S.\n"
            "Goal True. match goal with |- context [True] => exact I end. Qed.\n")
    assert _scan(copy) == ""
