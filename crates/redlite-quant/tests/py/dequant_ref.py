"""Reference dequantization with gguf-py.

usage: dequant_ref.py FILE.gguf OUT

Dequantizes every tensor of FILE.gguf with `gguf.quants.dequantize` and
writes OUT.bin (the float32 values of all tensors, little-endian, in file
order) and OUT.idx (one line per tensor: name, type name, first value
index, value count, "ok" or "unsupported").
"""

import sys

try:
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize
except ImportError as e:  # the Rust test turns this into a loud failure
    print(f"missing Python package: {e}", file=sys.stderr)
    sys.exit(3)


def main() -> int:
    path, out = sys.argv[1], sys.argv[2]
    reader = GGUFReader(path)
    off = 0
    with open(out + ".bin", "wb") as fb, open(out + ".idx", "w") as fi:
        for t in reader.tensors:
            try:
                v = dequantize(t.data, t.tensor_type)
            except NotImplementedError:
                fi.write(f"{t.name}\t{t.tensor_type.name}\t{off}\t0\tunsupported\n")
                continue
            v = np.ascontiguousarray(v).reshape(-1)
            assert v.dtype == np.float32, (t.name, v.dtype)
            fb.write(v.astype("<f4", copy=False).tobytes())
            fi.write(f"{t.name}\t{t.tensor_type.name}\t{off}\t{v.size}\tok\n")
            off += v.size
    return 0


if __name__ == "__main__":
    sys.exit(main())
