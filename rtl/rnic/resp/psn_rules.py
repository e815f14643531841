"""PSN classifier and opcode sequencer of the responder, as small pure Amaranth pieces.

These are the two pieces of :class:`~rnic.resp.psn_check.PsnCheck`'s decision that a formal
harness (SymbiYosys) wants to instantiate on their own. PsnCheck uses exactly these functions, so
a proof about them is a proof about the logic PsnCheck runs. Everything here is combinational,
has no state and no clock; each function adds its ``comb`` statements to the given
:class:`~amaranth.hdl.Module` and returns new signals (named after ``name``).

Functions
---------
:func:`psn_classify` ``(m, psn, epsn, *, name)`` → ``Signal(psn_class_layout)``
    24-bit serial-number compare of a request's PSN against the QP's expected PSN
    (``roce-reference.md`` §3.2). Inputs: ``psn`` (24 bits, the packet's BTH PSN), ``epsn``
    (24 bits, the QP's ePSN). Output fields (exactly one of the three flags is 1):

    * ``in_order`` — ``psn == epsn``;
    * ``dup`` — ``(psn − epsn) mod 2^24 ≥ 2^23``: the packet is *behind* (a duplicate);
    * ``ahead`` — ``1 ≤ (psn − epsn) mod 2^24 < 2^23``: the packet is ahead (a PSN sequence
      error, NAK 0x60 the first time);
    * ``diff`` — ``(psn − epsn) mod 2^24`` itself (24 bits).

    Wrap-around is implicit in the modular difference: with ePSN = 0xFFFFFF, PSN 0 is ahead by
    one and PSN 0xFFFFFE is a duplicate.

:func:`op_sequence` ``(m, opcode, open_, *, name)`` → ``Signal(op_seq_layout)``
    The FIRST→MIDDLE→LAST rules (``roce-reference.md`` §3.3, rxe ``check_op_seq``), with the
    message in progress reduced to its *open message class* (:class:`~rnic.resp.qp_context
    .MsgClass`: NONE 0, SEND 1, WRITE 2). Inputs: ``opcode`` (8 bits, BTH opcode), ``open_``
    (2 bits, the QP's open class). Output fields:

    * ``send_cont`` — the opcode continues a SEND (SEND_MIDDLE, SEND_LAST, SEND_LAST_WITH_IMM,
      SEND_LAST_WITH_INV);
    * ``write_cont`` — the opcode continues a WRITE (WRITE_MIDDLE, WRITE_LAST,
      WRITE_LAST_WITH_IMM);
    * ``ok`` — the opcode is legal after ``open_``: with SEND open only ``send_cont``, with WRITE
      open only ``write_cont``, with nothing open (or the unused code 3) anything that is *not*
      a continuation (FIRST/ONLY of any class, READ, atomics; those are then judged by the
      access rules, not here);
    * ``next_open`` — the open class once this packet is *executed* (only meaningful when
      ``ok``): NONE after a LAST/ONLY (and after READ/atomics, which are never executed here),
      SEND after SEND_FIRST/SEND_MIDDLE, WRITE after WRITE_FIRST/WRITE_MIDDLE.

:func:`psn_class_model` / :func:`op_sequence_model`
    The same functions in plain Python (integers in, dict out), for tests and models.

Tiny Elaboratables
------------------
:class:`PsnClassifier` (ports ``psn``, ``epsn`` in; ``cls`` out) and :class:`OpSequencer`
(ports ``opcode``, ``open_`` in; ``seq`` out) wrap the two functions for a harness that prefers
a component with ports (``amaranth.back.rtlil.convert(PsnClassifier(), ...)``).
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["psn_class_layout", "op_seq_layout", "psn_classify", "op_sequence",
           "psn_class_model", "op_sequence_model", "PsnClassifier", "OpSequencer",
           "SEND_CONT_OPS", "WRITE_CONT_OPS"]

# MsgClass codes (duplicated from qp_context.MsgClass to keep this file import-free of it)
_NONE, _SEND, _WRITE = 0, 1, 2

#: opcodes that continue an open SEND / WRITE (MIDDLE and LAST variants)
SEND_CONT_OPS = (0x01, 0x02, 0x03, 0x16)
WRITE_CONT_OPS = (0x07, 0x08, 0x09)
#: opcodes after which a message stays open (FIRST, MIDDLE)
_SEND_OPEN_OPS = (0x00, 0x01)
_WRITE_OPEN_OPS = (0x06, 0x07)

psn_class_layout = data.StructLayout({"in_order": 1, "dup": 1, "ahead": 1, "diff": 24})
op_seq_layout = data.StructLayout({"ok": 1, "send_cont": 1, "write_cont": 1, "next_open": 2})


def _any_of(value, ops):
    r = 0
    for op in ops:
        r = r | (value == op)
    return r


def psn_classify(m, psn, epsn, *, name="psn_cls"):
    """24-bit serial compare of ``psn`` against ``epsn`` (see the module docstring)."""
    cls = Signal(psn_class_layout, name=name)
    m.d.comb += [
        cls.diff.eq(psn - epsn),
        cls.dup.eq(cls.diff[23]),
        # equality straight from the operands (no zero-detect after the subtraction's carry)
        cls.in_order.eq(psn == epsn),
        cls.ahead.eq(~cls.diff[23] & (psn != epsn)),
    ]
    return cls


def op_sequence(m, opcode, open_, *, name="op_seq"):
    """Opcode sequence check against the open message class (see the module docstring)."""
    seq = Signal(op_seq_layout, name=name)
    m.d.comb += [
        seq.send_cont.eq(_any_of(opcode, SEND_CONT_OPS)),
        seq.write_cont.eq(_any_of(opcode, WRITE_CONT_OPS)),
    ]
    with m.Switch(open_):
        with m.Case(_SEND):
            m.d.comb += seq.ok.eq(seq.send_cont)
        with m.Case(_WRITE):
            m.d.comb += seq.ok.eq(seq.write_cont)
        with m.Default():
            m.d.comb += seq.ok.eq(~seq.send_cont & ~seq.write_cont)
    with m.If(_any_of(opcode, _SEND_OPEN_OPS)):
        m.d.comb += seq.next_open.eq(_SEND)
    with m.Elif(_any_of(opcode, _WRITE_OPEN_OPS)):
        m.d.comb += seq.next_open.eq(_WRITE)
    with m.Else():
        m.d.comb += seq.next_open.eq(_NONE)
    return seq


def psn_class_model(psn, epsn):
    """Python twin of :func:`psn_classify`."""
    diff = (psn - epsn) & 0xFFFFFF
    return {"in_order": int(diff == 0), "dup": int(diff >= 1 << 23),
            "ahead": int(0 < diff < 1 << 23), "diff": diff}


def op_sequence_model(opcode, open_):
    """Python twin of :func:`op_sequence`."""
    sc = int(opcode in SEND_CONT_OPS)
    wc = int(opcode in WRITE_CONT_OPS)
    ok = sc if open_ == _SEND else wc if open_ == _WRITE else int(not sc and not wc)
    nxt = (_SEND if opcode in _SEND_OPEN_OPS else _WRITE if opcode in _WRITE_OPEN_OPS
           else _NONE)
    return {"ok": ok, "send_cont": sc, "write_cont": wc, "next_open": nxt}


class PsnClassifier(wiring.Component):
    """:func:`psn_classify` as a component: ``psn``, ``epsn`` in, ``cls`` out."""

    psn: In(24)
    epsn: In(24)
    cls: Out(psn_class_layout)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.cls.eq(psn_classify(m, self.psn, self.epsn))
        return m


class OpSequencer(wiring.Component):
    """:func:`op_sequence` as a component: ``opcode``, ``open_`` in, ``seq`` out."""

    opcode: In(8)
    open_: In(2)
    seq: Out(op_seq_layout)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.seq.eq(op_sequence(m, self.opcode, self.open_))
        return m
