"""AXI4-Lite slave turning bus transactions into single-cycle register accesses."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxiLiteSignature", "AxiLiteSlave"]


def AxiLiteSignature(addr_width=16, data_width=32):
    """AXI4-Lite as seen by the slave (``In`` = driven by the master)."""
    return wiring.Signature({
        "awaddr": In(addr_width), "awvalid": In(1), "awready": Out(1),
        "wdata": In(data_width), "wstrb": In(data_width // 8), "wvalid": In(1), "wready": Out(1),
        "bresp": Out(2), "bvalid": Out(1), "bready": In(1),
        "araddr": In(addr_width), "arvalid": In(1), "arready": Out(1),
        "rdata": Out(data_width), "rresp": Out(2), "rvalid": Out(1), "rready": In(1),
    })


class AxiLiteSlave(wiring.Component):
    """AXI4-Lite slave: 16-bit byte addresses, 32-bit data, responses always OKAY.

    Address and write data are taken independently (each has its own holding register). A write
    whose ``wstrb`` is not 0xF is acknowledged and otherwise ignored. A register may hold the bus
    with ``wr_ready`` (e.g. a full doorbell queue): the write response waits for it.

    Attributes
    ----------
    bus : Out(AxiLiteSignature())
        The AXI4-Lite port.
    wr_addr : Out(16), wr_data : Out(32), wr_en : Out(1)
        One write, valid while ``wr_en``; it is done in the cycle ``wr_en & wr_ready``.
    wr_ready : In(1)
        The register decoder can take the write this cycle.
    rd_addr : Out(16), rd_en : Out(1)
        One read, for one cycle; ``rd_data`` must answer combinationally in that cycle (a read
        with a side effect, such as popping EVENT, acts on ``rd_en``).
    rd_data : In(32)
    """

    bus: Out(AxiLiteSignature())
    wr_addr: Out(16)
    wr_data: Out(32)
    wr_en: Out(1)
    wr_ready: In(1)
    rd_addr: Out(16)
    rd_en: Out(1)
    rd_data: In(32)

    def elaborate(self, platform):
        m = Module()
        bus = self.bus

        aw_held, w_held = Signal(), Signal()
        aw_addr, w_data, w_strb = Signal(16), Signal(32), Signal(4)
        m.d.comb += [bus.awready.eq(~aw_held), bus.wready.eq(~w_held),
                     bus.bresp.eq(0), bus.rresp.eq(0)]
        with m.If(bus.awvalid & ~aw_held):
            m.d.sync += [aw_held.eq(1), aw_addr.eq(bus.awaddr)]
        with m.If(bus.wvalid & ~w_held):
            m.d.sync += [w_held.eq(1), w_data.eq(bus.wdata), w_strb.eq(bus.wstrb)]

        full_word = w_strb == 0xF
        m.d.comb += [self.wr_addr.eq(aw_addr), self.wr_data.eq(w_data),
                     self.wr_en.eq(aw_held & w_held & ~bus.bvalid & full_word)]
        done = aw_held & w_held & ~bus.bvalid & (~full_word | self.wr_ready)
        with m.If(done):
            m.d.sync += [aw_held.eq(0), w_held.eq(0), bus.bvalid.eq(1)]
        with m.Elif(bus.bvalid & bus.bready):
            m.d.sync += bus.bvalid.eq(0)

        ar_held = Signal()
        ar_addr = Signal(16)
        m.d.comb += bus.arready.eq(~ar_held & ~bus.rvalid)
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += [ar_held.eq(1), ar_addr.eq(bus.araddr)]
        m.d.comb += [self.rd_addr.eq(ar_addr), self.rd_en.eq(ar_held)]
        with m.If(ar_held):
            m.d.sync += [bus.rdata.eq(self.rd_data), bus.rvalid.eq(1), ar_held.eq(0)]
        with m.Elif(bus.rvalid & bus.rready):
            m.d.sync += bus.rvalid.eq(0)
        return m
