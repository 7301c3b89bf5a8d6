"""Verifier for sales-summary-csv: expected values are recomputed from a pristine copy of the data."""
import csv
import json
import os
from collections import defaultdict
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))


def aggregates():
    units_by_region = defaultdict(int)
    revenue_by_region = defaultdict(Decimal)
    revenue_by_month = defaultdict(Decimal)
    units_by_product = defaultdict(int)
    with open(os.path.join(HERE, "sales.csv"), newline="") as f:
        for row in csv.DictReader(f):
            units = int(row["units"])
            revenue = units * Decimal(row["unit_price"])
            units_by_region[row["region"]] += units
            revenue_by_region[row["region"]] += revenue
            revenue_by_month[row["date"][:7]] += revenue
            units_by_product[row["product"]] += units
    return units_by_region, revenue_by_region, revenue_by_month, units_by_product


def read_summary():
    with open("/app/region_summary.csv", newline="") as f:
        return list(csv.reader(f))


def test_region_summary_values():
    units, revenue, _, _ = aggregates()
    rows = read_summary()
    assert rows[0] == ["region", "units", "revenue"]
    got = {r[0]: (r[1], r[2]) for r in rows[1:] if r}
    want = {region: (str(units[region]), f"{revenue[region]:.2f}") for region in revenue}
    assert got == want


def test_region_summary_sorted_by_revenue_desc():
    _, revenue, _, _ = aggregates()
    regions = [r[0] for r in read_summary()[1:] if r]
    assert regions == sorted(revenue, key=revenue.get, reverse=True)


def test_monthly_revenue_json():
    _, _, by_month, _ = aggregates()
    with open("/app/monthly_revenue.json") as f:
        got = json.load(f)
    assert isinstance(got, dict)
    assert sorted(got) == sorted(by_month)
    for month, value in by_month.items():
        assert isinstance(got[month], (int, float)), month
        assert abs(Decimal(str(got[month])) - value) < Decimal("0.006"), month


def test_top_product_by_units():
    _, _, _, units = aggregates()
    with open("/app/top_product.txt") as f:
        assert f.read().strip() == max(units, key=units.get)
