#!/usr/bin/env python3
"""Every fix-it of the rule tests, applied with `moec check --fix` and checked again.

For each test/lit/rules/*.test, every `#--- NAME.moe` file of it in which moec reports an error
or warning with a fix-it is copied, fixed in place with `moec check --fix`, and checked again.
A fix-it passes when the diagnostic it was attached to is gone from where it was (the same ID
at the same line) and the fixed file has no error ID it did not have before. Prints one line
per failure and a summary.

Usage: check_fixits.py MOEC RULES_DIR WORKDIR
"""
import json, os, re, subprocess, sys

moec, rules, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)


def check(path):
    p = subprocess.run([moec, "check", "--format", "json", path], capture_output=True, text=True)
    try:
        return json.loads(p.stdout or "[]")
    except json.JSONDecodeError:
        return []


def split(path):
    files, name, lines = {}, None, []
    for line in open(path):
        m = re.match(r"#--- (\S+)", line)
        if m:
            if name:
                files[name] = "".join(lines)
            name, lines = m.group(1), []
        elif name:
            lines.append(line)
    if name:
        files[name] = "".join(lines)
    return files


applied = failures = 0
for test in sorted(os.listdir(rules)):
    if not test.endswith(".test"):
        continue
    for name, text in split(os.path.join(rules, test)).items():
        if not name.endswith(".moe"):
            continue
        path = os.path.join(work, test[:-5] + "--" + name)
        with open(path, "w") as f:
            f.write(text)
        before = check(path)
        fixed = [(d["id"], d["line"]) for d in before
                 if d["severity"] != "remark" and d["fixits"] and d["file"] == path]
        if not fixed:
            continue
        errors_before = {d["id"] for d in before if d["severity"] == "error"}
        subprocess.run([moec, "check", "--fix", path], capture_output=True, text=True)
        after = check(path)
        applied += len(set(fixed))
        still = {(d["id"], d["line"]) for d in after}
        for diag in sorted(set(fixed)):
            if diag in still:
                failures += 1
                print("FAIL %s %s: %s at line %d still fires after --fix" % (test, name, diag[0], diag[1]))
        new = {d["id"] for d in after if d["severity"] == "error"} - errors_before
        for i in sorted(new):
            failures += 1
            print("FAIL %s %s: --fix brings a new error %s" % (test, name, i))
print("fix-its applied and checked again: %d, failures: %d" % (applied, failures))
