#!/bin/bash
# Reference solution: stream all entries oldest-first, awk on the LEVEL field only.
set -euo pipefail
cd /app/logs
entries() { { zcat app.log.2.gz; cat app.log.1 app.log; } | grep -v '^[[:space:]]'; }
{
  echo "service,errors"
  entries | awk '$2 == "ERROR" { sub(/:$/, "", $3); n[$3]++ } END { for (s in n) print s "," n[s] }' \
    | LC_ALL=C sort -t, -k2,2nr -k1,1
} > /app/error_counts.csv
entries | awk '$2 == "WARN"' | wc -l > /app/warn_total.txt
entries | awk '$2 == "ERROR"' | LC_ALL=C sort -k1,1 | head -n 1 > /app/first_error.txt
