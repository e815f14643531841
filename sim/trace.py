"""Where a packet is, cycle by cycle: a block trace of ``rnic`` cores for cocotb tests.

While a test runs, :class:`Tracer` samples the handshakes between the blocks *inside* the core
through the simulator's hierarchy (``dut.resp.psn_check.meta__valid`` …; no port is added to
``rnic``; Icarus sees every net, Verilator sees them because the cocotb runner builds with
``--public-flat-rw``). Each probe is a ``valid``/``ready`` pair named by the instance and port names
Amaranth gives the generated Verilog; a probe whose handles are absent (a block renamed or not
wired in this version of the top) is skipped and listed as ``missing`` in the trace's header.
Every cycle in which a probe's valid and ready are both high is one event.

Use from a test bench::

    tr = Tracer.attach(dut)            # no-op unless RNIC_TRACE=1
    tr.section("SEND_ONLY, PSN 1000")  # starts a new step list (e.g. before post_recv)
    ...
    tr.end()                           # optional: later events belong to no step list

Several cores in one simulation (``sim.pair.RnicPair``: instances ``a`` and ``b``, ports
``a_…``/``b_…``): ``Tracer.attach(dut, cores={"A": "a", "B": "b"})`` traces both, and every
step names its core.

Events go to ``build/trace/<label>/<test>.jsonl`` as they happen (``<label>`` =
``w<W>-<simulator>``, ``pair-w<W>-<simulator>`` for two cores; ``RNIC_TRACE_DIR`` overrides
``build/trace``), the frames seen on ``s_axis_rx`` and ``m_axis_tx`` (with two cores: the frames
each core sent) to ``<test>.pcap`` (timestamps: cycle number as microseconds).

``python -m sim.trace show FILE.jsonl`` prints the step lists of a recorded test; ``render`` and
``page`` turn recorded tests into step lists (``.txt``), SVG timelines, WaveDrom JSON and a
Markdown page (``make trace``: ``docs/trace.md``); ``compare DIR1 DIR2 TEST…`` checks that two
runs (Icarus and Verilator) went through the same steps at the same cycles. The step lists read
like the book's: one line per block a packet passed, in order, with its cycle relative to the
first event of the section.
"""

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .knobs import knob

