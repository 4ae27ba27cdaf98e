"""The trust statement, checked (run by coq/check_assumptions.sh, `make proofs`).

Fails (exit 1, one line "FAIL: ..." per problem, every problem reported) on:

0. a Coq variable in the environment (any COQ* name: COQPATH, COQFLAGS, ...;
   OTHERFLAGS, which carries `-l file`; CAMLFLAGS), or set through
   MAKEFLAGS; a local build file under coq/ (CoqMakefile.local, *.local,
   coqrc): coq_makefile's makefile or coqc would read it (the check then
   reports the static checks below and builds nothing);
1. a hole anywhere under coq/ (every .v file, not only theories/), matched
   case-insensitively on the text with comments and strings blanked:
   Admitted / admit (Admit Obligations too), Axiom(s), Parameter(s),
   Conjecture, Hypothesis/Hypotheses, Variable(s) and Context outside a
   Section (inside one they become hypotheses of each theorem's statement),
   guard / universe / positivity checking switched, `bypass_check`
   attributes, Declare ML Module, Load, load-path and printing commands,
   Primitive / Register, exported or global option settings; a
   coq/_CoqProject line other than `-Q theories VS` and `theories/X.v`;
2. an extraction directive outside coq/theories/Extract.v, one the script
   cannot classify, or a realizer whose normalised directive (the sentence,
   comments dropped, blanks collapsed) does not have the sha256 that
   coq/realizers.allow pins for its name;
3. docs/proofs.md's theorem table and coq/Assumptions.v listing different
   theorems, a row naming a theorem its file does not declare, or
   Assumptions.v holding anything but `From VS Require ...` and
   `Print Assumptions VS.File.name.` sentences;
6. the clean build: coq/'s git-tracked files (nothing else: no .vo, no
   local makefile) copied to a temporary folder and built there with a
   bare environment; its extraction must be byte-identical to
   coq/extract/verishard_core.ml(i) and build/'s copy (what the bindings are
   compiled from); everything below reads this build, never the tree's .vo;
7. coqchk (Coq's independent checker), run over every .vo of the clean
   build (the standard library admitted), listing an axiom outside Coq.,
   type-in-type, an unsafe fixpoint or an assumed positivity;
4. a theorem of the table (queried by its qualified name VS.File.name, one
   `Print Assumptions` each, in a file this script writes, each answer cut
   out by a per-run marker) whose answer is not exactly
   "Closed under the global context";
5. a theorem whose `Check` output differs from the one pinned in
   coq/statements.txt, or whose meaning does: the sha256 of its statement
   printed with `Set Printing All` and of every definition it reaches
   (constants, inductives, constructors, followed transitively through
   everything not under Coq., each `Print`ed with `Set Printing All`; every
   object a printed name may denote, so more than used, never fewer); a
   definition whose sha256 differs from the pinned one is named; a reached
   VS.F.rest where F.rest (or rest, inside a module) also names a
   standard-library object (VS.PeanoNat.Nat.min) is refused;
8. a function bindings/glue.ml calls (its identifiers the extracted
   interface declares, less the names it binds itself) that
   coq/theories/Extract.v's Extraction command does not name as
   VS.File.name, that is not the only object of its short name (a constant
   of the same name elsewhere could take the extracted name), or that no
   statement of the table reaches (UNSTATED_ENTRIES lists the exceptions);
   standard-library functions (fst, snd) must be the only objects of their
   names.

`--pin` rewrites coq/statements.txt and the hashes in coq/realizers.allow
from the current sources (names are still added to the allowlist by hand)
and prints the difference (statements, and each changed definition against
the text the last run printed): run it deliberately after changing a
statement, a definition or a realizer, review the diff and copy
coq/statements.txt to tests/statements.pinned (tests/test_trust.py compares
the two, so a re-pin shows twice in review). `--no-cache` asks coqc for
every Print Assumptions answer; otherwise a closed answer is reused while
the clean build's .vo files of its file and of everything that file
requires, coqc and this script are byte-identical, and only when its entry
in coq/.assumptions-cache carries an HMAC under a key kept outside the
repository (~/.cache/verishard/trust-cache.key): a forged entry is asked
again. Likewise the printed definitions (coq/.assumptions-cache.defs, one
HMAC over the whole store) are reused for a definition while the clean
build's .vo of its file, the list of modules loaded, coqc and this script
are the same; they also give --pin's difference. `-j N`: jobs of the clean build (2). For the test suite's plants:
`--keep-build DIR` keeps the clean build in DIR, `--reuse-build DIR` starts
from such a build's .vo for byte-identical sources (make rebuilds the rest
and what requires them), `--skip-coqchk`; `make proofs` passes none of them.
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))          # coq/
ROOT = os.path.dirname(HERE)
GLUE = os.path.join(ROOT, "bindings", "glue.ml")
PROOFS_MD = os.path.join(HERE, "..", "docs", "proofs.md")
EXTRACT = "theories/Extract.v"  # the one file allowed to hold extraction directives
CLOSED = "Closed under the global context"
QUALID = r"[A-Za-z_][\w']*(?:\.[A-Za-z_][\w']*)*"
IDENT = r"[A-Za-z_][\w']*"

failures: list[str] = []


def fail(msg: str) -> None:
    failures.append(msg)
    print(f"FAIL: {msg}")


# --- a small Coq lexer: comments (nested, may hold strings) and strings ----
LEAD = re.compile(r"[\s\-+*{}]*")
TOKEN = re.compile(r'\(\*|\*\)|"')


def mask(text: str, strings: bool = True) -> str:
    """``text`` with comments blanked and (if ``strings``) string contents
    replaced by '_' (same length, newlines kept), so positions match."""
    def blank(seg: str, fill: str) -> str:
        return re.sub(r"[^\n]", fill, seg)

    out, pos, depth, n = [], 0, 0, len(text)
    i = 0
    while True:
        t = TOKEN.search(text, i)
        if t is None:
            break
        k = t.start()
        if t.group() == '"':
            j = k + 1  # the closing quote ("" inside a string is a quote)
            while True:
                j = text.find('"', j)
                if j < 0 or not text.startswith('""', j):
                    break
                j += 2
            j = n if j < 0 else j
            if depth:  # a string inside a comment: blank it whole
                i = j + 1
                continue
            out.append(text[pos:k + 1])
            out.append(blank(text[k + 1:j], "_") if strings else text[k + 1:j])
            pos, i = j, j + 1
            continue
        if t.group() == "(*":
            if depth == 0:
                out.append(text[pos:k])
                pos = k
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                out.append(blank(text[pos:k + 2], " "))
                pos = k + 2
        i = k + 2
    out.append(blank(text[pos:], " ") if depth else text[pos:])
    return "".join(out)


def sentences(path: str, cache: dict = {}):
    """(line, code, masked) of every sentence of a .v file, up to a '.'
    followed by blank or end of file and not part of '..': ``code`` is the
    text without comments (strings kept), ``masked`` without strings too,
    both with blanks collapsed."""
    if path in cache:
        return cache[path]
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    m, c = mask(text), mask(text, strings=False)
    out, start, line, counted = [], 0, 1, 0
    for dot in re.finditer(r"(?<!\.)\.(?=\s|$)", m):
        i = dot.start()
        seg_m, seg_c = m[start:i], c[start:i]
        lead = LEAD.match(seg_m).end()  # bullets and braces
        if seg_m[lead:].strip():
            line += text.count("\n", counted, start + lead)
            counted = start + lead
            out.append((line, " ".join(seg_c[lead:].split()), " ".join(seg_m[lead:].split())))
        start = i + 1
    if m[start:].strip():  # text after the last period: a sentence too
        out.append((text.count("\n", 0, start) + 1, " ".join(c[start:].split()), " ".join(m[start:].split())))
    cache[path] = out
    return out


PREFIX = re.compile(r'(?:#\[[^\]]*\]\s*|(?:Time|Fail|Succeed|Local|Global|Export|Polymorphic|Monomorphic|Program|Private|Cumulative|NonCumulative)\s+|Redirect\s+"_*"\s+|Timeout\s+\d+\s+)', re.I)


def strip_prefixes(s: str) -> str:
    while True:
        m = PREFIX.match(s)
        if not m or not m.end():
            return s
        s = s[m.end():]


def vfiles() -> list[str]:
    """Every .v file under coq/, relative to coq/ (hidden folders included)."""
    return sorted(os.path.relpath(os.path.join(d, f), HERE)
                  for d, _, fs in os.walk(HERE) for f in fs if f.endswith(".v"))


# --- 1. holes -------------------------------------------------------------
# Anywhere in a sentence (comments and strings blanked), case-insensitive.
ANYWHERE = [
    (r"\badmit(ted)?\b", "Admitted/admit (a proof hole)"),
    (r"\baxioms?\b", "Axiom (an assumption)"),
    (r"\bparameters?\b", "Parameter (an assumption)"),
    (r"\bconjectures?\b", "Conjecture (an assumption)"),
    (r"\b(guard|universe|positivity)\s+checking\b", "a kernel check switched (Guard/Universe/Positivity Checking)"),
    (r"bypass_check", "#[bypass_check] (a kernel check skipped)"),
    (r"\btyping\s+flags\b", "typing flags (a kernel check switched)"),
    (r"\bdeclare\s+ml\s+module\b", "Declare ML Module (a plugin outside the trust base)"),
    (r"\b(set|unset|add|remove|test)\s+printing\b", "a printing option (could change what the check reads)"),
    (r"\badd\s+(rec\s+)?(ml\s+)?loadpath\b|\badd\s+ml\s+path\b", "a load-path command (loads files from outside coq/)"),
]
# As the command of a sentence (after its prefixes), case-insensitive.
COMMAND = [
    (re.compile(r"load\b", re.I), "Load (runs a file's sentences unscanned)"),
    (re.compile(r"(primitive|register)\b", re.I), "Primitive/Register (kernel primitives)"),
    (re.compile(r"(cd|drop|declare\s+ml)\b", re.I), "a toplevel command that leaves the checked files"),
]
SECTION_VARS = re.compile(r"(variables?|hypothes[ie]s|context)\b", re.I)
SECTION = re.compile(r"Section\s+(" + IDENT + r")$")
MODULE = re.compile(r"Module\s+(?:Type\s+)?(" + IDENT + r")\b(?!.*:=)")
END = re.compile(r"End\s+(" + IDENT + r")$")
GLOBAL_OPTION = re.compile(r"(#\[\s*(export|global)\s*\]\s*|(global|export)\s+)(set|unset)\b", re.I)


def scan_holes() -> None:
    print("== Holes in coq/**/*.v (case-insensitive)")
    before = len(failures)
    files = vfiles()
    for path in files:
        sections: list[str] = []  # open Section/Module names
        sents = sentences(os.path.join(HERE, path))
        whole = "\n".join(m for _, _, m in sents)
        present = [(pat, what) for pat, what in ANYWHERE if re.search(pat, whole, re.I)]
        for line, _code, m in sents:
            where = f"coq/{path}:{line}"
            for pat, what in present:
                if re.search(pat, m, re.I):
                    fail(f"{where}: {what}: {m[:100]}")
            if GLOBAL_OPTION.match(m):
                fail(f"{where}: an option set beyond its file (Global/Export Set): {m[:100]}")
            cmd = strip_prefixes(m)
            for pat, what in COMMAND:
                if pat.match(cmd):
                    fail(f"{where}: {what}: {m[:100]}")
            s, mod, end = SECTION.match(cmd), MODULE.match(cmd), END.match(cmd)
            if s:
                sections.append("S:" + s.group(1))
            elif mod:
                sections.append("M:" + mod.group(1))
            elif end and sections:
                sections.pop()
            if SECTION_VARS.match(cmd) and not (sections and sections[-1].startswith("S:")):
                fail(f"{where}: Variable/Hypothesis/Context outside a Section (an assumption): {m[:100]}")
    with open(os.path.join(HERE, "_CoqProject"), encoding="utf-8") as f:
        for k, line in enumerate(f, 1):
            s = line.strip()
            if s and not s.startswith("#") and s != "-Q theories VS" and not re.fullmatch(r"theories/\w+\.v", s):
                fail(f"coq/_CoqProject:{k}: only '-Q theories VS' and 'theories/X.v' lines are allowed: {s[:80]}")
    if len(failures) == before:
        print(f"OK: no hole in {len(files)} .v files under coq/; coq/_CoqProject holds no flags")


# --- 2. extraction directives and realizers -------------------------------
WORD = re.compile(r"(?<![\w.'])(Extract|Extraction)(?![\w'])")


def classify(m: str):
    """(kind, names) of an extraction sentence (masked text), None if it is
    not one, ("unknown", []) if it mentions extraction in a form this
    script does not know."""
    m = strip_prefixes(m)
    w = m.split()
    if not w:
        return None
    head = " ".join(w[:3])
    if re.match(r"(From\s+\S+\s+)?Require\b|Import\b|Export\b", m):
        return None
    for kw in ("Extract Inlined Constant", "Extract Foreign Constant", "Extract Constant", "Extract Inductive"):
        if m.startswith(kw + " "):
            name = m[len(kw):].split()[0]
            return ("realizer", [name]) if re.fullmatch(QUALID, name) else ("unknown", [])
    if head.startswith("Extraction Inline") or head.startswith("Extraction NoInline"):
        return ("realizer", w[2:])
    if head.startswith("Extraction Implicit"):
        return ("realizer", w[2:3])
    if (re.match(r'(Recursive\s+|Separate\s+)?Extraction(\s+Library)?\s', m + " ")
            and not re.match(r"Extraction\s+(Inline|NoInline|Implicit|Language|Blacklist)\b", m)):
        return ("command", [])
    if re.match(r"Extraction\s+TestCompile\b", m):
        return ("command", [])
    if re.match(r"Extraction\s+(Language|Blacklist)\b|(Reset|Print)\s+Extraction\s+(Inline|Blacklist)\b|Show\s+Extraction\b", m):
        return ("other", [])
    if re.match(r"(Set|Unset|Test)\s+Extraction\b", m):
        return ("option", [])
    if WORD.search(m):
        return ("unknown", [])
    return None


def realizer_imports(m: str) -> list[str]:
    """Coq realizer libraries (Extr<Upper>...) a Require sentence loads, qualified."""
    r = re.match(r"(?:From\s+(\S+)\s+)?Require\s+(?:(?:Import|Export)\s+)?(.*)$", m)
    if not r:
        return []
    prefix, mods = r.group(1), r.group(2).split()
    out = []
    for mod in mods:
        last = mod.split(".")[-1]
        full = f"{prefix}.{mod}" if prefix else mod
        if last != "Extraction" and (re.match(r"Extr[A-Z]", last) or "extraction." in full):
            if full.startswith("Coq.") or prefix is None:
                full = "Coq.extraction." + last
            out.append(full)
    return out


def directive_hash(code: str) -> str:
    return hashlib.sha256(" ".join(code.split()).encode()).hexdigest()


def read_allow() -> dict[str, str | None]:
    """coq/realizers.allow: name -> pinned sha256 (None for a realizer library)."""
    allow: dict[str, str | None] = {}
    path = os.path.join(HERE, "realizers.allow")
    if not os.path.isfile(path):
        fail("coq/realizers.allow (the realizer allowlist) is missing")
        return allow
    with open(path, encoding="utf-8") as f:
        for k, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            name = words[0]
            if not re.fullmatch(QUALID, name) or len(words) > 2 or (
                    len(words) == 2 and not re.fullmatch(r"[0-9a-f]{64}", words[1])):
                fail(f"coq/realizers.allow:{k}: expected 'name sha256' (or a library name alone): {line.strip()[:80]}")
                continue
            allow[name] = words[1] if len(words) == 2 else None
    return allow


def check_extraction(allow: dict[str, str | None]) -> dict[str, str]:
    """Checks 2; returns name -> sha256 of its directive as the sources have it."""
    print("== Extraction directives in coq/**/*.v (allowlist and pinned bodies: coq/realizers.allow)")
    before = len(failures)
    n_real, n_lib, used, hashes = 0, 0, set(), {}
    for path in vfiles():
        for line, code, m in sentences(os.path.join(HERE, path)):
            where = f"coq/{path}:{line}"
            if "extr" not in m.lower():  # neither a directive nor a realizer library
                continue
            for lib in realizer_imports(strip_prefixes(m)):
                n_lib += 1
                used.add(lib)
                if path != EXTRACT:
                    fail(f"{where}: realizer library {lib} imported outside coq/{EXTRACT}")
                if lib not in allow:
                    fail(f"{where}: realizer library {lib} is not in coq/realizers.allow")
            c = classify(m)
            if c is None:
                continue
            kind, names = c
            if path != EXTRACT:
                fail(f"{where}: extraction directive outside coq/{EXTRACT}: {code[:80]}")
            if kind == "unknown":
                fail(f"{where}: unrecognised extraction directive: {code[:80]}")
            if kind != "realizer":
                continue
            n_real += 1
            if not names:
                fail(f"{where}: directive names nothing: {code[:80]}")
            h = directive_hash(code)
            for name in names:
                used.add(name)
                hashes[name] = h
                if name not in allow:
                    fail(f"{where}: {name} is realized but not in coq/realizers.allow")
                elif allow[name] != h:
                    fail(f"{where}: the realizer of {name} is not the pinned one (sha256 {h[:16]}..., "
                         f"coq/realizers.allow pins {(allow[name] or 'no hash')[:16]}...): "
                         f"review it, then `bash coq/check_assumptions.sh --pin`")
    for name in sorted(set(allow) - used):
        print(f"  note: {name} is in coq/realizers.allow but nothing realizes it")
    if len(failures) == before:
        print(f"OK: {n_real} realizer directives and {n_lib} realizer library imports, all in "
              f"coq/{EXTRACT}, each directive the one coq/realizers.allow pins")
    return hashes


# --- 3. the theorem table against Assumptions.v ----------------------------
THEOREM = re.compile(r"(?:Theorem|Lemma|Corollary|Proposition|Fact|Remark)\s+(" + IDENT + ")")


def declared(vfile: str, cache: dict = {}) -> set[str]:
    """Theorems declared at the top level of coq/theories/<vfile>."""
    if vfile not in cache:
        names, depth = set(), 0
        for _, _, m in sentences(os.path.join(HERE, "theories", vfile)):
            s = strip_prefixes(m)
            if MODULE.match(s):
                depth += 1
            elif END.match(s) and depth:
                depth -= 1
            d = THEOREM.match(s)
            if d and depth == 0:
                names.add(d.group(1))
        cache[vfile] = names
    return cache[vfile]


def read_table() -> dict[str, tuple[str, int]]:
    """docs/proofs.md's theorem table: name -> (File.v, line)."""
    print("== docs/proofs.md theorem table against coq/Assumptions.v")
    table: dict[str, tuple[str, int]] = {}
    if not os.path.isfile(PROOFS_MD):
        fail("docs/proofs.md (the theorem table) is missing")
        return table
    with open(PROOFS_MD, encoding="utf-8") as f:
        lines = f.read().splitlines()
    with open(os.path.join(HERE, "_CoqProject"), encoding="utf-8") as f:
        project = set(re.findall(r"theories/(\w+\.v)", f.read()))
    for k, row in enumerate(lines, 1):
        row = row.strip()
        if not row.startswith("|") or re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", row):
            continue
        cells = [c.strip().lower() for c in row.strip("|").split("|")]
        if cells[:2] == ["theorem", "file"]:
            continue
        r = re.fullmatch(r"\|\s*`(" + IDENT + r")`\s*\|\s*([A-Za-z0-9_]+\.v)\s*\|(.*)\|", row)
        if not r:
            fail(f"docs/proofs.md:{k}: cannot read this row (expected | `name` | File.v | statement |): {row[:80]}")
            continue
        name, vfile, _ = r.groups()
        if name in table:
            fail(f"docs/proofs.md:{k}: theorem {name} is listed twice")
        table[name] = (vfile, k)
        if vfile not in project or not os.path.isfile(os.path.join(HERE, "theories", vfile)):
            fail(f"docs/proofs.md:{k}: {name}: coq/theories/{vfile} is not a file of coq/_CoqProject")
        elif name not in declared(vfile):
            fail(f"docs/proofs.md:{k}: {name} is not declared (Theorem/Lemma/...) at the top level of coq/theories/{vfile}")
    if not table:
        fail("docs/proofs.md has no theorem table")
    return table


