"""Host memory on block RAM: a small AXI4 slave for the board build.

One transaction per direction at a time (a write burst and a read burst may overlap): AW, then
the W beats (byte strobes honoured), then B with the AW ID; AR, then the R beats, each two cycles
(address, then the registered RAM data), RLAST on the last, the AR ID on every beat. INCR bursts
only (what the core issues); the address wraps modulo the RAM size. A second, independent read
port (``chk_addr``/``chk_data``, one cycle latency) lets the sequencer check the RAM.

Ports are plain signals named as the core's ``m_axi_*`` ports without the prefix.
"""

from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib.memory import Memory

__all__ = ["BramAxi"]


class BramAxi(Elaboratable):
    def __init__(self, width=64, size=16 * 1024, init=b""):
        assert width % 8 == 0 and size % (width // 8) == 0
        self.width = width
        self.lanes = width // 8
        self.depth = size // self.lanes
        self.abits = (self.depth - 1).bit_length()
        self.lbits = (self.lanes - 1).bit_length()
        words = []
        init = bytes(init).ljust(size, b"\0")
        for i in range(self.depth):
            words.append(int.from_bytes(init[i * self.lanes:(i + 1) * self.lanes], "little"))
        self._init = words
        W = width
        for ch in ("aw", "ar"):
            setattr(self, f"{ch}id", Signal(8, name=f"{ch}id"))
            setattr(self, f"{ch}addr", Signal(64, name=f"{ch}addr"))
            setattr(self, f"{ch}len", Signal(8, name=f"{ch}len"))
            setattr(self, f"{ch}size", Signal(3, name=f"{ch}size"))
            setattr(self, f"{ch}burst", Signal(2, name=f"{ch}burst"))
            setattr(self, f"{ch}valid", Signal(name=f"{ch}valid"))
            setattr(self, f"{ch}ready", Signal(name=f"{ch}ready"))
        self.wdata = Signal(W)
        self.wstrb = Signal(W // 8)
        self.wlast = Signal()
        self.wvalid = Signal()
        self.wready = Signal()
        self.bid = Signal(8)
        self.bresp = Signal(2)
        self.bvalid = Signal()
        self.bready = Signal()
        self.rid = Signal(8)
        self.rdata = Signal(W)
        self.rresp = Signal(2)
        self.rlast = Signal()
        self.rvalid = Signal()
        self.rready = Signal()
        # the sequencer's check port (word address)
        self.chk_addr = Signal(self.abits)
        self.chk_data = Signal(W)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=self.width, depth=self.depth, init=self._init)
        wp = mem.write_port(granularity=8)
        rp = mem.read_port(transparent_for=())
        cp = mem.read_port(transparent_for=())
        m.d.comb += [cp.addr.eq(self.chk_addr), self.chk_data.eq(cp.data), cp.en.eq(1)]

        def word(addr):
            return addr[self.lbits:self.lbits + self.abits]

        # ---- writes -----------------------------------------------------------------------
        waddr = Signal(self.abits)
        wid = Signal(8)
        m.d.comb += [wp.addr.eq(waddr), wp.data.eq(self.wdata), self.bid.eq(wid),
                     self.bresp.eq(0)]
        with m.FSM(name="wr"):
            with m.State("AW"):
                m.d.comb += self.awready.eq(1)
                with m.If(self.awvalid):
                    m.d.sync += [waddr.eq(word(self.awaddr)), wid.eq(self.awid)]
                    m.next = "W"
            with m.State("W"):
                m.d.comb += self.wready.eq(1)
                with m.If(self.wvalid):
                    m.d.comb += wp.en.eq(self.wstrb)
                    m.d.sync += waddr.eq(waddr + 1)
                    with m.If(self.wlast):
                        m.next = "B"
            with m.State("B"):
                m.d.comb += self.bvalid.eq(1)
                with m.If(self.bready):
                    m.next = "AW"

        # ---- reads ------------------------------------------------------------------------
        raddr = Signal(self.abits)
        rleft = Signal(8)
        rid = Signal(8)
        ren = Signal()              # a read port's enable resets to 1: hold the data otherwise
        m.d.comb += [rp.en.eq(ren), rp.addr.eq(raddr), self.rdata.eq(rp.data), self.rid.eq(rid),
                     self.rresp.eq(0), self.rlast.eq(rleft == 0)]
        with m.FSM(name="rd"):
            with m.State("AR"):
                m.d.comb += self.arready.eq(1)
                with m.If(self.arvalid):
                    m.d.sync += [raddr.eq(word(self.araddr)), rid.eq(self.arid),
                                 rleft.eq(self.arlen)]
                    m.next = "ADDR"
            with m.State("ADDR"):
                m.d.comb += ren.eq(1)
                m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += self.rvalid.eq(1)
                with m.If(self.rready):
                    m.d.sync += [raddr.eq(raddr + 1), rleft.eq(rleft - 1)]
                    with m.If(rleft == 0):
                        m.next = "AR"
                    with m.Else():
                        m.next = "ADDR"
        return m
