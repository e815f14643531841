"""Block RAM output registers: a netlist step between ``synth_ecp5`` and nextpnr (and the area
count) that folds the flip-flops registering a DP16KD read port into the RAM's own output
register.

yosys' ECP5 block RAM mapping (``share/lattice/brams_16kd.txt``) leaves every DP16KD in
``REGMODE_x = "NOREG"``: a read port followed by a register (the two-cycle read of
docs/design-rules.md) gets that register in fabric flip-flops, behind the RAM's slow clock to
out. The DP16KD's output register (``REGMODE_x = "OUTREG"``) is that register inside the RAM.
As Lattice's simulation model of the family's block RAM has it: on the port's clock edge, when
``OCEx`` is 1, it loads the port's read latch (or 0 when ``RSTx`` is 1); the read enable
``CEx`` does not gate it; the global set/reset at configuration clears it (it starts at 0).
In the 36-bit pseudo-dual-port mode (``DATA_WIDTH_B`` 36, yosys' ``PDPW16KD`` mapping: the
read data on ``DOA`` and ``DOB``) both halves' output registers are port B's: ``CLKB``,
``OCEB``, ``RSTB``, with ``REGMODE_A`` selecting the register for the ``DOA`` half.

A read port (``A``; ``B``, which in the 36-bit mode has the ``DOA`` pins too) is folded when
every condition holds:

* the port is in ``NOREG`` mode, its ``RST`` is the constant 0 and its chip selects always
  select it (``CS`` all 0, ``CSDECODE`` ``0b000``);
* every ``DOx`` pin that drives anything drives exactly one load, the ``DI`` of a
  ``TRELLIS_FF`` clocked by the port's clock net on the same edge, whose set/reset is never
  asserted (``LSR`` constant inactive), that starts at 0 (``REGSET`` ``RESET``, no ``PRLD``) and
  that does not carry ``keep``;
* all those flip-flops load under one enable: ``CEMUX`` ``"1"`` (or ``CE`` the constant 1), or
  one ``CE`` net, not inverted.

Then the port's ``REGMODE`` (both in the 36-bit mode) becomes ``OUTREG``, its ``OCE`` the
flip-flops' enable (1 when they had none), each data-out pin drives its flip-flop's ``Q`` net
and the flip-flops are deleted. The folded
register loads exactly when the flip-flops did, from the same read latch, and starts at the same
0: the netlist behaves the same cycle for cycle (tb/flow/test_outreg.py simulates both).
Anything else is left as it is and counted with its reason.
"""

import collections
import json
from pathlib import Path

__all__ = ["fold_netlist", "fold_module", "fold_file", "read_ports", "summary", "REASONS"]

#: why a used read port was not folded, by key
REASONS = {
    "pdp36": "data out on the 36-bit write side",
    "reset": "the port's RST is used",
    "chip_select": "the port's chip select is used",
    "fanout": "a data-out bit has another load than one flip-flop",
    "clock": "a flip-flop on another clock or edge",
    "ff_reset": "a flip-flop with a set/reset",
    "ff_init": "a flip-flop that starts at 1",
    "keep": "a flip-flop marked keep",
    "enable": "flip-flops with different or inverted enables",
}

_CONST = ("0", "1", "x", "z")


def _int(v, default=0):
    if isinstance(v, int):
        return v
    try:
        return int(str(v), 2)
    except ValueError:
        return default


def _base(cell_type):
    return cell_type.rsplit("\\", 1)[-1]


def _loads(mod):
    """``{bit: [(cell, port)]}``: every sink of each net bit of ``mod`` (a module output port
    counts as a load named ``(None, port)``; a cell port of unknown direction as a load)."""
    loads = collections.defaultdict(list)
    for pname, p in mod.get("ports", {}).items():
        if p.get("direction") != "input":
            for b in p["bits"]:
                loads[b].append((None, pname))
    for cname, c in mod.get("cells", {}).items():
        dirs = c.get("port_directions", {})
        for pname, bits in c.get("connections", {}).items():
            if dirs.get(pname) != "output":
                for b in bits:
                    loads[b].append((cname, pname))
    return loads


def _conn(cell, port):
    bits = cell.get("connections", {}).get(port)
    return bits[0] if bits else None


def _ff_enable(ff):
    """The flip-flop's load enable: ``"1"``, a net bit, or None (inverted or never)."""
    mux = str(ff.get("parameters", {}).get("CEMUX", "1")).strip()
    if mux == "1":
        return "1"
    if mux in ("0", "INV"):
        return None
    ce = _conn(ff, "CE")
    if ce is None or ce == "1":
        return "1"
    return None if ce in _CONST else ce


def _ff_problem(ff, clk, inverted):
    """The reason a ``TRELLIS_FF`` cannot become the port's output register, or None."""
    par = ff.get("parameters", {})
    if _conn(ff, "CLK") != clk or (str(par.get("CLKMUX", "CLK")).strip() == "INV") != inverted:
        return "clock"
    lsr = _conn(ff, "LSR")
    lsr_inv = str(par.get("LSRMUX", "LSR")).strip() == "INV"
    if not (lsr in (None, "0") and not lsr_inv or lsr == "1" and lsr_inv):
        return "ff_reset"
    if (str(par.get("REGSET", "RESET")).strip() != "RESET"
            or str(par.get("LSRMODE", "LSR")).strip() == "PRLD"):
        return "ff_init"
    if _int(ff.get("attributes", {}).get("keep", 0)):
        return "keep"
    return None


