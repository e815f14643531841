"""Two ``rnic`` cores in one simulation: requester A and responder B (or both ways).

:class:`RnicPair` is a plain Amaranth component holding two :class:`rnic.top.RNIC` instances
``a`` and ``b`` on one clock and reset. Every port of each core is brought out with the prefix
``a_`` or ``b_`` and its interface.md name (``a_m_axis_tx_tdata``, ``b_s_axil_awaddr`` …), so a
testbench attaches cocotbext-axi models exactly as to one core. The wire between them is the
testbench's: it takes A's ``m_axis_tx`` frames and plays them into B's ``s_axis_rx`` (and back),
which lets it record a pcap and, for the reliability tests, drop, duplicate, reorder or corrupt
frames. Internal signals stay reachable as ``dut.a.<block>.<signal>``.
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rnic.params import RnicConfig
from rnic.top import RNIC, port_list

__all__ = ["RnicPair"]


class RnicPair(wiring.Component):
    def __init__(self, config=None):
        self.config = config or RnicConfig()
        members = {}
        for side in ("a", "b"):
            for name, (d, width) in port_list(self.config).items():
                members[f"{side}_{name}"] = (In if d == "in" else Out)(width)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        for side in ("a", "b"):
            core = RNIC(self.config)
            m.submodules[side] = core
            for name, (d, _) in port_list(self.config).items():
                outer, inner = getattr(self, f"{side}_{name}"), getattr(core, name)
                m.d.comb += (inner.eq(outer) if d == "in" else outer.eq(inner))
        return m
