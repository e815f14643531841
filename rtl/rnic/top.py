"""The ``rnic`` top module: every port of interface.md §2 by its exact Verilog name.

This is the composer of the core (the LUNA pattern): it instantiates the blocks and connects
them, so the data path reads top to bottom here. Blocks that have not landed yet are replaced
by stubs that keep every output driven and every input ready:

* MAC receive: RX Parse checks every frame (counters 0–5); a frame it accepts finds no QP yet
  (counter 6) until PSN Check and the execute stage are wired in, and its payload is drained.
* MAC transmit and the AXI4 host-memory master: idle (``tvalid``/``awvalid``/``wvalid``/
  ``arvalid`` low, ``bready``/``rready`` high).
* Command ports: answered at once with result 0 (and no returned arguments).

The reset sweep: for ``max(num_qp, num_cq, key_entries)`` cycles after ``rst`` — the time a
block takes to clear a table of that depth one entry per cycle — CMD_STATUS reads busy and
received frames are dropped and counted as 2. Blocks with their own sweep OR theirs in.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .control.control_plane import ControlPlane
from .ifaces import NUM_COUNTERS, Counter, CommandSignature
from .params import RnicConfig
from .rx.parse import RxParse

__all__ = ["RNIC", "port_list", "build_verilog"]


def port_list(config):
    """``{name: (direction, width)}`` of every port of module ``rnic`` (interface.md §2)."""
    w = config.data_width
    ports = {}

    def add(d, name, width=1):
        ports[name] = (d, width)

    for d, p in (("in", "s_axis_rx"),):
        add("in", f"{p}_tdata", w); add("in", f"{p}_tkeep", w // 8); add("in", f"{p}_tvalid")
        add("out", f"{p}_tready"); add("in", f"{p}_tlast"); add("in", f"{p}_tuser")
    p = "m_axis_tx"
    add("out", f"{p}_tdata", w); add("out", f"{p}_tkeep", w // 8); add("out", f"{p}_tvalid")
    add("in", f"{p}_tready"); add("out", f"{p}_tlast"); add("out", f"{p}_tuser")
    for ch in ("aw", "ar"):
        add("out", f"m_axi_{ch}id", 8); add("out", f"m_axi_{ch}addr", 64)
        add("out", f"m_axi_{ch}len", 8); add("out", f"m_axi_{ch}size", 3)
        add("out", f"m_axi_{ch}burst", 2); add("out", f"m_axi_{ch}valid")
        add("in", f"m_axi_{ch}ready")
    add("out", "m_axi_wdata", w); add("out", "m_axi_wstrb", w // 8); add("out", "m_axi_wlast")
    add("out", "m_axi_wvalid"); add("in", "m_axi_wready")
    add("in", "m_axi_bid", 8); add("in", "m_axi_bresp", 2); add("in", "m_axi_bvalid")
    add("out", "m_axi_bready")
    add("in", "m_axi_rid", 8); add("in", "m_axi_rdata", w); add("in", "m_axi_rresp", 2)
    add("in", "m_axi_rlast"); add("in", "m_axi_rvalid"); add("out", "m_axi_rready")
    add("in", "s_axil_awaddr", 16); add("in", "s_axil_awvalid"); add("out", "s_axil_awready")
    add("in", "s_axil_wdata", 32); add("in", "s_axil_wstrb", 4); add("in", "s_axil_wvalid")
    add("out", "s_axil_wready")
    add("out", "s_axil_bresp", 2); add("out", "s_axil_bvalid"); add("in", "s_axil_bready")
    add("in", "s_axil_araddr", 16); add("in", "s_axil_arvalid"); add("out", "s_axil_arready")
    add("out", "s_axil_rdata", 32); add("out", "s_axil_rresp", 2); add("out", "s_axil_rvalid")
    add("in", "s_axil_rready")
    add("out", "irq")
    return ports


class _CommandStub(wiring.Component):
    """Answers every command with result 0 (a block that has not landed yet)."""
    cmd: Out(CommandSignature())

    def elaborate(self, platform):
        m = Module()
        pending = Signal()
        m.d.comb += [self.cmd.cmd.ready.eq(~pending), self.cmd.resp.valid.eq(pending)]
        with m.If(self.cmd.cmd.valid & ~pending):
            m.d.sync += pending.eq(1)
        with m.If(self.cmd.resp.valid & self.cmd.resp.ready):
            m.d.sync += pending.eq(0)
        return m


class RNIC(wiring.Component):
    """The RoCEv2 RNIC core.

    Parameters
    ----------
    config : RnicConfig
        Checked at construction (``ConfigError`` with a one-line reason).

    Attributes
    ----------
    Every port of interface.md §2, named exactly as there (see :func:`port_list`), plus the
    implicit ``clk`` and ``rst`` (synchronous, active high).
    """

    def __init__(self, config=None):
        self.config = config or RnicConfig()
        members = {}
        for name, (d, width) in port_list(self.config).items():
            members[name] = (In if d == "in" else Out)(width)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        lanes = cfg.data_width // 8

        m.submodules.control = ctl = ControlPlane(cfg)
        for sig in ("awaddr", "awvalid", "wdata", "wstrb", "wvalid", "bready", "araddr",
                    "arvalid", "rready"):
            m.d.comb += getattr(ctl.axil, sig).eq(getattr(self, f"s_axil_{sig}"))
        for sig in ("awready", "wready", "bresp", "bvalid", "arready", "rdata", "rresp",
                    "rvalid"):
            m.d.comb += getattr(self, f"s_axil_{sig}").eq(getattr(ctl.axil, sig))
        m.d.comb += self.irq.eq(ctl.irq)

        # ---- reset sweep ------------------------------------------------------------------
        depth = max(cfg.num_qp, cfg.num_cq, cfg.key_entries)
        sweep = Signal(range(depth + 1), init=depth)
        with m.If(sweep != 0):
            m.d.sync += sweep.eq(sweep - 1)
        m.d.comb += ctl.sweeping.eq(sweep != 0)

        # ---- command ports (stubs until their blocks land) ---------------------------------
        for name in ("qp", "cq", "key"):
            stub = _CommandStub()
            m.submodules[f"{name}_stub"] = stub
            wiring.connect(m, getattr(ctl, name), stub.cmd)

        # ---- doorbells: consumed (no block takes them yet) ---------------------------------
        for name in ("rq_db", "sq_db", "cq_db", "cq_arm"):
            m.d.comb += getattr(ctl, name).ready.eq(1)

        # ---- RX Parse ---------------------------------------------------------------------
        m.submodules.rx_parse = rx = RxParse(width=cfg.data_width)
        rx_in = rx.i
        m.d.comb += [
            rx_in.payload.data.eq(self.s_axis_rx_tdata),
            rx_in.payload.keep.eq(self.s_axis_rx_tkeep),
            rx_in.payload.last.eq(self.s_axis_rx_tlast),
            rx_in.payload.user.eq(self.s_axis_rx_tuser),
            rx_in.valid.eq(self.s_axis_rx_tvalid),
            self.s_axis_rx_tready.eq(rx_in.ready),
            rx.local_mac.eq(ctl.local_mac),
            rx.local_ip.eq(ctl.local_ip),
            rx.drop_all.eq(ctl.drop_all),
        ]
        # no QP takes a frame yet: count it (6) and drain its payload
        stat = Signal(NUM_COUNTERS)
        m.d.comb += [rx.meta.ready.eq(1), rx.payload.ready.eq(1)]
        with m.If(rx.meta.valid):
            m.d.comb += stat[Counter.NO_QP].eq(1)
        for i in range(NUM_COUNTERS):
            m.d.comb += ctl.stat_inc[i].eq(stat[i] + rx.stat[i])

        # ---- MAC transmit and host memory: idle --------------------------------------------
        size = (lanes).bit_length() - 1
        m.d.comb += [
            self.m_axi_awsize.eq(size), self.m_axi_arsize.eq(size),
            self.m_axi_awburst.eq(1), self.m_axi_arburst.eq(1),
            self.m_axi_bready.eq(1), self.m_axi_rready.eq(1),
        ]
        m.d.comb += ctl.event.valid.eq(0)
        return m


def build_verilog(config, path=None):
    """Verilog text of module ``rnic`` for ``config``; written to ``path`` if given."""
    from amaranth.back import verilog
    text = verilog.convert(RNIC(config), name="rnic", emit_src=False)
    if path is not None:
        from pathlib import Path
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    return text
