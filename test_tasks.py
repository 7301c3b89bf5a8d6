"""Task-format tests (fast: no Docker, no solving): loading and validating task directories, and
structural checks of the bundled tasks in data/.

The loading tests build small task directories with test_sandbox.make_task and check the defaults of
optional task.yaml keys and that every broken task fails with an error naming the task, the file and the
problem. Whether each bundled solution really scores 1.0 and doing nothing scores less is checked in real
sandboxes by `python reward.py data --check` (and the sandbox tests); the data/ checks here only catch
mistakes that make a task unusable or leak its answer: a task that does not load, too few tests for partial
credit, a Dockerfile that copies the tests or the solution, a missing reference solution, a verifier that
does not even compile, or a generator whose build-time copy and verifier copy have drifted apart.
"""
import ast
import filecmp
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tasks import TaskError, load_task, load_tasks
from test_sandbox import make_task

DATA = Path(__file__).parent / "data"
TASKS = load_tasks(DATA)
IDS = [task.task_id for task in TASKS]
REQUIRED_KEYS = {"instruction", "difficulty", "author_name", "author_email", "category", "tags", "parser_name",
                 "max_agent_timeout_sec", "max_test_timeout_sec", "run_tests_in_same_shell"}


# ------------------------------------------------------------------------------ loading task directories

def test_load_task_defaults_and_unknown_keys(tmp_path):
    path = make_task(tmp_path, yaml_text="instruction: hi\nauthor_name: someone\ncategory: x\ntags: [a, b]\n"
                                         "max_test_timeout_sec: 30\n")
    task = load_task(path)
    assert (task.task_id, task.instruction, task.tags) == ("demo", "hi", ["a", "b"])
    assert (task.max_agent_timeout_sec, task.max_test_timeout_sec, task.difficulty) == (360.0, 30.0, "medium")
    assert task.parser_name == "pytest" and not task.run_tests_in_same_shell and not task.allow_network
    assert task.solution == path / "solution.sh"


@pytest.mark.parametrize("breakage, file, problem", [
    (lambda p: (p / "task.yaml").unlink(), "task.yaml", "missing"),
    (lambda p: (p / "Dockerfile").unlink(), "Dockerfile", "missing"),
    (lambda p: (p / "tests" / "test_outputs.py").unlink(), "tests/test_outputs.py", "missing"),
    (lambda p: (p / "task.yaml").write_text("instruction: [unclosed\n"), "task.yaml", "invalid YAML"),
    (lambda p: (p / "task.yaml").write_text("difficulty: easy\n"), "task.yaml", "missing required key 'instruction'"),
    (lambda p: (p / "task.yaml").write_text("- a list\n"), "task.yaml", "mapping"),
    (lambda p: (p / "task.yaml").write_text("instruction: x\nmax_test_timeout_sec: soon\n"), "task.yaml",
     "'max_test_timeout_sec' must be a positive number"),
    (lambda p: (p / "task.yaml").write_text("instruction: x\nparser_name: swebench\n"), "task.yaml", "not supported"),
])
def test_broken_task_errors_name_task_file_and_problem(tmp_path, breakage, file, problem):
    path = make_task(tmp_path, name="broken-one")
    breakage(path)
    with pytest.raises(TaskError) as error:
        load_task(path)
    assert str(error.value).startswith(f"task 'broken-one': {file}: ") and problem in str(error.value)


def test_load_tasks_reports_every_broken_task(tmp_path):
    make_task(tmp_path, name="good")
    (make_task(tmp_path, name="bad-a") / "Dockerfile").unlink()
    (make_task(tmp_path, name="bad-b") / "task.yaml").write_text("instruction: ''\n")
    with pytest.raises(TaskError) as error:
        load_tasks(tmp_path)
    assert "task 'bad-a': Dockerfile: missing" in str(error.value) and "task 'bad-b': task.yaml" in str(error.value)
    assert [t.task_id for t in load_tasks(tmp_path / "good")] == ["good"]


# -------------------------------------------------------------------------------- bundled tasks in data/

def test_enough_tasks_with_a_difficulty_mix():
    assert len(TASKS) >= 16
    mix = Counter(task.difficulty for task in TASKS)
    assert set(mix) <= {"easy", "medium", "hard"}
    assert mix["easy"] >= 4 and mix["medium"] >= 6 and mix["hard"] >= 3, mix


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_task_yaml_has_all_keys(task):
    spec = yaml.safe_load((task.path / "task.yaml").read_text())
    assert REQUIRED_KEYS <= set(spec), REQUIRED_KEYS - set(spec)
    assert spec["parser_name"] == "pytest" and spec["run_tests_in_same_shell"] is False
    assert spec["author_name"] == "terminal-grpo"


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_verifier_compiles_and_has_three_tests(task):
    source = (task.path / "tests" / "test_outputs.py").read_text()
    tree = ast.parse(source)  # a syntax error fails here, naming the task
    names = [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
    assert len(names) >= 3, names
    assert len(names) == len(set(names)), "two tests share a name: one silently replaces the other"


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_dockerfile_uses_base_image_and_hides_answers(task):
    dockerfile = (task.path / "Dockerfile").read_text()
    first = next(line for line in dockerfile.splitlines() if line.strip() and not line.startswith("#"))
    assert first.split() == ["FROM", "terminal-grpo-base:bookworm"]
    for line in dockerfile.splitlines():
        if re.match(r"\s*(COPY|ADD)\b", line, re.IGNORECASE):
            assert not re.search(r"(^|[\s/])(tests|solution\.sh|run-tests\.sh)\b", line.split(None, 1)[1]), line


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_reference_solution_present(task):
    solution = task.path / "solution.sh"
    assert solution.is_file()
    assert solution.read_text().startswith("#!/bin/bash")


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_generator_copies_are_identical(task):
    """Verifiers regenerate their data with a copy of the build-time generator: the two must not drift."""
    for generator in (task.path / "tests").glob("gen_*.py"):
        build_copy = task.path / "files" / generator.name
        assert build_copy.is_file(), f"{generator.name} has no build-time twin in files/"
        assert filecmp.cmp(generator, build_copy, shallow=False), f"{generator.name} differs from files/"


def test_readme_lists_every_task():
    readme = (DATA / "README.md").read_text()
    for task_id in IDS:
        assert f"`{task_id}`" in readme, task_id
