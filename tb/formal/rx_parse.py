"""Formal harness of the stream rules on RX Parse's outputs (``rtl/rnic/rx/parse.py``).

Environment: the MAC stream ``i`` obeys AXI-Stream (once ``valid`` is high it stays high with
the same beat until ``ready``); every other input is free (``local_mac``/``local_ip`` constant,
``drop_all`` and the output ``ready``\\ s change at will). Reset is asserted in the first cycle.

Properties (asserted every cycle):

* ``meta`` and ``payload``: once ``valid`` is offered without ``ready``, in the next cycle
  ``valid`` is still high and the payload (every field; data, keep, last, user) is unchanged;
* no output without a frame in: the number of ``meta`` transfers never exceeds the number of
  frames whose last beat was accepted on ``i``, and ``payload`` offers no beat while every
  accepted frame has already been matched by a ``meta`` transfer and a ``payload`` last beat;
  and ``stat`` bit 0 never counts more frames than came in.
"""
from amaranth.hdl import Assert, Assume, Cat, Elaboratable, Module, ResetSignal, Signal
from amaranth.hdl._ast import AnyConst, AnySeq, Initial

from rnic.rx.parse import RxParse

__all__ = ["RxParseHarness"]


class RxParseHarness(Elaboratable):
    def __init__(self, width=64, buffer_frames=1, *, counts=True):
        self.width = width
        self.buffer_frames = buffer_frames
        self.counts = counts            # False: the stream rules only (for k-induction)

    def elaborate(self, platform):
        m = Module()
        W = self.width
        m.submodules.dut = dut = RxParse(W, buffer_frames=self.buffer_frames)
        m.d.comb += Assume(ResetSignal() == Initial())
        init = Initial()

        i = dut.i
        m.d.comb += [
            i.valid.eq(AnySeq(1)),
            i.payload.eq(AnySeq(len(i.payload.as_value()))),
            dut.local_mac.eq(AnyConst(48)),
            dut.local_ip.eq(AnyConst(32)),
            dut.drop_all.eq(AnySeq(1)),
            dut.meta.ready.eq(AnySeq(1)),
            dut.payload.ready.eq(AnySeq(1)),
        ]
        # AXI-Stream on the input: valid held and the beat stable until ready.
        pv = Signal()
        pbeat = Signal.like(i.payload)
        m.d.sync += [pv.eq(i.valid & ~i.ready & ~ResetSignal()), pbeat.eq(i.payload)]
        with m.If(pv):
            m.d.comb += [Assume(i.valid), Assume(i.payload.as_value() == pbeat.as_value())]

        # Stream rules on the outputs.
        for name, s in (("meta", dut.meta), ("payload", dut.payload)):
            held = Signal(name=f"{name}_held")
            prev = Signal(len(s.payload.as_value()), name=f"{name}_prev")
            m.d.sync += [held.eq(s.valid & ~s.ready & ~ResetSignal()),
                         prev.eq(s.payload.as_value())]
            with m.If(held & ~init):
                m.d.comb += [Assert(s.valid, f"{name} valid dropped before ready"),
                             Assert(s.payload.as_value() == prev,
                                    f"{name} payload changed before ready")]

        if not self.counts:
            return m
        # No output without a frame in.
        frames_in = Signal(8)
        metas = Signal(8)
        pay_frames = Signal(8)
        counted = Signal(8)
        m.d.sync += [
            frames_in.eq(frames_in + (i.valid & i.ready & i.payload.last)),
            metas.eq(metas + (dut.meta.valid & dut.meta.ready)),
            pay_frames.eq(pay_frames + (dut.payload.valid & dut.payload.ready
                                        & dut.payload.payload.last)),
            counted.eq(counted + dut.stat[0]),
        ]
        m.d.comb += [
            Assert(metas <= frames_in, "a meta without a frame in"),
            Assert(pay_frames <= frames_in, "a payload frame without a frame in"),
            Assert(counted <= frames_in, "counter 0 counted a frame that did not come in"),
        ]
        with m.If(dut.payload.valid):
            m.d.comb += Assert(pay_frames < frames_in, "a payload beat without a frame in")
        with m.If(dut.meta.valid):
            m.d.comb += Assert(metas < frames_in, "a meta offered without a frame in")
        return m
