"""The trust check (coq/check_assumptions.sh) refuses every planted hole.

Each case copies the repository's inputs to the check (coq/ with its built
.vo files, the shipped extraction coq/extract/, docs/proofs.md,
bindings/glue.ml, .gitignore) into a temporary git repository, plants one
hole there, runs the check on the copy and expects it to fail with a message
naming the hole. The unplanted copy passes, coqchk included. The check
builds the copy's tracked files afresh; so that each plant rebuilds only
what it changed, the cases start from the unplanted copy's clean build
(--reuse-build) and skip coqchk (run once, on the unplanted copy).

The check reports every problem it finds, each on its own FAIL line, so
holes that neither stop the clean build nor change what another hole's
message depends on share one planted copy and one run (``PLANTS``, the
``planted`` fixture): each case then looks for its own lines in that run's
failures. Likewise every hole of the static scan is planted in one copy,
on a line of its own, and scanned once.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COQ = ROOT / "coq"

pytestmark = pytest.mark.skipif(shutil.which("coqc") is None or shutil.which("git") is None,
                                reason="coqc or git is not installed")


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def _copy(dst: Path) -> Path:
    """The check's inputs under ``dst``, a git repository tracking them."""
    # The tree's caches come along: signed with this machine's key, they spare
    # the unplanted copy's check the answers `make proofs` already got here
    # (entries are keyed by the clean build's .vo; elsewhere they are ignored).
    shutil.copytree(COQ, dst / "coq", ignore=shutil.ignore_patterns(
        "extract", "*.glob", "*.vok", "*.vos", ".*.aux", "CoqMakefile*", ".CoqMakefile.d"))
    shutil.copytree(COQ / "extract", dst / "coq" / "extract")
    for rel in ("docs/proofs.md", "bindings/glue.ml", ".gitignore"):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, dst / rel)
    _git(dst, "init", "-q")
    _git(dst, "add", "-A")
    return dst / "coq"


