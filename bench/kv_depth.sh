#!/usr/bin/env bash
# Decode speed and peak memory at depth for each KV cache type, alternated
# (each depth: the types in order, then in reverse), beside llama.cpp's
# decode at the same depth through bench/llama_depth.c (its f16 cache
# filled through its state API, no prefill).
#
#   bench/kv_depth.sh REDLITE MODEL.gguf "0 8192 32768" "f32 f16 q8_0" [LLAMA_DEPTH] [REPEAT]
#
# Prints one line per run: depth, type, redlite's bench table row (median
# t/s) and the peak RSS from /usr/bin/time -v, with the load average.
set -euo pipefail
bin=$1 model=$2 depths=$3 types=$4 llama=${5:-} rep=${6:-3}
run() { # depth type
  local out
  out=$( { /usr/bin/time -v "$bin" bench "$model" -p 0 -n 16 -r "$rep" --start-position "$1" \
      --fill-state random -ctk "$2" -ctv "$2" --device cpu; } 2>&1 )
  local row rss
  row=$(grep -E "tg16" <<<"$out" | tail -1)
  rss=$(grep "Maximum resident" <<<"$out" | awk '{printf "%.2f GiB", $6/1048576}')
  echo "depth $1 type $2 | $row | peak RSS $rss | load $(cut -d' ' -f1-3 /proc/loadavg)"
}
for d in $depths; do
  order=$types
  for pass in 1 2; do
    for t in $order; do run "$d" "$t"; done
    order=$(tr ' ' '\n' <<<"$types" | tac | tr '\n' ' ')
  done
  if [ -n "$llama" ] && [ "$d" -gt 0 ]; then
    /usr/bin/time -v "$llama" "$model" "$d" 2 f16 3 2>&1 | grep -E "^llama.cpp depth|Maximum resident" \
      | sed "s/^/  /"
  fi
done
