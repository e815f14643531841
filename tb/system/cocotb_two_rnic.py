"""Two `rnic` cores on one wire: requester A and responder B (and B→A), through the contract only.

Each side has its own AXI4-Lite driver (``sim.driver``), its own host memory (``sim.hostmem``)
and its own MAC. The wire is this testbench: :class:`Wire` takes each side's ``m_axis_tx``
frames, records them (``build/.../wire.pcap``, decoded by tshark at the end of a test) and plays
them into the other side's ``s_axis_rx``. A wire may be given a *fault model* (the reliability
tests drop, duplicate, reorder and corrupt frames); here it is clean.

Every request frame is checked against the requester model (``sim.models.requester.segment``):
opcode, PSN, SE, AckReq, PadCnt, RETH, IMMDT/IETH and payload bytes, in order per QP; every frame
against interface.md §3 (addresses, TTL 64, DF, UDP source port of the QP, checksum 0, P_Key,
ICRC recomputed). Data are compared byte for byte, with guard regions around every buffer.
"""

import os
import random
import struct
from collections import defaultdict, deque

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import (AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamFrame,
                           AxiStreamSink, AxiStreamSource)

from rnic.opcodes import WcOpcode, WcStatus
from sim.bench import read_latency
from sim.driver.regs import Regs
from sim.driver.verbs import Access, Device, KeyType, SendOp
from sim.hostmem import HostMem
from sim.knobs import knob
from sim.models.requester import segment
from sim.packets import decode_frame
from sim.pcap import check_rroce, write_pcap
from sim.trace import Tracer

MAC = {"a": 0x02_00_00_00_00_0A, "b": 0x02_00_00_00_00_0B}
IP = {"a": 0x0A_00_00_0A, "b": 0x0A_00_00_0B}
SPORT = {"a": 0xC00A, "b": 0xC00B}
PD = 1
PSN0 = {"a": 0xFFFFF0, "b": 0x000100}      # A's first PSN wraps within the first messages


def other(s):
    return "b" if s == "a" else "a"


class Side:
    """One core: driver, host memory, MAC models."""

    def __init__(self, dut, s, *, seed, hostile=False):
        self.name = s
        self.dut = dut
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, f"{s}_s_axil"), dut.clk, dut.rst)
        self.mem = HostMem(dut, f"{s}_m_axi", dut.clk, dut.rst, seed=seed,
                           backpressure=0.2 if hostile else False,
                           max_latency=20 if hostile else 0)
        if read_latency():               # a benchmark with host read latency
            self.mem.set_read_latency(read_latency())
        self.regs = Regs(self.axil)
        self.dev = Device(self.regs, self.mem, base=0x1000_0000 + (0x100_0000 if s == "b" else 0),
                          size=1 << 23)
        self.rx = AxiStreamSource(AxiStreamBus.from_prefix(dut, f"{s}_s_axis_rx"), dut.clk,
                                  dut.rst)
        self.tx = AxiStreamSink(AxiStreamBus.from_prefix(dut, f"{s}_m_axis_tx"), dut.clk,
                                dut.rst)
        if hostile:
            # random back-pressure on the MAC transmit stream and on every AXI4-Lite channel
            # (the host memory's AXI4 channels stall through HostMem's own back-pressure)
            rng = random.Random(seed * 7 + 1)

            def pauses(p):
                while True:
                    yield rng.random() < p
            self.tx.set_pause_generator(pauses(0.3))
            w, r = self.axil.write_if, self.axil.read_if
            for ch in (w.aw_channel, w.w_channel, w.b_channel, r.ar_channel, r.r_channel):
                ch.set_pause_generator(pauses(0.3))
        self.cqes = defaultdict(list)       # cqn -> [Cqe]

    async def poll(self, cq):
        got = await self.dev.poll_cq(cq)
        self.cqes[cq.cqn] += got
        return got


