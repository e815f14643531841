"""Logic depth of a synth_ecp5 netlist (rnic_flow.depth), on a small netlist written by hand.

Every figure below is worked out from the weights in rnic_flow.depth's docstring: a flip-flop's
clock-to-Q 0.5, a block RAM's 3.5, a LUT4 1.0, a carry-chain step 0.06, a carry into a sum 0.35.
The real flow's figure is checked by test_synth's ``full`` ECP5 run.
"""

import json

import pytest

from rnic_flow.depth import area_by_block, format_area, format_depth, logic_depth, main_depth


def _cell(typ, dirs, **conns):
    return {"type": typ, "port_directions": dirs,
            "connections": {p: (v if isinstance(v, list) else [v]) for p, v in conns.items()}}


def _ff(q, di):
    return _cell("$paramod$abc\\TRELLIS_FF", {"CLK": "input", "DI": "input", "Q": "output"},
                 CLK=1, DI=di, Q=q)


def _lut(z, *ins):
    ports = dict(zip("ABCD", ins))
    return _cell("LUT4", {"A": "input", "B": "input", "C": "input", "D": "input",
                          "Z": "output"}, Z=z, **ports)


def _ccu(**conns):
    dirs = {p: "input" for p in ("A0", "B0", "C0", "D0", "A1", "B1", "C1", "D1", "CIN")}
    dirs.update(S0="output", S1="output", COUT="output")
    return _cell("CCU2C", dirs, **conns)


NETLIST = {"modules": {"blk": {
    "attributes": {"top": "00000000000000000000000000000001"},
    "ports": {"din": {"direction": "input", "bits": [2]}},
    "netnames": {"din": {"hide_name": 0, "bits": [2]},
                 "alpha.a": {"hide_name": 0, "bits": [10]},
                 "beta.b": {"hide_name": 0, "bits": [13]}},
    "cells": {
        # alpha.a -> two LUTs -> beta.b: 0.5 + 2 = 2.5
        "alpha.a_TRELLIS_FF_Q": _ff(10, 2),
        "beta.x_LUT4_Z": _lut(11, 10),
        "beta.y_LUT4_Z": _lut(12, 11, 10),
        "beta.b_TRELLIS_FF_Q": _ff(13, 12),
        # beta.b -> carry chain of three -> beta.c: 0.5 + 1 + 0.06 + 0.35 = 1.91
        "c0": _ccu(A0=13, COUT=20),
        "c1": _ccu(CIN=20, COUT=21),
        "c2": _ccu(CIN=21, S1=22),
        "beta.c_TRELLIS_FF_Q": _ff(23, 22),
        # a block RAM read -> LUT -> gamma.d: 3.5 + 1 = 4.5
        "gamma.ram": _cell("$paramod$x\\DP16KD", {"CLKA": "input", "DOA0": "output"},
                           CLKA=1, DOA0=30),
        "gamma.l_LUT4_Z": _lut(31, 30),
        "gamma.d_TRELLIS_FF_Q": _ff(32, 31),
        # a LUT RAM read (address beta.b) -> alpha.e: 0.5 + 1 = 1.5; its write data (net 12)
        # ends a path of 2.5
        "beta.lutram": _cell("TRELLIS_DPR16X4", {"RAD": "input", "WD": "input", "WCK": "input",
                                                 "DO": "output"}, RAD=13, WD=12, WCK=1, DO=40),
        "alpha.e_TRELLIS_FF_Q": _ff(41, 40),
        # a combinational loop (50 <-> 51) feeding alpha.f: cut, not followed for ever
        "alpha.l1": _lut(50, 51),
        "alpha.l2": _lut(51, 50),
        "alpha.f_TRELLIS_FF_Q": _ff(52, 50),
    }}}}


