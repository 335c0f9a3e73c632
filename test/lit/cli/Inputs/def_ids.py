"""Print every diagnostic ID declared in Diagnostics.def, in table order.

usage: def_ids.py INCLUDE_DIR

Reads INCLUDE_DIR/moec/Diag/Diagnostics.def and the .def files it includes
(the rule tables), in place, and prints "ID SEVERITY" per DIAG or RULE entry,
with the severity lowercased as moec prints it.
"""
import os
import re
import sys

ENTRY = re.compile(r'^(?:DIAG|RULE)\(\s*\w+\s*,\s*"([^"]+)"\s*,\s*(\w+)', re.M)
INCLUDE = re.compile(r'^#include "([^"]+\.def)"', re.M)


def walk(root, rel, out):
    text = open(os.path.join(root, rel)).read()
    pos = 0
    # Entries and includes in the order they appear.
    events = [(m.start(), "entry", m) for m in ENTRY.finditer(text)]
    events += [(m.start(), "include", m) for m in INCLUDE.finditer(text)]
    for _, kind, m in sorted(events, key=lambda e: e[0]):
        if kind == "entry":
            out.append((m.group(1), m.group(2).lower()))
        elif m.group(1) != rel:
            walk(root, m.group(1), out)


def main():
    out = []
    walk(sys.argv[1], "moec/Diag/Diagnostics.def", out)
    for ident, severity in out:
        print(ident, severity)


if __name__ == "__main__":
    main()
