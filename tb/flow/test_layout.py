"""The package layout's rules, checked on the import statements of the tree.

- ``rtl/rnic`` is hardware only: it never imports the flow (``rnic_flow``), the simulation
  support (``sim``) nor the test benches (``tb``).
- ``rtl/rnic_flow`` imports the hardware, never ``tb``.
- ``sim`` (bench harnesses, models, driver) never imports ``tb``.
- No test runs Amaranth's simulator: every test simulates the generated Verilog (a test in
  Amaranth's testbench style runs on it through ``sim.vsim``).
- No function or method in ``rtl`` (the hardware and the flow), ``sim`` or ``tb`` is longer
  than 100 lines, so that each reads at once.
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


def _imported_modules(path):
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
    return out


def test_no_test_runs_amaranths_simulator():
    for path in _files("tb") + _files("sim"):
        mods = _imported_modules(path)
        assert not any(m == "amaranth.sim" or m.startswith("amaranth.sim.") for m in mods), \
            f"{path.relative_to(ROOT)} imports amaranth.sim: simulate the Verilog (sim.vsim)"


def test_flow_is_a_separate_package():
    """The flow's modules live in rnic_flow, and the installed command is the flow's."""
    for name in ("synth", "placed", "depth", "area", "budgets"):
        assert not (ROOT / "rtl" / "rnic" / f"{name}.py").exists(), name
        assert (ROOT / "rtl" / "rnic_flow" / f"{name}.py").exists(), name
    assert 'rnic = "rnic_flow.cli:main"' in (ROOT / "pyproject.toml").read_text()


MAX_FUNCTION_LINES = 100


def long_functions(text, filename="<text>", limit=MAX_FUNCTION_LINES):
    """(qualified name, lines) of every function or method in the Python source ``text`` longer
    than ``limit`` lines, counted from its ``def`` line to its last line (decorators apart);
    nested functions and methods of nested classes included."""
    out = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                lines = child.end_lineno - child.lineno + 1
                if lines > limit:
                    out.append((name, lines))
                walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(text, filename), "")
    return out


def test_functions_at_most_100_lines():
    """Every function and method of the hardware, the flow, the simulation support and the
    benches is at most 100 lines long."""
    bad = [f"{path.relative_to(ROOT)}: {name} is {lines} lines"
           for sub in ("rtl", "sim", "tb") for path in _files(sub)
           for name, lines in long_functions(path.read_text(), str(path))]
    assert not bad, (f"functions longer than {MAX_FUNCTION_LINES} lines (split them into "
                     "named helpers):\n" + "\n".join(bad))


def test_long_functions_are_found():
    """The check counts from ``def`` to the last line and names methods and nested functions."""
    body = "    x = 1\n" * (MAX_FUNCTION_LINES - 1)
    text = (f"def fits():\n{body}\n"
            f"@decorated\nasync def over():\n{body}    x = 2\n"
            "class A:\n    def m(self):\n        def inner():\n"
            + body.replace("    ", "            ") + "            x = 2\n"
            "        return inner\n")
    assert long_functions(text) == [("over", MAX_FUNCTION_LINES + 1),
                                    ("A.m", MAX_FUNCTION_LINES + 3),
                                    ("A.m.inner", MAX_FUNCTION_LINES + 1)]