def _check(coq: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    _git(coq.parent, "add", "-A")  # planted sources are part of the commit under check
    return subprocess.run(["bash", str(coq / "check_assumptions.sh"), *args], capture_output=True, text=True,
                          timeout=900, env=env)


KEEP: list[str] = []


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A checked, unplanted copy (coqchk included), its clean build kept in
    ``keep``, its Print Assumptions answers cached, so that a planted copy
    rebuilds and asks coqc only about what the plant changed."""
    if not (COQ / "theories" / "Extract.vo").exists() or not (COQ / "extract" / "verishard_core.ml").exists():
        pytest.skip("the theories are not built (make extract)")
    root = tmp_path_factory.mktemp("trust-base")
    coq = _copy(root)
    # The tree's own .vo seed the first clean build (only speed: the plants'
    # checks start from this build, never from a tree's .vo).
    run = _check(coq, "--reuse-build", str(ROOT), "--keep-build", str(root / "keep"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "OK: the trust statement holds" in run.stdout and "OK: coqchk checked" in run.stdout
    KEEP[:] = [str(root / "keep")]
    return root


@pytest.fixture
def copy(base, tmp_path) -> Path:
    shutil.copytree(base, tmp_path / "repo", ignore=shutil.ignore_patterns("keep"), symlinks=True)
    return tmp_path / "repo" / "coq"


def _plant_check(coq: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return _check(coq, "--reuse-build", KEEP[0], "--skip-coqchk", *args, env=env)


# Holes planted together, each group in one copy checked once: "queries", holes
# the answers of coqc on the clean build tell (they need those queries to run);
# "static", holes the check finds before it queries coqc, among them a table
# row naming the wrong file (coqc then cannot answer the queries at all).
PLANTS: dict[str, list] = {"queries": [], "static": []}


def shared(group: str):
    """Register ``plant(coq)`` among the holes of the group's planted copy."""
    def register(plant):
        PLANTS[group].append(plant)
        return plant
    return register


KEPT: dict[str, Path] = {}   # group -> the clean build of its planted copy


def _planted(base: Path, tmp_path_factory, group: str) -> subprocess.CompletedProcess:
    """One run of the check on a copy holding every hole of ``PLANTS[group]``
    (its clean build kept in ``KEPT[group]``)."""
    root = tmp_path_factory.mktemp(f"trust-planted-{group}")
    shutil.copytree(base, root / "repo", ignore=shutil.ignore_patterns("keep"), symlinks=True)
    coq = root / "repo" / "coq"
    for plant in PLANTS[group]:
        plant(coq)
    KEPT[group] = root / "keep"
    return _plant_check(coq, "--keep-build", str(KEPT[group]))


@pytest.fixture(scope="module")
def planted(base, tmp_path_factory) -> subprocess.CompletedProcess:
    return _planted(base, tmp_path_factory, "queries")


@pytest.fixture(scope="module")
def planted_static(base, tmp_path_factory) -> subprocess.CompletedProcess:
    return _planted(base, tmp_path_factory, "static")


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


def _fails(coq: Path, *needles: str, env: dict | None = None) -> str:
    return _failures(_plant_check(coq, env=env), *needles)


def _failures(run: subprocess.CompletedProcess, *needles: str) -> str:
    """The FAIL lines of a failed run of the check, each of ``needles`` among them."""
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    fails = "\n".join(line for line in out.splitlines() if line.startswith("FAIL"))
    for needle in needles:
        assert needle in fails, f"{needle!r} not among the failures:\n{fails}"
    return fails


@shared("queries")
def _plant_false_theorem(coq: Path) -> None:
    # The audit's plant: 1 = 2 through a non-terminating fixpoint, with its table
    # row, its Print Assumptions line and a `Print All Dependencies` line that adds
    # one more "Closed under the global context" to coqc's output.
    src = ("Unset Guard Checking.\nFixpoint spin (n : nat) : False := spin n.\nSet Guard Checking.\n"
           "Theorem one_is_two : 1 = 2.\nProof. destruct (spin 0). Qed.\n")
    _add_theorem(coq, "Spin", src, ["one_is_two"], pin={"VS.Spin.one_is_two": "Spin.one_is_two\n     : 1 = 2"},
                 assumptions_extra="Print All Dependencies VS.Spin.one_is_two.\n")


def test_false_theorem_under_unset_guard_checking(planted):
    fails = _failures(planted, "coq/theories/Spin.v:1: a kernel check switched",
                      "VS.Spin.one_is_two is not closed under the global context",
                      "coq/Assumptions.v")
    assert "assumed to be guarded" in fails and "Print All Dependencies VS.Spin.one_is_two" in fails


def test_stale_vo_with_an_axiom_is_not_read(copy):
    # Leaf.vo was compiled with an axiom the source no longer shows (the scan of the
    # sources passes); a module Assumptions.v imports after it declares a closed
    # `leaf : True`. The check builds the tracked sources afresh: the stale .vo is
    # never read, and the source alone does not compile.
    _add_theorem(copy, "Decoy", "Theorem leaf : True.\nProof. exact I. Qed.\n", [])
    src = "Theorem leaf : 1 = 2.\nProof. exact cheat. Qed.\n"
    _add_theorem(copy, "Leaf", src, ["leaf"], compiled="Axiom cheat : 1 = 2.\n" + src,
                 pin={"VS.Leaf.leaf": "Leaf.leaf\n     : 1 = 2"},
                 assumptions_extra="From VS Require Import Decoy.\n")
    _fails(copy, "the clean build failed")


def _extract_in_tree(coq: Path) -> None:
    """coq/extract/verishard_core.ml as `make extract` writes it from the tree's .vo."""
    r = subprocess.run(["coqc", "-Q", "../theories", "VS", "../theories/Extract.v"], cwd=coq / "extract",
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_stale_vo_with_a_realizer_changes_the_shipped_core(copy):
    # The issue's plant: a Layoutchoice.vo (its source clean) carrying an
    # `Extract Constant List.forallb` that checks 64 elements; the core extracted
    # from the tree would accept a 66-axis mesh with a 0-size axis.
    v = copy / "theories" / "Layoutchoice.v"
    clean = v.read_text()
    v.write_text(clean + '\nFrom Coq Require Extraction.\nExtract Constant List.forallb => "fun f l -> List.for_all f (List.filteri (fun i _ -> i < 64) l)".\n')
    r = subprocess.run(["coqc", "-Q", "theories", "VS", "theories/Layoutchoice.v"], cwd=copy, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    v.write_text(clean)
    _extract_in_tree(copy)
    assert "i < 64" in (copy / "extract" / "verishard_core.ml").read_text()
    fails = _fails(copy, "coq/extract/verishard_core.ml differs from what a clean build of coq/'s tracked files extracts")
    assert "Layoutchoice.v" not in fails  # the sources are clean: only the build tells


@pytest.mark.parametrize("name", ["CoqMakefile.local", "theories/Makefile.local"])
def test_local_makefile_fragment_is_refused(copy, tmp_path, name):
    outside = tmp_path / "Evil.v"
    outside.write_text('Extract Constant List.forallb => "fun f l -> true".\n')
    (copy / name).write_text(f"OTHERFLAGS += -l {outside}\n")
    _fails(copy, f"coq/{name}: a local build file")


@pytest.mark.parametrize("var", ["OTHERFLAGS", "COQPATH"])
def test_coq_variable_in_the_environment_is_refused(copy, tmp_path, var):
    env = dict(os.environ, **{var: f"-l {tmp_path / 'Evil.v'}"})
    _fails(copy, f"the environment sets {var}", env=env)
    env = dict(os.environ, MAKEFLAGS=f"-j2 -- {var}=-l{tmp_path / 'Evil.v'}")
    _fails(copy, f"MAKEFLAGS sets {var}", env=env)


def _plant_shadow(copy: Path, module: str, qualified: str, name: str, decl: str) -> None:
    """A file ``module`` defining its own ``name`` (``decl``), imported by
    Extract.v after the proved one, ``qualified``; the Extraction command
    naming it short (``qualified`` replaced by ``name``), or qualified as before."""
    (copy / "theories" / f"{module}.v").write_text(decl)
    _append(copy / "_CoqProject", f"theories/{module}.v\n")
    ex = copy / "theories" / "Extract.v"
    text = ex.read_text()
    assert qualified in text
    ex.write_text(text.replace("From VS Require Import Layoutchoice.", "From VS Require Import Layoutchoice.\n"
                               f"From VS Require Import {module}.").replace(qualified, name))


@shared("queries")
def _plant_shadowed_extracted_name(copy: Path) -> None:
    # A file defining its own uplan_problem, the Extraction command naming it
    # short: the glue would call it.
    _plant_shadow(copy, "ShadowShort", "VS.Upipeline.uplan_problem", "uplan_problem",
                  "From VS Require Import Mesh Types Upipeline.\n"
                  "Definition uplan_problem (m : Mesh.mesh) (s d : Types.atype) := Upipeline.uplan_problem m s s.\n")


def test_shadowed_extracted_name(planted):
    _failures(planted, "the Extraction command names uplan_problem: name each function as VS.File.name",
              "bindings/glue.ml calls uplan_problem")


@shared("queries")
def _plant_shadow_qualified(copy: Path) -> None:
    # Another file defining its own pplan_problem, the Extraction command naming
    # the proved one qualified, as it does.
    _plant_shadow(copy, "Shadow", "VS.Ppipeline.pplan_problem", "VS.Ppipeline.pplan_problem",
                  "From VS Require Import Mesh Partial Ppipeline.\n"
                  "Definition pplan_problem (m : Mesh.mesh) (s d : Partial.ptype) := Ppipeline.pplan_problem m s s.\n")


def test_shadowing_constant_is_refused_when_qualified(planted):
    # Qualified: the other constant of that short name is still refused.
    fails = _failures(planted, "bindings/glue.ml calls pplan_problem: VS.")
    assert "VS.Shadow.pplan_problem" in fails


def _forge(coq: Path, built: Path, theorem: str) -> None:
    """Entries for ``theorem`` added to coq/.assumptions-cache, both as the
    old cache had them (key -> answer) and signed with a key of the
    forger's, keyed by the .vo files under ``built`` (a coq/ folder)."""
    spec = importlib.util.spec_from_file_location("check_trust_forge", coq / "check_trust.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    theories = str(built / "theories")
    version = subprocess.run(["coqc", "--version"], capture_output=True, text=True).stdout.strip()
    module, name = theorem.split(".")[1:]
    closure = sorted({module} | mod.requires(module, theories))
    key = mod.hashlib.sha256("\n".join([version, mod.file_digest(str(coq / "check_trust.py")), theorem] + [
        f"{m} {mod.file_digest(os.path.join(theories, m + '.vo'))}" for m in closure]).encode()).hexdigest()
    path = coq / ".assumptions-cache"
    cache = json.loads(path.read_text()) if path.exists() else {}
    cache.setdefault("closed", {})[key] = mod.sign(b"forger" * 8, key)
    cache[key] = mod.CLOSED
    path.write_text(json.dumps(cache))


@shared("queries")
def _plant_forged_cache_entry(coq: Path) -> None:
    # Leaf's axiom is in its source (the scan names it); a cache entry forged
    # for it, keyed by the Leaf.vo compiled in the tree (the clean build's is
    # the same file: checked below), must not spare it the Print Assumptions query.
    src = "Axiom cheat : 1 = 2.\nTheorem leaf : 1 = 2.\nProof. exact cheat. Qed.\n"
    _add_theorem(coq, "Leaf", src, ["leaf"], pin={"VS.Leaf.leaf": "Leaf.leaf\n     : 1 = 2"})
    _forge(coq, coq, "VS.Leaf.leaf")
    FORGED_FROM.append(coq / "theories" / "Leaf.vo")


FORGED_FROM: list[Path] = []


def test_forged_cache_entry_is_asked_again(planted):
    fails = _failures(planted, "coq/theories/Leaf.v:1: Axiom", "VS.Leaf.leaf is not closed under the global context")
    assert "cheat" in fails
    # the entry was forged under the key the check computes: from the clean build's own Leaf.vo
    assert FORGED_FROM[0].read_bytes() == (KEPT["queries"] / "coq" / "theories" / "Leaf.vo").read_bytes()


@shared("queries")
def _plant_emptied_definition(coq: Path) -> None:
    # Boxesworldproof.boxes_ok := True: brounds_correct's printed statement is
    # unchanged (proved by `exact I`); its meaning is not.
    v = coq / "theories" / "Boxesworldproof.v"
    text = v.read_text()
    start = text.index("Definition boxes_ok (budget : nat) (ls lt : layout) (rds : list (list cut)) : Prop :=")
    end = text.index("Theorem brounds_correct")
    proof = text.index("Proof.", end)
    qed = text.index("Qed.", proof)
    v.write_text(text[:start] + "Definition boxes_ok (budget : nat) (ls lt : layout) (rds : list (list cut)) : Prop :=\n"
                 "  True.\n\n" + text[end:proof] + "Proof. intros; exact I. Qed." + text[qed + 4:])
    # Coverproof.brounds_complete reads boxes_ok's parts: the planter gives it a statement that
    # still builds (a change the check reports too), so the copy's other holes are still asked.
    c = coq / "theories" / "Coverproof.v"
    text = c.read_text()
    start = text.index("Theorem brounds_complete")
    qed = text.index("Qed.", start)
    c.write_text(text[:start] + "Theorem brounds_complete : True.\nProof. exact I." + text[qed - 1:])


def test_emptied_definition(planted):
    fails = _failures(planted, "VS.Boxesworldproof.boxes_ok: its definition is not the one pinned",
                      "VS.Boxesworldproof.brounds_correct: its meaning differs")
    assert "brounds_correct: its statement differs" not in fails  # the printed statement is the same
    assert "VS.Coverproof.brounds_complete: its statement differs" in fails


@shared("queries")
def _plant_stdlib_look_alike(copy: Path) -> None:
    # A VS PeanoNat.Nat.min that is max, used by a theorem: its name reads as the
    # standard library's.
    (copy / "theories" / "PeanoNat.v").write_text(
        "From Coq Require Arith.\nModule Nat.\nDefinition min := Coq.Arith.PeanoNat.Nat.max.\nEnd Nat.\n")
    (copy / "theories" / "Looks.v").write_text(
        "From Coq Require Import Arith.\nFrom VS Require Import PeanoNat.\n"
        "Theorem looks : forall a, PeanoNat.Nat.min a 0 = a.\n"
        "Proof. intros a. unfold PeanoNat.Nat.min. apply Coq.Arith.PeanoNat.Nat.max_0_r. Qed.\n")
    _append(copy / "_CoqProject", "theories/PeanoNat.v\ntheories/Looks.v\n")
    _append(copy.parent / "docs" / "proofs.md", "| `looks` | Looks.v | planted |\n")
    _append(copy / "Assumptions.v", "\nFrom VS Require Import Looks.\nPrint Assumptions VS.Looks.looks.\n")


def test_stdlib_look_alike(planted):
    _failures(planted, "VS.PeanoNat.Nat.min shadows the standard library's Coq.")


def _pins_agree(statements: Path, pinned: Path) -> bool:
    return statements.read_bytes() == pinned.read_bytes()


def test_statements_pinned_twice():
    # A re-pin (bash coq/check_assumptions.sh --pin) shows in review twice:
    # coq/statements.txt and this copy must be changed together.
    assert _pins_agree(COQ / "statements.txt", ROOT / "tests" / "statements.pinned"), (
        "coq/statements.txt differs from tests/statements.pinned: after reviewing the re-pin, "
        "cp coq/statements.txt tests/statements.pinned")


def test_repin_without_the_tests_copy_is_caught(tmp_path):
    st = tmp_path / "statements.txt"
    text = (COQ / "statements.txt").read_text()
    start = text.index("== VS.Pipelineproof.plan_spec\n")
    line_end = text.index("\n", text.index("\n", start) + 1)
    st.write_text(text[:line_end] + "\n       False ->" + text[line_end:])
    assert not _pins_agree(st, ROOT / "tests" / "statements.pinned")


@shared("queries")
def _plant_decoy_plan_spec(copy: Path) -> None:
    # A row repointed to a file declaring a closed `plan_spec : True`.
    _add_theorem(copy, "Decoy", "Theorem plan_spec : True.\nProof. exact I. Qed.\n", [])
    proofs = copy.parent / "docs" / "proofs.md"
    proofs.write_text(proofs.read_text().replace("| `plan_spec` | Pipelineproof.v |", "| `plan_spec` | Decoy.v |"))
    ass = copy / "Assumptions.v"
    ass.write_text(ass.read_text().replace("VS.Pipelineproof.plan_spec.", "VS.Decoy.plan_spec."))


def test_decoy_plan_spec_in_another_file(planted):
    _failures(planted, "VS.Decoy.plan_spec: its statement is not pinned",
              "VS.Pipelineproof.plan_spec is pinned in coq/statements.txt but not in docs/proofs.md's table")


@shared("static")
def _plant_row_naming_the_wrong_file(copy: Path) -> None:
    proofs = copy.parent / "docs" / "proofs.md"
    text = proofs.read_text()
    assert "| `synthesize_memory` | Synthproof.v |" in text
    proofs.write_text(text.replace("| `synthesize_memory` | Synthproof.v |", "| `synthesize_memory` | Checker.v |"))


def test_row_naming_the_wrong_file(planted_static):
    _failures(planted_static,
              "synthesize_memory is not declared (Theorem/Lemma/...) at the top level of coq/theories/Checker.v")


@shared("queries")
def _plant_changed_statement(copy: Path) -> None:
    st = copy / "statements.txt"
    text = st.read_text()
    start = text.index("== VS.Checker.check_ok_iff\n")
    line_end = text.index("\n", text.index("\n", start) + 1)
    st.write_text(text[:line_end] + "\n       True ->" + text[line_end:])


def test_changed_statement(planted):
    _failures(planted, "VS.Checker.check_ok_iff: its statement differs from the one pinned")


@shared("static")
def _plant_extra_sentence_in_assumptions(copy: Path) -> None:
    _append(copy / "Assumptions.v", "\nPrint All Dependencies VS.Pipelineproof.plan_spec.\n")


def test_extra_sentence_in_assumptions(planted_static):
    fails = _failures(planted_static, "coq/Assumptions.v:")
    assert re.search(r"^FAIL.*coq/Assumptions\.v:\d+: .*Print All Dependencies VS\.Pipelineproof\.plan_spec",
                     fails, re.M)


@shared("static")
def _plant_theorem_missing_from_the_table(copy: Path) -> None:
    proofs = copy.parent / "docs" / "proofs.md"
    proofs.write_text("\n".join(line for line in proofs.read_text().splitlines()
                                if not line.startswith("| `plan_traffic` |")) + "\n")


def test_theorem_missing_from_the_table(planted_static):
    _failures(planted_static, "plan_traffic is in coq/Assumptions.v")


@shared("static")
def _plant_changed_realizer_body(copy: Path) -> None:
    ex = copy / "theories" / "Extract.v"
    text = ex.read_text()
    old = 'Extract Constant Coq.Init.Nat.sub => "fun (n : int) (m : int) -> if n > m then n - m else 0".'
    assert old in text
    ex.write_text(text.replace(old, old.replace("n - m", "n - m + 1")))


def test_changed_realizer_body(planted_static):
    _failures(planted_static, "the realizer of Coq.Init.Nat.sub is not the pinned one")


@shared("static")
def _plant_realizer_not_allowed(copy: Path) -> None:
    _append(copy / "theories" / "Extract.v",
            '\nExtract Constant List.fold_right => "fun f a l -> List.fold_right f l a".\n')


def test_realizer_not_allowed(planted_static):
    _failures(planted_static, "List.fold_right is realized but not in coq/realizers.allow")


@shared("static")
def _plant_directive_outside_extract(copy: Path) -> None:
    _append(copy / "Outside.v", 'Extract Constant List.map => "List.map".\n')


def test_directive_outside_extract(planted_static):
    _failures(planted_static, "coq/Outside.v:1: extraction directive outside coq/theories/Extract.v")


@shared("static")
def _plant_flag_in_coqproject(copy: Path) -> None:
    _append(copy / "_CoqProject", "-arg -type-in-type\n")


def test_flag_in_coqproject(planted_static):
    fails = _failures(planted_static, "coq/_CoqProject:")
    assert re.search(r"^FAIL.*coq/_CoqProject:\d+: .*-type-in-type", fails, re.M)


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


HOLE_FILES = ["Extra.v", "theories/Prelude.v", "nested/.deep/X.v"]


@pytest.fixture(scope="module")
def scanned(tmp_path_factory) -> tuple[str, dict[str, int]]:
    """The static scan's failures on one copy holding every hole of HOLES,
    one per line, at the end of each of HOLE_FILES (theories/Prelude.v is
    the real one), and the line of the first hole in each."""
    coq = _copy(tmp_path_factory.mktemp("trust-holes"))
    first = {}
    for where in HOLE_FILES:
        target = coq / where
        target.parent.mkdir(parents=True, exist_ok=True)
        text = target.read_text() if target.exists() else ""
        if text and not text.endswith("\n"):
            text += "\n"
        first[where] = len(text.splitlines()) + 1
        target.write_text(text + "".join(sentence + "\n" for sentence, _ in HOLES))
    return _scan(coq), first


@pytest.mark.parametrize("where", HOLE_FILES)
@pytest.mark.parametrize("k", range(len(HOLES)), ids=[h[0][:30] for h in HOLES])
def test_hole_is_refused(scanned, where, k):
    fails, first = scanned
    sentence, message = HOLES[k]
    mine = [line for line in fails.splitlines() if line.startswith(f"coq/{where}:{first[where] + k}: ")]
    assert any(message in line for line in mine), (sentence, mine, fails)


@shared("static")
def _plant_hole_in_a_file_of_its_own(copy: Path) -> None:
    _append(copy / "Extra.v", "\nUnset Guard Checking.\n")


def test_hole_fails_the_script(planted_static):
    _failures(planted_static, "coq/Extra.v:2: a kernel check switched")


def test_comments_strings_and_section_variables_pass(copy):
    # Words in comments and strings, a Section's Context (a hypothesis of each
    # statement once the section closes), Ltac's `context [...]`: not holes.
    _append(copy / "Extra.v", '(* Admitted. Axiom x : False. *)\nDefinition s := "Unset Guard Checking".\n'
            "Section S. Context (n : nat). Variable m : nat. Definition k := n + m. End S.\n"
            "Goal True. match goal with |- context [True] => exact I end. Qed.\n")
    assert _scan(copy) == ""
