"""cocotb bench for the requester's send half (tb/blocks/test_requester.py builds the harness).

Send WQEs are written into the hostile host memory of sim/hostmem.py, doorbells rung, the QP
context served from a Python dict; frames are captured from ``tx`` (with back-pressure, checking
that ``tvalid`` never drops inside a frame), decoded with scapy (which recomputes the ICRC
independently) and compared with the packets of sim/models/requester.py and with the source
buffers byte for byte.
"""
import itertools
import logging
import random
import struct

import cocotb
import cocotb.utils
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamSink
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from rnic import wire
from rnic.ifaces import CmdOp, cmd_layout, resp_layout
from tb.blocks.cocotb_mailbox import ArgRegs
from rnic.req import ack_layout, cpl_layout, qp_set_layout, req_ctx_layout
from rnic.control.qp_args import qp_arg_layout
from rnic.req.requester import doorbell_layout
from sim.hostmem import HostMem
from sim.knobs import knob
from sim.models import requester as model
from sim.models.keys import set_args
from sim.wrap import pack, unpack
from tb.blocks.cocotb_axi_master import Sink, Source

W = knob("REQUESTER_WIDTH")
WINDOW = knob("REQUESTER_WINDOW_TEST")      # the 129-packet window test
LMAC, LIP = 0x020000000001, 0x0A000001
PD = 5
KEY, KEY_OTHER_PD = 0x12345601, 0x22222202
IOVA, BUS, MRLEN = 0x7000_0000, 0x0010_0000, 0x10000
PMTU_CODE = 1
PMTU = 256
SQ_LOG = 3


def ctx_for(qpn, state, timeout=0, retry_cnt=7, rnr_retry=7):
    return dict(state=state, pmtu=PMTU_CODE, dest_qpn=0x100 + qpn, pd=PD,
                sq_base=0x8000 + 0x1000 * qpn, sq_log=SQ_LOG, rmac=0x020000000002 + qpn,
                rip=0x0A000002, sport=0xC000 + qpn, timeout=timeout, retry_cnt=retry_cnt,
                rnr_retry=rnr_retry)