def check_assumptions_file(table: dict[str, tuple[str, int]]) -> None:
    before = len(failures)
    printed: dict[str, int] = {}
    for line, _, m in sentences(os.path.join(HERE, "Assumptions.v")):
        where = f"coq/Assumptions.v:{line}"
        p = re.fullmatch(r"Print Assumptions VS\.(\w+)\.(" + IDENT + ")", m)
        if p:
            name = p.group(2)
            if name in printed:
                fail(f"{where}: {name} is printed twice")
            printed[name] = line
            if name in table and table[name][0] != p.group(1) + ".v":
                fail(f"{where}: {name} is printed from VS.{p.group(1)}, docs/proofs.md says {table[name][0]}")
        elif not re.fullmatch(r"From VS Require (Import )?[\w ]+", m):
            fail(f"{where}: only 'From VS Require ...' and 'Print Assumptions VS.File.name.' sentences "
                 f"may stand in coq/Assumptions.v: {m[:80]}")
    for name in sorted(set(printed) - set(table)):
        fail(f"{name} is in coq/Assumptions.v (line {printed[name]}) but not in docs/proofs.md's table")
    for name in sorted(set(table) - set(printed)):
        fail(f"{name} is in docs/proofs.md's table (line {table[name][1]}) but not printed by coq/Assumptions.v")
    if len(failures) == before:
        print(f"OK: docs/proofs.md's table and coq/Assumptions.v list the same {len(table)} theorems, "
              f"each declared by the file the table names")


