"""Verifier for log-error-counts: regenerates the logs in memory with the build-time generator."""
import csv
import importlib.util
import os
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("gen_logs", os.path.join(HERE, "gen_logs.py"))
gen_logs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_logs)


def entries():
    files = gen_logs.generate()
    for name in ("app.log.2.gz", "app.log.1", "app.log"):
        for line in files[name].splitlines():
            if line and not line[0].isspace():
                yield line


def error_counts():
    counts = Counter()
    for line in entries():
        stamp, level, service, _ = line.split(" ", 3)
        if level == "ERROR":
            counts[service.rstrip(":")] += 1
    return counts


def read_csv():
    with open("/app/error_counts.csv", newline="") as f:
        return [row for row in csv.reader(f) if row]


def test_error_counts_per_service():
    rows = read_csv()
    assert rows[0] == ["service", "errors"]
    assert {r[0]: int(r[1]) for r in rows[1:]} == dict(error_counts())


def test_error_counts_order():
    counts = error_counts()
    want = sorted(counts, key=lambda s: (-counts[s], s))
    assert [r[0] for r in read_csv()[1:]] == want


def test_warn_total():
    want = sum(1 for line in entries() if line.split(" ", 2)[1] == "WARN")
    with open("/app/warn_total.txt") as f:
        assert f.read().strip() == str(want)


def test_first_error_line():
    errors = [line for line in entries() if line.split(" ", 2)[1] == "ERROR"]
    want = min(errors, key=lambda line: line.split(" ", 1)[0])
    with open("/app/first_error.txt") as f:
        assert f.read().strip() == want
