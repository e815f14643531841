"""Benchmark of the responder at the ``rnic`` top (``rnic bench``, entries ``resp_top-w*``).

Through the contract, but for one internal handshake: back-to-back SEND_ONLY frames (AckReq set,
PMTU 4096) into a posted receive queue, host memory with zero wait (``HostMem`` without latency
or back-pressure).

* receive throughput: beats accepted on ``s_axis_rx`` per cycle, from the first beat to the last
  (physical limit 1.00: one beat per cycle), one QP and 8 QPs (frames round robin), payloads of
  0, 256, 1024 and 4096 bytes; every message must complete (CQE SUCCESS) and be ACKed;
* latency on an idle core, per payload size: cycles from a request's last beat on ``s_axis_rx``
  to the first beat of its ACK on ``m_axis_tx``, and to the last W beat of its CQE on ``m_axi``.
  Beside each, the floor the contract allows: the ACK leaves after the payload's write beats are
  issued (⌈payload/(W/8)⌉ cycles after the frame is whole, at least 1), the CQE after their OKAY
  responses (one more cycle) and its own ⌈32/(W/8)⌉ beats. For a 0-byte SEND also the cycles to
  PSN Check's decision, the handshake of its command to Execute (``resp.execute.exe`` inside the
  generated Verilog).

Figures go through :func:`sim.bench.record`; the test fails only if a message is lost or wrong,
never because a figure is low.
"""


import cocotb
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiStreamFrame

from rnic.opcodes import Op
from sim.bench import read_latency, record
from sim.driver.regs import Regs
from sim.driver.verbs import Access, Device
from sim.hostmem import HostMem
from sim.knobs import knob
from sim.packets import LOCAL_IP, LOCAL_MAC, REMOTE_IP, REMOTE_MAC, build_frame, decode_frame
from sim.top_ports import top_ports

MANY = 8
PD = 1
LKEY = 0x4000


#: Internal handshakes sampled under RESP_BENCH_PROBE=1 (instance.port of the generated Verilog).
PROBE_PATHS = {
    "meta": "resp.psn_check.meta", "exe": "resp.execute.exe", "pay": "resp.execute.pay",
    "key": "resp.execute.lookup__req", "resv": "resp.execute.reserve",
    "wr_req": "host_memory.write_0__req", "done": "resp.psn_check.done",
    "complete": "resp.execute.complete", "cqe_aw": "host_memory.write_1__req",
    "resv_resp": "resp.execute.reserve_resp", "exe_done": "resp.execute.done",
    "ack_tx": "resp.psn_check.ack_tx",
    "tx_pkt": "tx_build.pkt",
}
#: Strobes sampled with them: the queue writes between execute's stages (planner →
#: key_q → key checks → iss_q → reservation → post_plan_q → issue) and the TX builder's
#: words into its CRC
PROBE_STROBES = {"key_q": "resp.execute.key_q.w_en", "iss_q": "resp.execute.iss_q.w_en",
                 "post_plan_q": "resp.execute.post_plan_q.w_en",
                 "piece_q": "resp.execute.piece_q.w_en",
                 "crc_in": "tx_build.crc.i__valid"}


def _handle(dut, path):
    h = dut
    try:
        for part in path.split("."):
            h = getattr(h, part)
        int(h.value)
        return h
    except Exception:  # noqa: BLE001 - not in this version of the top
        return None


def _probe_report(log, mon, n, pay_beats, first=8, count=6):
    """Per message k: cycles of its handshakes relative to the message's ``exe``."""
    p = {k: ev for k, (_, _, ev) in mon.probe.items()}
    if not p or len(p.get("exe", ())) < first + count + 1:
        return
    for k in range(first, first + count):
        e = p["exe"][k]
        row = [f"exe@{e} (+{e - p['exe'][k - 1]} after previous)"]
        for key in ("meta", "key", "resv", "wr_req", "done", "complete", "cqe_aw"):
            ev = p.get(key, [])
            per = len(ev) // n if n and len(ev) % n == 0 and len(ev) >= n else None
            if per:
                row.append(f"{key} " + ",".join(f"{x - e:+d}" for x in ev[k * per:(k + 1) * per]))
        if pay_beats and len(p.get("pay", ())) >= n * pay_beats:
            pb = p["pay"][k * pay_beats:(k + 1) * pay_beats]
            row.append(f"pay {pb[0] - e:+d}..{pb[-1] - e:+d}")
        log.warning("PROBE msg %d: %s", k, "; ".join(row))


