#!/bin/bash
# Reference solution: Python's csv module (utf-8-sig strips the BOM) and Decimal with ROUND_HALF_UP.
set -euo pipefail
python3 - <<'PY'
import csv, json
from decimal import ROUND_HALF_UP, Decimal

with open("/app/ledger.csv", encoding="utf-8-sig", newline="") as f:
    records = list(csv.DictReader(f))

clean, totals, payees = [], {}, set()
for r in records:
    amount = Decimal(r["amount"].replace(",", "")).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    currency = r["currency"].strip().upper()
    payee = r["payee"].strip()
    clean.append([r["id"], r["date"], payee, f"{amount:.2f}", currency])
    totals[currency] = totals.get(currency, Decimal("0")) + amount
    payees.add(payee)

with open("/app/record_count.txt", "w") as f:
    f.write(f"{len(records)}\n")
with open("/app/clean.csv", "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f, lineterminator="\n")
    writer.writerow(["id", "date", "payee", "amount", "currency"])
    writer.writerows(clean)
with open("/app/totals.json", "w") as f:
    json.dump({c: f"{v:.2f}" for c, v in sorted(totals.items())}, f, indent=2)
with open("/app/payees.txt", "w", encoding="utf-8") as f:
    f.write("".join(p + "\n" for p in sorted(payees)))
PY
