#!/usr/bin/env python3
"""moerun's launch checks under mpirun: a small plan generated with `moec plan`
at test time, then damaged or launched wrongly; every case checks the exit
status of every rank (each rank runs under `sh -c '...; echo rank-exit $?'`)
and the message.

usage: faults.py CASE MOEC MOERUN MPIRUN WORKDIR
"""
import os
import re
import subprocess
import sys
import time

CASE, MOEC, MOERUN, MPIRUN, WORK = sys.argv[1:6]
MPI = [MPIRUN, "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"]

RECIPE = """recipe two {
  model = tiny_moe
  cluster { gpu = cpu; nodes = 1 }
  seq_len = 32
  batch { micro = 1; global = 4 }
  parallel { tp = 1; pp = 2; ep = 1 }
}
"""


def fail(message, output=""):
    print("FAIL: " + message)
    if output:
        print("---- output ----\n" + output)
    sys.exit(1)


def plan():
    """A two-rank plan (pp = 2), written with moec plan."""
    os.makedirs(WORK, exist_ok=True)
    moe = os.path.join(WORK, "two.moe")
    with open(moe, "w") as f:
        f.write(RECIPE)
    path = os.path.join(WORK, "two.toml")
    subprocess.run([MOEC, "plan", moe, "-o", path, "--quiet"], check=True)
    return path


def write(name, text):
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def launch(args, timeout=60):
    start = time.time()
    p = subprocess.run(MPI + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return p.returncode, p.stdout, time.time() - start


def per_rank(np, moerun_args):
    """Runs moerun on np ranks, each wrapped to report its own exit status."""
    command = " ".join([MOERUN] + moerun_args) + "; echo rank-exit $?"
    return launch(["-np", str(np), "sh", "-c", command])


def expect_every_rank_exits(np, code, output):
    codes = re.findall(r"rank-exit (\d+)", output)
    if len(codes) != np or any(int(c) != code for c in codes):
        fail(f"expected all {np} ranks to exit {code}, got {codes}", output)


def expect_in(text, output):
    if text not in output:
        fail(f"missing message: {text}", output)


good = plan()
document = open(good).read()

if CASE == "dry-run":
    rc, out, _ = launch(["-np", "2", MOERUN, good, "--dry-run"])
    if rc != 0:
        fail(f"dry run exited {rc}", out)
    expect_in("moerun: plan 'two'", out)
    expect_in("rank   0: node 0 local 0 tp 0 cp 0 dp 0 pp 0", out)
    expect_in("rank   1: node 0 local 1 tp 0 cp 0 dp 0 pp 1", out)
    expect_in("stage 1: layers 2-3 +loss", out)

elif CASE == "world-size":
    for np in (1, 3):
        rc, out, _ = per_rank(np, [good, "--dry-run"])
        expect_every_rank_exits(np, 1, out)
        expect_in(f"is for 2 ranks (world_size = 2) but this job has {np} ranks", out)

elif CASE == "different-plans":
    other = write("other.toml", document.replace("seq_len = 32", "seq_len = 64"))
    rc, out, _ = launch(["-np", "1", MOERUN, good, "--dry-run", ":", "-np", "1", MOERUN, other, "--dry-run"])
    if rc == 0:
        fail("ranks with different plans started", out)
    expect_in("moerun: the ranks do not read the same plan: rank 0 read a plan with hash xxh64:", out)
    expect_in("; rank 1 read a plan with hash xxh64:", out)
    expect_in("moerun: rank 1: my plan '" + other + "' differs from rank 0's", out)

elif CASE == "corrupt":
    truncated = write("truncated.toml", document[: len(document) // 2].rsplit("\n", 1)[0] + "\n[groups\n")
    rc, out, _ = per_rank(2, [truncated, "--dry-run"])
    expect_every_rank_exits(2, 1, out)
    if not re.search(re.escape("moerun: invalid plan: " + truncated) + r":\d+:\d+: ", out):
        fail("a syntax error is not located by line and column", out)
    bad_op = write("bad-op.toml", document.replace("'F0.0'", "'Q0.0'", 1))
    rc, out, _ = per_rank(2, [bad_op, "--dry-run"])
    expect_every_rank_exits(2, 1, out)
    expect_in("moerun: invalid plan: " + bad_op + ": pipeline.schedule[0].ops[0]: 'Q0.0' is not", out)
    missing = os.path.join(WORK, "missing.toml")
    rc, out, _ = per_rank(2, [missing, "--dry-run"])
    expect_every_rank_exits(2, 1, out)
    expect_in(f"cannot read plan '{missing}'", out)

elif CASE == "usage":
    rc, out, _ = per_rank(2, [good, "--steps", "0"])
    expect_every_rank_exits(2, 2, out)
    expect_in("--steps: expected an integer of at least 1, got '0'", out)

elif CASE == "watchdog":
    # One process of the job never starts MPI: without the watchdog, rank 0
    # would wait in MPI_Init forever.
    rc, out, elapsed = launch(["-np", "1", MOERUN, good, "--dry-run", "--timeout", "2", ":", "-np", "1",
                               "sleep", "60"], timeout=50)
    if rc == 0:
        fail("a job with a dead peer succeeded", out)
    expect_in("moerun: rank 0: no progress for 2 s while starting MPI", out)
    if elapsed > 30:
        fail(f"the job took {elapsed:.0f} s to end", out)

else:
    fail("unknown case " + CASE)

print("PASS: " + CASE)