__all__ = ["Tracer", "PROBES", "load", "steps", "timeline_text", "render_svg", "render",
           "compare", "main"]

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
       "req.requester.sq_db__valid", "req.requester.sq_db__ready", "requester"),
    _p("sq_ctx", "WQE fetch", "QP context read for the requester",
       "req.requester.ctx_req__valid", "req.requester.ctx_req__ready", "requester"),
    _p("wqe_rd", "WQE fetch", "send WQE read issued to host memory",
       "host_memory.read_1__req__valid", "host_memory.read_1__req__ready", "requester"),
    _p("wqe_data", "WQE fetch", "send WQE back from host memory",
       "req.requester.wqe_rd__resp__valid", "req.requester.wqe_rd__resp__ready", "requester"),
    _p("gather_key", "Key Cache", "lkey of the source buffer looked up",
       "req.requester.lookup__req__valid", "req.requester.lookup__req__ready", "requester"),
    _p("gather_key_resp", "Key Cache", "lkey answer back",
       "req.requester.lookup__resp__valid", "req.requester.lookup__resp__ready", "requester"),
    _p("gather", "Gather Path", "payload read issued to host memory",
       "host_memory.read_2__req__valid", "host_memory.read_2__req__ready", "requester"),
    _p("gather_data", "Gather Path", "payload beats back from host memory",
       "tx_build.rd__resp__valid", "tx_build.rd__resp__ready", "requester"),
    _p("tx_build", "TX frame builder", "request packet handed to the TX frame builder",
       "req.requester.pkt__valid", "req.requester.pkt__ready", "requester"),
    # ---- responder: software's side ----------------------------------------------------------
    _p("rq_db", "RQ doorbell", "the application posted a receive WQE: RQ doorbell taken",
       "resp.psn_check.rq_db__valid", "resp.psn_check.rq_db__ready"),
    # ---- the wire in ------------------------------------------------------------------------
    _p("rx_in", "MAC receive", "frame beats arrive on s_axis_rx",
       "s_axis_rx_tvalid", "s_axis_rx_tready"),
    _p("rx_meta", "RX Parse", "headers and ICRC checked: the packet's metadata leaves RX Parse",
       "resp.psn_check.meta__valid", "resp.psn_check.meta__ready"),
    # ---- requester: the ACK comes back ------------------------------------------------------
    _p("ack_in", "Replay Buffer", "ACK/NAK taken by the requester",
       "req.requester.ack__valid", "req.requester.ack__ready", "requester"),
    _p("retire", "Replay Buffer", "WQE retired: send completion handed on",
       "req.requester.cpl__valid", "req.requester.cpl__ready", "requester"),
    _p("send_cqe", "CQE Generation", "send completion handed to CQE Generation",
       "req.req_context.cqe__valid", "req.req_context.cqe__ready", "requester"),
    # ---- responder ----------------------------------------------------------------------------
    _p("psn_exe", "PSN Check", "PSN, opcode and access judged: command to execute",
       "resp.execute.exe__valid", "resp.execute.exe__ready"),
    _p("rq_rd", "RQ fetch", "receive WQE read issued to host memory",
       "host_memory.read_0__req__valid", "host_memory.read_0__req__ready"),
    _p("rq_data", "RQ fetch", "receive WQE back from host memory",
       "host_memory.read_0__resp__valid", ("resp.execute.rd__resp__ready",
                                           "host_memory.read_0__resp__ready")),
    _p("key_req", "Key Cache", "lkey/rkey lookup issued",
       "resp.execute.lookup__req__valid", "resp.execute.lookup__req__ready"),
    _p("key_resp", "Key Cache", "lookup answer back",
       "resp.execute.lookup__resp__valid", "resp.execute.lookup__resp__ready"),
    _p("wr_req", "Scatter Path", "payload write burst issued (AW)",
       "host_memory.write_0__req__valid", "host_memory.write_0__req__ready"),
    _p("wr_data", "Scatter Path", "payload beats written to host memory",
       "host_memory.write_0__data__valid", "host_memory.write_0__data__ready"),
    _p("inval_req", "invalidate", "IETH rkey sent to the Key Cache to invalidate",
       "key_cache.inval__req__valid", "key_cache.inval__req__ready"),
    _p("inval_resp", "invalidate", "invalidation answered",
       "key_cache.inval__resp__valid", "key_cache.inval__resp__ready"),
    _p("done", "PSN Check", "execute reports the packet placed (writes issued): ACK released",
       "resp.psn_check.done__valid", "resp.psn_check.done__ready"),
    _p("ack_build", "TX frame builder", "ACK/NAK handed to the TX frame builder by PSN Check",
       "resp.psn_check.ack_tx__valid", "resp.psn_check.ack_tx__ready"),
    _p("complete", "CQE Generation", "completion handed to CQE Generation",
       "resp.execute.complete__valid", "resp.execute.complete__ready"),
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
        h.value                      # readable? (its value may still be X before reset)
        return h
    except Exception:            # noqa: BLE001 — absent in this version of the top
        return None


def _resolve(dut, core, path):
    """A probe path of one core: ``block.signal`` inside the core's instance (``dut`` itself for
    a single ``rnic`` top, ``dut.<inst>`` for a core of a wrapper such as ``RnicPair``), a
    top-level port name (no dot) as the wrapper brings it out (``<prefix>s_axis_rx_tvalid``)."""
    inst, prefix = core
    if "." in path:
        return _lookup(dut, path if inst is None else f"{inst}.{path}")
    return _lookup(dut, prefix + path)


def _first(dut, paths, core=(None, "")):
    for p in paths:
        h = _resolve(dut, core, p)
        if h is not None:
            return h
    return None


class _Null:
    """The tracer when tracing is off: every call does nothing."""
    enabled = False
    missing = ()

    def section(self, *a, **k):
        pass

    def end(self, *a, **k):
        pass

    def note(self, *a, **k):
        pass


