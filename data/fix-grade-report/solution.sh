#!/bin/bash
# Reference solution: fix the five bugs with targeted edits, then regenerate the report.
set -euo pipefail
cd /app
python3 - <<'PY'
path = "/app/report.py"
src = open(path).read()
fixes = [
    ("def letter(avg)\n", "def letter(avg):\n"),                       # syntax error
    ("if avg > 90:", "if avg >= 90:"),                                   # boundary: 90 is an A
    ("rows = list(reader)[1:]", "rows = list(reader)"),                  # DictReader already ate the header
    ("sum(vals) // len(vals)", "sum(vals) / len(vals)"),                 # integer division
    ("key=lambda name: (averages[name], name), reverse=True)",
     "key=lambda name: (-averages[name], name))"),                       # ties: names A to Z
    ("class_avg = sum(averages.values()) / len(averages)",
     "all_scores = [s for vals in scores.values() for s in vals]\n"
     "    class_avg = sum(all_scores) / len(all_scores)"),                # mean of all scores
]
for old, new in fixes:
    assert src.count(old) == 1, old
    src = src.replace(old, new)
open(path, "w").write(src)
PY
python3 /app/report.py /app/grades.csv > /app/report.txt
