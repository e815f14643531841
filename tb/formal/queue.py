"""Formal harness of the stream rules on ``Queue(registered=...)``'s output
(``rtl/rnic/stream.py``), with or without ``bypass``, for a proof by k-induction from an arbitrary
state.

Environment: every input is free (``i.valid``, ``i.payload`` and ``o.ready`` change at will).
Reset is asserted in the first cycle.

Property (asserted every cycle): once ``o.valid`` is offered without ``o.ready``, in the next
cycle ``o.valid`` is still high and the payload (the registered fields and those read from the
ring at the head) is unchanged. Proved by induction of depth 1, it holds from every state of
the queue's registers and memories, reachable or not: what a block using the queue needs for
its own stream rules to be provable by induction.
"""
from amaranth.hdl import Assert, Assume, Elaboratable, Module, ResetSignal, Signal
from amaranth.hdl._ast import AnySeq, Initial
from amaranth.lib import data

from rnic.stream import Queue

__all__ = ["QueueHarness"]


class QueueHarness(Elaboratable):
    def __init__(self, depth=5, bypass=False):
        self.depth = depth
        self.bypass = bypass

    def elaborate(self, platform):
        m = Module()
        layout = data.StructLayout({"a": 5, "b": 11, "c": 3, "d": 7})
        m.submodules.dut = dut = Queue(layout, self.depth, registered=("b", "d"),
                                       bypass=self.bypass)
        m.d.comb += Assume(ResetSignal() == Initial())
        m.d.comb += [
            dut.i.valid.eq(AnySeq(1)),
            dut.i.payload.eq(AnySeq(len(dut.i.payload.as_value()))),
            dut.o.ready.eq(AnySeq(1)),
        ]
        held = Signal()
        prev = Signal(len(dut.o.payload.as_value()))
        m.d.sync += [held.eq(dut.o.valid & ~dut.o.ready & ~ResetSignal()),
                     prev.eq(dut.o.payload.as_value())]
        with m.If(held & ~Initial()):
            m.d.comb += [Assert(dut.o.valid, "valid dropped before ready"),
                         Assert(dut.o.payload.as_value() == prev, "payload changed before ready")]
        return m
