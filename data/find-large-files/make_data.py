"""Build-time generator for /app/data: files of exact sizes (only the sizes matter)."""
import os
import sys

ROOT = sys.argv[1]
SIZES = {
    "logs/app.log": 120000,
    "logs/old app.log": 51201,
    "logs/debug.log": 51200,
    "images/cat.png": 80000,
    "images/dog.png": 80000,
    "images/thumbs/cat_small.png": 2048,
    "db/store.sqlite": 300000,
    "db/store.sqlite-journal": 0,
    "tmp/cache.bin": 51199,
    "docs/manual.pdf": 64000,
    ".hidden/blob.dat": 99999,
}
for i in range(30):
    SIZES[f"misc/file_{i:02d}.txt"] = 100 + 37 * i
for rel, size in SIZES.items():
    path = os.path.join(ROOT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write((b"0123456789abcdef" * (size // 16 + 1))[:size])
os.symlink("db/store.sqlite", os.path.join(ROOT, "big_link"))
