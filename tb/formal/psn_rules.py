"""Formal harnesses of the responder's PSN classifier and opcode sequencer
(``rtl/rnic/resp/psn_rules.py``, the functions PSN Check runs), against specifications written
here independently.

PSN classifier, over the whole 24-bit space of ``psn`` × ``epsn`` (both free):

* ``in_order`` ⇔ ``psn = epsn``;
* ``dup`` (behind) ⇔ ``psn − epsn`` taken modulo 2^24 is ≥ 2^23, written here without modular
  arithmetic: ``psn > epsn`` and ``psn − epsn ≥ 2^23``, or ``psn < epsn`` and
  ``epsn − psn ≤ 2^23``;
* ``ahead`` ⇔ neither; exactly one of the three; ``diff`` = ``(psn + 2^24 − epsn) mod 2^24``.

Opcode sequencer, over all 256 opcodes × the four open-message codes: a table of the IBA rules
(roce-reference.md §3.3): with a SEND open only SEND_MIDDLE/SEND_LAST/SEND_LAST_WITH_IMMEDIATE/
SEND_LAST_WITH_INVALIDATE; with a WRITE open only RDMA_WRITE_MIDDLE/LAST/LAST_WITH_IMMEDIATE;
with nothing open anything but those continuations; after FIRST/MIDDLE the class stays open,
after anything else nothing is open.

Both pieces are combinational: a bounded proof of depth 1 covers every input.
"""
from amaranth.hdl import Assert, Elaboratable, Module, Signal
from amaranth.hdl._ast import AnySeq

from rnic.resp.psn_rules import op_sequence, psn_classify

__all__ = ["PsnClassifierHarness", "OpSequencerHarness"]

HALF = 1 << 23


class PsnClassifierHarness(Elaboratable):
    """``wrong_spec``: a specification with an off-by-one at the half-way point (2^23 behind
    counted as ahead), to show the proof catches a one-value disagreement."""

    def __init__(self, wrong_spec=False):
        self.wrong_spec = wrong_spec

    def elaborate(self, platform):
        m = Module()
        psn, epsn = Signal(24), Signal(24)
        m.d.comb += [psn.eq(AnySeq(24)), epsn.eq(AnySeq(24))]
        cls = psn_classify(m, psn, epsn, name="cls")
        spec_in_order = psn == epsn
        spec_dup = (((psn > epsn) & ((psn - epsn)[:24] >= HALF))
                    | ((psn < epsn) & ((epsn - psn)[:24] <= HALF - self.wrong_spec)))
        spec_ahead = ~spec_in_order & ~spec_dup
        spec_diff = Signal(25)
        m.d.comb += spec_diff.eq(psn + (1 << 24) - epsn)
        m.d.comb += [
            Assert(cls.in_order == spec_in_order, "in order"),
            Assert(cls.dup == spec_dup, "duplicate"),
            Assert(cls.ahead == spec_ahead, "ahead"),
            Assert(cls.in_order + cls.dup + cls.ahead == 1, "exactly one class"),
            Assert(cls.diff == spec_diff[:24], "difference"),
        ]
        return m


# the IBA opcode sequencing rules, as a table (opcode → (continues, opens))
_NONE, _SEND, _WRITE = 0, 1, 2
_RULES = {
    0x00: (None, _SEND),     # SEND_FIRST
    0x01: (_SEND, _SEND),    # SEND_MIDDLE
    0x02: (_SEND, _NONE),    # SEND_LAST
    0x03: (_SEND, _NONE),    # SEND_LAST_WITH_IMMEDIATE
    0x16: (_SEND, _NONE),    # SEND_LAST_WITH_INVALIDATE
    0x06: (None, _WRITE),    # RDMA_WRITE_FIRST
    0x07: (_WRITE, _WRITE),  # RDMA_WRITE_MIDDLE
    0x08: (_WRITE, _NONE),   # RDMA_WRITE_LAST
    0x09: (_WRITE, _NONE),   # RDMA_WRITE_LAST_WITH_IMMEDIATE
}


class OpSequencerHarness(Elaboratable):
    def elaborate(self, platform):
        m = Module()
        opcode, open_ = Signal(8), Signal(2)
        m.d.comb += [opcode.eq(AnySeq(8)), open_.eq(AnySeq(2))]
        seq = op_sequence(m, opcode, open_, name="seq")
        exp_ok = Signal()
        exp_next = Signal(2)
        exp_send_cont = Signal()
        exp_write_cont = Signal()
        with m.Switch(opcode):
            for op in range(256):
                cont, opens = _RULES.get(op, (None, _NONE))
                with m.Case(op):
                    m.d.comb += [exp_next.eq(opens), exp_send_cont.eq(cont == _SEND),
                                 exp_write_cont.eq(cont == _WRITE)]
                    if cont is None:
                        # a new message (or READ/atomic/response): legal only with nothing open
                        m.d.comb += exp_ok.eq((open_ != _SEND) & (open_ != _WRITE))
                    else:
                        m.d.comb += exp_ok.eq(open_ == cont)
        m.d.comb += [
            Assert(seq.ok == exp_ok, "legal after the open message"),
            Assert(seq.send_cont == exp_send_cont, "continues a SEND"),
            Assert(seq.write_cont == exp_write_cont, "continues a WRITE"),
        ]
        with m.If(exp_ok):
            m.d.comb += Assert(seq.next_open == exp_next, "open message after it")
        return m
