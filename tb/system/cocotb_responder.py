"""The book's responder walk-throughs at the `rnic` top, through the contract only.

Frames in on ``s_axis_rx`` (built by scapy), ACKs out on ``m_axis_tx`` (decoded by the tests'
own parser, ICRC recomputed), data and CQEs in host memory (``sim.hostmem.HostMem``), control
over AXI4-Lite through the verbs-style driver. Expected values come from the reference, not
from the RTL.
"""


import cocotb
from cocotb.triggers import ClockCycles, with_timeout
from cocotbext.axi import AxiStreamFrame

from rnic.opcodes import Op, WcOpcode, WcStatus
from sim.driver.regs import Regs
from sim.driver.verbs import Access, Device, KeyType
from sim.hostmem import HostMem
from sim.knobs import knob
from sim.packets import LOCAL_IP, LOCAL_MAC, REMOTE_IP, REMOTE_MAC, build_frame, decode_frame
from sim.top_ports import top_ports
from sim.trace import Tracer

QPN, DEST_QPN, PSN0 = 2, 0x11, 1000
PD = 1


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.axil, self.src, self.sink = top_ports(dut)
        bp = knob("RESP_BACKPRESSURE")
        self.mem = HostMem(dut, "m_axi", dut.clk, dut.rst, seed=3, backpressure=bp,
                           max_latency=20 if bp else 0)
        self.regs = Regs(self.axil)
        self.dev = Device(self.regs, self.mem, base=0x1000_0000, size=1 << 24)
        # the block trace (sim/trace.py): only with RNIC_TRACE=1
        self.trace = Tracer.attach(dut)
        self._sectioned = False

    def section(self, title):
        """Start a step list of the trace here (before the packet's post_recv, say)."""
        self.trace.section(title)
        self._sectioned = True

    async def start(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await self.dev.open(LOCAL_MAC, LOCAL_IP)
        self.cq = await self.dev.create_cq(0, 4)
        self.qp = await self.dev.create_qp(QPN, recv_cq=self.cq, send_cq=self.cq, pd=PD,
                                           dest_qpn=DEST_QPN, remote_mac=REMOTE_MAC,
                                           remote_ip=REMOTE_IP, udp_sport=0xC123, pmtu=1024,
                                           rq_psn=PSN0, access=Access.REMOTE_WRITE,
                                           min_rnr_timer=12)
        await self.dev.connect(self.qp)

    async def send(self, opcode, payload=b"", **kw):
        kw.setdefault("dqpn", QPN)
        if not self._sectioned:
            self.trace.section(f"{Op(opcode).name}, PSN {kw.get('psn', 0)}, {len(payload)} B")
        self._sectioned = False
        await self.src.send(AxiStreamFrame(build_frame(opcode, payload, **kw)))

    async def recv_frame(self, timeout_us=200):
        frame = await with_timeout(self.sink.recv(), timeout_us, "us")
        d = decode_frame(bytes(frame.tdata))
        assert d["icrc_ok"], "transmitted ICRC must be correct"
        assert d["eth"]["dst"] == REMOTE_MAC and d["eth"]["src"] == LOCAL_MAC
        assert d["ipv4"]["src"] == LOCAL_IP and d["ipv4"]["dst"] == REMOTE_IP
        assert d["ipv4"]["ttl"] == 64 and d["ipv4"]["flags"] == 2
        assert d["udp"]["sport"] == 0xC123 and d["udp"]["dport"] == 4791
        assert d["udp"]["checksum"] == 0 and d["bth"]["pkey"] == 0xFFFF
        assert d["bth"]["dqpn"] == DEST_QPN
        return d

    async def wait_cqes(self, n, timeout_cycles=20000):
        got = []
        for _ in range(timeout_cycles // 50):
            got += await self.dev.poll_cq(self.cq)
            if len(got) >= n:
                return got
            await ClockCycles(self.dut.clk, 50)
        raise AssertionError(f"expected {n} CQEs, got {got}")

    def expect_ack(self, d, psn, msn, syndrome=0x1F):
        assert d["bth"]["opcode"] == Op.ACKNOWLEDGE
        assert d["bth"]["psn"] == psn, (hex(d["bth"]["psn"]), hex(psn))
        assert d["aeth"]["syndrome"] == syndrome, hex(d["aeth"]["syndrome"])
        assert d["aeth"]["msn"] == msn


@cocotb.test()
async def send_9_steps(dut):
    """The book's 9-step SEND: a posted receive WQE, SEND_ONLY in, data placed, receive CQE,
    ACK for the PSN back on the wire (it does not wait for the CQE)."""
    tb = TB(dut)
    await tb.start()
    dev = tb.dev
    buf = dev.alloc(4096)
    tb.mem.add_guard(buf - 64, 64)
    tb.mem.add_guard(buf + 4096, 64)
    await dev.reg_mr(0, key=0x1234, addr=buf, length=4096, pd=PD, access=Access.LOCAL_WRITE)
    tb.section("The 9-step SEND: SEND_ONLY, PSN 1000, 100 B, AckReq")
    # step 1: the responder's application posts a receive WQE
    await dev.post_recv(tb.qp, 0xABC, [(buf, 4096, 0x1234)])
    # steps 4-6: SEND_ONLY, PSN as expected, RQ not empty
    payload = bytes((7 * i + 3) & 0xFF for i in range(100))
    await tb.send(Op.SEND_ONLY, payload, psn=PSN0, ackreq=1)
    # the ACK for PSN 1000, MSN 1
    tb.expect_ack(await tb.recv_frame(), PSN0, 1)
    # step 7: the receive completion
    (cqe,) = await tb.wait_cqes(1)
    assert (cqe.wr_id, cqe.byte_len, cqe.status, cqe.opcode, cqe.qpn, cqe.flags) == \
        (0xABC, 100, WcStatus.SUCCESS, WcOpcode.RECV, QPN, 0)
    assert dev.read(buf, 100) == payload
    c = await tb.regs.counters()
    assert c[0] == 1 and c[11] == 1 and c[12] == 1 and c[14] == 1, c
    q = await dev.query_qp(tb.qp)
    assert q["epsn"] == PSN0 + 1 and q["msn"] == 1 and q["rq_ci"] == 1
    tb.mem.check()


@cocotb.test()
async def send_with_immediate(dut):
    """SEND_ONLY_WITH_IMMEDIATE: only the CQE differs: WITH_IMM and the 4 bytes as on the wire."""
    tb = TB(dut)
    await tb.start()
    dev = tb.dev
    buf = dev.alloc(256)
    await dev.reg_mr(1, key=0x5678, addr=buf, length=256, pd=PD, access=Access.LOCAL_WRITE)
    tb.section("SEND with immediate: SEND_ONLY_WITH_IMMEDIATE, PSN 1000, 10 B, ImmDt 0xDEADBEEF")
    await dev.post_recv(tb.qp, 77, [(buf, 256, 0x5678)])
    payload = b"0123456789"
    await tb.send(Op.SEND_ONLY_WITH_IMMEDIATE, payload, psn=PSN0, ackreq=1, imm=0xDEADBEEF)
    tb.expect_ack(await tb.recv_frame(), PSN0, 1)
    (cqe,) = await tb.wait_cqes(1)
    assert (cqe.wr_id, cqe.byte_len, cqe.status, cqe.opcode, cqe.flags) == \
        (77, 10, 0, WcOpcode.RECV, 0x02)
    assert cqe.imm == b"\xde\xad\xbe\xef"
    assert dev.read(buf, 10) == payload


@cocotb.test()
async def send_with_invalidate_then_stale_write(dut):
    """The 11-step SEND with Invalidate: the payload lands in the receive buffer, the rkey
    0x2A04 is revoked, the CQE names it; a later WRITE with that rkey is refused with NAK 0x62,
    nothing is written, and the QP goes to ERROR with its RQ flushed."""
    tb = TB(dut)
    await tb.start()
    dev = tb.dev
    rbuf = dev.alloc(1024)
    lent = dev.alloc(4096)
    dev.write(lent, bytes(64))
    await dev.reg_mr(2, key=0x9999, addr=rbuf, length=1024, pd=PD, access=Access.LOCAL_WRITE)
    await dev.reg_mr(3, key=0x2A04, addr=lent, length=4096, pd=PD,
                     access=Access.LOCAL_WRITE | Access.REMOTE_WRITE, fast_reg=True)
    await dev.post_recv(tb.qp, 1, [(rbuf, 1024, 0x9999)])
    await dev.post_recv(tb.qp, 2, [(rbuf, 1024, 0x9999)])
    # the requester has been writing into the lent buffer under 0x2A04
    await tb.send(Op.RDMA_WRITE_ONLY, b"W" * 32, psn=PSN0, ackreq=1,
                  reth={"va": lent, "rkey": 0x2A04, "dmalen": 32})
    tb.expect_ack(await tb.recv_frame(), PSN0, 1)
    assert dev.read(lent, 32) == b"W" * 32
    # SEND with Invalidate naming 0x2A04
    tb.section("SEND with Invalidate: SEND_ONLY_WITH_INVALIDATE, PSN 1001, IETH rkey 0x2A04")
    await tb.send(Op.SEND_ONLY_WITH_INVALIDATE, b"done", psn=PSN0 + 1, ackreq=1, ieth=0x2A04)
    tb.expect_ack(await tb.recv_frame(), PSN0 + 1, 2)
    (cqe,) = await tb.wait_cqes(1)
    assert (cqe.wr_id, cqe.byte_len, cqe.status, cqe.opcode, cqe.flags) == \
        (1, 4, 0, WcOpcode.RECV, 0x04)
    assert cqe.invalidated_rkey == 0x2A04
    assert dev.read(rbuf, 4) == b"done"
    assert (await dev.query_key(3))["valid"] == 0
    # the stale WRITE
    tb.section("The stale WRITE: RDMA_WRITE_ONLY, PSN 1002, rkey 0x2A04 (revoked)")
    await tb.send(Op.RDMA_WRITE_ONLY, b"X" * 32, psn=PSN0 + 2, ackreq=1,
                  reth={"va": lent, "rkey": 0x2A04, "dmalen": 32})
    tb.expect_ack(await tb.recv_frame(), PSN0 + 2, 2, syndrome=0x62)
    assert dev.read(lent, 32) == b"W" * 32, "a refused WRITE writes nothing"
    flushed = await tb.wait_cqes(1)
    assert [(c.wr_id, c.status) for c in flushed] == [(2, WcStatus.WR_FLUSH_ERR)]
    assert (await dev.query_qp(tb.qp))["state"] == 6
    events = await dev.events()
    assert any(e.type == 3 and e.number == QPN for e in events), events
    c = await tb.regs.counters()
    assert c[10] == 1, c


@cocotb.test()
async def rnr_then_success(dut):
    """An empty receive queue draws an RNR NAK (timer code 12) and changes nothing; after
    post_recv the retried SEND is placed and ACKed."""
    tb = TB(dut)
    await tb.start()
    dev = tb.dev
    buf = dev.alloc(512)
    await dev.reg_mr(0, key=0x77, addr=buf, length=512, pd=PD, access=Access.LOCAL_WRITE)
    await tb.send(Op.SEND_ONLY, b"abc", psn=PSN0, ackreq=1)
    tb.expect_ack(await tb.recv_frame(), PSN0, 0, syndrome=0x20 | 12)
    await dev.post_recv(tb.qp, 5, [(buf, 512, 0x77)])
    await ClockCycles(dut.clk, 20)
    await tb.send(Op.SEND_ONLY, b"abc", psn=PSN0, ackreq=1)
    tb.expect_ack(await tb.recv_frame(), PSN0, 1)
    (cqe,) = await tb.wait_cqes(1)
    assert (cqe.wr_id, cqe.byte_len, cqe.status) == (5, 3, 0)
    c = await tb.regs.counters()
    assert c[9] == 1 and c[11] == 1, c


async def _one_buffer(tb, size=4096, wqes=1, key=0x4321, slot=4):
    dev = tb.dev
    buf = dev.alloc(size)
    await dev.reg_mr(slot, key=key, addr=buf, length=size, pd=PD, access=Access.LOCAL_WRITE)
    for i in range(wqes):
        await dev.post_recv(tb.qp, 100 + i, [(buf, size, key)])
    return buf


@cocotb.test()
async def s2_multi_packet_send(dut):
    """S2: SEND of 2500 B as FIRST/MIDDLE/LAST at PMTU 1024: one ACK for the LAST, MSN 1."""
    tb = TB(dut)
    await tb.start()
    buf = await _one_buffer(tb)
    data = bytes((i * 13 + 5) & 0xFF for i in range(2500))
    await tb.send(Op.SEND_FIRST, data[:1024], psn=PSN0)
    await tb.send(Op.SEND_MIDDLE, data[1024:2048], psn=PSN0 + 1)
    await tb.send(Op.SEND_LAST, data[2048:], psn=PSN0 + 2, ackreq=1)
    tb.expect_ack(await tb.recv_frame(), PSN0 + 2, 1)
    (cqe,) = await tb.wait_cqes(1)
    assert (cqe.wr_id, cqe.byte_len, cqe.status) == (100, 2500, 0)
    assert tb.dev.read(buf, 2500) == data


@cocotb.test()
async def s5_s6_sequence_nak_and_duplicate(dut):
    """S5: a PSN gap draws one NAK 0x60 at the ePSN, the next ahead packet is silently dropped;
    S6: a replay of an executed packet is ACKed at the last executed PSN, no second CQE."""
    tb = TB(dut)
    await tb.start()
    await _one_buffer(tb, wqes=2)
    await tb.send(Op.SEND_ONLY, b"a" * 8, psn=PSN0, ackreq=1)
    tb.expect_ack(await tb.recv_frame(), PSN0, 1)
    await tb.send(Op.SEND_ONLY, b"b" * 8, psn=PSN0 + 2, ackreq=1)      # PSN0+1 lost
    tb.expect_ack(await tb.recv_frame(), PSN0 + 1, 1, syndrome=0x60)
    await tb.send(Op.SEND_ONLY, b"c" * 8, psn=PSN0 + 3, ackreq=1)      # silently dropped
    await tb.send(Op.SEND_ONLY, b"a" * 8, psn=PSN0, ackreq=0)          # duplicate
    tb.expect_ack(await tb.recv_frame(), PSN0, 1)
    cqes = await tb.wait_cqes(1)
    await ClockCycles(dut.clk, 200)
    cqes += await tb.dev.poll_cq(tb.cq)
    assert [c.wr_id for c in cqes] == [100]
    c = await tb.regs.counters()
    assert c[7] == 1 and c[8] == 1, c
    assert tb.sink.empty()


@cocotb.test()
async def s8a_middle_without_first(dut):
    """S8a: SEND_MIDDLE with no message open: NAK 0x61, the QP to ERROR, the RQ flushed."""
    tb = TB(dut)
    await tb.start()
    await _one_buffer(tb)
    await tb.send(Op.SEND_MIDDLE, b"m" * 1024, psn=PSN0, ackreq=1)
    tb.expect_ack(await tb.recv_frame(), PSN0, 0, syndrome=0x61)
    cqes = await tb.wait_cqes(1)
    assert [(c.wr_id, c.status) for c in cqes] == [(100, WcStatus.WR_FLUSH_ERR)]
    assert (await tb.dev.query_qp(tb.qp))["state"] == 6


@cocotb.test()
async def s9_buffer_too_small(dut):
    """S9: SEND_ONLY of 200 B into a 100-byte buffer: NAK 0x63, LOC_QP_OP_ERR, nothing written."""
    tb = TB(dut)
    await tb.start()
    buf = await _one_buffer(tb, size=100)
    tb.dev.write(buf, bytes(100))
    await tb.send(Op.SEND_ONLY, b"z" * 200, psn=PSN0, ackreq=1)
    tb.expect_ack(await tb.recv_frame(), PSN0, 0, syndrome=0x63)
    (cqe,) = await tb.wait_cqes(1)
    assert (cqe.wr_id, cqe.status, cqe.opcode) == (100, WcStatus.LOC_QP_OP_ERR, WcOpcode.RECV)
    assert tb.dev.read(buf, 100) == bytes(100)
    assert (await tb.dev.query_qp(tb.qp))["state"] == 6


@cocotb.test()
async def s10_refused_invalidate(dut):
    """S10: SEND_ONLY_WITH_INVALIDATE naming an ordinary MR: positive ACK with the MSN not
    incremented, the data placed, REM_INV_REQ_ERR, the QP to ERROR, the key still valid."""
    tb = TB(dut)
    await tb.start()
    buf = await _one_buffer(tb)
    other = tb.dev.alloc(64)
    await tb.dev.reg_mr(6, key=0x600D, addr=other, length=64, pd=PD,
                        access=Access.REMOTE_WRITE)
    await tb.send(Op.SEND_ONLY_WITH_INVALIDATE, b"payload!", psn=PSN0, ackreq=1, ieth=0x600D)
    tb.expect_ack(await tb.recv_frame(), PSN0, 0)
    (cqe,) = await tb.wait_cqes(1)
    assert (cqe.wr_id, cqe.status) == (100, WcStatus.REM_INV_REQ_ERR)
    assert tb.dev.read(buf, 8) == b"payload!"
    assert (await tb.dev.query_key(6))["valid"] == 1
    assert (await tb.dev.query_qp(tb.qp))["state"] == 6


@cocotb.test()
async def s11b_s11c_writes(dut):
    """S11b: a zero-length WRITE with an unknown rkey is ACKed (C9-88); S11c: WRITE_ONLY_WITH_
    IMMEDIATE with a bad rkey: NAK 0x62 and the head WQE completes REM_ACCESS_ERR."""
    tb = TB(dut)
    await tb.start()
    await _one_buffer(tb, wqes=2)
    await tb.send(Op.RDMA_WRITE_ONLY, b"", psn=PSN0, ackreq=1,
                  reth={"va": 0x1234, "rkey": 0xBAD, "dmalen": 0})
    tb.expect_ack(await tb.recv_frame(), PSN0, 1)
    await tb.send(Op.RDMA_WRITE_ONLY_WITH_IMMEDIATE, b"q" * 16, psn=PSN0 + 1, ackreq=1,
                  reth={"va": 0x1234, "rkey": 0xBAD, "dmalen": 16}, imm=0x01020304)
    tb.expect_ack(await tb.recv_frame(), PSN0 + 1, 1, syndrome=0x62)
    cqes = await tb.wait_cqes(2)
    assert [(c.wr_id, c.status) for c in cqes] == [(100, WcStatus.REM_ACCESS_ERR),
                                                   (101, WcStatus.WR_FLUSH_ERR)]
    assert cqes[0].opcode == WcOpcode.RECV_RDMA_WITH_IMM


@cocotb.test()
async def s8bcd_sequence_and_length_errors(dut):
    """S8b/S8c/S8d: after SEND_FIRST, a SEND_ONLY, a MIDDLE of 1000 B (≠ PMTU), an empty LAST or
    an RDMA READ request each draw NAK 0x61; the WQE taken by the FIRST completes
    REM_INV_REQ_ERR (with its own wr_id, also after the READ), the QP goes to ERROR. Each case
    on a fresh QP (RESET, then connected again)."""
    tb = TB(dut)
    await tb.start()
    buf = await _one_buffer(tb, wqes=0)
    cases = [(Op.SEND_ONLY, b"o" * 10, None), (Op.SEND_MIDDLE, b"m" * 1000, None),
             (Op.SEND_LAST, b"", None),
             (Op.RDMA_READ_REQUEST, b"", {"va": buf, "rkey": 0x4321, "dmalen": 64})]
    for n, (op, payload, reth) in enumerate(cases):
        if n:
            await tb.dev.modify_qp(tb.qp, 0)                      # RESET clears the QP
            await tb.dev.connect(tb.qp)
        await tb.dev.post_recv(tb.qp, 200 + n, [(buf, 4096, 0x4321)])
        await tb.dev.post_recv(tb.qp, 300 + n, [(buf, 4096, 0x4321)])
        await tb.send(Op.SEND_FIRST, b"f" * 1024, psn=PSN0)
        await tb.send(op, payload, psn=PSN0 + 1, ackreq=1, **({"reth": reth} if reth else {}))
        tb.expect_ack(await tb.recv_frame(), PSN0 + 1, 0, syndrome=0x61)
        cqes = await tb.wait_cqes(2)
        assert [(c.wr_id, c.status) for c in cqes] == [(200 + n, WcStatus.REM_INV_REQ_ERR),
                                                       (300 + n, WcStatus.WR_FLUSH_ERR)], cqes
        assert (await tb.dev.query_qp(tb.qp))["state"] == 6
