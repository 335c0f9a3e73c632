"""Writes an 8-bit RGB PNG of the given size whose pixel (x, y) is (x, y, x + y) mod 256, with the
standard library only: write_png.py OUT WIDTH HEIGHT."""
import struct
import sys
import zlib

out, width, height = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = b"".join(b"\0" + bytes(v % 256 for x in range(width) for v in (x, y, x + y)) for y in range(height))


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


with open(out, "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
