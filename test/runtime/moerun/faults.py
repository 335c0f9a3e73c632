#!/usr/bin/env python3
"""moerun's launch checks under mpirun: a small plan generated with `moec plan`
at test time, then damaged or launched wrongly; every case checks the exit
status of every rank (each rank runs under `sh -c '...; echo rank-exit $?'`)
and the message.

Data cases (missing-data, corrupt-data) plan the same job with data.source =
real(PREFIX) and need moerun-mkdata (MKDATA) to build a corpus to damage;
rank-dies kills one rank in the middle of a step through moerun's test hook
MOERUN_TEST_DIE_AT_STEP=K:RANK (tools/moerun/RunSteps.cpp).

usage: faults.py CASE MOEC MOERUN MPIRUN WORKDIR [MKDATA]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time

CASE, MOEC, MOERUN, MPIRUN, WORK = sys.argv[1:6]
MKDATA = sys.argv[6] if len(sys.argv) > 6 else None
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


def plan(data=None, name="two", gpu="cpu"):
    """A two-rank plan (pp = 2), written with moec plan; data: a dataset
    prefix for data.source = real(...), else mock data; gpu: the cluster's."""
    os.makedirs(WORK, exist_ok=True)
    moe = os.path.join(WORK, name + ".moe")
    recipe = RECIPE if gpu == "cpu" else RECIPE.replace("gpu = cpu; nodes = 1", f"gpu = {gpu}; gpus = 2")
    with open(moe, "w") as f:
        f.write(recipe if data is None else recipe.replace(
            "  parallel {", f'  data {{ source = real("{data}") }}\n  parallel {{'))
    path = os.path.join(WORK, name + ".toml")
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


def log_steps(path, output):
    """The steps of a step log that must hold complete JSON lines only."""
    if not os.path.exists(path):
        return []
    text = open(path).read()
    if text and not text.endswith("\n"):
        fail(f"the log ends in a half-written line: {text[-80:]!r}", output)
    try:
        return [json.loads(line)["step"] for line in text.splitlines()]
    except (ValueError, KeyError) as e:
        fail(f"the log holds a line that is not a step record ({e}): {text!r}", output)


def expect_data_refused(prefix, message, path):
    """A plan reading the dataset at prefix: every rank exits 5 before the
    first step, naming the file at fault."""
    data_plan = plan(prefix, "data")
    log = os.path.join(WORK, "data.jsonl")
    rc, out, elapsed = per_rank(2, [data_plan, "--steps", "2", "--log", log, "--timeout", "20"])
    expect_every_rank_exits(2, 5, out)
    expect_in(f"'{path}'", out)
    expect_in(message, out)
    if "step 1/" in out or log_steps(log, out):
        fail("training started on a bad dataset", out)
    if elapsed > 30:
        fail(f"the job took {elapsed:.0f} s to end", out)
    return out


