"""The package's imports point only down its layers (ci/import_layers.py, docs/DESIGN.md §8)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_checker():
    spec = importlib.util.spec_from_file_location("import_layers", ROOT / "ci" / "import_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_upward_imports_and_no_cycles_in_the_package():
    checker = load_checker()
    edges, _ = checker.graph(ROOT)
    assert checker.upward_arrows(edges) == []
    assert checker.cycles(edges) == []
    assert checker.module_cycles(edges) == []
    assert not [m for m in edges if checker.layer_of(m) is None and m != "ssdbench"]


def test_the_checker_sees_an_upward_import_and_a_cycle_even_inside_a_function(tmp_path):
    checker = load_checker()
    package = tmp_path / "ssdbench"
    for name in ("models", "run"):
        (package / name).mkdir(parents=True)
        (package / name / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (tmp_path / "kernels").mkdir()
    (package / "run" / "plan.py").write_text("from ssdbench.models.shape import X\n")
    (package / "models" / "shape.py").write_text("def f():\n    from ssdbench.run.plan import Y\n")
    edges, inside = checker.graph(tmp_path)
    assert checker.upward_arrows(edges) == [("ssdbench.models.shape", "models", "ssdbench.run.plan", "run")]
    assert checker.cycles(edges) == [["ssdbench.models", "ssdbench.run"]]
    assert inside == 1


def test_the_checker_sees_a_cycle_between_modules_of_one_package(tmp_path):
    """The circles a package-level check passes: models.source <-> models.weights, one import inside a
    function and one as `from package import module`; a package's __init__ importing its modules is none."""
    checker = load_checker()
    package = tmp_path / "ssdbench" / "models"
    package.mkdir(parents=True)
    (tmp_path / "ssdbench" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from ssdbench.models import source\n")
    (package / "source.py").write_text("from ssdbench.models import weights\n")
    (package / "weights.py").write_text("def f():\n    from ssdbench.models.source import Source\n")
    (package / "shape.py").write_text("import ssdbench.models\n")
    edges, _ = checker.graph(tmp_path)
    assert checker.cycles(edges) == []  # one package: the package-level check sees nothing
    assert checker.module_cycles(edges) == [["ssdbench.models.source", "ssdbench.models.weights"]]


def test_the_command_line_starts_without_torch():
    """`ssdbench --help`, `ls` and a usage error should answer at once: torch loads only when a command needs it."""
    import subprocess
    import sys

    code = "import sys, ssdbench.cli.main; print(sorted(m for m in ('torch', 'pandas', 'transformers') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
