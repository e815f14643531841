"""CQE Generation: per-CQ rings in host memory, 32-byte completion entries (interface.md §5.4).

CQ table
--------
Four 36-bit words per CQ in one block RAM (word ``k`` of CQ ``n`` at ``4·n + k``; one DP16KD
up to 128 CQs):

* word 0: reserved count ``resv`` [15:0], occupancy ``occ`` = producer + reserved − consumer
  [31:16] (16-bit arithmetic), log2 entries [35:32];
* word 1: arm mode [1:0], valid [2], ring base bits 15..6 [15:6] (where ARG0 has them),
  producer [31:16], ring base bits 19..16 [35:32];
* word 2: ARG0 as SET_CQ was given it [31:0] (ring base bits 31..0, of which 31..20 are used);
* word 3: ARG1 (ring base bits 63..32) [31:0]; [32] set when ARG1[15:0] is all ones, so that
  the carry into address bit 48 is known without the sum of bits 47..32.

The base is 64-byte aligned, so its low six bits are not used. Keeping ``occ`` instead of the
consumer index puts every test of a reservation in word 0: a CQ is full when ``occ ≥ 2^log2``.
CQ_DB rewrites ``occ`` from the producer and reserved count. The table is cleared by a sweep
after ``rst`` (``sweeping`` high, no input taken) that writes every word with only bit 31 set:
an unset CQ has ``valid`` = 0, no reservation and ``occ`` = 0x8000, which is full at every size,
so a reservation or completion on it needs no other test; CQ_DB and CQ_ARM test ``valid``.

One FSM does every operation as a read-modify-write, one operation at a time, so no forwarding
is needed. The first word's read address comes straight from the CQ_DB, reservation or
completion being taken; the block RAM's output is registered (``row``) and each word is used
from there. A write lands in the cycle after the FSM issues it, from registers (data, word,
enable; the CQN register holds the CQ), so no adder drives the block RAMs' inputs. No read whose
word is used is addressed in the cycle a write of that word lands (the block RAM would return the
old word): a reservation's write lands in R3, CQ_DB's in D4, a completion's word 0 in P4, and
the writes that land in IDLE, where word 0 is read, are to word 1 (completion, CQ_ARM) or word 3
(the sweep's last).

* reservation: read word 0, test it and issue its write (R2), answer (R3): 4 cycles, the
  answer registered one cycle later;
* completion: read words 0–3 on consecutive cycles; test word 0 (has a reservation, has room:
  registered), write word 0, then word 1 (producer + 1, the arm cleared if it matches) while
  the slot and phase come from it: 5 cycles. The CQE's address ``base + 32·slot`` is added in
  three parts as words 1, 2 and 3 pass the row register, in the two cycles after the operation,
  into the *placed* register (address, phase, arm match);
* CQ_DB: read word 0 then word 1, write word 0 (5 cycles); CQ_ARM: read and write word 1
  (4 cycles); SET_CQ: reads ARG0 and ARG2 and checks them, issuing word 0's write as ARG2 is
  checked, then the other three words.

The completion record is not copied until it is placed: the FSM reads its fields at the
``complete`` port, which holds it (stream rules) until the writer takes it. The writer copies
the record into its own register as it issues the CQE's write request from the placed register,
and sends the 32-byte burst from that copy; the placed register is free once the request is
taken, and the FSM places the next completion while the writer sends this one's beats. So a
reservation never waits for a CQE write that waits for the AXI W channel behind a payload
burst. CQEs are written in the order they were placed.

Operations
----------
``cmd`` (SET_CQ 0x03, index = CQN): ARG0/ARG1 ring base lo/hi, ARG2[4:0] log2 entries.
Producer, consumer and reserved count to 0, disarmed, phase 1. Result 2 for CQN ≥ num_cq,
3 for log2 > 15 or a base not 64-byte aligned (interface.md §4.2; nothing changes), 1 for any
other opcode.

``cq_db`` {cqn, index}: CQ_DB, the consumer index becomes ``index``.

``cq_arm`` {cqn, mode}: CQ_ARM; mode 1 (next completion) or 2 (next completion with SE, or any
error completion); other modes are ignored. One-shot: a matching completion disarms it.

``reserve`` {cqn} → ``reserve_resp`` {ok}: reserve one CQE slot (exactly one response per
request). Full when ``producer + reserved − consumer ≥ 2^log2`` (16-bit arithmetic), or the CQ
is unset: ``ok`` = 0 and event 2 (CQ overflow, number = CQN) is raised; the caller sends no ACK
and moves its QP to ERROR. The caller must reserve before it releases the ACK.

``complete`` {cqe_layout}: write one CQE. A non-flush completion uses one of the CQ's
reservations. A flush completion (``flush`` = 1) is never reserved: if the CQ is full it is
discarded silently. A non-flush completion that finds no reservation is admitted if there is
room, else discarded with event 2. The entry goes to ring slot ``producer mod 2^log2`` at
``base + 32·slot`` with phase = 1 on even passes (``producer >> log2`` even), then the producer
advances; the arm is tested and disarmed at this point (mode 1: any; mode 2: ``se`` or
status ≠ 0). The CQE is written as one 32-byte burst through the ``mem`` write client.

**Ordering with the data.** The entry must be written only after OKAY write responses for all
the data it reports (§5.4): the caller submits ``complete`` only after the ``done`` of its own
data writes came back OKAY (a write that came back non-OKAY is the caller's fault to report).

After the write's ``done`` is back (in order, up to ``max_inflight`` CQE writes in flight):
OKAY → ``stat`` bit 14 (completions written) and, if the arm matched, event 1 (number = CQN);
non-OKAY → event 4 (host-memory fault, number = QPN of the CQE) and one ``fault`` {qpn} transfer
so that the QP's owner moves that QP to ERROR; no count and no event 1 then.

CQE layout: :data:`rnic.formats.Cqe`, the table of interface.md §5.4 the driver and the docs
use too (0–7 wr_id; 8–11 byte_len; 12–15 the immediate in wire byte order (WITH_IMM) or the
invalidated rkey little-endian; 16–19 QPN[23:0]; 20 status; 21 opcode; 22 flags; 23–30 zero;
31 bit 0 phase). The entry is a signal of that layout, every field assigned by name and every
other bit 0. On an error CQE (status ≠ 0) byte_len, bytes 12–15 and flags are written as 0
(only wr_id, QPN, status and opcode are valid).
"""