def corpus(name):
    """A small corpus written with moerun-mkdata; returns its prefix."""
    if not MKDATA:
        fail("this case needs the moerun-mkdata path")
    prefix = os.path.join(WORK, name)
    subprocess.run([MKDATA, "--out", prefix, "--vocab", "16", "--tokens", "4000", "--seed", "3"],
                   check=True, stdout=subprocess.DEVNULL)
    return prefix


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
    rc, out, _ = per_rank(2, [good, "--backend", "gpu"])
    expect_every_rank_exits(2, 2, out)
    expect_in("--backend: expected cpu or cuda, got 'gpu'", out)
    if shutil.which("nvidia-smi") is None:
        # Without a GPU, --backend cuda is refused before the first step, by
        # every rank, whether or not this moerun has the CUDA backend.
        rc, out, _ = per_rank(2, [good, "--backend", "cuda"])
        expect_every_rank_exits(2, 5, out)
        if "the CUDA backend needs a CUDA device: none found" not in out and \
                "this moerun was built without the CUDA backend" not in out:
            fail("--backend cuda without a GPU is not refused with a reason", out)
        # and with the next step: another node, or the host backend.
        expect_in("or with --backend cpu" if "needs a CUDA device" in out else "or use --backend cpu", out)
        # A plan made for a GPU computes on CUDA devices unless told otherwise:
        # refused the same way, naming the plan's GPU; --backend cpu trains it
        # on the host, and a dry run needs no device.
        gpu_plan = plan(name="gpu", gpu="h100_sxm")
        rc, out, _ = per_rank(2, [gpu_plan])
        expect_every_rank_exits(2, 5, out)
        expect_in(f"the plan '{gpu_plan}' is for h100_sxm GPUs, so moerun computes on CUDA devices unless told "
                  "otherwise", out)
        rc, out, _ = per_rank(2, [gpu_plan, "--dry-run"])
        expect_every_rank_exits(2, 0, out)
        rc, out, _ = per_rank(2, [gpu_plan, "--backend", "cpu"])
        expect_every_rank_exits(2, 0, out)
        expect_in("the cpu backend computes", out)
    # llvm::cl parses the options: a misspelt one is refused with a hint.
    rc, out, _ = per_rank(2, [good, "--stpes=2"])
    expect_every_rank_exits(2, 2, out)
    expect_in("Unknown command line argument '--stpes=2'", out)
    expect_in("Did you mean '--steps=2'?", out)
    # --help lists the options without starting MPI, and exits 0.
    r = subprocess.run([MOERUN, "--help"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or "--dry-run" not in r.stdout or "--timeout=<SECONDS>" not in r.stdout:
        fail("moerun --help does not list the options", r.stdout + r.stderr)
    # moerun-mkdata: the required options named, a negative size refused.
    r = subprocess.run([MKDATA, "--vocab", "8"], capture_output=True, text=True, timeout=30)
    if r.returncode != 1 or "--out option: must be specified" not in r.stderr:
        fail("moerun-mkdata without --out is not refused", r.stderr)
    r = subprocess.run([MKDATA, "--out", os.path.join(WORK, "neg"), "--vocab", "8", "--tokens", "-5"],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 1 or "--tokens needs a non-negative integer, got -5" not in r.stderr:
        fail("moerun-mkdata takes a negative token count", r.stderr)

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

elif CASE == "missing-data":
    nothing = os.path.join(WORK, "no-such-corpus")
    expect_data_refused(nothing, "cannot open", nothing + ".idx")

elif CASE == "corrupt-data":
    # The control: the undamaged corpus trains.
    prefix = corpus("corpus")
    rc, out, _ = per_rank(2, [plan(prefix, "data"), "--steps", "1"])
    expect_every_rank_exits(2, 0, out)
    expect_in("step 1/1", out)
    # An index cut short (a copy that stopped half way).
    idx = open(prefix + ".idx", "rb").read()
    with open(prefix + ".idx", "wb") as f:
        f.write(idx[: len(idx) // 2])
    expect_data_refused(prefix, "truncated index", prefix + ".idx")
    # An intact index over a data file cut short.
    with open(prefix + ".idx", "wb") as f:
        f.write(idx)
    data = open(prefix + ".bin", "rb").read()
    with open(prefix + ".bin", "wb") as f:
        f.write(data[: len(data) // 3])
    expect_data_refused(prefix, "lies beyond the end of the", prefix + ".bin")
    # A token id outside the vocabulary in the last sequence: the ranks
    # split the check of the ids, so rank 1 finds it and says so, and every
    # rank still refuses.
    with open(prefix + ".bin", "wb") as f:
        f.write(data)
    width = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 8: 2}[idx[17]]
    bad = (1 << (8 * min(width, 4) - 1)) - 1
    with open(prefix + ".bin", "r+b") as f:
        f.seek(len(data) - width)
        f.write(bad.to_bytes(width, "little", signed=False))
    out = expect_data_refused(prefix, f"token id {bad} (sequence ", prefix + ".bin")
    expect_in("moerun: rank 1: the plan's dataset", out)
    expect_in("is outside the vocabulary [0, ", out)

elif CASE == "rank-dies":
    # Rank 1 (the last pipeline stage) is killed after its first op of step
    # 2: rank 0 then waits for gradients that never come. mpirun must end the
    # job, and the log keeps step 1 only, as a whole line.
    log = os.path.join(WORK, "dies.jsonl")
    start = time.time()
    p = subprocess.run(MPI + ["-x", "MOERUN_TEST_DIE_AT_STEP=2:1", "-np", "2", MOERUN, good, "--steps", "4",
                              "--log", log, "--timeout", "20"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    elapsed = time.time() - start
    out = p.stdout
    if p.returncode == 0:
        fail("a job whose rank died succeeded", out)
    if elapsed > 30:
        fail(f"the job took {elapsed:.0f} s to end", out)
    expect_in("step 1/4", out)
    if "step 2/4" in out:
        fail("step 2 finished although rank 1 died in it", out)
    if not re.search(r"rank 1 .*(signal 9|Killed)", out, re.S):
        fail("nothing says that rank 1 was killed", out)
    steps = log_steps(log, out)
    if steps != [1]:
        fail(f"the log holds steps {steps}, expected [1]", out)

else:
    fail("unknown case " + CASE)

print("PASS: " + CASE)
