"""The layers hold: import-linter keeps the core from importing its edges, and the app imports at module level."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """The app and its lint configuration, copied so a test can break them."""
    shutil.copytree(
        ROOT / "elicitation", tmp_path / "elicitation", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_import_contracts_hold_on_the_code_as_it_is(tree_copy: Path) -> None:
    result = lint_imports(tree_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_import_from_the_core_to_delivery_breaks_the_build(tree_copy: Path) -> None:
    transition_path = tree_copy / "elicitation" / "queue" / "transitions" / "path.py"
    transition_path.write_text(
        transition_path.read_text() + "\nfrom elicitation.delivery import pushes  # noqa\n"
    )
    result = lint_imports(tree_copy)
    assert result.returncode != 0
    assert "Edges over flows and delivery over the core BROKEN" in result.stdout
    assert "elicitation.queue.transitions.path -> elicitation.delivery.pushes" in result.stdout


def test_the_core_may_not_reach_for_a_transport(tree_copy: Path) -> None:
    selectors = tree_copy / "elicitation" / "queue" / "selectors.py"
    selectors.write_text(selectors.read_text() + "\nimport channels.layers  # noqa\n")
    result = lint_imports(tree_copy)
    assert result.returncode != 0
    assert "no DRF, Channels, Celery or HTTP client BROKEN" in result.stdout


def test_no_import_hides_inside_a_function_of_the_app() -> None:
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run(
        [str(ruff), "check", "--select", "PLC0415", "--output-format", "concise", "elicitation"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout
