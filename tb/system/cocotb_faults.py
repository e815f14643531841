"""Host-memory faults at the `rnic` top, through the contract only (interface.md §2, §4.4).

``sim.hostmem.HostMem.add_fault`` makes every access touching a range answer SLVERR or DECERR
(a faulting write burst writes nothing, a faulting read returns zeros). Each test puts a fault
under one *victim* QP's host memory, once with SLVERR and once with DECERR (a fresh victim QP
each time), and checks the promise of interface.md: the victim QP goes to ERROR and event 4
(host-memory fault) names it; and a *bystander* QP (its own CQ, RQ, buffers) keeps working:
SENDs to it are placed byte-exact, completed and ACKed before and after the fault.

* ``wqe_fetch_fault``: the victim's receive queue ring reads fault (a SEND needs its WQE);
* ``scatter_write_fault``: the victim's receive buffer writes fault;
* ``cqe_write_fault``: the victim's CQ ring writes fault (the victim has its own CQ);
* ``gather_read_fault``: a send WQE of the victim gathers from a buffer whose reads fault
  (the requester); its packet is never transmitted with the bad data.
"""

import cocotb
from cocotb.triggers import ClockCycles, with_timeout
from cocotbext.axi import AxiStreamFrame

from rnic.opcodes import Op, WcStatus
from sim.driver.regs import Regs
from sim.driver.verbs import Access, Device, QpState, SendOp
from sim.hostmem import AxiResp, HostMem
from sim.packets import LOCAL_IP, LOCAL_MAC, REMOTE_IP, REMOTE_MAC, build_frame, decode_frame
from sim.top_ports import top_ports

