"""The `$ moec ...` blocks of a documentation page print what the page shows.

Usage: check_doc_commands.py MOEC REPO_ROOT PAGE [PAGE...] [--update]

In every fenced block, a line `$ moec ARGS` is a command and the lines after it,
up to the next `$ ` line or the end of the block, are its output (stderr and
stdout together, as a terminal shows them). Each command runs from the
repository root with MOEC as `moec`; a page whose output differs fails with a
diff. --update rewrites the outputs in place instead (review the diff).
"""
import difflib
import pathlib
import shlex
import subprocess
import sys

args = [a for a in sys.argv[1:] if a != "--update"]
update = "--update" in sys.argv[1:]
moec, root, pages = args[0], pathlib.Path(args[1]), args[2:]

def run(command):
    argv = shlex.split(command)
    argv[0] = moec
    r = subprocess.run(argv, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return [l.rstrip() for l in r.stdout.splitlines()]

failed = checked = 0
for page in pages:
    path = root / page
    lines = path.read_text().split("\n")
    out, i, fence = [], 0, False
    while i < len(lines):
        line = lines[i]
        out.append(line)
        if line.startswith("```"):
            fence = not fence
            i += 1
            continue
        if fence and line.startswith("$ moec "):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("$ ") and not lines[j].startswith("```"):
                j += 1
            shown = [l.rstrip() for l in lines[i + 1:j]]
            actual = run(line[2:])
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
