"""Every environment variable the code touches is declared in sim/knobs.py (or is another
program's, listed there), is read through knob(), and docs/testing.md lists them as declared."""
import ast
import re

import pytest

from sim import knobs
from sim.knobs import EXTERNAL, KNOBS, REQUIRED, Knob, Registry, check_env
from sim.runner import ROOT

SCANNED = ("tb", "sim", "rtl/rnic_flow")
#: the registry, which reads a variable by the name it is given, and this test, whose examples
#: are undeclared on purpose
NOT_SCANNED = {"rtl/rnic_flow/knobs.py", "tb/flow/test_knobs.py"}
#: methods of os.environ that take a variable's name first
_NAMED = {"get", "setdefault", "pop"}
#: calls that read a declared knob, and a test's way of setting a variable
_KNOB_CALLS = {"knob", "is_set"}
_SETENV = {"setenv", "delenv"}


def _sources():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if ("__pycache__" not in path.parts
                    and str(path.relative_to(ROOT)) not in NOT_SCANNED):
                yield path


def _is_environ(node):
    return (isinstance(node, ast.Attribute) and node.attr == "environ"
            and isinstance(node.value, ast.Name) and node.value.id == "os")


def _name(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def environment_uses(tree, embedded=False):
    """``(line, name or None, how)`` for each use of a variable in ``tree``: ``how`` is
    ``"environ"`` (os.environ / os.getenv), ``"knob"`` (knob() / is_set()), ``"setenv"``
    (a test setting one) or ``"whole"`` (os.environ used other than by one name). ``embedded``:
    the code is a script inside a string (scanned too: a stand-in tool)."""
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    out = []
    for node in ast.walk(tree):
        if _is_environ(node):
            p = parents.get(node)
            if isinstance(p, ast.Subscript) and p.value is node:
                out.append((node.lineno, _name(p.slice), "environ"))
            elif (isinstance(p, ast.Attribute) and p.attr in _NAMED
                  and isinstance(parents.get(p), ast.Call) and parents[p].args):
                out.append((node.lineno, _name(parents[p].args[0]), "environ"))
            elif (isinstance(p, ast.Compare) and node in p.comparators
                  and all(isinstance(o, (ast.In, ast.NotIn)) for o in p.ops)):
                out.append((node.lineno, _name(p.left), "environ"))
            elif isinstance(p, ast.Dict) and None in p.keys:
                pass            # {**os.environ, ...}: the whole environment passed on
            else:
                out.append((node.lineno, None, "whole"))
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            attr = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) \
                else None
            if attr == "getenv":
                out.append((node.lineno, _name(node.args[0]), "environ"))
            elif attr in _KNOB_CALLS and _name(node.args[0]):
                out.append((node.lineno, _name(node.args[0]), "knob"))
            elif attr in _SETENV:
                out.append((node.lineno, _name(node.args[0]), "setenv"))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and "os.environ" in node.value):
            try:
                inner = ast.parse(node.value)
            except SyntaxError:
                continue
            out += [(node.lineno, n, how) for _, n, how in environment_uses(inner, True)]
    if embedded:
        out = [(line, n, "script") if how == "environ" else (line, n, how)
               for line, n, how in out]
    return out


def _problem(name, how):
    if how == "whole":
        return "uses os.environ other than by one literal name"
    if name is None:
        return "names a variable the test cannot read (not a literal)" \
            if how != "knob" else None
    if how == "knob":
        return None if name in KNOBS else f"knob({name!r}): not declared"
    if how == "environ":
        if name in EXTERNAL:
            return None
        return (f"reads ${name} through os.environ: use knob()" if name in KNOBS
                else f"${name} is not declared in sim/knobs.py")
    return None if name in KNOBS or name in EXTERNAL else f"${name} is not declared"


def test_every_variable_is_declared():
    """(a) every variable code in tb/, sim/ and rtl/rnic_flow/ reads or sets is declared (or is
    another program's, listed in EXTERNAL), and a declared knob is read through knob()."""
    bad = []
    for path in _sources():
        tree = ast.parse(path.read_text(), str(path))
        for line, name, how in environment_uses(tree):
            why = _problem(name, how)
            if why:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {why}")
    assert not bad, "\n".join(bad)


