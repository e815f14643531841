"""The ``rnic`` top's host-side ports as cocotbext-axi drivers, for the system benches."""

import cocotb
from cocotb.clock import Clock
from cocotbext.axi import (AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamSink,
                           AxiStreamSource)

__all__ = ["top_ports"]


def top_ports(dut, prefix=""):
    """Start a 10 ns clock on ``dut.clk``; return ``(axil, src, sink)``.

    ``axil`` drives the register port ``<prefix>s_axil``, ``src`` the RX stream
    ``<prefix>s_axis_rx`` and ``sink`` takes the TX stream ``<prefix>m_axis_tx``.
    """
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, f"{prefix}s_axil"), dut.clk, dut.rst)
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, f"{prefix}s_axis_rx"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, f"{prefix}m_axis_tx"), dut.clk, dut.rst)
    return axil, src, sink
