#!/usr/bin/env python3
"""Write a synthetic importance matrix (llama.cpp's GGUF imatrix format) for a model: for every
matrix but the token embedding, pseudo-random positive weights per column (and per expert), one
"chunk". For benchmarking `redlite quantize` on synthetic models (e.g. `redlite synth` output),
where a real calibration run would take hours; the values carry no meaning.

usage: synth-imatrix.py MODEL.gguf OUT.gguf [--seed N] [--step S]

--step S rounds the weights to multiples of S (a file that compresses well, to ship to another machine).
"""
import argparse

import numpy as np
from gguf import GGUFReader, GGUFWriter


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step", type=float, default=0.0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    r = GGUFReader(a.model)
    w = GGUFWriter(a.out, arch="imatrix", use_temp_file=False)
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["synthetic"])
    w.add_uint32("imatrix.chunk_count", 1)
    w.add_uint32("imatrix.chunk_size", 512)
    n = 0
    for t in r.tensors:
        dims = [int(d) for d in t.shape]  # ggml order: dims[0] is the row length
        if len(dims) < 2 or t.name == "token_embd.weight" or not t.name.endswith(".weight"):
            continue
        ne0 = dims[0]
        n_expert = dims[2] if len(dims) > 2 else 1
        sums = rng.uniform(0.5, 2.0, size=(n_expert, ne0))
        if a.step > 0:
            sums = np.round(sums / a.step) * a.step
        sums = sums.astype(np.float32)
        counts = np.ones((n_expert, 1), dtype=np.float32)
        w.add_tensor(t.name + ".in_sum2", sums)
        w.add_tensor(t.name + ".counts", counts)
        n += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{a.out}: {n} entries")


if __name__ == "__main__":
    main()
