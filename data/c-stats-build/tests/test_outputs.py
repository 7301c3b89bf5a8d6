"""Verifier for c-stats-build: builds with make, runs the binary on fixed inputs, checks make clean."""
import glob
import math
import os
import re
import subprocess

PROJECT = "/app/stats"
BINARY = os.path.join(PROJECT, "stats")


def make(*targets):
    return subprocess.run(["make", "-C", PROJECT, *targets], capture_output=True, text=True, timeout=120)


def build():
    result = make()
    assert result.returncode == 0, result.stdout + result.stderr
    assert os.access(BINARY, os.X_OK)


def run_stats(values):
    build()
    text = "".join(f"{v}\n" for v in values)
    result = subprocess.run([BINARY], input=text, capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, result.stderr
    out = {}
    for line in result.stdout.splitlines():
        key, value = line.split("=", 1)
        out[key] = value
    return out


def expected(values):
    xs = [float(v) for v in values]
    n = len(xs)
    mean = sum(xs) / n
    s = sorted(xs)
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / n)
    return {"min": min(xs), "max": max(xs), "mean": mean, "median": median, "stddev": std}


def check(values):
    got = run_stats(values)
    assert got["count"] == str(len(values))
    for key, want in expected(values).items():
        assert re.fullmatch(r"-?\d+\.\d{3}", got[key]), (key, got[key])
        assert abs(float(got[key]) - want) <= 0.0011, (key, got[key], want)


def test_make_builds_from_scratch():
    for path in glob.glob(os.path.join(PROJECT, "*.o")) + [BINARY]:
        if os.path.exists(path):
            os.remove(path)
    build()


def test_odd_count_integers():
    check([7, 3, 9, 1, 5, 12, 4])


def test_even_count_median_is_mean_of_middle_values():
    check([10, 2, 8, 4, 6, 20])


def test_fractional_values_sort_correctly():
    check([0.5, 0.25, 0.9, 0.1, 0.75, 0.3, 0.6, 1.4, 1.2])


def test_make_clean_removes_binary_and_objects():
    build()
    result = make("clean")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not os.path.exists(BINARY)
    assert glob.glob(os.path.join(PROJECT, "*.o")) == []
    # sources must survive the clean
    for name in ("main.c", "stats.c", "stats.h", "Makefile"):
        assert os.path.exists(os.path.join(PROJECT, name)), name