class Tracer:
    """Samples every probe at each falling edge of ``dut.clk`` (values settle before it).

    ``cores`` names the cores to trace: ``None`` for a single ``rnic`` top; for a wrapper holding
    several, ``{"A": "a", "B": "b"}`` maps the label printed in the step lists to the instance
    name, whose ports the wrapper brings out prefixed ``<instance>_`` (``sim.pair.RnicPair``).
    Every event then carries its core's label."""

    enabled = True

    @classmethod
    def attach(cls, dut, *, test=None, out_dir=None, force=False, cores=None):
        if not force and not knob("RNIC_TRACE"):
            return _Null()
        return cls(dut, test=test, out_dir=out_dir, cores=cores)

    def __init__(self, dut, *, test=None, out_dir=None, cores=None):
        import cocotb
        self.dut = dut
        self.test = test or _current_test() or "test"
        self.sim = (getattr(cocotb, "SIM_NAME", "") or "sim").split()[0].lower()
        if cores:
            self.cores = {lab: (inst, f"{inst}_") for lab, inst in cores.items()}
        else:
            self.cores = {"": (None, "")}
        first_prefix = next(iter(self.cores.values()))[1]
        self.width = len(getattr(dut, f"{first_prefix}s_axis_rx_tdata"))
        label = f"w{self.width}-{self.sim}"
        if cores:
            label = "pair-" + label if len(cores) == 2 else f"{len(cores)}cores-{label}"
        d = Path(out_dir or knob("RNIC_TRACE_DIR") or ROOT / "build" / "trace") / label
        d.mkdir(parents=True, exist_ok=True)
        self.path = d / f"{self.test}.jsonl"
        self.pcap_path = d / f"{self.test}.pcap"
        self.cycle = 0
        self._edge_ns = 0
        self.live, self.missing = [], []
        self._meta_payload, self._streams = {}, {}
        for lab, core in self.cores.items():
            for p in PROBES:
                v, r = _first(dut, p.valid, core), _first(dut, p.ready, core)
                if v is None or r is None:
                    self.missing.append(f"{lab}.{p.key}" if lab else p.key)
                else:
                    self.live.append((lab, p, v, r))
            self._meta_payload[lab] = _resolve(dut, core, "resp.psn_check.meta__payload")
            pre = core[1]
            for key, port in (("rx_in", "s_axis_rx"), ("tx_out", "m_axis_tx")):
                self._streams[(lab, key)] = [[], getattr(dut, f"{pre}{port}_tdata"),
                                             getattr(dut, f"{pre}{port}_tkeep"),
                                             getattr(dut, f"{pre}{port}_tlast")]
        self.frames = []            # (cycle, direction, bytes)
        self._f = open(self.path, "w")
        self._write({"type": "header", "test": self.test, "sim": self.sim, "width": self.width,
                     "cores": [c for c in self.cores if c],
                     "probes": sorted({p.key for _, p, _, _ in self.live},
                                      key=lambda k: PROBES.index(BY_KEY[k])),
                     "missing": self.missing})
        self._task = cocotb.start_soon(self._run())

    # ---- recording ----------------------------------------------------------------------------
    def _write(self, rec):
        self._f.write(json.dumps(rec) + "\n")
        self._f.flush()

    def section(self, title):
        """Start a new step list (a packet, or a scenario step of the book)."""
        # "ns": the time of the falling edge that ended cycle ``cycle`` (find it in the waves)
        self._write({"type": "section", "cycle": self.cycle, "title": title,
                     "ns": self._edge_ns})

    def _now_ns(self):
        from cocotb.utils import get_sim_time
        return int(get_sim_time("ns"))

    def end(self):
        """Close the current step list: later events belong to no step list."""
        self._write({"type": "section", "cycle": self.cycle, "title": "(end)"})

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
            # with several cores every frame is one core's tx and another's rx: keep it once
            if len(self.cores) == 1 or key == "tx_out":
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

    def _detail(self, lab, key, frame=None):
        try:
            mp = self._meta_payload.get(lab)
            if key == "rx_meta" and mp is not None:
                from rnic.ifaces import rx_meta_layout
                from rnic.opcodes import Op
                from sim.wrap import unpack
                m = unpack(rx_meta_layout, int(mp.value))
                name = Op(m["opcode"]).name if m["opcode"] in Op._value2member_map_ else \
                    hex(m["opcode"])
                return f"{name} PSN {_psn(m['psn'])} QP {m['dqpn']}"
            if frame is not None:
                from rnic.opcodes import Op
                from sim.packets import decode_frame
                f = decode_frame(frame)
                op = f["bth"]["opcode"]
                name = Op(op).name if op in Op._value2member_map_ else hex(op)
                s = f"{name} PSN {_psn(f['bth']['psn'])}"
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
            t = self._now_ns()
            if self.cycle == 2:          # the clock period, to find a step in the waveform
                self._write({"type": "clock", "period_ns": t - self._edge_ns})
            self._edge_ns = t
            for lab, p, v, r in live:
                # an internal handshake still X (before the first edges of reset) is no transfer;
                # the ports' own rule is checked by tb/system/cocotb_ports.py
                vv, rv = v.value, r.value
                if vv.is_resolvable and rv.is_resolvable and int(vv) and int(rv):
                    frame = None
                    if p.key in ("rx_in", "tx_out"):
                        frame = self._beat(self._streams[(lab, p.key)], p.key)
                    rec = {"type": "ev", "cycle": self.cycle, "key": p.key}
                    if frame is not None:
                        rec["eof"] = 1          # a frame's last beat: its step ends here
                    if lab:
                        rec["core"] = lab
                    det = self._detail(lab, p.key, frame)
                    if det:
                        rec["detail"] = det
                    self._write(rec)


