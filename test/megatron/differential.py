#!/usr/bin/env python3
"""Megatron differential suite: moec's verdict vs. the real Megatron-Bridge 0.3.1 start-up.

Runs N generated configurations (generate.py) through
  * moec:   `moec check --target megatron-bridge@0.3.1 --no-planner --format json` on the
            `.moe` text (many files per invocation; memory diagnostics ignored), and
  * Megatron: oracle.py in-process (a pool of worker processes),
and compares accept/reject. A configuration moec rejects and Megatron accepts is
"beyond-oracle" (reported, not a failure) when every moec error on it is a check of a phase
the oracle does not execute, as `moec explain ID` states it (ORACLE_PHASES below). Exit 0
when every other disagreement group is listed in known-disagreements.txt, 1 otherwise.
Last line: `differential: N passed, M failed (B more beyond the oracle: ...)`.
"""

import argparse
import collections
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate  # noqa: E402

IGNORED_IDS = {"memory-exceeds-hbm", "memory-headroom"}
TARGET = "megatron-bridge@0.3.1"

# The phase of a Megatron check is read from moec itself: `moec explain ID` prints, per target,
#   "  megatron-bridge@0.3.1      error    megatron/core/...py:155 (model build)"
# and the first part of the parenthesised text (before "," or ";") names the phase, if it is
# one of PHASES; a line without one is a check made while the configuration is validated.
PHASES = ("process groups", "model build", "dispatcher build", "optimizer build", "first step")
CONFIG_PHASE = "config validation"
# The phases oracle.py EXECUTES (see oracle.STAGES):
#   config validation  runtime_config_update(): ConfigContainer.validate(), TransformerConfig /
#                      ModelParallelConfig __post_init__, plus the micro-batch calculator;
#   process groups     parallel_state.initialize_model_parallel() on the fake backend;
#   model build        the layer split of every pipeline rank and virtual stage (layer specs,
#                      get_num_layers_to_build, MTP, offsets) -- NOT the construction of the
#                      layers' modules, so a moec "model build" error on a module-construction
#                      check would still count as a failure (the safe direction);
#   dispatcher build   the MoE token dispatcher's constructor (BaseMoELayer + dispatcher).
# Not executed: "optimizer build" and "first step" (the schedule, TE's run-time checks), and
# any check located inside Transformer Engine (transformer_engine/..., a stand-in here).
# A false error whose every moec error has a non-executed phase is "beyond-oracle".
ORACLE_PHASES = frozenset({CONFIG_PHASE, "process groups", "model build", "dispatcher build"})


def _norm(msg):
    msg = re.sub(r"\d+", "N", msg)
    return msg[:160]


def moec_supports_target(moec):
    r = subprocess.run([moec, "targets"], capture_output=True, text=True)
    if r.returncode == 0:
        return True
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.moe")
        with open(p, "w") as f:
            f.write("recipe t { model = tiny_moe; cluster { gpu = h100_sxm; gpus = 8 }\n"
                    "seq_len = 4K; batch { micro = 1; global = 8 } }\n")
        r = subprocess.run([moec, "check", "--target", TARGET, "--no-planner", "--format", "json", p],
                           capture_output=True, text=True)
        return r.returncode in (0, 1)


def run_moec(moec, configs, workdir, use_target, chunk=250):
    """Return {name: [error diagnostics]} (memory IDs dropped) and the raw non-error IDs."""
    paths = {}
    for c in configs:
        p = os.path.join(workdir, c["name"] + ".moe")
        with open(p, "w") as f:
            f.write(c["moe"])
        paths[p] = c["name"]
    errors = {c["name"]: [] for c in configs}
    plist = list(paths)
    base = [moec, "check", "--no-planner", "--format", "json", "--error-limit=0"]
    if use_target:
        base[2:2] = ["--target", TARGET]
    for i in range(0, len(plist), chunk):
        part = plist[i:i + chunk]
        r = subprocess.run(base + part, capture_output=True, text=True)
        if r.returncode not in (0, 1):
            raise SystemExit("moec failed (status %d): %s" % (r.returncode, r.stderr[-2000:]))
        for d in json.loads(r.stdout or "[]"):
            if d.get("severity") != "error" or d.get("id") in IGNORED_IDS:
                continue
            f = d.get("file")
            name = paths.get(f) or paths.get(os.path.abspath(f or "")) or os.path.basename(f or "").rsplit(".", 1)[0]
            if name in errors:
                errors[name].append({"id": d["id"], "message": d["message"]})
    return errors


