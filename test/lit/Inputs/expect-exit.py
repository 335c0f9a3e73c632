"""Runs a command; succeeds only if it exits with exactly the expected status.

    expect-exit.py STATUS[,STATUS...] [--json] [--timeout SECONDS] COMMAND [ARG...]

The command's stdout and stderr are passed through (stdout first), so the
output can still be piped to FileCheck; its stdin is inherited. This fails,
with a message on stderr, when the command
  - exits with any other status (lit's `not` accepts 1 and 2 alike); a
    list such as 0,1 is for inputs whose verdict is not the point (a huge
    but well-formed file: what matters is that it is checked at all),
  - is killed by a signal: a crash, which lit's `not` would accept,
  - runs past the timeout (default 120 s; generous, as lit runs tests in
    parallel on loaded machines: a hang, not a slow run, is what it catches),
  - prints text that only a crash or an escaped exception prints,
  - with --json: prints something on stdout that is not a JSON array of
    diagnostics with the contract's keys, or (for status 1) has no error.
"""
import json
import signal
import subprocess
import sys

CRASH_TEXT = [
    "Stack dump:",
    "PLEASE submit a bug report",
    "terminate called",
    "Assertion `",
    "LLVM ERROR",
    "internal parser failure",
    "Segmentation fault",
]


def fail(message):
    sys.stderr.write("expect-exit: %s\n" % message)
    sys.exit(1)


def main(argv):
    if len(argv) < 2:
        fail("usage: expect-exit.py STATUS[,STATUS...] [--json] [--timeout SECONDS] COMMAND [ARG...]")
    allowed = [int(s) for s in argv[0].split(",")]
    expected = allowed[0] if len(allowed) == 1 else None
    args = argv[1:]
    check_json = False
    timeout = 120.0
    while args and args[0].startswith("--"):
        if args[0] == "--json":
            check_json = True
            args = args[1:]
        elif args[0] == "--timeout" and len(args) > 1:
            timeout = float(args[1])
            args = args[2:]
        else:
            fail("unknown option %s" % args[0])
    if not args:
        fail("no command given")
    try:
        proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        fail("%s ran past %g s: a hang?" % (args[0], timeout))
    sys.stdout.buffer.write(proc.stdout)
    sys.stdout.flush()
    sys.stderr.buffer.write(proc.stderr)
    sys.stderr.flush()

    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = "signal %d" % -proc.returncode
        fail("%s was killed by %s (a crash), expected exit status %s" % (args[0], name, argv[0]))
    if proc.returncode not in allowed:
        fail("%s exited with status %d, expected %s" % (args[0], proc.returncode, argv[0]))
    output = (proc.stdout + proc.stderr).decode("utf-8", errors="replace")
    for text in CRASH_TEXT:
        if text in output:
            fail("output contains %r: a crash or an escaped exception" % text)
    if check_json:
        try:
            diags = json.loads(proc.stdout.decode("utf-8"))
        except ValueError as e:
            fail("stdout is not JSON: %s" % e)
        if not isinstance(diags, list):
            fail("stdout is not a JSON array")
        for d in diags:
            for key in ("id", "severity", "message", "file", "line", "column"):
                if key not in d:
                    fail("diagnostic without %r: %s" % (key, json.dumps(d)))
        if expected == 1 and not any(d["severity"] == "error" for d in diags):
            fail("exit status 1 but no error in the JSON output")


if __name__ == "__main__":
    main(sys.argv[1:])
