"""Verifier for git-restore-and-revert: inspects committed state of main, not just the working tree."""
import subprocess

REPO = "/app/repo"
SETTINGS = "[meter]\ndevice = /dev/ttyUSB0\nbaud = 9600\npulses_per_kwh = 1000\n"
# The build script fixes all dates, so the original tip's hash is stable across builds.
ORIGINAL_TIP = "c8b6f70c7299ae42bd984227c037ef572e59004e"
ORIGINAL_SUBJECTS = [
    "Initial commit",
    "Add logging helper",
    "Remove unused settings",
    "Enable debug mode",
    "Document import check",
]


def git(*args):
    result = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_settings_restored_in_main():
    assert git("show", "main:config/settings.ini") == SETTINGS


def test_debug_mode_reverted_in_main():
    app = git("show", "main:app.py")
    assert "DEBUG = False\n" in app
    assert "DEBUG = True" not in app
    # the revert must give back exactly the app.py of before "Enable debug mode"
    before = git("log", "--format=%H", "--grep=^Enable debug mode$", "main").split()[0]
    assert app == git("show", f"{before}^:app.py")


def test_original_history_kept_and_readme_update_present():
    ancestor = subprocess.run(["git", "-C", REPO, "merge-base", "--is-ancestor", ORIGINAL_TIP, "main"], timeout=30)
    assert ancestor.returncode == 0, "history of main was rewritten"
    subjects = git("log", "--reverse", "--format=%s", "main").splitlines()
    assert subjects[: len(ORIGINAL_SUBJECTS)] == ORIGINAL_SUBJECTS
    assert len(subjects) > len(ORIGINAL_SUBJECTS)
    assert "python3 -c" in git("show", "main:README.md")


def test_work_committed_and_tree_clean():
    assert git("rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git("status", "--porcelain") == ""
    assert git("ls-files", "config/settings.ini").strip() == "config/settings.ini"
