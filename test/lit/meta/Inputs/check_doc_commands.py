"""The `$ moec ...` blocks of a documentation page print what the page shows.

Usage: check_doc_commands.py MOEC REPO_ROOT PAGE [PAGE...] [--update]

In every fenced block, a line `$ moec ARGS` is a command and the lines after it,
up to the next `$ ` line or the end of the block, are its output (stderr and
stdout together, as a terminal shows them); `$ echo $?` prints the exit status
of the command before it. A command may pipe into other tools (`| grep ...`).

A page that walks through files of its own marks each one: a line
`<!-- file: NAME -->` before a fenced block writes the block to NAME, in a
scratch directory of the page, at that point of the walk-through (a later block
for the same NAME replaces it, as an edit would). The commands of such a page
run in its scratch directory, those of other pages from the repository root;
the scratch directory's path in an output reads `$PWD`.
A page whose output differs fails with a diff; --update rewrites the outputs in
place instead (review the diff).
"""
import difflib
import os
import pathlib
import re
import subprocess
import sys
import tempfile

args = [a for a in sys.argv[1:] if a != "--update"]
update = "--update" in sys.argv[1:]
moec, root, pages = os.path.abspath(args[0]), pathlib.Path(args[1]).resolve(), args[2:]
FILE = re.compile(r"<!-- file: (\S+) -->")


def run(command, cwd):
    # `moec` is the binary under test, wherever the command names it.
    script = 'moec() { "$MOEC_UNDER_TEST" "$@"; }\n' + command
    env = dict(os.environ, MOEC_UNDER_TEST=moec)
    r = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    text = r.stdout.replace(os.path.realpath(cwd), "$PWD").replace(cwd, "$PWD") if cwd != str(root) else r.stdout
    return [l.rstrip() for l in text.splitlines()], r.returncode


failed = checked = 0
for page in pages:
    path = root / page
    lines = path.read_text().split("\n")
    walk = any(FILE.search(l) for l in lines)
    scratch = tempfile.mkdtemp(prefix="moec-doc-") if walk else str(root)
    out, i, fence, pending, block, status = [], 0, False, None, [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        m = FILE.search(line)
        if m and not fence:
            pending = m.group(1)
        if line.startswith("```"):
            fence = not fence
            if fence:
                block = []
            elif pending:
                pathlib.Path(scratch, pending).write_text("\n".join(block) + "\n")
                pending = None
            i += 1
            continue
        if fence and pending:
            block.append(line)
            i += 1
            continue
        if fence and (line.startswith("$ moec ") or line == "$ echo $?"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("$ ") and not lines[j].startswith("```"):
                j += 1
            shown = [l.rstrip() for l in lines[i + 1:j]]
            if line == "$ echo $?":
                actual = [str(status)]
            else:
                actual, status = run(line[2:], scratch)
            checked += 1
            if actual != shown:
                if update:
                    print("%s: updated the output of `%s`" % (page, line))
                else:
                    failed += 1
                    print("%s:%d: `%s` prints something else:" % (page, i + 1, line))
                    sys.stdout.writelines(d + "\n" for d in difflib.unified_diff(shown, actual, "page", "moec", lineterm=""))
            out.extend(actual if update else shown)
            i = j
            continue
        i += 1
    if update:
        path.write_text("\n".join(out))
print("%d commands checked, %d differ" % (checked, failed))
sys.exit(1 if failed else 0)
