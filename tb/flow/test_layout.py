"""The package layout's rules, checked on the import statements of the tree.

- ``rtl/rnic`` is hardware only: it never imports the flow (``rnic_flow``), the simulation
  support (``sim``) nor the test benches (``tb``).
- ``rtl/rnic_flow`` imports the hardware, never ``tb``.
- ``sim`` (bench harnesses, models, driver) never imports ``tb``.
"""
import ast

import pytest

from sim.runner import ROOT


def _imports(path):
    """Top-level package names ``path`` imports (absolute imports only)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def _files(sub):
    return sorted((ROOT / sub).rglob("*.py"))


@pytest.mark.parametrize("path", _files("rtl/rnic"), ids=lambda p: str(p.relative_to(ROOT)))
def test_hardware_imports_no_flow_and_no_benches(path):
    rel = str(path.relative_to(ROOT))
    bad = {"rnic_flow", "tb", "sim"}
    assert not _imports(path) & bad, f"{rel} imports {sorted(_imports(path) & bad)}"


def test_flow_and_sim_import_no_benches():
    for path in _files("rtl/rnic_flow") + _files("sim"):
        assert "tb" not in _imports(path), f"{path.relative_to(ROOT)} imports tb"


def test_flow_is_a_separate_package():
    """The flow's modules live in rnic_flow, and the installed command is the flow's."""
    for name in ("synth", "placed", "depth", "area", "budgets"):
        assert not (ROOT / "rtl" / "rnic" / f"{name}.py").exists(), name
        assert (ROOT / "rtl" / "rnic_flow" / f"{name}.py").exists(), name
    assert 'rnic = "rnic_flow.cli:main"' in (ROOT / "pyproject.toml").read_text()