PD = 1
BYSTANDER = 3
PSN0 = 500
HOST_FAULT = 4
RESPS = (AxiResp.SLVERR, AxiResp.DECERR)


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.axil, self.src, self.sink = top_ports(dut)
        self.mem = HostMem(dut, "m_axi", dut.clk, dut.rst, seed=5, backpressure=False,
                           max_latency=4)
        self.regs = Regs(self.axil)
        self.dev = Device(self.regs, self.mem, base=0x1000_0000, size=1 << 24)
        self.psn = {}
        self.slot = 0

    async def start(self):
        dut, dev = self.dut, self.dev
        dut.rst.value = 1
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        await dev.open(LOCAL_MAC, LOCAL_IP)
        self.pool = dev.alloc(1 << 20, 4096)
        await dev.reg_mr(0, key=0x1000, addr=self.pool, length=1 << 20, pd=PD,
                         access=Access.LOCAL_WRITE)
        self.next_buf = self.pool
        self.bq = await self.new_qp(BYSTANDER, cqn=0)

    async def new_qp(self, qpn, cqn):
        cq = self.dev.cqs.get(cqn) or await self.dev.create_cq(cqn, 4)
        qp = await self.dev.create_qp(qpn, recv_cq=cq, send_cq=cq, pd=PD, dest_qpn=0x200 + qpn,
                                      remote_mac=REMOTE_MAC, remote_ip=REMOTE_IP,
                                      udp_sport=0xC123, pmtu=1024, rq_psn=PSN0, sq_psn=PSN0,
                                      access=Access.REMOTE_WRITE, min_rnr_timer=1)
        await self.dev.connect(qp)
        self.psn[qpn] = PSN0
        return qp

    def buf(self, n):
        b = self.next_buf
        self.next_buf += (n + 63) // 64 * 64 + 64
        return b

    async def send(self, qpn, payload):
        f = build_frame(Op.SEND_ONLY, payload, dqpn=qpn, psn=self.psn[qpn], ackreq=1)
        self.psn[qpn] = (self.psn[qpn] + 1) & 0xFFFFFF
        await self.src.send(AxiStreamFrame(f))

    def drain_tx(self):
        out = []
        while not self.sink.empty():
            d = decode_frame(bytes(self.sink.recv_nowait().tdata))
            assert d["icrc_ok"]
            out.append(d)
        return out

    async def wait_state(self, qp, state, cycles=20000):
        st = None
        for _ in range(cycles // 100):
            st = await self.dev.query_qp(qp)
            if st["state"] == state:
                return st
            await ClockCycles(self.dut.clk, 100)
        raise AssertionError(f"QP {qp.qpn} did not reach state {state}: {st}")

    async def wait_event(self, type_, number, cycles=20000):
        seen = []
        for _ in range(cycles // 100):
            seen += await self.dev.events()
            if any(e.type == type_ and e.number == number for e in seen):
                return seen
            await ClockCycles(self.dut.clk, 100)
        raise AssertionError(f"no event {type_} for QP {number}: {seen}")

    async def bystander_works(self, tag):
        """A SEND to the bystander QP: placed byte-exact, completed, ACKed."""
        data = bytes((tag * 31 + 7 * i) & 0xFF for i in range(200 + tag))
        b = self.buf(len(data))
        await self.dev.post_recv(self.bq, 0xB000 + tag, [(b, len(data), 0x1000)])
        await self.send(BYSTANDER, data)
        got = []
        for _ in range(200):
            got += await self.dev.poll_cq(self.bq.recv_cq)
            if got:
                break
            await ClockCycles(self.dut.clk, 50)
        assert [(c.wr_id, c.byte_len, c.status, c.qpn) for c in got] == \
            [(0xB000 + tag, len(data), WcStatus.SUCCESS, BYSTANDER)], got
        assert self.dev.read(b, len(data)) == data
        await ClockCycles(self.dut.clk, 100)
        acks = [d for d in self.drain_tx() if d["bth"]["dqpn"] == 0x200 + BYSTANDER]
        assert acks and acks[-1]["aeth"]["syndrome"] == 0x1F \
            and acks[-1]["bth"]["psn"] == (self.psn[BYSTANDER] - 1) & 0xFFFFFF, acks
        assert (await self.dev.query_qp(self.bq))["state"] == QpState.RTS


async def _fault_case(dut, setup):
    """Run ``setup(tb, qp, resp)`` (which arms a fault and provokes it) for SLVERR then DECERR
    on victims 4 and 5, then check the victim's ERROR state and event 4, and the bystander."""
    tb = TB(dut)
    await tb.start()
    await tb.bystander_works(1)
    for k, resp in enumerate(RESPS):
        qpn = 4 + k
        qp = await tb.new_qp(qpn, cqn=1 + k)
        await setup(tb, qp, resp)
        await tb.wait_event(HOST_FAULT, qpn)
        await tb.wait_state(qp, QpState.ERROR)
        await tb.bystander_works(2 + k)
        tb.mem.clear_faults()
        dut._log.info("%s: QP %d in ERROR with event 4; bystander fine", resp.name, qpn)
    tb.mem.check()
    return tb


@cocotb.test()
async def wqe_fetch_fault(dut):
    """A SEND whose receive WQE read faults: event 4, the QP to ERROR, nothing written, no
    success CQE; the bystander keeps working."""
    async def setup(tb, qp, resp):
        b = tb.buf(64)
        tb.dev.write(b, b"\xEE" * 64)
        tb.mem.add_fault(qp.rq_base, 64 << qp.rq_log2, "r", resp)
        await tb.dev.post_recv(qp, 0xA1, [(b, 64, 0x1000)])
        tb.victim_buf = b
        await tb.send(qp.qpn, b"v" * 64)
        tb.victim_cq = qp.recv_cq
    tb = await _fault_case(dut, setup)
    assert tb.dev.read(tb.victim_buf, 64) == b"\xEE" * 64, "a faulted WQE fetch wrote data"


@cocotb.test()
async def scatter_write_fault(dut):
    """A SEND whose payload write faults: event 4, the QP to ERROR, no success CQE for it."""
    async def setup(tb, qp, resp):
        b = tb.buf(128)
        tb.mem.add_fault(b, 128, "w", resp)
        await tb.dev.post_recv(qp, 0xA2, [(b, 128, 0x1000)])
        await tb.send(qp.qpn, b"w" * 100)
        tb.victim_cq = qp.recv_cq
    tb = await _fault_case(dut, setup)
    cqes = await tb.dev.poll_cq(tb.victim_cq)
    assert all(c.status != WcStatus.SUCCESS for c in cqes), cqes


@cocotb.test()
async def cqe_write_fault(dut):
    """A SEND whose data lands but whose CQE write faults: event 4, the QP to ERROR."""
    async def setup(tb, qp, resp):
        b = tb.buf(64)
        cq = qp.recv_cq
        tb.mem.add_fault(cq.base, 32 * cq.entries, "w", resp)
        await tb.dev.post_recv(qp, 0xA3, [(b, 64, 0x1000)])
        await tb.send(qp.qpn, b"c" * 50)
    await _fault_case(dut, setup)


@cocotb.test()
async def gather_read_fault(dut):
    """A send WQE whose gather read faults: event 4, the QP to ERROR, no frame carries the
    faulted data (a faulting read returns zeros; the packet must be dropped)."""
    async def setup(tb, qp, resp):
        b = tb.buf(256)
        tb.dev.write(b, b"g" * 256)
        tb.mem.add_fault(b, 256, "r", resp)
        tb.drain_tx()
        await tb.dev.post_send(qp, 0xA4, SendOp.SEND, [(b, 256, 0x1000)])
        tb.gather_qpn = qp.qpn
    tb = await _fault_case(dut, setup)
    # no SEND left for the victims' remote QPNs (the bystander's ACKs are drained already)
    sent = [d for d in tb.drain_tx() if d["bth"]["dqpn"] in (0x204, 0x205)
            and d["bth"]["opcode"] <= Op.SEND_ONLY_WITH_INVALIDATE]
    assert not [d for d in sent if len(d["payload"]) == 256], sent