class TB:
    def __init__(self, dut):
        self.key_args = None            # the Key Cache's ARG0..15 (tb/blocks/cocotb_mailbox.py)
        self.dut = dut
        self.rng = random.Random(7)
        self.mem = HostMem(dut, "m_axi", dut.clk, dut.rst, seed=3, max_latency=12,
                           backpressure=True)
        self.tx = AxiStreamSink(AxiStreamBus.from_prefix(dut, "tx"), dut.clk, dut.rst)
        self.tx.log.setLevel(logging.WARNING)       # no per-frame dumps at INFO
        self.tx.set_pause_generator(self._pause(0.3))
        self.ctx = {}
        self.db = Source(dut, "sq_db", doorbell_layout, dut.clk)
        self.qpset = Source(dut, "qp_set", qp_set_layout, dut.clk)
        self.ctx_resp = Source(dut, "ctx_resp", req_ctx_layout, dut.clk)
        self.qp_arg = Source(dut, "qp_arg", qp_arg_layout, dut.clk)
        self.ctx_req = Sink(dut, "ctx_req", 24, dut.clk)
        self.ack = Source(dut, "ack", ack_layout, dut.clk)
        self.sent = {}          # qpn -> [(wr_id, op, flags, length, last_psn)] not yet retired
        self.cpl = Sink(dut, "cpl", cpl_layout, dut.clk)
        self.fault = Sink(dut, "fault", 24, dut.clk)
        self.prod = {}
        self.psn = {}
        self.noack = {}
        self.gap_errors = 0
        self.opcode_checks = 0  # packets offered whose registered opcode was checked
        self.frames = 0
        self.frame_ends = []
        self.frame_starts = []
        self.ctx_delay = 0      # cycles before the context's answer (beyond the least)

    def _pause(self, p):
        rng = random.Random(11)
        while True:
            yield rng.random() < p

    async def serve_ctx(self):
        served = 0
        while True:
            await FallingEdge(self.dut.clk)
            while served < len(self.ctx_req.items):
                for _ in range(self.ctx_delay):
                    await FallingEdge(self.dut.clk)
                c = self.ctx[self.ctx_req.items[served]]
                self.ctx_resp.put({k: c.get(k, 0) for k, _ in req_ctx_layout})
                served += 1

    async def watch_gaps(self):
        dut, in_frame = self.dut, False
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            v, r = int(dut.tx_tvalid.value), int(dut.tx_tready.value)
            if in_frame and not v:
                self.gap_errors += 1
            if v and r:
                if not in_frame:
                    self.frame_starts.append(cocotb.utils.get_sim_time("ns") // 4)
                in_frame = not int(dut.tx_tlast.value)
                if not in_frame:
                    self.frame_ends.append(cocotb.utils.get_sim_time("ns") // 4)

    async def watch_opcode(self):
        """The engine's packet opcode, ``fits`` and ``pay`` are registers loaded in the cycle
        before from ``sent``, ``resid``, ``wop`` and ``pmtu_b`` (rtl/rnic/req/requester.py): they
        hold only because PKT never follows a write of those. In every cycle a packet is
        offered they must equal what the requester's registers give in that cycle; checked
        through the generated Verilog's hierarchy, every cycle of every test of this bench."""
        dut = self.dut
        if cocotb.SIM_NAME.lower().startswith("verilator"):
            return                      # (Verilator hides the hierarchy; Icarus shows it)
        req = dut.dut.req
        while True:
            await FallingEdge(dut.clk)
            if not int(req.pkt__valid.value):
                continue
            wop, sent, resid, pmtu_b = (int(req.wop.value), int(req.sent.value),
                                        int(req.resid.value), int(req.pmtu_b.value))
            fits = resid <= pmtu_b
            # the opcodes from the Python model's table (a READ is one request, 0x0C)
            first, mid, last, only = ({**model._OPS, model.RDMA_READ: (0x0C,) * 4})[wop]
            want = (only if fits else first) if sent == 0 else (last if fits else mid)
            # (a READ request's ``pay`` is 0: it carries no payload)
            pay = 0 if wop == model.RDMA_READ else resid if fits else pmtu_b
            got = (int(req.opcode.value), int(req.fits.value), int(req.pay.value))
            self.opcode_checks += 1
            assert got == (want, fits, pay), (
                f"packet offered with registered (opcode, fits, pay) {got}, the registers "
                f"now give {(want, fits, pay)} (wop {wop}, sent {sent}, "
                f"resid {resid}, pmtu_b {pmtu_b}): PKT followed a write of them")

    async def command(self, op, index, args):
        dut = self.dut
        await FallingEdge(dut.clk)
        if self.key_args is None:
            self.key_args = ArgRegs(dut, "key__", dut.clk)
        dut.key__cmd_payload.value = pack(cmd_layout, dict(opcode=op, index=index))
        dut.key__cmd_valid.value = 1
        dut.key__resp_ready.value = 1
        while True:
            await ReadOnly()
            taken = int(dut.key__cmd_ready.value)
            if taken:
                self.key_args.load(args)
            await FallingEdge(dut.clk)
            if taken:
                break
        dut.key__cmd_valid.value = 0
        while True:
            await ReadOnly()
            if int(dut.key__resp_valid.value):
                res = unpack(resp_layout, int(dut.key__resp_payload.value))["result"]
                await FallingEdge(dut.clk)
                return res
            await FallingEdge(dut.clk)

    def set_qp(self, qpn, state, **cfg):
        self.ctx[qpn] = ctx_for(qpn, state, **cfg)
        sq_psn = 0xFFFFF0 + qpn             # wraps through 0 during the test
        self.qpset.put(dict(qpn=qpn, state=state, sq_psn=sq_psn))
        c = self.ctx[qpn]
        # the builder's path table, as SET_QP's ARG1 and ARG11..14 write it
        for arg, word in ((1, c["dest_qpn"]), (11, c["rmac"] & 0xFFFFFFFF), (12, c["rmac"] >> 32),
                          (13, c["rip"]), (14, c["sport"])):
            self.qp_arg.put(dict(qpn=qpn, arg=arg, data=word, all=0))
        if state == 3:
            self.psn[qpn] = sq_psn
            self.noack[qpn] = 0
            self.sent[qpn] = []

    def acked(self, qpn, psn):
        """Completions a positive ACK of ``psn`` must produce (and retire them)."""
        out, keep = [], []
        for w in self.sent[qpn]:
            if ((psn - w[4]) & 0xFFFFFF) < 0x800000 and not keep:
                wr_id, op, flags, length, _ = w
                if flags & model.SIGNALED:
                    out.append(dict(qpn=qpn, wr_id=wr_id, status=0, opcode=int(op >= 3),
                                    flags=2 if op in (1, 4) else 0, byte_len=length))
            else:
                keep.append(w)
        self.sent[qpn] = keep
        return out

    async def completions(self, n, label):
        for _ in range(20000):
            if len(self.cpl.items) >= n:
                break
            await RisingEdge(self.dut.clk)
        await ClockCycles(self.dut.clk, 20)
        got = [{k: c[k] for k in ("qpn", "wr_id", "status", "opcode", "flags", "byte_len")}
               for c in self.cpl.items]
        self.cpl.items.clear()
        return got

    def post(self, qpn, wqe):
        i = self.prod.get(qpn, 0)
        self.mem.write(self.ctx[qpn]["sq_base"] + 64 * (i % (1 << SQ_LOG)), wqe)
        self.prod[qpn] = (i + 1) & 0xFFFF

    def ring(self, qpn):
        self.db.put(dict(number=qpn, value=self.prod[qpn]))

    def packets(self, qpn, wr_id, opcode, payload, flags, imm, raddr, rkey):
        pkts, self.noack[qpn] = model.segment(opcode, len(payload), PMTU, flags=flags,
                                              psn=self.psn[qpn], imm=imm, raddr=raddr,
                                              rkey=rkey, noack=self.noack[qpn])
        self.psn[qpn] = (self.psn[qpn] + len(pkts)) & 0xFFFFFF
        self.sent[qpn].append((wr_id, opcode, flags, len(payload), pkts[-1]["psn"]))
        return pkts

    async def expect_frames(self, qpn, wr_id, opcode, payload, flags, imm, raddr, rkey, label):
        pkts = self.packets(qpn, wr_id, opcode, payload, flags, imm, raddr, rkey)
        await self.check_frames(qpn, pkts, payload, label)
        return pkts

    async def check_frames(self, qpn, pkts, payload, label):
        for n, p in enumerate(pkts):
            f = await with_timeout(self.tx.recv(), 400, "us")
            self.check_frame(qpn, p, payload, bytes(f.tdata), f"{label} pkt {n}")

    def check_frame(self, qpn, p, payload, frame, where):
        """``frame`` is packet ``p`` (sim/models/requester.py) of ``payload`` sent by ``qpn``."""
        ctx = self.ctx[qpn]
        assert len(frame) >= 60, where
        e = Ether(frame)
        ip, udp, bth = e[IP], e[UDP], e[BTH]
        assert e.dst == ":".join(f"{b:02x}" for b in ctx["rmac"].to_bytes(6, "big")), where
        assert e.src == "02:00:00:00:00:01" and e.type == 0x0800, where
        assert (ip.src, ip.dst) == ("10.0.0.1", "10.0.0.2"), where
        assert ip.ttl == 64 and ip.flags == 2 and ip.ihl == 5 and ip.proto == 17, where
        trimmed = frame[:14 + ip.len]
        assert frame[14 + ip.len:] == bytes(len(frame) - 14 - ip.len), where
        # header checksum and ICRC recomputed by scapy
        chk = Ether(trimmed)
        del chk[IP].chksum
        chk[BTH].icrc = None
        assert bytes(chk) == trimmed, f"{where}: IP checksum or ICRC differs from scapy"
        assert udp.sport == ctx["sport"] and udp.dport == 4791 and udp.chksum == 0, where
        assert udp.len == ip.len - 20, where
        got = dict(opcode=bth.opcode, psn=bth.psn, se=bth.solicited, ackreq=bth.ackreq,
                   padcnt=bth.padcount)
        exp = {k: p[k] for k in got}
        assert got == exp, f"{where}: {got} != {exp}"
        assert bth.pkey == 0xFFFF and bth.dqpn == ctx["dest_qpn"] and bth.version == 0
        assert (bth.fecn, bth.becn, bth.migreq, bth.resv6, bth.resv7) == (0, 0, 0, 0, 0)
        rest = trimmed[14 + 20 + 8 + 12:-4]
        if p["reth"] is not None:
            assert wire.RETH.unpack(rest) == p["reth"], where
            rest = rest[16:]
        if p["imm"] is not None:
            assert rest[:4] == p["imm"], where
            rest = rest[4:]
        assert len(rest) == p["len"] + p["padcnt"], where
        assert rest[:p["len"]] == payload[p["off"]:p["off"] + p["len"]], f"{where}: payload"
        assert rest[p["len"]:] == bytes(p["padcnt"]), where
        self.frames += 1


async def start(dut, us_cycles=1):
    """Clock, reset, the bench's helpers, two keys, the source buffer in host memory."""
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    dut.rst.value = 1
    dut.local_mac.value = LMAC
    dut.local_ip.value = LIP
    dut.us_cycles.value = us_cycles
    dut.key__cmd_valid.value = 0
    dut.key__resp_ready.value = 1
    tb = TB(dut)
    await ClockCycles(dut.clk, 5)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 5)
    cocotb.start_soon(tb.serve_ctx())
    cocotb.start_soon(tb.watch_gaps())
    cocotb.start_soon(tb.watch_opcode())
    assert await tb.command(CmdOp.SET_KEY, 0,
                            set_args(KEY, IOVA, MRLEN, BUS, PD, 0x01, 0, True)) == 0
    assert await tb.command(CmdOp.SET_KEY, 1,
                            set_args(KEY_OTHER_PD, IOVA + MRLEN, MRLEN, BUS + MRLEN, 9, 0x01, 0,
                                     True)) == 0
    src = tb.rng.randbytes(MRLEN)
    tb.mem.write(BUS, src)
    return tb, src


def sges_for(src, length, nsge, base_off):
    """SGEs (va, len, lkey) over the MR and the message they gather."""
    va = IOVA + base_off
    if nsge == 1:
        return [(va, length, KEY)], src[base_off:base_off + length]
    a = length // 3
    va2 = IOVA + base_off + 1500 + 3          # a second, unrelated and odd place
    msg = src[base_off:base_off + a] + src[base_off + 1503:base_off + 1503 + length - a]
    return [(va, a, KEY), (va2, length - a, KEY)], msg


async def _frames_rtr(tb, src, qp):
    """A doorbell recorded in RTR runs on RTS; old ACK, NAK, ACK."""
    dut = tb.dut
    # --- doorbell recorded in RTR, executed on RTS ---------------------------------------
    tb.set_qp(qp, 2)
    await ClockCycles(dut.clk, 5)
    tb.post(qp, model.wqe_bytes(0x11, model.SEND, model.SIGNALED, [(IOVA + 7, 5, KEY)]))
    tb.ring(qp)
    await ClockCycles(dut.clk, 200)
    assert tb.tx.empty(), "a frame left in RTR"
    tb.set_qp(qp, 3)
    p = await tb.expect_frames(qp, 0x11, model.SEND, src[7:12], model.SIGNALED, b"\0" * 4, 0, 0,
                               "rtr")
    tb.ack.put(dict(qpn=qp, psn=(p[0]["psn"] - 1) & 0xFFFFFF, syndrome=0x1F))   # older: nothing
    await ClockCycles(dut.clk, 200)
    assert await tb.completions(0, "old ack") == []
    tb.ack.put(dict(qpn=qp, psn=p[0]["psn"], syndrome=0x60))        # sequence NAK: sent again
    await tb.check_frames(qp, p, src[7:12], "nak resend")
    tb.ack.put(dict(qpn=qp, psn=p[0]["psn"], syndrome=0x1F))
    assert await tb.completions(1, "ack") == tb.acked(qp, p[0]["psn"])


async def _frames_segmentation(tb, src, qp):
    """Every length around the PMTU, one and two SGEs, in batches; returns the cases."""
    rng = tb.rng
    # --- segmentation sweep -------------------------------------------------------------------
    lengths = [0, 1, PMTU - 1, PMTU, PMTU + 1, 3 * PMTU + 5]
    cases = []
    for i, length in enumerate(lengths):
        for nsge in (1, 2):
            if nsge == 2 and length < 2:
                continue
            op = (i + nsge) % 5
            flags = rng.choice([0, 1, 2, 3])
            cases.append((length, nsge, op, flags, rng.randrange(1, 64) * 2 + 1))
    batch, nbatch = [], 0
    for c in cases:
        length, nsge, op, flags, off = c
        sges, msg = sges_for(src, length, nsge, off) if length else ([], b"")
        imm = bytes(rng.randrange(256) for _ in range(4))
        raddr, rkey = rng.randrange(1 << 64), rng.randrange(1 << 32)
        wr_id = rng.randrange(1 << 64)
        tb.post(qp, model.wqe_bytes(wr_id, op, flags, sges, imm=imm, raddr=raddr, rkey=rkey))
        batch.append((wr_id, op, msg, flags, imm, raddr, rkey,
                      f"len {length} sge {nsge} op {op}"))
        if len(batch) == 5 or c is cases[-1]:
            tb.ring(qp)
            lasts = []
            for b in batch:
                lasts.append((await tb.expect_frames(qp, *b))[-1]["psn"])
            # odd batches: one coalesced ACK; even: one ACK per WQE
            exp = []
            for psn in (lasts[-1:] if nbatch % 2 else lasts):
                tb.ack.put(dict(qpn=qp, psn=psn, syndrome=0x1F))
                exp += tb.acked(qp, psn)
            assert await tb.completions(len(exp), "batch") == exp, f"batch {nbatch}"
            batch, nbatch = [], nbatch + 1
    return cases


async def _frames_errors(tb, qp):
    """WQEs in error: no frame, an error completion, WR_FLUSH_ERR for the rest."""
    dut = tb.dut
    # --- errors: no frame, an error completion, then WR_FLUSH_ERR for the rest ---------------
    errs = [
        (3, model.wqe_bytes(0x33, model.SEND, 0, [(IOVA, 64, 0xBAD0BAD0)]), 4),      # unknown
        (4, model.wqe_bytes(0x44, model.SEND, 0, [(IOVA, 64, KEY_OTHER_PD)]), 4),    # PD
        (5, model.wqe_bytes(0x55, model.SEND, 0, [(IOVA, 64, KEY), (IOVA + MRLEN - 8, 64, KEY)]),
         4),                                                                          # range
        (6, model.wqe_bytes(0x66, 7, 0, [(IOVA, 64, KEY)]), 2),                      # opcode
        (7, model.wqe_bytes(0x77, model.SEND, 0, [(IOVA, 64, KEY)], num_sge=3), 2),  # num_sge
    ]
    tb.mem.add_fault(BUS + 0x8000, 0x100, "r")
    tb.set_qp(9, 3)
    tb.post(9, model.wqe_bytes(0x9A, model.SEND, 0, [(IOVA + 0x8000 + 5, 100, KEY)]))
    tb.ring(9)
    tb.db.put(dict(number=16 + qp, value=(tb.prod[qp] + 1) & 0xFFFF))   # QPN out of range
    exp = []
    for q, wqe, st in errs:
        tb.set_qp(q, 3)
        tb.post(q, wqe)
        tb.post(q, model.wqe_bytes(0x99, model.RDMA_WRITE, 0, [(IOVA, 8, KEY)]))   # flushed
        tb.ring(q)
        exp += [(q, struct.unpack("<Q", wqe[:8])[0], st, 0), (q, 0x99, 5, 1)]
    got = await tb.completions(len(exp), "errors")
    assert [(c["qpn"], c["wr_id"], c["status"], c["opcode"]) for c in got
            if c["qpn"] == 3] == exp[:2], got                  # in SQ order
    assert sorted((c["qpn"], c["wr_id"], c["status"], c["opcode"]) for c in got) == sorted(exp)
    assert tb.tx.empty(), "a frame left for a WQE in error"
    for _ in range(3000):                 # the payload read of QP 9 fails: no frame, a fault
        if tb.fault.items:
            break
        await RisingEdge(dut.clk)
    assert tb.fault.items == [9], tb.fault.items
    assert tb.tx.empty()
    tb.mem.clear_faults()


async def _frames_error_order(tb, src, cases):
    """An error after sent WQEs, SET_QP to ERROR; the count of frames checked."""
    dut = tb.dut
    # an error waits for the completions of the WQEs sent before it
    qe = 10
    tb.set_qp(qe, 3)
    tb.post(qe, model.wqe_bytes(0xA1, model.SEND, model.SIGNALED, [(IOVA + 9, 20, KEY)]))
    tb.post(qe, model.wqe_bytes(0xA2, model.SEND, model.SIGNALED, [(IOVA, 20, 0xBAD0BAD0)]))
    tb.ring(qe)
    p = await tb.expect_frames(qe, 0xA1, model.SEND, src[9:29], model.SIGNALED, b"\0" * 4, 0, 0,
                               "before error")
    await ClockCycles(dut.clk, 200)
    assert await tb.completions(0, "held") == []
    tb.ack.put(dict(qpn=qe, psn=p[-1]["psn"], syndrome=0x1F))
    got = await tb.completions(2, "ordered")
    assert [(c["wr_id"], c["status"]) for c in got] == [(0xA1, 0), (0xA2, 4)], got

    # SET_QP to ERROR: posted WQEs complete with WR_FLUSH_ERR, nothing is sent
    qf = 11
    tb.set_qp(qf, 3)
    tb.set_qp(qf, 6)
    tb.post(qf, model.wqe_bytes(0xB1, model.RDMA_WRITE_WITH_IMM, 0, [(IOVA, 20, KEY)]))
    tb.ring(qf)
    got = await tb.completions(1, "flush")
    assert [(c["qpn"], c["wr_id"], c["status"], c["opcode"]) for c in got] == [(qf, 0xB1, 5, 1)]
    assert tb.tx.empty()
    assert tb.gap_errors == 0, "tvalid dropped inside a frame"
    assert tb.opcode_checks >= tb.frames, (tb.opcode_checks, tb.frames)
    dut._log.info("W=%d: %d frames checked, %d cycles", W, tb.frames,
                  cocotb.utils.get_sim_time("ns") // 4)
    assert tb.frames == 2 + sum(max(1, -(-c[0] // PMTU)) for c in cases) + 129 * WINDOW + 1


async def _frames_round_robin(tb):
    """Two QPs with work take turns."""
    dut = tb.dut
    # --- round robin: two QPs with work take turns, one WQE each (docs/requester.md) ---------
    qa, qb = 12, 13
    for q in (qa, qb):
        tb.set_qp(q, 3)
    await ClockCycles(dut.clk, 20)
    for q in (qa, qb):
        for k in range(4):
            tb.post(q, model.wqe_bytes(0xC000 + 16 * q + k, model.SEND, 0, [(IOVA + k, 40, KEY)]))
        tb.ring(q)
    order = []
    for _ in range(8):
        f = await with_timeout(tb.tx.recv(), 400, "us")
        order.append(Ether(bytes(f.tdata))[BTH].dqpn - 0x100)
    runs = [len(list(g)) for _, g in itertools.groupby(order)]
    assert sorted(order) == [qa] * 4 + [qb] * 4, order
    assert max(runs) <= 2, f"no round robin between QPs with work: {order}"
    dut._log.info("round robin order %s", order)


async def _frames_reset_doorbell(tb, src):
    """SQ_DB in RESET is ignored."""
    dut = tb.dut
    # --- SQ_DB in RESET is ignored (interface.md §4.3), also once the QP is in RTS; the next
    #     doorbell (a smaller producer index) posts from index 0 ----------------------------
    qr = 14
    tb.set_qp(qr, 0)
    await ClockCycles(dut.clk, 20)
    for k in range(3):
        tb.post(qr, model.wqe_bytes(0xD0 + k, model.SEND, model.SIGNALED, [(IOVA + k, 8, KEY)]))
    tb.ring(qr)                                         # producer 3, in RESET
    await ClockCycles(dut.clk, 50)
    for st in (1, 2, 3):
        tb.set_qp(qr, st)
    await ClockCycles(dut.clk, 500)
    assert tb.tx.empty(), "a doorbell written in RESET ran in RTS"
    assert await tb.completions(0, "reset doorbell") == []
    tb.prod[qr] = 0
    tb.post(qr, model.wqe_bytes(0xE0, model.SEND, model.SIGNALED, [(IOVA + 3, 8, KEY)]))
    tb.ring(qr)                                         # producer 1
    p = await tb.expect_frames(qr, 0xE0, model.SEND, src[3:11], model.SIGNALED, b"\0" * 4, 0,
                               0, "after reset doorbell")
    tb.ack.put(dict(qpn=qr, psn=p[-1]["psn"], syndrome=0x1F))
    assert await tb.completions(1, "after reset doorbell") == tb.acked(qr, p[-1]["psn"])
    await ClockCycles(dut.clk, 300)
    assert tb.tx.empty(), "more than the one WQE posted after RESET was sent"
    tb.mem.check()


@cocotb.test(skip=knob("REQUESTER_TEST_GROUP") != "frames")
async def requester_frames(dut):
    tb, src = await start(dut)
    qp = 2
    await _frames_rtr(tb, src, qp)
    cases = await _frames_segmentation(tb, src, qp)
    # --- the 128-PSN window (and AckReq on the 66th packet without it) ------------------------
    if WINDOW:
        await window(tb, src)

    await _frames_errors(tb, qp)
    await _frames_error_order(tb, src, cases)
    await _frames_round_robin(tb)
    await _frames_reset_doorbell(tb, src)


async def window(tb, src):
    """129 packets without an ACK: 128 leave, the 129th waits for the first ACK."""
    dut = tb.dut
    qw = 8
    tb.set_qp(qw, 3)
    length = 128 * PMTU + 1
    raddr, rkey = 0x1234_5678_9ABC_DEF0, 0xCAFE
    tb.post(qw, model.wqe_bytes(0x88, model.RDMA_WRITE, model.SIGNALED, [(IOVA + 3, length, KEY)],
                                raddr=raddr, rkey=rkey))
    tb.tx.clear_pause_generator()         # measure the frame rate without back-pressure
    tb.tx.pause = False                   # (clearing leaves the last pause value in force)
    tb.frame_ends.clear()
    tb.ring(qw)
    msg = src[3:3 + length]
    pkts = tb.packets(qw, 0x88, model.RDMA_WRITE, msg, model.SIGNALED, b"\0" * 4, raddr, rkey)
    assert len(pkts) == 129 and pkts[65]["ackreq"] == 1 and pkts[64]["ackreq"] == 0
    await tb.check_frames(qw, pkts[:128], msg, "window")
    e = tb.frame_ends
    dut._log.info("W=%d: %.1f cycles per %d-byte packet (%d-byte frame), no back-pressure",
                  W, (e[127] - e[1]) / 126, PMTU, PMTU + 14 + 20 + 8 + 12 + 4)
    await ClockCycles(dut.clk, 400)
    assert tb.tx.empty(), "a 129th PSN left without an ACK"
    tb.ack.put(dict(qpn=qw, psn=pkts[0]["psn"], syndrome=0x1F))
    await tb.check_frames(qw, pkts[128:], msg, "window")
    await ClockCycles(dut.clk, 200)
    assert await tb.completions(0, "window") == []
    tb.ack.put(dict(qpn=qw, psn=pkts[-1]["psn"], syndrome=0x1F))
    assert await tb.completions(1, "window") == tb.acked(qw, pkts[-1]["psn"])


@cocotb.test(skip=knob("REQUESTER_TEST_GROUP") != "readpark")
async def requester_read_parked(dut):
    """A READ that waits at its request for PSN room (its QP's 128-PSN window full) after its
    PSN count was made, and another QP's WRITE sent meanwhile: the WRITE's packets take one PSN
    each (the count is the READ's alone); once an ACK opens the window the READ leaves at its
    PSN, and the QP's next WQE after the READ's max(1, ⌈L/PMTU⌉) PSNs."""
    tb, src = await start(dut)
    tb.tx.clear_pause_generator()
    tb.tx.pause = False
    qa, qb = 8, 9
    tb.set_qp(qa, 3)
    tb.set_qp(qb, 3)
    raddr, rkey = 0x1234_5678_9ABC_DEF0, 0xCAFE
    length = 128 * PMTU
    tb.post(qa, model.wqe_bytes(0x81, model.RDMA_WRITE, model.SIGNALED, [(IOVA + 3, length, KEY)],
                                raddr=raddr, rkey=rkey))
    rlen = 5 * PMTU + 7                   # six PSNs
    tb.post(qa, model.wqe_bytes(0x82, model.RDMA_READ, model.SIGNALED,
                                [(IOVA + 0x8000, rlen, KEY)], raddr=raddr + 0x100, rkey=rkey))
    wlen = 2 * PMTU + 9
    tb.post(qa, model.wqe_bytes(0x83, model.RDMA_WRITE, model.SIGNALED, [(IOVA + 7, wlen, KEY)],
                                raddr=raddr, rkey=rkey))
    tb.ring(qa)
    msg = src[3:3 + length]
    pkts = tb.packets(qa, 0x81, model.RDMA_WRITE, msg, model.SIGNALED, b"\0" * 4, raddr, rkey)
    await tb.check_frames(qa, pkts, msg, "read parked: window")
    await ClockCycles(dut.clk, 400)
    assert tb.tx.empty(), "the READ left with the window full"
    # another QP meanwhile: one PSN a packet
    tb.post(qb, model.wqe_bytes(0x91, model.RDMA_WRITE, model.SIGNALED, [(IOVA + 5, wlen, KEY)],
                                raddr=raddr, rkey=rkey))
    tb.ring(qb)
    await tb.expect_frames(qb, 0x91, model.RDMA_WRITE, src[5:5 + wlen], model.SIGNALED,
                           b"\0" * 4, raddr, rkey, "read parked: other QP")
    # the window opens: the READ at its PSN, then the WRITE behind it after its six PSNs
    tb.ack.put(dict(qpn=qa, psn=pkts[-1]["psn"], syndrome=0x1F))
    rp, _ = model.segment(model.RDMA_READ, rlen, PMTU, psn=tb.psn[qa], raddr=raddr + 0x100,
                          rkey=rkey)
    assert rp[0]["npsn"] == 6
    await tb.check_frames(qa, rp, b"", "read parked: READ")
    tb.psn[qa] = (tb.psn[qa] + rp[0]["npsn"]) & 0xFFFFFF
    await tb.expect_frames(qa, 0x83, model.RDMA_WRITE, src[7:7 + wlen], model.SIGNALED,
                           b"\0" * 4, raddr, rkey, "read parked: after the READ")
    assert tb.gap_errors == 0


# ---- the Reliability Engine ----------------------------------------------------------------------

US = knob("REQUESTER_US_CYCLES")     # clock cycles per microsecond (US_CYCLES)
RT = 6                                     # timeout code: 4.096 µs · 64 → 263 µs


def now():
    return cocotb.utils.get_sim_time("ns") // 4


class Rel:
    """One QP driven through the model of the Reliability Engine (model.SendQp)."""

    def __init__(self, tb, src, qpn, **cfg):
        self.tb, self.src, self.qpn = tb, src, qpn
        tb.set_qp(qpn, 3, **cfg)
        self.m = model.SendQp(tb.psn[qpn], PMTU, retry_cnt=cfg.get("retry_cnt", 7),
                              rnr_retry=cfg.get("rnr_retry", 7))
        self.msg = {}           # wr_id -> payload
        self.posted = []        # posted, not yet sent (the model's view)
        self.off = 0x100 * qpn

    def post(self, wr_id, op, length, flags=model.SIGNALED, ring=True):
        rng = self.tb.rng
        self.off += 37
        va = IOVA + self.off
        msg = self.src[self.off:self.off + length]
        imm = bytes(rng.randrange(256) for _ in range(4))
        raddr, rkey = rng.randrange(1 << 64), rng.randrange(1 << 32)
        self.tb.post(self.qpn, model.wqe_bytes(wr_id, op, flags, [(va, length, KEY)] if length
                                               else [], imm=imm, raddr=raddr, rkey=rkey))
        if ring:
            self.tb.ring(self.qpn)
        self.msg[wr_id] = msg
        w = dict(wr_id=wr_id, opcode=op, flags=flags, payload=msg, imm=imm, raddr=raddr,
                 rkey=rkey)
        self.posted.append(w)
        return w

    def send_posted(self):
        pkts = []
        for w in self.posted:
            p = self.m.send(w)
            for x in p:
                x["wr_id"] = w["wr_id"]
            pkts += p
        self.posted = []
        return pkts

    def tag(self, pkts):
        """wr_id of each packet of a go-back-N list (by PSN against the model's WQEs)."""
        for x in pkts:
            for w in self.m.sent:
                if ((x["psn"] - w["first_psn"]) & 0xFFFFFF) < w["npkts"]:
                    x["wr_id"] = w["wr_id"]
        return pkts

    async def frames(self, pkts, label):
        """Receive and check ``pkts``; returns the cycle of the first frame's end."""
        t0 = None
        for x in pkts:
            await self.tb.check_frames(self.qpn, [x], self.msg[x["wr_id"]], label)
            t0 = now() if t0 is None else t0
        return t0

    def ack(self, psn, syndrome=0x1F):
        self.tb.ack.put(dict(qpn=self.qpn, psn=psn & 0xFFFFFF, syndrome=syndrome))

    async def cqes(self, exp, label):
        got = await self.tb.completions(len(exp), label)
        want = [{"qpn": self.qpn, "flags": 0, "byte_len": 0, **c} for c in exp]
        assert got == want, f"{label}: {got} != {want}"


class Retx:
    def __init__(self, dut):
        self.n = 0
        cocotb.start_soon(self._run(dut))

    async def _run(self, dut):
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            self.n += int(dut.retx.value)


async def quiet(tb, cycles, label):
    await ClockCycles(tb.dut.clk, cycles)
    assert tb.tx.empty(), f"{label}: unexpected frame"
    assert await tb.completions(0, label) == [], f"{label}: unexpected completion"


class _Retry:
    """What the phases of :func:`requester_retry` share."""

    def __init__(self, tb, src, retx, timeout):
        self.tb, self.src, self.retx, self.T = tb, src, retx, timeout


async def _retry_lost_request(r):
    """A lost request: the timer resends the whole message."""
    tb, src, retx, T, dut = r.tb, r.src, r.retx, r.T, r.tb.dut
    # --- lost request: the timer resends the whole message; other QPs are not held -----------
    q = Rel(tb, src, 2, timeout=RT, retry_cnt=3)
    o = Rel(tb, src, 15)
    q.post(0x201, model.SEND, 2 * PMTU + 3)
    pk = q.send_posted()
    await q.frames(pk, "lost request")
    t_lost = now()
    o.post(0xF01, model.RDMA_WRITE_WITH_IMM, 40)        # another QP goes meanwhile
    po = o.send_posted()
    await o.frames(po, "other qp")
    o.ack(po[-1]["psn"])
    await o.cqes(o.m.ack(po[-1]["psn"])[0], "other qp")
    c, again = q.m.timeout()
    assert c == [] and [x["psn"] for x in again] == [x["psn"] for x in pk]
    t_re = await q.frames(q.tag(again), "timeout resend")
    gap = t_re - t_lost
    dut._log.info("timeout %d cycles, resent after %d", T, gap)
    assert T <= gap <= T + 1500, (T, gap)
    assert retx.n == 3, retx.n
    q.ack(pk[-1]["psn"])
    await q.cqes(q.m.ack(pk[-1]["psn"])[0], "after resend")
    await quiet(tb, 2 * T, "acked: no more resends")


async def _retry_lost_ack(r):
    """A lost ACK covered by a later one; the last ACK lost."""
    tb, src, retx, T = r.tb, r.src, r.retx, r.T
    # --- lost ACK: a later ACK covers it; the last ACK lost: resent, completed once --------------
    q = Rel(tb, src, 3, timeout=RT)
    q.post(0x301, model.SEND, 10)
    q.post(0x302, model.SEND_WITH_IMM, 20)
    pk = q.send_posted()
    await q.frames(pk, "lost ack")
    q.ack(pk[1]["psn"])                                  # the ACK of pk[0] was lost
    await q.cqes(q.m.ack(pk[1]["psn"])[0], "coalesced")
    await quiet(tb, 2 * T, "covered by a later ACK")
    q.post(0x303, model.RDMA_WRITE, PMTU + 1)
    pk = q.send_posted()
    await q.frames(pk, "last ack lost")
    n0 = retx.n
    c, again = q.m.timeout()
    await q.frames(q.tag(again), "resent after a lost ACK")
    assert retx.n - n0 == 2
    q.ack(pk[-1]["psn"])                                 # the responder's duplicate ACK
    await q.cqes(q.m.ack(pk[-1]["psn"])[0], "once")
    await quiet(tb, 2 * T, "after the duplicate ACK")


async def _retry_go_back_n(r):
    """Go-back-N mid-message and from a message's first PSN."""
    tb, src, retx = r.tb, r.src, r.retx
    # --- go-back-N mid-message (MIDDLE/LAST, no RETH), earlier WQEs retired by the NAK ---------
    q = Rel(tb, src, 4)
    q.post(0x401, model.SEND, 100, flags=0)
    q.post(0x402, model.RDMA_WRITE, 5 * PMTU - 7)
    q.post(0x403, model.SEND_WITH_IMM, 300)
    pk = q.send_posted()
    await q.frames(pk, "gbn first pass")
    n0 = retx.n
    nak_psn = pk[1 + 2]["psn"]                           # the third packet of the WRITE
    c, again = q.m.nak(nak_psn, 0x60)
    assert c == [] and [x["opcode"] for x in again] == [0x07, 0x07, 0x08, 0x00, 0x03]
    q.ack(nak_psn, 0x60)
    await q.frames(q.tag(again), "go-back-N")
    assert retx.n - n0 == 5
    q.ack(pk[-1]["psn"])
    await q.cqes(q.m.ack(pk[-1]["psn"])[0], "gbn done")
    # NAK at a message's first PSN: FIRST with RETH again
    q.post(0x404, model.RDMA_WRITE_WITH_IMM, 2 * PMTU)
    pk = q.send_posted()
    await q.frames(pk, "gbn 2")
    c, again = q.m.nak(pk[0]["psn"], 0x60)
    assert again[0]["reth"] is not None
    q.ack(pk[0]["psn"], 0x60)
    await q.frames(q.tag(again), "gbn from FIRST")
    q.ack(pk[0]["psn"] - 1, 0x60)                        # stale NAK: ignored
    await quiet(tb, 300, "stale NAK")
    q.ack(pk[-1]["psn"])
    await q.cqes(q.m.ack(pk[-1]["psn"])[0], "gbn 2 done")


async def _retry_rnr(r):
    """An RNR NAK, then recovery after the coded wait."""
    tb, src, dut = r.tb, r.src, r.tb.dut
    # --- RNR NAK then recovery after the coded wait ----------------------------------------------
    q = Rel(tb, src, 5, rnr_retry=2)
    q.post(0x501, model.SEND, 64)
    pk = q.send_posted()
    await q.frames(pk, "rnr")
    code = 5
    t_nak = now()
    c, again = q.m.nak(pk[0]["psn"], 0x20 | code)
    q.ack(pk[0]["psn"], 0x20 | code)
    assert q.m.nak(pk[0]["psn"], 0x60) == ([], [])      # the sequence NAK behind it: ignored
    q.ack(pk[0]["psn"], 0x60)
    t_re = await q.frames(q.tag(again), "after rnr")
    q.m.rnr_elapsed()
    wait = model.rnr_us(code) * US
    dut._log.info("RNR wait %d cycles, resent after %d", wait, t_re - t_nak)
    assert wait <= t_re - t_nak <= wait + 1500
    q.ack(pk[0]["psn"])
    await q.cqes(q.m.ack(pk[0]["psn"])[0], "rnr recovered")


async def _retry_rnr_exhausted(r):
    """RNR exhaustion: RNR_RETRY_EXC_ERR, the rest flushed."""
    tb, src = r.tb, r.src
    # --- RNR exhaustion: RNR_RETRY_EXC_ERR even unsignaled, the rest flushed --------------------
    q = Rel(tb, src, 6, rnr_retry=1)
    q.post(0x601, model.SEND, 30, flags=0)
    q.post(0x602, model.SEND, 40)
    pk = q.send_posted()
    await q.frames(pk, "rnr exc")
    c, again = q.m.nak(pk[0]["psn"], 0x21)
    q.ack(pk[0]["psn"], 0x21)
    await q.frames(q.tag(again), "rnr exc resend")
    q.m.rnr_elapsed()
    c, again = q.m.nak(pk[0]["psn"], 0x21)
    assert again == [] and [x["status"] for x in c] == [13, 5]
    q.ack(pk[0]["psn"], 0x21)
    await q.cqes(c, "rnr exhausted")
    q.post(0x603, model.SEND, 8)
    await q.cqes([dict(wr_id=0x603, status=5, opcode=0)], "flushed after rnr exc")
    await quiet(tb, 300, "rnr exc: nothing sent")


async def _retry_exhausted(r):
    """Retry exhaustion on a cut link: RETRY_EXC_ERR."""
    tb, src, T = r.tb, r.src, r.T
    # --- retry exhaustion on a cut link: retry_cnt + 1 transmissions, then RETRY_EXC_ERR -------
    q = Rel(tb, src, 7, timeout=RT, retry_cnt=2)
    q.post(0x701, model.SEND, 16)
    q.post(0x702, model.RDMA_WRITE, 16, flags=0)
    pk = q.send_posted()
    await q.frames(pk, "cut")
    for i in range(2):
        c, again = q.m.timeout()
        await q.frames(q.tag(again), f"cut retry {i}")
    c, again = q.m.timeout()
    assert again == [] and [x["status"] for x in c] == [12, 5]
    await q.cqes(c, "retry exhausted")
    await quiet(tb, 2 * T, "retry exc: nothing sent")


async def _retry_remote_naks(r):
    """Remote NAKs end the QP."""
    tb, src = r.tb, r.src
    # --- remote NAKs end the QP: status on the NAKed WQE, earlier ones retired ------------------
    for n, (qpn, syn) in enumerate([(8, 0x61), (9, 0x62), (10, 0x63), (11, 0x65)]):
        q = Rel(tb, src, qpn)
        q.post(0x100 * qpn + 1, model.SEND, 12, flags=model.SIGNALED if n % 2 else 0)
        q.post(0x100 * qpn + 2, model.RDMA_WRITE, 12, flags=0)
        q.post(0x100 * qpn + 3, model.SEND, 12)
        pk = q.send_posted()
        await q.frames(pk, f"nak {syn:#x}")
        at = pk[n % 2]["psn"]                            # on the first or the second WQE
        c, again = q.m.nak(at, syn)
        assert again == [] and model.nak_status(syn) in [x["status"] for x in c]
        q.ack(at, syn)
        await q.cqes(c, f"nak {syn:#x}")
        q.ack(pk[-1]["psn"])                             # too late: the QP has ended
        await quiet(tb, 300, f"nak {syn:#x} ended")


async def _retry_kill(r):
    """SET_QP to ERROR with a WQE in flight."""
    tb, src, T = r.tb, r.src, r.T
    # --- SET_QP to ERROR with a WQE in flight: WR_FLUSH_ERR, no frame ---------------------------
    q = Rel(tb, src, 12, timeout=RT)
    q.post(0xC01, model.SEND, 12, flags=0)
    pk = q.send_posted()
    await q.frames(pk, "kill")
    tb.set_qp(12, 6)
    await q.cqes([dict(wr_id=0xC01, status=5, opcode=0)], "killed in flight")
    await quiet(tb, 2 * T, "killed")


@cocotb.test(skip=knob("REQUESTER_TEST_GROUP") != "retry")
async def requester_retry(dut):
    """Lost request, lost ACK, go-back-N mid-message, RNR, exhaustion, remote NAKs, kill."""
    tb, src = await start(dut, US)
    retx = Retx(dut)
    T = model.timeout_us(RT) * US
    r = _Retry(tb, src, retx, T)
    for phase in (_retry_lost_request, _retry_lost_ack, _retry_go_back_n, _retry_rnr,
                  _retry_rnr_exhausted, _retry_exhausted, _retry_remote_naks,
                  _retry_kill):
        await phase(r)

    assert tb.gap_errors == 0
    dut._log.info("retry bench: %d frames, %d retransmitted, %d cycles", tb.frames, retx.n, now())
    tb.mem.check()


# ---- timer bounds (interface.md §6) -------------------------------------------------------------

NUM_QP_T = knob("REQUESTER_NUM_QP")
RT_1MS = 8              # retransmit timeout code 8: 4.096 µs · 2^8 = 1048.576 µs
RNR_1MS = 14            # RNR NAK timer code 14: 1.28 ms (roce-reference.md §2)
SCAN_QUOTA = 8          # QPs judged per scan turn while an ACK waits (docs/requester.md)
ENGINE = 300            # cycles from a timer's expiry to the first beat of the frame sent
                        # again: queue, context, WQE re-read, key lookup, payload re-read,
                        # header (the bench's host memory answers within 12 cycles)


def scan_round(n, visits, acks):
    """docs/requester.md: cycles for the scan to judge every QP once, with ``visits`` QPs that
    need a visit and ``acks`` ACKs (that retire nothing) taken meanwhile."""
    return n + 5 + 13 * visits + (11 + 5) * acks


class AckWatch:
    """Cycle at which each ACK/NAK payload was first offered on ``ack`` and taken."""

    def __init__(self, dut):
        self.offered, self.taken = {}, {}
        cocotb.start_soon(self._run(dut))

    async def _run(self, dut):
        while True:
            await FallingEdge(dut.clk)        # (the Source drives at the falling edge)
            await ReadOnly()
            if int(dut.ack_valid.value):
                a = unpack(ack_layout, int(dut.ack_payload.value))
                key = (a["qpn"], a["psn"], a["syndrome"])
                self.offered.setdefault(key, now())
                if int(dut.ack_ready.value):
                    self.taken.setdefault(key, now())


class _Timers:
    """The state of :func:`requester_timers`: the frames taken from ``tx`` so far and the
    stream of ACKs offered meanwhile (``load``)."""

    def __init__(self, tb, src, watch, n):
        self.tb, self.dut, self.src, self.watch, self.n = tb, tb.dut, src, watch, n
        self.t_rt = 4.096 * 2**RT_1MS * US         # the exact values, in cycles
        self.t_rnr = model.rnr_us(RNR_1MS) * US
        self.got = 0                               # frames taken from tx so far
        self.load = {"on": False, "psn": 0}

    async def frame(self):
        """The next frame: (dest QPN − 0x100, BTH PSN, bytes, first beat, last beat cycles)."""
        tb = self.tb
        f = await with_timeout(tb.tx.recv(), int(10 * (self.t_rnr + self.t_rt)) * 4, "ns")
        while len(tb.frame_ends) <= self.got:
            await RisingEdge(self.dut.clk)
        data = bytes(f.tdata)
        bth = Ether(data)[BTH]
        self.got += 1
        got = self.got
        return bth.dqpn - 0x100, bth.psn, data, tb.frame_starts[got - 1], tb.frame_ends[got - 1]

    async def ack_load(self):
        """Keeps ``ack`` valid: ACKs of QP 1 (never set up), each acknowledging one more PSN
        (a full ACK event in the completer that retires nothing)."""
        load = self.load
        while True:
            await FallingEdge(self.dut.clk)
            while load["on"] and len(self.tb.ack.q) < 2:
                self.tb.ack.put(dict(qpn=1, psn=load["psn"], syndrome=0x1F))
                load["psn"] += 1

    async def first_pass(self, phase, qs, rnr_q):
        """Each QP's WQE sent once; the QPs of ``rnr_q`` get an RNR NAK, the others time out.
        Returns, per QP, (kind, what its timer counts from, the packets to come again)."""
        tb = self.tb
        first, pend = {}, {}
        for q in qs.values():
            q.post(0x10000 * q.qpn + 1, model.SEND, 64)
            pend[q.qpn] = q.send_posted()[0]
        for _ in qs:
            qpn, psn, data, s0, e0 = await self.frame()
            p = pend.pop(qpn)
            tb.check_frame(qpn, p, qs[qpn].msg[p["wr_id"]], data, f"{phase} qp {qpn} sent")
            q = qs[qpn]
            if qpn in rnr_q:
                syn = 0x20 | RNR_1MS
                c, again = q.m.nak(psn, syn)
                q.ack(psn, syn)
                first[qpn] = ("rnr", (qpn, psn, syn), again)
            else:
                c, again = q.m.timeout()
                first[qpn] = ("rt", (s0, e0), again)
            assert c == [] and len(again) == 1, (qpn, c, again)
        return first

    async def second_pass(self, phase, qs, first):
        """Each QP's WQE sent again, within the timer's bounds of interface.md §6; returns,
        per QP, (kind, cycles beyond the timer's value)."""
        tb, watch, t_rt, t_rnr = self.tb, self.watch, self.t_rt, self.t_rnr
        late = {}
        for _ in qs:
            qpn, psn, data, s1, e1 = await self.frame()
            kind, ref, again = first.pop(qpn)
            q = qs[qpn]
            tb.check_frame(qpn, q.tag(again)[0], q.msg[again[0]["wr_id"]], data,
                           f"{phase} qp {qpn} sent again")
            if kind == "rnr":
                q.m.rnr_elapsed()
                t_off, t_in = watch.offered[ref], watch.taken[ref]
                assert s1 - t_in >= t_rnr, f"{phase} RNR early: {s1 - t_in} < {t_rnr}"
                assert e1 - t_off <= 2 * t_rnr, f"{phase} RNR late: {e1 - t_off} > 2 · {t_rnr}"
                late[qpn] = ("rnr", s1 - t_in - t_rnr)
            else:
                s0, e0 = ref
                assert s1 - e0 >= t_rt, f"{phase} retransmit early: {s1 - e0} < {t_rt}"
                assert e1 - s0 <= 2 * t_rt, f"{phase} retransmit late: {e1 - s0} > 2 · {t_rt}"
                late[qpn] = ("rt", s1 - e0 - t_rt)
        return late

    def check_late(self, phase, late, mine, under_load):
        """The design's bound (docs/requester.md): the scan arms a retransmit timer within a
        round of the send and fires it within a round of its deadline; an RNR NAK arms it at
        once. Each round here: every QP of the phase may need a visit, and with the ACK stream
        an ACK is taken after every SCAN_QUOTA QPs judged or a visit."""
        n, dut = self.n, self.dut
        acks = (n // SCAN_QUOTA + len(mine) + 1) if under_load else 0
        rnd = scan_round(n, len(mine), acks)
        for qpn, (kind, lat) in sorted(late.items()):
            bound = (2 if kind == "rt" else 1) * rnd + 2 * US + ENGINE
            dut._log.info("%s: QP %d %s timer %d cycles late (bound %d)", phase, qpn, kind, lat,
                          bound)
            assert lat <= bound, f"{phase}: QP {qpn} {kind} {lat} cycles late > {bound}"
        dut._log.info("%s: worst retransmit %d, RNR %d cycles late; US_CYCLES %d, N %d",
                      phase, max(v for k, v in late.values() if k == "rt"),
                      max(v for k, v in late.values() if k == "rnr"), US, n)

    async def complete(self, phase, qs):
        """Every WQE completes once on its ACK."""
        tb = self.tb
        await ClockCycles(self.dut.clk, 100)
        exp = []
        for q in qs.values():
            psn = q.m.sent[-1]["first_psn"]
            q.ack(psn)
            exp += [{"qpn": q.qpn, "flags": 0, "byte_len": 64, **c} for c in q.m.ack(psn)[0]]
        got_c = await tb.completions(len(exp), f"{phase} acked")
        key = lambda c: (c["qpn"], c["wr_id"])
        assert sorted(got_c, key=key) == sorted(exp, key=key), f"{phase}: {got_c} != {exp}"
        assert tb.tx.empty(), f"{phase}: a frame sent after the ACKs"

    async def phase(self, phase, under_load, mine):
        """The QPs ``mine``: two RNR QPs, the rest retransmit; with or without the ACKs."""
        rnr_q = set(mine[3::8])                      # two RNR QPs, the rest retransmit
        qs = {}
        for i, qpn in enumerate(mine):
            q = Rel(self.tb, self.src, qpn, timeout=RT_1MS, retry_cnt=7, rnr_retry=7)
            q.off = 0x200 * i                        # inside the MR whatever the QPN
            qs[qpn] = q
        self.load["on"] = under_load
        await ClockCycles(self.dut.clk, 50)
        first = await self.first_pass(phase, qs, rnr_q)
        late = await self.second_pass(phase, qs, first)
        self.load["on"] = False
        self.check_late(phase, late, mine, under_load)
        await self.complete(phase, qs)


@cocotb.test(skip=knob("REQUESTER_TEST_GROUP") != "timers")
async def requester_timers(dut):
    """Retransmit (timeout 8, 1.05 ms) and RNR (code 14, 1.28 ms) timers at NUM_QP_T QPs, with
    the completer idle, then under a continuous stream of ACKs: each retransmission starts no
    earlier than the timer's value after the original frame's last beat (or the NAK taken), its
    last beat is within twice the value of the original's first beat (or the NAK offered)
    (interface.md §6), and it is no later than docs/requester.md's scan bound allows."""
    n = NUM_QP_T
    assert n >= 64, "the bench spreads 32 QPs over the QPN space"
    tb, src = await start(dut, US)
    tb.tx.clear_pause_generator()         # frame times without TX back-pressure
    tb.tx.pause = False
    watch = AckWatch(dut)
    qpns = sorted({2 + (i * (n - 3)) // 32 for i in range(32)})
    assert len(qpns) == 32
    t = _Timers(tb, src, watch, n)
    cocotb.start_soon(t.ack_load())
    for phase, under_load in (("idle", False), ("ack load", True)):
        mine = qpns[:16] if not under_load else qpns[16:]
        await t.phase(phase, under_load, mine)
    assert tb.gap_errors == 0
    tb.mem.check()


# ---- the shared in-flight ring (docs/requester.md, "In-flight ring") -----------------------------

RING_FREE = knob("REQUESTER_RING_DEPTH") - 16    # entries beyond one per QP (N = 16)


async def ring_frames(tb, rels, exp, n, label, cycles=3000):
    """Receive ``n`` frames, each checked against the next expected packet of its QP (``exp``:
    qpn -> packets in order, consumed); then nothing more within ``cycles``."""
    for i in range(n):
        f = await with_timeout(tb.tx.recv(), 400, "us")
        frame = bytes(f.tdata)
        qpn = Ether(frame)[BTH].dqpn - 0x100
        assert exp.get(qpn), f"{label}: frame {i} of QP {qpn} not expected"
        x = exp[qpn].pop(0)
        tb.check_frame(qpn, x, rels[qpn].msg[x["wr_id"]], frame, f"{label} frame {i}")
    await ClockCycles(tb.dut.clk, cycles)
    assert tb.tx.empty(), f"{label}: more than {n} frames"


@cocotb.test(skip=knob("REQUESTER_TEST_GROUP") != "ring")
async def requester_ring(dut):
    """A ring of 16 entries beyond the QPs' own: WQEs of three QPs beyond it wait (the QPs park)
    and go on ACKs; a QP reset with WQEs unretired and a QP ended by a NAK give their entries
    back, so 16 WQEs are in flight again afterwards."""
    tb, src = await start(dut)
    assert RING_FREE == 16
    csc = CsCheck(dut)
    rels = {q: Rel(tb, src, q) for q in (1, 2, 3)}
    exp = {}
    for q, r in rels.items():
        for k in range(7):
            r.post(0x1000 * q + k, model.SEND, 40 + k)
        exp[q] = r.send_posted()
    await ring_frames(tb, rels, exp, RING_FREE, "ring full")
    # ACK each QP's WQEs sent so far in turn: their entries go back and as many more leave
    while any(r.m.sent for r in rels.values()):
        for q, r in rels.items():
            unacked = len(r.m.sent) - len(exp[q])       # sent by the requester, not acked
            if unacked == 0:
                continue
            w = r.m.sent[unacked - 1]
            psn = (w["first_psn"] + w["npkts"] - 1) & 0xFFFFFF
            r.ack(psn)
            await r.cqes(r.m.ack(psn)[0], f"ring: qp {q} acked")
            n = min(unacked, sum(len(v) for v in exp.values()))
            await ring_frames(tb, rels, exp, n, f"ring: after qp {q}", cycles=500)
    assert not any(exp.values()), exp
    # QP 1 reset with 3 WQEs unretired, QP 2 ended by a NAK with 3 WQEs unretired
    for q in (1, 2):
        for k in range(3):
            rels[q].post(0x10000 * q + k, model.SEND, 20, flags=0)
        exp[q] = rels[q].send_posted()
    await ring_frames(tb, rels, exp, 6, "before reset and NAK", cycles=100)
    tb.set_qp(1, 0)
    tb.prod[1] = 0
    w = rels[2].m.sent[0]
    c, again = rels[2].m.nak(w["first_psn"], 0x63)
    rels[2].ack(w["first_psn"], 0x63)
    await rels[2].cqes(c, "ring: nak")
    await ClockCycles(dut.clk, 200)
    # QP 1 in RTS again; QPs 1, 4, 5, 6 post 16 WQEs and they all leave before any ACK
    rels[1] = Rel(tb, src, 1)
    for q in (4, 5, 6):
        rels[q] = Rel(tb, src, q)
    for q in (1, 4, 5, 6):
        for k in range(4):
            rels[q].post(0x100000 * q + k, model.RDMA_WRITE, 30 + k)
        exp[q] = rels[q].send_posted()
    await ring_frames(tb, rels, exp, 16, "ring: all back")
    for q in (1, 4, 5, 6):
        w = rels[q].m.sent[-1]
        psn = (w["first_psn"] + w["npkts"] - 1) & 0xFFFFFF
        rels[q].ack(psn)
        await rels[q].cqes(rels[q].m.ack(psn)[0], f"ring: qp {q} done")
    assert tb.gap_errors == 0 and csc.n > 0
    tb.mem.check()


class CsCheck:
    """The engine's copy of its QP's ``comp`` fields (``cs``) against ``comp_mem``'s row, in
    every cycle the engine holds a loaded QP (``busy``, ``e_steal`` low in this cycle and the
    last): cs takes each write to the row a cycle after it, so cs is compared with the row
    as the cycle before saw it."""

    def __init__(self, dut):
        from rnic.req.requester import _comp_engine_layout, _comp_layout
        off = {n: f.offset for n, f in _comp_layout}
        self.fields = [(n, off[n], f.offset, f.width) for n, f in _comp_engine_layout]
        self.req, self.n = dut.dut.req, 0
        cocotb.start_soon(self._run(dut))

    async def _run(self, dut):
        req, last = self.req, None
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            q = int(req.qpn.value)
            held = int(req.busy.value) and not int(req.e_steal.value)
            row, cs = int(req.comp_mem[q].value), int(req.cs.value)
            if held and last is not None and last[0] == q:
                for name, ro, co, w in self.fields:
                    got, want = (cs >> co) & ((1 << w) - 1), (last[1] >> ro) & ((1 << w) - 1)
                    assert got == want, f"cs.{name} {got:#x} != comp_mem[{q}].{name} {want:#x}"
                self.n += 1
            last = (q, row) if held else None


def starve_bound(delay):
    """docs/requester.md "Completer liveness": an ACK retiring one WQE, taken -> its cpl, in
    cycles: the event (11 + 4) and the tries spoiled by the engine's load under way, which
    holds the port L = 3 + ``delay`` cycles (the context answered ``delay`` cycles late)."""
    return 11 + 4 + 4 * -(-(3 + delay + 1) // 4)


class Handshakes:
    """The cycles of ``ack`` and ``cpl`` transfers."""

    def __init__(self, dut):
        self.ack, self.cpl = [], []
        cocotb.start_soon(self._run(dut))

    async def _run(self, dut):
        while True:
            await FallingEdge(dut.clk)      # (the values the next rising edge takes)
            await ReadOnly()
            if int(dut.ack_valid.value) and int(dut.ack_ready.value):
                self.ack.append(now())
            if int(dut.cpl_valid.value) and int(dut.cpl_ready.value):
                self.cpl.append(now())


async def _starve_acks(tb, a, n, hs, label):
    """ACK QP ``a``'s WQEs one by one at varied phases; the cycles from each ACK taken to its
    completion."""
    lat = []
    for i, w in enumerate(list(a.m.sent)):
        await ClockCycles(tb.dut.clk, 3 + i % 9)
        psn = (w["first_psn"] + w["npkts"] - 1) & 0xFFFFFF
        j = len(hs.cpl)
        a.ack(psn)
        c, _ = a.m.ack(psn)
        for _ in range(2000):
            await RisingEdge(tb.dut.clk)
            if len(hs.cpl) > j:
                break
        assert len(hs.cpl) > j, f"{label}: ACK {i} not completed in 2000 cycles"
        lat.append(hs.cpl[j] - hs.ack[-1])
        await a.cqes(c, f"{label}: ack {i}")
    return lat


@cocotb.test(skip=knob("REQUESTER_TEST_GROUP") != "starve")
async def requester_starve(dut):
    """Completer liveness: QP 1's ACKs are taken while doorbells of QP 2 arrive back to back, so
    that the engine loads QP 2 again and again through the read port it shares with the
    completer. Each ACK's completion comes within ``starve_bound`` cycles, whatever the phase
    of the ACK against the engine's loads and their period (the context answered 0..3 cycles
    late; at 2 a completer that retries without a bound never completes)."""
    tb, src = await start(dut)
    a, qb = Rel(tb, src, 1), 2
    tb.set_qp(qb, 3)
    tb.prod[qb] = 0
    n = 1 << SQ_LOG                 # the SQ ring's slots, all posted and sent
    for k in range(n):
        a.post(0x500 + k, model.SEND, 20 + k)
    exp = {1: a.send_posted()}
    await ring_frames(tb, {1: a}, exp, n, "starve: sent", cycles=100)
    storm = [True]

    async def doorbells():          # QP 2's doorbells, back to back (nothing posted)
        while storm[0]:
            while len(tb.db.q) < 4:
                tb.ring(qb)
            await RisingEdge(dut.clk)

    cocotb.start_soon(doorbells())
    hs = Handshakes(dut)
    csc = CsCheck(dut)
    lat = {}
    for delay in range(4):          # the engine's loads at several periods
        tb.ctx_delay = delay
        await ClockCycles(dut.clk, 200)
        lat[delay] = await _starve_acks(tb, a, n, hs, f"starve: delay {delay}")
        for k in range(n):
            a.post(0x600 + 16 * delay + k, model.SEND, 30 + k)
        exp = {1: a.send_posted()}
        await ring_frames(tb, {1: a}, exp, n, f"starve: delay {delay}: sent", cycles=100)
    storm[0] = False
    dut._log.info("starve: ACK -> cpl cycles %s; cs checked in %d cycles", lat, csc.n)
    assert csc.n > 1000, csc.n
    for delay, v in lat.items():
        assert max(v) <= starve_bound(delay), \
            f"starve: ACK -> cpl {v} beyond {starve_bound(delay)} (context {delay} late)"
    assert tb.tx.empty()
    tb.mem.check()
