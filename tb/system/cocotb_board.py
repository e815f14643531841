"""The board top's sequencer, simulated: it must reach PASS (and a corrupted run must FAIL)."""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from sim.knobs import knob


@cocotb.test()
async def board_reaches_pass(dut):
    expect = knob("BOARD_EXPECT")
    cocotb.start_soon(Clock(dut.clk, 20, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    for cycle in range(200_000):
        await RisingEdge(dut.clk)
        if int(dut.passed.value) or int(dut.failed.value):
            break
    passed, failed = int(dut.passed.value), int(dut.failed.value)
    dut._log.info("board: passed=%d failed=%d stage=%d after %d cycles", passed, failed,
                  int(dut.stage.value), cycle)
    if expect == "pass":
        assert passed and not failed, (passed, failed, int(dut.stage.value))
    else:
        assert failed and not passed, (passed, failed, int(dut.stage.value))
