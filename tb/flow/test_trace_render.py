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
    svg = out / "t-1-w64-icarus.svg"
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and len(root.findall("{http://www.w3.org/2000/svg}rect")) == 6
    wd = json.loads((out / "t-1-w64-icarus.wavedrom.json").read_text())
    assert wd["signal"][0]["wave"].startswith("1...0")
    assert "](trace/t-1-w64-icarus.svg)" in page.read_text()


def _pair_events(d, shift=0):
    """A two-core step list: A sends a two-frame message, B receives it (frames back to back)."""
    recs = [{"type": "header", "test": "p", "sim": "icarus", "width": 64, "cores": ["A", "B"],
             "probes": [], "missing": []},
            {"type": "ev", "cycle": 3, "key": "sq_ctx", "core": "A"},      # before: skipped
            {"type": "section", "cycle": 10, "title": "SEND, 2 packets"},
            {"type": "ev", "cycle": 11, "key": "rq_db", "core": "B"},
            {"type": "ev", "cycle": 12, "key": "sq_db", "core": "A"}]
    for c in range(20, 24):                 # two frames of two beats, no gap between them
        last = c in (21, 23)
        for core, key, cc in (("A", "tx_out", c), ("B", "rx_in", c + 1 + shift)):
            ev = {"type": "ev", "cycle": cc, "key": key, "core": core}
            if last:
                ev.update(eof=1, detail=f"frame {c}")
            recs.append(ev)
    recs += [{"type": "ev", "cycle": 30 + shift, "key": "rx_meta", "core": "B"},
             {"type": "ev", "cycle": 40 + shift, "key": "ack_in", "core": "A"},
             {"type": "section", "cycle": 50, "title": "(end)"},
             {"type": "ev", "cycle": 60, "key": "rq_db", "core": "B"}]
    d.mkdir(parents=True, exist_ok=True)
    p = d / "p.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return p


def test_two_cores_steps_frames_and_compare(tmp_path):
    from sim.trace import compare, main
    header, secs = load(_pair_events(tmp_path / "pair-w64-icarus"))
    (sec,) = [s for s in secs if not s["title"].startswith("(")]
    st = steps(sec)
    # per core, and one step per frame even when frames follow each other without a gap
    assert [(s["core"], s["key"], s["first"], s["last"]) for s in st] == [
        ("B", "rq_db", 11, 11), ("A", "sq_db", 12, 12), ("A", "tx_out", 20, 21),
        ("B", "rx_in", 21, 22), ("A", "tx_out", 22, 23), ("B", "rx_in", 23, 24),
        ("B", "rx_meta", 30, 30), ("A", "ack_in", 40, 40)]
    text = timeline_text(header, sec)
    assert "  3. cycle     9–10    A MAC transmit    frame beats leave" in text, text
    assert "cores A and B" in text
    # the same run on another simulator: equal; one cycle later at B: the step is named
    _pair_events(tmp_path / "pair-w64-verilator")
    assert compare(tmp_path / "pair-w64-icarus", tmp_path / "pair-w64-verilator", ["p"]) == []
    _pair_events(tmp_path / "late", shift=1)
    (d,) = compare(tmp_path / "pair-w64-icarus", tmp_path / "late", ["p"])
    assert "step 4: ('B', 'rx_in', 10, 11, 2) vs ('A', 'tx_out', 11, 12, 2)" in d, d
    assert main(["compare", str(tmp_path / "pair-w64-icarus"), str(tmp_path / "late"),
                 "p"]) == 1
    # the page: the two-core group first, its picture with one background row per step
    out, page = tmp_path / "docs" / "trace", tmp_path / "docs" / "trace.md"
    out.mkdir(parents=True)
    (out / "p-0-pair-w64-icarus.svg").write_text("<svg/>")      # left by an older run
    (out / "notes.md").write_text("kept")
    assert main(["page", str(out), str(page), f"{tmp_path / 'pair-w64-icarus'}:p"]) == 0
    assert not (out / "p-0-pair-w64-icarus.svg").exists() and (out / "notes.md").exists()
    md = page.read_text()
    assert "## Two cores" in md and "](trace/p-1-pair-w64-icarus.svg)" in md, md
    root = ET.parse(out / "p-1-pair-w64-icarus.svg").getroot()
    rects = root.findall("{http://www.w3.org/2000/svg}rect")
    assert len(rects) == 1 + 2 * len(st)
    wd = json.loads((out / "p-1-pair-w64-icarus.wavedrom.json").read_text())
    assert [s["name"] for s in wd["signal"]][:3] == ["1. B RQ doorbell", "2. A Send Queue",
                                                     "3. A MAC transmit"]
