#!/usr/bin/env python3
"""Fails when a C++ or CUDA source of the tree is not as clang-format leaves it.

  check_clang_format.py CLANG_FORMAT SOURCE_ROOT

The style is the repository's .clang-format (LLVM's at 120 columns). Lists
every file that would change, with the first differing line, so that the
fix is `clang-format -i FILE` (or scripts/format.sh for the whole tree).
"""
import difflib
import os
import subprocess
import sys

DIRS = ["include", "lib", "tools", "runtime", "test", "bench"]
EXTENSIONS = (".cpp", ".h", ".cu", ".cuh")


def sources(root):
    for d in DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames[:] = sorted(n for n in dirnames if n not in ("Inputs", "corpus", "Output"))
            for name in sorted(filenames):
                if name.endswith(EXTENSIONS):
                    yield os.path.join(dirpath, name)


def main():
    clang_format, root = sys.argv[1], sys.argv[2]
    bad = []
    files = list(sources(root))
    for path in files:
        original = open(path, encoding="utf-8").read()
        formatted = subprocess.run([clang_format, "--style=file", path], capture_output=True, text=True,
                                   check=True, cwd=root).stdout
        if formatted != original:
            diff = difflib.unified_diff(original.splitlines(), formatted.splitlines(), lineterm="", n=0)
            first = next((l for l in diff if l.startswith("@@")), "")
            bad.append(f"{os.path.relpath(path, root)}: {first}")
    for line in bad:
        print("not formatted: " + line)
    print(f"{len(files)} files, {len(bad)} not formatted")
    sys.exit(1 if bad else 0)


main()
