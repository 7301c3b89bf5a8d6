"""Deterministic generator of the shop database (used at build time and by the verifier).

generate(seed) returns (customers, orders, items) as lists of tuples; write(path, seed) stores them.
"""
import datetime
import random
import sqlite3
import sys

SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
                     ordered_at TEXT NOT NULL, status TEXT NOT NULL);
CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL REFERENCES orders(id),
                          product TEXT NOT NULL, qty INTEGER NOT NULL, unit_price_cents INTEGER NOT NULL);
"""
FIRST = ["Ana", "Ben", "Chloe", "Dev", "Eun", "Femi", "Gia", "Hugo", "Isla", "Jae", "Kai", "Lior", "Mara", "Nils"]
LAST = ["Okafor", "Petrov", "Quispe", "Rossi", "Sato", "Tan", "Ueda", "Varga"]
COUNTRIES = ["DE", "FR", "JP", "NG", "PE", "US"]
PRODUCTS = [("lamp", 2599), ("desk", 18900), ("chair", 7450), ("mug", 899), ("rug", 12000), ("shelf", 5625)]
STATUSES = ["paid", "paid", "paid", "paid", "refunded", "pending"]


def generate(seed=7):
    rng = random.Random(seed)
    customers = []
    for cid in range(1, 41):
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        customers.append((cid, name, rng.choice(COUNTRIES)))
    orders, items = [], []
    start = datetime.datetime(2022, 10, 1)
    for oid in range(1, 401):
        if rng.random() < 0.05:  # orders right at the year boundaries
            when = rng.choice(["2022-12-31 23:59:59", "2023-01-01 00:00:00", "2023-12-31 23:59:59", "2024-01-01 00:00:00"])
        else:
            when = (start + datetime.timedelta(seconds=rng.randrange(500 * 86400))).strftime("%Y-%m-%d %H:%M:%S")
        orders.append((oid, rng.randint(1, 40), when, rng.choice(STATUSES)))
        for _ in range(rng.randint(1, 3)):
            product, price = rng.choice(PRODUCTS)
            items.append((len(items) + 1, oid, product, rng.randint(1, 4), price))
    return customers, orders, items


def write(path, seed=7, data=None):
    customers, orders, items = data or generate(seed)
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?)", customers)
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", orders)
    conn.executemany("INSERT INTO order_items VALUES (?, ?, ?, ?, ?)", items)
    conn.commit()
    conn.close()


if __name__ == "__main__":
    write(sys.argv[1])
