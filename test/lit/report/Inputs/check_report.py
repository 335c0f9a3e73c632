#!/usr/bin/env python3
"""Renders a `moec report` page in headless Chromium and checks what it drew.

  check_report.py PAGE.html --plan PLAN.json [--sweep SWEEP.csv] --out DIR [--no-screenshot]

1. A screenshot (DIR/page.png) is written, decodes as a PNG and is not
   blank: many colours and a fair share of non-white pixels.
2. Loading the page logs nothing to the console (script errors, resources or
   scripts refused by the page's Content-Security-Policy).
3. The DOM Chromium built has the figures with the elements the plan calls
   for: one bar group per pipeline stage and the HBM line; one timeline row
   per pipeline rank with that rank's forward and backward ops in the plan's
   order; five grid panels with one cell per rank, coloured by the plan's
   groups; the non-zero step-time parts; and with --sweep, one marker per
   predicted point, feasible ones as `moec sweep --csv` ranks them.

The expected counts come from `moec plan --format json` and `moec sweep
--csv`, not from the page. Exits 1 with one line per failed check.
"""
import argparse
import csv
import html.parser
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
failures = []


def check(cond, message):
    if not cond:
        failures.append(message)
    return cond


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children = tag, dict(attrs), parent, []
        self.text = ""

    def classes(self):
        return set((self.attrs.get("class") or "").split())

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def find_all(self, tag=None, cls=None, **attrs):
        for n in self.walk():
            if tag and n.tag != tag:
                continue
            if cls and cls not in n.classes():
                continue
            if any(n.attrs.get(k.replace("_", "-")) != v for k, v in attrs.items()):
                continue
            yield n


class Tree(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.children.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_data(self, data):
        self.cur.text += data

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.cur = n.parent


def chromium(args, user_dir):
    cmd = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
           "--disable-dev-shm-usage", "--user-data-dir=" + user_dir] + args
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit, non-interlaced PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or interlace or colour not in (2, 6):
        raise ValueError(f"unsupported PNG (depth {depth}, colour type {colour}, interlace {interlace})")
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def check_screenshot(page, out, user_dir):
    png = os.path.join(out, "page.png")
    if os.path.exists(png):
        os.remove(png)
    r = chromium(["--screenshot=" + png, "--window-size=1200,2400", "file://" + os.path.abspath(page)], user_dir)
    if not check(r.returncode == 0 and os.path.exists(png), f"chromium wrote no screenshot (exit {r.returncode})"):
        return
    width, height, rows = png_pixels(png)
    check((width, height) == (1200, 2400), f"screenshot is {width}x{height}, expected 1200x2400")
    colours, inked = set(), 0
    for row in rows[::2]:
        for px in row[::2]:
            colours.add(px)
            inked += px != (255, 255, 255)
    share = inked / (len(rows[::2]) * len(rows[0][::2]))
    check(len(colours) >= 50, f"screenshot has only {len(colours)} colours: blank or unstyled")
    check(share >= 0.05, f"screenshot is {100 * share:.1f}% non-white: nearly blank")
    print(f"screenshot {png}: {width}x{height}, {len(colours)} colours, {100 * share:.0f}% non-white")


def dump_dom(page, user_dir):
    r = chromium(["--dump-dom", "--enable-logging=stderr", "--v=0", "file://" + os.path.abspath(page)], user_dir)
    check(r.returncode == 0, f"chromium --dump-dom exited {r.returncode}")
    console = [l for l in r.stderr.splitlines() if ":CONSOLE" in l or "Uncaught" in l or "Refused to" in l]
    for line in console:
        check(False, "console: " + line.strip())
    tree = Tree()
    tree.feed(r.stdout)
    return tree.root


