#!/usr/bin/env bash
# A to-do list in a text file: todo.sh add TEXT | list | done N
set -eu
file=${TODO_FILE:-todo.txt}
touch "$file"
case "${1:-}" in
add)
    shift
    echo "[ ] $*" >> "$file"
    ;;
list)
    nl -w1 -s'. ' "$file"
    ;;
done)
    sed -i "${2}s/^\[ \]/[x]/" "$file"
    ;;
*)
    echo "usage: todo.sh add TEXT | list | done N" >&2
    exit 2
    ;;
esac
