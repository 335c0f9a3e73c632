"""What the mpirun training tests share: their command line, the environment moerun runs in,
planning a recipe with moec, launching moerun, reading the step log, and the check list.

A test script imports it (it sits beside them), calls args(), and ends with finish().
"""
import argparse
import json
import os
import shutil
import subprocess

failures = []


def check(ok, what, output=""):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)
        if output:
            print("---- output ----\n" + output[-3000:])


def args(extra=()):
    """--moec, --moerun, --mpirun, --work (emptied), --mkdata and the (flag, help) pairs of extra;
    a.env is moerun's environment."""
    ap = argparse.ArgumentParser()
    for flag, what in extra:
        ap.add_argument(flag, help=what)
    ap.add_argument("--moec", required=True)
    ap.add_argument("--moerun", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--work", required=True)
    ap.add_argument("--mkdata")
    a = ap.parse_args()
    # Open MPI's allocations outlive MPI_Finalize (LeakSanitizer in the sanitizer build).
    a.env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                 OPENBLAS_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1", ASAN_OPTIONS="detect_leaks=0")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    return a


def plan(a, name, text):
    """Writes the recipe text to WORK/name.moe and plans it into WORK/name.toml."""
    src = os.path.join(a.work, name + ".moe")
    with open(src, "w") as f:
        f.write(text)
    out = os.path.join(a.work, name + ".toml")
    subprocess.run([a.moec, "plan", src, "-o", out, "--quiet"], check=True)
    return out


def moerun(a, ranks, plan_path, args, env=None):
    """mpirun -np RANKS moerun PLAN ARGS: (exit status, stdout and stderr)."""
    cmd = [a.mpirun, "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader", "-np", str(ranks),
           a.moerun, plan_path, *args]
    p = subprocess.run(cmd, env=dict(a.env, **(env or {})), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=300)
    return p.returncode, p.stdout


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def loss_texts(path):
    """Step -> the training loss exactly as logged (shortest round-trip decimal);
    empty when the run wrote no log (the caller's check then prints its output)."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            out[json.loads(line)["step"]] = line.split('"loss":', 1)[1].split(",", 1)[0].strip()
    return out


def finish(name):
    if failures:
        print("%s: %d failed: %s" % (name, len(failures), "; ".join(failures)))
        return 1
    print("%s: all passed" % name)
    return 0
