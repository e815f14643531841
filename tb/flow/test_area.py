"""``rnic area``: summing a hierarchical ``stat -json`` per block, the budget check, the doc."""
import json
import subprocess
import sys

import pytest

from rnic_flow.area import (area_report, kept_modules, largest_registers, markdown, module_tree,
                       register_bits, sum_by_block, yosys_script)
from rnic_flow.budgets import BUDGETS, REFERENCE, TOTAL, TOTAL_LUT4_W128, budgets_for
from rnic_flow import budgets
from sim.runner import ROOT


def _mod(**cells):
    return {"num_cells": sum(cells.values()), "num_cells_by_type": cells}


# The shape of yosys 0.70 `stat -json` of a hierarchical `synth_ecp5`: module keys with a
# leading backslash, a submodule instance counted as a cell whose type is the module's name.
STAT = {
    "modules": {
        "\\rnic": {"num_cells_by_type": {
            "LUT4": 10, "TRELLIS_FF": 5, "$scopeinfo": 3, "rnic.resp": 1, "rnic.req": 1,
            "rnic.tx_arbiter": 1, "rnic.tx_build": 1, "rnic.new_block": 1, "rnic.control": 1}},
        # the layers: composers, their own cells glue, their instances blocks
        "\\rnic.resp": {"num_cells_by_type": {
            "LUT4": 1, "rnic.resp.psn_check": 1, "rnic.resp.cpl_merge": 1}},
        "\\rnic.req": {"num_cells_by_type": {"rnic.req.requester": 1}},
        "\\rnic.resp.psn_check": {"num_cells_by_type": {
            "LUT4": 100, "CCU2C": 4, "TRELLIS_FF": 50, "DP16KD": 2,
            "rnic.resp.psn_check.ctx": 1}},
        "\\rnic.resp.psn_check.ctx": {"num_cells_by_type": {"LUT4": 7, "TRELLIS_DPR16X4": 3}},
        "\\rnic.tx_build": {"num_cells_by_type": {
            "LUT4": 540, "CCU2C": 10, "TRELLIS_FF": 20, "rnic.tx_build.crc": 1}},
        "\\rnic.tx_build.crc": {"num_cells_by_type": {"LUT4": 300, "TRELLIS_FF": 32}},
        "\\rnic.req.requester": {"num_cells_by_type": {
            "LUT4": 1000, "$paramod$abc\\TRELLIS_FF": 900}},
        "\\rnic.tx_arbiter": {"num_cells_by_type": {"LUT4": 20, "TRELLIS_FF": 8}},
        "\\rnic.resp.cpl_merge": {"num_cells_by_type": {"LUT4": 6, "TRELLIS_FF": 2}},
        "\\rnic.new_block": {"num_cells_by_type": {"LUT4": 1, "rnic.new_block.leaf": 2}},
        "\\rnic.new_block.leaf": {"num_cells_by_type": {"LUT4": 4}},
        "\\rnic.control": {"num_cells_by_type": {"LUT4": 950, "TRELLIS_FF": 10}},
    },
    "design": {"num_cells_by_type": {"LUT4": 9999}},     # not read: rows come from modules
}


# The forms yosys' write_verilog gives registers and memories (`rnic generate`'s output).
VERILOG = r"""
module \rnic.resp.psn_check (clk, q);
  reg [411:0] r_meta = 412'h0;
  reg [31:0] \$signal$36  = 32'd0;
  reg busy = 1'h0;
  reg [7:0] comb_only;
  reg [31:0] table [255:0];
  always @(posedge clk)
    r_meta <= _001_;
  always @(posedge clk)
    if (rst) \$signal$36  <= 32'd0;
    else \$signal$36  <= _002_;
  always @(posedge clk)
    busy <= _003_;
  always @(posedge clk)
    if (we) table[addr] <= data;
  always @*
    comb_only = x;
endmodule

module rnic (clk);
  reg [63:0] stat_inc = 64'h0;
  always @(posedge clk)
    stat_inc <= _004_;
endmodule
"""


