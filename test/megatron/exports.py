#!/usr/bin/env python3
"""Do moec's Megatron-Bridge exports of examples/ start on the real Megatron-Bridge 0.3.1?

For every recipe (and sweep point) of every .moe file under examples/ whose model has a
Bridge 0.3.1 recipe this suite can build offline (test/megatron/oracle.py: RECIPES; the
Qwen3-VL MoE models map to recipes/qwen_vl/qwen3_vl.py, whose recipe reads only the
config.json in the oracle's offline HF cache), this
  1. runs `moec export --to megatron-bridge --target megatron-bridge@0.3.1 FILE --recipe NAME`
     (the overrides line; `--format yaml` once more, only to read its `# moec:` header for
     the GPU and GPU count), and collects the `environment NAME=VALUE` notes;
  2. builds the Bridge recipe the export is meant for. moec names it as `moec launch` does
     (docs/megatron-bridge.md: the .moe recipe's name when it ends in `_config`, else
     `<model>_pretrain_config`); when Bridge 0.3.1 has no recipe of that name (the published
     perf-recipe names come from later Bridge releases) the model's base recipe
     `<catalog model>_pretrain_config` is used, and the line says so;
  3. applies the overrides with Bridge 0.3.1's OWN override mechanism,
     megatron.bridge.training.utils.omegaconf_utils.process_config_with_overrides
     (what Bridge's training scripts do with their command-line overrides: Hydra override
     parser on an OmegaConf view of the ConfigContainer, then back onto the dataclasses),
     with the noted environment variables set;
  4. runs the same start-up validation as the differential oracle (oracle.run: runtime
     config update and validate(), micro-batch calculator, process groups on the fake
     backend, the layer split of every pipeline stage, the MoE dispatcher's constructor).
Prints per point `accepted` or `rejected` with the exception and the raising file:line,
and closes with `exports: N passed, M failed`. Exit 0 when nothing failed.

Usage: PY=$(scripts/megatron-venv.sh); $PY test/megatron/exports.py --moec build/tools/moec/moec
       [--examples DIR] [--verbose]   (not registered with ctest)
"""

import argparse
import glob
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import oracle  # noqa: E402

TARGET = "megatron-bridge@0.3.1"
ENV_NOTE = re.compile(r"^moec export: note: environment ([A-Za-z_][A-Za-z0-9_]*)=(\S*)")
HEADER = re.compile(r"^# moec: (.*)$", re.M)


def export(moec, path, point=None, fmt="overrides"):
    cmd = [moec, "export", "--to", "megatron-bridge", "--target", TARGET, "--format", fmt, path]
    if point is not None:
        cmd += ["--recipe", point]
    return subprocess.run(cmd, capture_output=True, text=True)


def points_of(moec, path):
    """The recipe / sweep-point names of a file, as `moec export` lists them (exit 2)."""
    r = export(moec, path)
    if r.returncode == 2 and "choose one with --recipe" in r.stderr:
        lines = r.stderr.split("choose one with --recipe:", 1)[1].splitlines()
        return [ln.strip() for ln in lines if ln.startswith("  ") and ln.strip()], None
    if r.returncode == 0:
        names = re.findall(r"^\s*recipe\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{", open(path).read(), re.M)
        return names[:1] or [None], None
    return [], r


def catalog_base(path, model):
    """The catalog model a user model extends (`model X extends Y`), else the model itself."""
    seen = set()
    text = open(path).read()
    while model not in oracle.RECIPES and model not in seen:
        seen.add(model)
        mt = re.search(r"\bmodel\s+%s\s+extends\s+([A-Za-z_][A-Za-z0-9_]*)" % re.escape(model), text)
        if not mt:
            break
        model = mt.group(1)
    return model


def bridge_recipe(point_name, model, base):
    """(function name, note): the Bridge 0.3.1 recipe function the export is applied to."""
    import megatron.bridge.recipes as recipes
    rname = (point_name or "").split("[", 1)[0]
    named = rname if rname.endswith("_config") else "%s_pretrain_config" % model
    if hasattr(recipes, named):
        return named, ""
    fallback = "%s_pretrain_config" % base
    return fallback, " (moec names %s; Bridge 0.3.1 has no such recipe)" % named


_BAD_CACHE = {}


def snapshot(moec):
    """Run a private copy of the moec binary: the build tree's may be rebuilt meanwhile."""
    import shutil
    import tempfile
    import time
    d = tempfile.mkdtemp(prefix="moec-exports-")
    dst = os.path.join(d, "moec")
    for _ in range(60):
        try:
            shutil.copy2(moec, dst)
            if subprocess.run([dst, "--version"], capture_output=True).returncode == 0:
                return dst
        except OSError:
            pass
        time.sleep(2)
    raise SystemExit("exports: cannot run %s" % moec)


