"""Generated documentation stays in step with the tables it is made from, and the README with
the code and the last recorded measurements."""
import json
import re

from rnic.control.regmap import markdown
from rnic_flow import budgets, figures
from sim.runner import ROOT


def test_register_doc_current():
    text = (ROOT / "docs" / "registers.md").read_text()
    assert markdown() in text, "docs/registers.md is stale: run `make docs`"


README = ROOT / "README.md"


def _block(text, lang):
    m = re.search(rf"```{lang}\n(.*?)```", text, re.S)
    assert m, f"README has no {lang} example"
    return m.group(1)


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines (at most 150)"


def test_figure_tables_current():
    """Every figure table of the README and the docs pages (the whole tables and each block's
    part on its own page) is the rendering of the last recorded measurement in docs/figures/
    (`make docs` rewrites them); a section naming no known table or block fails."""
    seen = set()
    for page in figures.pages(ROOT):
        page = ROOT / page
        seen |= {n.partition(":")[0] for n in figures.section_names(page.read_text())}
        stale = figures.update_readme(page, ROOT / figures.FIGURES, check=True)
        assert not stale, f"{page.name}: stale figure tables {stale}: run `make docs`"
    assert seen == set(figures.SECTIONS), f"kinds no page shows: {set(figures.SECTIONS) - seen}"


def _requirements():
    """Clock figures the pages may quote: requirements and parameters, taken from the code."""
    from rnic.board.top import CORE_MHZ
    from rnic.params import RnicConfig
    return (f"{RnicConfig().clock_mhz:g} MHz",        # the core's target clock (interface.md)
            f"{CORE_MHZ} MHz")                        # the board build's core clock


#: Quoted figures that are no measurement of this core, page by page, each with its reason
#: (keep it short: a requirement is better taken from the code, in _requirements).
ALLOW = {}


def test_no_hand_written_figures():
    """A docs page or the README writes no measured area or clock figure by hand: outside the
    rendered sections, a number with MHz, LUT4, LUT4-eq, FF, DP16KD (...) is a requirement
    taken from the code, a figure whose arithmetic stands beside it, or in ALLOW."""
    found = []
    for page in figures.pages(ROOT):
        allow = _requirements() + ALLOW.get(page, ())
        found += [f"{page}:{no}: {fig}"
                  for no, fig in figures.hand_figures((ROOT / page).read_text(), allow)]
    assert not found, ("measured figures written by hand (render them from docs/figures/ "
                       "with a `<!-- figures:... -->` section, or link to one):\n"
                       + "\n".join(found))


def test_hand_written_figure_check_can_fail():
    """The check finds a hand-written figure, and only outside rendered sections, code and a
    figure's own arithmetic."""
    text = ("# Block\n\nThe block takes 4,999 LUT4-eq and\n2,197 FF, closes at\n162.2 MHz "
            "with 17 DP16KD; a 16 × 4 LUT RAM.\n\n"
            "<!-- figures:area:receive begin -->\n| 4,999 LUT4 |\n"
            "<!-- figures:area:receive end -->\n\n```\nrnic synth  # 170 MHz\n```\n\n"
            "The table is 8 × 27 bits = 216 flip-flops. Its budget: 1,900 LUT4.\n")
    assert figures.hand_figures(text) == [(3, "4,999 LUT4-eq"), (4, "2,197 FF"),
                                          (5, "162.2 MHz"), (5, "17 DP16KD"),
                                          (15, "1,900 LUT4")]
    assert figures.hand_figures(text, ("closes at 162.2 MHz",))[2] == (5, "17 DP16KD")


#: A commit named on a page: a hash (7 to 40 hex digits, letters and digits, not a 0x constant)
#: or "at commit".
_COMMIT = re.compile(r"(?<![\w])(?<!0x)(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w])"
                     r"|\bat commit\b", re.I)


def test_no_commit_named_on_pages():
    """History belongs to git: no docs page or README names a commit."""
    assert _COMMIT.search("back to its pipeline before e516fb6")
    assert _COMMIT.search("measured at commit HEAD") and not _COMMIT.search("rkey 0x0B0000FF")
    found = [f"{page}:{no}: {m.group(0)}" for page in figures.pages(ROOT)
             for no, line in enumerate((ROOT / page).read_text().splitlines(), 1)
             for m in _COMMIT.finditer(line)]
    assert not found, "commits named on pages (history belongs to git):\n" + "\n".join(found)


def test_block_sections_render():
    """A block's page shows its area row beside its budget with its Fmax, its synthesis rows
    and its bench rows; a section naming an unknown kind or block is an error."""
    import pytest
    rec = ROOT / figures.FIGURES
    area = figures.render("area:receive", rec)
    assert "| receive engine |" in area and area.count("\n| ") == 2
    fmax = figures.render("fmax:psn_check", rec)
    assert all(line.startswith(("| psn_check |", "|---", "| block"))
               for line in fmax.splitlines())
    bench = figures.render("bench:psn_check", rec)
    assert "| psn_check |" in bench and "| rx_parse |" not in bench
    for bad in ("nosuch", "area", "area:nosuch", "fmax:nosuch", "bench:psn_check,nosuch",
                "goodput:x"):
        with pytest.raises(ValueError):
            figures.render(bad, rec)


def test_area_record_matches_budgets():
    """The recorded area report is of the reference configuration, row for row the budgets
    of rtl/rnic_flow/budgets.py (a budget change needs `make area` again)."""
    rec = json.loads((ROOT / figures.FIGURES / "area.json").read_text())
    assert rec["config"] == budgets.REFERENCE
    want = {b.key: (b.lut4, b.ff, b.dp16kd) for b in (*budgets.BUDGETS, budgets.TOTAL)}
    got = {r["block"]: tuple(r["budget"][k] for k in ("lut4", "ff", "dp16kd"))
           for r in rec["rows"] if r.get("budget")}
    assert got == want


