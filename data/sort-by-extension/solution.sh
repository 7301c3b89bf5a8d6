#!/bin/bash
# Reference solution: a loop that is safe for names with spaces.
set -euo pipefail
mkdir -p /app/sorted
for path in /app/inbox/*; do
  name=$(basename "$path")
  if [[ "$name" == *.* ]]; then
    ext=${name##*.}
    ext=${ext,,}
  else
    ext=noext
  fi
  mkdir -p "/app/sorted/$ext"
  mv "$path" "/app/sorted/$ext/$name"
done
cd /app/sorted
for dir in */; do
  dir=${dir%/}
  echo "$dir $(find "$dir" -maxdepth 1 -type f | wc -l)"
done | LC_ALL=C sort > counts.txt