# --- 0. the build's inputs: no flags, files or libraries from outside ------
# Variables coq_makefile's makefile, coqc or coqchk read from the
# environment (any COQ* name: COQPATH, COQFLAGS, COQBIN, ...), and
# OTHERFLAGS, which carries `-l <file>` into every coqc call.
REFUSED_ENV = re.compile(r"COQ\w*|OTHERFLAGS|CAMLFLAGS")
# Files coq_makefile's makefile includes, or coqc reads, from the tree.
REFUSED_FILE = re.compile(r"(CoqMakefile|Makefile\.coq|Makefile)\.(local|conf\.local)(\.late)?|\.?coqrc.*|.*\.local")


def check_environment() -> dict[str, str]:
    """Refuses Coq variables in the environment (and in MAKEFLAGS) and local
    makefile fragments under coq/; returns the environment the clean build
    runs in (PATH, HOME, locale and temporary folder only)."""
    print("== The build's inputs: environment and local makefile fragments")
    before = len(failures)
    for name in sorted(os.environ):
        if REFUSED_ENV.fullmatch(name):
            fail(f"the environment sets {name} (it would change what coqc or coqchk loads or checks): unset it")
    for word in os.environ.get("MAKEFLAGS", "").split():
        if "=" in word and REFUSED_ENV.fullmatch(word.split("=", 1)[0]):
            fail(f"MAKEFLAGS sets {word.split('=', 1)[0]} (a Coq build variable from the make command line): drop it")
    for d, dirs, fs in os.walk(HERE):
        dirs[:] = [x for x in dirs if x != "extract"]
        for f in fs:
            if REFUSED_FILE.fullmatch(f):
                fail(f"coq/{os.path.relpath(os.path.join(d, f), HERE)}: a local build file (coq_makefile's "
                     f"makefile or coqc would read it, adding flags or loaded files to the build): remove it")
    if len(failures) == before:
        print("OK: no Coq variable in the environment, no local makefile fragment under coq/")
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    return {k: os.environ[k] for k in keep if k in os.environ}


