"""Where a packet is, cycle by cycle: a block trace of the ``rnic`` top for cocotb tests.

While a test runs, :class:`Tracer` samples the handshakes between the blocks *inside* the core
through the simulator's hierarchy (``dut.psn_check.meta__valid`` …; no port is added to ``rnic``;
Icarus sees every net, Verilator sees them because the cocotb runner builds with
``--public-flat-rw``). Each probe is a ``valid``/``ready`` pair named by the instance and port names
Amaranth gives the generated Verilog; a probe whose handles are absent (a block not wired in this
version of the top) is skipped, so the requester's probes light up once the requester is in the
top. Every cycle in which a probe's valid and ready are both high is one event.

Use from a test bench::

    tr = Tracer.attach(dut)            # no-op unless RNIC_TRACE=1
    tr.section("SEND_ONLY, PSN 1000")  # starts a new step list (e.g. before post_recv)
    ...

Events go to ``build/trace/<label>/<test>.jsonl`` as they happen (``RNIC_TRACE_DIR`` overrides
the directory), the frames seen on ``s_axis_rx`` and ``m_axis_tx`` to ``<test>.pcap``
(timestamps: cycle number as microseconds).

``python -m sim.trace render SRC_DIR OUT_DIR`` turns every ``.jsonl`` under ``SRC_DIR`` into a
step list (printed, and written as ``.txt``) and an SVG timeline; ``python -m sim.trace show
FILE.jsonl`` prints one. The step lists read like the book's: one line per block a packet
passed, in order, with its cycle relative to the first beat of the section.
"""

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Tracer", "PROBES", "load", "steps", "timeline_text", "render_svg", "main"]

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Probe:
    key: str
    block: str          # the book's block name
    text: str           # what a handshake here means
    valid: tuple        # candidate handle paths (the first found is used)
    ready: tuple
    side: str = "responder"


def _p(key, block, text, valid, ready, side="responder"):
    return Probe(key, block, text, (valid,) if isinstance(valid, str) else tuple(valid),
                 (ready,) if isinstance(ready, str) else tuple(ready), side)


