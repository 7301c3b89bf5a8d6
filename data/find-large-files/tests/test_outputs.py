"""Verifier for find-large-files: the expected listing is fixed by the build-time generator."""
import os

OUTPUT = "/app/large_files.txt"
EXPECTED = [
    "300000 db/store.sqlite",
    "120000 logs/app.log",
    "99999 .hidden/blob.dat",
    "80000 images/cat.png",
    "80000 images/dog.png",
    "64000 docs/manual.pdf",
    "51201 logs/old app.log",
]


def read_lines():
    with open(OUTPUT) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def test_listing_has_exactly_the_large_files():
    assert sorted(read_lines()) == sorted(EXPECTED)


def test_listing_order_is_size_desc_then_path():
    assert read_lines() == EXPECTED


def test_hidden_and_spaced_names_found():
    lines = read_lines()
    assert "99999 .hidden/blob.dat" in lines
    assert "51201 logs/old app.log" in lines


def test_every_line_is_a_real_file_and_excluded_ones_are_absent():
    lines = read_lines()
    assert lines
    for line in lines:
        size, rel = line.split(" ", 1)
        path = os.path.join("/app/data", rel)
        assert os.path.isfile(path) and not os.path.islink(path), line
        assert os.path.getsize(path) == int(size), line
    text = "\n".join(lines)
    assert "debug.log" not in text  # exactly 51200 bytes: not strictly greater
    assert "big_link" not in text
    assert "cache.bin" not in text
