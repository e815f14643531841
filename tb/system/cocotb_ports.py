"""The output ports of the file `rnic generate` writes, by interface.md §1, on every cycle.

From the first rising edge of ``clk`` (with ``rst`` high) every handshake output, ``irq`` and
every AXI-Lite response is 0 or 1, and each data, address or sideband output is fully defined
(no X, no Z) whenever its valid is high. The bench drives every input from time 0, holds
``rst`` for a few cycles, then runs a short SEND exchange in both directions (responder: a
SEND_ONLY in, its data and CQE in host memory, its ACK out; requester: a posted SEND out, its
ACK in, its send CQE), checking the ports on every cycle throughout. X is left as X (cocotb's
default), so any read of an X elsewhere fails as well.
"""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, with_timeout
from cocotbext.axi import (AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamFrame,
                           AxiStreamSink, AxiStreamSource)

from rnic.opcodes import Op, WcOpcode, WcStatus
from sim.driver.regs import Regs
from sim.driver.verbs import Access, Device, SendOp
from sim.hostmem import HostMem
from sim.packets import LOCAL_IP, LOCAL_MAC, REMOTE_IP, REMOTE_MAC, build_frame, decode_frame

QPN, DEST_QPN, PD = 2, 0x11, 1
RQ_PSN, SQ_PSN = 1000, 5000

# handshakes and responses: 0 or 1 on every cycle
ALWAYS = ["s_axis_rx_tready", "m_axis_tx_tvalid", "m_axi_awvalid", "m_axi_wvalid",
          "m_axi_bready", "m_axi_arvalid", "m_axi_rready", "s_axil_awready", "s_axil_wready",
          "s_axil_bvalid", "s_axil_bresp", "s_axil_arready", "s_axil_rvalid", "s_axil_rresp",
          "irq"]
# payloads: defined whenever their valid is high
WHEN_VALID = {
    "m_axis_tx_tvalid": ["m_axis_tx_tdata", "m_axis_tx_tkeep", "m_axis_tx_tlast",
                         "m_axis_tx_tuser"],
    "m_axi_awvalid": ["m_axi_awid", "m_axi_awaddr", "m_axi_awlen", "m_axi_awsize",
                      "m_axi_awburst"],
    "m_axi_wvalid": ["m_axi_wdata", "m_axi_wstrb", "m_axi_wlast"],
    "m_axi_arvalid": ["m_axi_arid", "m_axi_araddr", "m_axi_arlen", "m_axi_arsize",
                      "m_axi_arburst"],
    "s_axil_rvalid": ["s_axil_rdata"],
}
INPUTS = ["rst", "s_axis_rx_tdata", "s_axis_rx_tkeep", "s_axis_rx_tvalid", "s_axis_rx_tlast",
          "s_axis_rx_tuser", "m_axis_tx_tready", "m_axi_awready", "m_axi_wready", "m_axi_bid",
          "m_axi_bresp", "m_axi_bvalid", "m_axi_arready", "m_axi_rid", "m_axi_rdata",
          "m_axi_rresp", "m_axi_rlast", "m_axi_rvalid", "s_axil_awaddr", "s_axil_awvalid",
          "s_axil_wdata", "s_axil_wstrb", "s_axil_wvalid", "s_axil_bready", "s_axil_araddr",
          "s_axil_arvalid", "s_axil_rready"]


def _defined(handle):
    return handle.value.is_resolvable


class PortMonitor:
    """Checks the rule on every rising edge from the first; counts cycles and valid beats."""

    def __init__(self, dut):
        self.dut = dut
        self.cycles = 0
        self.beats = {v: 0 for v in WHEN_VALID}
        self.errors = []
        cocotb.start_soon(self._run())

    async def _run(self):
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            self.cycles += 1
            rst = dut.rst.value
            for name in ALWAYS:
                if not _defined(getattr(dut, name)):
                    self._error(f"{name} = {getattr(dut, name).value} (rst={rst})")
            for valid, payload in WHEN_VALID.items():
                v = getattr(dut, valid).value
                if v.is_resolvable and int(v):
                    self.beats[valid] += 1
                    for name in payload:
                        if not _defined(getattr(dut, name)):
                            self._error(f"{name} = {getattr(dut, name).value} while {valid}")

    def _error(self, what):
        if len(self.errors) < 20:
            self.errors.append(f"cycle {self.cycles}: {what}")

    def check(self):
        assert not self.errors, "outputs not defined:\n" + "\n".join(self.errors)