import types

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..formats import CQE_BYTES, CQE_WITH_IMM, CQE_WITH_INVALIDATE
from ..formats import Cqe as cqe_entry_layout
from ..ifaces import NUM_COUNTERS, CmdOp, CommandSignature, Counter, EventType, Result
from ..ifaces import QpnStream, event_layout
from ..parts import add as _add, low_mask
from ..stream import Queue, check_width
from .axi_master import WriteClientSignature

__all__ = ["CqeGen", "cqe_layout", "WITH_IMM", "WITH_INVALIDATE", "CQE_BYTES"]

WITH_IMM = CQE_WITH_IMM
WITH_INVALIDATE = CQE_WITH_INVALIDATE

#: One completion as a client submits it.
#: ``imm_or_rkey``: with ``flags & WITH_IMM`` the immediate as an integer whose bits [31:24] are
#: its first wire byte (``rx_meta_layout.imm_or_rkey``); CQE Generation stores it in wire byte
#: order. Otherwise the invalidated rkey (stored little-endian).
cqe_layout = data.StructLayout({
    "cqn": 16,
    "wr_id": 64,
    "byte_len": 32,
    "imm_or_rkey": 32,
    "qpn": 24,
    "status": 8,
    "opcode": 8,
    "flags": 8,
    "se": 1,
    "flush": 1,
})

_WORD = 36
#: CQ table word 0: everything a reservation tests and changes.
_w0_layout = data.StructLayout({"resv": 16, "occ": 16, "log2": 4})
#: CQ table word 1: arm, valid, producer and ring base bits 19..6 (bits 15..6 where ARG0 has
#: them, bits 19..16 above the producer).
_w1_layout = data.StructLayout({"arm": 2, "valid": 1, "spare": 3, "base_lo": 10, "prod": 16,
                                "base_hi": 4})
# word 2: ARG0 as SET_CQ was given it (ring base bits 31..0, of which 31..20 are used);
# word 3: ARG1 (ring base bits 63..32), bit 32 set when ARG1[15:0] is all ones
#: What the sweep writes to every word: word 0 ``occ`` = 0x8000 (full at every size), word 1
#: ``valid`` = 0.
_SWEPT = 1 << 31

#: The writer's copy of a placed completion: the CQE's fields (byte_len, imm_or_rkey and flags
#: already 0 on an error CQE), the phase and, at W = 512, which half of the beat it fills
#: (address bit 5).
_rec_layout = data.StructLayout({
    "wr_id": 64,
    "byte_len": 32,
    "imm_or_rkey": 32,
    "qpn": 24,
    "status": 8,
    "opcode": 8,
    "flags": 8,
    "phase": 1,
    "half": 1,
})


def _taddr(cqn, word, ib):
    """The CQ table address of word ``word`` (an int or a 2-bit value) of CQ ``cqn``, which has
    ``ib`` index bits: ``4·cqn + word``."""
    return Cat(Const(word, 2) if isinstance(word, int) else word, cqn[:ib])