class Wire:
    """Frames A→B and B→A, recorded; ``fault(direction, frame) -> [frames]`` may alter them."""

    def __init__(self, dut, sides, fault=None):
        self.dut, self.sides, self.fault = dut, sides, fault
        self.frames = []                     # (cycle, direction, bytes) as sent by a core
        self.delivered = []                  # (cycle, direction, bytes) as played to a core
        self.gaps = []                       # (cycle, side): tvalid fell inside a frame
        for s in ("a", "b"):
            cocotb.start_soon(self._run(s))
        cocotb.start_soon(self._no_gaps())

    async def _no_gaps(self):
        """The MAC takes no gaps: once a frame's first beat is out, ``tvalid`` stays high until
        its last beat (interface.md §2)."""
        sigs = {s: (getattr(self.dut, f"{s}_m_axis_tx_tvalid"),
                    getattr(self.dut, f"{s}_m_axis_tx_tready"),
                    getattr(self.dut, f"{s}_m_axis_tx_tlast")) for s in ("a", "b")}
        inside = {"a": False, "b": False}
        while True:
            await RisingEdge(self.dut.clk)
            for s, (v, r, last) in sigs.items():
                valid = int(v.value)
                if inside[s] and not valid:
                    self.gaps.append((self.cycle, s))
                if valid and int(r.value):
                    inside[s] = not int(last.value)

    @property
    def cycle(self):
        return int(get_sim_time("ns")) // 10

    async def _run(self, s):
        src, dst = self.sides[s], self.sides[other(s)]
        while True:
            f = await src.tx.recv()
            b = bytes(f.tdata)
            self.frames.append((self.cycle, s, b))
            out = [b] if self.fault is None else self.fault(s, b)
            for o in out:
                self.delivered.append((self.cycle, s, o))
                await dst.rx.send(AxiStreamFrame(o))

    def pcap(self, path):
        write_pcap(path, [(c, b) for c, _, b in self.frames])
        return check_rroce(path, len(self.frames))


def check_frame_fields(d, s, qp_sport):
    """interface.md §3 for a frame sent by side ``s``."""
    o = other(s)
    assert d["icrc_ok"], "ICRC"
    assert d["eth"]["src"] == MAC[s] and d["eth"]["dst"] == MAC[o]
    assert d["ipv4"]["src"] == IP[s] and d["ipv4"]["dst"] == IP[o]
    assert d["ipv4"]["ttl"] == 64 and d["ipv4"]["flags"] == 2
    assert d["udp"]["sport"] == qp_sport and d["udp"]["dport"] == 4791
    assert d["udp"]["checksum"] == 0 and d["bth"]["pkey"] == 0xFFFF and d["bth"]["tver"] == 0