class Mon:
    """Per-cycle monitor of the contract ports (handshakes only)."""

    def __init__(self, dut):
        self.dut = dut
        self.cycle = 0
        self.rx_beats = 0
        self.rx_first = self.rx_last = None
        self.rx_tlast = []
        self.tx_first = []
        self.tx_last = []
        self.aw = []
        self.ar = []                    # cycles of AR handshakes
        self.r = []                     # cycles of R beats
        self.wlast = []
        self._in_tx = False
        # PSN Check's decisions: its commands to Execute (``exe`` handshakes), always sampled
        self.exe = []
        v, r = (_handle(dut, PROBE_PATHS["exe"] + "__valid"),
                _handle(dut, PROBE_PATHS["exe"] + "__ready"))
        self._exe = (v, r) if v is not None and r is not None else None
        self.has_exe = self._exe is not None
        # RESP_BENCH_PROBE=1: also the handshakes inside the core (where a message's cycles go)
        self.probe = {}
        if knob("RESP_BENCH_PROBE"):
            for key, path in PROBE_PATHS.items():
                v, r = (_handle(dut, path + "__valid"), _handle(dut, path + "__ready"))
                if v is not None and r is not None:
                    self.probe[key] = (v, r, [])
            for key, path in PROBE_STROBES.items():
                w = _handle(dut, path)
                if w is not None:
                    self.probe[key] = (w, w, [])
        cocotb.start_soon(self._run())

    def reset(self):
        for _, _, ev in self.probe.values():
            ev.clear()
        self.rx_beats = 0
        self.rx_first = self.rx_last = None
        self.rx_tlast.clear()
        self.tx_first.clear()
        self.exe.clear()

    async def _run(self):
        d = self.dut
        while True:
            await RisingEdge(d.clk)
            await ReadOnly()
            self.cycle += 1
            c = self.cycle
            for v, r, ev in self.probe.values():
                if int(v.value) and int(r.value):
                    ev.append(c)
            if self._exe and int(self._exe[0].value) and int(self._exe[1].value):
                self.exe.append(c)
            if int(d.s_axis_rx_tvalid.value) and int(d.s_axis_rx_tready.value):
                self.rx_beats += 1
                if self.rx_first is None:
                    self.rx_first = c
                self.rx_last = c
                if int(d.s_axis_rx_tlast.value):
                    self.rx_tlast.append(c)
            if int(d.m_axis_tx_tvalid.value) and int(d.m_axis_tx_tready.value):
                if not self._in_tx:
                    self.tx_first.append(c)
                self._in_tx = not int(d.m_axis_tx_tlast.value)
                if not self._in_tx:
                    self.tx_last.append(c)
            if int(d.m_axi_arvalid.value) and int(d.m_axi_arready.value):
                self.ar.append(c)
            if int(d.m_axi_rvalid.value) and int(d.m_axi_rready.value):
                self.r.append(c)
            if int(d.m_axi_awvalid.value) and int(d.m_axi_awready.value):
                self.aw.append(int(d.m_axi_awaddr.value))
            if int(d.m_axi_wvalid.value) and int(d.m_axi_wready.value) and \
                    int(d.m_axi_wlast.value):
                self.wlast.append(c)


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.axil, self.src, self.sink = top_ports(dut)
        self.mem = HostMem(dut, "m_axi", dut.clk, dut.rst, seed=5, backpressure=False,
                           min_latency=0, max_latency=0, interleave=False)
        if read_latency():
            self.mem.set_read_latency(read_latency())
        self.regs = Regs(self.axil)
        self.dev = Device(self.regs, self.mem, base=0x1000_0000, size=1 << 26)
        self.mon = Mon(dut)

    async def start(self):
        d = self.dut
        d.rst.value = 1
        await ClockCycles(d.clk, 4)
        d.rst.value = 0
        await self.dev.open(LOCAL_MAC, LOCAL_IP)
        self.lanes = (await self.regs.read("CAPS0")) & 0xFF
        self.cq = await self.dev.create_cq(0, 12)
        self.buf = self.dev.alloc(8192, 4096)
        await self.dev.reg_mr(0, key=LKEY, addr=self.buf, length=8192, pd=PD,
                              access=Access.LOCAL_WRITE)
        self.qps, self.psn = [], {}
        for k in range(MANY):
            qp = await self.dev.create_qp(2 + k, recv_cq=self.cq, send_cq=self.cq, pd=PD,
                                          dest_qpn=0x20 + k, remote_mac=REMOTE_MAC,
                                          remote_ip=REMOTE_IP, udp_sport=0xC000, pmtu=4096,
                                          rq_psn=100 * k, rq_log2=11)
            await self.dev.connect(qp)
            self.qps.append(qp)
            self.psn[qp.qpn] = 100 * k

    async def post(self, qp, n):
        for _ in range(n):
            await self.dev.post_recv(qp, 0x77, [(self.buf, 4096, LKEY)], doorbell=False)
        await self.regs.doorbell("RQ_DB", qp.qpn, qp.rq_producer)

    def frame(self, qp, payload):
        psn = self.psn[qp.qpn]
        self.psn[qp.qpn] = (psn + 1) & 0xFFFFFF
        return build_frame(Op.SEND_ONLY, payload, psn=psn, dqpn=qp.qpn, ackreq=1)

    async def drain(self, n, timeout=2_000_000):
        """Wait for n CQEs (all SUCCESS) and return them."""
        got, waited = [], 0
        while len(got) < n:
            got += await self.dev.poll_cq(self.cq)
            await ClockCycles(self.dut.clk, 100)
            waited += 100
            assert waited < timeout, f"only {len(got)} of {n} CQEs"
        assert all(c.status == 0 for c in got), [c for c in got if c.status][:3]
        return got

    def acks(self):
        out = []
        while not self.sink.empty():
            d = decode_frame(bytes(self.sink.recv_nowait().tdata))
            assert d["icrc_ok"] and d["aeth"]["syndrome"] == 0x1F, d
            out.append((d["bth"]["dqpn"], d["bth"]["psn"]))
        return out


