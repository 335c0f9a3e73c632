#!/usr/bin/env python3
"""Bridge 0.3.1's MoE model providers whose recipes need a Hugging Face checkpoint: does
`moec import` define each model as Bridge builds it?

The recipes of these models (Moonlight, DeepSeek-V2-Lite, GLM-4.5 and 4.5-Air, GPT-OSS) call
AutoBridge.from_hf_pretrained, which this suite cannot do offline; their model providers need
nothing. For each provider in PROVIDERS this
  1. instantiates it with Bridge 0.3.1 and writes its fields as the `model:` section of a
     configuration (the plain values, as ConfigContainer.to_yaml() writes them), with a batch
     and a 4K sequence;
  2. runs `moec import --from megatron-bridge` on it: the recipe names the catalog model the
     fields match, or defines one;
  3. runs `moec check --no-planner --dump-recipe` on the result and compares the lowered
     model (its summary line) with the provider's own values;
     The summary carries the RoPE base (theta, Megatron's rotary_base) and the routing
     weights' scaling factor, so a catalog model the import names is checked on them too.
Prints one line per provider; exit 0 when every model came in as Bridge builds it.

Usage: PY=$(scripts/megatron-venv.sh); $PY test/megatron/providers.py --moec build/tools/moec/moec
"""

import argparse
import dataclasses
import enum
import os
import re
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402,F401  (puts the import-time stand-ins on sys.path)

# Catalog models a provider may match exactly (lib/Catalog/models.moe): then the import names
# it, and the lowered model is compared all the same.
CATALOG_MATCHES = {"deepseek_v2_lite", "moonlight_16b", "glm45_355b", "glm45_air_106b"}
PROVIDERS = ["MoonlightModelProvider16B", "DeepSeekV2LiteModelProvider", "GLM45AirModelProvider106B",
             "GLM45ModelProvider355B", "GPTOSSProvider20B", "GPTOSSProvider120B"]


def plain(v):
    if isinstance(v, enum.Enum):
        return v.name
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)) and all(isinstance(x, (bool, int, float, str)) for x in v):
        return list(v)
    raise TypeError


def expected(p):
    """The summary moec should print for provider p (RecipePrinter's model line)."""
    freq = p.moe_layer_freq
    dense = 0
    if isinstance(freq, list):
        while dense < len(freq) and freq[dense] == 0:
            dense += 1
    mla = bool(getattr(p, "q_lora_rank", None) or getattr(p, "kv_lora_rank", None))
    want = {"layers": p.num_layers, "hidden": p.hidden_size, "heads": p.num_attention_heads,
            "vocab": p.vocab_size, "mtp": p.mtp_num_layers or 0, "experts": p.num_moe_experts,
            "top_k": p.moe_router_topk, "moe_ffn": p.moe_ffn_hidden_size,
            "shared": 1 if p.moe_shared_expert_intermediate_size else 0, "dense": dense,
            "router": p.moe_router_score_function,
            "bias": bool(p.moe_router_enable_expert_bias),
            # moe_router_topk_scaling_factor (None: no factor)
            "scaling": float(p.moe_router_topk_scaling_factor) if p.moe_router_topk_scaling_factor else None,
            # rotary_base; moec prints none when the model leaves Megatron's default of 10000
            "theta": int(p.rotary_base) if p.rotary_base and p.rotary_base != 10000 else None}
    if not mla:
        want["kv_heads"] = p.num_query_groups or p.num_attention_heads
        want["head_dim"] = p.kv_channels or p.hidden_size // p.num_attention_heads
    else:
        want.update({"q_lora": p.q_lora_rank or 0, "kv_lora": p.kv_lora_rank, "qk": p.qk_head_dim,
                     "rope": p.qk_pos_emb_head_dim, "v": p.v_head_dim})
    return want


def parse_summary(line):
    got = {}
    for k, v in re.findall(r"(\w+)=(\w+)", line):
        got[k] = v
    m = re.search(r"moe\(experts=(\d+) top_k=(\d+) ffn=(\d+) shared=(\d+) dense=(\d+) router=(\w+)( bias)?"
                  r"(?: scaling=([\d.e+-]+))?\)", line)
    if m:
        got.update({"experts": m.group(1), "top_k": m.group(2), "moe_ffn": m.group(3), "shared": m.group(4),
                    "dense": m.group(5), "router": m.group(6), "bias": bool(m.group(7)),
                    "scaling": float(m.group(8)) if m.group(8) else None})
    theta = re.search(r" theta=(\d+)", line)
    got["theta"] = int(theta.group(1)) if theta and int(theta.group(1)) != 10000 else None
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moec", required=True)
    a = ap.parse_args()
    import megatron.bridge.models as models

    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in PROVIDERS:
            p = getattr(models, name)()
            model = {}
            for f in dataclasses.fields(p):
                try:
                    model[f.name] = plain(getattr(p, f.name, None))
                except TypeError:
                    pass
            model["seq_length"] = 4096
            cfg = {"model": model, "train": {"micro_batch_size": 1, "global_batch_size": 64}}
            yml, moe = os.path.join(tmp, name + ".yaml"), os.path.join(tmp, name + ".moe")
            with open(yml, "w") as fh:
                yaml.safe_dump(cfg, fh, sort_keys=False)

            def fail(why):
                nonlocal failed
                failed += 1
                print(f"{name}: FAIL {why}")

            imp = subprocess.run([a.moec, "import", "--from", "megatron-bridge", yml, "--gpu", "b200", "--gpus",
                                  "64", "-o", moe], capture_output=True, text=True)
            if imp.returncode != 0:
                fail("import: " + imp.stderr.strip().splitlines()[0])
                continue
            # A provider whose fields are a catalog model's is named; any other is defined.
            named = re.search(r"^  model\s*=\s*(\w+)", open(moe).read(), re.M)
            if "the recipe defines model" not in imp.stderr and not (named and named.group(1) in CATALOG_MATCHES):
                fail("import neither defined the model nor named a catalog model")
                continue
            chk = subprocess.run([a.moec, "check", "--no-planner", "--dump-recipe", moe], capture_output=True,
                                 text=True)
            line = next((ln for ln in chk.stdout.splitlines() if ln.strip().startswith("model: ")), None)
            if chk.returncode != 0 or line is None:
                fail("check: " + (chk.stderr.strip().splitlines() or ["no model line"])[0])
                continue
            got = parse_summary(line)
            diffs = [f"{k} {got.get(k)} != {v}" for k, v in expected(p).items() if str(got.get(k)) != str(v)]
            if diffs:
                fail("model differs: " + "; ".join(diffs))
                continue
            warned = len(re.findall(r"the model schema has no", imp.stderr))
            print(f"{name}: ok ({line.strip()[7:]}; {warned} architecture features the schema lacks, warned)")
    print(f"providers: {len(PROVIDERS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
