"""Fail if a workspace crate depends on a crate of a higher layer.

Layers (a crate may depend only on crates of lower layers):
  gguf < quant < backend < model < engine < cli, with tokenizer beside model
  (depending only on gguf) and testkit usable by anything as a dev-dependency.
"""
import json
import subprocess
import sys

LAYER = {
    "redlite-gguf": 0,
    "redlite-quant": 1,
    "redlite-tokenizer": 1,
    "redlite-backend": 2,
    "redlite-model": 3,
    "redlite-synth": 3,
    "redlite-quantize": 2,
    "redlite-cuda": 4,
    "redlite-engine": 4,
    "redlite-server": 5,
    "redlite-cli": 6,
}
ALLOWED_ANYWHERE = {"redlite-testkit"}

meta = json.loads(subprocess.check_output(
    ["cargo", "metadata", "--format-version", "1", "--no-deps", "--locked"]))
bad = []
for pkg in meta["packages"]:
    name = pkg["name"]
    if name not in LAYER:
        if name not in ALLOWED_ANYWHERE:
            bad.append(f"{name}: crate has no layer assigned in .ci/check_layers.py")
        continue
    for dep in pkg["dependencies"]:
        d = dep["name"]
        if not d.startswith("redlite-") or d in ALLOWED_ANYWHERE:
            continue
        if d not in LAYER:
            bad.append(f"{name} -> {d}: unknown crate")
        elif LAYER[d] >= LAYER[name]:
            bad.append(f"{name} (layer {LAYER[name]}) -> {d} (layer {LAYER[d]}): points upward or sideways")
for b in bad:
    print("layer violation:", b, file=sys.stderr)
if bad:
    sys.exit(1)
print("dependency direction ok:", ", ".join(sorted(LAYER)))