# --- 6. the core built from a clean tree ------------------------------------
def tracked_coq_files() -> list[str] | None:
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--", "coq"], capture_output=True,
                             check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError) as e:
        fail(f"cannot list the tracked files of coq/ (git ls-files: {e}); the check builds from them")
        return None
    return sorted(p for p in out.split("\0") if p)


def clean_build(env: dict[str, str], jobs: int, reuse: str | None, where: str) -> str | None:
    """coq/'s tracked files copied to ``where`` (nothing else: no .vo, no
    local makefile), built with coq_makefile's makefile there; returns the
    copy's coq/ folder. With ``reuse`` (a folder an earlier run kept with
    --keep-build; the test suite's plants use it), the .vo of each file
    whose source is byte-identical there are copied in first and make
    rebuilds the rest and everything that requires them."""
    print("== The core built from a clean tree (git ls-files coq/ in a temporary copy)")
    files = tracked_coq_files()
    if files is None:
        return None
    with open(os.path.join(HERE, "_CoqProject"), encoding="utf-8") as f:
        listed = re.findall(r"theories/\w+\.v", f.read())
    missing = [p for p in listed if "coq/" + p not in files]
    for p in missing:
        fail(f"coq/{p} is in coq/_CoqProject but not tracked by git: the clean build would not have it (git add it)")
    if missing:
        return None
    coq = os.path.join(where, "coq")
    for rel in files:
        dst = os.path.join(where, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(os.path.join(ROOT, rel), "rb") as a, open(dst, "wb") as b:
            b.write(a.read())
    reused = 0
    if reuse:
        old = os.path.join(reuse, "coq", "theories")
        # Sources in the past, reused outputs after them, so that anything make
        # rebuilds now is newer than every reused .vo (its dependents rebuild).
        now = time.time()
        for rel in files:
            os.utime(os.path.join(where, rel), (now - 100, now - 100))
        later = now - 50
        for p in listed:
            name = os.path.join(coq, p)
            prev = os.path.join(old, os.path.basename(p))
            outs = [prev[:-2] + ext for ext in (".vo", ".glob")]
            if p != EXTRACT and os.path.isfile(prev) and all(os.path.isfile(o) for o in outs) and _same(name, prev):
                for o in outs:
                    dst = os.path.join(coq, "theories", os.path.basename(o))
                    with open(o, "rb") as a, open(dst, "wb") as b:
                        b.write(a.read())
                    os.utime(dst, (later, later))
                reused += 1
    for cmd in (["coq_makefile", "-f", "_CoqProject", "-o", "CoqMakefile"],
                ["make", "-f", "CoqMakefile", f"-j{jobs}", "--no-print-directory"]):
        proc = subprocess.run(cmd, cwd=coq, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stdout[-3000:] + proc.stderr[-3000:])
            fail(f"the clean build failed ({' '.join(cmd)} in a copy of coq/'s tracked files)")
            return None
    print(f"OK: built {len(listed)} files from coq/'s {len(files)} tracked files"
          + (f" ({reused} unchanged .vo reused from {reuse})" if reuse else ""))
    return coq


def _same(a: str, b: str) -> bool:
    with open(a, "rb") as x, open(b, "rb") as y:
        return x.read() == y.read()


def compare_extraction(clean: str) -> None:
    """The extracted core the bindings are compiled from (coq/extract/, and
    build/ where `make core` copied it) is byte-identical to the clean
    build's: a stale .vo, a local makefile fragment or a flag that changed
    the in-tree extraction shows here."""
    print("== The shipped extraction against the clean build's")
    before = len(failures)
    for ext in ("ml", "mli"):
        fresh = os.path.join(clean, f"verishard_core.{ext}")
        if not os.path.isfile(fresh):
            fail(f"the clean build extracted no verishard_core.{ext} (coq/theories/Extract.v)")
            continue
        shipped = [os.path.join(ROOT, "coq", "extract", f"verishard_core.{ext}")]
        shipped += [p for p in [os.path.join(ROOT, "build", f"verishard_core.{ext}")] if os.path.isfile(p)]
        for p in shipped:
            rel = os.path.relpath(p, ROOT)
            if not os.path.isfile(p):
                fail(f"{rel} is missing (make extract)")
            elif not _same(p, fresh):
                fail(f"{rel} differs from what a clean build of coq/'s tracked files extracts (a stale .vo, "
                     f"a local makefile fragment or a flag changed the in-tree build): rebuild from a clean "
                     f"tree (make clean && make core) and look for the difference")
    if len(failures) == before:
        print("OK: coq/extract/verishard_core.ml (and build/'s copy) is the clean build's extraction")


def start_coqchk(clean: str, env: dict[str, str]):
    modules = sorted(f[:-3] for f in os.listdir(os.path.join(clean, "theories")) if f.endswith(".vo"))
    cmd = ["coqchk", "-silent", "-o", "-Q", "theories", "VS"]
    for m in modules:
        cmd += ["-norec", f"VS.{m}"]
    return subprocess.Popen(cmd, cwd=clean, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True), len(modules)


def finish_coqchk(proc, n: int) -> None:
    """coqchk re-checks every VS .vo with its own kernel (the standard
    library's, Debian's compiled one, is admitted: it prints its constants
    among the axioms, all under Coq.); its context summary must list no
    axiom outside Coq. and nothing under the other three headings."""
    out, _ = proc.communicate()
    print("== coqchk (Coq's independent checker) over every .vo of the clean build")
    before = len(failures)
    if proc.returncode != 0:
        print(out[-3000:])
        fail(f"coqchk refused the clean build (exit status {proc.returncode})")
        return
    summary = out[out.find("CONTEXT SUMMARY"):] if "CONTEXT SUMMARY" in out else ""
    if not summary:
        fail("coqchk printed no context summary")
        return
    sections: dict[str, list[str]] = {}
    head = None
    for line in summary.splitlines():
        h = re.match(r"\* (.*?):\s*(.*)$", line)
        if h:
            head = h.group(1)
            sections[head] = [] if h.group(2).strip() in ("", "<none>") else [h.group(2).strip()]
        elif head and line.strip():
            sections[head].append(line.strip())
    for head, items in sections.items():
        if head.startswith("Theory"):
            continue
        if head == "Axioms":
            items = [a for a in items if not a.startswith("Coq.")]
        if items:
            fail(f"coqchk: {head}: " + ", ".join(items[:8]))
    if "Axioms" not in sections:
        fail("coqchk's summary has no Axioms heading")
    if len(failures) == before:
        print(f"OK: coqchk checked the {n} .vo files of VS: no axiom, no type-in-type, no unsafe fixpoint, "
              f"no assumed positivity (the standard library admitted)")


# --- 4, 5, 7, 8. through coqc, on the clean build ---------------------------
class CoqSession:
    """Queries on the clean build's theories, ``header`` loaded first: each
    ``ask`` is one coqc run on a file this script writes (a persistent
    coqtop keeps every sentence's state and runs these queries about three
    times slower), each answer cut out by a per-run marker."""

    def __init__(self, theories: str, header: list[str]):
        self.theories, self.header, self.ok = theories, header, True

    def ask(self, cmds: list[tuple[str, str]]) -> dict[str, str] | None:
        nonce = secrets.token_hex(8)
        lines = list(self.header)
        for tag, c in cmds:
            lines.append(f'Goal True. idtac "@@{nonce} {tag}". Abort.')
            lines.append(c)
        lines.append(f'Goal True. idtac "@@{nonce} END". Abort.')
        with tempfile.TemporaryDirectory() as tmp:
            query = os.path.join(tmp, "TrustQuery.v")
            with open(query, "w", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
            proc = subprocess.run(["coqc", "-Q", self.theories, "VS", query], capture_output=True, text=True,
                                  cwd=tmp)
        if proc.returncode != 0:
            print(proc.stdout[-3000:] + proc.stderr[-3000:])
            fail("coqc could not answer the check's queries on the clean build")
            return None
        answers: dict[str, str] = {}
        tag, body = None, []
        for line in proc.stdout.splitlines():
            if line.startswith(f"@@{nonce} "):
                if tag:
                    answers[tag] = "\n".join(body).strip()
                tag, body = line.split(" ", 1)[1], []
            elif tag:
                body.append(line.rstrip())
        if tag != "END":
            fail("the output of coqc did not reach the end marker")
            return None
        return answers

    def close(self) -> None:
        pass


def requires(module: str, theories: str, cache: dict = {}) -> set[str]:
    """VS modules the file requires, transitively (from its Require sentences)."""
    if module not in cache:
        cache[module] = set()
        deps = set()
        path = os.path.join(theories, module + ".v")
        if os.path.isfile(path):
            for _, _, m in sentences(path):
                r = re.match(r"From VS Require (?:Import |Export )?([\w ]+)$", strip_prefixes(m))
                if r:
                    deps.update(r.group(1).split())
        out = set(deps)
        for d in deps:
            out |= requires(d, theories)
        cache[module] = out
    return cache[module]


def file_digest(path: str, cache: dict = {}) -> str:
    if path not in cache:
        try:
            with open(path, "rb") as f:
                cache[path] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            cache[path] = "missing"
    return cache[path]


def cache_secret() -> bytes | None:
    """The key that signs cached answers, kept outside the repository
    (~/.cache/verishard/trust-cache.key, made on first use, mode 0600): an
    entry written into coq/.assumptions-cache by hand, or by a patch, does
    not carry a valid signature and is asked again."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "verishard", "trust-cache.key")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.isfile(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
        with open(path, "rb") as f:
            key = f.read()
        return key if len(key) >= 32 else None
    except OSError:
        return None


def sign(secret: bytes, key: str) -> str:
    return hmac.new(secret, (key + "\n" + CLOSED).encode(), hashlib.sha256).hexdigest()


TOKEN_RE = re.compile(r"(?<![\w'.])([A-Za-z][\w']*(?:\.[A-Za-z_][\w']*)*)")
KEYWORDS = set("fun match with end forall fix cofix struct let in if then else return as for exists "
               "Type Prop Set SProp Inductive CoInductive Variant Record Structure Arguments Fixpoint "
               "Definition where".split())   # where: a printed notation or mutual block, never a term
LOCATED = re.compile(r"(Constant|Inductive|Constructor)\s+(\S+)")


def tokens(text: str) -> set[str]:
    return {t for t in TOKEN_RE.findall(text) if t not in KEYWORDS}


def closure_definitions(coq: CoqSession, stmt_all: dict[str, str], reuse: dict[str, tuple[str, str]],
                        text_key):
    """The definitions (constants, inductives; constructors through their
    type) that the statements mention, followed transitively through every
    constant not under Coq., each printed with `Set Printing All`: returns
    (texts: qualified name -> printed text, refs: item -> qualified names it
    mentions, resolved: printed token -> the qualified names it may denote, rounds)."""
    resolved: dict[str, list[str]] = {}
    texts: dict[str, str] = {}
    item_tokens: dict[str, set[str]] = {q: tokens(t) for q, t in stmt_all.items()}
    frontier = set().union(*item_tokens.values()) if item_tokens else set()
    seen: set[str] = set()
    rounds = 0
    while frontier - seen:
        rounds += 1
        batch = sorted(frontier - seen)
        seen |= set(batch)
        located = coq.ask([(t, f"Locate Term {t}.") for t in batch])
        if located is None:
            return None
        wanted = []
        for t in batch:
            # Every object of that name (a constructor in a pattern prints
            # unqualified): more definitions pinned than used, never fewer.
            objs = [(m.group(1), m.group(2)) for m in LOCATED.finditer(located.get(t) or "")]
            resolved[t] = [q for _, q in objs if not q.startswith("Coq.")]
            for kind, q in objs:
                if not q.startswith("Coq.") and q not in texts:
                    texts[q] = ""
                    wanted.append((kind, q))
        # A text printed by an earlier run is reused while its key (the .vo of
        # its file, the modules loaded, coqc, this script) is the same.
        fresh = [(kind, q) for kind, q in wanted if reuse.get(q, ("", ""))[0] != text_key(q)]
        printed = coq.ask([("ALL", "Set Printing All.")]
                          + [(q, (f"Check @{q}." if kind == "Constructor" else f"Print {q}.")) for kind, q in fresh]
                          + [("NOTALL", "Unset Printing All.")]) if fresh else {}
        if printed is None:
            return None
        frontier = set()
        for _, q in wanted:
            texts[q] = printed[q] if q in printed else reuse[q][1]
            item_tokens[q] = tokens(texts[q])
            frontier |= item_tokens[q]
    refs = {q: {r for t in ts for r in resolved.get(t, ())} for q, ts in item_tokens.items()}
    return texts, refs, resolved, rounds


def reach(start: str, refs: dict[str, set[str]]) -> set[str]:
    out, todo = set(), [start]
    while todo:
        for r in refs.get(todo.pop(), ()):
            if r not in out:
                out.add(r)
                todo.append(r)
    out.discard(start)
    return out


def read_statements(path: str | None = None) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """coq/statements.txt: (statement text, meaning hash) per theorem and the
    hash of each definition."""
    pins, meanings, defs = {}, {}, {}
    path = path or os.path.join(HERE, "statements.txt")
    if not os.path.isfile(path):
        return pins, meanings, defs
    name, body, in_defs = None, [], False
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in lines + ["== "]:
        if line.startswith("== ") or line.startswith("=== "):
            if name:
                while body and not body[-1].strip():
                    body.pop()
                if body and body[-1].startswith("meaning "):
                    meanings[name] = body.pop()[len("meaning "):].strip()
                pins[name] = "\n".join(body).strip()
            name, body = None, []
            in_defs = line.startswith("=== definitions")
            if line.startswith("== ") and line[3:].strip():
                name = line[3:].strip()
        elif in_defs:
            w = line.split()
            if len(w) == 2:
                defs[w[0]] = w[1]
        elif name:
            body.append(line)
    return pins, meanings, defs


def render_statements(stated: dict[str, str], meaning: dict[str, str], def_hash: dict[str, str]) -> str:
    out = ["# The theorems of docs/proofs.md: each statement as `Check VS.File.name` prints it, and its",
           "# meaning: the sha256 of the statement printed with `Set Printing All` and of every definition",
           "# it reaches (below, each by the sha256 of `Print` of it with `Set Printing All`), followed",
           "# through every constant not under Coq. (coq/check_assumptions.sh compares; tests/",
           "# statements.pinned is a copy the test suite compares with this file). Regenerate",
           "# deliberately, after changing a statement or a definition it uses:",
           "# bash coq/check_assumptions.sh --pin (it prints the difference), then copy this file",
           "# to tests/statements.pinned; review both diffs."]
    for q in sorted(stated):
        out += ["", f"== {q}", stated[q], f"meaning {meaning[q]}"]
    out += ["", "=== definitions (qualified name, sha256 of Print with Set Printing All)"]
    out += [f"{q} {h}" for q, h in sorted(def_hash.items())]
    return "\n".join(out) + "\n"


def extracted_names() -> list[str]:
    """The names of coq/theories/Extract.v's Extraction command."""
    names = []
    for line, code, m in sentences(os.path.join(HERE, EXTRACT)):
        if re.match(r'Extraction\s+"', strip_prefixes(m)):
            names += code.split()[2:]
    return names


def glue_entry_points(clean: str) -> list[str]:
    """The functions of the extracted core that bindings/glue.ml calls: its
    identifiers that the extracted interface declares."""
    mli = os.path.join(clean, "verishard_core.mli")
    if not os.path.isfile(mli) or not os.path.isfile(GLUE):
        fail("cannot read bindings/glue.ml or the clean build's verishard_core.mli")
        return []
    with open(mli, encoding="utf-8") as f:
        vals = set(re.findall(r"^val\s+([a-z_][\w']*)", f.read(), re.M))
    with open(GLUE, encoding="utf-8") as f:
        glue = re.sub(r'"(?:[^"\\]|\\.)*"', '""', re.sub(r"\(\*.*?\*\)", " ", f.read(), flags=re.S))
    # Names the glue binds itself (functions, locals) are its own, not the core's.
    own = set(re.findall(r"\b(?:let|and)\s+(?:rec\s+)?([a-z_][\w']*)", glue))
    return sorted(set(re.findall(r"(?<![\w'.])([a-z_][\w']*)", glue)) & vals - own)


# Functions the glue calls that no statement of the table reaches: each is
# still extracted by qualified name and the only object of its short name;
# docs/proofs.md says what is not proved of them.
# Glue entries no statement of the table needs to reach (none: the runtime
# tables block_starts, movement and umovement are stated by Tablesproof.v).
UNSTATED_ENTRIES: dict[str, str] = {}


def run_coq(table: dict[str, tuple[str, int]], clean: str, use_cache: bool, pin: bool) -> None:
    print("== Print Assumptions, Check and the definitions of every theorem of the table (clean build)")
    before = len(failures)
    theories = os.path.join(clean, "theories")
    version = subprocess.run(["coqc", "--version"], capture_output=True, text=True).stdout.strip()
    cache_path = os.path.join(HERE, ".assumptions-cache")
    secret = cache_secret() if use_cache else None
    cache: dict = {}
    if secret and os.path.isfile(cache_path):
        try:
            with open(cache_path, encoding="utf-8") as f:
                cache = json.load(f)
            if not isinstance(cache, dict):
                cache = {}
        except (OSError, ValueError):
            cache = {}
    signed = cache.get("closed", {}) if isinstance(cache.get("closed"), dict) else {}
    script = file_digest(os.path.abspath(__file__))
    qual = {name: f"VS.{vfile[:-2]}.{name}" for name, (vfile, _) in table.items()}
    keys = {}
    for name, (vfile, _) in table.items():
        mod = vfile[:-2]
        closure = sorted({mod} | requires(mod, theories))
        keys[name] = hashlib.sha256("\n".join([version, script, qual[name]] + [
            f"{m} {file_digest(os.path.join(theories, m + '.vo'))}" for m in closure]).encode()).hexdigest()
    modules = sorted(f[:-3] for f in os.listdir(theories) if f.endswith(".vo"))
    header = [f"From VS Require {' '.join(modules)}."]
    entries = glue_entry_points(clean)
    cmds, queried = [], 0
    for name in sorted(table):
        cmds.append((f"CHECK {name}", f"Check {qual[name]}."))
        k = keys[name]
        if not (secret and isinstance(signed.get(k), str) and hmac.compare_digest(signed[k], sign(secret, k))):
            cmds.append((f"ASSUME {name}", f"Print Assumptions {qual[name]}."))
            queried += 1
    cmds += [(f"LOCATE {e}", f"Locate {e}.") for e in entries]
    cmds.append(("ALL", "Set Printing All."))
    cmds += [(f"STMT {name}", f"Check {qual[name]}.") for name in sorted(table)]
    cmds.append(("NOTALL", "Unset Printing All."))
    def queries() -> None:
        answers = coq.ask(cmds)
        if answers is None:
            return
        fresh = {keys[n]: signed[keys[n]] for n in table if keys[n] in signed and hmac.compare_digest(
            str(signed[keys[n]]), sign(secret, keys[n]))} if secret else {}  # valid, current entries only
        for name in sorted(table):
            a = answers.get(f"ASSUME {name}")
            if a is None:
                continue
            if a == CLOSED:
                if secret:
                    fresh[keys[name]] = sign(secret, keys[name])
            else:
                fail(f"{qual[name]} is not closed under the global context; Print Assumptions says: "
                     + " | ".join(a.splitlines()[:8]))
        if secret:
            try:
                with open(cache_path, "w", encoding="utf-8") as f:
                    json.dump({"closed": fresh}, f)
            except OSError:
                pass

        # The definitions the statements reach, printed fully.
        stmt_all = {qual[n]: answers.get(f"STMT {n}", "") for n in table}
        # The texts of the last run (coq/.assumptions-cache.defs): reused when
        # signed with this machine's key, and for --pin's difference.
        store = os.path.join(HERE, ".assumptions-cache.defs")
        stored: dict = {}
        if os.path.isfile(store):
            try:
                with gzip.open(store, "rt", encoding="utf-8") as f:
                    stored = json.load(f)
            except (OSError, ValueError, EOFError):
                stored = {}
        old_texts = stored.get("texts", {}) if isinstance(stored, dict) else {}
        old_keys = stored.get("keys", {}) if isinstance(stored, dict) else {}
        blob = json.dumps([old_keys, old_texts], sort_keys=True)
        trusted = bool(secret and isinstance(stored, dict) and isinstance(stored.get("mac"), str)
                       and hmac.compare_digest(stored["mac"], sign(secret, hashlib.sha256(blob.encode()).hexdigest())))
        reuse = {q: (old_keys[q], old_texts[q]) for q in old_keys if q in old_texts} if trusted else {}
        loaded = " ".join(modules)

        def text_key(q: str) -> str:
            mod = q.split(".")[1]
            return hashlib.sha256("\n".join([version, script, q, loaded,
                                             file_digest(os.path.join(theories, mod + ".vo"))]).encode()).hexdigest()
        got = closure_definitions(coq, stmt_all, reuse, text_key)
        if got is None:
            return
        texts, refs, resolved, rounds = got
        def_hash = {q: hashlib.sha256(t.encode()).hexdigest() for q, t in texts.items()}
        meaning = {}
        for q in stmt_all:
            used = sorted(reach(q, refs))
            meaning[q] = hashlib.sha256("\n".join([stmt_all[q]] + [f"{d} {def_hash.get(d, '?')}" for d in used])
                                        .encode()).hexdigest()
        reached = set(texts)

        # No VS name in the place of a standard-library one.
        # VS.F.rest is refused where F.rest (or rest, inside a module) also names
        # a standard-library object: VS.PeanoNat.Nat.min, VS.X.Nat.min.
        suffixes = sorted({q.split(".", 1)[1] for q in reached}
                          | {q.split(".", 2)[2] for q in reached if q.count(".") >= 3})
        if suffixes:
            located = coq.ask([(s, f"Locate Term {s}.") for s in suffixes]) or {}
            for s in suffixes:
                std_same = [m.group(2) for m in LOCATED.finditer(located.get(s, "")) if m.group(2).startswith("Coq.")]
                if std_same:
                    ours = sorted(q for q in reached if q.endswith("." + s))
                    fail(f"{', '.join(ours)} shadows the standard library's {std_same[0]} "
                         f"(a VS module of a standard-library name): rename it")

        # Each function the glue calls: extracted by its qualified name, the only
        # object of its short name, and a constant the table's statements reach.
        extracted = extracted_names()
        for name in extracted:
            if not re.fullmatch(r"VS\.\w+\.[\w']+", name):
                fail(f"coq/{EXTRACT}: the Extraction command names {name}: name each function as VS.File.name "
                     f"(a short name resolves to whatever file was imported last)")
        by_short = {n.rsplit(".", 1)[-1]: n for n in extracted}
        for e in entries:
            objs = [m.group(2) for m in LOCATED.finditer(answers.get(f"LOCATE {e}", ""))]
            q = by_short.get(e)
            if q is None and objs and all(o.startswith("Coq.") for o in objs):
                continue  # a standard-library function (fst, snd) extracted along
            if q is None:
                fail(f"bindings/glue.ml calls {e} ({', '.join(objs) or 'nothing of that name'}), which "
                     f"coq/{EXTRACT}'s Extraction command does not name")
            elif objs != [q]:
                fail(f"bindings/glue.ml calls {e}: {', '.join(objs) or 'nothing'} bear that short name, "
                     f"not {q} alone (the extracted file could give the name to another constant): rename the others")
            elif q not in reached and e in UNSTATED_ENTRIES:
                print(f"  note: bindings/glue.ml calls {e} ({q}), which no theorem of the table states "
                      f"({UNSTATED_ENTRIES[e]})")
            elif q not in reached:
                fail(f"bindings/glue.ml calls {e} ({q}), which no statement of docs/proofs.md's table reaches")
        if entries and not any(f.startswith("bindings/glue.ml") for f in failures[before:]):
            print(f"OK: the {len(entries)} functions bindings/glue.ml calls are each extracted by qualified name, "
                  f"the only object of its short name, and reached by the table's statements")

        # Statements and definitions against coq/statements.txt.
        stated = {qual[n]: answers.get(f"CHECK {n}", "") for n in table}
        path = os.path.join(HERE, "statements.txt")
        pins, meanings, defs = read_statements(path)
        new_text = render_statements(stated, meaning, def_hash)
        if pin:
            old = open(path, encoding="utf-8").read() if os.path.isfile(path) else ""
            diff = list(difflib.unified_diff(old.splitlines(), new_text.splitlines(), "coq/statements.txt (pinned)",
                                             "coq/statements.txt (now)", lineterm="", n=2))
            print("\n".join(diff) if diff else "(coq/statements.txt unchanged)")
            for q in sorted(set(def_hash) ^ set(defs) | {q for q in def_hash if defs.get(q) not in (None, def_hash[q])}):
                was, now = old_texts.get(q, "" if q not in defs else "(text not kept here)"), texts.get(q, "")
                print("\n".join(difflib.unified_diff(was.splitlines(), now.splitlines(), f"{q} (pinned)", f"{q} (now)",
                                                     lineterm="", n=2)))
            with open(path, "w", encoding="utf-8") as f:
                f.write(new_text)
            print(f"pinned {len(stated)} statements and {len(def_hash)} definitions in coq/statements.txt; "
                  f"copy it to tests/statements.pinned")
        else:
            for q in sorted(stated):
                if q not in pins:
                    fail(f"{q}: its statement is not pinned in coq/statements.txt "
                         f"(after review: bash coq/check_assumptions.sh --pin)")
                elif pins[q] != stated[q]:
                    fail(f"{q}: its statement differs from the one pinned in coq/statements.txt; Check says: "
                         + " ".join(stated[q].split())[:300])
                elif meanings.get(q) != meaning[q]:
                    changed = sorted(d for d in reach(q, refs) if defs.get(d) != def_hash.get(d))
                    fail(f"{q}: its meaning differs from the one pinned in coq/statements.txt: "
                         + (f"definitions changed or new: {', '.join(changed[:6])}" if changed
                            else "its statement printed in full (Set Printing All) changed"))
            for q in sorted(set(pins) - set(stated)):
                fail(f"{q} is pinned in coq/statements.txt but not in docs/proofs.md's table")
            for d in sorted(d for d in texts if defs.get(d) != def_hash[d]):
                users = sorted(q.split(".")[-1] for q in stated if d in reach(q, refs))
                fail(f"{d}: its definition is not the one pinned in coq/statements.txt (used by {', '.join(users[:5])}"
                     f"{'...' if len(users) > 5 else ''}); after review: bash coq/check_assumptions.sh --pin")
        if secret:
            new_keys = {q: text_key(q) for q in texts}
            blob = json.dumps([new_keys, texts], sort_keys=True)
            try:
                with gzip.open(store, "wt", encoding="utf-8") as f:
                    json.dump({"keys": new_keys, "texts": texts,
                               "mac": sign(secret, hashlib.sha256(blob.encode()).hexdigest())}, f)
            except OSError:
                pass
        if len(failures) == before:
            print(f"OK: all {len(table)} theorems are closed under the global context "
                  f"({queried} asked now, {len(table) - queried} signed in the cache), each statement and the "
                  f"{len(texts)} definitions it reaches ({rounds} rounds) the pinned ones")

    coq = CoqSession(theories, header)
    try:
        if coq.ok:
            queries()
    finally:
        coq.close()
    if not coq.ok:
        fail("coqc could not load the theorems of the table from the clean build")


def pin_realizers(hashes: dict[str, str]) -> None:
    path = os.path.join(HERE, "realizers.allow")
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f.read().splitlines():
            words = line.split("#", 1)[0].split()
            if words and words[0] in hashes:
                line = f"{words[0]} {hashes[words[0]]}"
            out.append(line)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    print(f"pinned the bodies of {len(hashes)} realizers in coq/realizers.allow")


def option(argv: list[str], name: str) -> str | None:
    if name in argv:
        i = argv.index(name)
        if i + 1 < len(argv):
            return argv[i + 1]
    return None


def main(argv: list[str]) -> int:
    pin, use_cache = "--pin" in argv, "--no-cache" not in argv
    jobs = int(option(argv, "-j") or 2)
    reuse, keep = option(argv, "--reuse-build"), option(argv, "--keep-build")
    before = len(failures)
    env = check_environment()
    tainted = len(failures) > before
    scan_holes()
    hashes = check_extraction(read_allow())
    table = read_table()
    check_assumptions_file(table)
    if tainted:
        print("FAIL: not building: the build's inputs are not clean (above)")
    with tempfile.TemporaryDirectory() as tmp:
        where = keep or tmp
        if keep:
            shutil.rmtree(keep, ignore_errors=True)
            os.makedirs(keep)
        clean = None if tainted else clean_build(env, jobs, reuse, where)
        if clean is not None:
            compare_extraction(clean)
            chk = None if "--skip-coqchk" in argv else start_coqchk(clean, env)
            run_coq(table, clean, use_cache, pin)
            if chk is not None:
                finish_coqchk(*chk)
    if pin:
        pin_realizers(hashes)
    if failures:
        print(f"FAIL: {len(failures)} problem(s) in the trust base (coq/check_assumptions.sh)")
        return 1
    print("OK: the trust statement holds")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
