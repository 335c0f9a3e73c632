"""Writes a safetensors file of zero-filled tensors, for tests of what a reader refuses:
write_safetensors.py OUT NAME:DTYPE:D0xD1... [...] (DTYPE F32, BF16 or F16)."""
import json
import struct
import sys

SIZES = {"F32": 4, "BF16": 2, "F16": 2}
header, offset = {}, 0
for spec in sys.argv[2:]:
    name, dtype, shape = spec.split(":")
    dims = [int(d) for d in shape.split("x")]
    count = 1
    for d in dims:
        count *= d
    header[name] = {"dtype": dtype, "shape": dims, "data_offsets": [offset, offset + count * SIZES[dtype]]}
    offset += count * SIZES[dtype]
text = json.dumps(header).encode()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + bytes(offset))
