"""Compare moec's JSON output with an expected document.

usage: json_expect.py EXPECTED.json < actual.json

Objects must have exactly the expected keys and lists exactly the expected
length; the string "@ANY@" in EXPECTED matches any value (for line numbers in
the built-in catalog, which moves as the catalog grows). Prints every
mismatch with its path and exits 1 if there is one.
"""
import json
import sys


def compare(path, want, got, errors):
    if want == "@ANY@":
        return
    if isinstance(want, dict):
        if not isinstance(got, dict):
            errors.append("%s: expected an object, got %r" % (path, got))
            return
        if set(want) != set(got):
            errors.append("%s: keys %s, expected %s" % (path, sorted(got), sorted(want)))
        for key in want:
            if key in got:
                compare("%s.%s" % (path, key), want[key], got[key], errors)
        return
    if isinstance(want, list):
        if not isinstance(got, list):
            errors.append("%s: expected a list, got %r" % (path, got))
            return
        if len(want) != len(got):
            errors.append("%s: %d elements, expected %d" % (path, len(got), len(want)))
        for i, (w, g) in enumerate(zip(want, got)):
            compare("%s[%d]" % (path, i), w, g, errors)
        return
    # bool is an int in Python: compare types too, so that 1 != true.
    if type(want) is not type(got) or want != got:
        errors.append("%s: %r, expected %r" % (path, got, want))


def main():
    with open(sys.argv[1]) as f:
        want = json.load(f)
    text = sys.stdin.read()
    try:
        got = json.loads(text)
    except ValueError as e:
        sys.exit("json_expect.py: output is not JSON (%s):\n%s" % (e, text))
    errors = []
    compare("$", want, got, errors)
    for e in errors:
        print("json_expect.py: " + e, file=sys.stderr)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
