"""Tokenizes a .moe file with editors/textmate/moe.tmLanguage.json.

A small TextMate engine, enough for this grammar: single-line rules, at each
position the earliest match wins (the first rule on a tie), begin/end rules
with inner patterns where the end wins ties. Prints one line per scoped
token, `LINE:COL 'text' scope`, for FileCheck. Regexes are compiled with
Python's re, which also checks that they stay within the syntax both engines
share.
"""
import json
import re
import sys


def flatten(grammar, patterns):
    rules = []
    for p in patterns:
        if "include" in p:
            rules += flatten(grammar, [grammar["repository"][p["include"].lstrip("#")]])
        elif "match" in p or "begin" in p:
            rules.append(p)
        else:
            rules += flatten(grammar, p["patterns"])
    return rules


def emit(out, lineno, m, rule, key_name="name", key_captures="captures"):
    caps = rule.get(key_captures, {})
    if rule.get(key_name) and "0" not in caps and key_name == "name":
        out.append((lineno, m.start(), m.group(0), rule[key_name]))
    for group, spec in sorted(caps.items(), key=lambda kv: int(kv[0])):
        g = int(group)
        if m.group(g):
            out.append((lineno, m.start(g), m.group(g), spec["name"]))


def earliest(rules, line, pos):
    best = None
    for rule in rules:
        rx = rule["_begin"] if "begin" in rule else rule["_match"]
        m = rx.search(line, pos)
        if m and (best is None or m.start() < best[0].start()):
            best = (m, rule)
    return best


def tokenize(grammar, text):
    rules = flatten(grammar, grammar["patterns"])
    for rule in rules:
        if "match" in rule:
            rule["_match"] = re.compile(rule["match"])
        else:
            rule["_begin"] = re.compile(rule["begin"])
            rule["_end"] = re.compile(rule["end"])
            rule["_inner"] = flatten(grammar, rule.get("patterns", []))
            for inner in rule["_inner"]:
                inner["_match"] = re.compile(inner["match"])
    out = []
    for lineno, line in enumerate(text.split("\n"), 1):
        pos = 0
        while pos <= len(line):
            found = earliest(rules, line, pos)
            if not found:
                break
            m, rule = found
            if "match" in rule:
                emit(out, lineno, m, rule)
                pos = max(m.end(), pos + 1) if m.end() == m.start() else m.end()
                continue
            emit(out, lineno, m, rule, "_none", "beginCaptures")
            start, pos = m.start(), m.end()
            while True:
                end = rule["_end"].search(line, pos)
                inner = earliest(rule["_inner"], line, pos)
                if inner and (not end or inner[0].start() < end.start()):
                    emit(out, lineno, inner[0], inner[1])
                    pos = inner[0].end()
                    continue
                stop = end.end() if end else len(line)
                out.append((lineno, start, line[start:stop], rule["name"]))
                if end:
                    emit(out, lineno, end, rule, "_none", "endCaptures")
                pos = stop if stop > pos else pos + 1
                break
    return out


def main():
    grammar = json.load(open(sys.argv[1]))
    for lineno, col, text, scope in tokenize(grammar, open(sys.argv[2]).read()):
        print("%d:%d %r %s" % (lineno, col + 1, text, scope))


if __name__ == "__main__":
    main()
