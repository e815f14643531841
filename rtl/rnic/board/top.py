"""Board tops: one ``rnic`` core kept alive by on-chip surroundings.

``BoardCore`` = the core (reduced configuration, :data:`BOARD_CONFIG`) + host memory on block
RAM (:class:`~rnic.board.bram_axi.BramAxi`, loaded with the image the driver left) + the
:class:`~rnic.board.sequencer.Sequencer` that programs the core over AXI4-Lite, plays the
9-step SEND in and checks the ACK and the CQE. Its outputs ``passed``, ``failed`` and ``stage``
are all a board needs; ``tb/system/test_board.py`` simulates it to PASS.

``ECPIX5Top`` puts ``BoardCore`` on the ECPIX-5 85F (``amaranth_boards.ecpix5``): the 100 MHz
oscillator through an EHXPLLL to a 50 MHz core clock, reset held while the PLL is unlocked or the
reset button is pressed, RGB LED 0 green on PASS, red on FAIL, blue while running; LED 1 shows
the sequencer stage in binary; LED 2 red blinks at ~1.5 Hz as a heartbeat.
"""

from amaranth.hdl import ClockDomain, ClockSignal, Elaboratable, Instance, Module, Signal
from amaranth.lib.cdc import ResetSynchronizer

from ..params import RnicConfig
from ..top import RNIC
from .bram_axi import BramAxi
from .program import MEM_BYTES
from .sequencer import Sequencer

__all__ = ["BOARD_CONFIG", "BoardCore", "ECPIX5Top", "CORE_MHZ"]

#: the reduced configuration that fits an LFE5UM5G-85F next to its surroundings
BOARD_CONFIG = RnicConfig(data_width=64, num_qp=4, num_cq=1, key_entries=4, clock_mhz=50)
CORE_MHZ = 50


class BoardCore(Elaboratable):
    def __init__(self, config, program, *, timeout=1 << 22, retries=1 << 12):
        self.config = config
        self.program = program
        self.mem_bytes = MEM_BYTES
        self.timeout = timeout
        self.retries = retries
        self.passed = Signal()
        self.failed = Signal()
        self.stage = Signal(3)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        W = cfg.data_width
        m.submodules.core = core = RNIC(cfg)
        m.submodules.ram = ram = BramAxi(W, self.mem_bytes, self.program.mem)
        m.submodules.seq = seq = Sequencer(self.program, width=W, abits=ram.abits,
                                           timeout=self.timeout, retries=self.retries)
        # host memory: core m_axi_* <-> RAM
        for name in ("awid", "awaddr", "awlen", "awsize", "awburst", "awvalid",
                     "arid", "araddr", "arlen", "arsize", "arburst", "arvalid",
                     "wdata", "wstrb", "wlast", "wvalid", "bready", "rready"):
            m.d.comb += getattr(ram, name).eq(getattr(core, f"m_axi_{name}"))
        for name in ("awready", "arready", "wready", "bid", "bresp", "bvalid",
                     "rid", "rdata", "rresp", "rlast", "rvalid"):
            m.d.comb += getattr(core, f"m_axi_{name}").eq(getattr(ram, name))
        # control: sequencer -> core s_axil_*
        for name in ("awaddr", "awvalid", "wdata", "wstrb", "wvalid", "bready",
                     "araddr", "arvalid", "rready"):
            m.d.comb += getattr(core, f"s_axil_{name}").eq(getattr(seq, name))
        for name in ("awready", "wready", "bvalid", "arready", "rdata", "rvalid"):
            m.d.comb += getattr(seq, name).eq(getattr(core, f"s_axil_{name}"))
        # MAC side: frame ROM -> s_axis_rx, m_axis_tx -> ACK checker
        m.d.comb += [
            core.s_axis_rx_tdata.eq(seq.rx_tdata), core.s_axis_rx_tkeep.eq(seq.rx_tkeep),
            core.s_axis_rx_tlast.eq(seq.rx_tlast), core.s_axis_rx_tvalid.eq(seq.rx_tvalid),
            core.s_axis_rx_tuser.eq(0), seq.rx_tready.eq(core.s_axis_rx_tready),
            seq.tx_tdata.eq(core.m_axis_tx_tdata), seq.tx_tkeep.eq(core.m_axis_tx_tkeep),
            seq.tx_tlast.eq(core.m_axis_tx_tlast), seq.tx_tvalid.eq(core.m_axis_tx_tvalid),
            core.m_axis_tx_tready.eq(seq.tx_tready),
            ram.chk_addr.eq(seq.chk_addr), seq.chk_data.eq(ram.chk_data),
            self.passed.eq(seq.passed), self.failed.eq(seq.failed), self.stage.eq(seq.stage),
        ]
        return m


class ECPIX5Top(Elaboratable):
    """``BoardCore`` on the ECPIX-5 85F, clocked at :data:`CORE_MHZ` from a PLL, playing
    ``program`` (a :class:`~rnic.board.program.Program`)."""

    def __init__(self, program, config=BOARD_CONFIG):
        self.config = config
        self.program = program

    def elaborate(self, platform):
        m = Module()
        clk100 = platform.request("clk100", 0)
        rst_n = platform.request("rst", 0)        # PinsN: .i is 1 while the button is pressed
        m.domains.sync = ClockDomain("sync")
        locked = Signal()
        clk = Signal()
        # 100 MHz -> 50 MHz: PFD 50 MHz, VCO 600 MHz (yowasp-ecppll -i 100 -o 50)
        m.submodules.pll = Instance(
            "EHXPLLL",
            a_FREQUENCY_PIN_CLKI="100", a_FREQUENCY_PIN_CLKOP=str(CORE_MHZ),
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
            a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
            p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
            p_CLKI_DIV=2, p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=12, p_CLKOP_CPHASE=5,
            p_CLKOP_FPHASE=0, p_FEEDBK_PATH="CLKOP", p_CLKFB_DIV=1,
            i_RST=0, i_STDBY=0, i_CLKI=clk100.i, o_CLKOP=clk, i_CLKFB=clk,
            i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1,
            i_PLLWAKESYNC=0, i_ENCLKOP=0, o_LOCK=locked)
        m.d.comb += ClockSignal("sync").eq(clk)
        m.submodules.rst_sync = ResetSynchronizer(~locked | rst_n.i, domain="sync")

        m.submodules.board = board = BoardCore(self.config, self.program)
        led0 = platform.request("rgb_led", 0)
        led1 = platform.request("rgb_led", 1)
        led2 = platform.request("rgb_led", 2)
        beat = Signal(25)
        m.d.sync += beat.eq(beat + 1)
        m.d.comb += [
            led0.g.o.eq(board.passed), led0.r.o.eq(board.failed),
            led0.b.o.eq(~board.passed & ~board.failed),
            led1.r.o.eq(board.stage[0]), led1.g.o.eq(board.stage[1]),
            led1.b.o.eq(board.stage[2]),
            led2.r.o.eq(beat[-1]),
        ]
        return m
