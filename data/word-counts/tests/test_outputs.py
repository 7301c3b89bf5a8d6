"""Verifier for word-counts: expected numbers are computed here from a pristine copy of the texts."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
PRISTINE = os.path.join(HERE, "texts")
OUTPUT = "/app/counts.tsv"


def wc(path):
    data = open(path, "rb").read()
    return data.count(b"\n"), len(data.split()), len(data)


def expected_rows():
    names = sorted(n for n in os.listdir(PRISTINE) if n.endswith(".txt"))  # str sort == byte order for ASCII
    return [(n, *wc(os.path.join(PRISTINE, n))) for n in names]


def read_output():
    with open(OUTPUT, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def test_header_line():
    assert read_output()[0] == ["file", "lines", "words", "bytes"]


def test_per_file_counts():
    got = {row[0]: row[1:] for row in read_output()[1:] if row[0] != "TOTAL"}
    want = {name: [str(l), str(w), str(c)] for name, l, w, c in expected_rows()}
    assert got == want


def test_file_order_and_exclusions():
    names = [row[0] for row in read_output()[1:]]
    assert names == [r[0] for r in expected_rows()] + ["TOTAL"]


def test_total_line():
    rows = expected_rows()
    want = ["TOTAL"] + [str(sum(r[i] for r in rows)) for i in (1, 2, 3)]
    assert read_output()[-1] == want
