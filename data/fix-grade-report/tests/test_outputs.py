"""Verifier for fix-grade-report: the fixed script is compared with a reference on several inputs."""
import csv
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def reference_report(path):
    scores = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            scores.setdefault(row["student"], []).append(int(row["score"]))
    averages = {name: sum(v) / len(v) for name, v in scores.items()}
    lines = []
    for name in sorted(averages, key=lambda n: (-averages[n], n)):
        avg = averages[name]
        grade = "A" if avg >= 90 else "B" if avg >= 80 else "C" if avg >= 70 else "D" if avg >= 60 else "F"
        lines.append(f"{name}: avg={avg:.1f} grade={grade} subjects={len(scores[name])}")
    all_scores = [s for v in scores.values() for s in v]
    lines.append(f"class average: {sum(all_scores) / len(all_scores):.2f}")
    return "\n".join(lines) + "\n"


def run_script(csv_name):
    result = subprocess.run(["python3", "/app/report.py", os.path.join(HERE, csv_name)],
                            capture_output=True, text=True, timeout=30, cwd="/app")
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_fixed_script_on_the_shipped_grades():
    assert run_script("grades.csv") == reference_report(os.path.join(HERE, "grades.csv"))


def test_grade_boundaries():
    assert run_script("boundaries.csv") == reference_report(os.path.join(HERE, "boundaries.csv"))


def test_ties_are_ordered_by_name():
    assert run_script("ties.csv") == reference_report(os.path.join(HERE, "ties.csv"))


def test_report_txt_saved():
    with open("/app/report.txt") as f:
        assert f.read() == reference_report(os.path.join(HERE, "grades.csv"))