_EXPLAIN_LINE = re.compile(r"^\s+" + re.escape(TARGET) + r"\s+(\S+)\s+(.*?)\s*$")


def moec_phase(moec, diag_id, cache):
    """{'severity', 'where', 'phase'} of diag_id on TARGET per `moec explain` (phase None: unknown)."""
    if diag_id in cache:
        return cache[diag_id]
    r = subprocess.run([moec, "explain", diag_id], capture_output=True, text=True)
    info = {"severity": None, "where": None, "phase": None}
    for line in r.stdout.splitlines():
        mt = _EXPLAIN_LINE.match(line)
        if not mt:
            continue
        sev, rest = mt.groups()
        phase = CONFIG_PHASE
        where = rest
        for par in re.findall(r"\(([^()]*)\)", rest):
            head = re.split(r"[,;]", par, 1)[0].strip()
            if head in PHASES:
                phase = head
                where = rest[:rest.rfind("(" + par)].strip()
        info = {"severity": sev, "where": where, "phase": phase if sev == "error" else None}
        break
    cache[diag_id] = info
    return info


def beyond_oracle(info):
    """True when the check (moec_phase's info) is one the oracle does not execute."""
    if info["phase"] is None:
        return False  # unknown phase, or moec says the check is not an error on TARGET
    if (info["where"] or "").startswith("transformer_engine/"):
        return True
    return info["phase"] not in ORACLE_PHASES


def _oracle_worker(cfg):
    import oracle
    t = time.time()
    v = oracle.run(cfg["oracle"])
    v["seconds"] = round(time.time() - t, 3)
    return cfg["name"], v


def _init_worker():
    import oracle
    oracle.init()