def bad_overrides(base, fn, gpu, overrides):
    """[(override, message)] of the overrides Bridge's Hydra parser refuses, each tried alone
    on the OmegaConf view of the freshly built recipe (omegaconf_utils.parse_hydra_overrides)."""
    import contextlib
    import io
    import torch
    from megatron.bridge.training.utils.omegaconf_utils import (
        create_omegaconf_dict_config, parse_hydra_overrides)
    import megatron.bridge.recipes as recipes
    if fn not in _BAD_CACHE:
        props = oracle._Props(gpu)
        saved = torch.cuda.get_device_properties
        torch.cuda.get_device_properties = lambda *a, **k: props
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                _BAD_CACHE[fn] = getattr(recipes, fn)()
        finally:
            torch.cuda.get_device_properties = saved
    out = []
    for o in overrides:
        omega, _ = create_omegaconf_dict_config(_BAD_CACHE[fn])
        try:
            parse_hydra_overrides(omega, [o])
        except Exception as e:  # noqa: BLE001 - OverridesError wraps Hydra's errors
            msg = " ".join(str(e).split())
            out.append((o, msg.replace("Failed to parse Hydra overrides: ", "")[:200]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moec", default=os.environ.get("MOEC"), required=not os.environ.get("MOEC"))
    ap.add_argument("--examples", default=os.path.join(ROOT, "examples"))
    ap.add_argument("--verbose", action="store_true", help="print the overrides of each point")
    a = ap.parse_args()
    oracle.init()
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides
    a.moec = snapshot(a.moec)

    passed = failed = 0
    skipped = {}
    files = sorted(glob.glob(os.path.join(a.examples, "**", "*.moe"), recursive=True))
    for path in files:
        rel = os.path.relpath(path, ROOT)
        points, err = points_of(a.moec, path)
        if err is not None:
            why = "moec export refused it (exit %d)" % err.returncode
            skipped.setdefault(why, []).append(rel)
            continue
        for point in points:
            label = rel + (" --recipe '%s'" % point if point else "")
            y = export(a.moec, path, point, "yaml")
            hdr = HEADER.search(y.stdout or "")
            if y.returncode != 0 or not hdr:
                skipped.setdefault("moec export refused it (exit %d)" % y.returncode, []).append(label)
                continue
            info = dict(kv.split("=", 1) for kv in hdr.group(1).split() if "=" in kv)
            model = info.get("model", "?")
            base = catalog_base(path, model)
            if base not in oracle.RECIPES:
                skipped.setdefault("model has no Bridge 0.3.1 recipe the suite can build offline",
                                   []).append("%s (%s)" % (label, model))
                continue
            gpu, gpus = info.get("gpu"), int(info.get("gpus", "0") or 0)
            if gpu not in oracle.GPU_PROPS:
                skipped.setdefault("GPU not described to the oracle", []).append("%s (%s)" % (label, gpu))
                continue
            r = export(a.moec, path, point, "overrides")
            if r.returncode != 0:
                failed += 1
                print("%s: FAILED: moec export exit %d: %s" % (label, r.returncode, r.stderr.strip()[-300:]))
                continue
            overrides = shlex.split(r.stdout)
            env = dict(m.groups() for m in map(ENV_NOTE.match, r.stderr.splitlines()) if m)
            fn, note = bridge_recipe(point, model, base)
            def validate(with_overrides):
                """The oracle on the Bridge recipe with these overrides, in the export's environment."""
                saved = {k: os.environ.get(k) for k in env}
                os.environ.update(env)
                try:
                    return oracle.run({"gpu": gpu, "gpus": gpus, "model_name": base, "bridge": None},
                                      recipe=("megatron.bridge.recipes", fn),
                                      apply=lambda cfg: process_config_with_overrides(cfg, cli_overrides=with_overrides))
                finally:
                    for k, old in saved.items():
                        if old is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = old

            v = validate(overrides)
            head = "%s: %s on %s x %d, recipe %s%s" % (label, model, gpu, gpus, fn, note)
            if v["verdict"] == "accept":
                passed += 1
                print("%s: accepted" % head)
            else:
                failed += 1
                print("%s: rejected at %s: %s: %s (%s, in %s)"
                      % (head, v.get("stage"), v.get("type"), v.get("message"), v.get("where"), v.get("function")))
                if v.get("stage") == "apply" and v.get("type") == "OverridesError":
                    # Diagnosis only (the point has failed): which overrides Bridge's parser
                    # refuses one by one, and what the validation says without them.
                    bad = bad_overrides(base, fn, gpu, overrides)
                    for o, msg in bad:
                        print("    override refused: %s: %s" % (o, msg))
                    v2 = validate([o for o in overrides if o not in dict(bad)])
                    if v2["verdict"] == "accept":
                        print("    without them: accepted")
                    else:
                        print("    without them: rejected at %s: %s: %s (%s, in %s)"
                              % (v2.get("stage"), v2.get("type"), v2.get("message"), v2.get("where"),
                                 v2.get("function")))
            if a.verbose:
                print("    overrides: " + r.stdout.strip())
                if env:
                    print("    env: " + " ".join("%s=%s" % kv for kv in sorted(env.items())))
    for why, items in sorted(skipped.items()):
        print("skipped, %s: %d: %s" % (why, len(items), ", ".join(items)))
    print("exports: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
