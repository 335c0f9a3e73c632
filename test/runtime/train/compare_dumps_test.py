#!/usr/bin/env python3
"""compare_dumps.py's criterion on dumps written here: an equal run matches,
an error beyond the tolerance does not, and neither does a NaN or an infinity
in a tensor or a loss (a NaN compares false with everything, so a maximum of
errors would pass it over and a run that diverged would match)."""
import math
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_dumps  # noqa: E402


def write_run(directory, loss, tensors):
    os.makedirs(directory)
    with open(os.path.join(directory, "loss.txt"), "w") as f:
        for step, (ce, aux) in loss.items():
            f.write(f"{step} {ce!r} {aux!r}\n")
    for kind in ("grads", "params"):
        data = b"MOEDUMP1\n"
        for name, values in tensors.items():
            encoded = name.encode()
            data += struct.pack("<I", len(encoded)) + encoded + struct.pack("<Iq", 1, len(values))
            data += struct.pack(f"<{len(values)}f", *values)
        with open(os.path.join(directory, f"{kind}.rank0.bin"), "wb") as f:
            f.write(data)


class CompareDumps(unittest.TestCase):
    LOSS = {1: (5.5, 0.03)}
    TENSORS = {"w": [1.0, -2.0, 0.5]}

    def problems(self, loss, tensors):
        with tempfile.TemporaryDirectory() as tmp:
            write_run(os.path.join(tmp, "ref"), self.LOSS, self.TENSORS)
            write_run(os.path.join(tmp, "run"), loss, tensors)
            problems, _ = compare_dumps.compare(os.path.join(tmp, "ref"), os.path.join(tmp, "run"), 1e-5)
            return problems

    def test_an_equal_run_matches(self):
        self.assertEqual(self.problems(self.LOSS, self.TENSORS), [])

    def test_an_error_beyond_the_tolerance_does_not(self):
        self.assertTrue(self.problems(self.LOSS, {"w": [1.0, -2.0, 0.5001]}))

    def test_a_nan_or_an_infinity_does_not(self):
        for bad in (math.nan, math.inf):
            with self.subTest(bad=bad):
                self.assertTrue(self.problems(self.LOSS, {"w": [1.0, bad, 0.5]}))
                self.assertTrue(self.problems({1: (bad, 0.03)}, self.TENSORS))


if __name__ == "__main__":
    unittest.main()
