"""Check moec's SARIF output against the SARIF 2.1.0 structure and against
moec's JSON output for the same input.

usage: check_sarif.py OUT.sarif RULES.txt OUT.json

RULES.txt is the output of `moec check --list-rules` (the ID is the first
word of each line). Every rule is declared once, each result's ruleIndex
names the rule with its ruleId, and result i says what JSON diagnostic i says:
level, message, location (uri, startLine, startColumn, endLine, endColumn),
fixes exactly when there are fix-its, and the recipe (sweep point) as a
property. Prints every problem and exits 1 if there is one.
"""
import json
import sys

LEVELS = {"error": "error", "warning": "warning", "remark": "note"}


def main():
    sarif = json.load(open(sys.argv[1]))
    rule_ids = [line.split()[0] for line in open(sys.argv[2]) if line.strip()]
    diags = json.load(open(sys.argv[3]))
    problems = []

    def expect(cond, what):
        if not cond:
            problems.append(what)

    expect(sarif.get("version") == "2.1.0", "version is %r" % sarif.get("version"))
    expect("sarif-2.1.0" in sarif.get("$schema", ""), "$schema is %r" % sarif.get("$schema"))
    runs = sarif.get("runs")
    expect(isinstance(runs, list) and len(runs) == 1, "expected one run")
    run = runs[0]
    driver = run["tool"]["driver"]
    expect(driver.get("name") == "moec", "driver.name is %r" % driver.get("name"))
    expect(isinstance(driver.get("version"), str) and driver["version"], "driver.version missing")
    rules = driver.get("rules", [])
    ids = [r.get("id") for r in rules]
    expect(len(ids) == len(set(ids)), "a rule is declared twice")
    expect(set(ids) == set(rule_ids),
           "rules differ from --list-rules: missing %s, extra %s"
           % (sorted(set(rule_ids) - set(ids)), sorted(set(ids) - set(rule_ids))))
    for r in rules:
        expect(r.get("shortDescription", {}).get("text"), "rule %s: no shortDescription" % r.get("id"))
        expect(r.get("fullDescription", {}).get("text"), "rule %s: no fullDescription" % r.get("id"))
        expect(r.get("defaultConfiguration", {}).get("level") in ("error", "warning", "note"),
               "rule %s: bad default level" % r.get("id"))

    results = run.get("results")
    expect(isinstance(results, list), "results is not a list")
    expect(len(results) == len(diags), "%d results for %d diagnostics" % (len(results), len(diags)))
    for i, (res, d) in enumerate(zip(results, diags)):
        where = "results[%d] (%s)" % (i, d["id"])
        expect(res.get("ruleId") == d["id"], "%s: ruleId %r" % (where, res.get("ruleId")))
        index = res.get("ruleIndex")
        expect(isinstance(index, int) and 0 <= index < len(rules) and rules[index]["id"] == res.get("ruleId"),
               "%s: ruleIndex %r does not name rule %r" % (where, index, res.get("ruleId")))
        expect(res.get("level") == LEVELS[d["severity"]], "%s: level %r" % (where, res.get("level")))
        expect(res.get("message", {}).get("text") == d["message"], "%s: message %r" % (where, res.get("message")))
        locations = res.get("locations", [])
        if d["file"] is None:
            expect(locations == [], "%s: a location for a diagnostic without one" % where)
        else:
            expect(len(locations) == 1, "%s: %d locations" % (where, len(locations)))
            phys = locations[0]["physicalLocation"]
            expect(phys["artifactLocation"]["uri"] == d["file"], "%s: uri %r" % (where, phys["artifactLocation"]))
            region = phys["region"]
            for key, jkey in (("startLine", "line"), ("startColumn", "column"),
                              ("endLine", "end_line"), ("endColumn", "end_column")):
                expect(region.get(key) == d[jkey], "%s: region.%s %r, JSON %s %r" % (where, key, region.get(key), jkey, d[jkey]))
        fixes = res.get("fixes", [])
        expect(len(fixes) == len(d["fixits"]), "%s: %d fixes for %d fix-its" % (where, len(fixes), len(d["fixits"])))
        for fix, f in zip(fixes, d["fixits"]):
            change = fix["artifactChanges"][0]
            expect(change["artifactLocation"]["uri"] == f["file"], "%s: fix uri %r" % (where, change["artifactLocation"]))
            rep = change["replacements"][0]
            expect(rep["insertedContent"]["text"] == f["replacement"], "%s: fix text %r" % (where, rep["insertedContent"]))
            expect(rep["deletedRegion"]["startLine"] == f["line"] and rep["deletedRegion"]["startColumn"] == f["column"]
                   and rep["deletedRegion"]["endColumn"] == f["end_column"],
                   "%s: fix region %r" % (where, rep["deletedRegion"]))
        recipe = res.get("properties", {}).get("recipe")
        expect(recipe == d["recipe"], "%s: properties.recipe %r, JSON recipe %r" % (where, recipe, d["recipe"]))
        related = res.get("relatedLocations", [])
        expect([r["message"]["text"] for r in related] == [n["message"] for n in d["notes"]],
               "%s: relatedLocations %r" % (where, related))

    for p in problems:
        print("check_sarif.py: " + p, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
