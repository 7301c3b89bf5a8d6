"""Verifier for quoted-csv-ledger: expected values come from a pristine copy parsed with csv + Decimal."""
import csv
import io
import json
import os
from decimal import ROUND_HALF_UP, Decimal

HERE = os.path.dirname(os.path.abspath(__file__))


def records():
    with open(os.path.join(HERE, "ledger.csv"), encoding="utf-8-sig", newline="") as f:
        return list(csv.DictReader(f))


def rounded(text):
    return Decimal(text.replace(",", "")).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def expected_clean_rows():
    return [[r["id"], r["date"], r["payee"].strip(), f"{rounded(r['amount']):.2f}", r["currency"].strip().upper()]
            for r in records()]


def read_clean_bytes():
    with open("/app/clean.csv", "rb") as f:
        return f.read()


def test_record_count():
    with open("/app/record_count.txt") as f:
        assert f.read().strip() == str(len(records()))


def test_clean_csv_encoding_header_and_line_endings():
    data = read_clean_bytes()
    assert not data.startswith(b"\xef\xbb\xbf"), "byte-order mark present"
    text = data.decode("utf-8")
    assert text.startswith("id,date,payee,amount,currency\n")
    assert "\r" not in text


def test_clean_csv_rows():
    text = read_clean_bytes().decode("utf-8-sig")
    rows = [row for row in csv.reader(io.StringIO(text, newline="")) if row]
    assert rows[0] == ["id", "date", "payee", "amount", "currency"]
    assert rows[1:] == expected_clean_rows()


def test_totals_per_currency_use_rounded_amounts():
    want = {}
    for r in records():
        currency = r["currency"].strip().upper()
        want[currency] = want.get(currency, Decimal("0")) + rounded(r["amount"])
    with open("/app/totals.json") as f:
        got = json.load(f)
    assert got == {c: f"{v:.2f}" for c, v in want.items()}


def test_payees_sorted_by_code_point():
    want = sorted({r["payee"].strip() for r in records()})
    with open("/app/payees.txt", encoding="utf-8") as f:
        got = [line.rstrip("\n") for line in f if line.strip()]
    assert got == want