def _psn(v):
    """PSNs as the book writes them (decimal), near the 24-bit wrap in hex (0xFFFFF0)."""
    return f"0x{v:06X}" if v >= 1 << 20 else str(v)


def _current_test():
    try:
        from cocotb import regression
        return regression._manager_inst._test.name
    except Exception:            # noqa: BLE001
        return None


# ---- offline: step lists and pictures -------------------------------------------------------
def load(path):
    """``(header, sections)``; a section is ``{"title", "start", "events": [...]}``. Sections
    whose title starts with ``(`` (events before the first section, after :meth:`Tracer.end`)
    are returned too; the renderers skip them."""
    header, sections = {}, []
    cur = {"title": "(before the first section)", "start": 0, "events": []}
    for line in Path(path).read_text().splitlines():
        rec = json.loads(line)
        if rec["type"] == "header":
            header = rec
        elif rec["type"] == "clock":
            header["period_ns"] = rec["period_ns"]
        elif rec["type"] == "section":
            if cur["events"] or not cur["title"].startswith("("):
                sections.append(cur)
            cur = {"title": rec["title"], "start": rec["cycle"], "events": [],
                   "ns": rec.get("ns")}
        elif rec["type"] == "ev":
            cur["events"].append(rec)
    if cur["events"] or not cur["title"].startswith("("):
        sections.append(cur)
    return header, sections


def steps(section, gap=1):
    """Collapse each probe's events (per core) into spans (runs with gaps ≤ ``gap`` cycles), in
    order of their first cycle: ``[{core, key, block, text, first, last, beats, detail}]``."""
    out, open_ = [], {}
    for ev in section["events"]:
        k, c, core = ev["key"], ev["cycle"], ev.get("core", "")
        s = open_.get((core, k))
        if s is not None and c - s["last"] <= gap:
            s["last"] = c
            s["beats"] += 1
            if ev.get("detail"):
                s["detail"] = ev["detail"]
            if ev.get("eof"):
                del open_[(core, k)]
        else:
            p = BY_KEY[k]
            s = {"core": core, "key": k, "block": p.block, "text": p.text, "first": c,
                 "last": c, "beats": 1, "detail": ev.get("detail", "")}
            if not ev.get("eof"):
                open_[(core, k)] = s
            out.append(s)
    out.sort(key=lambda s: (s["first"], s["core"], PROBES.index(BY_KEY[s["key"]])))
    return out


def _who(s):
    return f"{s['core']} {s['block']}" if s.get("core") else s["block"]


def timeline_text(header, section):
    st = steps(section)
    if not st:
        return f"{section['title']}: no block handshakes\n"
    t0 = st[0]["first"]
    cores = header.get("cores") or []
    where = f"cores {' and '.join(cores)}, " if cores else ""
    when = f"cycle 0 = {t0} cycles after the trace started"
    if section.get("ns") is not None and header.get("period_ns"):
        when += f", at {section['ns'] + (t0 - section['start']) * header['period_ns']} ns"
    lines = [f"{section['title']}  ({where}{header.get('sim', '?')}, "
             f"W={header.get('width', '?')}, {when})"]
    wide = 17 if cores else 15
    for n, s in enumerate(st, 1):
        span = f"{s['first'] - t0:>5}" + (f"–{s['last'] - t0:<5}" if s["last"] != s["first"]
                                          else " " * 6)
        beats = f" ({s['beats']} beats)" if s["beats"] > 1 else ""
        det = f" — {s['detail']}" if s["detail"] else ""
        lines.append(f"{n:>3}. cycle {span} {_who(s):<{wide}} {s['text']}{beats}{det}")
    return "\n".join(lines) + "\n"