def read_ports(ram):
    """``[(port, data-out pin halves, REGMODE letters)]`` of a DP16KD: its control letter
    (``CLK``, ``OCE``, ``RST``, ``CS``), the pin prefixes and the ``REGMODE_x`` it sets. In the
    36-bit mode port B reads through ``DOA`` and ``DOB``; a 36-bit port A only writes."""
    par = ram.get("parameters", {})
    if _int(par.get("DATA_WIDTH_B", 18)) == 36:
        return [("B", ("DOA", "DOB"), ("A", "B"))]
    ports = [("B", ("DOB",), ("B",))]
    if _int(par.get("DATA_WIDTH_A", 18)) != 36:
        ports.insert(0, ("A", ("DOA",), ("A",)))
    return ports


def _used_pins(ram, prefixes, loads):
    pins = [(f"{p}{i}", _conn(ram, f"{p}{i}")) for p in prefixes for i in range(18)]
    return [(pin, b) for pin, b in pins if isinstance(b, int) and loads.get(b)]


def _port_plan(mod, ram, port, loads):
    """``(None, [(pin, ff name)], enable)`` for a foldable read port (an item of
    :func:`read_ports`), ``(reason, [], None)`` for a used port that is not, ``None`` for an
    unused or already registered one."""
    cells, par = mod["cells"], ram.get("parameters", {})
    x, prefixes, regmodes = port
    used = _used_pins(ram, prefixes, loads)
    if not used:
        return None
    if any(str(par.get(f"REGMODE_{r}", "NOREG")).strip() != "NOREG" for r in regmodes):
        return None
    if _conn(ram, f"RST{x}") not in (None, "0"):
        return "reset", [], None
    if (any(_conn(ram, f"CS{x}{i}") not in (None, "0") for i in range(3))
            or str(par.get(f"CSDECODE_{x}", "0b000")).strip() not in ("0b000", "000")):
        return "chip_select", [], None
    clk = _conn(ram, f"CLK{x}")
    inverted = str(par.get(f"CLK{x}MUX", f"CLK{x}")).strip() == "INV"
    plan, enables = [], set()
    for pin, b in used:
        (cname, cport), *more = loads[b]
        ff = cells.get(cname) if cname is not None else None
        if more or ff is None or _base(ff["type"]) != "TRELLIS_FF" or cport != "DI":
            return "fanout", [], None
        problem = _ff_problem(ff, clk, inverted)
        if problem:
            return problem, [], None
        enables.add(_ff_enable(ff))
        plan.append((pin, cname))
    if len(enables) != 1 or None in enables:
        return "enable", [], None
    return None, plan, enables.pop()


def fold_module(mod):
    """Fold the output registers of every DP16KD of one module (a ``write_json`` module, changed
    in place). Returns ``{"ports": n, "ffs": n, "left": {reason: ports}, "left_ffs": n}``."""
    loads = _loads(mod)
    cells = mod.get("cells", {})
    out = {"ports": 0, "ffs": 0, "left": collections.Counter(), "left_ffs": 0}
    rams = [n for n, c in cells.items() if _base(c["type"]) == "DP16KD"]
    for rname in sorted(rams):
        ram = cells[rname]
        ports = read_ports(ram)
        if len(ports) == 1 and ports[0][1] == ("DOB",) and _used_pins(ram, ("DOA",), loads):
            out["left"]["pdp36"] += 1        # DOA of a 36-bit write-only port A
            out["left_ffs"] += len(_used_pins(ram, ("DOA",), loads))
        for port in ports:
            got = _port_plan(mod, ram, port, loads)
            if got is None:
                continue
            reason, plan, enable = got
            if reason:
                out["left"][reason] += 1
                out["left_ffs"] += len(_used_pins(ram, port[1], loads))
                continue
            x = port[0]
            for r in port[2]:
                ram.setdefault("parameters", {})[f"REGMODE_{r}"] = "OUTREG"
            ram["connections"][f"OCE{x}"] = [enable]
            for pin, fname in plan:
                ram["connections"][pin] = list(cells[fname]["connections"]["Q"])
                del cells[fname]
            out["ports"] += 1
            out["ffs"] += len(plan)
    return out


def fold_netlist(netlist):
    """Fold every module of a ``write_json`` netlist (changed in place).

    Returns ``{"ports", "ffs", "left": {reason: ports}, "left_ffs", "modules": {module: ffs
    folded}}``; each module counts once, however many times it is instantiated.
    """
    total = {"ports": 0, "ffs": 0, "left": collections.Counter(), "left_ffs": 0, "modules": {}}
    for name, mod in netlist.get("modules", {}).items():
        if _int(mod.get("attributes", {}).get("blackbox", 0)):
            continue
        r = fold_module(mod)
        for k in ("ports", "ffs", "left_ffs"):
            total[k] += r[k]
        total["left"].update(r["left"])
        if r["ffs"]:
            total["modules"][name] = r["ffs"]
    total["left"] = dict(total["left"])
    return total


def fold_file(src, dst):
    """Read the netlist ``src``, fold it, write it to ``dst``; returns the report of
    :func:`fold_netlist`."""
    netlist = json.loads(Path(src).read_text())
    report = fold_netlist(netlist)
    Path(dst).write_text(json.dumps(netlist))
    return report


def summary(report):
    """One line for a report: how many flip-flops went into block RAM output registers and
    which ports were left, why."""
    line = (f"block RAM output registers: {report['ffs']} FFs folded into {report['ports']} "
            f"DP16KD read port{'s' if report['ports'] != 1 else ''}")
    left = report.get("left") or {}
    if left:
        line += (f"; {sum(left.values())} port{'s' if sum(left.values()) != 1 else ''} "
                 f"({report['left_ffs']} data bits) left: "
                 + ", ".join(f"{n} {REASONS.get(k, k)}" for k, n in sorted(left.items())))
    return line
