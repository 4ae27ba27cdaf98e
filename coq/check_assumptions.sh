#!/usr/bin/env bash
# Trust statement, checked. Fails (non-zero exit, a line starting "FAIL:") on
# any of:
#   1. proof holes or assumptions (Admitted, admit, Axiom, Parameter, ...) in
#      coq/theories;
#   2. an extraction directive (Extract Constant / Inlined Constant /
#      Inductive, Extraction Inline / NoInline / Implicit, ...) anywhere under
#      coq/ other than coq/theories/Extract.v, a directive or an imported
#      Coq realizer library (ExtrOcaml...) whose name is not in
#      coq/realizers.allow, or an extraction command the script cannot
#      classify; every directive is printed;
#   3. README.md's theorem table ("## What is proved") and coq/Assumptions.v
#      listing different theorems, or a table row naming a theorem its file
#      (coq/theories/<File>.v) does not declare;
#   4. an exported theorem that Print Assumptions does not report as closed
#      under the global context.
set -euo pipefail
cd "$(dirname "$0")"

holes=$(grep -rnwE 'Admitted|admit|Axiom|Axioms|Parameter|Parameters|Conjecture|Hypothesis|Variable|Variables' theories --include='*.v' || true)
if [ -n "$holes" ]; then
  echo "proof holes or assumptions under coq/:"; echo "$holes"
  echo "FAIL: proof holes or assumptions under coq/theories"; exit 1
fi

[ -f realizers.allow ] || { echo "FAIL: coq/realizers.allow (the realizer allowlist) is missing"; exit 1; }
[ -f ../README.md ] || { echo "FAIL: README.md (next to coq/) is missing"; exit 1; }

# Checks 2 and 3: static, on the sources (python3 is the interpreter `make` uses).
if ! python3 - <<'PY'
import os, re, sys

ROOT = "."                      # coq/
EXTRACT = "theories/Extract.v"  # the one file allowed to hold extraction directives
failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}")


# --- a small Coq lexer: comments (nested, may hold strings) and strings ----
def mask(text):
    """``text`` with comments blanked and string contents replaced by '_'
    (same length, newlines kept), so that positions match the original."""
    out, i, n, depth = list(text), 0, len(text), 0
    while i < n:
        if depth == 0 and text[i] == '"':
            j = i + 1
            while j < n:
                if text[j] == '"':
                    if j + 1 < n and text[j + 1] == '"':
                        j += 2
                        continue
                    break
                j += 1
            for k in range(i + 1, min(j, n)):
                if out[k] != "\n":
                    out[k] = "_"
            i = j + 1
            continue
        if text.startswith("(*", i):
            depth += 1
            out[i] = out[i + 1] = " "
            i += 2
            continue
        if depth and text.startswith("*)", i):
            depth -= 1
            out[i] = out[i + 1] = " "
            i += 2
            continue
        if depth:
            if text[i] == '"':  # a string inside a comment: skip it whole
                j = text.find('"', i + 1)
                j = n - 1 if j < 0 else j
                for k in range(i, j + 1):
                    if out[k] != "\n":
                        out[k] = " "
                i = j + 1
                continue
            if out[i] != "\n":
                out[i] = " "
        i += 1
    return "".join(out)