def _beats(nbytes, lanes):
    return -(-nbytes // lanes)


@cocotb.test()
async def bench(dut):
    tb = TB(dut)
    await tb.start()
    lanes = tb.lanes
    W = lanes * 8
    payloads = knob("RESP_BENCH_PAYLOADS")
    # RESP_BENCH_MIN_RATE "a,b": fail below a beats/cycle on one QP, b on MANY QPs (a regression
    # test)
    min_rate = knob("RESP_BENCH_MIN_RATE") or []
    mon = tb.mon
    # ---- throughput ----
    # RESP_BENCH_LATENCY_ONLY=1: only the idle-core latencies (with RESP_BENCH_PROBE=1: where
    # their cycles go)
    for nq in (() if knob("RESP_BENCH_LATENCY_ONLY") else (1, MANY)):
        qps = tb.qps[:nq]
        for size in payloads:
            data = bytes((7 * i + size) & 0xFF for i in range(size))
            flen = len(build_frame(Op.SEND_ONLY, data))
            n = max(64, min(1000, 6000 // _beats(flen, lanes)))
            n -= n % nq
            for qp in qps:
                await tb.post(qp, n // nq)
            frames = [tb.frame(qps[k % nq], data) for k in range(n)]
            await ClockCycles(dut.clk, 50)
            mon.reset()
            for f in frames:
                tb.src.send_nowait(AxiStreamFrame(f))
            await tb.src.wait()
            await tb.drain(n)
            await ClockCycles(dut.clk, 200)
            acks = tb.acks()
            # coalescing may merge ACKs of one QP; the last PSN of each QP is ACKed
            for qp in qps:
                last = (tb.psn[qp.qpn] - 1) & 0xFFFFFF
                mine = [p for q, p in acks if q == 0x20 + qp.qpn - 2]
                assert mine and mine[-1] == last, (qp.qpn, mine[-3:], last)
            beats = mon.rx_beats
            assert beats == n * _beats(flen, lanes), (beats, n, flen)
            span = mon.rx_last - mon.rx_first + 1
            bpc = beats / span
            dut._log.warning("BENCH W=%d %d QP payload %d: %d frames, %d beats in %d cycles: "
                             "%.3f beats/cycle", W, nq, size, n, beats, span, bpc)
            _probe_report(dut._log, mon, n, _beats(size, lanes))
            qlabel = "one QP" if nq == 1 else f"{nq} QPs"
            record("resp_top", f"rx beats/cycle, back-to-back SEND_ONLY, {qlabel}", bpc,
                   limit=1.0, target=1.0, config={"W": W, "payload": size})
            assert bpc <= 1.0
            if min_rate:
                floor = min_rate[0 if nq == 1 else 1]
                assert bpc >= floor, f"{qlabel}, payload {size}: {bpc:.3f} < {floor} beats/cycle"
    # ---- latency, idle core ----
    qp = tb.qps[0]
    for size in payloads:
        data = bytes((3 * i) & 0xFF for i in range(size))
        await tb.post(qp, 1)
        await ClockCycles(dut.clk, 100)
        mon.reset()
        aw0, w0 = len(mon.aw), len(mon.wlast)
        tb.src.send_nowait(AxiStreamFrame(tb.frame(qp, data)))
        await tb.src.wait()
        (cqe,) = await tb.drain(1)
        await ClockCycles(dut.clk, 50)
        assert cqe.byte_len == size and len(tb.acks()) == 1
        last = mon.rx_tlast[-1]
        ack = mon.tx_first[0] - last
        cq_lo, cq_hi = tb.cq.base, tb.cq.base + 32 * tb.cq.entries
        cqe_w = [c for a, c in zip(mon.aw[aw0:], mon.wlast[w0:]) if cq_lo <= a < cq_hi]
        assert len(cqe_w) == 1, (mon.aw[aw0:], mon.wlast[w0:])
        cql = cqe_w[0] - last
        pb = _beats(size, lanes)
        if mon.probe:
            dut._log.warning("PROBE W=%d payload %d, cycles after the request's last beat: %s",
                             W, size, " ".join(f"{k} {[c - last for c in ev][:4]}"
                                               for k, (_, _, ev) in mon.probe.items() if ev))
        dut._log.warning("BENCH W=%d payload %d: last beat -> ACK first beat %d cycles (floor %d)"
                         ", -> CQE last W beat %d cycles (floor %d)", W, size, ack, max(1, pb),
                         cql, pb + 1 + _beats(32, lanes))
        record("resp_top", "cycles, request last beat to first ACK beat", ack, unit="cycles",
               config={"W": W, "payload": size, "floor": max(1, pb)})
        record("resp_top", "cycles, request last beat to CQE last write beat", cql,
               unit="cycles", config={"W": W, "payload": size,
                                      "floor": pb + 1 + _beats(32, lanes)})
        if size == 0 and mon.has_exe:
            # the request's last beat to PSN Check's decision: its command to Execute (RX
            # Parse's checks and the PSN Check pipeline; the payload does not change it). Not
            # on a ports-only model (test_responder_rate), which has no internal signals.
            assert len(mon.exe) == 1, mon.exe
            record("resp_top", "cycles, request last beat to PSN Check's decision (command "
                   "to Execute)", mon.exe[0] - last, unit="cycles", config={"W": W})
    tb.mem.check()
