#!/bin/bash
# Reference solution: one Python pass over the CSV with exact decimal arithmetic.
set -euo pipefail
python3 - <<'PY'
import csv, json
from collections import defaultdict
from decimal import Decimal

units_by_region = defaultdict(int)
revenue_by_region = defaultdict(Decimal)
revenue_by_month = defaultdict(Decimal)
units_by_product = defaultdict(int)
with open("/app/sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        units = int(row["units"])
        revenue = units * Decimal(row["unit_price"])
        units_by_region[row["region"]] += units
        revenue_by_region[row["region"]] += revenue
        revenue_by_month[row["date"][:7]] += revenue
        units_by_product[row["product"]] += units

with open("/app/region_summary.csv", "w", newline="") as f:
    writer = csv.writer(f, lineterminator="\n")
    writer.writerow(["region", "units", "revenue"])
    for region in sorted(revenue_by_region, key=revenue_by_region.get, reverse=True):
        writer.writerow([region, units_by_region[region], f"{revenue_by_region[region]:.2f}"])

with open("/app/monthly_revenue.json", "w") as f:
    json.dump({m: float(round(v, 2)) for m, v in sorted(revenue_by_month.items())}, f, indent=2)

with open("/app/top_product.txt", "w") as f:
    f.write(max(units_by_product, key=units_by_product.get) + "\n")
PY