def check_memory(fig, plan):
    stages = list(fig.find_all("g", "stage"))
    per_stage = plan["memory"]["per_stage"]
    check(len(stages) == len(per_stage), f"memory: {len(stages)} bar groups, plan has {len(per_stage)} stages")
    for g, s in zip(stages, per_stage):
        want = sorted(k for k, v in s["breakdown"].items() if v > 0)
        got = sorted(n.attrs.get("data-category") for n in g.find_all("rect", "seg"))
        check(got == want, f"memory stage {s['stage']}: segments {got}, plan has {want}")
    check(len(list(fig.find_all("line", "hbm"))) == 1, "memory: no single HBM line")


def check_schedule(fig, plan):
    rows = list(fig.find_all("g", "pp-rank"))
    sched = plan["pipeline"]["schedule"]
    check(len(rows) == plan["pipeline"]["pp"] == len(sched), f"schedule: {len(rows)} rows for pp {plan['pipeline']['pp']}")
    bands = 0
    for row, want in zip(rows, sched):
        # Ops in drawing order; a steady-state band stands for data-ops ops
        # from data-first-op on.
        got = []
        for node in row.walk():
            if node.tag != "g":
                continue
            if "op" in node.classes():
                kind = "F" if "fwd" in node.classes() else "B" if "bwd" in node.classes() else "?"
                got.append(f"{kind}{node.attrs.get('data-mb')}.{node.attrs.get('data-chunk')}")
            elif "steady" in node.classes():
                bands += 1
                first, count = int(node.attrs.get("data-first-op", -1)), int(node.attrs.get("data-ops", 0))
                check(first == len(got) and count > 0,
                      f"schedule rank {want['rank']}: band of {count} ops at op {first}, after {len(got)} drawn")
                got.extend(want["ops"][first:first + count] if first == len(got) else ["?"] * count)
        check(got == want["ops"], f"schedule rank {want['rank']}: drawn {got[:6]}..., plan {want['ops'][:6]}...")
    check(any(True for _ in fig.find_all("rect", "bubble")) == (plan["pipeline"]["pp"] > 1),
          "schedule: bubbles drawn iff pp > 1")
    check(bands in (0, len(rows)), f"schedule: {bands} steady-state bands for {len(rows)} stages")
    return bands


def check_grid(fig, plan):
    panels = {p.attrs.get("data-group"): p for p in fig.find_all("svg", "grid-panel")}
    # Hierarchical CP: a panel per level (cp.0, cp.1, ...) beside cp.
    groups = dict(plan["groups"])
    for level, level_groups in enumerate(plan.get("cp_hierarchy_groups", [])):
        groups[f"cp.{level}"] = level_groups
    want = sorted(["cp", "dp", "ep", "pp", "tp"] + [k for k in groups if k.startswith("cp.")])
    check(sorted(panels) == want, f"grid: panels {sorted(panels)}, expected {want}")
    world = plan["world_size"]
    for kind, panel in panels.items():
        cells = list(panel.find_all("rect", "rank"))
        check(len(cells) == world, f"grid {kind}: {len(cells)} cells for {world} ranks")
        index = {r: i for i, g in enumerate(groups.get(kind, [])) for r in g}
        wrong = [c.attrs.get("data-rank") for c in cells
                 if int(c.attrs.get("data-group-index", -2)) != index.get(int(c.attrs.get("data-rank", -1)))]
        check(not wrong, f"grid {kind}: ranks {wrong[:5]} coloured by the wrong group")
        fills = {}
        for c in cells:
            fills.setdefault(c.attrs["data-group-index"], set()).add(c.attrs.get("fill"))
        check(all(len(f) == 1 for f in fills.values()), f"grid {kind}: one group in several colours")


def check_time(fig, plan):
    drawn = {g.attrs.get("data-part") for g in fig.find_all("g", "part")}
    want = {k for k, v in plan["predicted"]["breakdown_s"].items() if v > 0}
    # host and optimizer time are in the page but not in the plan's breakdown_s.
    check(want <= drawn and drawn - want <= {"host", "optimizer"}, f"time: parts {sorted(drawn)}, plan {sorted(want)}")