def sentences(path):
    """(line, text, masked) of every sentence of a .v file: up to a '.' that
    is followed by blank or end of file and is not part of '..'."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = mask(text)
    out, start, n = [], 0, len(m)
    for i, c in enumerate(m):
        if c != "." or (i + 1 < n and not m[i + 1].isspace()):
            continue
        if (i > 0 and m[i - 1] == ".") or (i + 1 < n and m[i + 1] == "."):
            continue
        seg_m, seg_t = m[start:i], text[start:i]
        # bullets and braces are sentences of their own, without a period
        lead = re.match(r"[\s\-+*{}]*", seg_m).end()
        if seg_m[lead:].strip():
            line = text.count("\n", 0, start + lead) + 1
            out.append((line, " ".join(seg_t[lead:].split()), " ".join(seg_m[lead:].split())))
        start = i + 1
    return out


PREFIX = re.compile(r'(?:#\[[^\]]*\]\s*|(?:Time|Fail|Succeed|Local|Global|Export)\s+|Redirect\s+"_*"\s+|Timeout\s+\d+\s+)')


def strip_prefixes(s):
    while True:
        m = PREFIX.match(s)
        if not m or not m.end():
            return s
        s = s[m.end():]


WORD = re.compile(r"(?<![\w.'])(Extract|Extraction)(?![\w'])")
QUALID = r"[A-Za-z_][\w']*(?:\.[A-Za-z_][\w']*)*"


def classify(t, m):
    """(kind, names) of an extraction sentence (original text t, masked m),
    None if it is not one, ("unknown", []) if it mentions extraction in a
    form this script does not know."""
    t, m = strip_prefixes(t), strip_prefixes(m)
    w = m.split()
    tw = t.split()
    if not w:
        return None
    head = " ".join(w[:3])
    if re.match(r"(From\s+\S+\s+)?Require\b|Import\b|Export\b|Load\b", m):
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


def realizer_imports(m):
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


# --- allowlist ----------------------------------------------------------
allow = set()
with open("realizers.allow", encoding="utf-8") as f:
    for k, line in enumerate(f, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if not re.fullmatch(QUALID, line):
            fail(f"coq/realizers.allow:{k}: {line!r} is not a qualified name")
        allow.add(line)

# --- 2. extraction directives -------------------------------------------
print("== Extraction directives in coq/**/*.v (allowlist: coq/realizers.allow)")
vfiles = sorted(os.path.relpath(os.path.join(d, f), ROOT)
                for d, _, fs in os.walk(ROOT) for f in fs if f.endswith(".v"))
n_real, n_lib, used = 0, 0, set()
for path in vfiles:
    for line, t, m in sentences(path):
        where = f"coq/{path}:{line}"
        for lib in realizer_imports(strip_prefixes(m)):
            n_lib += 1
            used.add(lib)
            print(f"  {where}  Require {lib}  [realizer library]")
            if path != EXTRACT:
                fail(f"{where}: realizer library {lib} imported outside coq/{EXTRACT}")
            if lib not in allow:
                fail(f"{where}: realizer library {lib} is not in coq/realizers.allow")
        c = classify(t, m)
        if c is None:
            continue
        kind, names = c
        print(f"  {where}  {t}" + ("" if kind == "realizer" else f"  [{kind}]"))
        if path != EXTRACT:
            fail(f"{where}: extraction directive outside coq/{EXTRACT}: {t[:80]}")
        if kind == "unknown":
            fail(f"{where}: unrecognised extraction directive: {t[:80]}")
        if kind == "realizer":
            n_real += 1
            if not names:
                fail(f"{where}: directive names nothing: {t[:80]}")
            for name in names:
                used.add(name)
                if name not in allow:
                    fail(f"{where}: {name} is realized but not in coq/realizers.allow")
for name in sorted(allow - used):
    print(f"  note: {name} is in coq/realizers.allow but nothing realizes it")
if not failures:
    print(f"OK: {n_real} realizer directives and {n_lib} realizer library imports, "
          f"all in coq/{EXTRACT}, all named in coq/realizers.allow")

# --- 3. README's theorem table against Assumptions.v --------------------
print("== README.md theorem table against coq/Assumptions.v")
before = len(failures)
THEOREM = re.compile(r"(?:Theorem|Lemma|Corollary|Proposition|Fact|Remark)\s+([A-Za-z_][\w']*)")
declared_cache = {}


def declared(vfile):
    if vfile not in declared_cache:
        names = set()
        for _, _, m in sentences(os.path.join("theories", vfile)):
            d = THEOREM.match(strip_prefixes(m))
            if d:
                names.add(d.group(1))
        declared_cache[vfile] = names
    return declared_cache[vfile]


with open("../README.md", encoding="utf-8") as f:
    readme = f.read().splitlines()
try:
    start = readme.index("## What is proved")
except ValueError:
    start = None
    fail("README.md has no section '## What is proved'")
table = {}      # name -> (file, README line)
mentioned = {}  # name -> (file, row name): theorems a statement names in backquotes
if start is not None:
    rows = []
    for k in range(start + 1, len(readme)):
        if readme[k].startswith("## "):
            break
        if readme[k].lstrip().startswith("|"):
            rows.append((k + 1, readme[k].strip()))
    if not rows:
        fail("README.md '## What is proved' has no theorem table")
    for k, row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        if row.startswith("|---") or re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", row):
            continue
        if [c.lower() for c in cells[:2]] == ["theorem", "file"]:
            continue
        r = re.fullmatch(r"\|\s*`([A-Za-z_][\w']*)`\s*\|\s*([A-Za-z0-9_]+\.v)\s*\|(.*)\|", row)
        if not r:
            fail(f"README.md:{k}: cannot read this row of the theorem table "
                 f"(expected | `name` | File.v | statement |): {row[:80]}")
            continue
        name, vfile, statement = r.groups()
        if name in table:
            fail(f"README.md:{k}: theorem {name} is listed twice in the table")
        table[name] = (vfile, k)
        if not os.path.isfile(os.path.join("theories", vfile)):
            fail(f"README.md:{k}: {name}: file coq/theories/{vfile} does not exist")
            continue
        if name not in declared(vfile):
            fail(f"README.md:{k}: {name} is not declared (Theorem/Lemma/Corollary) in coq/theories/{vfile}")
        for other in re.findall(r"`([A-Za-z_][\w']*)`", statement):
            if other != name and other in declared(vfile):
                mentioned.setdefault(other, (vfile, name))

exported = {}
for line, _, m in sentences("Assumptions.v"):
    p = re.match(r"Print\s+Assumptions\s+(" + QUALID + r")$", strip_prefixes(m))
    if p:
        base = p.group(1).split(".")[-1]
        if base in exported:
            fail(f"coq/Assumptions.v:{line}: {base} is printed twice")
        exported[base] = line
for name, (vfile, row) in sorted(mentioned.items()):
    if name not in table:
        print(f"  {name} ({vfile}) is named in the statement of {row}; counted as listed")
listed = set(table) | set(mentioned)
for name in sorted(set(exported) - listed):
    fail(f"{name} is in coq/Assumptions.v (line {exported[name]}) but not in README.md's theorem table")
for name in sorted(listed - set(exported)):
    where = f"README.md:{table[name][1]}" if name in table else f"the statement of {mentioned[name][1]}"
    fail(f"{name} is in README.md's theorem table ({where}) but not printed by coq/Assumptions.v")
if len(failures) == before:
    print(f"OK: README.md's table and coq/Assumptions.v list the same {len(exported)} theorems; "
          f"each table row names a theorem its file declares")

sys.exit(1 if failures else 0)
PY
then
  echo "FAIL: the static trust checks above failed (coq/check_assumptions.sh)"; exit 1
fi

# Check 4: Print Assumptions on every exported theorem.
echo "== Print Assumptions (coq/Assumptions.v)"
if ! out=$(coqc -Q theories VS Assumptions.v 2>&1); then
  echo "$out"; echo "FAIL: coqc could not check coq/Assumptions.v (are the theories built? make coq)"; exit 1
fi
echo "$out"
theorems=$(grep -c '^Print Assumptions' Assumptions.v)
closed=$(grep -c '^Closed under the global context' <<<"$out" || true)
if [ "$closed" -ne "$theorems" ]; then
  echo "FAIL: only $closed of $theorems exported theorems are closed under the global context"; exit 1
fi
echo "OK: all $theorems exported theorems are closed under the global context"