#: The probes, in pipeline order (this order is also the rows of the picture).
PROBES = [
    # ---- requester (present once the requester is wired into the top) ----------------------
    _p("sq_db", "Send Queue", "SQ doorbell taken: the requester sees the posted send WQE",
       "requester.sq_db__valid", "requester.sq_db__ready", "requester"),
    _p("wqe_rd", "WQE fetch", "send WQE read issued to host memory",
       "host_memory.read_1__req__valid", "host_memory.read_1__req__ready", "requester"),
    _p("wqe_data", "WQE fetch", "send WQE back from host memory",
       "requester.wqe_rd__resp__valid", "requester.wqe_rd__resp__ready", "requester"),
    _p("gather_key", "Key Cache", "lkey of the source buffer looked up",
       "requester.lookup__req__valid", "requester.lookup__req__ready", "requester"),
    _p("gather", "Gather Path", "payload read issued to host memory",
       "host_memory.read_2__req__valid", "host_memory.read_2__req__ready", "requester"),
    _p("gather_data", "Gather Path", "payload beats back from host memory",
       "requester.rd__resp__valid", ("requester.data_rd__resp__ready", "requester.rd__resp__ready"),
       "requester"),
    _p("tx_build", "TX Packet Build", "request frame leaves TX Packet Build",
       "requester.tx__valid", "requester.tx__ready", "requester"),
    # ---- responder: software's side ----------------------------------------------------------
    _p("rq_db", "RQ doorbell", "the application posted a receive WQE: RQ doorbell taken",
       "psn_check.rq_db__valid", "psn_check.rq_db__ready"),
    # ---- the wire in ------------------------------------------------------------------------
    _p("rx_in", "MAC receive", "frame beats arrive on s_axis_rx",
       "s_axis_rx_tvalid", "s_axis_rx_tready"),
    _p("rx_meta", "RX Parse", "headers and ICRC checked: the packet's metadata leaves RX Parse",
       "psn_check.meta__valid", "psn_check.meta__ready"),
    # ---- requester: the ACK comes back ------------------------------------------------------
    _p("ack_in", "Replay Buffer", "ACK/NAK taken by the requester",
       "requester.ack__valid", "requester.ack__ready", "requester"),
    _p("retire", "Replay Buffer", "WQE retired: send completion handed on",
       "requester.cpl__valid", "requester.cpl__ready", "requester"),
    # ---- responder ----------------------------------------------------------------------------
    _p("psn_exe", "PSN Check", "PSN, opcode and access judged: command to execute",
       "execute.exe__valid", "execute.exe__ready"),
    _p("rq_rd", "RQ fetch", "receive WQE read issued to host memory",
       "host_memory.read_0__req__valid", "host_memory.read_0__req__ready"),
    _p("rq_data", "RQ fetch", "receive WQE back from host memory",
       "host_memory.read_0__resp__valid", ("execute.rd__resp__ready",
                                           "host_memory.read_0__resp__ready")),
    _p("key_req", "Key Cache", "lkey/rkey lookup issued",
       "execute.lookup__req__valid", "execute.lookup__req__ready"),
    _p("key_resp", "Key Cache", "lookup answer back",
       "execute.lookup__resp__valid", "execute.lookup__resp__ready"),
    _p("wr_req", "Scatter Path", "payload write burst issued (AW)",
       "host_memory.write_0__req__valid", "host_memory.write_0__req__ready"),
    _p("wr_data", "Scatter Path", "payload beats written to host memory",
       "host_memory.write_0__data__valid", "host_memory.write_0__data__ready"),
    _p("inval_req", "invalidate", "IETH rkey sent to the Key Cache to invalidate",
       "key_cache.inval__req__valid", "key_cache.inval__req__ready"),
    _p("inval_resp", "invalidate", "invalidation answered",
       "key_cache.inval__resp__valid", "key_cache.inval__resp__ready"),
    _p("done", "PSN Check", "execute reports the packet placed (writes issued): ACK released",
       "psn_check.done__valid", "psn_check.done__ready"),
    _p("ack_build", "ACK/NAK builder", "ACK/NAK frame built by PSN Check",
       "psn_check.tx__valid", "psn_check.tx__ready"),
    _p("complete", "CQE Generation", "completion handed to CQE Generation",
       "execute.complete__valid", "execute.complete__ready"),
    _p("cqe_req", "CQE Generation", "CQE write burst issued (AW)",
       "host_memory.write_1__req__valid", "host_memory.write_1__req__ready"),
    _p("cqe_data", "CQE Generation", "CQE written to the completion queue",
       "host_memory.write_1__data__valid", "host_memory.write_1__data__ready"),
    # ---- the wire out -----------------------------------------------------------------------
    _p("tx_out", "MAC transmit", "frame beats leave on m_axis_tx",
       "m_axis_tx_tvalid", "m_axis_tx_tready"),
]
BY_KEY = {p.key: p for p in PROBES}


def _lookup(dut, path):
    h = dut
    try:
        for part in path.split("."):
            h = getattr(h, part)
        int(h.value)                 # readable?
        return h
    except Exception:            # noqa: BLE001 — absent in this version of the top
        return None


def _first(dut, paths):
    for p in paths:
        h = _lookup(dut, p)
        if h is not None:
            return h
    return None


class _Null:
    """The tracer when tracing is off: every call does nothing."""
    enabled = False

    def section(self, *a, **k):
        pass

    def note(self, *a, **k):
        pass


