#!/usr/bin/env bash
# Copies a build into a release directory: deploy.sh BUILD_DIR RELEASE_DIR
set -eu
src=$1
dst=$2
if [ ! -d "$src" ]; then
    echo "[deploy] $(date +%Y-%m-%dT%H:%M:%S) error: no build at $src" >&2
    exit 1
fi
echo "[deploy] $(date +%Y-%m-%dT%H:%M:%S) copying $src to $dst" >&2
mkdir -p "$dst"
cp -R "$src"/. "$dst"/
n=$(find "$dst" -type f | wc -l | tr -d ' ')
echo "[deploy] $(date +%Y-%m-%dT%H:%M:%S) done: $n files" >&2
echo "$n"
