"""Every diagnostic moec can emit has a lit test in which it fires.

A test "covers" an ID when one of its CHECK lines names `[ID]` (the form
every rendered diagnostic ends with) or `"id": "ID"` in JSON output.
"""
import pathlib
import re
import subprocess
import sys

moec, tests_root = sys.argv[1], pathlib.Path(sys.argv[2])
listing = subprocess.run([moec, "check", "--list-rules"], capture_output=True, text=True, check=True).stdout
ids = [line.split()[0] for line in listing.splitlines() if line.strip()]

covered = set()
for path in tests_root.rglob("*"):
    if path.suffix not in (".test", ".moe") or "Output" in path.parts:
        continue
    text = path.read_text(errors="replace")
    for line in text.splitlines():
        # A positive FileCheck directive (CHECK:, FIRES:, JSON-NEXT:, ...);
        # a -NOT directive asserts absence and covers nothing.
        directive = re.match(r"\s*(?:#|//)\s*([A-Z][A-Z0-9-]*):", line)
        if not directive or directive.group(1).endswith("-NOT"):
            continue
        covered.update(re.findall(r"\[([a-z0-9-]+)\]", line))
        covered.update(re.findall(r'"id":\s*"([a-z0-9-]+)"', line))

missing = [i for i in ids if i not in covered]
if missing:
    print("diagnostics without a lit test that checks them firing:")
    for i in missing:
        print("  " + i)
    sys.exit(1)
print(f"all {len(ids)} diagnostics are covered")