def load_known(path):
    known = {}
    if os.path.exists(path):
        for line in open(path):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, _, reason = line.partition("\t")
            known[key.strip()] = reason.strip()
    return known


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--moec", default=os.environ.get("MOEC"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--summary")
    ap.add_argument("--known", default=os.path.join(HERE, "known-disagreements.txt"))
    ap.add_argument("--keep", help="directory to keep the generated .moe files in")
    a = ap.parse_args()
    if not a.moec:
        ap.error("give --moec or set MOEC")

    t0 = time.time()
    configs = generate.generate(a.count, a.seed)
    use_target = moec_supports_target(a.moec)
    workdir = a.keep or tempfile.mkdtemp(prefix="moec-megatron-diff-")
    os.makedirs(workdir, exist_ok=True)
    moec_err = run_moec(a.moec, configs, workdir, use_target)
    t_moec = time.time() - t0

    t1 = time.time()
    verdicts = {}
    with mp.get_context("spawn").Pool(a.jobs, initializer=_init_worker, maxtasksperchild=400) as pool:
        for name, v in pool.imap_unordered(_oracle_worker, configs, chunksize=4):
            verdicts[name] = v
    t_oracle = time.time() - t1

    cats = collections.Counter()
    phases = {}  # moec explain cache: diagnostic ID -> phase info
    groups = collections.OrderedDict()
    per_config = []
    for c in configs:
        n = c["name"]
        v = verdicts[n]
        me = moec_err[n]
        m_rej = bool(me)
        if v["verdict"] == "oracle-error":
            cat = "oracle-error"
            key = "oracle-error|%s|%s" % (v["where"], _norm(v["message"]))
        elif v["verdict"] == "accept" and not m_rej:
            cat, key = "agree-accept", None
        elif v["verdict"] == "reject" and m_rej:
            cat, key = "agree-reject", None
        elif v["verdict"] == "reject":
            cat = "missed"
            key = "missed|%s|%s" % (v["where"], _norm(v["message"]))
        else:
            ids = sorted({e["id"] for e in me})
            cat = "beyond-oracle" if all(beyond_oracle(moec_phase(a.moec, i, phases)) for i in ids) \
                else "false-error"
            key = "%s|%s" % (cat, ",".join(ids))
        cats[cat] += 1
        per_config.append({"name": n, "category": cat, "key": key, "megatron": v, "moec_errors": me})
        if key:
            g = groups.setdefault(key, {"key": key, "category": cat, "count": 0, "examples": []})
            g["count"] += 1
            # keep the smallest example (fewest non-default settings ~ shortest .moe text)
            g["examples"].append((len(c["moe"]), n))
    byname = {c["name"]: c for c in configs}
    known = load_known(a.known)
    failed_keys = []
    for g in groups.values():
        g["examples"].sort()
        ex = byname[g["examples"][0][1]]
        pc = next(p for p in per_config if p["name"] == ex["name"])
        g["example"] = {"name": ex["name"], "moe": ex["moe"], "bridge": ex["oracle"],
                        "megatron": pc["megatron"], "moec_errors": pc["moec_errors"]}
        g["examples"] = [n for _, n in g["examples"][:10]]
        g["known"] = g["key"] in known
        if g["known"]:
            g["reason"] = known[g["key"]]
        elif g["category"] in ("missed", "false-error", "oracle-error"):
            failed_keys.append(g["key"])

    passed = cats["agree-accept"] + cats["agree-reject"]
    beyond = cats["beyond-oracle"]
    failed = a.count - passed - beyond
    print("moec: %s (target flag %s); oracle: Megatron-Bridge 0.3.1 / Megatron-Core 0.16.1"
          % (a.moec, "used" if use_target else "NOT supported: checked without --target"))
    print("configurations: %d (seed %d); moec %.1fs, oracle %.1fs with %d workers"
          % (a.count, a.seed, t_moec, t_oracle, a.jobs))
    for k in ("agree-accept", "agree-reject", "missed", "false-error", "beyond-oracle", "oracle-error"):
        print("  %-13s %d" % (k, cats[k]))
    print("oracle executes: %s; moec IDs seen in false errors, by phase on %s:"
          % (", ".join(sorted(ORACLE_PHASES)), TARGET))
    for i, info in sorted(phases.items()):
        print("  %-34s %-17s %s%s" % (i, info["phase"] or "?", info["where"] or "-",
                                      "  [beyond the oracle]" if beyond_oracle(info) else ""))
    for cat in ("missed", "false-error", "oracle-error", "beyond-oracle"):
        gs = [g for g in groups.values() if g["category"] == cat]
        if not gs:
            continue
        print("\n== %s: %d groups" % (cat, len(gs)))
        for g in sorted(gs, key=lambda g: -g["count"]):
            ex = g["example"]
            print("\n[%d] %s%s" % (g["count"], g["key"], "  (known: %s)" % g["reason"] if g["known"] else ""))
            mg = ex["megatron"]
            if mg["verdict"] != "accept":
                print("  megatron: %s %s at %s: %s" % (mg["verdict"], mg.get("type"), mg.get("where"), mg.get("message")))
            else:
                print("  megatron: accept%s" % ("  (%s)" % mg["note"] if mg.get("note") else ""))
            for e in ex["moec_errors"]:
                info = phases.get(e["id"])
                print("  moec: %s: %s%s" % (e["id"], e["message"],
                                            "  [%s: %s]" % (info["phase"], info["where"]) if info else ""))
            print("  example %s:" % ex["name"])
            print("    " + ex["moe"].rstrip().replace("\n", "\n    "))
            print("    bridge: " + json.dumps(ex["bridge"]["bridge"], sort_keys=True))
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump({"count": a.count, "seed": a.seed, "target_flag": use_target,
                       "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "seconds": {"moec": round(t_moec, 1), "oracle": round(t_oracle, 1)},
                       "categories": dict(cats), "oracle_phases": sorted(ORACLE_PHASES),
                       "moec_phases": phases, "groups": list(groups.values()),
                       "configs": per_config}, f, indent=1)
    print("\ndifferential: %d passed, %d failed (%d more beyond the oracle: moec errors in phases it does not run)"
          % (passed, failed, beyond))
    return 1 if failed_keys else 0


if __name__ == "__main__":
    sys.exit(main())
