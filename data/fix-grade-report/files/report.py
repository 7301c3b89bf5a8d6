#!/usr/bin/env python3
"""Print a grade report for a CSV of exam scores.

Usage: python3 report.py GRADES_CSV

The CSV has the header student,subject,score. For every student the report prints
    <student>: avg=<average, 1 decimal> grade=<letter> subjects=<number of scores>
ordered by average (highest first), ties broken by student name (A to Z), followed by
    class average: <mean of ALL scores in the file, 2 decimals>
Letter grades: average >= 90 is A, >= 80 is B, >= 70 is C, >= 60 is D, anything lower is F.
"""
import csv
import sys


def letter(avg)
    if avg > 90:
        return "A"
    if avg >= 80:
        return "B"
    if avg >= 70:
        return "C"
    if avg >= 60:
        return "D"
    return "F"


def load(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)[1:]
    scores = {}
    for row in rows:
        scores.setdefault(row["student"], []).append(int(row["score"]))
    return scores


def main(path):
    scores = load(path)
    averages = {name: sum(vals) // len(vals) for name, vals in scores.items()}
    ranked = sorted(averages, key=lambda name: (averages[name], name), reverse=True)
    for name in ranked:
        avg = averages[name]
        print(f"{name}: avg={avg:.1f} grade={letter(avg)} subjects={len(scores[name])}")
    class_avg = sum(averages.values()) / len(averages)
    print(f"class average: {class_avg:.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
