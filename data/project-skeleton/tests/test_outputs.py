"""Verifier for project-skeleton: each test checks one part of the requested layout."""
import os
import subprocess

ROOT = "/app/widget"


def test_init_file_has_exact_version_line():
    path = os.path.join(ROOT, "src/widget/__init__.py")
    assert os.path.isfile(path) and not os.path.islink(path)
    with open(path, "rb") as f:
        assert f.read() == b'__version__ = "0.3.1"\n'


def test_readme_has_exact_content():
    path = os.path.join(ROOT, "README.md")
    assert os.path.isfile(path) and not os.path.islink(path)
    with open(path, "rb") as f:
        assert f.read() == b"# widget\n\nA tiny example package.\n"


def test_docs_index_is_relative_symlink_to_readme():
    link = os.path.join(ROOT, "docs/index.md")
    assert os.path.islink(link)
    assert os.readlink(link) == "../README.md"
    assert os.path.realpath(link) == os.path.join(ROOT, "README.md")


def test_tests_gitkeep_is_empty_regular_file():
    path = os.path.join(ROOT, "tests/.gitkeep")
    assert os.path.isfile(path) and not os.path.islink(path)
    assert os.path.getsize(path) == 0


def test_bin_widget_runs_and_prints_version():
    path = os.path.join(ROOT, "bin/widget")
    assert os.path.isfile(path)
    assert os.access(path, os.X_OK)
    result = subprocess.run([path], capture_output=True, text=True, timeout=10, cwd="/")
    assert result.returncode == 0
    assert result.stdout == "widget 0.3.1\n"
