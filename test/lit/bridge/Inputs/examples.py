#!/usr/bin/env python3
"""Export, import and launch over every example recipe that checks.

For each recipe point of examples/*/*.moe that `moec check` accepts: export
(overrides and YAML), import the YAML, `moec check` the imported recipe,
export it again (the overrides and YAML must be identical), and write the
sbatch scripts for both engines and both mpirun lines (`bash -n` must accept
them). A file with sweeps is taken point by point (`--recipe POINT`).
Prints one summary line per step; failures are listed.
"""
import argparse
import concurrent.futures
import glob
import os
import re
import subprocess
import sys


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def point(a, f, name, base):
    """(round trip identical, lost settings, launches parse, failures) of one point."""
    sel = ["--recipe", name] if name else []
    tag = "%s%s" % (os.path.relpath(f, a.examples), " " + name if sel else "")
    failures = []
    e1 = run([a.moec, "export", "--to", "megatron-bridge", f] + sel)
    y1 = run([a.moec, "export", "--to", "megatron-bridge", "--format", "yaml", f, "-o", base + ".yaml"] + sel)
    imp = run([a.moec, "import", "--from", "megatron-bridge", base + ".yaml", "-o", base + ".moe"])
    chk = run([a.moec, "check", base + ".moe"]) if imp.returncode == 0 else imp
    e2 = run([a.moec, "export", "--to", "megatron-bridge", base + ".moe"])
    y2 = run([a.moec, "export", "--to", "megatron-bridge", "--format", "yaml", base + ".moe"])
    yaml = open(base + ".yaml").read() if y1.returncode == 0 else ""
    # What the export could not carry (reported at export, listed as
    # `# not exported:` comments) is not in the imported recipe; a sweep
    # point comes back as a recipe named after the point.
    strip = lambda t: "".join(re.sub(r" recipe=.*", "", l) for l in t.splitlines(True)
                              if not l.startswith("# not exported:"))
    ok = (e1.returncode == 0 and y1.returncode == 0 and imp.returncode == 0 and chk.returncode == 0 and
          e2.stdout == e1.stdout and strip(y2.stdout) == strip(yaml))
    if not ok:
        failures.append("round trip: %s: %s" % (tag, (imp.stderr + chk.stderr).strip()[-300:]))
    good = True
    for kind in ("--slurm", "--mpirun"):
        for engine in ("moerun", "bridge"):
            s = run([a.moec, "launch", f, kind, "--engine", engine, "--plan", base + ".plan.toml"] + sel)
            syntax = run(["bash", "-n"], input=s.stdout)
            if s.returncode != 0 or not s.stdout or syntax.returncode != 0:
                good = False
                failures.append("launch %s %s: %s: %s" % (kind, engine, tag, (s.stderr + syntax.stderr)[-300:]))
    return ok, "# not exported:" in yaml, good, failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moec", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    files = sorted(glob.glob(os.path.join(a.examples, "*", "*.moe")))
    # One job per recipe point, a few at a time (each is a dozen moec runs).
    jobs = []
    checked = 0
    for f in files:
        if run([a.moec, "check", f]).returncode != 0:
            continue
        checked += 1
        dump = run([a.moec, "check", "--dump-recipe", f]).stdout
        names = re.findall(r"^recipe (\S.*?)(?: \{|$)", dump, re.M) or [None]
        for name in names:
            jobs.append((f, name if len(names) > 1 else None, os.path.join(a.out, "p%03d" % len(jobs))))
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda j: point(a, *j), jobs))
    points = len(jobs)
    same = sum(r[0] for r in results)
    lost = sum(r[1] for r in results)
    launched = sum(r[2] for r in results)
    failures = [x for r in results for x in r[3]]
    print("example files: %d, checked clean: %d, recipe points: %d" % (len(files), checked, points))
    print("export-import-export identical: %d of %d (%d with settings the export reports as not exported)" %
          (same, points, lost))
    print("launch scripts that parse (sbatch and mpirun, moerun and bridge): %d of %d" % (launched, points))
    for x in failures:
        print("FAIL " + x)


if __name__ == "__main__":
    sys.exit(main())
