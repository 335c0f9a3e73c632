#!/usr/bin/env python3
"""Rewrite examples/expected-diagnostics.txt from what moec reports today.

Usage: scripts/update-expected.py MOEC_BINARY [--examples DIR] [--output FILE]

Runs `MOEC_BINARY check --format json FILE` on every .moe file under examples/
(all subdirectories, one file per invocation) and writes one line per distinct
diagnostic ID of each file:

    relative/path.moe: ID

sorted, with paths relative to examples/ and '/' as the separator. A file with
no diagnostic at all gets the line `relative/path.moe: (none)`. A diagnostic
located in a file that the checked file imports is counted for the checked
file: the list answers "what does `moec check FILE` report".

The lit test test/lit/examples/expected.test compares the same listing with the
file and fails on any difference; run this script after a change that moves a
diagnostic on purpose, and review the diff it prints.
"""

import argparse
import json
import os
import subprocess
import sys

NONE = "(none)"


def example_files(examples_dir):
    """Every .moe under examples_dir, as sorted '/'-separated relative paths."""
    found = []
    for root, dirs, files in os.walk(examples_dir):
        dirs.sort()
        for name in files:
            if name.endswith(".moe"):
                rel = os.path.relpath(os.path.join(root, name), examples_dir)
                found.append(rel.replace(os.sep, "/"))
    return sorted(found)


def run_moec(moec, path):
    """The JSON diagnostics of `moec check --format json path`, and its exit status.

    Raises RuntimeError when moec could not run (exit status 2, a crash) or did
    not print a JSON array."""
    proc = subprocess.run([moec, "check", "--format", "json", path],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    if proc.returncode not in (0, 1):
        raise RuntimeError("%s check %s exited with status %d:\n%s%s"
                           % (moec, path, proc.returncode, proc.stdout, proc.stderr))
    try:
        diags = json.loads(proc.stdout)
    except ValueError as err:
        raise RuntimeError("%s check --format json %s did not print JSON (%s):\n%s%s"
                           % (moec, path, err, proc.stdout[:2000], proc.stderr[:2000]))
    if not isinstance(diags, list):
        raise RuntimeError("%s check --format json %s: expected a JSON array" % (moec, path))
    return diags, proc.returncode


def collect(moec, examples_dir):
    """{relative path: list of diagnostic objects} for every example."""
    result = {}
    for rel in example_files(examples_dir):
        diags, _ = run_moec(moec, os.path.join(examples_dir, rel))
        result[rel] = diags
    return result


def expected_lines(diagnostics):
    """The sorted `path: ID` lines for {path: diagnostics}."""
    lines = []
    for rel in sorted(diagnostics):
        ids = sorted({d["id"] for d in diagnostics[rel]})
        if not ids:
            ids = [NONE]
        lines.extend("%s: %s" % (rel, i) for i in ids)
    return lines


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    default_examples = os.path.join(os.path.dirname(here), "examples")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("moec", metavar="MOEC_BINARY", help="the moec executable to run")
    parser.add_argument("--examples", default=default_examples,
                        help="examples directory (default: %(default)s)")
    parser.add_argument("--output", default=None,
                        help="file to write (default: EXAMPLES/expected-diagnostics.txt)")
    args = parser.parse_args(argv)
    output = args.output or os.path.join(args.examples, "expected-diagnostics.txt")
    try:
        lines = expected_lines(collect(args.moec, args.examples))
    except (OSError, RuntimeError) as err:
        sys.stderr.write("update-expected: %s\n" % err)
        return 2
    with open(output, "w") as out:
        out.write("\n".join(lines) + "\n")
    print("update-expected: wrote %d lines for %d files to %s"
          % (len(lines), len({l.split(": ", 1)[0] for l in lines}), output))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