def signature(header, section):
    """What must agree between two simulators: every step's core, probe, cycles (relative to the
    first) and beats."""
    st = steps(section)
    t0 = st[0]["first"] if st else 0
    return [(s["core"], s["key"], s["first"] - t0, s["last"] - t0, s["beats"]) for s in st]


def compare(dir1, dir2, tests):
    """Differences between the step lists of ``tests`` recorded in two directories (say Icarus
    and Verilator): ``[]`` when every section has the same steps at the same cycles."""
    diffs = []
    for t in tests:
        p1, p2 = Path(dir1) / f"{t}.jsonl", Path(dir2) / f"{t}.jsonl"
        if not p1.exists() or not p2.exists():
            diffs.append(f"{t}: no trace in {p1 if not p1.exists() else p2}")
            continue
        (h1, s1), (h2, s2) = load(p1), load(p2)
        s1 = [s for s in s1 if not s["title"].startswith("(")]
        s2 = [s for s in s2 if not s["title"].startswith("(")]
        if [s["title"] for s in s1] != [s["title"] for s in s2]:
            diffs.append(f"{t}: sections differ")
            continue
        for a, b in zip(s1, s2):
            g1, g2 = signature(h1, a), signature(h2, b)
            if g1 != g2:
                n = next((i for i, (x, y) in enumerate(zip(g1, g2)) if x != y),
                         min(len(g1), len(g2)))
                diffs.append(f"{t} / {a['title']}: step {n + 1}: "
                             f"{g1[n] if n < len(g1) else None} vs "
                             f"{g2[n] if n < len(g2) else None}")
    return diffs


_COLORS = {"RQ doorbell": "#7f7f7f", "MAC receive": "#7f7f7f", "RX Parse": "#1f77b4",
           "PSN Check": "#ff7f0e",
           "RQ fetch": "#2ca02c", "Key Cache": "#d62728", "Scatter Path": "#9467bd",
           "invalidate": "#8c564b", "ACK/NAK builder": "#e377c2", "CQE Generation": "#17becf",
           "MAC transmit": "#bcbd22", "Send Queue": "#7f7f7f", "WQE fetch": "#2ca02c",
           "Gather Path": "#9467bd", "TX frame builder": "#1f77b4", "Replay Buffer": "#ff7f0e"}
_CORE_BG = {"A": "#eef4fb", "B": "#fbf3ea"}


def _esc(s):
    return (str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def render_svg(header, section, *, px_per_cycle=None, width=1240):
    """An SVG timeline of one section: one row per step (the step list's order), a bar from
    its first to its last cycle, the cycle numbers and the block name beside it. With several
    cores, each row's background is its core's colour and its label starts with the core."""
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
    cores = header.get("cores") or []
    what = (f"cores {' and '.join(cores)} (" + ", ".join(
        f"{c}: {'requester' if i == 0 else 'responder'}" for i, c in enumerate(cores)) + ")"
        if cores else "rnic top")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
           f'font-family="DejaVu Sans, Arial, sans-serif" font-size="12">',
           f'<rect width="{width}" height="{h}" fill="white"/>',
           f'<text x="10" y="20" font-size="15" font-weight="bold">{_esc(section["title"])}</text>',
           f'<text x="10" y="37" fill="#555">{_esc(what)}, {_esc(header.get("sim", ""))}, '
           f'W={header.get("width", "")}: the cycle each block handled the packet '
           f'(cycle 0 = first event)</text>']
    for i, s in enumerate(st):                      # row backgrounds: which core
        if s.get("core") in _CORE_BG:
            out.append(f'<rect x="0" y="{top + i * row}" width="{width}" height="{row}" '
                       f'fill="{_CORE_BG[s["core"]]}"/>')
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
        label = f"{i + 1}. {_who(s)}: {s['text']}"
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
        lanes.append({"name": f"{i + 1}. {_who(s)}", "wave": wave})
    return {"signal": lanes, "head": {"text": section["title"], "tock": 0},
            "config": {"hscale": 1}}


def _slug(s):
    return "".join(c if c.isalnum() else "-" for c in s.lower()).strip("-")[:60]


