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
    with ``wr_ready`` (e.g. a nearly full doorbell queue): the write waits for it.

    Both directions are registered for timing: a write leaves as a one-cycle ``wr_en`` pulse
    from registers (the cycle its B response is raised; address and data from the holding
    registers), and a read is a one-cycle ``rd_en``
    pulse after which the register file has ``read_latency`` cycles to present ``rd_data``.

    Parameters
    ----------
    read_latency : int
        Cycles from ``rd_en`` to the cycle ``rd_data`` is sampled (≥ 0).

    Attributes
    ----------
    bus : Out(AxiLiteSignature())
        The AXI4-Lite port (its ``In`` members are driven by the master).
    wr_addr : Out(16), wr_data : Out(32), wr_en : Out(1)
        One write, for one cycle.
    wr_ready : In(1)
        The register decoder can take one more write (sampled before the write is issued, so it
        must already account for a write in flight).
    rd_ready : In(1)
        The register file can serve the read at ``rd_addr`` now: while low, ``rd_en`` waits.
    rd_addr : Out(16), rd_en : Out(1)
        One read, for one cycle (a read with a side effect, such as popping EVENT, acts on it).
    rd_data : In(32)
        Sampled ``read_latency`` cycles after ``rd_en``.
    """

    bus: Out(AxiLiteSignature())
    wr_addr: Out(16)
    wr_data: Out(32)
    wr_en: Out(1)
    wr_ready: In(1)
    rd_ready: In(1)
    rd_addr: Out(16)
    rd_en: Out(1)
    rd_data: In(32)

    def __init__(self, *, read_latency=1):
        if not isinstance(read_latency, int) or read_latency < 0:
            raise ValueError(f"read_latency must be a non-negative integer, not {read_latency!r}")
        self.read_latency = read_latency
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        bus = self.bus

        aw_held, w_held = Signal(), Signal()
        aw_addr, w_data = Signal(16), Signal(32)
        full_word = Signal()            # wstrb was 0xF
        m.d.comb += [bus.awready.eq(~aw_held), bus.wready.eq(~w_held),
                     bus.bresp.eq(0), bus.rresp.eq(0)]
        with m.If(bus.awvalid & ~aw_held):
            m.d.sync += [aw_held.eq(1), aw_addr.eq(bus.awaddr)]
        with m.If(bus.wvalid & ~w_held):
            m.d.sync += [w_held.eq(1), w_data.eq(bus.wdata), full_word.eq(bus.wstrb == 0xF)]

        done = aw_held & w_held & ~bus.bvalid & (~full_word | self.wr_ready)
        m.d.sync += self.wr_en.eq(done & full_word)
        # the holding registers are the write's address and data: a new AW or W is taken no
        # earlier than the wr_en cycle, and lands after it
        m.d.comb += [self.wr_addr.eq(aw_addr), self.wr_data.eq(w_data)]
        with m.If(done):
            m.d.sync += [aw_held.eq(0), w_held.eq(0), bus.bvalid.eq(1)]
        with m.Elif(bus.bvalid & bus.bready):
            m.d.sync += bus.bvalid.eq(0)

        # read: AR taken -> rd_en (1 cycle) -> read_latency cycles -> R
        busy = Signal()
        ar_addr = Signal(16)
        m.d.comb += bus.arready.eq(~busy & ~bus.rvalid)
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += [busy.eq(1), ar_addr.eq(bus.araddr)]
        stage = Signal(range(self.read_latency + 2))
        m.d.comb += [self.rd_addr.eq(ar_addr),
                     self.rd_en.eq(busy & (stage == 0) & self.rd_ready)]
        with m.If(self.rd_en | (stage != 0)):
            with m.If(stage == self.read_latency):
                m.d.sync += [bus.rdata.eq(self.rd_data), bus.rvalid.eq(1), busy.eq(0),
                             stage.eq(0)]
            with m.Else():
                m.d.sync += stage.eq(stage + 1)
        with m.Elif(bus.rvalid & bus.rready):
            m.d.sync += bus.rvalid.eq(0)
        return m