@cocotb.test()
async def ports_defined(dut):
    # every input driven from time 0, before the first edge
    for name in INPUTS:
        getattr(dut, name).value = 0
    dut.rst.value = 1
    dut.clk.value = 0
    mon = PortMonitor(dut)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start(start_high=False))
    await ClockCycles(dut.clk, 5)
    assert mon.cycles >= 4 and not mon.errors, mon.errors   # the edges of reset so far
    axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis_rx"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis_tx"), dut.clk, dut.rst)
    mem = HostMem(dut, "m_axi", dut.clk, dut.rst, seed=5, max_latency=0)
    regs = Regs(axil)
    dev = Device(regs, mem, base=0x1000_0000, size=1 << 20)
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0

    async def recv():
        frame = await with_timeout(sink.recv(), 200, "us")
        d = decode_frame(bytes(frame.tdata))
        assert d["icrc_ok"]
        assert d["eth"]["dst"] == REMOTE_MAC and d["ipv4"]["dst"] == REMOTE_IP
        assert d["bth"]["dqpn"] == DEST_QPN
        return d

    async def cqes(cq, n):
        got = []
        for _ in range(400):
            got += await dev.poll_cq(cq)
            if len(got) >= n:
                return got
            await ClockCycles(dut.clk, 50)
        raise AssertionError(f"expected {n} CQEs, got {got}")

    await dev.open(LOCAL_MAC, LOCAL_IP)
    cq = await dev.create_cq(0, 4)
    qp = await dev.create_qp(QPN, recv_cq=cq, send_cq=cq, pd=PD, dest_qpn=DEST_QPN,
                             remote_mac=REMOTE_MAC, remote_ip=REMOTE_IP, udp_sport=0xC123,
                             pmtu=1024, rq_psn=RQ_PSN, sq_psn=SQ_PSN, access=Access.REMOTE_WRITE)
    await dev.connect(qp)
    buf = dev.alloc(4096)
    await dev.reg_mr(0, key=0x1234, addr=buf, length=4096, pd=PD, access=Access.LOCAL_WRITE)

    # responder: SEND_ONLY in, data and CQE in host memory, ACK out
    await dev.post_recv(qp, 0xABC, [(buf, 2048, 0x1234)])
    payload = bytes((5 * i + 1) & 0xFF for i in range(300))
    await src.send(AxiStreamFrame(build_frame(Op.SEND_ONLY, payload, dqpn=QPN, psn=RQ_PSN,
                                              ackreq=1)))
    d = await recv()
    assert d["bth"]["opcode"] == Op.ACKNOWLEDGE and d["bth"]["psn"] == RQ_PSN
    (cqe,) = await cqes(cq, 1)
    assert (cqe.wr_id, cqe.byte_len, cqe.status, cqe.opcode) == \
        (0xABC, 300, WcStatus.SUCCESS, WcOpcode.RECV)
    assert dev.read(buf, 300) == payload

    # requester: a posted SEND out, its ACK in, the send CQE
    out = bytes((3 * i + 7) & 0xFF for i in range(200))
    dev.write(buf + 2048, out)
    await dev.post_send(qp, 0xDEF, SendOp.SEND, [(buf + 2048, len(out), 0x1234)])
    d = await recv()
    assert d["bth"]["opcode"] == Op.SEND_ONLY and d["bth"]["psn"] == SQ_PSN
    assert d["payload"] == out
    await src.send(AxiStreamFrame(build_frame(Op.ACKNOWLEDGE, b"", dqpn=QPN, psn=SQ_PSN,
                                              aeth=dict(syndrome=0x1F, msn=1))))
    (cqe,) = await cqes(cq, 1)
    assert (cqe.wr_id, cqe.status, cqe.opcode) == (0xDEF, WcStatus.SUCCESS, WcOpcode.SEND)
    await ClockCycles(dut.clk, 20)
    mon.check()
    # the exchange exercised every payload the rule covers
    assert all(n > 0 for n in mon.beats.values()), mon.beats
    mem.check()
