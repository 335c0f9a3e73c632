"""Run a command and require a given exit status.

usage: exitcode.py STATUS COMMAND [ARG...]

The command inherits stdin, stdout and stderr, so the wrapper can sit at the
head of a pipeline (`%python exitcode.py 2 %moec check x.moe 2>&1 | FileCheck`).
lit's `not` accepts any non-zero status; moec's statuses (0 clean, 1 errors,
2 the tool could not run) must be told apart. Exits 0 when the status is the
expected one and 1 otherwise.
"""
import subprocess
import sys

if len(sys.argv) < 3:
    sys.exit("usage: exitcode.py STATUS COMMAND [ARG...]")
want = int(sys.argv[1])
got = subprocess.call(sys.argv[2:])
if got != want:
    sys.stderr.write("exitcode.py: expected exit status %d, got %d from: %s\n"
                     % (want, got, " ".join(sys.argv[2:])))
    sys.exit(1)
