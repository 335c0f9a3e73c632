"""moec fmt over every example and every lit test input.

usage: fmt_corpus.py MOEC SRCROOT WORKDIR

The corpus is every .moe under examples/ and test/lit, and every `#--- x.moe`
section of the lit tests (the split-file inputs, kept together per test so
that their imports resolve). Each file is copied twice under WORKDIR: as it
is (orig/) and formatted by `moec fmt` (fmt/). Then, for each file:

  - `moec fmt --write` (one run over the whole tree) either formats it, or
    refuses it with a located error, leaving it as it was; a refused file
    must also fail `moec check` (fmt refuses only what does not parse);
  - `moec fmt --check` accepts the output (exit 0, no diff): formatting it
    again changes nothing;

and for the two trees as a whole:

  - `moec check --dump-recipe` prints the same typed recipes, and
    `moec check --format json` the same diagnostics (ID, severity, message,
    recipe, notes), once source locations are taken out and whitespace in
    quoted source text is ignored (fmt respaces `seq_len/4K`);
  - for every example `moec plan` accepts, the plan's recipe_hash (a hash of
    the typed recipe) is the same.

Prints a summary line; exits 1 on the first kind of failure, listing each.
"""
import json
import os
import re
import shutil
import subprocess
import sys

moec, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []


def fail(msg):
    failures.append(msg)


def run(args, cwd=None, stdin=None):
    p = subprocess.run([moec] + args, cwd=cwd, input=stdin, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    return p.returncode, p.stdout, p.stderr


def collect():
    """(relative path under the corpus root, bytes)."""
    files = []
    for top in ("examples", os.path.join("test", "lit")):
        for root, _, names in os.walk(os.path.join(src, top)):
            for name in sorted(names):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, src)
                if name.endswith(".moe"):
                    with open(path, "rb") as f:
                        files.append((rel, f.read()))
                elif name.endswith(".test"):
                    with open(path, "rb") as f:
                        text = f.read()
                    section, body = None, []
                    for line in text.splitlines(keepends=True) + [b"#--- END"]:
                        m = re.match(rb"#--- (\S+)", line)
                        if m:
                            if section and section.endswith(b".moe"):
                                files.append((os.path.join(rel + ".d", section.decode()), b"".join(body)))
                            section, body = m.group(1), []
                        elif section is not None:
                            body.append(line)
    return files


shutil.rmtree(work, ignore_errors=True)
orig_root, fmt_root = os.path.join(work, "orig"), os.path.join(work, "fmt")
corpus = collect()
for rel, text in corpus:
    for root in (orig_root, fmt_root):
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(text)

# One `moec fmt --write` over the whole fmt/ tree; it names each file it
# refuses, after that file's errors.
code, out, err = run(["fmt", "--write"] + [os.path.join(fmt_root, rel) for rel, _ in corpus])
err = err.decode()
refused_paths = set(re.findall(r"^moec fmt: (.*) has syntax errors; it was not formatted$", err, re.M))
if code not in (0, 1) or out or (code == 1) != bool(refused_paths):
    fail("moec fmt --write exited %d (stdout %r): %s" % (code, out[:200], err[-500:]))
checked = []  # paths relative to the roots
refused = 0
for rel, text in corpus:
    path = os.path.join(fmt_root, rel)
    if path not in refused_paths:
        checked.append(rel)
        continue
    refused += 1
    if not re.search(r"^%s:\d+:\d+: error: " % re.escape(path), err, re.M):
        fail("%s: refused without a located error" % rel)
    with open(path, "rb") as f:
        if f.read() != text:
            fail("%s: refused, but the file was rewritten" % rel)
    if run(["check", "--no-planner", path])[0] == 0:
        fail("%s: fmt refused a file that moec check accepts" % rel)
formatted = len(checked)
changed = 0
for rel in checked:
    with open(os.path.join(orig_root, rel), "rb") as a, open(os.path.join(fmt_root, rel), "rb") as b:
        changed += a.read() != b.read()

# Idempotence: fmt --check accepts every output of fmt (one run for all).
code, diff, err = run(["fmt", "--check"] + [os.path.join(fmt_root, rel) for rel in checked])
if code != 0 or diff:
    fail("fmt --check rejects fmt's own output (not idempotent):\n%s%s" % (diff.decode()[:2000], err.decode()[:500]))


def normalize(text, root):
    text = text.replace(root + "/", "ROOT/")
    text = re.sub(r"([\w./<>-]+\.moe):\d+:\d+", r"\1:LOC", text)
    return re.sub(r"\s+", "", text)


def dumps(root):
    files = [os.path.join(root, rel) for rel in checked]
    _, out, _ = run(["check", "--no-planner", "--error-limit", "0", "--dump-recipe"] + files)
    return [normalize(line, root) for line in out.decode().splitlines()]


def diagnostics(root):
    files = [os.path.join(root, rel) for rel in checked]
    _, out, _ = run(["check", "--no-planner", "--error-limit", "0", "--format", "json"] + files)
    result = []
    for d in json.loads(out.decode()):
        notes = [normalize(n.get("message", ""), root) for n in d.get("notes", [])]
        result.append((normalize(d.get("file") or "", root), d["id"], d["severity"],
                       normalize(d["message"], root), d.get("recipe"), tuple(notes)))
    return sorted(result, key=repr)


a, b = dumps(orig_root), dumps(fmt_root)
if a != b:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            fail("--dump-recipe differs at line %d:\n  before: %s\n  after:  %s" % (i + 1, x, y))
            break
    else:
        fail("--dump-recipe differs in length: %d vs %d lines" % (len(a), len(b)))
recipes = sum(1 for line in a if line.startswith("recipe"))
da, db = diagnostics(orig_root), diagnostics(fmt_root)
if da != db:
    extra = [d for d in db if d not in da][:3]
    lost = [d for d in da if d not in db][:3]
    fail("diagnostics differ; only before: %r; only after: %r" % (lost, extra))

hashes = 0
for rel in checked:
    if not rel.startswith("examples"):
        continue
    ha = run(["plan", "--format", "json", "--quiet", os.path.join(orig_root, rel)])
    if ha[0] != 0:
        continue
    hb = run(["plan", "--format", "json", "--quiet", os.path.join(fmt_root, rel)])
    if hb[0] != 0:
        fail("%s: moec plan fails after formatting" % rel)
        continue
    # One plan, or a list of them (one per recipe or sweep point).
    def recipe_hashes(out):
        plans = json.loads(out)
        return [p["recipe_hash"] for p in (plans if isinstance(plans, list) else [plans])]
    before, after = recipe_hashes(ha[1]), recipe_hashes(hb[1])
    hashes += len(before)
    if before != after:
        fail("%s: recipe_hash %s became %s" % (rel, before, after))

print("fmt corpus: %d files, %d formatted (%d changed), %d refused; %d recipes and %d diagnostics "
      "compared, %d plan hashes equal" % (len(corpus), formatted, changed, refused, recipes, len(da), hashes))
for f in failures:
    print("FAIL: " + f)
sys.exit(1 if failures else 0)