class Tracer:
    """Samples every probe at each falling edge of ``dut.clk`` (values settle before it)."""

    enabled = True

    @classmethod
    def attach(cls, dut, *, test=None, out_dir=None, force=False):
        if not force and os.environ.get("RNIC_TRACE", "0") != "1":
            return _Null()
        return cls(dut, test=test, out_dir=out_dir)

    def __init__(self, dut, *, test=None, out_dir=None):
        import cocotb
        self.dut = dut
        self.test = test or _current_test() or "test"
        self.sim = (getattr(cocotb, "SIM_NAME", "") or "sim").split()[0].lower()
        self.width = len(dut.s_axis_rx_tdata)
        label = f"w{self.width}-{self.sim}"
        d = Path(out_dir or os.environ.get("RNIC_TRACE_DIR") or ROOT / "build" / "trace") / label
        d.mkdir(parents=True, exist_ok=True)
        self.path = d / f"{self.test}.jsonl"
        self.pcap_path = d / f"{self.test}.pcap"
        self.cycle = 0
        self.live, self.missing = [], []
        for p in PROBES:
            v, r = _first(dut, p.valid), _first(dut, p.ready)
            if v is None or r is None:
                self.missing.append(p.key)
            else:
                self.live.append((p, v, r))
        self._meta_payload = _lookup(dut, "psn_check.meta__payload")
        self._rx = [[], dut.s_axis_rx_tdata, dut.s_axis_rx_tkeep, dut.s_axis_rx_tlast]
        self._tx = [[], dut.m_axis_tx_tdata, dut.m_axis_tx_tkeep, dut.m_axis_tx_tlast]
        self.frames = []            # (cycle, direction, bytes)
        self._f = open(self.path, "w")
        self._write({"type": "header", "test": self.test, "sim": self.sim, "width": self.width,
                     "probes": [p.key for p, _, _ in self.live], "missing": self.missing})
        self._task = cocotb.start_soon(self._run())

    # ---- recording ----------------------------------------------------------------------------
    def _write(self, rec):
        self._f.write(json.dumps(rec) + "\n")
        self._f.flush()

    def section(self, title):
        """Start a new step list (a packet, or a scenario step of the book)."""
        self._write({"type": "section", "cycle": self.cycle, "title": title})

    def note(self, text):
        self._write({"type": "note", "cycle": self.cycle, "text": text})

    def _beat(self, st, key):
        buf, d, k, last = st
        keep = int(k.value)
        data = int(d.value).to_bytes(len(d) // 8, "little")
        buf.append(bytes(b for i, b in enumerate(data) if keep >> i & 1))
        if int(last.value):
            frame = b"".join(buf)
            buf.clear()
            self.frames.append((self.cycle, key, frame))
            self._write_pcap()
            return frame
        return None

    def _write_pcap(self):
        try:
            from scapy.all import Ether, wrpcap
            pkts = []
            for c, _, f in self.frames:
                p = Ether(f)
                p.time = c * 1e-6
                pkts.append(p)
            wrpcap(str(self.pcap_path), pkts)
        except Exception as e:            # noqa: BLE001 — a pcap is a by-product
            self.note(f"pcap not written: {e}")

    def _detail(self, key, frame=None):
        try:
            if key == "rx_meta" and self._meta_payload is not None:
                from rnic.ifaces import rx_meta_layout
                from rnic.opcodes import Op
                from sim.wrap import unpack
                m = unpack(rx_meta_layout, int(self._meta_payload.value))
                name = Op(m["opcode"]).name if m["opcode"] in Op._value2member_map_ else \
                    hex(m["opcode"])
                return f"{name} PSN {m['psn']} QP {m['dqpn']}"
            if frame is not None:
                from rnic.opcodes import Op
                from sim.packets import decode_frame
                f = decode_frame(frame)
                op = f["bth"]["opcode"]
                name = Op(op).name if op in Op._value2member_map_ else hex(op)
                s = f"{name} PSN {f['bth']['psn']}"
                if "aeth" in f and f["aeth"]:
                    s += f" syndrome 0x{f['aeth']['syndrome']:02X} MSN {f['aeth']['msn']}"
                return s + f", {len(frame)} B"
        except Exception:                 # noqa: BLE001
            return ""
        return ""

    async def _run(self):
        from cocotb.triggers import FallingEdge
        fe = FallingEdge(self.dut.clk)
        live = self.live
        while True:
            await fe
            self.cycle += 1
            for p, v, r in live:
                if int(v.value) and int(r.value):
                    frame = None
                    if p.key == "rx_in":
                        frame = self._beat(self._rx, "rx")
                    elif p.key == "tx_out":
                        frame = self._beat(self._tx, "tx")
                    rec = {"type": "ev", "cycle": self.cycle, "key": p.key}
                    det = self._detail(p.key, frame)
                    if det:
                        rec["detail"] = det
                    self._write(rec)


def _current_test():
    try:
        from cocotb import regression
        return regression._manager_inst._test.name
    except Exception:            # noqa: BLE001
        return None


# ---- offline: step lists and pictures -------------------------------------------------------
def load(path):
    """``(header, sections)``; a section is ``{"title", "start", "events": [...]}``."""
    header, sections = {}, []
    cur = {"title": "(before the first section)", "start": 0, "events": []}
    for line in Path(path).read_text().splitlines():
        rec = json.loads(line)
        if rec["type"] == "header":
            header = rec
        elif rec["type"] == "section":
            if cur["events"] or cur["title"] != "(before the first section)":
                sections.append(cur)
            cur = {"title": rec["title"], "start": rec["cycle"], "events": []}
        elif rec["type"] == "ev":
            cur["events"].append(rec)
    if cur["events"] or cur["title"] != "(before the first section)":
        sections.append(cur)
    return header, sections


def steps(section, gap=1):
    """Collapse each probe's events into spans (runs with gaps ≤ ``gap`` cycles), in order of
    their first cycle: ``[{key, block, text, first, last, beats, detail}]``."""
    out, open_ = [], {}
    for ev in section["events"]:
        k, c = ev["key"], ev["cycle"]
        s = open_.get(k)
        if s is not None and c - s["last"] <= gap:
            s["last"] = c
            s["beats"] += 1
            if ev.get("detail"):
                s["detail"] = ev["detail"]
        else:
            p = BY_KEY[k]
            s = {"key": k, "block": p.block, "text": p.text, "first": c, "last": c,
                 "beats": 1, "detail": ev.get("detail", "")}
            open_[k] = s
            out.append(s)
    out.sort(key=lambda s: (s["first"], PROBES.index(BY_KEY[s["key"]])))
    return out


def timeline_text(header, section):
    st = steps(section)
    if not st:
        return f"{section['title']}: no block handshakes\n"
    t0 = st[0]["first"]
    lines = [f"{section['title']}  ({header.get('sim', '?')}, W={header.get('width', '?')}, "
             f"cycle 0 = {t0} cycles after the trace started)"]
    for n, s in enumerate(st, 1):
        span = f"{s['first'] - t0:>5}" + (f"–{s['last'] - t0:<5}" if s["last"] != s["first"]
                                          else " " * 6)
        beats = f" ({s['beats']} beats)" if s["beats"] > 1 else ""
        det = f" — {s['detail']}" if s["detail"] else ""
        lines.append(f"{n:>3}. cycle {span} {s['block']:<15} {s['text']}{beats}{det}")
    return "\n".join(lines) + "\n"


_COLORS = {"RQ doorbell": "#7f7f7f", "MAC receive": "#7f7f7f", "RX Parse": "#1f77b4", "PSN Check": "#ff7f0e",
           "RQ fetch": "#2ca02c", "Key Cache": "#d62728", "Scatter Path": "#9467bd",
           "invalidate": "#8c564b", "ACK/NAK builder": "#e377c2", "CQE Generation": "#17becf",
           "MAC transmit": "#bcbd22", "Send Queue": "#7f7f7f", "WQE fetch": "#2ca02c",
           "Gather Path": "#9467bd", "TX Packet Build": "#1f77b4", "Replay Buffer": "#ff7f0e"}


def _esc(s):
    return (str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def render_svg(header, section, *, px_per_cycle=None, width=1240):
    """An SVG timeline of one section: one row per step (the step list's order), a bar from
    its first to its last cycle, the cycle numbers and the block name beside it."""
    st = steps(section)
    if not st:
        return None
    t0 = st[0]["first"]
    t1 = max(s["last"] for s in st)
    span = max(1, t1 - t0)
    left, right, row, top = 440, 30, 22, 46
    plot = width - left - right
    ppc = px_per_cycle or plot / span
    h = top + row * len(st) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
           f'font-family="DejaVu Sans, Arial, sans-serif" font-size="12">',
           f'<rect width="{width}" height="{h}" fill="white"/>',
           f'<text x="10" y="20" font-size="15" font-weight="bold">{_esc(section["title"])}</text>',
           f'<text x="10" y="37" fill="#555">rnic top, {_esc(header.get("sim", ""))}, '
           f'W={header.get("width", "")}: the cycle each block handled the packet '
           f'(cycle 0 = first event)</text>']
    # grid
    step = next((t for t in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000)
                 if span / t <= 14), 10000)
    for c in range(0, span + 1, step):
        x = left + c * ppc
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{h - 30}" '
                   f'stroke="#e5e5e5"/>')
        out.append(f'<text x="{x:.1f}" y="{h - 16}" text-anchor="middle" fill="#555">{c}</text>')
    out.append(f'<text x="{left + plot / 2:.0f}" y="{h - 3}" text-anchor="middle" fill="#555">'
               f'clock cycles</text>')
    for i, s in enumerate(st):
        y = top + i * row
        color = _COLORS.get(s["block"], "#444")
        label = f"{i + 1}. {s['block']}: {s['text']}"
        if len(label) > 60:
            label = label[:59] + "…"
        out.append(f'<text x="10" y="{y + 14}"><title>{_esc(s["text"])}</title>'
                   f'{_esc(label)}</text>')
        x0 = left + (s["first"] - t0) * ppc
        w = max(3.0, (s["last"] - s["first"] + 1) * ppc)
        out.append(f'<rect x="{x0:.1f}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" '
                   f'rx="2" fill="{color}"><title>{_esc(s["detail"] or s["text"])}</title></rect>')
        cyc = f"{s['first'] - t0}" + (f"–{s['last'] - t0}" if s["last"] != s["first"] else "")
        det = f"  {s['detail']}" if s["detail"] and len(s["detail"]) < 48 else ""
        tx = x0 + w + 4
        anchor = "start"
        if tx + 7 * len(cyc + det) > width:           # no room on the right: left of the bar
            tx, anchor = x0 - 4, "end"
        out.append(f'<text x="{tx:.1f}" y="{y + 14}" text-anchor="{anchor}" fill="#333">'
                   f'{_esc(cyc + det)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def wavedrom(header, section):
    """The same step list as WaveDrom JSON (one lane per step, high while the step moves data),
    for a WaveDrom renderer; the repository's pictures are the SVGs of :func:`render_svg`."""
    st = steps(section)
    if not st:
        return None
    t0 = st[0]["first"]
    n = max(s["last"] for s in st) - t0 + 1
    lanes = []
    for i, s in enumerate(st):
        bits = ["1" if s["first"] - t0 <= c <= s["last"] - t0 else "0" for c in range(n)]
        wave = "".join(b if k == 0 or b != bits[k - 1] else "." for k, b in enumerate(bits))
        lanes.append({"name": f"{i + 1}. {s['block']}", "wave": wave})
    return {"signal": lanes, "head": {"text": section["title"], "tock": 0},
            "config": {"hscale": 1}}


def _slug(s):
    return "".join(c if c.isalnum() else "-" for c in s.lower()).strip("-")[:60]


def render(src, out, *, only=None, page=None):
    """Every ``.jsonl`` under ``src`` (or those named in ``only``, in that order): step lists
    (``.txt``) and SVGs into ``out``; with ``page``, a Markdown page embedding them. Returns the
    written files."""
    src, out = Path(src), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    paths = sorted(src.rglob("*.jsonl"))
    if only:
        paths = [p for name in only for p in paths if p.stem == name]
    md = []
    for path in paths:
        header, sections = load(path)
        label = path.parent.name
        text = [f"# {header.get('test', path.stem)} ({label})"]
        if header.get("missing"):
            text.append(f"# probes absent in this top: {', '.join(header['missing'])}")
        md.append(f"## `{path.stem}`\n")
        for n, sec in enumerate(sections):
            if sec["title"].startswith("(before"):
                continue
            tl = timeline_text(header, sec)
            text.append(tl)
            svg = render_svg(header, sec)
            if svg:
                (out / f"{path.stem}-{n}-{label}.wavedrom.json").write_text(
                    json.dumps(wavedrom(header, sec)) + "\n")
                f = out / f"{path.stem}-{n}-{label}.svg"
                f.write_text(svg)
                written.append(f)
                rel = os.path.relpath(f, Path(page).parent) if page else f.name
                md.append(f"### {sec['title']}\n\n![{sec['title']}]({rel})\n\n```\n{tl}```\n")
        t = out / f"{path.stem}-{label}.txt"
        t.write_text("\n".join(text) + "\n")
        written.append(t)
        print("\n".join(text))
    if page:
        Path(page).write_text(_PAGE_HEAD + "\n".join(md))
        written.append(Path(page))
    return written


_PAGE_HEAD = """# A SEND crossing the blocks: traces

Generated by `make trace` from a test run: the responder scenarios of
`tb/cocotb_responder.py` run on Icarus at the `rnic` top (W=64) with the block trace of
`sim/trace.py` switched on (`RNIC_TRACE=1`); `python -m sim.trace render` turns the recorded
events into these step lists and pictures. Do not edit by hand.

Each line is one block handling the packet, in the order it happened, with its clock cycle
counted from the first event of the step list (for the SEND scenarios: the receive WQE's
doorbell, the book's step 1). A bar spans the cycles in which that interface moved data (for
example the payload beats into host memory). The trace reads the handshakes between the blocks
inside the core through the simulator's hierarchy; it adds no port to `rnic` and works on Icarus
and Verilator (`tb/test_responder.py::test_responder_trace` checks the order on both).
The requester's steps (WQE fetch, Gather, TX Packet Build, ACK retire) appear in traces of tests
that drive the requester; in these responder scenarios the core is the responder only.

Reading the 9-step SEND against the book (chapter "SEND", "All 9 steps"): step 1, the posted
receive WQE, is the RQ doorbell; step 4 (parse, PSN compare) is RX Parse and PSN Check; step 5
(no PSN gap, RQ not empty) is PSN Check's decision to execute; step 6 (the WQE at the head of
the RQ, the payload placed) is RQ fetch, the Key Cache's lkey check and the Scatter Path; step
7 (the receive completion) is CQE Generation, and the ACK is released by PSN Check as soon as
the payload writes are issued — it does not wait for the CQE (here the CQE write happens to
finish first, because building the ACK frame takes about 20 cycles). Steps 2, 3, 8 and 9 happen
on the requester's host.

The run also leaves, under `build/trace/w64-icarus/`, each test's events (`.jsonl`), the frames
it saw both ways as a pcap (`.pcap`, timestamps = cycle numbers in µs; open it in Wireshark or
`tshark -r`), and with `RNIC_WAVES=1` (what `make trace` sets) the waveform (`.fst`, GTKWave).
Every other responder scenario records its trace the same way when the tests run with
`RNIC_TRACE=1` (for example `RNIC_TRACE=1 .venv/bin/python -m pytest -n 0 tb/test_responder.py
-k "scenarios and w64 and icarus"`, then `.venv/bin/python -m sim.trace show
build/trace/w64-icarus/*.jsonl`); `make regress-full` runs them all traced
(`test_responder_trace_every_scenario`).

"""


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) >= 1 and argv[0] == "show":
        for p in argv[1:]:
            header, sections = load(p)
            for sec in sections:
                print(timeline_text(header, sec))
        return 0
    if len(argv) >= 3 and argv[0] == "render":
        page = None
        rest = argv[3:]
        if "--page" in rest:
            i = rest.index("--page")
            page = rest[i + 1]
            rest = rest[:i] + rest[i + 2:]
        render(argv[1], argv[2], only=rest or None, page=page)
        return 0
    print("usage: python -m sim.trace render SRC_DIR OUT_DIR [--page PAGE.md] [test ...] | "
          "show FILE.jsonl ...")
    return 2


if __name__ == "__main__":
    sys.exit(main())
