#!/usr/bin/env python3
"""Turns a .cu file into C++ for the CPU emulation (CudaEmu.h): includes the
emulation header first and rewrites every kernel launch
    name<...><<<grid, block[, shm[, stream]]>>>(args)
into
    ::moert::emu::launch(dim3(grid), dim3(block), [&] { name<...>(args); })
Usage: rewrite_cu.py IN.cu OUT.cpp"""
import re
import sys


def split_top(text):
    """Splits on commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def rewrite(src):
    out, pos = [], 0
    pattern = re.compile(r"([A-Za-z_]\w*(?:<[^<>;]*>)?)\s*<<<")
    while True:
        m = pattern.search(src, pos)
        if not m:
            out.append(src[pos:])
            return "".join(out)
        end_cfg = src.index(">>>", m.end())
        cfg = split_top(src[m.end():end_cfg])
        open_paren = src.index("(", end_cfg)
        depth, i = 0, open_paren
        while True:
            if src[i] == "(":
                depth += 1
            elif src[i] == ")":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        args = src[open_paren + 1:i]
        out.append(src[pos:m.start()])
        out.append("::moert::emu::launch(dim3(%s), dim3(%s), [&] { %s(%s); })"
                   % (cfg[0], cfg[1], m.group(1), args))
        pos = i + 1


def main():
    src = open(sys.argv[1]).read()
    text = '#include "CudaEmu.h"\n#line 1 "%s"\n%s' % (sys.argv[1], rewrite(src))
    open(sys.argv[2], "w").write(text)


if __name__ == "__main__":
    main()
