#!/bin/bash
# Reference solution: find prints size and relative path; sort by size desc, then path.
set -euo pipefail
cd /app/data
find . -type f -size +51200c -printf '%s %P\n' | LC_ALL=C sort -k1,1nr -k2 > /app/large_files.txt