def test_readme_verilog_example_connects_every_port():
    from rnic.params import RnicConfig
    from rnic.top import port_list
    named = re.findall(r"\.(\w+)\(", _block(README.read_text(), "verilog"))
    assert len(named) == len(set(named)), "a port connected twice"
    assert set(named) == {*port_list(RnicConfig()), "clk", "rst"}


def test_readme_amaranth_example_runs():
    from amaranth.hdl import Fragment
    env = {}
    exec(_block(README.read_text(), "python"), env)   # noqa: S102 - the README's own example
    assert env["rnic"].s_axis_rx_tdata.shape().width == env["rnic"].config.data_width
    Fragment.get(env["m"], None)


def test_goodput_table_places_each_figure():
    """A figure lands in the row of its size and host latency and the column of its width."""
    def row(size, w, value, **cfg):
        return {"block": "requester+responder", "figure": f"goodput A->B, SEND {size} B",
                "value": value, "unit": "B/cycle", "limit": 4.0, "target": None,
                "config": {"W": w, "PMTU": 4096, **cfg}}
    text = figures.render_goodput([row(64, 64, 2.5), row(4096, 512, 30.0, rd_latency=100),
                                   row(256, 64, 9.9)])
    assert "| 64 B | 0 cycles | 2.50 of 4.00 | – |" in text
    assert "| 4 KiB | 100 cycles | – | 30.00 of 4.00 |" in text
    assert "9.90" not in text and "| 4 KiB | 0 cycles" not in text   # not a README row


def test_unrouted_core_is_recorded_as_placed(tmp_path):
    """A whole-core run whose router was stopped is recorded as placed, with its status, and
    the Fmax table says it is a placement estimate of a core that did not route; a failed run
    is not recorded."""
    base = {"block": "rnic", "target": "ecp5", "part": "LFE5UM-85F",
            "config": {"data_width": 64, "num_qp": 256, "num_cq": 64, "key_entries": 64},
            "lut": 37478, "ff": 16919, "bram": 87, "target_mhz": 156.25, "seed": 1}
    dst = tmp_path / "synth.json"
    figures.record_synth([{**base, "stage": "placed", "status": "not routed", "fmax_mhz": 61.4},
                          {**base, "seed": 2, "status": "error", "fmax_mhz": None}], dst)
    rec = json.loads(dst.read_text())
    assert [(r["seed"], r["stage"], r["status"]) for r in rec] == [(1, "placed", "not routed")]
    text = figures.render_fmax(rec)
    assert "| rnic | W=64 N=256 C=64 K=64 | 37,478 | 16,919 | 87 | 61.4 / – / – (not routed: " \
           "router stopped; placement estimate) | 156.25 |" in text


def test_responder_table_shows_latency_limits():
    """The responder's ACK latency rows carry their limits, as the rate rows do."""
    def row(figure, value, payload):
        return {"block": "resp_top", "figure": figure, "value": value, "unit": "cycles",
                "limit": None, "target": None, "config": {"W": 64, "payload": payload}}
    ack = "cycles, request last beat to first ACK beat"
    cqe = "cycles, request last beat to CQE last write beat"
    text = figures.render_responder([row(ack, 12.0, 0), row(cqe, 20.0, 0), row(ack, 30.0, 256)])
    assert "| 0 B | cycles, last beat → first ACK beat (limit 16) / CQE written | 12 / 20 |" \
        in text
    assert "| 256 B | cycles, last beat → first ACK beat (limit 24) / CQE written | 30 / – |" \
        in text


def test_area_table_shows_the_unrouted_core_estimate():
    """A block with no routed run shows its placement estimate in the area table, so marked."""
    cfg = dict(budgets.REFERENCE)
    area = {"config": cfg, "rows": [
        {"block": "cqe", "title": "CQE Generation", "lut4_eq": 690, "ff": 390, "dp16kd": 1,
         "budget": {"lut4": 700, "ff": 400, "dp16kd": 1}},
        {"block": "total", "title": "whole core", "lut4_eq": 38000, "ff": 16000, "dp16kd": 87,
         "budget": {"lut4": 15000, "ff": 8000, "dp16kd": 24}}]}
    base = {"target": "ecp5", "config": cfg, "lut": 1, "ff": 1, "bram": 1, "target_mhz": 156.25}
    synth = [{**base, "block": "cqe_gen", "seed": 2, "stage": "routed", "fmax_mhz": 170.0},
             {**base, "block": "rnic", "seed": 1, "stage": "placed", "fmax_mhz": 69.8}]
    text = figures.render_area(area, synth)
    assert "| CQE Generation | 690 of 700 | 390 of 400 | 1 of 1 | yes | – / 170.0 / – |" in text
    assert "| no | 69.8 / – / – (not routed: placement estimate) |" in text


def test_board_table_records_the_last_build(tmp_path):
    """The board section shows the last recorded build's cells (LUT4 first) and each clock's
    routed figure beside its constraint; recording replaces the build before."""
    def build(lut, mhz):
        return {"part": "P", "config": "C", "seed": 1, "router": "router2", "date": "D",
                "seconds": 1, "cells": {"PLL": [1, 4], "LUT4": [lut, 83640]},
                "fmax": {"clk": [mhz, 50]}}
    dst = tmp_path / "board.json"
    figures.record_board(build(111, 61.5), dst)
    figures.record_board(build(32875, 88.1), dst)
    text = figures.render("board", tmp_path)
    assert "| LUT4 | 32,875 | 83,640 |" in text and "| `clk` | 88.1 | 50 |" in text
    assert text.index("| LUT4 |") < text.index("| PLL |") and "61.5" not in text