def render(src, out, *, only=None, page=None, head=None):
    """Every ``.jsonl`` under ``src`` (or those named in ``only``, in that order): step lists
    (``.txt``), SVGs and WaveDrom JSON into ``out``; with ``page``, a Markdown page embedding
    them (``head`` its text before them). ``src`` may be a list of ``(directory, only)`` pairs:
    one page for several runs. Returns the written files."""
    groups = src if isinstance(src, list) else [(src, only)]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written, md = [], []
    for gsrc, gonly in groups:
        gsrc = Path(gsrc)
        md.append(_PAIR_INTRO if gsrc.name.startswith("pair-") else _ONE_INTRO)
        paths = sorted(gsrc.rglob("*.jsonl"))
        if gonly:
            paths = [p for name in gonly for p in paths if p.stem == name]
        for path in paths:
            header, sections = load(path)
            label = path.parent.name
            text = [f"# {header.get('test', path.stem)} ({label})"]
            if header.get("missing"):
                text.append(f"# probes absent in this top: {', '.join(header['missing'])}")
            md.append(f"### `{path.stem}` ({label})\n")
            titled = [sec for sec in sections if not sec["title"].startswith("(")]
            for n, sec in enumerate(titled, 1):
                tl = timeline_text(header, sec)
                text.append(tl)
                svg = render_svg(header, sec)
                if svg:
                    wd = out / f"{path.stem}-{n}-{label}.wavedrom.json"
                    wd.write_text(json.dumps(wavedrom(header, sec)) + "\n")
                    written.append(wd)
                    f = out / f"{path.stem}-{n}-{label}.svg"
                    f.write_text(svg)
                    written.append(f)
                    rel = os.path.relpath(f, Path(page).parent) if page else f.name
                    md.append(f"#### {sec['title']}\n\n![{sec['title']}]({rel})\n\n"
                              f"```\n{tl}```\n")
            t = out / f"{path.stem}-{label}.txt"
            t.write_text("\n".join(text) + "\n")
            written.append(t)
            print("\n".join(text))
    if page:
        Path(page).write_text((_PAGE_HEAD if head is None else head) + "\n".join(md))
        written.append(Path(page))
        # the page owns its picture directory: drop what an older run left and this one did not
        keep = {f.resolve() for f in written}
        for f in out.iterdir():
            if f.name.endswith((".svg", ".wavedrom.json", ".txt")) and f.resolve() not in keep:
                f.unlink()
    return written


_PAGE_HEAD = """# A SEND crossing the blocks: traces

Generated by `make trace` from test runs, with the block trace of `sim/trace.py` switched on
(`RNIC_TRACE=1`); `python -m sim.trace page` turns the recorded events into these step lists and
pictures. Do not edit by hand.

Each line is one block handling a packet, in the order it happened, with its clock cycle counted
from the first event of the step list (for the SEND scenarios: the receive WQE's doorbell, the
book's step 1). A bar spans the cycles in which that interface moved data (for example the
payload beats into host memory). The trace reads the valid/ready handshakes between the blocks
inside each core through the simulator's hierarchy; it adds no port to `rnic` and gives the same
cycles on Icarus and Verilator (`make trace` runs the two-core scenarios on both and compares
every step list with `python -m sim.trace compare`).

The runs also leave, under `build/trace/`, each test's events (`.jsonl`), the frames it put on
the wire as a pcap (`.pcap`, timestamps = cycle numbers in µs; open it in Wireshark or
`tshark -r`) and the waveform of the Icarus run (`.fst`, GTKWave).

"""

