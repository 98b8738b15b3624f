#!/bin/sh
# The shared library exports the public API only: every defined dynamic
# symbol is tdm_* and carries the version node TANDEM_0 (runtime/tandem.map).
lib="$1"
command -v objdump >/dev/null 2>&1 || { echo "no objdump: skipped"; exit 77; }
# defined symbols: "<version> <name>" (the version node itself included)
syms=$(objdump -T "$lib" | awk '/\*UND\*/ {next} NF >= 7 && $(NF-1) != "" {print $(NF-1), $NF}')
[ -n "$syms" ] || { echo "no exported symbols found in $lib"; exit 1; }
other=$(printf '%s\n' "$syms" | awk '$2 !~ /^tdm_/ && $2 != "TANDEM_0" {print $2}')
if [ -n "$other" ]; then
  echo "exported names that are not tdm_*:"; printf '%s\n' "$other"; exit 1
fi
unversioned=$(printf '%s\n' "$syms" | awk '$2 ~ /^tdm_/ && $1 != "TANDEM_0" {print $2}')
if [ -n "$unversioned" ]; then
  echo "tdm_* symbols without the version node TANDEM_0:"; printf '%s\n' "$unversioned"; exit 1
fi
echo "$(printf '%s\n' "$syms" | grep -c ' tdm_') symbols exported, all tdm_* under TANDEM_0"
