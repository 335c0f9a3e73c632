"""Writes a Hugging Face checkpoint directory of catalog model tiny_moe (4 layers, the first
dense; hidden 64, 4 heads of 16, 2 key-value heads, 8 experts of 32, vocab 256) with every
weight zero, in BF16, sharded in two files listed by model.safetensors.index.json, as
transformers saves a model above its shard size: zero_hf_checkpoint.py DIR. With every weight
zero the logits are zero and the first loss is ln(256)."""
import json
import os
import struct
import sys

H, FFN, HEADS, KV, HD, EXPERTS, EFFN, VOCAB, LAYERS = 64, 128, 4, 2, 16, 8, 32, 256, 4


def tensors():
    yield "model.embed_tokens.weight", [VOCAB, H]
    yield "model.norm.weight", [H]
    yield "lm_head.weight", [VOCAB, H]
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        yield p + "input_layernorm.weight", [H]
        yield p + "post_attention_layernorm.weight", [H]
        for name, rows in (("q", HEADS * HD), ("k", KV * HD), ("v", KV * HD)):
            yield p + f"self_attn.{name}_proj.weight", [rows, H]
        yield p + "self_attn.o_proj.weight", [H, HEADS * HD]
        if layer == 0:
            for name, shape in (("gate", [FFN, H]), ("up", [FFN, H]), ("down", [H, FFN])):
                yield p + f"mlp.{name}_proj.weight", shape
            continue
        yield p + "mlp.gate.weight", [EXPERTS, H]
        for e in range(EXPERTS):
            for name, shape in (("gate", [EFFN, H]), ("up", [EFFN, H]), ("down", [H, EFFN])):
                yield p + f"mlp.experts.{e}.{name}_proj.weight", shape


def write(path, items):
    header, offset = {}, 0
    for name, shape in items:
        count = 1
        for d in shape:
            count *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + 2 * count]}
        offset += 2 * count
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(offset))


out = sys.argv[1]
os.makedirs(out, exist_ok=True)
items = list(tensors())
shards = {"model-00001-of-00002.safetensors": items[::2], "model-00002-of-00002.safetensors": items[1::2]}
for file, part in shards.items():
    write(os.path.join(out, file), part)
with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": {n: file for file, part in shards.items() for n, _ in part}}, f)
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump({"model_type": "qwen3_moe"}, f)
