#!/usr/bin/env python3
"""moerun-mkdata --images against transformers' Qwen2VLImageProcessor (transformers 4.57.1, the PIL
path that Qwen3-VL's processor derives from): random images of several sizes and modes (RGB, grey,
RGBA, palette; PNG and JPEG) are written with PIL, decoded into patches by moerun-mkdata, read
back here from PREFIX.vision.idx and PREFIX.vision.bin as docs/runtime.md lays them out (an
independent reader of the format), and compared with the processor's pixel_values and
image_grid_thw, configured as the mkdata flags say (Qwen3-VL's patch 16, merge 2, mean and std 0.5;
a pixel budget that makes some images grow, some shrink and one keep its size). The values must be
equal: both decode with libjpeg/libpng, resample with Pillow's fixed-point bicubic filter (the
horizontal pass, then the vertical, each rounded to 8 bits) and normalise in float32. One
exception, marked ORDER: Pillow 13 (python-pillow/Pillow#9549) runs the vertical pass first when
the height shrinks much more than the width, by a cost rule its stored source does not yet show;
moerun keeps the horizontal-first order, so there the values may differ by one 8-bit level (2/255
after the 0.5 normalisation) and no more. A control with another --image-std must differ.

Usage: PY=$(scripts/megatron-venv.sh); $PY test/megatron/image_patches.py --mkdata build/tools/moerun-mkdata/moerun-mkdata
"""

import argparse
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402,F401  (puts the import-time stand-ins on sys.path)
import numpy as np  # noqa: E402

MIN_PIXELS, MAX_PIXELS = 64 * 64, 160 * 160
# (width, height, mode, format): grows, shrinks, keeps its size (96 x 64: both divide by 32), odd sizes;
# the last shrinks its height (45 -> 32) while its width grows (123 -> 128): ORDER.
IMAGES = [(40, 30, "RGB", "PNG"), (300, 200, "RGB", "JPEG"), (96, 64, "RGB", "PNG"), (77, 131, "L", "PNG"),
          (150, 90, "RGBA", "PNG"), (64, 200, "P", "PNG"), (45, 123, "L", "JPEG"), (123, 45, "L", "JPEG")]
ORDER = {7}
ONE_LEVEL = 2 / 255 + 1e-6


def write_images(work):
    from PIL import Image
    rng = np.random.default_rng(7)
    paths = []
    for i, (w, h, mode, fmt) in enumerate(IMAGES):
        # Smooth gradients plus noise: resampling has structure to keep, JPEG something to compress.
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 3) % 256], -1)
        rgb = np.clip(base + rng.integers(-40, 40, base.shape), 0, 255).astype(np.uint8)
        img = Image.fromarray(rgb, "RGB")
        if mode == "L":
            img = img.convert("L")
        elif mode == "RGBA":
            alpha = Image.fromarray(rng.integers(0, 256, (h, w)).astype(np.uint8), "L")
            img = img.copy()
            img.putalpha(alpha)
        elif mode == "P":
            img = img.convert("P", palette=Image.ADAPTIVE, colors=64)
        path = os.path.join(work, f"img{i}.{fmt.lower()}")
        img.save(path, fmt, **({"quality": 85} if fmt == "JPEG" else {}))
        paths.append(path)
    return paths


def read_vision(prefix):
    """PREFIX.vision.{idx,bin} as docs/runtime.md lays them out: [(grid, values)]."""
    with open(prefix + ".vision.idx", "rb") as f:
        idx = f.read()
    assert idx[:8] == b"MOEVISN\0", idx[:8]
    version, count, patch, temporal, merge = struct.unpack_from("<5Q", idx, 8)
    mean_std = struct.unpack_from("<6f", idx, 48)
    values = np.fromfile(prefix + ".vision.bin", dtype="<f4")
    out, at = [], 72
    for _ in range(count):
        t, h, w, offset = struct.unpack_from("<4Q", idx, at)
        at += 32
        n = t * h * w * 3 * temporal * patch * patch
        out.append(((t, h, w), values[offset:offset + n].reshape(t * h * w, -1)))
    assert version == 1 and at == len(idx), (version, at, len(idx))
    return out, (patch, temporal, merge), mean_std


def reference(paths, std=0.5):
    from PIL import Image
    from transformers import Qwen2VLImageProcessor
    proc = Qwen2VLImageProcessor(patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3,
                                 image_std=[std] * 3, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    out = []
    for p in paths:
        r = proc(images=[Image.open(p)], return_tensors="np")
        out.append((tuple(int(v) for v in r["image_grid_thw"][0]), r["pixel_values"]))
    return out


def mkdata(tool, prefix, paths, std="0.5,0.5,0.5"):
    return subprocess.run([tool, "--out", prefix, "--images", ",".join(paths), "--min-pixels", str(MIN_PIXELS),
                           "--max-pixels", str(MAX_PIXELS), "--image-std", std], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mkdata", required=True)
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="moerun-images-") as work:
        paths = write_images(work)
        p = mkdata(args.mkdata, os.path.join(work, "corpus"), paths)
        if p.returncode != 0:
            print("moerun-mkdata failed:\n" + p.stdout)
            return 1
        print(p.stdout.strip())
        ours, geometry, mean_std = read_vision(os.path.join(work, "corpus"))
        if geometry != (16, 2, 2) or mean_std != (0.5,) * 6:
            print(f"the index says patch/temporal/merge {geometry}, mean and std {mean_std}")
            failed += 1
        for i, ((w, h, mode, fmt), (grid, got), (want_grid, want)) in enumerate(zip(IMAGES, ours, reference(paths))):
            worst = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
            same = grid == want_grid and worst <= (ONE_LEVEL if i in ORDER else 0.0)
            failed += not same
            verdict = ("equal to Qwen2VLImageProcessor" if worst == 0 else
                       f"within one level of Qwen2VLImageProcessor ({worst:.3g}; ORDER)" if same else
                       f"DIFFERS (worst {worst:.3g})")
            print(f"{w} x {h} {mode} {fmt}: grid {grid} (processor {want_grid}), {verdict}")
        # Control: another normalisation must show.
        p = mkdata(args.mkdata, os.path.join(work, "control"), paths[:1], std="0.25,0.5,0.5")
        control = read_vision(os.path.join(work, "control"))[0][0][1]
        told = not np.array_equal(control, reference(paths[:1])[0][1])
        failed += not told
        print(f"control (--image-std 0.25,0.5,0.5): {'told apart' if told else 'NOT told apart'}")
    print("image patches: all equal" if not failed else f"image patches: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
