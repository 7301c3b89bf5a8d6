"""Verifier for sqlite-top-customers: checks the saved CSV and runs the saved query on other databases.

Expected answers are computed in Python from the generator's data, independently of SQL.
"""
import csv
import importlib.util
import io
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("gen_db", os.path.join(HERE, "gen_db.py"))
gen_db = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_db)

HEADER = ["name", "country", "total"]


def expected(data):
    customers, orders, items = data
    order_value = {}
    for _, order_id, _, qty, cents in items:
        order_value[order_id] = order_value.get(order_id, 0) + qty * cents
    spent = {}
    for order_id, customer_id, when, status in orders:
        if status == "paid" and when.startswith("2023-"):
            spent[customer_id] = spent.get(customer_id, 0) + order_value.get(order_id, 0)
    info = {cid: (name, country) for cid, name, country in customers}
    ranked = sorted(spent, key=lambda cid: (-spent[cid], info[cid][0]))[:5]
    return [[info[c][0], info[c][1], f"{spent[c] // 100}.{spent[c] % 100:02d}"] for c in ranked]


def edge_case_data():
    """Ties, a shared name, refunds and orders on both sides of each year boundary."""
    customers = [(1, "Zoe Quinn", "US"), (2, "Sam Lee", "DE"), (3, "Sam Lee", "JP"), (4, "Abe Cole", "FR"),
                 (5, "Mo Diaz", "PE"), (6, "Lu Chen", "NG"), (7, "Ida Berg", "US")]
    orders = [
        (1, 1, "2023-03-01 12:00:00", "paid"),      # Zoe 300.00
        (2, 4, "2023-04-01 12:00:00", "paid"),      # Abe 300.00 (ties Zoe; Abe sorts first)
        (3, 2, "2023-12-31 23:59:59", "paid"),      # Sam Lee DE 250.00, last second of 2023
        (4, 3, "2023-01-01 00:00:00", "paid"),      # Sam Lee JP 120.00, first second of 2023
        (5, 3, "2023-06-01 08:00:00", "paid"),      # Sam Lee JP +100.00 -> 220.00
        (6, 5, "2024-01-01 00:00:00", "paid"),      # Mo: 2024, excluded
        (7, 5, "2022-12-31 23:59:59", "paid"),      # Mo: 2022, excluded
        (8, 5, "2023-05-05 05:05:05", "paid"),      # Mo 10.05
        (9, 6, "2023-07-07 07:07:07", "refunded"),  # Lu: refunded, excluded
        (10, 6, "2023-07-08 07:07:07", "pending"),  # Lu: pending, excluded
        (11, 6, "2023-07-09 07:07:07", "paid"),     # Lu 10.05 (ties Mo; Lu sorts first)
        (12, 7, "2023-02-02 02:02:02", "paid"),     # Ida 9.99, sixth place
    ]
    items = [(1, 1, "rug", 1, 30000), (2, 2, "mug", 3, 10000), (3, 3, "desk", 1, 25000), (4, 4, "lamp", 2, 6000),
             (5, 5, "chair", 1, 10000), (6, 6, "desk", 9, 99999), (7, 7, "desk", 9, 99999), (8, 8, "mug", 1, 1005),
             (9, 9, "rug", 9, 99999), (10, 10, "rug", 9, 99999), (11, 11, "shelf", 1, 1005), (12, 12, "mug", 1, 999)]
    return customers, orders, items


def run_saved_query(db_path):
    with open("/app/top_customers.sql") as f:
        sql = f.read()
    result = subprocess.run(["sqlite3", "-header", "-csv", db_path], input=sql,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return [row for row in csv.reader(io.StringIO(result.stdout)) if row]


def test_saved_csv_header():
    with open("/app/top_customers.csv", newline="") as f:
        rows = [row for row in csv.reader(f) if row]
    assert rows[0] == HEADER


def test_saved_csv_rows():
    with open("/app/top_customers.csv", newline="") as f:
        rows = [row for row in csv.reader(f) if row]
    assert rows[1:] == expected(gen_db.generate(7))


def test_query_on_another_generated_database(tmp_path):
    db = str(tmp_path / "other.db")
    gen_db.write(db, seed=99)
    rows = run_saved_query(db)
    assert rows[0] == HEADER
    assert rows[1:] == expected(gen_db.generate(99))


def test_query_on_edge_case_database(tmp_path):
    db = str(tmp_path / "edge.db")
    data = edge_case_data()
    gen_db.write(db, data=data)
    rows = run_saved_query(db)
    assert rows[0] == HEADER
    assert rows[1:] == expected(data)
