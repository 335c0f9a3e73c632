"""A generated section of a doc matches what the binary prints now.

Usage: check_generated.py DOC BEGIN_MARKER END_MARKER -- COMMAND...
Regenerate with scripts/update-docs.py when this fails.
"""
import subprocess
import sys

doc, begin, end = sys.argv[1], sys.argv[2], sys.argv[3]
command = sys.argv[sys.argv.index("--") + 1:]
text = open(doc).read()
if begin not in text or end not in text:
    sys.exit(f"{doc}: missing the markers {begin!r} / {end!r}")
section = text.split(begin, 1)[1].split(end, 1)[0].strip("\n")
expected = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip("\n")
if section != expected:
    import difflib
    sys.stdout.writelines(difflib.unified_diff(section.splitlines(True), expected.splitlines(True),
                                               doc, "generated"))
    sys.exit(f"\n{doc} is stale: run scripts/update-docs.py")
print("up to date")
