"""cocotb smoke test of the `rnic` top through its contract ports only."""
import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamFrame, AxiStreamSource

from rnic.control.regmap import ID_VALUE
from rnic.opcodes import Op
from sim.driver.regs import Regs
from sim.packets import LOCAL_IP, LOCAL_MAC, build_frame


@cocotb.test()
async def top_smoke(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis_rx"), dut.clk, dut.rst)
    dut.m_axis_tx_tready.value = 1
    for s in ("awready", "wready", "arready", "bvalid", "rvalid"):
        getattr(dut, f"m_axi_{s}").value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    regs = Regs(axil)
    # the reset sweep: busy right after reset, then idle
    assert (await regs.status())[0] == 1
    assert await regs.read("ID") == ID_VALUE
    await regs.wait_idle()
    await regs.set_local(LOCAL_MAC, LOCAL_IP)
    # frames: one marked bad by the MAC, one for another MAC, one good RoCE frame (no QP yet)
    good = build_frame(Op.SEND_ONLY, b"hello", dqpn=5, psn=1)
    await src.send(AxiStreamFrame(good, tuser=1))
    await src.send(AxiStreamFrame(build_frame(Op.SEND_ONLY, b"x", dst_mac=0x020000000009)))
    await src.send(AxiStreamFrame(good))
    await src.wait()
    stalls = 0
    for _ in range(60):
        await RisingEdge(dut.clk)
        await ReadOnly()
        stalls += int(dut.s_axis_rx_tready.value) == 0
        assert dut.m_axis_tx_tvalid.value == 0
        assert dut.m_axi_awvalid.value == 0 and dut.m_axi_arvalid.value == 0
        assert dut.m_axi_wvalid.value == 0 and dut.irq.value == 0
    assert stalls == 0
    c = await regs.counters()
    assert c[0] == 3 and c[1] == 1 and c[2] == 1 and c[6] == 1, c
    assert c[0] == sum(c[1:7]) + c[15]