def test_depth_figures():
    d = logic_depth(NETLIST, "blk", deep=4)
    assert d["max_levels"] == 4.5
    assert d["endpoints"] == 7            # six flip-flop DI inputs and the LUT RAM's WD
    assert d["deep"] == 1                 # only gamma.d reaches 4 levels
    # 0: alpha.a (from the input); 1: beta.c 1.91, alpha.e 1.5, alpha.f 1.0 (the loop);
    # 2: beta.b and the LUT RAM's WD, 2.5 each; 4: gamma.d
    assert d["histogram"] == {0: 1, 1: 3, 2: 2, 4: 1}
    assert d["blocks"] == {"gamma": (1, 4.5), "beta": (0, 2.5), "alpha": (0, 1.5)}
    pairs = {(s, t): a for a, s, t in d["pairs"]}
    assert pairs == {("alpha", "beta"): 2.5, ("beta", "alpha"): 1.5, ("(input)", "alpha"): 0.0}
    top = d["paths"][0]
    assert top["levels"] == 4.5 and top["source"] == "gamma.ram"
    assert top["sink"] == "gamma.d_TRELLIS_FF_Q.DI"
    by_sink = {p["sink"]: p for p in logic_depth(NETLIST, "blk", paths=20)["paths"]}
    assert by_sink["beta.c_TRELLIS_FF_Q.DI"]["levels"] == pytest.approx(1.91)
    assert by_sink["beta.b_TRELLIS_FF_Q.DI"]["nets"][0] == "alpha.a"
    assert by_sink["beta.lutram.WD"]["levels"] == 2.5
    assert by_sink["alpha.a_TRELLIS_FF_Q.DI"]["source"] == "input din"
    assert by_sink["alpha.a_TRELLIS_FF_Q.DI"]["levels"] == 0
    # the loop is cut where the search meets it again: one LUT after the cut
    assert by_sink["alpha.f_TRELLIS_FF_Q.DI"]["levels"] == 1.0


def test_empty_netlist_and_report():
    d = logic_depth({"modules": {"t": {"ports": {}}}}, "t")
    assert d["max_levels"] == 0 and d["endpoints"] == 0 and d["paths"] == []
    text = format_depth(logic_depth(NETLIST, "blk"))
    assert text.startswith("deepest endpoint: 4.5 LUT levels")
    assert "2.5  alpha -> beta" in text


def test_cli(tmp_path, capsys):
    p = tmp_path / "n.json"
    p.write_text(json.dumps(NETLIST))
    assert main_depth([str(p), "--json"]) == 0          # the top found from its attribute
    assert json.loads(capsys.readouterr().out)["max_levels"] == 4.5
    assert main_depth([str(p), "--top", "nope"]) == 2
    assert "no module 'nope'" in capsys.readouterr().err
    two = {"modules": {"a": {"ports": {}}, "b": {"ports": {}}}}
    p.write_text(json.dumps(two))
    assert main_depth([str(p)]) == 2


def test_area_by_block(tmp_path, capsys):
    a = area_by_block(NETLIST, "blk")
    # the carry chain's cells have no block in their names: "(top)"
    assert list(a["blocks"]) == ["beta", "(top)", "alpha", "gamma"]   # LUT4-eq, then FF
    assert a["blocks"]["beta"] == {"lut4": 2, "lut_ram": 1, "carry": 0, "ff": 2, "ebr": 0,
                                   "lut4_eq": 6}
    assert a["blocks"]["(top)"]["carry"] == 3 and a["blocks"]["(top)"]["lut4_eq"] == 6
    assert a["blocks"]["alpha"] == {"lut4": 2, "lut_ram": 0, "carry": 0, "ff": 3, "ebr": 0,
                                    "lut4_eq": 2}
    assert a["blocks"]["gamma"]["ebr"] == 1 and a["blocks"]["gamma"]["ff"] == 1
    assert a["lut_ram"] == {"beta.lutram": 1} and a["ebr"] == {"gamma.ram": 1}
    # yosys names the pieces of a mapped memory <memory>.<row>.<column>
    dpr = {"type": "TRELLIS_DPR16X4", "port_directions": {}, "connections": {}}
    two = {"modules": {"t": {"cells": {"q.tab.0.0": dpr, "q.tab.0.1": dpr,
                                       "q.fifo.storage.0.0": dpr,
                                       "r.x": dict(dpr, type="$paramod$y\\DP16KD")}}}}
    a2 = area_by_block(two, "t")
    assert a2["lut_ram"] == {"q.tab": 2, "q.fifo.storage": 1} and a2["ebr"] == {"r.x": 1}
    assert a2["blocks"]["q"]["lut4_eq"] == 12
    text = format_area(a2)
    assert "3 in all" in text and "total" in text and "     2  q.tab" in text
    p = tmp_path / "n.json"
    p.write_text(json.dumps(NETLIST))
    assert main_depth([str(p), "--area"]) == 0
    out = capsys.readouterr().out
    assert "cells by block" in out and "beta.lutram" in out
    assert main_depth([str(p), "--area", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["area"]["ebr"] == {"gamma.ram": 1}
