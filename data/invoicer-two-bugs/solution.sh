#!/bin/bash
# Reference solution. Root causes:
#  1. models.py: the default `adjustments=NO_ADJUSTMENTS` is one shared object; the parser mutates it,
#     so every invoice without its own object sees the percentages of the others.
#  2. pricing.py: Decimal.quantize() rounds HALF_EVEN by default; the README requires HALF_UP.
set -euo pipefail
cd /app
python3 - <<'PY'
def patch(path, old, new):
    src = open(path).read()
    assert src.count(old) == 1, (path, old)
    open(path, "w").write(src.replace(old, new))

patch("invoicer/models.py",
      "def __init__(self, number, customer=\"\", items=None, adjustments=NO_ADJUSTMENTS):",
      "def __init__(self, number, customer=\"\", items=None, adjustments=None):")
patch("invoicer/models.py",
      "        self.adjustments = adjustments\n",
      "        self.adjustments = adjustments if adjustments is not None else Adjustments()\n")
patch("invoicer/pricing.py", "from decimal import Decimal\n", "from decimal import ROUND_HALF_UP, Decimal\n")
patch("invoicer/pricing.py", "return value.quantize(CENT)", "return value.quantize(CENT, rounding=ROUND_HALF_UP)")
PY
python3 -m invoicer samples/march.txt > /app/march_totals.txt
