"""sim/trace.py offline: step lists, SVG and WaveDrom from a recorded event file (no simulator)."""
import json
import xml.etree.ElementTree as ET

from sim.trace import load, render, steps, timeline_text


def _events(tmp_path):
    recs = [{"type": "header", "test": "t", "sim": "icarus", "width": 64, "probes": [],
             "missing": ["sq_db"]},
            {"type": "section", "cycle": 10, "title": "SEND_ONLY, PSN 5"}]
    for c in range(11, 15):
        recs.append({"type": "ev", "cycle": c, "key": "rx_in"})
    recs += [{"type": "ev", "cycle": 20, "key": "rx_meta", "detail": "SEND_ONLY PSN 5 QP 2"},
             {"type": "ev", "cycle": 25, "key": "psn_exe"},
             {"type": "ev", "cycle": 30, "key": "wr_data"}, {"type": "ev", "cycle": 31,
                                                              "key": "wr_data"},
             {"type": "ev", "cycle": 40, "key": "wr_data"}]
    d = tmp_path / "w64-icarus"
    d.mkdir()
    p = d / "t.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return p


def test_steps_collapse_and_order(tmp_path):
    header, (sec,) = load(_events(tmp_path))
    st = steps(sec)
    assert [(s["key"], s["first"], s["last"], s["beats"]) for s in st] == [
        ("rx_in", 11, 14, 4), ("rx_meta", 20, 20, 1), ("psn_exe", 25, 25, 1),
        ("wr_data", 30, 31, 2), ("wr_data", 40, 40, 1)]
    text = timeline_text(header, sec)
    assert "  2. cycle     9       RX Parse" in text and "SEND_ONLY PSN 5 QP 2" in text


def test_render_writes_svg_wavedrom_and_page(tmp_path):
    _events(tmp_path)
    out = tmp_path / "docs" / "trace"
    page = tmp_path / "docs" / "trace.md"
    render(tmp_path, out, page=page)
    svg = out / "t-0-w64-icarus.svg"
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and len(root.findall("{http://www.w3.org/2000/svg}rect")) == 6
    wd = json.loads((out / "t-0-w64-icarus.wavedrom.json").read_text())
    assert wd["signal"][0]["wave"].startswith("1...0")
    assert "](trace/t-0-w64-icarus.svg)" in page.read_text()
