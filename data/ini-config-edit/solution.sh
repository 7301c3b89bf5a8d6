#!/bin/bash
# Reference solution: section-scoped sed edits (address ranges from a header to the next one).
set -euo pipefail
f=/app/conf/service.ini
sed -i \
  -e '/^\[server\]/,/^\[/{s/^port = .*/port = 9090/;s/^workers = .*/workers = 4/}' \
  -e '/^\[database\]/,/^\[/{s/^pool_size = .*/pool_size = 20\ntimeout = 30/}' \
  -e '/^\[logging\]/,/^\[/{s/^level = .*/level = warning/;s/^debug = .*/debug = false/}' \
  "$f"
