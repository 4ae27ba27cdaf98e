"""The trust statement, checked (run by coq/check_assumptions.sh, `make proofs`).

Fails (exit 1, one line "FAIL: ..." per problem, every problem reported) on:

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
4. a theorem of the table (queried by its qualified name VS.File.name, one
   `Print Assumptions` each, in a file this script writes, each answer cut
   out by a per-run marker) whose answer is not exactly
   "Closed under the global context";
5. a theorem whose `Check` output differs from the one pinned in
   coq/statements.txt.

`--pin` rewrites coq/statements.txt and the hashes in coq/realizers.allow
from the current sources (names are still added to the allowlist by hand):
run it deliberately after changing a statement or a realizer, and review the
diff. `--no-cache` recomputes every Print Assumptions answer; otherwise a
closed answer is reused while the .vo files of its file and of everything
that file requires (by its Require sentences) are byte-identical
(coq/.assumptions-cache, not in git).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))          # coq/
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


# --- 4 and 5. Print Assumptions and Check, through coqc --------------------
def requires(module: str, cache: dict = {}) -> set[str]:
    """VS modules the file requires, transitively (from its Require sentences)."""
    if module not in cache:
        cache[module] = set()
        deps = set()
        path = os.path.join(HERE, "theories", module + ".v")
        if os.path.isfile(path):
            for _, _, m in sentences(path):
                r = re.match(r"From VS Require (?:Import |Export )?([\w ]+)$", strip_prefixes(m))
                if r:
                    deps.update(r.group(1).split())
        out = set(deps)
        for d in deps:
            out |= requires(d)
        cache[module] = out
    return cache[module]


def vo_digest(module: str, cache: dict = {}) -> str:
    if module not in cache:
        try:
            with open(os.path.join(HERE, "theories", module + ".vo"), "rb") as f:
                cache[module] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            cache[module] = "missing"
    return cache[module]


def read_statements() -> dict[str, str]:
    pins, name, body = {}, None, []
    path = os.path.join(HERE, "statements.txt")
    if not os.path.isfile(path):
        return pins
    with open(path, encoding="utf-8") as f:
        for line in f.read().splitlines():
            if line.startswith("== "):
                if name:
                    pins[name] = "\n".join(body).strip()
                name, body = line[3:].strip(), []
            elif name:
                body.append(line)
    if name:
        pins[name] = "\n".join(body).strip()
    return pins


def run_coq(table: dict[str, tuple[str, int]], use_cache: bool, pin: bool) -> None:
    print("== Print Assumptions and Check on every theorem of the table (VS.File.name)")
    before = len(failures)
    version = subprocess.run(["coqc", "--version"], capture_output=True, text=True).stdout.strip()
    cache_path = os.path.join(HERE, ".assumptions-cache")
    cache: dict[str, str] = {}
    if use_cache and os.path.isfile(cache_path):
        try:
            with open(cache_path, encoding="utf-8") as f:
                cache = json.load(f)
        except (OSError, ValueError):
            cache = {}
    qual = {name: f"VS.{vfile[:-2]}.{name}" for name, (vfile, _) in table.items()}
    keys = {}
    for name, (vfile, _) in table.items():
        mod = vfile[:-2]
        closure = sorted({mod} | requires(mod))
        keys[name] = hashlib.sha256("\n".join([version, qual[name]] + [
            f"{m} {vo_digest(m)}" for m in closure]).encode()).hexdigest()
    nonce = secrets.token_hex(8)
    modules = sorted({vfile[:-2] for vfile, _ in table.values()})
    lines = [f"From VS Require {' '.join(modules)}."] if modules else []

    def mark(tag: str) -> None:
        lines.append(f'Goal True. idtac "@@{nonce} {tag}". Abort.')

    queried = 0
    for name in sorted(table):
        mark(f"CHECK {name}")
        lines.append(f"Check {qual[name]}.")
        if cache.get(keys[name]) != CLOSED:
            mark(f"ASSUME {name}")
            lines.append(f"Print Assumptions {qual[name]}.")
            queried += 1
    mark("END")
    with tempfile.TemporaryDirectory() as tmp:
        query = os.path.join(tmp, "TrustQuery.v")
        with open(query, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        proc = subprocess.run(["coqc", "-Q", os.path.join(HERE, "theories"), "VS", query],
                              capture_output=True, text=True, cwd=tmp)
    if proc.returncode != 0:
        print(proc.stdout[-3000:] + proc.stderr[-3000:])
        fail("coqc could not load the theorems of the table (are the theories built? make coq)")
        return
    answers: dict[tuple[str, str], str] = {}
    tag, body = None, []
    for line in proc.stdout.splitlines():
        if line.startswith(f"@@{nonce} "):
            if tag:
                answers[tag] = "\n".join(body).strip()
            parts = line.split()
            tag, body = (parts[1], parts[2] if len(parts) > 2 else ""), []
        elif tag:
            body.append(line.rstrip())
    if tag != ("END", ""):
        fail("the output of coqc did not reach the end marker")
    for name in sorted(table):
        a = answers.get(("ASSUME", name))
        if a is None:
            continue
        if a == CLOSED:
            cache[keys[name]] = CLOSED
        else:
            fail(f"{qual[name]} is not closed under the global context; Print Assumptions says: "
                 + " | ".join(a.splitlines()[:8]))
    pins = read_statements()
    stated = {qual[n]: answers.get(("CHECK", n), "") for n in table}
    if pin:
        with open(os.path.join(HERE, "statements.txt"), "w", encoding="utf-8") as f:
            f.write("# The statements of the theorems of docs/proofs.md, as `Check VS.File.name` prints\n"
                    "# them (coq/check_assumptions.sh compares). Regenerate deliberately, after\n"
                    "# changing a statement: bash coq/check_assumptions.sh --pin; review the diff.\n")
            for q in sorted(stated):
                f.write(f"\n== {q}\n{stated[q]}\n")
        print(f"pinned {len(stated)} statements in coq/statements.txt")
    else:
        for q in sorted(stated):
            if q not in pins:
                fail(f"{q}: its statement is not pinned in coq/statements.txt "
                     f"(after review: bash coq/check_assumptions.sh --pin)")
            elif pins[q] != stated[q]:
                fail(f"{q}: its statement differs from the one pinned in coq/statements.txt; Check says: "
                     + " ".join(stated[q].split())[:300])
        for q in sorted(set(pins) - set(stated)):
            fail(f"{q} is pinned in coq/statements.txt but not in docs/proofs.md's table")
    if use_cache:
        try:
            with open(cache_path, "w", encoding="utf-8") as f:
                json.dump(cache, f)
        except OSError:
            pass
    if len(failures) == before:
        print(f"OK: all {len(table)} theorems are closed under the global context "
              f"({queried} asked now, {len(table) - queried} unchanged since a closed answer), "
              f"each statement the pinned one")


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


def main(argv: list[str]) -> int:
    pin, use_cache = "--pin" in argv, "--no-cache" not in argv
    scan_holes()
    hashes = check_extraction(read_allow())
    table = read_table()
    check_assumptions_file(table)
    run_coq(table, use_cache, pin)
    if pin:
        pin_realizers(hashes)
    if failures:
        print(f"FAIL: {len(failures)} problem(s) in the trust base (coq/check_assumptions.sh)")
        return 1
    print("OK: the trust statement holds")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