def test_register_bits_and_largest():
    """Registers are what a clocked block assigns with <=, at their declared widths; memories and
    combinational regs are not registers; rows follow the budget paths."""
    regs = register_bits(VERILOG)
    assert regs["rnic.resp.psn_check"] == {"r_meta": 412, "$signal$36": 32, "busy": 1}
    assert regs["rnic"] == {"stat_inc": 64}
    widest = largest_registers(VERILOG, count=2)
    assert widest["receive"] == [(412, "resp.psn_check.r_meta"),
                                 (32, "resp.psn_check.$signal$36")]
    assert widest["glue"] == [(64, "stat_inc")]
    md = markdown(area_report(STAT, REFERENCE, verilog=VERILOG))
    assert "`resp.psn_check.r_meta` 412" in md


def test_module_tree():
    tree = module_tree(json.dumps(STAT))
    own, kids = tree["rnic"]
    assert own == {"LUT4": 10, "TRELLIS_FF": 5}                 # $scopeinfo dropped
    assert kids["rnic.resp"] == 1 and "rnic.resp" not in own
    assert tree["rnic.resp"][1] == {"rnic.resp.psn_check": 1, "rnic.resp.cpl_merge": 1}
    assert tree["rnic.req.requester"][0]["TRELLIS_FF"] == 900   # $paramod name -> base type
    assert tree["rnic.new_block"][1] == {"rnic.new_block.leaf": 2}


def test_sum_by_block():
    s = sum_by_block(STAT)
    rows = s["rows"]
    # a block's nested instances count with it: tx_build.crc in TX, psn_check.ctx in receive
    assert rows["receive"] == {"LUT4": 107, "CCU2C": 4, "TRELLIS_FF": 50, "DP16KD": 2,
                               "TRELLIS_DPR16X4": 3}
    assert rows["tx"] == {"LUT4": 40 + 300 + 500 + 20, "TRELLIS_FF": 20 + 32 + 8, "CCU2C": 10}
    assert rows["requester"] == {"LUT4": 1000, "TRELLIS_FF": 900}
    # glue: rnic's and a layer's own cells, a glue instance in a layer, an unmapped one (its
    # leaf instantiated twice)
    assert rows["glue"] == {"LUT4": 10 + 1 + 6 + 1 + 2 * 4, "TRELLIS_FF": 5 + 2}
    assert s["unmapped"] == ["new_block"]
    assert rows["rx_parse"] == {}
    total = sum(rows["total"].values())
    assert total == sum(sum(c.values()) for k, c in rows.items() if k != "total")
    assert rows["total"]["LUT4"] == 10 + 1 + 107 + 340 + 1000 + 500 + 20 + 6 + 9 + 950


def test_report_and_budget_check():
    r = area_report(STAT, REFERENCE)
    by = {row["block"]: row for row in r["rows"]}
    assert list(by) == [b.key for b in BUDGETS] + ["glue", "total"]
    # LUT4-equivalents: LUT4 + 2 per CCU2C + 4 per TRELLIS_DPR16X4 (rnic synth's rule)
    assert by["receive"]["lut4_eq"] == 107 + 2 * 4 + 4 * 3
    assert by["receive"]["dpr16x4"] == 3 and by["receive"]["ccu2c"] == 4
    assert by["tx"]["lut4_eq"] == 860 + 20
    assert by["requester"]["budget"] == {"lut4": 2800, "ff": 1500, "dp16kd": 5}
    assert by["requester"]["over"] == []
    # control plane: 950 > 900 LUT4, FF 10 within
    assert by["control"]["over"] == ["LUT4 950 > 900"]
    assert by["glue"]["budget"] is None and by["glue"]["over"] == []
    assert by["total"]["budget"]["lut4"] == TOTAL.lut4
    assert r["over"] is True and r["budgeted"] is True
    md = markdown(r)
    assert "| control plane | 950 | 900 | **over** |" in md
    assert "`new_block`" in md and "Over budget" in md


def test_within_budget_and_unbudgeted():
    small = json.loads(json.dumps(STAT))
    small["modules"]["\\rnic.control"]["num_cells_by_type"]["LUT4"] = 900   # at the budget
    r = area_report(small, dict(REFERENCE, num_qp=4, key_entries=4))
    assert not r["over"] and "Within budget." in markdown(r)
    big = dict(REFERENCE, num_qp=1024)
    r = area_report(STAT, big)
    assert not r["budgeted"] and not r["over"]
    assert all(row["budget"] is None for row in r["rows"])


