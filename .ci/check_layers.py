"""Fail if a workspace crate depends on a crate of a higher layer, or if
library code reads the process environment.

Layers (a crate may depend only on crates of lower layers):
  gguf < quant < backend < model < {cuda, engine} < {server, eval} < cli, with
  tokenizer and chat beside quant (depending only on gguf), quantize and grammar beside
  backend, synth beside model, and testkit usable by anything as a
  dev-dependency.

Environment: only the command line (redlite-cli) reads environment variables;
the libraries take typed options from their caller. Checked in every crate's
`src/` (tests, examples and benches may read what they like); exempt are
redlite-cli and redlite-testkit (test support).
"""
import json
import pathlib
import re
import subprocess
import sys

LAYER = {
    "redlite-gguf": 0,
    "redlite-quant": 1,
    "redlite-tokenizer": 1,
    "redlite-chat": 1,
    "redlite-backend": 2,
    "redlite-model": 3,
    "redlite-synth": 3,
    "redlite-quantize": 2,
    "redlite-grammar": 2,
    "redlite-cuda": 4,
    "redlite-engine": 4,
    "redlite-server": 5,
    "redlite-eval": 5,
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

ENV_READERS = {"redlite-cli", "redlite-testkit"}
# std::env::var / var_os / vars / vars_os (however imported) and libc's getenv.
ENV_READ = re.compile(r"\benv\s*::\s*(var|var_os|vars|vars_os)\b|\bgetenv\b")
env_bad = []
for pkg in meta["packages"]:
    if not pkg["name"].startswith("redlite-") or pkg["name"] in ENV_READERS:
        continue
    src = pathlib.Path(pkg["manifest_path"]).parent / "src"
    for path in sorted(src.rglob("*.rs")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("//", 1)[0]
            if ENV_READ.search(code):
                env_bad.append(f"{path}:{n}: {line.strip()}")
for b in env_bad:
    print("environment read in library code (take a typed option from the caller instead):",
          b, file=sys.stderr)
if bad or env_bad:
    sys.exit(1)
print("dependency direction ok:", ", ".join(sorted(LAYER)))
print("no environment reads outside", ", ".join(sorted(ENV_READERS)))