class Pair:
    """Both cores set up, QP pairs connected; helpers to post and to wait for completions."""

    def __init__(self, dut, *, hostile=False, fault=None, pmtu=256, seed=1):
        self.dut = dut
        self.pmtu = pmtu
        self.rng = random.Random(seed)
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        self.s = {s: Side(dut, s, seed=seed * 10 + k, hostile=hostile)
                  for k, s in enumerate(("a", "b"))}
        self.wire = Wire(dut, self.s, fault)
        # the block trace of both cores (sim/trace.py): only with RNIC_TRACE=1
        self.trace = Tracer.attach(dut, cores={"A": "a", "B": "b"})
        self.qps = {}                        # (side, qpn) -> Qp
        self.expect = defaultdict(deque)     # (side, qpn) -> expected request packets
        self.sent_psn = {}                   # (side, qpn) -> next PSN the model expects to send
        self.noack = defaultdict(int)

    async def start(self, qpns=(2,), *, connect=True, **qp_attrs):
        """Reset, both cores opened with CQ 0, the QP pairs created; brought to RTS unless
        ``connect`` is false (then they stay in RESET)."""
        dut = self.dut
        dut.rst.value = 1
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        for s, side in self.s.items():
            await side.dev.open(MAC[s], IP[s])
            side.cq = await side.dev.create_cq(0, 10)
        for qpn in qpns:
            for s, side in self.s.items():
                o = other(s)
                attrs = dict(dest_qpn=qpn, remote_mac=MAC[o], remote_ip=IP[o],
                             udp_sport=SPORT[s], pmtu=self.pmtu, rq_psn=PSN0[o],
                             sq_psn=PSN0[s], access=Access.REMOTE_WRITE, min_rnr_timer=1,
                             timeout=0, retry_cnt=7, rnr_retry=7)
                attrs.update(qp_attrs)
                qp = await side.dev.create_qp(qpn, recv_cq=side.cq, send_cq=side.cq, pd=PD,
                                              sq_log2=8, rq_log2=8, **attrs)
                if connect:
                    await side.dev.connect(qp)
                self.qps[(s, qpn)] = qp
                self.sent_psn[(s, qpn)] = PSN0[s]

    # ---- buffers -----------------------------------------------------------------------------
    def buffer(self, s, n, align=None, guard=32):
        """A buffer of ``n`` bytes at a random alignment, guard bytes on both sides."""
        side = self.s[s]
        off = self.rng.randrange(64) if align is None else align
        base = side.dev.alloc(n + off + 2 * guard + 64, 64)
        addr = base + guard + off
        side.mem.add_guard(addr - guard, guard)
        side.mem.add_guard(addr + n, guard)
        return addr

    async def mr(self, s, slot, addr, n, key, access=Access.LOCAL_WRITE | Access.REMOTE_WRITE,
                 fast_reg=False):
        await self.s[s].dev.reg_mr(slot, key=key, addr=addr, length=max(n, 1), pd=PD,
                                   access=access, fast_reg=fast_reg)

    # ---- posting with the model ----------------------------------------------------------------
    async def post_send(self, s, qpn, wr_id, op, sges, payload_len, *, signaled=True,
                        solicited=False, imm=b"\0\0\0\0", inv_rkey=0, remote_addr=0, rkey=0):
        qp = self.qps[(s, qpn)]
        key = (s, qpn)
        imm_field = struct.pack("<I", inv_rkey) if op == SendOp.SEND_WITH_INV else imm
        pkts, self.noack[key] = segment(int(op), payload_len, self.pmtu,
                                        flags=(1 if signaled else 0) | (2 if solicited else 0),
                                        psn=self.sent_psn[key], imm=imm_field,
                                        raddr=remote_addr, rkey=rkey, noack=self.noack[key])
        self.sent_psn[key] = (self.sent_psn[key] + sum(p["npsn"] for p in pkts)) & 0xFFFFFF
        data = b"".join(self.s[s].dev.read(a, n) for a, n, _ in sges)
        for p in pkts:
            p["data"] = data[p["off"]:p["off"] + p["len"]]
            self.expect[key].append(p)
        await self.s[s].dev.post_send(qp, wr_id, op, sges, signaled=signaled,
                                      solicited=solicited, imm=imm, inv_rkey=inv_rkey,
                                      remote_addr=remote_addr, rkey=rkey)

    def check_wire(self):
        """Every request frame sent equals the model's next packet of its QP; every frame's
        fields follow interface.md §3. Returns the number of request frames checked."""
        n = 0
        for _, s, b in self.wire.frames:
            d = decode_frame(b)
            check_frame_fields(d, s, SPORT[s])
            if 0x0D <= d["bth"]["opcode"] <= 0x11:
                # responses (READ responses: tb/system/cocotb_read_pair.py)
                continue
            qpn = d["bth"]["dqpn"]            # QPNs are equal on both sides here
            exp = self.expect[(s, qpn)]
            assert exp, f"unexpected request frame from {s}: {d['bth']}"
            p = exp.popleft()
            bth = d["bth"]
            got = (bth["opcode"], bth["psn"], bth["se"], bth["ackreq"], bth["padcnt"])
            want = (p["opcode"], p["psn"], p["se"], p["ackreq"], p["padcnt"])
            assert got == want, (s, qpn, got, want)
            if p["reth"] is not None:
                r = d["reth"]
                assert (r["va"], r["rkey"], r["dmalen"]) == \
                    (p["reth"]["va"], p["reth"]["rkey"], p["reth"]["dmalen"]), (r, p["reth"])
            else:
                assert "reth" not in d
            ext = d.get("immdt", d.get("ieth"))
            if p["imm"] is not None:
                assert ext is not None
                raw = b[54 + (16 if "reth" in d else 0):][:4]
                assert raw == p["imm"], (raw.hex(), p["imm"].hex())
            assert d["payload"] == p["data"], (s, qpn, bth["psn"])
            n += 1
        for key, q in self.expect.items():
            assert not q, f"{key}: {len(q)} expected request frames never sent"
        return n

    async def wait_cqes(self, s, n, limit=200_000):
        side = self.s[s]
        for _ in range(limit // 100):
            if len(side.cqes[side.cq.cqn]) >= n:
                break
            await side.poll(side.cq)
            if len(side.cqes[side.cq.cqn]) >= n:
                break
            await ClockCycles(self.dut.clk, 100)
        got = side.cqes[side.cq.cqn]
        assert len(got) >= n, f"side {s}: expected {n} CQEs, got {len(got)}: {got}"
        return got

    async def finish(self, name):
        """Quiet wire, then the final checks: guards untouched, every request frame as the
        model says, the pcap decoded by tshark."""
        await ClockCycles(self.dut.clk, 300)
        for side in self.s.values():
            side.mem.check()
        assert not self.wire.gaps, f"tvalid fell inside a frame: {self.wire.gaps[:5]}"
        n = self.check_wire()
        path = os.path.join(os.getcwd(), f"{name}.pcap")
        self.wire.pcap(path)
        return n


# ---- directed tests ------------------------------------------------------------------------------

async def _one_message(dut, op, length, *, imm=b"\0\0\0\0", pmtu=256, nsge=1, inv=False,
                       title=None):
    p = Pair(dut, pmtu=pmtu)
    await p.start()
    a, b = p.s["a"], p.s["b"]
    # A's source in nsge pieces, one lkey covering all of them
    pieces = [length // nsge + (1 if k < length % nsge else 0) for k in range(nsge)]
    src = p.buffer("a", length + 64 * nsge)
    await p.mr("a", 0, src, length + 64 * nsge, 0x0A000001, access=Access.LOCAL_WRITE)
    data = bytes(p.rng.randrange(256) for _ in range(length))
    sges, pos, addr = [], 0, src
    for n in pieces:
        a.dev.write(addr, data[pos:pos + n])
        sges.append((addr, n, 0x0A000001))
        pos += n
        addr += n + p.rng.randrange(1, 17)
    # B's destination
    dst = p.buffer("b", max(length, 1))
    await p.mr("b", 0, dst, max(length, 1), 0x0B000001)
    inv_key = 0x0B0000FF
    if inv:
        await p.mr("b", 1, dst, max(length, 1), inv_key, fast_reg=True)
    write = op in (SendOp.RDMA_WRITE, SendOp.RDMA_WRITE_WITH_IMM)
    consumes = op != SendOp.RDMA_WRITE
    p.trace.section(title or f"{op.name}, {length} B from {nsge} SGE(s), A to B")
    if consumes:
        await b.dev.post_recv(p.qps[("b", 2)], 0xB0B, [] if write else
                              [(dst, max(length, 1), 0x0B000001)])
    await p.post_send("a", 2, 0xA0A, op, sges, length, imm=imm,
                      inv_rkey=inv_key if inv else 0,
                      remote_addr=dst if write else 0, rkey=0x0B000001 if write else 0)
    (ca,) = await p.wait_cqes("a", 1)
    assert (ca.wr_id, ca.status, ca.qpn) == (0xA0A, WcStatus.SUCCESS, 2), ca
    assert ca.opcode == (WcOpcode.RDMA_WRITE if write else WcOpcode.SEND), ca
    if consumes:
        (cb,) = await p.wait_cqes("b", 1)
        assert (cb.wr_id, cb.status, cb.qpn, cb.byte_len) == \
            (0xB0B, WcStatus.SUCCESS, 2, length), cb
        want_op = WcOpcode.RECV_RDMA_WITH_IMM if op == SendOp.RDMA_WRITE_WITH_IMM \
            else WcOpcode.RECV
        assert cb.opcode == want_op, cb
        if op in (SendOp.SEND_WITH_IMM, SendOp.RDMA_WRITE_WITH_IMM):
            assert cb.flags == 0x02 and cb.imm == bytes(imm), cb
        elif inv:
            assert cb.flags == 0x04 and cb.invalidated_rkey == inv_key, cb
            k = await b.dev.query_key(1)
            assert k["valid"] == 0, k
        else:
            assert cb.flags == 0, cb
    assert b.dev.read(dst, length) == data
    p.trace.end()
    n = await p.finish(f"two_rnic_{op.name.lower()}_{length}")
    assert n == len(segment(int(op), length, pmtu)[0])
    ca_ = await a.regs.counters()
    cb_ = await b.regs.counters()
    # A sent n requests and received their ACKs; B received n and sent ACKs
    assert ca_[12] == n and cb_[0] == n, (ca_, cb_)
    assert cb_[7] == cb_[8] == cb_[9] == cb_[10] == 0, cb_
    assert ca_[0] == cb_[12] and cb_[11] == cb_[12], (ca_, cb_)
    # QUERY_QP on both sides: A's next send PSN and SQ consumer index, B's ePSN/MSN/RQ index
    qa = await a.dev.query_qp(p.qps[("a", 2)])
    qb = await b.dev.query_qp(p.qps[("b", 2)])
    assert qa["state"] == qb["state"] == 3, (qa, qb)
    assert qa["send_psn"] == (PSN0["a"] + n) & 0xFFFFFF and qa["sq_ci"] == 1, qa
    assert qb["epsn"] == (PSN0["a"] + n) & 0xFFFFFF and qb["msn"] == 1, qb
    assert qb["rq_ci"] == (1 if consumes else 0), qb
    return p


@cocotb.test()
async def send_13_steps(dut):
    """The book's 13-step SEND: A posts a send WQE and rings SQ_DB; A fetches it, gathers the
    payload, builds SEND_FIRST/MIDDLE/LAST by path MTU; B places it in its posted receive buffer,
    ACKs, writes its receive CQE; A retires the WQE on the ACK and writes its send CQE."""
    await _one_message(dut, SendOp.SEND, 600, nsge=2,
                       title="The 13-step SEND: 600 B from 2 SGEs, SEND_FIRST/MIDDLE/LAST, A to B")


@cocotb.test()
async def send_with_immediate(dut):
    await _one_message(dut, SendOp.SEND_WITH_IMM, 300, imm=b"\xde\xad\xbe\xef",
                       title="SEND with immediate: 300 B, ImmDt 0xDEADBEEF, A to B")


@cocotb.test()
async def send_with_invalidate(dut):
    """SEND_WITH_INV: B's fast-reg MR named by the IETH is invalid after the message."""
    await _one_message(dut, SendOp.SEND_WITH_INV, 100, inv=True,
                       title="SEND with Invalidate: 100 B, IETH rkey 0x0B0000FF, A to B")


@cocotb.test()
async def rdma_write(dut):
    await _one_message(dut, SendOp.RDMA_WRITE, 700, nsge=2)


@cocotb.test()
async def rdma_write_with_imm(dut):
    await _one_message(dut, SendOp.RDMA_WRITE_WITH_IMM, 256, imm=b"\x01\x02\x03\x04")


@cocotb.test()
async def zero_length_send(dut):
    await _one_message(dut, SendOp.SEND, 0)


@cocotb.test()
async def doorbells_in_reset_ignored(dut):
    """interface.md §4.3: SQ_DB and RQ_DB written while the QP is in RESET are ignored, also
    after the QP reaches RTS. A rings SQ_DB 3 over three valid send WQEs and B rings RQ_DB 2
    over two valid receive WQEs, both in RESET; once both QPs are in RTS nothing is sent, no CQE
    is written and QUERY_QP's consumer indices stay 0. Then software posts from index 0 again:
    A's SEND (SQ_DB 1, a smaller producer index than the ignored one) finds B's RQ empty (RNR
    NAK, counter 9) until B posts a receive (RQ_DB 1); the message completes once on each side,
    with the WQEs of those doorbells, and nothing else is sent."""
    p = Pair(dut)
    await p.start(connect=False)
    a, b = p.s["a"], p.s["b"]
    qa, qb = p.qps[("a", 2)], p.qps[("b", 2)]
    n = 200
    src = p.buffer("a", n + 64)
    await p.mr("a", 0, src, n + 64, 0x0A000001, access=Access.LOCAL_WRITE)
    data = bytes(p.rng.randrange(256) for _ in range(n))
    a.dev.write(src, data)
    dst = p.buffer("b", n)
    await p.mr("b", 0, dst, n, 0x0B000001)
    stale = b.dev.alloc(n + 64, 64)                   # where B's ignored receives point
    await p.mr("b", 1, stale, n + 64, 0x0B000002)
    # the doorbells in RESET, over WQEs that would run if they were kept
    for k in range(3):
        await a.dev.post_send(qa, 0xDEAD00 + k, SendOp.SEND, [(src, n, 0x0A000001)],
                              doorbell=k == 2)
    for k in range(2):
        await b.dev.post_recv(qb, 0xDEAD10 + k, [(stale, n + 64, 0x0B000002)], doorbell=k == 1)
    qa.sq_producer = qb.rq_producer = 0              # ignored: the rings are empty
    for side, qp in ((b, qb), (a, qa)):
        await side.dev.connect(qp)
    await ClockCycles(dut.clk, 3000)
    assert not p.wire.frames, f"frames sent for doorbells written in RESET: {len(p.wire.frames)}"
    assert await a.poll(a.cq) == [] and await b.poll(b.cq) == []
    sa, sb = await a.dev.query_qp(qa), await b.dev.query_qp(qb)
    assert (sa["state"], sa["sq_ci"], sa["send_psn"]) == (3, 0, PSN0["a"]), sa
    assert (sb["state"], sb["rq_ci"], sb["epsn"], sb["msn"]) == (3, 0, PSN0["a"], 0), sb
    assert (await a.regs.counters())[12] == 0 and (await b.regs.counters())[12] == 0
    # normal doorbells from index 0: A's SEND first (B has no receive posted: RNR NAK)
    await a.dev.post_send(qa, 0xA0A, SendOp.SEND, [(src, n, 0x0A000001)])
    for _ in range(100):
        if (await b.regs.counter(9)) >= 1:
            break
        await ClockCycles(dut.clk, 100)
    assert (await b.regs.counter(9)) >= 1, "B did not answer RNR: it consumed a receive WQE"
    assert await b.poll(b.cq) == []
    await b.dev.post_recv(qb, 0xB0B, [(dst, n, 0x0B000001)])
    (ca,) = await p.wait_cqes("a", 1)
    (cb,) = await p.wait_cqes("b", 1)
    assert (ca.wr_id, ca.status, ca.opcode) == (0xA0A, WcStatus.SUCCESS, WcOpcode.SEND), ca
    assert (cb.wr_id, cb.status, cb.opcode, cb.byte_len) == \
        (0xB0B, WcStatus.SUCCESS, WcOpcode.RECV, n), cb
    assert b.dev.read(dst, n) == data
    await ClockCycles(dut.clk, 3000)
    assert await a.poll(a.cq) == [] and await b.poll(b.cq) == []
    assert len(p.s["a"].cqes[0]) == len(p.s["b"].cqes[0]) == 1
    # on the wire: only the one SEND (retried after the RNR NAKs) and B's answers
    reqs = [decode_frame(f) for _, s, f in p.wire.frames if s == "a"]
    assert reqs and all((d["bth"]["opcode"], d["bth"]["psn"], d["payload"])
                        == (0x04, PSN0["a"], data) for d in reqs), \
        [(d["bth"]["opcode"], d["bth"]["psn"]) for d in reqs]
    assert all(decode_frame(f)["bth"]["opcode"] == 0x11 for _, s, f in p.wire.frames
               if s == "b")
    for _, s, f in p.wire.frames:
        check_frame_fields(decode_frame(f), s, SPORT[s])
    sa, sb = await a.dev.query_qp(qa), await b.dev.query_qp(qb)
    assert (sa["sq_ci"], sa["send_psn"]) == (1, (PSN0["a"] + 1) & 0xFFFFFF), sa
    assert (sb["rq_ci"], sb["epsn"], sb["msn"]) == (1, (PSN0["a"] + 1) & 0xFFFFFF, 1), sb
    for side in p.s.values():
        side.mem.check()


# ---- random traffic ------------------------------------------------------------------------------

OPS = [SendOp.SEND, SendOp.SEND_WITH_IMM, SendOp.RDMA_WRITE, SendOp.RDMA_WRITE_WITH_IMM]


class _Traffic:
    """The state of :func:`random_traffic`: one big region per side (gathers, receives and
    remote writes), taken from in turn, and the completions each side must see, in order."""

    def __init__(self, p):
        self.p, self.rng = p, p.rng
        self.region = {}
        self.want_cqe = {"a": [], "b": []}

    async def regions(self):
        """One big lkey per side for gathers, one per side for receives / remote writes."""
        for k, s in enumerate(("a", "b")):
            size = 1 << 20
            base = self.p.s[s].dev.alloc(size, 4096)
            self.region[s] = [base, base, size]
            await self.p.mr(s, 0, base, size, 0x100 + k)

    def take(self, s, n):
        r = self.region[s]
        addr = r[1] + 32 + self.rng.randrange(64)
        r[1] = addr + n + 32
        return addr

    def recycle(self):
        """Reuse the regions once half is used."""
        for s in ("a", "b"):
            r = self.region[s]
            if r[1] - r[0] > r[2] // 2:
                r[1] = r[0]
                self.p.s[s].mem.guards.clear()

    def destinations(self, o, n, write, key_o):
        """(receive SGEs, [(address, first byte, end byte)]) of a message of ``n`` bytes to
        side ``o``: a WRITE's one range, or 1-3 receive SGEs covering at least ``n`` bytes."""
        rng = self.rng
        if write:
            dst = self.take(o, max(n, 1))
            return None, [(dst, 0, n)]
        k = rng.choice([1, 2, 3]) if n >= 3 else 1
        bounds = [0] + (sorted(rng.sample(range(1, n), k - 1)) if k > 1 else []) + [n]
        rsges, rdst = [], []
        for lo, hi in zip(bounds, bounds[1:]):
            room = hi - lo + (rng.randrange(4) if hi == n else 0)
            a_ = self.take(o, max(room, 1))
            rsges.append((a_, max(room, 1), key_o))
            rdst.append((a_, lo, hi))
        return rsges, rdst

    async def message(self, s, qpn, max_len, signal):
        """Post one random message from side ``s`` on ``qpn`` (and its receive WQE); ``signal``
        forces a signaled WQE. Returns (receiving side, data, destination ranges)."""
        p, rng = self.p, self.rng
        o = other(s)
        op = rng.choice(OPS)
        n = rng.choice([0, 1, 3, rng.randrange(max_len + 1), rng.randrange(max_len + 1)])
        key_s, key_o = 0x100 + "ab".index(s), 0x100 + "ab".index(o)
        data = bytes(rng.randrange(256) for _ in range(n))
        # gather from 1-2 SGEs
        nsge = 1 if n < 2 else rng.choice([1, 2])
        cut = rng.randrange(1, n) if nsge == 2 else n
        sges = []
        for lo, hi in ((0, cut), (cut, n))[:nsge]:
            addr = self.take(s, hi - lo)
            p.s[s].dev.write(addr, data[lo:hi])
            sges.append((addr, hi - lo, key_s))
        write = op in (SendOp.RDMA_WRITE, SendOp.RDMA_WRITE_WITH_IMM)
        imm = bytes(rng.randrange(256) for _ in range(4))
        rsges, rdst = self.destinations(o, n, write, key_o)
        for a_, lo, hi in rdst:
            p.s[o].mem.add_guard(a_ - 16, 16)
            p.s[o].mem.add_guard(a_ + hi - lo, 16)
        if op != SendOp.RDMA_WRITE:
            wr = rng.getrandbits(48)
            await p.s[o].dev.post_recv(p.qps[(o, qpn)], wr, [] if write else rsges)
            self.want_cqe[o].append((wr, n, op, imm))
        signaled = rng.random() < 0.7 or signal
        wr_s = rng.getrandbits(48)
        await p.post_send(s, qpn, wr_s, op, sges, n, signaled=signaled, imm=imm,
                          remote_addr=rdst[0][0] if write else 0,
                          rkey=key_o if write else 0)
        if signaled:
            self.want_cqe[s].append((wr_s, n, op, None))
        return o, data, rdst

    def check_completions(self):
        """Every side's completions, in order, once."""
        p = self.p
        for s in ("a", "b"):
            got = p.s[s].cqes[p.s[s].cq.cqn]
            want = self.want_cqe[s]
            assert len(got) == len(want), (s, len(got), len(want))
            recv = [c for c in got if c.opcode >= 128]
            send = [c for c in got if c.opcode < 128]
            wrecv = [w for w in want if w[3] is not None]
            wsend = [w for w in want if w[3] is None]
            assert [c.wr_id for c in recv] == [w[0] for w in wrecv], s
            assert [c.wr_id for c in send] == [w[0] for w in wsend], s
            for c, (wr, n, op, imm) in zip(recv, wrecv):
                assert c.status == WcStatus.SUCCESS and c.byte_len == n, c
                if op in (SendOp.SEND_WITH_IMM, SendOp.RDMA_WRITE_WITH_IMM):
                    assert c.flags == 0x02 and c.imm == imm, c
                assert c.opcode == (WcOpcode.RECV_RDMA_WITH_IMM
                                    if op == SendOp.RDMA_WRITE_WITH_IMM else WcOpcode.RECV), c
            for c, (wr, n, op, _) in zip(send, wsend):
                assert c.status == WcStatus.SUCCESS, c
                assert c.opcode == (WcOpcode.RDMA_WRITE if op in (SendOp.RDMA_WRITE,
                                                                  SendOp.RDMA_WRITE_WITH_IMM)
                                    else WcOpcode.SEND), c


async def random_traffic(p, count, *, max_len, qpns=(2, 3), batch=12):
    """``count`` random messages, A→B on the first QP pair and B→A on the second, in batches:
    every byte placed, every signaled WQE completed once, every receive WQE once, in order."""
    rng = p.rng
    dirs = [("a", qpns[0]), ("b", qpns[-1])]
    tr = _Traffic(p)
    await tr.regions()
    done = 0
    while done < count:
        k_batch = min(batch, count - done)
        tr.recycle()
        plan = [rng.choice(dirs) for _ in range(k_batch)]
        last = {d: i for i, d in enumerate(plan)}
        pending = []
        for i, (s, qpn) in enumerate(plan):
            pending.append(await tr.message(s, qpn, max_len, last[(s, qpn)] == i))
        # the batch's last WQE per QP is signaled: its CQE means all of the batch arrived
        for s in ("a", "b"):
            await p.wait_cqes(s, len(tr.want_cqe[s]))
        await ClockCycles(p.dut.clk, 100)       # a plain WRITE's data may still be in flight
        for o, data, rdst in pending:
            for a_, lo, hi in rdst:
                assert p.s[o].dev.read(a_, hi - lo) == data[lo:hi], (o, hex(a_), lo, hi)
        done += len(pending)
        print(f"random_traffic: {done}/{count} messages, cycle {p.wire.cycle}", flush=True)
    tr.check_completions()


@cocotb.test()
async def random_messages(dut):
    """Random SEND/SEND_WITH_IMM/WRITE/WRITE_WITH_IMM both ways on two QP pairs: 0 to several
    PMTUs, 1-2 gather SGEs and 1-3 scatter SGEs at random alignments, byte-exact, every
    completion once and in order, every request frame as the model says, the pcap clean."""
    count = knob("PAIR_MESSAGES")
    max_len = knob("PAIR_MAX_LENGTH")
    p = Pair(dut, hostile=knob("PAIR_HOSTILE"),
             seed=knob("PAIR_SEED"))
    await p.start(qpns=(2, 3))
    await random_traffic(p, count, max_len=max_len)
    await p.finish("two_rnic_random")


# ---- benchmark: goodput A -> B -------------------------------------------------------------------

def wire_beats(length, pmtu, width):
    """Beats on the wire for one SEND of ``length`` bytes (headers, pad and ICRC included)."""
    lanes, beats, off = width // 8, 0, 0
    while True:
        n = min(length - off, pmtu)
        frame = 14 + 20 + 8 + 12 + n + ((-n) & 3) + 4
        beats += -(-max(frame, 60) // lanes)
        off += n
        if off >= length:
            return beats


@cocotb.test()
async def goodput(dut):
    """Goodput A→B in payload bytes per cycle for back-to-back SENDs of 64 B … 1 MiB (path MTU
    4096, zero-wait host memories), beside the wire's limit: the payload share of the beats the
    frames need. Cycles from the first request frame's first beat to the last one's end."""
    from sim.bench import record
    width = len(dut.a_m_axis_tx_tdata)
    p = Pair(dut, pmtu=4096)
    await p.start()
    a, b = p.s["a"], p.s["b"]
    sizes = knob("PAIR_GOODPUT_SIZES")
    budget = knob("PAIR_GOODPUT_BYTES")     # bytes per size
    src = a.dev.alloc(1 << 20, 4096)
    dst = b.dev.alloc(1 << 20, 4096)
    await p.mr("a", 0, src, 1 << 20, 0x0A)
    await p.mr("b", 0, dst, 1 << 20, 0x0B)
    a.dev.write(src, bytes(k & 0xFF for k in range(1 << 20)))
    # where the time goes: cycles B's rx refused a beat (tvalid & ~tready), A's tx beats
    stalls = {"b_rx_stall": 0, "a_tx_beats": 0}

    async def probe():
        rv, rr = dut.b_s_axis_rx_tvalid, dut.b_s_axis_rx_tready
        tv, tr = dut.a_m_axis_tx_tvalid, dut.a_m_axis_tx_tready
        while True:
            await RisingEdge(dut.clk)
            if int(rv.value) and not int(rr.value):
                stalls["b_rx_stall"] += 1
            if int(tv.value) and int(tr.value):
                stalls["a_tx_beats"] += 1
    cocotb.start_soon(probe())
    for size in sizes:
        count = max(4, min(64, budget // size))
        if size >= 1 << 20:
            count = 2
        for k in range(count):
            await b.dev.post_recv(p.qps[("b", 2)], k, [(dst, size, 0x0B)])
        start_frames = len(p.wire.frames)
        before = len(a.cqes[a.cq.cqn])
        for k in range(count):
            await a.dev.post_send(p.qps[("a", 2)], k, SendOp.SEND, [(src, size, 0x0A)],
                                  signaled=(k == count - 1), doorbell=False)
        await a.regs.doorbell("SQ_DB", 2, p.qps[("a", 2)].sq_producer)
        t_db = p.wire.cycle
        s0 = dict(stalls)
        await p.wait_cqes("a", before + 1, limit=50_000_000)
        reqs = [(c, bb) for c, s_, bb in p.wire.frames[start_frames:] if s_ == "a"]
        lanes = width // 8
        first = reqs[0][0] - (-(-len(reqs[0][1]) // lanes))
        last = reqs[-1][0]
        cycles = last - first
        good = size * count / cycles
        limit = size / wire_beats(size, 4096, width)
        cocotb.log.info(f"goodput {size} B x{count}: {cycles} cycles, {good:.2f} B/cycle "
                      f"(limit {size / wire_beats(size, 4096, width):.2f}); A tx beats "
                      f"{stalls['a_tx_beats'] - s0['a_tx_beats']}, B rx stalled "
                      f"{stalls['b_rx_stall'] - s0['b_rx_stall']} cycles")
        record("requester+responder", f"goodput A->B, SEND {size} B", good,
               limit=round(limit, 3), unit="B/cycle", config={"W": width, "PMTU": 4096})
        if size == sizes[0]:
            record("requester", "doorbell -> first request beat on the wire",
                   first - t_db, unit="cycles", config={"W": width})
    p.expect.clear()