def check_sweep(fig, rows):
    feasible = [r for r in rows if r["feasible"] == "true"]
    pts = list(fig.find_all("g", "pt"))
    drawn_feasible = [p for p in pts if "feasible" in p.classes()]
    check(len(drawn_feasible) == len(feasible), f"sweep: {len(drawn_feasible)} feasible markers, csv {len(feasible)}")
    check(len(list(fig.find_all("circle"))) >= len(feasible), "sweep: feasible points need circles")
    infeasible = [p for p in pts if "infeasible" in p.classes()]
    check(all(any(True for _ in p.find_all("path")) for p in infeasible), "sweep: infeasible points are crosses")
    check(len(pts) <= len(rows), f"sweep: {len(pts)} markers for {len(rows)} points")
    best = [p for p in pts if "best" in p.classes()]
    if feasible:
        check(len(best) == 1 and "feasible" in best[0].classes(), "sweep: no single best feasible point")
    table = list(fig.find_all("tr", "feasible")) + list(fig.find_all("tr", "infeasible"))
    check(len(table) == len(rows), f"sweep: table has {len(table)} rows, csv {len(rows)}")
    check(len(list(fig.find_all("line", "hbm"))) >= 1, "sweep: no HBM line")
    # Scaled to the data: the markers span most of the plot's height when
    # their speeds differ (an axis from zero squeezes close points together).
    ys = [float(n.attrs["cy"]) for p in pts for n in p.find_all("circle") if "ring" not in n.classes()]
    grid = [float(n.attrs["y1"]) for n in fig.find_all("line", "gridline")]
    speeds = {r["tokens_per_s_per_gpu"] for r in rows if r.get("tokens_per_s_per_gpu")}
    if len(ys) >= 2 and len(speeds) >= 2 and grid:
        span = (max(ys) - min(ys)) / (max(grid) - min(grid))
        check(span >= 0.5, f"sweep: markers span {100 * span:.0f}% of the plot's height")
    # Legible: no two point labels overlap (10-pixel font, ~5.6 pixels a character).
    boxes = []
    for t in fig.find_all("text", "pt-label"):
        x, y, w = float(t.attrs["x"]), float(t.attrs["y"]), 5.6 * len(t.text)
        x0 = x if t.attrs.get("text-anchor", "start") == "start" else x - w if t.attrs["text-anchor"] == "end" else x - w / 2
        boxes.append((x0, y - 10, x0 + w, y + 2))
    overlapping = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
                   if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]]
    check(not overlapping, f"sweep: {len(overlapping)} pairs of overlapping point labels")
    return len(pts), len(infeasible)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("page")
    ap.add_argument("--plan", required=True)
    ap.add_argument("--sweep")
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-screenshot", action="store_true", help="only the console and DOM checks")
    a = ap.parse_args()
    plan = json.load(open(a.plan))
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as user_dir:
        if not a.no_screenshot:
            check_screenshot(a.page, a.out, user_dir)
        root = dump_dom(a.page, user_dir)
    figures = {f.attrs.get("id"): f for f in root.find_all("figure")}
    want = ["grid", "memory", "schedule", "time"] + (["sweep"] if a.sweep else [])
    check(sorted(figures) == sorted(want), f"figures {sorted(figures)}, expected {sorted(want)}")
    if "memory" in figures:
        check_memory(figures["memory"], plan)
    bands = 0
    if "schedule" in figures:
        bands = check_schedule(figures["schedule"], plan)
    if "grid" in figures:
        check_grid(figures["grid"], plan)
    if "time" in figures:
        check_time(figures["time"], plan)
    summary = f"figures: {', '.join(sorted(figures))}"
    if bands:
        summary += f"; schedule: steady state banded on {bands} stages"
    if a.sweep and "sweep" in figures:
        rows = list(csv.DictReader(open(a.sweep)))
        plotted, crosses = check_sweep(figures["sweep"], rows)
        summary += f"; sweep: {plotted} markers, {crosses} infeasible"
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    if failures:
        return 1
    print(summary)
    print("report ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
