"""Verifier for sort-by-extension: placement, emptiness, no stray files and the counts file."""
import os

INBOX = "/app/inbox"
SORTED = "/app/sorted"
# original name -> expected extension directory
EXPECTED = {
    "report.PDF": "pdf",
    "summary.pdf": "pdf",
    "notes.txt": "txt",
    "TODO.TXT": "txt",
    "draft.v2.txt": "txt",
    "photo.JPG": "jpg",
    "holiday.jpg": "jpg",
    "backup.tar.gz": "gz",
    "Makefile": "noext",
    "README": "noext",
    "data.csv": "csv",
    "config.prod.json": "json",
    "meeting notes.md": "md",
    "song.Mp3": "mp3",
}


def content_of(name):
    return f"contents of {name}\n"


def test_every_file_is_in_its_extension_directory_with_content():
    for name, ext in EXPECTED.items():
        path = os.path.join(SORTED, ext, name)
        assert os.path.isfile(path), path
        with open(path) as f:
            assert f.read() == content_of(name), path


def test_inbox_exists_and_is_empty():
    assert os.path.isdir(INBOX)
    assert os.listdir(INBOX) == []


def test_sorted_contains_nothing_extra():
    expected_dirs = set(EXPECTED.values())
    entries = set(os.listdir(SORTED))
    assert entries == expected_dirs | {"counts.txt"}
    for ext in expected_dirs:
        want = {n for n, e in EXPECTED.items() if e == ext}
        assert set(os.listdir(os.path.join(SORTED, ext))) == want, ext


def test_counts_file_lists_extensions_sorted_with_counts():
    counts = {}
    for ext in EXPECTED.values():
        counts[ext] = counts.get(ext, 0) + 1
    want = [f"{ext} {counts[ext]}" for ext in sorted(counts)]
    with open(os.path.join(SORTED, "counts.txt")) as f:
        got = [line.rstrip("\n") for line in f if line.strip()]
    assert got == want