def test_budgets_for():
    assert budgets_for(REFERENCE)["total"].lut4 == TOTAL.lut4
    w128 = budgets_for(dict(REFERENCE, data_width=128))
    assert w128["total"].lut4 == TOTAL_LUT4_W128 and w128["rx_parse"].lut4 == 2400
    assert budgets_for(dict(REFERENCE, data_width=256)) is None
    assert budgets_for(dict(REFERENCE, key_entries=128)) is None
    # every row's paths are distinct, and none is also glue
    paths = [p for b in BUDGETS for p in b.paths]
    assert len(paths) == len(set(paths)) and not set(paths) & set(budgets.GLUE_PATHS)


def test_kept_modules_and_script():
    verilog = ("module rnic(a, b);\nendmodule\nmodule \\rnic.psn_check (a);\nendmodule\n"
               "module \\rnic.psn_check.hb (a);\nendmodule\n"
               "module \\rnic.psn_check.ack_q (a);\nendmodule\n"
               "module \\rnic.new_block (a);\nendmodule\n"
               "module \\rnic.req (a);\nendmodule\nmodule \\rnic.req.requester (a);\nendmodule\n"
               "module \\rnic.req.requester.ring (a);\nendmodule\n")
    # a budget row naming a nested path (the default rows name none)
    rows = (budgets.Budget("hb", "a nested block", 1, 1, 0, ("psn_check.hb",)),)
    kept = kept_modules(verilog, budgets=rows)
    # every instance of rnic (mapped or not) and of a layer, and the nested paths a row names
    assert kept == ["rnic.new_block", "rnic.psn_check", "rnic.psn_check.hb", "rnic.req",
                    "rnic.req.requester"]
    script = yosys_script("rnic.v", kept)
    assert script.startswith("read_verilog rnic.v; hierarchy -top rnic; proc; setattr -set keep")
    keep = "rnic.new_block rnic.psn_check rnic.psn_check.hb rnic.req rnic.req.requester"
    assert f"setattr -mod -set keep_hierarchy 1 {keep}; synth_ecp5 -top rnic -run :map_luts;" \
        in script
    # ABC9 on the kept modules without kept modules inside, the classic abc on rnic and on
    # the modules holding kept modules, then the rest of synth_ecp5
    assert ("select rnic.new_block rnic.psn_check.hb rnic.req.requester; abc9 -W 300; "
            "select -clear; abc -lut 4 -dress rnic rnic.psn_check rnic.req; clean; "
            "synth_ecp5 -top rnic -run map_cells:; tee -q -o rnic.stat.json stat -json") \
        in script


def test_area_doc_current():
    text = (ROOT / "docs" / "area.md").read_text()
    assert budgets.DOC_BEGIN + "\n" + budgets.markdown() + budgets.DOC_END in text, \
        "docs/area.md is stale: run `make docs`"


@pytest.mark.full
def test_rnic_area_end_to_end(tmp_path):
    """`rnic area` on a small configuration: yosys with the hierarchy kept, both reports."""
    js, md = tmp_path / "area.json", tmp_path / "area.md"
    proc = subprocess.run(
        [sys.executable, "-m", "rnic_flow.cli", "area", "--num-qp", "4", "--num-cq", "1",
         "--key-entries", "4", "--json", str(js), "--md", str(md), "-o", str(tmp_path / "work"),
         "-q"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    r = json.loads(js.read_text())
    by = {row["block"]: row for row in r["rows"]}
    assert r["budgeted"] and r["unmapped"] == []
    assert proc.returncode == (1 if r["over"] else 0)
    # every budgeted block has logic of its own, and the rows add up to the total
    for b in BUDGETS:
        assert by[b.key]["lut4_eq"] > 0 and by[b.key]["ff"] > 0, b.key
    for f in ("lut4_eq", "ff", "dp16kd", "lut4", "ccu2c", "dpr16x4"):
        assert by["total"][f] == sum(row[f] for k, row in by.items() if k != "total")
    assert "| **whole core, glue included** |" in md.read_text()
