"""Runs the hooks of .pre-commit-hooks.yaml the way pre-commit does.

usage: precommit_hooks.py MOEC SRCROOT DIR

pre-commit runs `entry` with the staged files that match `files` appended;
with `language: system` the entry's first word is found on PATH. This runs
each hook's entry (with MOEC for `moec`) on the .moe files of DIR and prints
`HOOK-ID exit N` per hook, so that the test checks the exit statuses a
commit would see. The manifest is read line by line (no YAML library is
needed for its flat form).
"""
import os
import re
import shlex
import subprocess
import sys

moec, src, d = sys.argv[1:4]
hooks, hook = [], None
with open(os.path.join(src, ".pre-commit-hooks.yaml")) as f:
    for line in f:
        m = re.match(r"^(-\s+|\s+)(\w+):\s*(.*?)\s*$", line)
        if not m:
            continue
        if m.group(1).startswith("-"):
            hook = {}
            hooks.append(hook)
        hook[m.group(2)] = m.group(3)
for h in hooks:
    assert h.get("language") == "system", h
    files = sorted(n for n in os.listdir(d) if re.search(h["files"], n))
    assert files and all(n.endswith(".moe") for n in files), (h, files)
    entry = shlex.split(h["entry"])
    assert entry[0] == "moec", h
    code = subprocess.call([os.path.abspath(moec)] + entry[1:] + files, cwd=d, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    print("%s exit %d" % (h["id"], code))
