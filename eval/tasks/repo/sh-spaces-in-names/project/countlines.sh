#!/usr/bin/env bash
# Prints the total number of lines of the .txt files in a directory.
set -eu
dir=${1:-.}
total=0
for f in "$dir"/*.txt; do
    [ -e $f ] || continue
    n=$(wc -l < $f)
    total=$((total + n))
done
echo "$total"
