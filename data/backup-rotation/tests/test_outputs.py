"""Verifier for backup-rotation: runs the script on fresh directories against a Python reference."""
import datetime
import os
import re
import subprocess

SCRIPT = "/app/rotate_backups.sh"
PATTERN = re.compile(r"backup-\d{4}-\d{2}-\d{2}\.tar\.gz")


def expected_deleted(names, daily, weekly):
    backups = sorted((n for n in names if PATTERN.fullmatch(n)), reverse=True)  # newest first
    keep = set(backups[:daily])
    weeks = []
    for name in backups:
        week = datetime.date.fromisoformat(name[7:17]).isocalendar()[:2]
        if week not in weeks:
            weeks.append(week)
            if len(weeks) <= weekly:
                keep.add(name)
    return sorted(set(backups) - keep)


def make_dir(path, dates, extra_files=(), extra_dirs=()):
    os.makedirs(path, exist_ok=True)
    for d in dates:
        with open(os.path.join(path, f"backup-{d}.tar.gz"), "w") as f:
            f.write(f"archive {d}\n")
    for name in extra_files:
        with open(os.path.join(path, name), "w") as f:
            f.write("not a backup\n")
    for name in extra_dirs:
        os.makedirs(os.path.join(path, name))
    return sorted(os.listdir(path))


def run(*args):
    return subprocess.run([SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=60)


def day_range(start, count, step=1):
    first = datetime.date.fromisoformat(start)
    return [(first + datetime.timedelta(days=i * step)).isoformat() for i in range(count)]


def check_rotation(path, daily, weekly):
    before = sorted(os.listdir(path))
    regular = [n for n in before if os.path.isfile(os.path.join(path, n)) and not os.path.islink(os.path.join(path, n))]
    deleted = expected_deleted(regular, daily, weekly)
    result = run(path, daily, weekly)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == deleted
    assert sorted(os.listdir(path)) == sorted(set(before) - set(deleted))


def test_bad_usage_exits_2_and_deletes_nothing(tmp_path):
    path = str(tmp_path / "b")
    before = make_dir(path, day_range("2024-01-01", 5))
    for args in ([], [path], [path, 1], [path, "x", 1], [path, 1, "2.5"], [path, -1, 1],
                 [str(tmp_path / "missing"), 1, 1], [path, 1, 1, 1]):
        result = run(*args)
        assert result.returncode == 2, args
        assert result.stdout == "", args
        assert result.stderr.strip() != "", args
    assert sorted(os.listdir(path)) == before


def test_daily_only_keeps_newest(tmp_path):
    path = str(tmp_path / "daily")
    make_dir(path, day_range("2024-03-01", 10))
    check_rotation(path, 3, 0)
    assert sorted(os.listdir(path)) == [f"backup-2024-03-{d}.tar.gz" for d in ("08", "09", "10")]


def test_weekly_rule_across_year_boundary(tmp_path):
    # 2021-01-03 belongs to ISO week 2020-W53; 2021-01-04 starts 2021-W01
    path = str(tmp_path / "weekly")
    dates = ["2020-12-14", "2020-12-20", "2020-12-21", "2020-12-27", "2020-12-28", "2021-01-01",
             "2021-01-03", "2021-01-04", "2021-01-05", "2021-01-10", "2021-01-11", "2021-01-12"]
    make_dir(path, dates)
    check_rotation(path, 2, 4)
    assert "backup-2021-01-03.tar.gz" in os.listdir(path)  # newest of 2020-W53
    assert "backup-2021-01-01.tar.gz" not in os.listdir(path)


def test_long_history_mixed_rules(tmp_path):
    path = str(tmp_path / "long")
    make_dir(path, day_range("2023-11-02", 60, step=2))
    check_rotation(path, 7, 5)


def test_non_backups_are_never_touched(tmp_path):
    path = str(tmp_path / "mixed")
    extras = ["notes.txt", "backup-2024-01-01.tar.gz.part", "backup-2024-1-01.tar.gz",
              "Backup-2024-01-02.tar.gz", "backup-2024-01-09.tar", "xbackup-2024-01-04.tar.gz"]
    make_dir(path, day_range("2024-01-01", 6), extras, extra_dirs=["backup-2024-01-20.tar.gz"])
    check_rotation(path, 0, 0)
    assert sorted(os.listdir(path)) == sorted(extras + ["backup-2024-01-20.tar.gz"])


def test_dry_run_lists_but_deletes_nothing(tmp_path):
    path = str(tmp_path / "dry")
    before = make_dir(path, day_range("2024-05-01", 20))
    result = run("-n", path, 2, 1)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected_deleted(before, 2, 1)
    assert sorted(os.listdir(path)) == before


def test_directory_with_spaces(tmp_path):
    path = str(tmp_path / "my backups" / "night ly")
    make_dir(path, day_range("2024-06-01", 15, step=3))
    check_rotation(path, 1, 3)