class CqeGen(wiring.Component):
    """CQE Generation (see the module docstring for every rule).

    Parameters
    ----------
    width : int
        Host-memory data width W (64, 128, 256, 512).
    num_cq : int
        Number of CQs, a power of two, 1..1024.
    max_inflight : int
        CQE writes issued whose ``done`` is not back yet, at most.

    Attributes
    ----------
    cmd : Out(CommandSignature())
        Mailbox command port (``cmd.cmd`` in, ``cmd.resp`` out); SET_CQ.
    cq_db : In(stream.Signature({cqn 16, index 16}))
        CQ_DB doorbell.
    cq_arm : In(stream.Signature({cqn 16, mode 2}))
        CQ_ARM doorbell.
    reserve : In(stream.Signature({cqn 16}))
        Slot reservation request.
    reserve_resp : Out(stream.Signature({ok 1}))
        One answer per reservation, in order.
    complete : In(stream.Signature(cqe_layout))
        Completions to write.
    mem : Out(WriteClientSignature(width))
        A write client of :class:`rnic.host.HostMemory`.
    event : Out(stream.Signature(event_layout))
        Events 1 (completion on an armed CQ), 2 (CQ overflow), 4 (host-memory fault).
    fault : Out(stream.Signature({qpn 24}))
        A CQE write came back non-OKAY: this QP goes to ERROR.
    stat : Out(16)
        Counter strobes; bit 14 = one CQE written.
    sweeping : Out(1)
        The CQ table is being cleared after reset; no input is taken.
    """

    def __init__(self, *, width=64, num_cq=64, max_inflight=4):
        check_width(width)
        if not isinstance(num_cq, int) or not 1 <= num_cq <= 1024 or num_cq & (num_cq - 1):
            raise ValueError(f"num_cq must be a power of two in 1..1024, not {num_cq!r}")
        if not isinstance(max_inflight, int) or not 1 <= max_inflight <= 256:
            raise ValueError(f"max_inflight must be in 1..256, not {max_inflight!r}")
        self.width = width
        self.num_cq = num_cq
        self.max_inflight = max_inflight
        super().__init__({
            "cmd": Out(CommandSignature()),
            "cq_db": In(stream.Signature(data.StructLayout({"cqn": 16, "index": 16}))),
            "cq_arm": In(stream.Signature(data.StructLayout({"cqn": 16, "mode": 2}))),
            "reserve": In(stream.Signature(data.StructLayout({"cqn": 16}))),
            "reserve_resp": Out(stream.Signature(data.StructLayout({"ok": 1}))),
            "complete": In(stream.Signature(cqe_layout)),
            "mem": Out(WriteClientSignature(width)),
            "event": Out(stream.Signature(event_layout)),
            "fault": Out(QpnStream()),
            "stat": Out(NUM_COUNTERS),
            "sweeping": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace(ib=ceil_log2(self.num_cq), cin=self.complete.payload)
        _add(t, self._tables(m, t))
        _add(t, self._table_access(m, t))
        _add(t, self._adders(m, t))
        _add(t, self._write_data(m, t))
        _add(t, self._results(m, t))
        _add(t, self._placed(m, t))
        _add(t, self._event_merge(m, t))
        _add(t, self._command(m, t))
        self._table_fsm(m, t)
        self._writer(m, t)
        self._done(m, t)
        return m

    def _tables(self, m, t):
        """The CQ table (four words per CQ in one block RAM) with its read and write port, and
        the queue of the CQE writes in flight (their QP, CQ and arm match, for ``done``). Adds
        ``rd``, ``wr`` and ``inflight``."""
        ib = t.ib
        # A write lands a cycle after the FSM issues it, from registers (see ``wq`` below). Every
        # read that meets a write of the same address is discarded, so the block RAM needs no
        # read-during-write logic (yosys would otherwise emulate read-first with ~80
        # flip-flops).
        m.submodules.table = table = Memory(shape=_WORD, depth=4 * self.num_cq, init=[],
                                            attrs={"no_rw_check": 1})
        rd = table.read_port()
        wr = table.write_port()
        _inflight_layout = data.StructLayout({"qpn": 24, "cqn": max(ib, 1), "fire": 1})
        m.submodules.inflight = inflight = Queue(_inflight_layout, self.max_inflight,
                                                 buffered=False)
        return types.SimpleNamespace(rd=rd, wr=wr, inflight=inflight)

    def _table_access(self, m, t):
        """The table's addresses and the row register: the operation's CQN ``cur`` (and
        ``in_range``), the word read (``rword``) and the word written (``wword``) and its
        enable (``we``) as the FSM sets them, the write landing a cycle later from
        registers (``wq_word``, ``wq``), and ``row``, the word read, also seen as word 0
        (``r0``) and word 1 (``r1``). Adds these."""
        ib, rd, wr = t.ib, t.rd, t.wr
        cur = Signal(16)                      # CQN of the operation (the sweep: word address)
        in_range = Signal()
        m.d.comb += in_range.eq(~cur[ib:].any())
        rword = Signal(2)                     # word read this cycle (outside IDLE)
        wword = Signal(2)                     # word the write issued this cycle goes to
        we = Signal()                         # a write is issued this cycle
        # The write issued in one cycle lands in the next, from ``wq`` (data), ``wq_word`` and
        # ``cur``: the block RAM's write data, address and enable come from flip-flops, not from
        # the read-modify-write adders (at C = 1024 they fan out to eight block RAMs). ``cur``
        # is the same in both cycles: it changes only at the end of IDLE, and in SWEEP (which
        # still covers every address, see there).
        wq_en = Signal()
        wq_word = Signal(2, reset_less=True)
        wq = Signal(_WORD, reset_less=True)
        m.d.sync += wq_en.eq(we)
        m.d.comb += [rd.addr.eq(_taddr(cur, rword, ib)), rd.en.eq(1),
                     wr.addr.eq(_taddr(cur, wq_word, ib)), wr.data.eq(wq), wr.en.eq(wq_en)]
        # The row register follows the RAM every cycle (no enable: EBR clock-to-out is long);
        # each word is used in the cycle it is here.
        row = Signal(_WORD, reset_less=True)
        m.d.sync += row.eq(rd.data)
        r0 = data.View(_w0_layout, row)
        r1 = data.View(_w1_layout, row)
        return types.SimpleNamespace(cur=cur, in_range=in_range, rword=rword, wword=wword,
                                     we=we, wq_word=wq_word, wq=wq, row=row, r0=r0, r1=r1)

    def _adders(self, m, t):
        """The two adders on the row register (``low``, ``high``), their operand registers
        (``inc``, ``dec``, ``inc_hi``, ``carry``) and the address stages after the FSM (``s5``,
        ``s6``), and ``occ_full``, word 0's room test. Adds these."""
        row, r0 = t.row, t.r0
        # Two adders on the row register, shared by the operations and the address stages:
        # ``low`` = bits 15..0 + (+1, −1 or 0; the carry into address bit 32 in word 3),
        # ``high`` = bits 31..16 + (+1 or 0; the carry into address bit 20 in word 2, into bit
        # 48 in word 3); each has its carry out as bit 16. Their operands are registers set in
        # the cycle before (``inc``, ``dec``, ``inc_hi``, ``carry``) or row bits: the carry into
        # bit 48 is the one into bit 32 when word 3's bit 32 (ARG1[15:0] all ones) is set, so
        # ``high`` does not wait for ``low``'s carry chain.
        inc = Signal()
        dec = Signal()
        inc_hi = Signal()
        m.d.sync += [inc.eq(0), dec.eq(0), inc_hi.eq(0)]
        carry = Signal(reset_less=True)
        s5 = Signal()                         # address stages after the FSM: word 2, word 3
        s6 = Signal()
        m.d.sync += [s5.eq(0), s6.eq(s5)]
        low = Signal(17)
        high = Signal(17)
        m.d.comb += [
            low.eq(row[:16] + Mux(dec, 0xFFFF, inc | (s6 & carry))),
            high.eq(row[16:32] + Cat(inc_hi | (s6 & carry & row[32]), Const(0, 3), s5 & carry)),
        ]
        # occ ≥ 2^log2: some bit of occ at or above bit log2 (occ >> log2 not zero)
        occ_full = Signal()
        m.d.comb += occ_full.eq((r0.occ >> r0.log2) != 0)
        return types.SimpleNamespace(inc=inc, dec=dec, inc_hi=inc_hi, carry=carry, s5=s5,
                                     s6=s6, low=low, high=high, occ_full=occ_full)

    def _write_data(self, m, t):
        """What a table operation writes, loaded into ``wq``: the row with the adders' sums
        (``lo``, ``mid``), or ``setv`` when ``set_sel``; ``fsm_d3`` holds the bits CQ_DB keeps
        in D3. Adds ``lo``, ``mid``, ``setv``, ``set_sel``, ``fsm_d3`` and ``q0`` (``wq`` seen
        as word 0)."""
        row, low, high, wq, wq_word = t.row, t.low, t.high, t.wq, t.wq_word
        # What a table operation writes: the row with bits 15..0 from ``low`` (the arm
        # replaced in word 1) and 31..16 from ``high`` or the CQ_DB sum; SET_CQ and the sweep
        # write ``setv`` instead.
        lo = Signal(16)
        mid = Signal(16)
        m.d.comb += [lo.eq(low[:16]), mid.eq(high[:16])]
        setv = Signal(_WORD)
        set_sel = Signal()
        # ``wq`` and ``wq_word`` load in every cycle (but the bits CQ_DB holds in D3); they
        # matter when ``wq_en`` is set, and two states read the word loaded in the state before:
        # D3 (word 0 as D2 had it, D2 issuing no write) and P4 (word 0 as P3 wrote it).
        fsm_d3 = Signal()
        wdata = Signal(_WORD)
        m.d.comb += wdata.eq(Mux(set_sel, setv, Cat(lo, mid, row[32:])))
        m.d.sync += [wq_word.eq(t.wword), wq[16:32].eq(wdata[16:32])]
        with m.If(~fsm_d3):
            m.d.sync += [wq[:16].eq(wdata[:16]), wq[32:].eq(wdata[32:])]
        q0 = data.View(_w0_layout, wq)
        return types.SimpleNamespace(lo=lo, mid=mid, setv=setv, set_sel=set_sel, fsm_d3=fsm_d3,
                                     q0=q0)

    def _results(self, m, t):
        """The registered outcomes the FSM's states set: a reservation's or completion's tests
        (``full_r``, ``sig_r``), the reservation's answer on ``reserve_resp`` (``resp_valid``,
        ``rsv_ok``) and SET_CQ's result (``result``). Adds these."""
        # decisions, registered in the cycle after the word is in the row register
        full_r = Signal(reset_less=True)      # no room (or CQN out of range)
        sig_r = Signal(reset_less=True)       # completion: se or status ≠ 0 (arm mode 2)
        resp_valid = Signal()                 # reservation answer (registered)
        rsv_ok = Signal(reset_less=True)
        m.d.comb += [self.reserve_resp.valid.eq(resp_valid),
                     self.reserve_resp.payload.ok.eq(rsv_ok)]
        with m.If(self.reserve_resp.ready):
            m.d.sync += resp_valid.eq(0)

        # SET_CQ: the result, set when the command is taken (opcode, index) and replaced by
        # BAD_ARGUMENT as ARG0 and ARG2 are checked while it is still OK
        result = Signal(2, reset_less=True)
        return types.SimpleNamespace(full_r=full_r, sig_r=sig_r, resp_valid=resp_valid,
                                     rsv_ok=rsv_ok, result=result)

    def _placed(self, m, t):
        """The placed register, a completion's CQE address, phase, arm match and CQ for the
        writer; the address's upper bits are added as words 2 and 3 pass the row register (in
        ``s5``, ``s6``). Adds ``p_busy``, ``p_valid``, ``p_addr``, ``p_phase``, ``p_fire`` and
        ``p_cqn``."""
        ib, low, high, carry = t.ib, t.low, t.high, t.carry
        # the placed register: a completion's slot address, phase and arm match, waiting for
        # the writer; ``p_busy`` from the completion's acceptance until the writer's request
        # is taken (the record stays at ``complete`` until the writer copies it)
        p_busy = Signal()
        p_valid = Signal()
        p_addr = Signal(59, reset_less=True)  # address bits 63..5
        p_phase = Signal(reset_less=True)
        p_fire = Signal(reset_less=True)
        p_cqn = Signal(max(ib, 1), reset_less=True)
        with m.If(t.s5):                      # row = word 2: address bits 31..20
            m.d.sync += [p_addr[15:27].eq(high[4:16]), carry.eq(high[16])]
        with m.If(t.s6):                      # row = word 3: address bits 63..32
            m.d.sync += [p_addr[27:43].eq(low[:16]), p_addr[43:59].eq(high[:16]),
                         p_valid.eq(1)]
        return types.SimpleNamespace(p_busy=p_busy, p_valid=p_valid, p_addr=p_addr,
                                     p_phase=p_phase, p_fire=p_fire, p_cqn=p_cqn)

    def _event_merge(self, m, t):
        """The event output, shared by the table FSM (``a``: CQ overflow, the number from
        ``cur``) and the completion FSM (``b``: ``b_ev``); a registered output. Adds
        ``a_valid``, ``a_ready``, ``b_valid``, ``b_ready`` and ``b_ev``."""
        a_valid, a_ready = Signal(), Signal()
        b_valid, b_ready, b_ev = Signal(), Signal(), Signal(event_layout)
        ev_valid = Signal()
        ev = Signal(event_layout, reset_less=True)
        m.d.comb += [self.event.valid.eq(ev_valid), self.event.payload.eq(ev)]
        with m.If(~ev_valid | self.event.ready):
            with m.If(a_valid):
                m.d.comb += a_ready.eq(1)
                m.d.sync += [ev.type.eq(EventType.CQ_OVERFLOW), ev.number.eq(t.cur),
                             ev_valid.eq(1)]
            with m.Elif(b_valid):
                m.d.comb += b_ready.eq(1)
                m.d.sync += [ev.eq(b_ev), ev_valid.eq(1)]
            with m.Else():
                m.d.sync += ev_valid.eq(0)
        return types.SimpleNamespace(a_valid=a_valid, a_ready=a_ready, b_valid=b_valid,
                                     b_ready=b_ready, b_ev=b_ev)

    def _command(self, m, t):
        """The command port's result (SET_CQ's ``result``) and its ARG word, as SET_CQ's states
        read them. Adds ``arg`` and ``set_ok``."""
        arg = self.cmd.arg_data
        m.d.comb += self.cmd.resp.payload.result.eq(t.result)  # meaningful with ``resp.valid``
        set_ok = t.result == Result.OK
        return types.SimpleNamespace(arg=arg, set_ok=set_ok)

    def _table_fsm(self, m, t):
        """The table FSM ``cqe``: every table operation, one at a time, as a read-modify-write;
        its states are in the parts below, named in the order given here."""
        # the table operations' states: SET_CQ, reservation and completion, CQ_DB and
        # CQ_ARM, each in a method of its own below
        with m.FSM(name="cqe") as fsm:
            # Amaranth numbers the states (binary) in the order they are first named. They are
            # named here operation by operation, each operation's states consecutive: the state
            # decoding is smaller than with the order IDLE would name them in (the first state
            # of every operation, then the rest).
            for name in ("SWEEP", "IDLE", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8",
                         "R1", "R2", "R3", "EVENT", "P1", "P2", "P3", "P4",
                         "D1", "D2", "D3", "D4", "A1", "A2", "A3"):
                fsm.ongoing(name)
            self._sweep_state(m, t)
            self._idle_state(m, t)
            self._set_cq_states(m, t)
            self._reserve_complete_states(m, t)
            self._db_arm_states(m, t)

            with m.State("EVENT"):
                m.d.comb += t.a_valid.eq(1)
                with m.If(t.a_ready):
                    m.next = "IDLE"

    def _sweep_state(self, m, t):
        """SWEEP (inside the table FSM): after reset, every word of the table is written once
        (``_SWEPT``), so every CQ is unset."""
        ib, cur, wword, set_sel, setv, we = t.ib, t.cur, t.wword, t.set_sel, t.setv, t.we
        with m.State("SWEEP"):
            # The word in cur[ib + 1:ib], the CQ in cur[ib - 1:0]. The write issued for word
            # k of CQ n lands at ``_taddr(cur, k, ib)`` in the next cycle, when ``cur`` has moved
            # on: at word k of CQ n for k < 3, at word 3 of CQ n + 1 for k = 3. Every word is
            # written once, the last (word 3 of CQ 0) in the first IDLE cycle.
            sw = Cat(cur[ib:ib + 2], cur[:ib])
            m.d.comb += [self.sweeping.eq(1), wword.eq(cur[ib:ib + 2]), set_sel.eq(1),
                         setv.eq(_SWEPT), we.eq(1)]
            m.d.sync += sw.eq(sw + 1)
            with m.If(sw == 4 * self.num_cq - 1):
                m.next = "IDLE"

    def _idle_state(self, m, t):
        """IDLE (inside the table FSM): the choice of the next operation (a command, CQ_DB,
        CQ_ARM, a reservation, a completion, in this priority) and word 0's read for it."""
        ib, cin, cur, rd, result, p_busy = t.ib, t.cin, t.cur, t.rd, t.result, t.p_busy
        with m.State("IDLE"):
            # Word 0's read is addressed by the CQ_DB, reservation or completion taken. The
            # write landing in this cycle is never to a word 0 (P4 and A3 write word 1, the
            # sweep's last word 3), so the read is that of the word as the previous
            # operation left it.
            take_rsv = self.reserve.valid & ~t.resp_valid
            pick = Mux(take_rsv, self.reserve.payload.cqn, cin.cqn)
            m.d.comb += rd.addr.eq(_taddr(Mux(self.cq_db.valid, self.cq_db.payload.cqn, pick),
                                          0, ib))
            # ``cur`` is loaded in every IDLE cycle; in this cycle it is still the previous
            # operation's CQN, where the write landing now goes. Its bits above the CQ index
            # only count for a reservation or completion (range test, the overflow event's
            # number): CQ_DB and CQ_ARM test the range on their port, which holds the CQN
            # until the operation ends, and SET_CQ as it is taken.
            m.d.sync += [
                cur[:ib].eq(Mux(self.cmd.cmd.valid, self.cmd.cmd.payload.index,
                                Mux(self.cq_db.valid, self.cq_db.payload.cqn,
                                    Mux(self.cq_arm.valid, self.cq_arm.payload.cqn,
                                        pick)))[:ib]),
                cur[ib:].eq(pick[ib:]),
            ]
            with m.If(self.cmd.cmd.valid):
                m.d.comb += self.cmd.cmd.ready.eq(1)
                with m.If(self.cmd.cmd.payload.opcode != CmdOp.SET_CQ):
                    m.d.sync += result.eq(Result.UNKNOWN_OPCODE)
                with m.Elif(self.cmd.cmd.payload.index[ib:].any()):
                    m.d.sync += result.eq(Result.BAD_INDEX)
                with m.Else():
                    m.d.sync += result.eq(Result.OK)
                m.next = "C1"
            with m.Elif(self.cq_db.valid):
                m.next = "D1"
            with m.Elif(self.cq_arm.valid):
                m.next = "A1"
            with m.Elif(take_rsv):
                m.d.comb += self.reserve.ready.eq(1)
                m.next = "R1"
            with m.Elif(self.complete.valid & ~p_busy):
                m.d.sync += p_busy.eq(1)
                m.next = "P1"

    def _set_cq_states(self, m, t):
        """SET_CQ's states C1..C8 (inside the table FSM)."""
        arg, result, set_ok = t.arg, t.result, t.set_ok
        set_sel, setv, we, wword = t.set_sel, t.setv, t.we, t.wword
        # ---- SET_CQ: ARG n is addressed in one state and arrives in the next; ARG0 and
        # ARG2 are checked before anything is written (word 0 is issued as ARG2 is checked)
        with m.State("C1"):
            m.next = "C2"                     # ARG0 addressed
        with m.State("C2"):                   # ARG0 here
            m.d.comb += self.cmd.arg_addr.eq(2)
            with m.If(arg[:6] != 0):          # 64-byte aligned (§4.2)
                with m.If(result == Result.OK):
                    m.d.sync += result.eq(Result.BAD_ARGUMENT)
            m.next = "C3"
        with m.State("C3"):                   # ARG2 here: word 0
            with m.If(arg[4]):                # log2 > 15
                with m.If(result == Result.OK):
                    m.d.sync += result.eq(Result.BAD_ARGUMENT)
            m.d.comb += [set_sel.eq(1), setv.eq(Cat(Const(0, 32), arg[:4])),
                         we.eq(set_ok & ~arg[4])]
            m.next = "C4"
        with m.State("C4"):                   # ARG0 here: word 1
            m.d.comb += [wword.eq(1), set_sel.eq(1), we.eq(set_ok),
                         setv.eq(Cat(Const(0b000100, 6), arg[6:16], Const(0, 16),
                                     arg[16:20]))]
            m.next = "C5"
        with m.State("C5"):                   # ARG0 here: word 2
            m.d.comb += [self.cmd.arg_addr.eq(1), wword.eq(2), set_sel.eq(1),
                         setv.eq(arg), we.eq(set_ok)]
            m.next = "C6"
        with m.State("C6"):                   # ARG1 here: word 3
            m.d.comb += [wword.eq(3), set_sel.eq(1), setv.eq(Cat(arg, arg[:16].all())),
                         we.eq(set_ok)]
            m.next = "C7"
        with m.State("C7"):
            m.next = "C8"
        with m.State("C8"):
            m.d.comb += self.cmd.resp.valid.eq(1)
            with m.If(self.cmd.resp.ready):
                m.next = "IDLE"

    def _reserve_complete_states(self, m, t):
        """The reservation's (R1..R3) and the completion's (P1..P4) states."""
        ib, cin, cur, in_range, rword, wword, we = (t.ib, t.cin, t.cur, t.in_range, t.rword,
                                                    t.wword, t.we)
        r0, r1, q0, inc, dec, inc_hi, lo = t.r0, t.r1, t.q0, t.inc, t.dec, t.inc_hi, t.lo
        occ_full, full_r, sig_r, resp_valid, rsv_ok = (t.occ_full, t.full_r, t.sig_r,
                                                      t.resp_valid, t.rsv_ok)
        p_busy, p_addr, p_phase, p_fire, p_cqn = (t.p_busy, t.p_addr, t.p_phase, t.p_fire,
                                                  t.p_cqn)
        carry, s5 = t.carry, t.s5
        # ---- reservation and completion: word 0 read in IDLE, in the row register two
        # cycles later; a reservation tests and writes it back there (R2), a completion
        # registers its tests and writes it back the next cycle (P3) -----------------------
        with m.State("R1"):
            m.d.sync += [inc.eq(1), inc_hi.eq(1)]
            m.next = "R2"
        with m.State("R2"):                   # resv + 1, occ + 1
            full = occ_full | ~in_range
            m.d.comb += we.eq(~full)
            m.d.sync += full_r.eq(full)
            m.next = "R3"
        with m.State("R3"):
            m.d.sync += [resp_valid.eq(1), rsv_ok.eq(~full_r)]
            m.next = "IDLE"
            with m.If(full_r):
                m.next = "EVENT"

        with m.State("P1"):
            m.next = "P2"
        with m.State("P2"):                   # row = word 0: the tests
            has = Signal()                    # a reservation to use
            m.d.comb += [rword.eq(1), has.eq(~cin.flush & (r0.resv != 0) & in_range)]
            m.d.sync += [full_r.eq(occ_full | ~in_range), dec.eq(has), inc_hi.eq(~has),
                         sig_r.eq(cin.se | (cin.status != 0))]
            m.next = "P3"
        with m.State("P3"):                   # row = word 0 still: resv − 1, or occ + 1
            admit = dec | ~full_r
            m.d.comb += [rword.eq(2), we.eq(admit)]
            with m.If(admit):
                m.d.sync += inc_hi.eq(1)
                m.next = "P4"
            with m.Else():                    # discarded
                m.d.comb += self.complete.ready.eq(1)
                m.d.sync += p_busy.eq(0)
                m.next = "IDLE"
                with m.If(~cin.flush):
                    m.next = "EVENT"
        with m.State("P4"):                   # row = word 1: producer + 1, slot, phase, arm
            # log2 from word 0 as P3 wrote it (in ``wq`` until this cycle's write is issued)
            log2 = q0.log2
            mask = Signal(16)
            slot = Signal(15)
            match = Signal()
            m.d.comb += [
                rword.eq(3), wword.eq(1), we.eq(1),
                mask.eq(low_mask(log2)),
                slot.eq(r1.prod & mask),
                match.eq((r1.arm == 1) | ((r1.arm == 2) & sig_r)),
            ]
            with m.If(match):
                m.d.comb += lo[:2].eq(0)
            m.d.sync += [
                Cat(p_addr[:15], carry).eq(
                    Cat(slot[0], Cat(r1.base_lo, r1.base_hi) + slot[1:])),
                p_phase.eq(~r1.prod.bit_select(log2, 1)),
                p_fire.eq(match),
                p_cqn.eq(cur[:ib] if ib else 0),
                s5.eq(1),
            ]
            m.next = "IDLE"

    def _db_arm_states(self, m, t):
        """CQ_DB's (D1..D4) and CQ_ARM's (A1..A3) states."""
        ib, rword, wword, we, r1, q0 = t.ib, t.rword, t.wword, t.we, t.r1, t.q0
        lo, mid, fsm_d3 = t.lo, t.mid, t.fsm_d3
        # ---- CQ_DB: word 0 read in IDLE, word 1 in D1; occ = producer + resv − index. D2
        # (row = word 0) issues no write, so ``wq`` has word 0 in D3 (row = word 1), where
        # the word is written back from it with the new occ; its other bits hold in D3.
        with m.State("D1"):
            m.d.comb += rword.eq(1)
            m.next = "D2"
        with m.State("D2"):
            m.next = "D3"
        with m.State("D3"):                   # row = word 1, wq = word 0
            rmi = Signal(16)                  # resv − index, from registers and the port
            m.d.comb += [fsm_d3.eq(1),
                         rmi.eq(q0.resv - self.cq_db.payload.index), mid.eq(rmi + r1.prod),
                         we.eq(r1.valid & ~self.cq_db.payload.cqn[ib:].any())]
            m.next = "D4"
        with m.State("D4"):
            m.d.comb += self.cq_db.ready.eq(1)
            m.next = "IDLE"

        # ---- CQ_ARM: word 1 -------------------------------------------------------------
        with m.State("A1"):
            m.d.comb += rword.eq(1)
            m.next = "A2"
        with m.State("A2"):
            m.next = "A3"
        with m.State("A3"):                   # row = word 1
            mode = self.cq_arm.payload.mode
            m.d.comb += [wword.eq(1), lo[:2].eq(mode),
                         we.eq(r1.valid & ~self.cq_arm.payload.cqn[ib:].any()
                                  & ((mode == 1) | (mode == 2))),
                         self.cq_arm.ready.eq(1)]
            m.next = "IDLE"

    def _writer(self, m, t):
        """The writer: takes the placed completion, requests its CQE write, sends the beats."""
        W = self.width
        cin, inflight, p_valid, p_busy = t.cin, t.inflight, t.p_valid, t.p_busy
        p_addr, p_phase, p_fire, p_cqn = t.p_addr, t.p_phase, t.p_fire, t.p_cqn
        # ---- the writer: takes the placed record as it issues the request, then one burst --
        # The in-flight entry is pushed as the record is taken (before the request is taken:
        # its ``done`` comes later either way).
        c = Signal(_rec_layout, reset_less=True)
        nbeats = max(1, 256 // W)
        beat = Signal(range(nbeats), reset_less=True)
        m.d.comb += [
            self.mem.req.payload.addr.eq(Cat(Const(0, 5), p_addr)),
            self.mem.req.payload.len_bytes.eq(CQE_BYTES),
            self.mem.req.payload.tag.eq(0),
            inflight.i.payload.qpn.eq(cin.qpn),
            inflight.i.payload.cqn.eq(p_cqn),
            inflight.i.payload.fire.eq(p_fire),
        ]

        def request():
            m.d.comb += self.mem.req.valid.eq(1)
            with m.If(self.mem.req.ready):
                m.d.sync += [p_valid.eq(0), p_busy.eq(0), beat.eq(0)]
                m.next = "DATA"

        # the beats, from the copy (meaningful with ``data.valid`` only)
        imm = Signal(32)
        m.d.comb += imm.eq(Mux(c.flags & WITH_IMM,
                               Cat(c.imm_or_rkey[24:32], c.imm_or_rkey[16:24],
                                   c.imm_or_rkey[8:16], c.imm_or_rkey[0:8]),
                               c.imm_or_rkey))
        entry = Signal(cqe_entry_layout, name="cqe")   # the 32-byte entry; other bits 0
        m.d.comb += [
            entry.wr_id.eq(c.wr_id),
            entry.byte_len.eq(c.byte_len),
            entry.imm_or_rkey.eq(imm),
            entry.qpn.eq(c.qpn),
            entry.status.eq(c.status),
            entry.opcode.eq(c.opcode),
            entry.flags.eq(c.flags),
            entry.phase.eq(c.phase),
        ]
        cqe = entry.as_value()                # its bits, byte i = bits 8·i..8·i+7
        assert len(cqe) == 8 * CQE_BYTES
        m.d.comb += self.mem.data.payload.last.eq(beat == nbeats - 1)
        if W >= 256:
            # one beat; at W = 512 the entry in both halves, the strobes pick one
            m.d.comb += self.mem.data.payload.data.eq(Cat(*[cqe] * (W // 256)))
            if W == 256:
                m.d.comb += self.mem.data.payload.strb.eq(Const(0xFFFFFFFF, 32))
            else:
                m.d.comb += self.mem.data.payload.strb.eq(
                    Mux(c.half, Const(0xFFFFFFFF << 32, 64), Const(0xFFFFFFFF, 64)))
        else:
            with m.Switch(beat):
                for k in range(nbeats):
                    with m.Case(k):
                        m.d.comb += self.mem.data.payload.data.eq(cqe[k * W:(k + 1) * W])
            m.d.comb += self.mem.data.payload.strb.eq(Const((1 << (W // 8)) - 1, W // 8))

        with m.FSM(name="writer"):
            with m.State("IDLE"):
                # ``complete.ready`` and the copy's enable come from our own registers
                with m.If(p_valid & inflight.i.ready):
                    m.d.comb += [self.complete.ready.eq(1), inflight.i.valid.eq(1)]
                    err = cin.status != 0     # an error CQE: byte_len, bytes 12–15, flags 0
                    m.d.sync += [
                        c.wr_id.eq(cin.wr_id), c.qpn.eq(cin.qpn), c.status.eq(cin.status),
                        c.opcode.eq(cin.opcode), c.phase.eq(p_phase), c.half.eq(p_addr[0]),
                        c.byte_len.eq(Mux(err, 0, cin.byte_len)),
                        c.imm_or_rkey.eq(Mux(err, 0, cin.imm_or_rkey)),
                        c.flags.eq(Mux(err, 0, cin.flags)),
                    ]
                    m.next = "REQ"
                    request()
            with m.State("REQ"):
                request()
            with m.State("DATA"):
                m.d.comb += self.mem.data.valid.eq(1)
                with m.If(self.mem.data.ready):
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(beat == nbeats - 1):
                        m.next = "IDLE"

    def _done(self, m, t):
        """The ``done`` of each CQE write: the count, the armed CQ's event, a fault."""
        inflight, b_valid, b_ready, b_ev = t.inflight, t.b_valid, t.b_ready, t.b_ev
        # ---- completions of CQE writes: count, arm events, faults. The ``done`` and its
        # in-flight entry are held until their event (and fault) have left.
        d = inflight.o.payload
        d_err = self.mem.done.payload.err
        m.d.comb += [b_ev.type.eq(Mux(d_err, EventType.HOST_FAULT, EventType.COMPLETION)),
                     b_ev.number.eq(Mux(d_err, d.qpn, d.cqn)),
                     self.fault.payload.qpn.eq(d.qpn)]     # meaningful with ``fault.valid``

        def pop():
            m.d.comb += [self.mem.done.ready.eq(1), inflight.o.ready.eq(1)]

        with m.FSM(name="done"):
            with m.State("IDLE"):
                with m.If(self.mem.done.valid):
                    with m.If(d_err | d.fire):
                        m.next = "EVENT"
                    with m.Else():
                        pop()
                        m.d.comb += self.stat[Counter.COMPLETIONS].eq(1)
            with m.State("EVENT"):
                m.d.comb += b_valid.eq(1)
                with m.If(b_ready):
                    with m.If(d_err):
                        m.next = "FAULT"
                    with m.Else():
                        pop()
                        m.d.comb += self.stat[Counter.COMPLETIONS].eq(1)
                        m.next = "IDLE"
            with m.State("FAULT"):
                m.d.comb += self.fault.valid.eq(1)
                with m.If(self.fault.ready):
                    pop()
                    m.next = "IDLE"
