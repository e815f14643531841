"""cocotb smoke test of the `rnic` top through its contract ports only."""
import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamFrame, AxiStreamSource

from rnic.control.regmap import ID_VALUE
from sim.driver.regs import Regs


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
    # frames: one marked bad by the MAC, two good ones (not for any QP yet: counted as 2)
    await src.send(AxiStreamFrame(bytes(range(60)), tuser=1))
    await src.send(AxiStreamFrame(bytes(64)))
    await src.send(AxiStreamFrame(bytes(100)))
    await src.wait()
    stalls = 0
    for _ in range(20):
        await RisingEdge(dut.clk)
        await ReadOnly()
        stalls += int(dut.s_axis_rx_tready.value) == 0
        assert dut.m_axis_tx_tvalid.value == 0
        assert dut.m_axi_awvalid.value == 0 and dut.m_axi_arvalid.value == 0
        assert dut.m_axi_wvalid.value == 0 and dut.irq.value == 0
    assert stalls == 0
    c = await regs.counters()
    assert c[0] == 3 and c[1] == 1 and c[2] == 2, c
    assert c[0] == sum(c[1:7]) + c[15]
