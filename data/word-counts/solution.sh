#!/bin/bash
# Reference solution: wc per file, assembled with printf; totals summed with awk.
set -euo pipefail
cd /app/texts
{
  printf 'file\tlines\twords\tbytes\n'
  find . -maxdepth 1 -type f -name '*.txt' -printf '%f\n' | LC_ALL=C sort | while IFS= read -r name; do
    read -r l w c _ < <(wc -l -w -c < "$name")
    printf '%s\t%s\t%s\t%s\n' "$name" "$l" "$w" "$c"
  done
} > /tmp/counts.body
awk -F'\t' 'NR > 1 { l += $2; w += $3; c += $4 } { print } END { printf "TOTAL\t%d\t%d\t%d\n", l, w, c }' \
  /tmp/counts.body > /app/counts.tsv
rm -f /tmp/counts.body