_PAIR_INTRO = """## Two cores: requester A, responder B

`tb/system/test_two_rnic.py`'s directed scenarios (`tb/system/cocotb_two_rnic.py`) on two `rnic` \
cores joined
by the testbench's wire (`sim/pair.py`), Icarus, W=64, path MTU 256. Lines marked **A** happen in
the requester's core, **B** in the responder's; a frame appears twice, leaving one core
(`MAC transmit`) and entering the other (`MAC receive`) a cycle or two later (the wire is the
testbench's: it takes the whole frame, then plays it into the other core).

Reading the 13-step SEND against the book (chapter "SEND", "All 13 steps"), with a 600-byte
message from two SGEs, so three packets (SEND_FIRST, SEND_MIDDLE, SEND_LAST at PSN 0xFFFFF0 to
0xFFFFF2, the requester's first PSN just below the 24-bit wrap):

| book step | in the trace |
|---|---|
| 1. B's application has posted a receive WQE | B RQ doorbell, B RQ fetch (the WQE is prefetched \
on its doorbell) |
| 2. A's application writes the SEND WQE and rings the doorbell | A Send Queue: SQ doorbell taken |
| 3. RNIC A reads the WQE and the QP's context | A WQE fetch: context read, WQE read issued and \
back |
| 4. the Key Cache checks the lkey, the DMA engine reads the payload | A Key Cache (one lookup per \
SGE), A Gather Path |
| 5. TX Packet Build puts a BTH in front of the payload; the packet leaves | A TX frame builder, A \
MAC transmit (three frames) |
| 6. RX Parse on B checks the PSN | B MAC receive, B RX Parse, B PSN Check |
| 7. the receive WQE at the head of the RQ | B RQ fetch (already on chip: read at step 1) |
| 8. the Key Cache checks B's lkey, the payload is written | B Key Cache, B Scatter Path |
| 9. CQE Generation writes the receive completion; the ACK leaves | B PSN Check releases the ACK \
when the last packet's writes are issued; B CQE Generation, B ACK/NAK builder, B MAC transmit (the \
ACK does not wait for the CQE; building its frame takes longer than the CQE write here) |
| 10. completion event (only if the CQ was armed) | not armed in this test |
| 11. the ACK returns; RX Parse on A matches it, the entry retires | A MAC receive, A RX Parse, A \
Replay Buffer: ACK taken, WQE retired |
| 12. A writes the send completion | A CQE Generation |
| 13. with immediate: only the receive CQE differs | the SEND with immediate below |

There is no on-chip replay buffer ([`requester.md`](requester.md)): a retransmission reads the
WQE and the payload again from host memory, so "Replay Buffer" here is the requester's in-flight
table, which an ACK retires. Only the last packet asks for an ACK (AckReq), so one ACK (MSN 1)
retires the whole message.

The SEND with Invalidate follows the book's 11 steps the same way; its step 7 is B's
`invalidate` pair of lines: the IETH's rkey goes to the Key Cache after the payload's writes
are issued and before the receive completion is handed to CQE Generation, which then names the
revoked key.

"""

_ONE_INTRO = """## One core: the responder scenarios

The responder scenarios of `tb/system/cocotb_responder.py` at one `rnic` top (Icarus, W=64): the
testbench plays the requester, so only the responder's blocks appear.

Reading the 9-step SEND against the book (chapter "SEND", "All 9 steps"): step 1, the posted
receive WQE, is the RQ doorbell; step 4 (parse, PSN compare) is RX Parse and PSN Check; step 5
(no PSN gap, RQ not empty) is PSN Check's decision to execute; step 6 (the WQE at the head of
the RQ, the payload placed) is RQ fetch, the Key Cache's lkey check and the Scatter Path; step
7 (the receive completion) is CQE Generation, and the ACK is released by PSN Check as soon as
the payload writes are issued — it does not wait for the CQE. Steps 2, 3, 8 and 9 happen
on the requester's host (the two-core traces above).

Every other responder scenario records its trace the same way when the tests run with
`RNIC_TRACE=1` (for example `RNIC_TRACE=1 .venv/bin/python -m pytest -n 0 \
tb/system/test_responder.py
-k "scenarios and w64 and icarus"`, then `.venv/bin/python -m sim.trace show
build/trace/w64-icarus/*.jsonl`); `make regress-full` runs them all traced
(`test_responder_trace_every_scenario`).

"""

USAGE = """usage: python -m sim.trace show FILE.jsonl ...
       python -m sim.trace render SRC_DIR OUT_DIR [--page PAGE.md] [test ...]
       python -m sim.trace page OUT_DIR PAGE.md SRC_DIR:test,test ... [SRC_DIR:test ...]
       python -m sim.trace compare DIR1 DIR2 test ..."""


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) >= 1 and argv[0] == "show":
        for p in argv[1:]:
            header, sections = load(p)
            for sec in sections:
                if not sec["title"].startswith("("):
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
    if len(argv) >= 4 and argv[0] == "page":
        groups = []
        for g in argv[3:]:
            d, _, tests = g.partition(":")
            groups.append((d, [t for t in tests.split(",") if t] or None))
        render(groups, argv[1], page=argv[2])
        return 0
    if len(argv) >= 4 and argv[0] == "compare":
        diffs = compare(argv[1], argv[2], argv[3:])
        for d in diffs:
            print(d)
        print(f"{len(argv) - 3} traces compared: " +
              ("the same steps at the same cycles" if not diffs else f"{len(diffs)} differ"))
        return 1 if diffs else 0
    print(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main())