def test_scan_sees_every_way_of_reading():
    src = '''
import os
a = os.environ["A_ONE"]
b = os.environ.get("A_TWO", "x")
c = "A_THREE" in os.environ
d = os.getenv("A_FOUR")
e = knob("A_FIVE")
env = os.environ
f = {**os.environ, "PATH": "/bin"}
g = os.environ.get(name)
monkeypatch.setenv("A_SIX", "1")
FAKE = r"""
import os
print(os.environ["A_SEVEN"])
"""
'''
    got = [(n, how) for _, n, how in environment_uses(ast.parse(src))]
    assert got.count((None, "whole")) == 1 and (None, "environ") in got
    for n, how in (("A_ONE", "environ"), ("A_TWO", "environ"), ("A_THREE", "environ"),
                   ("A_FOUR", "environ"), ("A_FIVE", "knob"), ("A_SIX", "setenv"),
                   ("A_SEVEN", "script")):
        assert (n, how) in got, (n, how, got)
    assert _problem("RESP_RANDOM_SEED", "environ").endswith("use knob()")
    assert _problem("PATH", "environ") is None
    assert _problem("FAKE_STAT", "script") is None
    assert "not declared" in _problem("RR_SEED", "knob")


def test_docs_table_current():
    """(b) the knob tables of docs/testing.md are the rendering of sim/knobs.py."""
    assert not knobs.update_doc(ROOT / "docs" / "testing.md", check=True), \
        "docs/testing.md: the knob tables are stale: run `make docs`"


#: NAME=value words of the Makefile, scripts and docs that are make's or Verilator's variables
_NOT_ENV = {"OPT_FAST", "OPT_SLOW", "OPT_GLOBAL", "CFG_CXXFLAGS_PCH_I", "DEBIAN_FRONTEND"}


def test_names_set_in_makefile_scripts_and_docs_are_declared():
    """A ``NAME=value`` in the Makefile, scripts/, .ci/, the README or docs/ names a declared
    variable: a renamed knob leaves no old name behind."""
    files = [ROOT / "Makefile", ROOT / "README.md", *(ROOT / "scripts").iterdir(),
             *(ROOT / ".ci").iterdir(), *(ROOT / "docs").glob("*.md")]
    bad = []
    for path in files:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for name in re.findall(r"(?<![\w$.-])([A-Z][A-Z0-9]*_[A-Z0-9_]+)=", line):
                if name not in KNOBS and name not in EXTERNAL and name not in _NOT_ENV:
                    bad.append(f"{path.relative_to(ROOT)}:{n}: {name}")
    assert not bad, "\n".join(bad)


def test_knob_reads_the_declared_type_and_default(monkeypatch):
    reg = Registry([("t", "here", [
        Knob("T_INT", "int", 7, "an int"),
        Knob("T_FLAG", "flag", True, "a flag"),
        Knob("T_INTS", "ints", [1, 2], "ints"),
        Knob("T_FLOAT", "float", None, "a float"),
        Knob("T_REQ", "path", REQUIRED, "a path that must be given"),
    ])])
    for n in ("T_INT", "T_FLAG", "T_INTS", "T_FLOAT", "T_REQ"):
        monkeypatch.delenv(n, raising=False)
    assert (reg.knob("T_INT"), reg.knob("T_FLAG"), reg.knob("T_INTS"),
            reg.knob("T_FLOAT")) == (7, True, [1, 2], None)
    assert not reg.is_set("T_INT")
    with pytest.raises(KeyError, match="T_REQ is not set: a path that must be given"):
        reg.knob("T_REQ")
    monkeypatch.setenv("T_INT", "12")
    monkeypatch.setenv("T_FLAG", "0")
    monkeypatch.setenv("T_INTS", "3,4,5")
    monkeypatch.setenv("T_FLOAT", "0.5")
    monkeypatch.setenv("T_REQ", "")              # empty counts as unset
    assert (reg.knob("T_INT"), reg.knob("T_FLAG"), reg.knob("T_INTS"),
            reg.knob("T_FLOAT")) == (12, False, [3, 4, 5], 0.5)
    assert reg.is_set("T_INT") and not reg.is_set("T_REQ")
    monkeypatch.setenv("T_FLAG", "maybe")
    with pytest.raises(ValueError, match=r"\$T_FLAG='maybe': expected 0/1"):
        reg.knob("T_FLAG")
    with pytest.raises(KeyError, match="not a declared knob"):
        reg.knob("T_UNDECLARED")
    with pytest.raises(KeyError, match="not a declared knob"):
        reg.is_set("T_UNDECLARED")
    with pytest.raises(ValueError, match="declared twice"):
        reg.add("again", "here", [Knob("T_INT", "int", 0, "again")])


def test_defaults_are_of_their_type():
    for k in KNOBS.by_name.values():
        if k.default is None or k.default is REQUIRED:
            continue
        assert k.parse(k.default_text()) == k.default, k.name
        assert k.meaning and not k.meaning.endswith("."), k.name


def test_cocotb_runs_refuse_undeclared_names():
    check_env({"RESP_RANDOM_SEED": "1", "PYTHONPATH": "x", "COCOTB_LOG_LEVEL": "INFO"})
    with pytest.raises(KeyError, match="RR_SEED"):
        check_env({"RR_SEED": "1"})
