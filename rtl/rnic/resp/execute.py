"""Execute stage of the responder: Receive Queue fetch, Key checks, Scatter Path, invalidate and
the hand-off to CQE Generation (roce-reference.md §3.7–3.9, §3.11; interface.md §5.1, §5.4, §6).

It implements the execute-outcome interface of :class:`~rnic.resp.psn_check.PsnCheck`
(``exe`` commands, one ``done`` per command, in order; the commands' payload beats go to the
shared Scatter Path, :class:`~rnic.resp.scatter.SharedScatter`, which this stage drives through
its client port ``wr``). See ``docs/execute.md``.

Structure
---------
Four stages, each an FSM working on one command at a time, joined by small plan queues
(unbuffered: an entry is at the head in the cycle after its push), so four commands are
worked on at once while the shared Scatter Path streams an older packet's payload. A command's
plan (its pieces, the fields of its CQE) is written once by the planner into small RAMs
indexed by the command's plan slot; the queues and the stage registers carry a token of at
most 64 bits: the slot, the QP's table index, the outcome so far and the flags
a later stage decides on (design rule 3):

* **stage 1, the planner**:

  1. reads the per-QP tables (block RAM, ``num_qp`` rows): ``dead`` (the QP had a fatal
     outcome here, was flushed or a payload write of it faulted; its younger commands are
     skipped until ``qp_reset``), ``wqet`` (the ring index of the receive WQE
     the QP's message in progress holds: 16 bits, so every QP may have a message open) and
     ``cnext`` (the flush's start);
  2. finds the WQE in the shared *WQE store* (below) by {QP, index, ring}: ``wqe`` = 1 the
     WQE at ``rq_base + 64·(rq_index mod 2^rq_log)`` it takes (its index goes into
     ``wqet``), else (a SEND's later packet, or ``status`` ≠ 0) the one ``wqet`` names. On a
     miss it reads the WQE through :class:`~rnic.resp.rq_fetch.RqFetch` into the store's row
     of its own -- for a held WQE the store lost, again: a WQE stays in its ring slot until
     its completion, so correctness never depends on the store's size. It then cuts the
     pieces from that row's asynchronous read, holding no copy of the WQE;
  3. cuts the packet into at most three pieces: SEND → the overlap of ``[offset, offset +
     payload_len)`` with each SGE (zero-length SGEs skipped); RDMA WRITE → one piece at
     ``va + offset`` (none when ``dma_len`` = 0); decides the checks that need no lookup
     (``status`` ≠ 0, ``num_sge``, buffer overflow). A new RDMA READ (``status`` 0, not a
     duplicate) of a live QP needs none of this: its plan is the command's own, and it goes to
     stage 2 from DEC, the cycle after its take, while the planner records its PSN for
     duplicates (below);

* **stage 2, key checks**: one Key Cache lookup per piece (LOCAL_WRITE with the SGE's lkey,
  the QP's PD and the piece's range; REMOTE_WRITE with the rkey), keeping the bus addresses;
  it waits while an older packet's invalidate is still to be done (the lookups must see it).
  The response of a packet's last lookup passes the entry on in its own cycle, an entry with
  no piece goes on in the cycle it is taken, and a new READ's lookup leaves from the planner's
  DEC (from the planner's registers) when this stage is idle and ``key_q`` empty; a READ's
  job and ``done`` are pushed in the cycle after its answer when stages 3 and 4 are empty
  (:meth:`Execute._read_shortcut`);
* **stage 3, reservation**: re-reads the ``dead`` mark (an older command may have
  made the QP dead after stage 1 read them: the packet is then skipped), reserves a CQE slot
  when a CQE will be written, and marks the QP dead on a fatal outcome (so the younger packets
  behind are skipped before they reserve anything); an entry with nothing to reserve leaves in
  the cycle the marks are read;
* **stage 4, issue**: issues one host-memory write request per piece and the piece to the
  shared :class:`~rnic.resp.scatter.ScatterPath` (``wr``), then a closing piece that drops the
  packet's remaining beats (also when nothing is written); SEND_*_WITH_INVALIDATE: once the packet's
  last write beat is taken, the Key Cache ``inval``; pushes the ``done`` entry (released when
  the Scatter Path has finished the packet) and the CQE (released when every write issued so
  far has its OKAY-or-not ``done``); marks the QP dead on a fatal outcome (again: a refused
  invalidate is decided here; no younger packet passed stage 2 meanwhile).

The payload beats wait in the shared Scatter Path's FIFO, so the stage before (RX Parse's read
side) reaches the next packet's header while this one is planned.
Everything with an effect outside the stage (reservation, dead mark: stage 3; writes,
invalidate, ``done``, CQE, event 4 of a failed WQE read: stage 4) happens in command order;
stages 1 and 2
only read (a WQE taken by stage 1 for a packet stage 3 then skips is harmless: the QP is dead
until ``qp_reset``, and the flush reads from ``cnext``). A flush runs in stage 1 while stages
2 to 4 are empty.

Outcomes (``done`` = {fatal, syndrome}; CQE status)
---------------------------------------------------
* success: fatal 0; CQE (``comp``) SUCCESS, byte_len = offset + payload_len (SEND) or dma_len
  (WRITE_WITH_IMM), imm (wire order, as ``exe.imm_or_rkey``) or the invalidated rkey, flags.
* num_sge > 3, message longer than the buffer, failed lkey/range: fatal 0x63, CQE LOC_QP_OP_ERR,
  nothing of the packet written.
* failed rkey: fatal 0x62, CQE REM_ACCESS_ERR only when the command takes a WQE (``wqe`` = 1,
  WRITE_*_WITH_IMMEDIATE), nothing written.
* RDMA READ (interface.md §7): its one piece is its whole range, checked (REMOTE_READ, PD,
  range; not for a zero-length READ) and not written; success: fatal 0, one ``read`` job
  {QPN, PSN, MSN, bus address, length, path MTU} pushed with the ``done``; failed rkey: fatal
  0x62; no CQE either way. The planner keeps per QP the start PSNs of its last IRD READs
  (``rd_ring``): a new READ takes the oldest slot; a duplicate (``dup``) whose PSN is before
  the oldest held start → fatal 0x61, nothing answered.
* refused invalidate: fatal 0x1F, CQE REM_INV_REQ_ERR (the data was placed).
* CQ full at reservation: fatal 0 syndrome 0, no CQE, nothing written.
* ``status`` ≠ 0 (decided by PSN Check): CQE with that status for the held (or fetched) WQE,
  whatever the opcode (a READ request that broke a SEND's sequence included).
* WQE read non-OKAY (also a held WQE's read again): event 4, fatal with syndrome 0 (the QP
  goes to ERROR, nothing is sent), no CQE (wr_id unknown); the WQE counts as completed.
* data write non-OKAY (known only after its ``done`` left): event 4, one ``fault`` {qpn}
  transfer (the QP's owner must move it to ERROR), the QP is marked: its CQEs still waiting and
  later ones are written with LOC_QP_OP_ERR, its younger commands are skipped.
* a QP marked dead (fatal here, flushed, or write fault): no fetch, no lookup, no write, no
  CQE; ``done`` fatal 0 (PSN Check suppresses the QP's responses anyway).

The WQE store and the prefetch pool are in :mod:`rnic.resp.rq_fetch`.

Flush
-----
A third per-QP table holds the index of the QP's next receive WQE without a completion (set
past every WQE this stage completes, or loses to a full CQ or a read fault). A ``flush``
request ``{qpn, index, rcqn, rq_base, rq_log}`` (taken only while no ``exe`` waits and stages
2 to 4 are empty, so the commands PSN Check decided before it are done first) fetches each
WQE from there up to
``index`` and submits a WR_FLUSH_ERR CQE (``flush`` = 1, no reservation: CqeGen drops it if
the CQ is full), then marks the QP dead. PSN Check's ``rq_flush`` covers RQ doorbells in ERROR
but lacks ``rcqn``/``rq_base``/``rq_log`` and is not sent when a QP *enters* ERROR
(``docs/execute.md``).
"""

import types

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect

from ..host.axi_master import ReadClientSignature
from ..host.cqe_gen import WITH_IMM, WITH_INVALIDATE, cqe_layout
from ..ifaces import EventType, QpnStream, event_layout, read_job_layout
from ..keys.key_cache import Access, InvalSignature, LookupSignature
from ..opcodes import WcStatus
from ..stream import Queue, check_width
from .psn_check import done_layout, exe_layout
from .rq_fetch import MAX_SGE, RqFetch, prefetch_pool, wqe_store
from .scatter import CLIENT_TAG_BIT, PlaceSignature, piece_layout
from ..parts import add as _add, low_mask, one_hot as _one_hot, split_eq

__all__ = ["Execute", "RECV", "RECV_RDMA_WITH_IMM", "flush_layout", "PREFETCH_DEPTH"]

RECV = 128
RECV_RDMA_WITH_IMM = 129
#: WQEs per QP the prefetcher reads ahead by default (``nxt`` .. ``nxt`` + 2): with two, one
#: QP's back-to-back small SENDs wait for their WQE's read (the next read starts at a take)
PREFETCH_DEPTH = 3

#: The syndromes a command's ``done`` can carry, as the 3-bit code the plan tokens and
#: ``post_q`` carry (:func:`_syndrome` decodes it at ``done``)
_SYN = {0: 0, 0x61: 1, 0x62: 2, 0x63: 3, 0x1F: 4}


def _syndrome(code):
    """The AETH syndrome of a code of :data:`_SYN`."""
    return Mux(code[2], 0x1F, Mux(code[:2] == 0, 0, Cat(code[:2], Const(0x18, 6))))


_post_layout = data.StructLayout({"fatal": 1, "syndrome": 3, "beats": 1})


def _cqe_entry_layout(ab):
    """A CQE waiting for its writes' ``done``: the CQE's fields, flat, so the queue can register
    the fields its release decides on alone, and ``need`` (the write count it waits for). What
    the CQE's fields can hold is stored, not the fields: the QPN as the QP's table index (a
    command's QPN is below ``num_qp``), the opcode as ``rdma_imm`` (RECV_RDMA_WITH_IMM, else
    RECV) and the flags as ``imm`` (WITH_IMM) and ``inv`` (WITH_INVALIDATE)."""
    return data.StructLayout({
        "cqn": 16, "wr_id": 64, "byte_len": 32, "imm_or_rkey": 32, "qpn": ab, "status": 8,
        "rdma_imm": 1, "imm": 1, "inv": 1, "se": 1, "flush": 1, "need": 16})


#: CQE fields stored as they are in a queue entry
_CQE_COPIED = ("cqn", "wr_id", "byte_len", "imm_or_rkey", "qpn", "status", "se", "flush")


def _read_entry_layout(ab):
    """A READ job waiting for the READ response engine: ``read_job_layout`` with the QPN as the
    QP's table index."""
    return data.StructLayout({k: (ab if k == "qpn" else v.shape) for k, v in read_job_layout})


def _cqe_out(m, cqe, entry):
    """Drive the fields of the CQE ``cqe`` (``cqe_layout``) from the queue entry ``entry``."""
    m.d.comb += [getattr(cqe, k).eq(getattr(entry, k)) for k in _CQE_COPIED]
    m.d.comb += [cqe.opcode.eq(Mux(entry.rdma_imm, RECV_RDMA_WITH_IMM, RECV)),
                 cqe.flags.eq(Mux(entry.imm, WITH_IMM, 0) | Mux(entry.inv, WITH_INVALIDATE, 0))]
# Plan records. A command's plan is written once, by the planner, into small RAMs indexed by
# its plan slot (``PLAN_SLOTS`` of them, used round robin); what travels between the stages in
# the plan queues is a token of at most 64 bits: the slot, the QP's table index, the
# outcome so far and the flags each stage decides on.
#: Plan slots: more than the commands past the planner at most (key_q 2, iss_q 3 with stage
#: 3's, post_plan_q 2, stage 4 1) plus the planner's own, so the planner writes its slot at will.
PLAN_SLOTS = 16
_SLOT_BITS = 4
# read by stage 4: the CQE's fields the token does not carry (the QP is the token's), the
# completed WQE's index
_head_layout = data.StructLayout({
    "wr_id": 64, "byte_len": 32, "rdma_imm": 1, "imm": 1, "widx": 16,
})
# the same, written from ``exe`` when the planner takes the command (so they are not held in
# the planner's command register): ``imm_or_rkey`` is also the invalidate's key (no opcode has
# both ImmDt and IETH), and a READ's {MSN, path MTU} (a READ has no CQE). A flush's CQEs leave
# them as they are: an error CQE has no immediate (CQE Generation writes 0) and is solicited
# whatever ``se``
_take_layout = data.StructLayout({"imm_or_rkey": 32, "se": 1})
#: IRD: READs held per QP for duplicates at most (interface.md §4.2, ARG15[7:4]; 0 means 1)
MAX_IRD = 8
#: READ jobs that may wait for the READ response engine (one IRD's worth)
READ_JOBS = 8
# one piece as stage 4 reads it (as the key checks read it: its key, length and va, each in
# a RAM of its own; the length is 32 bits: an RDMA READ's one piece is its whole range, up to
# 2^31 bytes)
_spiece_layout = data.StructLayout({"len": 13, "src": 13})


def _cmd_layout(ab):
    """The planner's command ``c``: the fields of ``exe_layout`` its states read, the QPN as
    the QP's table index and the status as ``err`` (≠ 0: its value is loaded into the
    outcome's CQE status at the take). The fields only the take reads (the WRITE's or READ's
    va, length and rkey, the CQE's immediate, ``se``, the PD, a READ's MSN and path MTU) go
    from ``exe`` straight into their registers and plan RAMs."""
    return data.StructLayout({
        "qpn": ab, "psn": 24, "err": 1, "payload_len": 13, "wqe": 1, "comp": 1, "send": 1,
        "write": 1, "imm_valid": 1, "inv": 1, "offset": 32, "rq_index": 16, "rcqn": 16,
        "rq_base": 64, "rq_log": 5, "read": 1, "dup": 1, "ird": 4})


def _token_layout(ab, stage):
    """The plan token: ``stage`` "key" (planner -> key checks) or "issue" (-> stages 3, 4)."""
    fields = {
        "slot": _SLOT_BITS, "qpn": ab, "write": 1, "inv": 1, "has_beats": 1, "fatal": 1,
        "syn": 3, "cstat": 8, "cqe_on": 1, "nowrite": 1, "skip": 1, "cdone": 1, "rdflt": 1,
        "pv": MAX_SGE, "cqn": 16, "read": 1,
    }
    # (``nolook``: the entry has no piece to look up, ``nowrite`` or no piece valid)
    fields.update({"wqe": 1, "nolook": 1} if stage == "key" else {"invc": 1})
    return data.StructLayout(fields)


#: Flush request: complete the QP's receive WQEs from the first one without a completion
#: up to ``index`` (exclusive, the RQ producer index) with WR_FLUSH_ERR. ``rq_flush_layout``
#: of PSN Check plus the QP's recv CQN and RQ ring.
flush_layout = data.StructLayout({
    "qpn": 24, "index": 16, "rcqn": 16, "rq_base": 64, "rq_log": 5,
})

#: Write requests issued whose ``done`` is not back, at most (their tags count modulo 2 ×
#: MAX_WRITES, below the bit the shared Scatter Path takes).
MAX_WRITES = 64
assert 2 * MAX_WRITES <= 1 << CLIENT_TAG_BIT


def _first_valid(m, vec, after=None):
    """Lowest piece index with its bit set in ``vec`` (> ``after``), MAX_SGE if none."""
    out = Signal(range(MAX_SGE + 1))
    m.d.comb += out.eq(MAX_SGE)
    for i in reversed(range(MAX_SGE)):
        if after is None:
            with m.If(vec[i]):
                m.d.comb += out.eq(i)
        else:
            with m.If(vec[i] & (after < i)):
                m.d.comb += out.eq(i)
    return out


def _piece_ram(m, name, prefix, shape, wp, write, wr=None):
    """A plan RAM of rows {slot mod 4, piece} (``Memory`` ``name``), written by the planner one
    piece a cycle: ``wr[i].en`` (signals ``<prefix>_we<i>``, or the enables ``wr`` of another
    such RAM) writes piece i's row of slot ``wp`` with the statements ``write(i, row)``, the
    lowest piece enabled if several are. Returns ``(wr, rd)``, ``rd`` a combinational read
    port."""
    m.submodules[name] = mem = Memory(shape=shape, depth=4 * 4, init=[])
    port, rd = mem.write_port(), mem.read_port(domain="comb")
    if wr is None:
        wr = [types.SimpleNamespace(en=Signal(name=f"{prefix}_we{i}")) for i in range(MAX_SGE)]
    j = Signal(2, name=f"{prefix}_j")
    m.d.comb += j.eq(Mux(wr[0].en, 0, Mux(wr[1].en, 1, 2)))
    with m.Switch(j):
        for i in range(MAX_SGE):
            with (m.Case(i) if i < MAX_SGE - 1 else m.Default()):
                m.d.comb += write(i, port.data)
    m.d.comb += [port.addr.eq(Cat(j, wp[:2])), port.en.eq(Cat(*[w.en for w in wr]).any())]
    return wr, rd


class _BitTable:
    """A table of ``depth`` one-bit rows in LUT RAM, the rows packed four to a 4-bit word; its
    ports read as those of a ``Memory(shape=1)`` with one write port, cycle for cycle.

    A LUT-RAM memory takes a DPR16X4 (16 words of 4 bits) per 16 words and per read port, so a
    one-bit table of ``depth`` rows takes ``depth``/16 of them per read port, packed
    ``depth``/64 (and one port more, below). The write is a read-modify-write of its word, in
    two registered steps: the request (row, bit) is registered (``q``); from there its word is
    read (asynchronously), the row replaced, the write ahead of it forwarded when it is to the
    same word, and the new word registered (``r``), which is written in the cycle after.
    (Written in the request's cycle, yosys would turn the feedback into per-bit write enables
    and split the memory back into one-bit slices; read at the request, the writers' address
    select ran into the LUT RAM's read and the merge.) The reads are bypassed with both
    registered writes, the newer first, so they return what the one-bit memory returns: a
    synchronous read (not transparent) sees a write from the cycle after it, an asynchronous
    one too. :meth:`write_port` and :meth:`read_port` return objects with a port's ``addr``,
    ``data``, ``en``.
    """

    def __init__(self, m, depth, name):
        self._m = m
        self._abits = (depth - 1).bit_length()
        self.mem = Memory(shape=4, depth=max(depth // 4, 2), init=[],
                          attrs={"no_rw_check": 1})   # every read is bypassed (below)
        m.submodules[name] = self.mem
        n = name
        self._wp = types.SimpleNamespace(addr=Signal(self._abits, name=f"{n}_wa"),
                                         data=Signal(name=f"{n}_wd"), en=Signal(name=f"{n}_we"))
        # the registered request, then the registered write: its row, bit and the whole word
        self._q_en = Signal(name=f"{n}_q_en")
        self._q_row = Signal(self._abits, name=f"{n}_q_row")
        self._q_bit = Signal(name=f"{n}_q_bit")
        self._r_en = Signal(name=f"{n}_r_en")
        self._r_row = Signal(self._abits, name=f"{n}_r_row")
        self._r_bit = Signal(name=f"{n}_r_bit")
        r_word = Signal(4, name=f"{n}_r_word")
        wp, old = self._wp, self.mem.read_port(domain="comb")
        port = self.mem.write_port()
        base = Signal(4, name=f"{n}_base")
        q_row = self._q_row
        m.d.comb += [
            old.addr.eq(q_row[2:]),
            base.eq(Mux(self._r_en & (self._r_row[2:] == q_row[2:]), r_word, old.data)),
            port.addr.eq(self._r_row[2:]), port.data.eq(r_word), port.en.eq(self._r_en),
        ]
        m.d.sync += [self._q_en.eq(wp.en), self._q_row.eq(wp.addr), self._q_bit.eq(wp.data),
                     self._r_en.eq(self._q_en), self._r_row.eq(q_row),
                     self._r_bit.eq(self._q_bit)]
        for i in range(4):
            m.d.sync += r_word[i].eq(Mux(q_row[:2] == i, self._q_bit, base[i]))

    def write_port(self):
        return self._wp

    def read_port(self, domain="sync"):
        m = self._m
        rp = self.mem.read_port(domain=domain)
        addr = Signal(self._abits)
        m.d.comb += rp.addr.eq(addr[2:])
        hit_q = self._q_en & (self._q_row == addr)
        hit_r = self._r_en & (self._r_row == addr)
        if domain == "comb":
            return types.SimpleNamespace(
                addr=addr, data=Mux(hit_q, self._q_bit,
                                    Mux(hit_r, self._r_bit, rp.data.bit_select(addr[:2], 1))))
        lane = Signal(2)
        h = Signal()
        hbit = Signal()
        with m.If(rp.en):
            m.d.sync += [lane.eq(addr[:2]), h.eq(hit_q | hit_r),
                         hbit.eq(Mux(hit_q, self._q_bit, self._r_bit))]
        return types.SimpleNamespace(addr=addr, en=rp.en,
                                     data=Mux(h, hbit, rp.data.bit_select(lane, 1)))


class _LateWrite:
    """A write port of ``mem`` that takes effect one cycle late, with its synchronous read
    ports bypassed so that they return what they returned before (cycle for cycle).

    Drive ``addr``, ``data`` and ``en`` as those of a write port; they are registered into the
    memory's port, so the decision to write -- several priorities, some of them decided late in
    the cycle by another block's ``ready`` -- ends at a register, not at the write enable of
    every LUT-RAM cell of the table. :meth:`read` wraps a non-transparent synchronous read port: a
    read in the cycle the registered write is applied returns its data, as a read one cycle after
    the write did.
    """

    def __init__(self, m, mem, name):
        self._m = m
        wp = mem.write_port()
        self.addr = Signal.like(wp.addr, name=f"{name}_waddr")
        self.data = Signal(mem.shape, name=f"{name}_wdata")
        self.en = Signal(name=f"{name}_wen")
        m.d.sync += [wp.addr.eq(self.addr), wp.data.eq(self.data), wp.en.eq(self.en)]
        self._wp = wp

    def read(self, rp, name):
        """The data of synchronous read port ``rp``, bypassed (hold with ``en`` low, as it)."""
        m, wp = self._m, self._wp
        hit = Signal(name=f"{name}_byp_hit")
        hdata = Signal(rp.data.shape(), name=f"{name}_byp_data")
        with m.If(rp.en):
            m.d.sync += [hit.eq(wp.en & (wp.addr == rp.addr)), hdata.eq(wp.data)]
        out = Signal(rp.data.shape(), name=f"{name}_data")
        m.d.comb += out.eq(Mux(hit, hdata, rp.data))
        # (the bypass's registers, for a reader that registers ``rp.data`` before the mux)
        self.hit, self.hdata = hit, hdata
        return out


class Execute(wiring.Component):
    """The responder's execute stage (see the module docstring).

    Parameters
    ----------
    width : int
        Data width W (64, 128, 256, 512).
    num_qp : int
        Number of QPs (power of two): rows of the per-QP tables. Every command's QPN is below
        it (PSN Check drops frames to other QPNs); events and faults report the QPN as the
        table index.
    prefetch : int
        Slots of the WQE prefetch pool (0..16; 0: no prefetch, WQEs read on demand): rows
        0..``prefetch`` − 1 of the WQE store, which also holds the WQEs of the messages in
        progress (a lost one is read again).
    prefetch_depth : int
        WQEs per QP the prefetcher reads ahead (1, 2 or 3, default :data:`PREFETCH_DEPTH`:
        ``nxt``, and ``nxt`` + 1 and ``nxt`` + 2 into free slots only).
    read : bool
        RDMA READ (default True). False: no command is taken as a READ (PSN Check refuses READ
        requests then), so no ``read`` job is ever pushed.

    Attributes
    ----------
    exe : In(stream.Signature(exe_layout))
        Execute commands from PSN Check (their payload beats, none when ``payload_len`` = 0,
        go to the Scatter Path's input of this client).
    done : Out(stream.Signature(done_layout))
        One outcome per command, in order.
    qp_reset : In(stream.Signature({qpn 24}))
        SET_QP of a QP to RESET: clears its ``dead`` and write-fault marks and its completion
        index. Always ready; registered at the port with ``rq_post`` (both act a cycle later,
        in the order they came).
    flush : In(stream.Signature(flush_layout))
        The QP is in ERROR: flush its receive WQEs up to ``index`` (see ``docs/execute.md``).
        Taken only while no ``exe`` command is waiting.
    rd : Out(ReadClientSignature(W))
        HostMemory read client (WQE fetch).
    wr : Out(PlaceSignature())
        A client port of :class:`~rnic.resp.scatter.SharedScatter`: the payload writes and
        their pieces (tags below bit ``CLIENT_TAG_BIT``).
    lookup : In(LookupSignature())
        A Key Cache lookup port (``lookup.req`` out, ``lookup.resp`` in).
    inval : In(InvalSignature())
        The Key Cache remote-invalidate port.
    reserve : Out(stream.Signature({cqn 16}))
    reserve_resp : In(stream.Signature({ok 1}))
    complete : Out(stream.Signature(cqe_layout))
        The CqeGen ports of the same names.
    event : Out(stream.Signature(event_layout))
        Event 4 (host-memory fault) with the QPN.
    fault : Out(stream.Signature({qpn 24}))
        A payload write came back non-OKAY after its ``done`` left: move this QP to ERROR.
    read : Out(stream.Signature(read_job_layout))
        One job per RDMA READ request answered (interface.md §7), in command order, pushed no
        later than the command's ``done``: the READ response engine's input.
    rq_post : In(stream.Signature(flush_layout, always_ready=True))
        Valid for one cycle per RQ doorbell that took effect (QP in INIT, RTR or RTS):
        {qpn, index = the new producer index, rq_base, rq_log} (``rcqn`` unused). Drives the
        WQE prefetch; never valid (unconnected) = no prefetch, everything else unchanged. Must
        not report a doorbell PSN Check ignored (RESET, ERROR), nor one older than the QP's
        last ``qp_reset``.
    """

    def __init__(self, *, width, num_qp=64, prefetch=8, prefetch_depth=PREFETCH_DEPTH,
                 read=True):
        self.width = check_width(width)
        self.rdma_read = read      # (``read`` is the READ job port)
        if not isinstance(num_qp, int) or num_qp < 4 or num_qp & (num_qp - 1):
            raise ValueError(f"num_qp must be a power of two ≥ 4, not {num_qp!r}")
        if not isinstance(prefetch, int) or not 0 <= prefetch <= 16:
            raise ValueError(f"prefetch must be an integer 0..16, not {prefetch!r}")
        if not isinstance(prefetch_depth, int) or not 1 <= prefetch_depth <= 3:
            raise ValueError(f"prefetch_depth must be 1, 2 or 3, not {prefetch_depth!r}")
        self.num_qp = num_qp
        self.prefetch = prefetch
        self.prefetch_depth = prefetch_depth
        super().__init__({
            "exe": In(stream.Signature(exe_layout)),
            "done": Out(stream.Signature(done_layout)),
            "qp_reset": In(QpnStream()),
            "flush": In(stream.Signature(flush_layout)),
            "rq_post": In(stream.Signature(flush_layout, always_ready=True)),
            "rd": Out(ReadClientSignature(width)),
            "wr": Out(PlaceSignature()),
            "lookup": In(LookupSignature()),
            "inval": In(InvalSignature()),
            "reserve": Out(stream.Signature(data.StructLayout({"cqn": 16}))),
            "reserve_resp": In(stream.Signature(data.StructLayout({"ok": 1}))),
            "complete": Out(stream.Signature(cqe_layout)),
            "event": Out(stream.Signature(event_layout)),
            "fault": Out(QpnStream()),
            "read": Out(stream.Signature(read_job_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        B = self.width // 8
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows (so the write completions and the
        # release come between the planner's parts).
        t = types.SimpleNamespace(W=self.width, lb=B.bit_length() - 1,
                                  ab=(self.num_qp - 1).bit_length(), P=self.prefetch)
        _add(t, self._ports(m, t))
        _add(t, self._tables(m, t))
        # stage 1, the planner: its command and the IRD tables, the WQE store and its reads
        _add(t, self._plan_command(m, t))
        _add(t, self._wqe_reads(m, t))
        # the write counters, the writes' done, and the done/CQE release at the output
        _add(t, self._counters(m, t))
        _add(t, self._write_completions(m, t))
        self._release(m, t)
        # stage 1: the pieces, the outcome registers, the plan records and queues, its FSM
        _add(t, self._pieces(m, t))
        _add(t, self._piece_fields(m, t))
        _add(t, self._outcome(m, t))
        _add(t, self._plan_records(m, t))
        self._planner(m, t)
        # stages 2, 3 and 4
        self._key_checks(m, t)
        _add(t, self._reservation(m, t))
        _add(t, self._issue_select(m, t))
        self._read_shortcut(m, t)
        self._issue(m, t)
        return m

    def _ports(self, m, t):
        """The port registers and the blocks around the stages: ``qp_reset`` and ``rq_post``
        registered (``rst``, ``post``), the WQE reads (``fetch``), the piece queue toward the
        shared Scatter Path (``pq``, its input), and the queues toward
        the outputs (``post_q``, ``cqe_q``, ``ev_q``, ``fault_q``). Adds these."""
        W, ab = t.W, t.ab
        # ``qp_reset`` and ``rq_post`` are registered here, together (their order is kept):
        # ``qp_reset`` leaves PSN Check's command decode and drives the priorities of every
        # per-QP table write and the prefetch pool's claim, so inside this block it starts
        # from a flip-flop. Both take effect one cycle after they are valid at the ports.
        rst = stream.Signature(data.StructLayout({"qpn": ab})).create()
        post = stream.Signature(self.rq_post.payload.shape()).create()
        m.d.comb += self.qp_reset.ready.eq(1)
        m.d.sync += [rst.valid.eq(self.qp_reset.valid),
                     rst.payload.qpn.eq(self.qp_reset.payload.qpn[:ab]),
                     post.valid.eq(self.rq_post.valid), post.payload.eq(self.rq_post.payload)]

        m.submodules.fetch = fetch = RqFetch(width=W, depth=4)
        connect(m, fetch.mem, wiring.flipped(self.rd))
        # (unbuffered: the Scatter Path's set-up register is the queue's output register)
        m.submodules.piece_q = piece_q = Queue(piece_layout, 4, buffered=False)
        connect(m, piece_q.o, wiring.flipped(self.wr.piece))
        pq = piece_q.i

        # (what ``done``'s handshake decides on from the output register, the syndrome from the
        # ring; an entry posted while none waits is offered the next cycle)
        m.submodules.post_q = post_q = Queue(_post_layout, 8, registered=("fatal", "beats"),
                                             bypass=True)
        # the CQE's record is read from the queue's LUT RAM at its head (the merge in front
        # of CQE Generation registers it); what the release and the fault mark decide on
        # leaves from the output register
        m.submodules.cqe_q = cqe_q = Queue(_cqe_entry_layout(ab), 8,
                                           registered=("need", "qpn", "status", "flush"),
                                           bypass=True)
        # (event 4 and faults: the QP's table index, which is its QPN)
        qi_layout = data.StructLayout({"qpn": ab})
        m.submodules.ev_q = ev_q = Queue(qi_layout, 4)
        m.submodules.fault_q = fault_q = Queue(qi_layout, 4)
        for q, port in ((ev_q, self.event), (fault_q, self.fault)):
            m.d.comb += [port.valid.eq(q.o.valid), q.o.ready.eq(port.ready)]
        m.d.comb += [self.event.payload.type.eq(EventType.HOST_FAULT),
                     self.event.payload.number.eq(ev_q.o.payload.qpn),
                     self.fault.payload.qpn.eq(fault_q.o.payload.qpn)]
        return types.SimpleNamespace(
            cqe_q=cqe_q, ev_q=ev_q, fault_q=fault_q, fetch=fetch, post=post, post_q=post_q, pq=pq,
            rst=rst)

    def _tables(self, m, t):
        """The per-QP tables (``dead``, ``wqet``, ``wflt``, ``cnext``) and the write tag -> QPN
        table (``wqpn``). Adds their ports; the parts behind drive the addresses, enables and
        rows."""
        ab = t.ab
        # ---- per-QP tables ----------------------------------------------------------------
        # ``dead`` and ``wflt``: one bit per QP, packed (_BitTable, written from registers)
        dead = _BitTable(m, self.num_qp, "dead")
        dead_rd = dead.read_port()
        dead_wr = dead.write_port()
        dead_rd_data = dead_rd.data
        # the ring index of the WQE the QP's message in progress holds (its words are in the
        # shared WQE store, found by {QP, index, ring}). ``no_rw_check``: the row is written in
        # the cycle after a take (from registers: ``take_r``, c unchanged) and read in
        # IDLE/PUSH (_take_next), so a read never meets the write
        m.submodules.wqet = wqet = Memory(shape=16, depth=self.num_qp, init=[],
                                          attrs={"no_rw_check": 1})
        wqe_rd = wqet.read_port()
        wqe_wr = wqet.write_port()
        # write faults: set by a non-OKAY write done (with ``dead``), read by the CQE release
        wflt = _BitTable(m, self.num_qp, "wflt")
        wflt_rel = wflt.read_port(domain="comb")
        wflt_wr = wflt.write_port()
        # index of the next receive WQE of the QP without a completion
        # ``no_rw_check``: its reads go through _LateWrite's bypass, which replaces the RAM's
        # data whenever the read meets the write of the same row
        m.submodules.cnext = cnext = Memory(shape=16, depth=self.num_qp, init=[],
                                            attrs={"no_rw_check": 1})
        cnext_rd = cnext.read_port()
        cnext_wr = _LateWrite(m, cnext, "cnext")
        cnext_rd_data = cnext_wr.read(cnext_rd, "cnext_rd")
        # write tag -> QPN, by the tag's low bits: at most MAX_WRITES writes are out
        # (the table index: a command's QPN is below ``num_qp``, PSN Check drops the others)
        m.submodules.wqpn = wqpn = Memory(shape=ab, depth=MAX_WRITES, init=[])
        wqpn_rd = wqpn.read_port()
        wqpn_wr = wqpn.write_port()
        return types.SimpleNamespace(
            cnext_rd=cnext_rd, cnext_rd_data=cnext_rd_data, cnext_wr=cnext_wr, dead=dead,
            dead_rd=dead_rd, dead_rd_data=dead_rd_data, dead_wr=dead_wr, wflt=wflt,
            wflt_rel=wflt_rel, wflt_wr=wflt_wr, wqe_rd=wqe_rd, wqe_wr=wqe_wr,
            wqpn_rd=wqpn_rd, wqpn_wr=wqpn_wr)

    def _plan_command(self, m, t):
        """The planner's command ``c``, the IRD tables (``rd_meta``, ``rd_ring``) and the registers
        of the IRD states, the shared WQE store (``wqe``, read at ``prow``) and the registers of
        the store look-up; and the addresses of the per-QP tables' reads for the command (or flush)
        offered. Adds these."""
        (P, W, ab, cnext_rd, dead_rd, fetch, rst, wqe_rd, wqe_wr) = (
            t.P, t.W, t.ab, t.cnext_rd, t.dead_rd, t.fetch, t.rst, t.wqe_rd, t.wqe_wr)
        c = Signal(_cmd_layout(ab))            # the command being planned
        # The READs held for duplicates (interface.md §7, IRD): per QP the start PSNs of its
        # last IRD READs, a ring of MAX_IRD entries (``rd_ring``, block RAM, row {QP, slot}), and
        # its next slot and fill (``rd_meta``). A duplicate READ is answered when its PSN is
        # at or after the oldest held READ's start (it is behind ePSN, PSN Check made sure);
        # else fatal 0x61.
        m.submodules.rd_meta = rd_meta = Memory(
            shape=data.StructLayout({"wp": 3, "cnt": 4}), depth=self.num_qp, init=[])
        rdm_rd = rd_meta.read_port()
        rdm_wr = rd_meta.write_port()
        # ``no_rw_check``: only RD_RING writes the ring, and only for a new READ; the read its
        # data is used from (``rd_first``, in RD_HELD) is RD_RING's of a duplicate, which
        # writes nothing, so a read meeting a write is never used (and ``rd_first`` is the
        # block RAM's output register, no read-first multiplexer in front of it)
        m.submodules.rd_ring = rd_ring = Memory(shape=24, depth=self.num_qp * MAX_IRD, init=[],
                                                attrs={"no_rw_check": 1})
        rdr_rd = rd_ring.read_port()
        rdr_wr = rd_ring.write_port()
        # (rd_meta's row, registered in RD_META and read only in the IRD states after it: no
        # reset needed; ``rd_first`` too)
        rm_wp = Signal(3, reset_less=True)
        rm_cnt = Signal(4, reset_less=True)
        rm_ird = Signal(4)                     # the QP's IRD, 1..8
        rd_cnt = Signal(4)                     # held READs (≤ IRD)          (RD_CALC)
        rd_old = Signal(3)                     # the oldest held READ's slot (RD_CALC)
        rd_nw = Signal(4)                      # the count after a new READ  (RD_CALC)
        rd_first = Signal(24, reset_less=True)  # the oldest held READ's first PSN (RD_HELD)
        rd_bad = Signal()                      # a duplicate of no held READ  (RD_HELD)
        rd_new = Signal()                      # c is a new READ, status 0 (registered at take)
        rd_sent = Signal()                     # c (a new READ) went into ``key_q`` in DEC
        m.d.comb += [rdm_rd.addr.eq(c.qpn[:ab]), rdm_wr.addr.eq(c.qpn[:ab]),
                     rdr_wr.data.eq(c.psn)]
        # The oldest held READ's first PSN: ``rd_ring`` read at {``rd_old``, QP} in every
        # cycle (``rd_old`` is set in RD_CALC; the ring is written only in RD_RING, of a new
        # READ) and registered as it comes, so in RD_HELD ``rd_first`` holds what RD_RING's
        # read returned, and the register is the block RAM's output register (nothing but the
        # port's data feeds it, under no enable)
        m.d.comb += rdr_rd.addr.eq(Cat(rd_old, c.qpn[:ab]))
        m.d.sync += rd_first.eq(rdr_rd.data)
        with m.If(rst.valid):
            # qp_reset: no READ held
            m.d.comb += [rdm_wr.addr.eq(rst.payload.qpn), rdm_wr.data.eq(0), rdm_wr.en.eq(1)]
        # The shared WQE store (LUT RAM): rows 0..P-1 the pool's slots, row P the planner's
        # own reads, each written beat by beat by its read. A QP's WQE stays in the row it was
        # read into, tagged {QP, index, ring}, while its message runs; the planner reads the
        # fields from the row ``prow`` (asynchronously), never from a copy in registers.
        wqs_addr, wqs_data = wqe_store(m, P + 1, W, fetch.beat)
        wqe = wqs_data
        prow = Signal(range(P + 1))            # the store row the planner works from
        prow_oh = Signal(max(P, 1))            # the slot a pool hit sets ``prow`` to, one-hot
                                               # (valid while ``pin``): the slot compares
                                               # start from flip-flops
        pin = Signal()                         # ``prow`` is a pool slot the planner uses
        pchk = Signal()                        # ``prow`` is a pool slot just hit: its ring
                                               # (``ring_ok``) is tested in the next state
        # the tags were compared with c's index (held WQE: c's index is ``wqet``'s row), as
        # eight 2-bit compares registered in DEC and ANDed in LOOK: the 16-bit compare ran
        # into the state's enable, and in DEC one of its operands is the ``wqet`` block RAM's
        # output, which leaves time for one LUT level
        look_eq = Signal(8)
        look_ld = Signal()                     # LOOK follows LOOK_LD: c's index is the held one
        wq_held = Signal(16)                   # ``wqet``'s row, registered in DEC
        zlen = Signal()                        # c has no payload at offset 0 (DEC)
        m.d.comb += wqs_addr.eq(prow)
        in_qpn = Signal(ab)
        take_flush = Signal()
        m.d.comb += [take_flush.eq(~self.exe.valid & self.flush.valid),
                     in_qpn.eq(Mux(take_flush, self.flush.payload.qpn[:ab],
                                   self.exe.payload.qpn[:ab]))]
        m.d.comb += [dead_rd.addr.eq(in_qpn),
                     cnext_rd.addr.eq(in_qpn),
                     wqe_rd.addr.eq(in_qpn),
                     wqe_wr.addr.eq(c.qpn[:ab]), wqe_wr.data.eq(c.rq_index)]
        return types.SimpleNamespace(
            c=c, look_eq=look_eq, look_ld=look_ld, pchk=pchk, pin=pin, prow=prow, prow_oh=prow_oh,
            rd_bad=rd_bad, rd_cnt=rd_cnt, rd_first=rd_first, rd_new=rd_new, rd_nw=rd_nw,
            rd_old=rd_old, rd_sent=rd_sent, rdm_rd=rdm_rd, rdm_wr=rdm_wr, rdr_rd=rdr_rd,
            rdr_wr=rdr_wr,
            rm_cnt=rm_cnt, rm_ird=rm_ird, rm_wp=rm_wp, wq_held=wq_held, wqe=wqe, zlen=zlen)

    def _wqe_reads(self, m, t):
        """The WQE reads: the planner's own (tag DEMAND, address ``faddr_c``), the prefetch pool
        (``pool``, with the planner's strobes it waits on) and the tags of the store's row P
        (``d_*``). Adds these."""
        (P, ab, c, fetch, pin, post, prow_oh, rst, wqe_wr) = (
            t.P, t.ab, t.c, t.fetch, t.pin, t.post, t.prow_oh, t.rst, t.wqe_wr)
        # ---- WQE reads: the planner's (tag DEMAND) and the prefetcher's (tag = pool slot) ----
        # (a response is the planner's when its tag's bit 7 is set: pool slots are < 16, and
        # the one-bit test keeps the response's decode short before the take)
        DEMAND = 0xFF
        # c's WQE address (comb): c is unchanged from the state that settles its index to
        # the read's request (FETCH), and RqFetch registers the request
        faddr_c = Signal(64)
        plan_fetch = Signal()                  # the planner requests a read this cycle
        m.d.comb += [fetch.req.payload.addr.eq(faddr_c), fetch.req.payload.tag.eq(DEMAND)]
        take = Signal()                        # the planner takes WQE c.rq_index of c.qpn
        take_r = Signal()                      # take, registered (c is unchanged a cycle on)
        m.d.sync += take_r.eq(take)
        m.d.comb += wqe_wr.en.eq(take_r)
        plan_look = Signal()                   # the planner is in HIT
        # registers the prefetcher's claims wait on (a state decode would put the planner's
        # state register in front of every slot tag's enable), each 1 in every cycle the
        # planner is in the states named and perhaps one cycle more: ``plan_hit_r`` in HIT
        # (it may hit a slot and pin it); ``plan_tk`` in DEC, LOOK, HIT, TAKE, FETCH and
        # FETCH_WAIT (from DEC to its take the planner holds the QP's next WQE, found in a
        # slot or read itself: a prefetch of that WQE now would be a second read of it)
        # ``c_ld``: the planner is in a state that may load c from the command (IDLE, RD_RING,
        # PUSH: ``_take_next``), so the prefetcher's QP compare with c, registered, is exact in
        # DEC: it compares the QP c takes. It is the state alone, not whether the take
        # happens: without a take ``plan_tk`` is 0 in the next cycle, where the compare is
        # read only with ``plan_tk`` (and a flush's c is not followed by ``plan_tk``); so
        # ``qp_reset`` and the queues' handshakes stay out of the compare's path.
        plan_hit_r = Signal()
        plan_tk = Signal()
        c_ld = Signal()
        c_qpn_n = Signal(ab)
        m.d.comb += c_qpn_n.eq(Mux(c_ld, self.exe.payload.qpn[:ab], c.qpn[:ab]))
        release = Signal()                     # the planner is done with the WQE in ``prow``
        # the pool's own copy of ``rst.valid`` (kept: synthesis would merge the two), so its
        # claim hold and slot voids are not loads of the net that enables every table write
        rst_pf = Signal(name="rst_pf", attrs={"keep": 1})
        m.d.sync += rst_pf.eq(self.qp_reset.valid)
        rst_pool = types.SimpleNamespace(valid=rst_pf, payload=rst.payload)
        pool = (prefetch_pool(m, prefetch=P, prefetch_depth=self.prefetch_depth,
                              num_qp=self.num_qp, fetch=fetch, plan_fetch=plan_fetch,
                              plan_look=plan_look, plan_hit_r=plan_hit_r, plan_tk=plan_tk,
                              c_qpn_n=c_qpn_n, take=take, take_r=take_r, c=c, ab=ab,
                              rst=rst_pool,
                              rp=post, prow_oh=prow_oh, pin=pin, release=release)
                if P else None)
        ring_ok = pool["ring_ok"] if P else Const(1, 1)
        # the tags of row P (the planner's own reads): {valid, QP, index, ring}, set when a
        # read for a command (not a flush) comes back OKAY, voided when the next read is
        # issued, by a take of another WQE of the QP and by the QP's ``qp_reset``; compared
        # with c every cycle (registered: made in the state before the look-up, as the pool's)
        d_valid = Signal()
        d_qpn = Signal(ab)
        d_index = Signal(16)
        d_ring = Signal(63)
        d_eq = Signal()
        c_ring = Cat(c.rq_base[6:], c.rq_log)
        # (the tags' 87 bits compared in three registered parts of at most 32 bits, ANDed
        # where ``d_eq`` is tested: a 32-bit compare is three LUT levels, the whole one five)
        tag_d = Cat(d_qpn, d_index, d_ring)
        tag_c = Cat(c.qpn[:ab], c.rq_index, c_ring)
        m.d.comb += d_eq.eq(split_eq(m, tag_d, tag_c, "d_eqs"))
        with m.If((rst.valid & (rst.payload.qpn == d_qpn))
                  | (take & (c.qpn[:ab] == d_qpn) & (c.rq_index != d_index))):
            m.d.sync += d_valid.eq(0)
        return types.SimpleNamespace(
            c_ring=c_ring, d_eq=d_eq, d_index=d_index, d_qpn=d_qpn, d_ring=d_ring, d_valid=d_valid,
            c_ld=c_ld, faddr_c=faddr_c, plan_fetch=plan_fetch,
            plan_hit_r=plan_hit_r, plan_look=plan_look, plan_tk=plan_tk, pool=pool,
            release=release, ring_ok=ring_ok, take=take)

    def _counters(self, m, t):
        """The write requests issued and done (``wr_cnt``, ``wr_done``, stage 4's ``room``), the
        closing pieces pushed and the packets the Scatter Path finished (``sc_out``, ``tok``). Adds
        these and their strobes."""
        # ---- counters ---------------------------------------------------------------------
        wr_cnt = Signal(16)                    # write requests issued
        wr_done = Signal(16)                   # their done transfers back
        wr_inc = Signal()                      # stage 4 issues a write request this cycle
        room = Signal(init=1)                  # wr_cnt − wr_done < MAX_WRITES (registered)
        sc_out = Signal(range(16))             # closing pieces pushed, packet not finished
        tok = Signal(range(16))                # packets finished, done not yet returned
        push_close = Signal()
        pop_tok = Signal()
        m.d.sync += [sc_out.eq(sc_out + push_close - self.wr.pkt_done),
                     tok.eq(tok + self.wr.pkt_done - pop_tok)]
        return types.SimpleNamespace(
            pop_tok=pop_tok, push_close=push_close, room=room, sc_out=sc_out, tok=tok,
            wr_cnt=wr_cnt, wr_done=wr_done, wr_inc=wr_inc)

    def _write_completions(self, m, t):
        """The payload writes' ``done``: counted (and stage 4's room for more), a non-OKAY one
        marked on its QP and reported (event 4, ``fault``). Adds the planner's event request
        (``plan_ev``, ``plan_ev_qpn``, sharing the event queue) and ``wd_err``."""
        (ev_q, fault_q, room, rst, wflt_wr, wqpn_rd, wr_cnt, wr_done, wr_inc) = (
            t.ev_q, t.fault_q, t.room, t.rst, t.wflt_wr, t.wqpn_rd, t.wr_cnt, t.wr_done, t.wr_inc)
        # ---- write completions: count, fault report ---------------------------------------
        # (registered first: the tag -> QPN table is read as the done is taken, into the read
        # port's register, so the fault's marks and queues start from a register. The entry
        # is not rewritten meanwhile: tags are issued in order, a tag again only after its
        # done is counted, at ``d1_go``.)
        wd = self.wr.done
        d1_v = Signal()
        d1_err = Signal()
        d1_go = Signal()
        # ``d1_v & d1_err`` as a register of its own (loaded with them): stage 4's POST and the
        # planner's event request wait on it, and so start from one flip-flop, not an AND
        wd_err = Signal()
        m.d.comb += [
            # (a fault waits while a qp_reset clears the marks)
            d1_go.eq(d1_v & (~d1_err | (ev_q.i.ready & fault_q.i.ready & ~rst.valid))),
            wd.ready.eq(~d1_v | d1_go),
            wqpn_rd.addr.eq(wd.payload.tag[:MAX_WRITES.bit_length() - 1]),
            wqpn_rd.en.eq(wd.ready)]
        with m.If(wd.ready):
            m.d.sync += [d1_v.eq(wd.valid), d1_err.eq(wd.payload.err),
                         wd_err.eq(wd.valid & wd.payload.err)]
        with m.If(d1_go):
            m.d.sync += wr_done.eq(wr_done + 1)
        # stage 4's room check ``wr_cnt − wr_done < MAX_WRITES`` one cycle ahead: the compares
        # of the present difference registered, selected by this cycle's issue and done
        wr_out = Signal(16)
        m.d.comb += wr_out.eq(wr_cnt - wr_done)
        m.d.sync += room.eq(Mux(wr_inc, Mux(d1_go, wr_out < MAX_WRITES, wr_out < MAX_WRITES - 1),
                                Mux(d1_go, wr_out < MAX_WRITES + 1, wr_out < MAX_WRITES)))
        # a fault marks the QP in ``wflt`` (the CQE release reads it) and ``dead`` (the planner
        # and stage 3 skip its younger commands): the other writers of ``dead`` wait
        # (``wf_w``)
        wf_w = Signal()
        # (``wd_err & d1_go``, from the registers alone)
        m.d.comb += wf_w.eq(wd_err & ev_q.i.ready & fault_q.i.ready & ~rst.valid)
        with m.If(wf_w):
            m.d.comb += [wflt_wr.addr.eq(wqpn_rd.data), wflt_wr.data.eq(1),
                         wflt_wr.en.eq(1),
                         t.dead_wr.addr.eq(wqpn_rd.data), t.dead_wr.data.eq(1),
                         t.dead_wr.en.eq(1)]
        with m.Elif(rst.valid):
            m.d.comb += [wflt_wr.addr.eq(rst.payload.qpn), wflt_wr.data.eq(0),
                         wflt_wr.en.eq(1)]
        plan_ev = Signal()
        plan_ev_qpn = Signal(t.ab)
        m.d.comb += [
            ev_q.i.valid.eq(Mux(wd_err, d1_go, plan_ev)),
            ev_q.i.payload.qpn.eq(Mux(wd_err, wqpn_rd.data, plan_ev_qpn)),
            fault_q.i.valid.eq(wd_err & d1_go),
            fault_q.i.payload.qpn.eq(wqpn_rd.data),
        ]
        return types.SimpleNamespace(plan_ev=plan_ev, plan_ev_qpn=plan_ev_qpn, wd_err=wd_err,
                                     wf_w=wf_w)

    def _release(self, m, t):
        """The ``done`` of each command and its CQE, released in order (see the module
        docstring)."""
        (ab, cqe_q, pop_tok, post_q, tok, wflt_rel, wr_done) = (
            t.ab, t.cqe_q, t.pop_tok, t.post_q, t.tok, t.wflt_rel, t.wr_done)
        # ---- done and CQE release -----------------------------------------------------------
        ph = post_q.o.payload
        can_done = Signal()
        m.d.comb += [
            can_done.eq(post_q.o.valid & (~ph.beats | (tok != 0))),
            self.done.valid.eq(can_done),
            self.done.payload.fatal.eq(ph.fatal),
            self.done.payload.syndrome.eq(_syndrome(ph.syndrome)),
            post_q.o.ready.eq(can_done & self.done.ready),
            pop_tok.eq(can_done & self.done.ready & ph.beats),
        ]
        ch = cqe_q.o.payload
        gap = Signal(16)
        m.d.comb += gap.eq(wr_done - ch.need)
        # ``complete.valid`` and the CQE's status are registers: the head CQE is judged (its
        # payload writes done, its QP's write-fault mark) in one cycle and offered from the
        # next, so the judgement (a subtraction, a LUT-RAM read) does not run on into the merge
        # and CQE Generation. The cycle after a CQE is taken judges the next one.
        rel_v = Signal()                       # the head CQE is offered
        rel_flt = Signal()                     # its QP's write-fault mark, as judged
        flt_now = Signal()
        m.d.comb += flt_now.eq(wflt_rel.data & ~ch.flush & (ch.status == 0))
        m.d.comb += [
            wflt_rel.addr.eq(ch.qpn[:ab]),
            self.complete.valid.eq(rel_v),
            cqe_q.o.ready.eq(rel_v & self.complete.ready),
        ]
        _cqe_out(m, self.complete.payload, ch)
        # A payload write of the QP faulted: the CQE reports LOC_QP_OP_ERR. The mark is held
        # while the CQE is offered, so the payload is stable while it waits (stream rules) even
        # if the mark changes meanwhile (a younger packet's fault, a QP reset).
        with m.If(~rel_v):
            m.d.sync += [rel_v.eq(cqe_q.o.valid & ~gap[15]), rel_flt.eq(flt_now)]
        with m.Elif(self.complete.ready):
            m.d.sync += rel_v.eq(0)
        with m.If(rel_flt):
            m.d.comb += self.complete.payload.status.eq(WcStatus.LOC_QP_OP_ERR)

    def _pieces(self, m, t):
        """The piece calculation of states SUMS (the SGE ranges), CUT and CUT2 (the cut): the
        running sum, the cut unit and each piece's registers. Adds these, with ``off``, ``plen``
        and ``has_beats``."""
        c, wqe = t.c, t.wqe
        off = c.offset
        plen = c.payload_len
        has_beats = Signal()            # payload beats come on ``pay`` (none for status ≠ 0)
        m.d.comb += has_beats.eq((plen != 0) & ~c.err)
        mend = Signal(34)
        dma_nz = Signal()               # ``mend`` ≠ 0 while it holds a WRITE's or READ's
                                        # ``dma_len`` (registered at the take, with it)
        # The WQE's fields come from the store's asynchronous read at ``prow`` (a register):
        # they go into registers, or through a mux into a LUT-RAM write, never into an adder.
        # The SGE lengths pass through ``li_r`` (SUMS<i> adds the length ``li_r`` took in
        # SUMS<i-1>), the SGE addresses through ``a_r`` (piece i's va is written one state
        # after ``a_r`` took SGE i's address: CUT2, CALC, PUSH). The take loads ``a_r`` with
        # the command's va, ``mend`` with its ``dma_len`` and ``li_r`` with its rkey: an RDMA
        # WRITE's or READ's piece, key and byte count, which SUMS leaves for a WRITE (so c
        # holds none of these fields). ``li_r`` takes SGE i's length as the store reads it;
        # whether SGE i is within ``nsge`` goes into ``li_on`` beside it, and SUMS<i> adds
        # only then (an SGE past ``nsge`` has length 0: its range is empty), so the store's
        # read runs through the length's source select alone, not the ``nsge`` compare too.
        assert MAX_SGE == 3                    # the va schedule: CUT2, CALC, PUSH
        li_r = Signal(32)
        li_on = Signal()
        a_r = Signal(64)
        li_ons = [Signal(name=f"sge_on{i}") for i in range(MAX_SGE)]    # SGE i within nsge
        li_c0 = Signal(32, name="sge_len0")     # SGE 0's length, 0 without SGEs
        m.d.comb += [on.eq(wqe.nsge > i) for i, on in enumerate(li_ons)]
        m.d.comb += li_c0.eq(Mux(li_ons[0], wqe.sge[0].length, 0))
        # The SGEs' ranges in the message, one a state: SUMS<i> loads SGE i's [lo, hi)
        # (``ca_lo``, and ``run``, the sum so far, which is the range's hi) and ``ca_on``. The
        # cut is two registered steps that run every cycle on what was loaded the cycle
        # before (one set of compares and subtractions for the three pieces):
        #   A: the overlap with the packet, start = max(offset, lo), end = min(mend, hi);
        #   B: piece ``cb_i``'s valid flag (start < end), length, source offset in the packet
        #      and whether it starts inside its SGE (offset > lo), into that piece's
        #      registers; and then its offset in the SGE (for its va) into ``dl_r``, which
        #      pieces 1 and 2 share: only the piece the packet starts in starts inside its
        #      SGE (a later SGE starts past the offset), so a valid piece's offset in its SGE
        #      is ``dl_r`` if it starts inside, else 0.
        # So with three SGEs piece 0 is done in SUMS2, piece 2 in CUT2; with one (SUMS goes
        # to CUT) piece 0 in CUT2, and pieces 1 and 2 are cleared by SUMS.
        run = Signal(35)
        run_c = Signal(35)
        m.d.comb += run_c.eq(run + li_r)
        ca_lo = Signal(35)
        ca_on = Signal()
        ca_i = Signal(2)
        cb_st = Signal(35)
        cb_en = Signal(35)
        cb_lo = Signal(35)
        cb_in = Signal()
        cb_on = Signal()
        cb_i = Signal(2)
        a_in = Signal()
        m.d.comb += a_in.eq(off > ca_lo)
        m.d.sync += [ca_on.eq(0),
                     cb_st.eq(Mux(a_in, off, ca_lo)), cb_in.eq(a_in),
                     cb_en.eq(Mux(mend < run, mend, run)),
                     cb_lo.eq(ca_lo), cb_on.eq(ca_on), cb_i.eq(ca_i)]
        v_rs = [Signal(name=f"p_valid_r{i}") for i in range(MAX_SGE)]
        ln_rs = [Signal(13, name=f"p_len_r{i}") for i in range(MAX_SGE)]
        src_rs = [Signal(13, name=f"p_src_r{i}") for i in range(MAX_SGE)]
        in_rs = [None] + [Signal(name=f"p_inside_r{i}") for i in range(1, MAX_SGE)]
        dl_r = Signal(35)
        with m.If(cb_on):
            for i in range(MAX_SGE):
                with m.If(cb_i == i):
                    m.d.sync += [v_rs[i].eq(cb_st < cb_en), ln_rs[i].eq(cb_en - cb_st),
                                 src_rs[i].eq(cb_st - off)]
                    if i:
                        m.d.sync += in_rs[i].eq(cb_in)
            with m.If(cb_in & (cb_i != 0)):
                m.d.sync += dl_r.eq(cb_st - cb_lo)
        # piece i's offset in its SGE (i = 1, 2)
        dl_rs = [None] + [Mux(in_rs[i], dl_r, 0) for i in range(1, MAX_SGE)]
        return types.SimpleNamespace(
            a_r=a_r, ca_i=ca_i, ca_lo=ca_lo, ca_on=ca_on, dl_rs=dl_rs, dma_nz=dma_nz,
            has_beats=has_beats, li_c0=li_c0, li_on=li_on, li_ons=li_ons, li_r=li_r,
            ln_rs=ln_rs, mend=mend, off=off,
            plen=plen, run=run, run_c=run_c, src_rs=src_rs, v_rs=v_rs)

    def _piece_fields(self, m, t):
        """Each piece's valid flag, key, va, length and source offset as the plan records take
        them (``*_c``): the SGE pieces' from the cut's registers and the one va adder, an RDMA
        WRITE's or READ's one piece from c. Adds these, ``va_op`` (the adder's operand, loaded
        by the planner) and the outcome flags ``overflow``, ``bad_nsge``."""
        a_r, c, ln_rs, plen, src_rs, v_rs, wqe = (
            t.a_r, t.c, t.ln_rs, t.plen, t.src_rs, t.v_rs, t.wqe)
        # the pieces' va: one adder, a_r + ``va_op`` (``off`` for piece 0 in CUT2, piece 1's
        # offset in its SGE in CALC, piece 2's in PUSH), the operand a register loaded the
        # state before
        va_op = Signal(35)
        sva = Signal(64)
        m.d.comb += sva.eq(a_r + va_op)
        pv_c, pkey_c, pva_c, plen_c, psrc_c = [], [], [], [], []
        for i in range(MAX_SGE):
            v = Signal(name=f"p_valid{i}")
            va = Signal(64, name=f"p_va{i}")
            # (piece 0's length is 32 bits: a READ's whole range)
            ln = Signal(32 if i == 0 else 13, name=f"p_len{i}")
            src = Signal(13, name=f"p_src{i}")
            m.d.comb += [v.eq(v_rs[i]), va.eq(sva), src.eq(src_rs[i])]
            if i:
                m.d.comb += ln.eq(ln_rs[i])
            if i == 0:
                # RDMA WRITE: one piece; RDMA READ: one piece, its whole range (checked, not
                # written; none for a zero-length READ)
                # (``mend`` is the command's ``dma_len``, ``a_r`` its va, ``li_r`` its rkey:
                # loaded at the take)
                with m.If(c.write):
                    # (va + offset from the shared adder: SUMS loaded its operand)
                    m.d.comb += [v.eq(t.dma_nz & (plen != 0)),
                                 ln.eq(plen), src.eq(0)]
                with m.Elif(c.read):
                    m.d.comb += [v.eq(t.dma_nz), va.eq(a_r), ln.eq(t.mend[:32]),
                                 src.eq(0)]
                with m.Else():
                    m.d.comb += ln.eq(ln_rs[0])
            else:
                with m.If(c.write | c.read):
                    m.d.comb += v.eq(0)
            pv_c.append(v)
            # (a WRITE's or READ's one piece is piece 0)
            pkey_c.append(Mux(c.write | c.read, t.li_r, wqe.sge[i].lkey) if i == 0
                          else wqe.sge[i].lkey)
            pva_c.append(va)
            plen_c.append(ln)
            psrc_c.append(src)
        overflow = Signal()                    # the message ends past the SGEs (registered
                                               # in CUT, the sum complete by then)
        bad_nsge = Signal()                    # registered in CUT
        return types.SimpleNamespace(
            bad_nsge=bad_nsge, overflow=overflow, pkey_c=pkey_c, plen_c=plen_c, psrc_c=psrc_c,
            pv_c=pv_c, pva_c=pva_c, va_op=va_op)

    def _outcome(self, m, t):
        """Stage 3's second read ports of the marks, the planner's outcome registers (carried in
        the plan entry: ``fatal``, ``syn``, ``cstat``, ``pv``...), the flush's registers, the
        strobes of the flush's CQE and of the event requests, stage 4's sent flags and c's WQE
        address (``faddr_c``). Adds these."""
        c, dead, faddr_c, wflt = t.c, t.dead, t.faddr_c, t.wflt
        dead_rd2 = dead.read_port()            # stage 3's re-check of the marks
        dead_rd2_data = dead_rd2.data
        sent_w = Signal()
        sent_p = Signal()
        fl_cqe = Signal()                      # the flush pushes its CQE
        fl_ev = Signal()                       # the flush reports a WQE read fault
        b_ev = Signal()                        # stage 3 reports a WQE read fault
        pv = Signal(MAX_SGE)

        # outcome (the planner's registers, carried in the plan entry)
        fatal = Signal()
        syn = Signal(3)                        # the syndrome's code (_SYN)
        cqe_on = Signal()
        cstat = Signal(8)
        nowrite = Signal()
        skip = Signal()
        cdone = Signal()                       # the command completes WQE widx
        rdflt = Signal()                       # its WQE read came back non-OKAY (event 4)
        widx = Signal(16)
        flushing = Signal()
        fl_end = Signal(16)
        # the flush's first index (``cnext``): reset-less, loaded in FL_DEC only, from the read
        # port alone (the block RAM's output register), read after it
        fl_start = Signal(16, reset_less=True)
        fl_stop = Signal()

        # c's ring slot, registered from c in every cycle: c's index and ring are unchanged in
        # the state before FETCH (HIT, TAKE, SUMS, FL_NEXT), so the adder starts from flops
        # (the mask 2^rq_log − 1 one compare a bit, no carry chain)
        fslot = Signal(16)
        m.d.sync += fslot.eq(c.rq_index & low_mask(c.rq_log))
        m.d.comb += faddr_c.eq(c.rq_base + (fslot << 6))

        return types.SimpleNamespace(
            b_ev=b_ev, cdone=cdone, cqe_on=cqe_on, cstat=cstat, dead_rd2=dead_rd2,
            dead_rd2_data=dead_rd2_data, fatal=fatal, fl_cqe=fl_cqe, fl_end=fl_end,
            fl_ev=fl_ev, fl_start=fl_start, fl_stop=fl_stop, flushing=flushing, nowrite=nowrite,
            pv=pv, rdflt=rdflt, sent_p=sent_p, sent_w=sent_w, skip=skip, syn=syn,
            widx=widx)

    def _plan_records(self, m, t):
        """The plan queues (planner -> ``key_q`` -> key checks -> ``iss_q``) and the plan RAMs
        written in the planner's slot ``wp``, the entry the planner pushes (``kq``), the count of
        invalidates pending and the stages' idle flags (``pipe_empty``). Adds these."""
        (ab, c, cdone, cqe_on, cstat, fatal, has_beats, mend, nowrite, pv, rdflt, skip, syn, widx,
         wqe) = (
            t.ab, t.c, t.cdone, t.cqe_on, t.cstat, t.fatal, t.has_beats, t.mend, t.nowrite, t.pv,
            t.rdflt, t.skip, t.syn, t.widx, t.wqe)
        # ---- plan queues: planner -> key checks -> issue ------------------------------------
        key_tok = _token_layout(ab, "key")
        iss_tok = _token_layout(ab, "issue")
        # (an entry is at the head the cycle after its push, as in an unbuffered queue, and
        # the ports move as an unbuffered queue's: ``bypass``. The fields the stage behind
        # decides on, addresses its tables with or tests in the cycle it takes the entry come
        # from the queue's output register, not through its LUT-RAM read at a pointer; the
        # rest, which the stage only passes on, is read from the LUT RAM at the head)
        m.submodules.key_q = key_q = Queue(
            key_tok, 2, bypass=True,
            registered=("slot", "qpn", "write", "read", "wqe", "inv", "nowrite", "pv", "fatal",
                        "skip", "cqe_on", "has_beats", "cdone", "rdflt", "nolook"))
        # (``iss_q``: 3 entries, one of them stage 3's, which works on the entry at the head)
        m.submodules.iss_q = iss_q = Queue(iss_tok, 3, bypass=True,
                                           registered=("qpn", "cqe_on", "fatal"))
        # stage 4's entry (loaded by stage 4, and by a flush while stages 2 to 4 are empty)
        b = Signal(iss_tok)
        # the plan RAMs (LUT RAM, PLAN_SLOTS rows): written by the planner in its own slot
        # ``wp`` (the head in PUSH), read by slot by the stages behind; the pieces' RAMs in
        # :meth:`_piece_rams`
        wp = Signal(_SLOT_BITS)
        m.submodules.plan_head = plan_head = Memory(shape=_head_layout, depth=PLAN_SLOTS, init=[])
        # (the PD and ``_take_layout``'s fields: written at the take, ``tk_slot``)
        m.submodules.plan_pd = plan_pd = Memory(shape=16, depth=PLAN_SLOTS, init=[])
        m.submodules.plan_take = plan_take = Memory(shape=_take_layout, depth=PLAN_SLOTS,
                                                    init=[])
        head_wr, pd_wr = plan_head.write_port(), plan_pd.write_port()
        head_rd, pd_rd = plan_head.read_port(domain="comb"), plan_pd.read_port(domain="comb")
        tk_wr, tk_rd = plan_take.write_port(), plan_take.read_port(domain="comb")
        # Written in every cycle, like c: at ``wp`` in the states that take into slot ``wp``
        # (IDLE, RD_RING after a READ went on from DEC: ``tk_here``), else at ``wp`` + 1, the
        # next command's slot, which no stage reads (so no state decode reaches the enables)
        tk_here = Signal()
        tk_slot = Signal(_SLOT_BITS)
        ep = self.exe.payload
        m.d.comb += [tk_slot.eq(Mux(tk_here, wp, wp + 1)), tk_wr.en.eq(1),
                     pd_wr.addr.eq(tk_slot), pd_wr.data.eq(ep.pd), pd_wr.en.eq(1),
                     tk_wr.addr.eq(tk_slot),
                     # (a READ's {MSN, path MTU} come in its ``imm_or_rkey``)
                     tk_wr.data.imm_or_rkey.eq(ep.imm_or_rkey),
                     tk_wr.data.se.eq(ep.se)]
        pr = self._piece_rams(m, t, wp)
        # (a READ has no CQE: its wr_id field carries the response's PSN in its low bits, the
        # MSN and path MTU are in ``plan_take``; a flush writes its WQE's CQE fields here too,
        # c's flags zero)
        m.d.comb += [head_wr.addr.eq(wp),
                     head_wr.data.wr_id.eq(Cat(Mux(c.read, c.psn, wqe.wr_id[:24]),
                                               wqe.wr_id[24:])),
                     # (a WRITE's or READ's ``dma_len``, loaded at the take; a SEND's end)
                     head_wr.data.byte_len.eq(mend),
                     head_wr.data.rdma_imm.eq(c.write & c.imm_valid),
                     head_wr.data.imm.eq(c.imm_valid),
                     head_wr.data.widx.eq(widx)]
        kq = key_q.i
        ke = key_q.o.payload
        inv_pend = Signal(range(8))            # entries past the key checks that may invalidate
        inv_inc = Signal()
        inv_dec = Signal()
        # the count goes up a cycle after the push into ``iss_q`` (registered: the push is
        # decided late, by the lookup's response): the next entry's first K_LOOK is two cycles
        # after the push (K_IDLE between), and stage 4 decrements three cycles after it at
        # the earliest
        inv_inc_r = Signal()
        m.d.sync += [inv_inc_r.eq(inv_inc), inv_pend.eq(inv_pend + inv_inc_r - inv_dec)]
        k_idle = Signal()
        # the planner is in DEC with a READ (``dec_sel``) and sends it on to the key checks
        # now (``dec_rd``): the key checks may issue its lookup in this cycle (_key_request)
        dec_sel = Signal()
        dec_rd = Signal()
        r_idle = Signal()
        b_idle = Signal()
        pipe_empty = Signal()
        post_plan_busy = Signal()
        m.d.comb += pipe_empty.eq((key_q.level == 0) & (iss_q.level == 0) & k_idle & r_idle
                                  & b_idle & ~post_plan_busy)

        m.d.comb += [
            kq.payload.slot.eq(wp), kq.payload.qpn.eq(c.qpn[:ab]), kq.payload.cqn.eq(c.rcqn),
            kq.payload.write.eq(c.write), kq.payload.wqe.eq(c.wqe), kq.payload.inv.eq(c.inv),
            kq.payload.has_beats.eq(has_beats), kq.payload.cstat.eq(cstat),
            kq.payload.fatal.eq(fatal), kq.payload.syn.eq(syn),
            kq.payload.cqe_on.eq(cqe_on), kq.payload.nowrite.eq(nowrite),
            kq.payload.skip.eq(skip), kq.payload.cdone.eq(cdone),
            kq.payload.rdflt.eq(rdflt), kq.payload.pv.eq(pv), kq.payload.read.eq(c.read),
            kq.payload.nolook.eq(kq.payload.nowrite | (kq.payload.pv == 0)),
        ]
        return types.SimpleNamespace(
            **vars(pr), b=b, b_idle=b_idle, head_rd=head_rd, head_wr=head_wr, inv_dec=inv_dec,
            inv_inc=inv_inc, inv_pend=inv_pend, iss_q=iss_q, iss_tok=iss_tok, k_idle=k_idle,
            ke=ke, key_q=key_q, kq=kq, pd_rd=pd_rd, dec_sel=dec_sel, dec_rd=dec_rd,
            inv_inc_r=inv_inc_r, pipe_empty=pipe_empty, tk_rd=tk_rd,
            tk_here=tk_here, post_plan_busy=post_plan_busy, r_idle=r_idle, wp=wp)

    def _piece_rams(self, m, t, wp):
        """The plan RAMs of the pieces: their va and {key, length} as the key checks read them
        (``kva_*``, ``kp_*``), their bus addresses (``bus_*``, written by the key checks) and
        {length, source offset} as stage 4 reads them (``sp_*``); the planner's enables per
        piece (``kva_wr[i].en``, ``kp_wr[i].en``, ``sp_wr[i].en``), its slot ``wp``. Returns
        these."""
        pkey_c, plen_c, psrc_c, pva_c = t.pkey_c, t.plen_c, t.psrc_c, t.pva_c
        # The pieces' va, one RAM, row {slot mod 4, piece}: the key checks read only the slots
        # of ``key_q`` (two at most, the planner's last pushes) while the planner writes its
        # own, the next one, so three consecutive slots are in use at most. The planner writes
        # one piece's va a cycle (``kva_wr[i].en``; in CALC a WRITE's or READ's piece 0, whose
        # piece 1 is empty); the key checks read the piece ``j_d`` selects.
        assert PLAN_SLOTS >= 4
        # (the va is ``pva_c[0]`` for every piece: sva, or a READ's va)
        kva_wr, kva_rd = _piece_ram(m, "plan_kva", "kva", 64, wp,
                                    lambda i, row: row.eq(pva_c[0]))
        # The pieces' bus addresses, one RAM, row {slot mod 8, piece}: written by the key checks
        # (a piece a lookup), read by stage 4, and from the key checks' entry back to stage 4's
        # there are seven at most (``iss_q`` 3 with stage 3's, ``post_plan_q`` 2, stage 4).
        assert PLAN_SLOTS >= 8
        m.submodules.plan_bus = plan_bus = Memory(shape=64, depth=8 * 4, init=[])
        bus_wr = plan_bus.write_port()
        bus_rd = plan_bus.read_port(domain="comb")
        # The pieces as the key checks read them (``plan_kp``, row {slot mod 4, piece}, as
        # ``plan_kva``), one piece a cycle, in the first state its cut is complete in: piece 1
        # in CUT2, piece 0 in CALC, piece 2 in PUSH (``kp_wr[i].en``; a READ's piece 0 also in
        # DEC). A piece the path skips (one SGE, WRITE, READ) is empty, whatever its row holds.
        # (the key and the length in RAMs of their own, written together: the key checks
        # register the key they look up, and read the length at a registered address)
        kp_wr, kp_rd = _piece_ram(m, "plan_kp", "kp", 32, wp,
                                  lambda i, row: row.eq(pkey_c[i]))
        _, kl_rd = _piece_ram(m, "plan_kl", "kl", 32, wp, lambda i, row: row.eq(plen_c[i]),
                              wr=kp_wr)
        # ... and as stage 4 reads them (the planner's slot and stage 4's are up to nine
        # apart: one RAM a piece, by slot, all three written in CALC)
        sp_wr, sp_rd = [], []
        for i in range(MAX_SGE):
            ms = Memory(shape=_spiece_layout, depth=PLAN_SLOTS, init=[])
            m.submodules[f"plan_sp{i}"] = ms
            sp_wr.append(ms.write_port())
            sp_rd.append(ms.read_port(domain="comb"))
            m.d.comb += [sp_wr[i].addr.eq(wp), sp_wr[i].data.len.eq(plen_c[i][:13]),
                         sp_wr[i].data.src.eq(psrc_c[i])]
        return types.SimpleNamespace(bus_rd=bus_rd, bus_wr=bus_wr, kl_rd=kl_rd, kp_rd=kp_rd,
                                     kp_wr=kp_wr, kva_rd=kva_rd, kva_wr=kva_wr, sp_rd=sp_rd,
                                     sp_wr=sp_wr)

    def _planner(self, m, t):
        """Stage 1, the planner's FSM (its states in the parts below, in this order); ``qp_reset``
        clears the dead mark and the completion index first."""
        (cnext_wr, dead_wr, plan_hit_r, plan_tk, rst) = (
            t.cnext_wr, t.dead_wr, t.plan_hit_r, t.plan_tk, t.rst)
        # qp_reset clears the dead mark (priority over the planner's write)
        with m.If(rst.valid):
            m.d.comb += [dead_wr.addr.eq(rst.payload.qpn), dead_wr.data.eq(0),
                         dead_wr.en.eq(1),
                         cnext_wr.addr.eq(rst.payload.qpn), cnext_wr.data.eq(0),
                         cnext_wr.en.eq(1)]
        # ==== stage 1, the planner: tables, WQE, pieces, the checks that need no lookup ====
        m.d.sync += [plan_hit_r.eq(0), plan_tk.eq(0)]
        with m.FSM(name="plan") as fsm:
            with m.State("IDLE"):
                m.d.comb += t.tk_here.eq(1)
                self._take_next(m, t, True)
            self._plan_flush(m, t)
            self._plan_dec(m, t)
            self._plan_ird(m, t)
            self._plan_wqe(m, t)
            self._plan_pieces(m, t)
        _one_hot(fsm)
        m.d.comb += t.c_ld.eq(fsm.ongoing("IDLE") | fsm.ongoing("RD_RING") | fsm.ongoing("PUSH"))

    def _fail(self, m, t, syndrome, status, with_cqe):
        """The planner's outcome: fatal with ``syndrome``, the CQE status ``status``, a CQE if
        ``with_cqe``, nothing written."""
        (cdone, cqe_on, cstat, fatal, nowrite, syn) = (
            t.cdone, t.cqe_on, t.cstat, t.fatal, t.nowrite, t.syn)
        m.d.sync += [fatal.eq(1), syn.eq(_SYN[syndrome]), cstat.eq(status), cqe_on.eq(with_cqe),
                     nowrite.eq(1)]
        if not isinstance(with_cqe, int) or with_cqe:
            m.d.sync += cdone.eq(with_cqe)

    def _take_next(self, m, t, allow_flush):
        """IDLE's work: read the tables for the next command (or a flush, if ``allow_flush``) and
        take it."""
        (c, cdone, cnext_rd, cqe_on, cstat, dead_rd, fatal, fl_end, flushing, nowrite, pipe_empty,
         plan_tk, rd_new, rd_sent, rdflt, skip, syn, wqe_rd) = (
            t.c, t.cdone, t.cnext_rd, t.cqe_on, t.cstat, t.dead_rd, t.fatal, t.fl_end, t.flushing,
            t.nowrite, t.pipe_empty, t.plan_tk, t.rd_new, t.rd_sent, t.rdflt, t.skip,
            t.syn, t.wqe_rd)
        m.d.comb += [self.exe.ready.eq(1), dead_rd.en.eq(1), wqe_rd.en.eq(1),
                     cnext_rd.en.eq(1)]
        ep = self.exe.payload
        ep_read = ep.read if self.rdma_read else Const(0)    # (no READ: its states fold away)
        m.d.sync += [fatal.eq(0), syn.eq(0), cqe_on.eq(0), cstat.eq(ep.status), nowrite.eq(0),
                     skip.eq(0), cdone.eq(0), flushing.eq(0), rdflt.eq(0), rd_sent.eq(0)]
        # (only DEC reads it, entered on ``exe.valid``: the flush's c leaves it unused)
        m.d.sync += rd_new.eq(ep_read & ~ep.dup & (ep.status == 0))
        # ``c`` is loaded in every cycle that could take (nothing reads it until the next
        # state): its flops are enabled by the state, not by ``exe.valid`` or the flush
        # queue's ``valid`` (PSN Check's decision, a long path in the whole core)
        m.d.sync += [c[f].eq(ep[f]) for f in c.shape().members if f not in ("qpn", "err")]
        m.d.sync += [c.qpn.eq(ep.qpn[:t.ab]), c.err.eq(ep.status != 0)]
        # (a WRITE's or READ's va and length: into the registers that plan its piece)
        m.d.sync += [t.a_r.eq(ep.va), t.mend.eq(ep.dma_len), t.li_r.eq(ep.rkey),
                     t.dma_nz.eq(ep.dma_len != 0)]
        # a command with ``status`` ≠ 0 only completes the held WQE in error, whatever its
        # opcode (a READ request that broke a SEND's sequence is not a READ here)
        m.d.sync += c.read.eq(ep_read & (ep.status == 0))
        if allow_flush:
            # a flush as the planner's command: its QP and ring, and the fields its CQEs
            # read (``fcq``) zero; the fields only a packet's states read are left as they
            # come (no mux in front of their flops)
            fp = self.flush.payload
            with m.If(~self.exe.valid):
                m.d.sync += [c.qpn.eq(fp.qpn), c.rcqn.eq(fp.rcqn), c.rq_base.eq(fp.rq_base),
                             c.rq_log.eq(fp.rq_log), c.err.eq(0)]
                m.d.sync += [c[f].eq(0) for f in (
                    "write", "read", "imm_valid", "inv", "wqe", "comp", "send")]
        with m.If(self.exe.valid):
            m.d.sync += plan_tk.eq(1)
            m.next = "DEC"
        if allow_flush:
            with m.Elif(self.flush.valid & pipe_empty):
                m.d.comb += self.flush.ready.eq(1)
                m.d.sync += [fl_end.eq(self.flush.payload.index), flushing.eq(1),
                             cstat.eq(WcStatus.WR_FLUSH_ERR)]
                m.next = "FL_DEC"
            with m.Else():
                m.next = "IDLE"
        else:
            with m.Else():
                m.next = "IDLE"

    def _plan_flush(self, m, t):
        """The planner's flush states: from the QP's completion index (``cnext``) to the flush's
        end, each WQE read (FETCH) and its CQE pushed (FL_CQE); then the QP's completion index
        written and the QP marked dead."""
        (ab, b, c, cnext_wr, cqe_q, dead_wr, fl_cqe, fl_end, fl_start, fl_stop,
         rst, wp) = (
            t.ab, t.b, t.c, t.cnext_wr, t.cqe_q, t.dead_wr, t.fl_cqe, t.fl_end,
            t.fl_start, t.fl_stop, t.rst, t.wp)
        with m.State("FL_DEC"):
            # the block RAM's output (4.3 ns from the clock on an ECP5) ends in a register
            # of its own, not behind the bypass or ``c``'s input multiplexer: FL_LD applies
            # the bypass, whose registers hold the read's while the port's ``en`` is low
            m.d.comb += t.cnext_rd.en.eq(0)
            m.d.sync += fl_start.eq(t.cnext_rd.data)
            # the flush's CQEs leave as stage 4's (idle until the flush ends) from ``b`` and
            # the plan head of the planner's slot (written in FETCH_WAIT)
            m.d.sync += [b.slot.eq(wp), b.qpn.eq(c.qpn[:ab]), b.cqn.eq(c.rcqn),
                         b.cstat.eq(WcStatus.WR_FLUSH_ERR), b.inv.eq(0)]
            m.next = "FL_LD"
        with m.State("FL_LD"):
            m.d.sync += c.rq_index.eq(Mux(cnext_wr.hit, cnext_wr.hdata, fl_start))
            m.next = "FL_CHK"
        with m.State("FL_CHK"):
            # registered: is the flush at its end (index reached or behind)?
            fl_left = Signal(16)
            m.d.comb += fl_left.eq(fl_end - c.rq_index)
            m.d.sync += fl_stop.eq((fl_left == 0) | fl_left[15])
            m.next = "FL_NEXT"
        with m.State("FL_NEXT"):
            with m.If(fl_stop):
                with m.If(~rst.valid & ~t.wf_w):
                    m.d.comb += [cnext_wr.addr.eq(c.qpn[:ab]), cnext_wr.data.eq(c.rq_index),
                                 cnext_wr.en.eq(1),
                                 dead_wr.addr.eq(c.qpn[:ab]), dead_wr.data.eq(1),
                                 dead_wr.en.eq(1)]
                    m.next = "IDLE"
            with m.Else():
                m.next = "FETCH"
        with m.State("FL_CQE"):
            m.d.comb += fl_cqe.eq(1)
            with m.If(cqe_q.i.ready):
                m.d.sync += c.rq_index.eq(c.rq_index + 1)
                m.next = "FL_CHK"

    def _plan_dec(self, m, t):
        """The planner's state DEC: the tables read for the command, and its way on: skipped (dead
        or write fault), a READ (sent on now if new), a WQE to look up, or the pieces."""
        (c, dead_rd_data, head_wr, kp_wr, kq, kva_wr, look_eq, look_ld, nowrite, off, plan_tk,
         plen, pv_c, rd_new, rd_sent, skip, wp, wq_held, wqe_rd, zlen) = (
            t.c, t.dead_rd_data, t.head_wr, t.kp_wr, t.kq, t.kva_wr, t.look_eq, t.look_ld,
            t.nowrite, t.off, t.plan_tk, t.plen, t.pv_c, t.rd_new, t.rd_sent, t.skip, t.wp,
            t.wq_held, t.wqe_rd, t.zlen)
        with m.State("DEC"):
            m.d.sync += plan_tk.eq(1)
            m.d.sync += [wq_held.eq(wqe_rd.data), look_ld.eq(0),
                         zlen.eq((plen == 0) & (off == 0)),
                         look_eq.eq(Cat(*[wqe_rd.data[k:k + 2] == c.rq_index[k:k + 2]
                                          for k in range(0, 16, 2)]))]
            with m.If(c.read):
                # a READ's plan records, from c, into the planner's own slot (CALC and PUSH
                # write the same when it leaves later, or is skipped): their write enables
                # wait neither for the marks nor for the queue's room
                m.d.comb += [t.dec_sel.eq(1), head_wr.en.eq(1),
                             kp_wr[0].en.eq(1), kva_wr[0].en.eq(1)]
            # (the entry's piece flags as CALC would register them: read only with a push)
            m.d.comb += kq.payload.pv.eq(Cat(*pv_c))
            with m.If(dead_rd_data):
                m.d.sync += [skip.eq(1), nowrite.eq(1)]
                m.next = "PUSH"
            with m.Elif(c.read):
                with m.If(rd_new & kq.ready):
                    # a new READ of a live QP: its plan is c's alone (one piece, its whole
                    # range; the outcome so far is success), so it goes to the key checks
                    # now; the IRD states behind only record its PSN (the next command's
                    # DEC reads ``rd_meta`` after RD_RING's write)
                    m.d.comb += [kq.valid.eq(1), t.dec_rd.eq(1)]
                    m.d.sync += [wp.eq(wp + 1), rd_sent.eq(1)]
                m.next = "RD_META"
            with m.Elif(c.wqe):
                m.next = "LOOK"
            with m.Elif(c.send | c.err):
                # the WQE the QP's message holds, looked up in the store by {QP, the
                # index in ``wqet``, ring} like a WQE to take (PSN Check's ``rq_index``
                # names the same WQE: then the tags compared in this cycle are the ones;
                # else LOOK loads ``wq_held`` into c and compares again)
                m.next = "LOOK"
            with m.Else():
                m.next = "SUMS"

    def _plan_ird(self, m, t):
        """The planner's IRD states (a READ): a new READ's PSN recorded in ``rd_ring``, a duplicate
        checked against the oldest held READ (0x61 if none holds it)."""
        (ab, c, rd_bad, rd_cnt, rd_first, rd_nw, rd_old, rd_sent, rdm_rd, rdm_wr, rdr_rd, rdr_wr,
         rm_cnt, rm_ird, rm_wp, rst) = (
            t.ab, t.c, t.rd_bad, t.rd_cnt, t.rd_first, t.rd_nw, t.rd_old, t.rd_sent, t.rdm_rd,
            t.rdm_wr, t.rdr_rd, t.rdr_wr, t.rm_cnt, t.rm_ird, t.rm_wp, t.rst)
        with m.State("RD_META"):
            # a READ: its QP's held READs (``rd_meta``, read in DEC), registered off the
            # block RAM's output, with the QP's IRD (ARG15: 0 means 1, at most 8)
            md = rdm_rd.data
            m.d.sync += [rm_wp.eq(md.wp), rm_cnt.eq(md.cnt),
                         rm_ird.eq(Mux(c.ird == 0, 1, Mux(c.ird > MAX_IRD, MAX_IRD, c.ird)))]
            m.next = "RD_CALC"
        with m.State("RD_CALC"):
            # the held count (IRD may have been lowered since), the oldest held slot and
            # the count after a new READ, into registers
            cnt_e = Signal(4)
            m.d.comb += cnt_e.eq(Mux(rm_cnt > rm_ird, rm_ird, rm_cnt))
            m.d.sync += [rd_cnt.eq(cnt_e), rd_old.eq(rm_wp - cnt_e),
                         rd_nw.eq(Mux(cnt_e == rm_ird, rm_ird, cnt_e + 1))]
            m.next = "RD_RING"
        with m.State("RD_RING"):
            # a new READ takes the next slot (the oldest, once IRD are held); a duplicate
            # reads the oldest held READ's first PSN
            m.d.comb += t.tk_here.eq(rd_sent)
            m.d.comb += rdr_wr.addr.eq(Cat(rm_wp, c.qpn[:ab]))
            with m.If(~rst.valid):
                with m.If(~c.dup):
                    m.d.comb += [rdr_wr.en.eq(1), rdm_wr.en.eq(1),
                                 rdm_wr.data.wp.eq(rm_wp + 1), rdm_wr.data.cnt.eq(rd_nw)]
                    with m.If(rd_sent):
                        self._take_next(m, t, False)
                    with m.Else():
                        # (SUMS does nothing for a READ: its piece is c's)
                        m.next = "CALC"
                with m.Else():
                    m.next = "RD_DATA"
        with m.State("RD_DATA"):
            # (``rd_first`` takes the read RD_RING made)
            m.next = "RD_HELD"
        with m.State("RD_HELD"):
            # held if its PSN is at or after the oldest held READ's first PSN
            dist = Signal(24)
            m.d.comb += dist.eq(c.psn - rd_first)
            m.d.sync += rd_bad.eq((rd_cnt == 0) | dist[23])
            m.next = "RD_JUDGE"
        with m.State("RD_JUDGE"):
            with m.If(rd_bad):
                self._fail(m, t, 0x61, 0, 0)
            m.next = "CALC"

    def _plan_wqe(self, m, t):
        """The planner's WQE states: LOOK (the store's tags compared), HIT (the planner's row or a
        pool slot), TAKE, and FETCH/FETCH_WAIT (the WQE read into row P), in the parts
        :meth:`_plan_look` and :meth:`_plan_take`."""
        self._plan_look(m, t)
        self._plan_take(m, t)

    def _plan_look(self, m, t):
        """LOOK, LOOK_LD and HIT: the store's tags compared with c's WQE, the held index loaded
        when it is not c's, and the row the planner works from chosen (its own row P, or a pool
        slot with data, pinned), else a read of its own."""
        (P, c, d_eq, d_valid, look_eq, look_ld, pchk, pin, plan_hit_r, plan_look, plan_tk, pool,
         prow, prow_oh, widx, wq_held) = (
            t.P, t.c, t.d_eq, t.d_valid, t.look_eq, t.look_ld, t.pchk, t.pin, t.plan_hit_r,
            t.plan_look, t.plan_tk, t.pool, t.prow, t.prow_oh, t.widx, t.wq_held)
        with m.State("LOOK"):
            m.d.sync += plan_tk.eq(1)
            # the index of the WQE the command completes: c's own, or the held one (from
            # ``wq_held``, a register: the ``wqet`` block RAM's output feeds no multiplexer);
            # after LOOK_LD both are the held one
            m.d.sync += widx.eq(Mux(c.wqe, c.rq_index, wq_held))
            # match the pool: same QP, same ring index, same ring (compared the cycle before);
            # after LOOK_LD (``look_ld``) c's index is the held one
            with m.If(c.wqe | look_eq.all() | look_ld):
                m.d.sync += plan_hit_r.eq(1)
                if P:
                    m.d.sync += [pool["match"].eq(pool["match_c"]), pool["m_new"].eq(1)]
                m.next = "HIT"
            with m.Else():
                # the held index is not c's: c takes it (from ``wq_held``, a register:
                # the ``wqet`` block RAM's output goes into no multiplexer of c's)
                m.d.sync += c.rq_index.eq(wq_held)
                m.next = "LOOK_LD"
        with m.State("LOOK_LD"):
            m.d.sync += plan_tk.eq(1)
            # the tags are compared with c's new index in this cycle
            m.d.sync += look_ld.eq(1)
            m.next = "LOOK"
        with m.State("HIT"):
            m.d.comb += plan_look.eq(1)
            if P:
                # (in every HIT cycle: the last one's is the slot a pool hit takes)
                m.d.sync += prow_oh.eq(Cat(*[pool["hsel"] == i for i in range(P)]))
            m.d.sync += [plan_hit_r.eq(1), plan_tk.eq(1)]
            # ``prow`` is loaded in every HIT cycle with the row a hit in it takes (row P, else
            # the pool's ``hsel``): its enable is the state's (the row fans out to every
            # LUT RAM of the store), and no state reads the store before the WQE's row is
            # settled (HIT leaves to FETCH, which sets row P, on a miss)
            m.d.sync += prow.eq(Mux(d_valid & d_eq, P, pool["hsel"]) if P else P)
            # ``wqet`` gets the index of a WQE the command takes
            with m.If(d_valid & d_eq):
                # row P, the planner's own last read, holds it
                with m.If(c.wqe):
                    m.next = "TAKE"
                with m.Else():
                    m.next = "SUMS"
            if P:
                cur = pool["match"] & pool["valid"]
                with m.Elif((cur == 0) | ((pool["match"] & pool["claim_d"]) != 0)):
                    # a matched slot the prefetcher claimed in LOOK (``claim_d`` now; none
                    # is claimed in HIT) holds another WQE from now on: the planner reads
                    # the WQE itself (rare)
                    m.next = "FETCH"
                with m.Elif((cur & pool["ok"]) != 0):
                    # the slot ``hsel``: the planner works from its row, pinned until PUSH
                    m.d.comb += pool["hit"].eq(1)
                    m.d.sync += [pin.eq(1), pchk.eq(1)]
                    with m.If(c.wqe):
                        m.next = "TAKE"
                    with m.Else():
                        m.next = "SUMS"
            else:
                with m.Else():
                    m.next = "FETCH"

    def _plan_take(self, m, t):
        """TAKE (a pool slot's ring tested, the WQE taken), FETCH and FETCH_WAIT (the WQE read
        into row P: a WQE to take, a held WQE the store lost, or a flush's WQE)."""
        (P, ab, c, c_ring, cdone, d_index, d_qpn, d_ring, d_valid, ev_q, fetch, fl_ev, flushing,
         head_wr, pchk, pin, plan_fetch, plan_tk, prow, rdflt, ring_ok, take, wd_err) = (
            t.P, t.ab, t.c, t.c_ring, t.cdone, t.d_index, t.d_qpn, t.d_ring, t.d_valid, t.ev_q,
            t.fetch, t.fl_ev, t.flushing, t.head_wr, t.pchk, t.pin, t.plan_fetch, t.plan_tk,
            t.prow, t.rdflt, t.ring_ok, t.take, t.wd_err)
        with m.State("TAKE"):
            m.d.sync += plan_tk.eq(1)
            with m.If(pchk & ~ring_ok):
                # the slot hit was read from another ring: the planner reads the WQE
                m.d.sync += [pin.eq(0), pchk.eq(0)]
                m.next = "FETCH"
            with m.Else():
                m.d.comb += take.eq(1)
                m.d.sync += pchk.eq(0)
                m.next = "SUMS"
        with m.State("FETCH"):
            # (a WQE to take, a held WQE the store lost, or a flush's WQE) into row P
            m.d.comb += [fetch.req.valid.eq(1), plan_fetch.eq(1)]
            m.d.sync += [pchk.eq(0), plan_tk.eq(1)]
            with m.If(fetch.req.ready):
                m.d.sync += [prow.eq(P), d_valid.eq(0)]
                m.next = "FETCH_WAIT"
        with m.State("FETCH_WAIT"):
            m.d.sync += plan_tk.eq(1)
            # a flush's WQE: its CQE fields into the plan head (the last write, in the cycle
            # of the response, has the whole WQE)
            m.d.comb += head_wr.en.eq(flushing)
            r = fetch.resp
            with m.If(r.valid & r.payload.tag[7]):
                with m.If(r.payload.err):
                    with m.If(flushing):
                        m.d.comb += fl_ev.eq(~wd_err)
                        with m.If(~wd_err & ev_q.i.ready):
                            m.d.comb += r.ready.eq(1)
                            m.d.sync += c.rq_index.eq(c.rq_index + 1)
                            m.next = "FL_CHK"
                    with m.Else():
                        # event 4 when the entry is posted (not if the QP is dead by then)
                        m.d.comb += r.ready.eq(1)
                        self._fail(m, t, 0, 0, 0)
                        m.d.sync += [cdone.eq(1), rdflt.eq(1)]
                        m.next = "PUSH"
                with m.Else():
                    m.d.comb += r.ready.eq(1)
                    with m.If(flushing):
                        # FL_CQE reads the wr_id from row P
                        m.next = "FL_CQE"
                    with m.Else():
                        # row P holds c's WQE from now on (taken, or the held one again)
                        m.d.comb += take.eq(c.wqe)
                        m.d.sync += [d_valid.eq(1), d_qpn.eq(c.qpn[:ab]),
                                     d_index.eq(c.rq_index), d_ring.eq(c_ring)]
                        m.next = "SUMS"

    def _plan_pieces(self, m, t):
        """The planner's piece states: SUMS, CUT, CUT2, CALC (the pieces and the checks that need
        no lookup) and PUSH (the entry into ``key_q``)."""
        (a_r, bad_nsge, c, ca_i, ca_lo, ca_on, cdone, cqe_on, dl_rs, head_wr, kp_wr, kq,
         kva_wr, li_c0, li_r, mend, off, overflow, pchk, pin, plen, pv, pv_c, release,
         ring_ok, run, run_c, sp_wr, v_rs, va_op, wp, wqe, zlen) = (
            t.a_r, t.bad_nsge, t.c, t.ca_i, t.ca_lo, t.ca_on, t.cdone, t.cqe_on, t.dl_rs,
            t.head_wr, t.kp_wr, t.kq, t.kva_wr, t.li_c0, t.li_r, t.mend, t.off, t.overflow,
            t.pchk, t.pin, t.plen, t.pv, t.pv_c, t.release, t.ring_ok, t.run, t.run_c,
            t.sp_wr, t.v_rs, t.va_op, t.wp, t.wqe, t.zlen)
        with m.State("SUMS"):
            # SGE 0's range [0, len0) to the cut, the message end
            m.d.sync += [run.eq(li_c0), ca_lo.eq(0), ca_i.eq(0), pchk.eq(0)]
            with m.If(~c.write):
                m.d.sync += [li_r.eq(wqe.sge[1].length), t.li_on.eq(t.li_ons[1]),
                             mend.eq(off + plen)]
            with m.If(pchk & ~ring_ok):
                # a held WQE's slot hit, read from another ring (see TAKE)
                m.d.sync += pin.eq(0)
                m.next = "FETCH"
            with m.Elif(c.write | zlen):
                # no piece from the SGEs: an RDMA WRITE's piece is c's (its va, va + offset
                # from the shared adder, is written in CALC), and a SEND of no payload at
                # offset 0 has none (the message ends at 0: no overflow)
                m.d.sync += [bad_nsge.eq(wqe.nsge > MAX_SGE), overflow.eq(0),
                             va_op.eq(off), *[v.eq(0) for v in v_rs]]
                m.next = "CALC"
            with m.Elif(wqe.nsge[1:] == 0):
                # at most one SGE: one piece, the others empty
                m.d.sync += [ca_on.eq(1), *[v.eq(0) for v in v_rs[1:]]]
                m.next = "CUT"
            with m.Else():
                m.d.sync += ca_on.eq(1)
                m.next = "SUMS1"
        for i in range(1, MAX_SGE):
            # SGE i's range [run, run + len_i) to the cut (one add a cycle)
            with m.State(f"SUMS{i}"):
                m.d.sync += [ca_lo.eq(run), ca_i.eq(i), ca_on.eq(1)]
                with m.If(t.li_on):
                    m.d.sync += run.eq(run_c)
                if i + 1 < MAX_SGE:
                    m.d.sync += [li_r.eq(wqe.sge[i + 1].length), t.li_on.eq(t.li_ons[i + 1])]
                m.next = f"SUMS{i + 1}" if i + 1 < MAX_SGE else "CUT"
        with m.State("CUT"):
            m.d.sync += [a_r.eq(wqe.sge[0].addr), bad_nsge.eq(wqe.nsge > MAX_SGE),
                         overflow.eq(mend > run), va_op.eq(off)]
            m.next = "CUT2"
        with m.State("CUT2"):
            m.d.sync += [a_r.eq(wqe.sge[1].addr), va_op.eq(dl_rs[1])]
            m.d.comb += [kva_wr[0].en.eq(1), kp_wr[1].en.eq(1)]
            m.next = "CALC"
        with m.State("CALC"):
            m.d.sync += [a_r.eq(wqe.sge[2].addr), va_op.eq(dl_rs[2])]
            with m.If(c.write | c.read):
                # (a WRITE comes here from SUMS, a READ from its IRD states: the piece's
                # va, from c)
                m.d.comb += kva_wr[0].en.eq(1)
            for i in range(MAX_SGE):
                m.d.sync += pv[i].eq(pv_c[i])
                m.d.comb += sp_wr[i].en.eq(1)
            m.d.comb += [kva_wr[1].en.eq(1), kp_wr[0].en.eq(1)]
            with m.If(c.err):
                # (the CQE status is the command's, loaded at the take)
                self._fail(m, t, 0, t.cstat, 1)
            with m.Elif((c.send | c.wqe) & bad_nsge):
                self._fail(m, t, 0x63, WcStatus.LOC_QP_OP_ERR, 1)
            with m.Elif(c.send & overflow):
                self._fail(m, t, 0x63, WcStatus.LOC_QP_OP_ERR, 1)
            with m.Else():
                m.d.sync += [cqe_on.eq(c.comp), cdone.eq(c.comp)]
            m.next = "PUSH"
        with m.State("PUSH"):
            m.d.comb += [kq.valid.eq(1), head_wr.en.eq(1),
                         kva_wr[MAX_SGE - 1].en.eq(1), kp_wr[MAX_SGE - 1].en.eq(1)]
            with m.If(kq.ready):
                # done with the row: a pool slot whose WQE this command completes is free
                m.d.comb += release.eq(pin & c.comp)
                m.d.sync += [wp.eq(wp + 1), pin.eq(0)]
                self._take_next(m, t, False)
            with m.Else():
                m.next = "PUSH"

    def _key_checks(self, m, t):
        """Stage 2, the key checks: one Key Cache lookup per piece of the plan at the head of
        ``key_q``, into ``iss_q`` (see the module docstring), in the parts
        :meth:`_key_request` and :meth:`_key_fsm`."""
        _add(t, self._key_request(m, t))
        self._key_fsm(m, t)

    def _key_request(self, m, t):
        """The key checks' registers: the piece ``j`` looked up, the lookup request loaded from
        registers every cycle (the piece ``j`` selects next), the bus addresses written back,
        and the entry as it leaves into ``iss_q`` with a failed key's outcome. Adds what the
        FSM drives and tests."""
        (bus_wr, inv_inc, inv_pend, iss_q, k_idle, ke, key_q, kl_rd, kp_rd, kva_rd, pd_rd) = (
            t.bus_wr, t.inv_inc, t.inv_pend, t.iss_q, t.k_idle, t.ke, t.key_q, t.kl_rd, t.kp_rd,
            t.kva_rd, t.pd_rd)
        # ==== stage 2: key checks (one lookup per piece, serially) ==========================
        kh = key_q.o
        j = Signal(range(MAX_SGE + 1))
        k_fail = Signal()                      # a lookup failed (registered: K_PUSH)
        k_fail_c = Signal()                    # a lookup failed: the entry's outcome
        m.d.comb += k_fail_c.eq(k_fail)
        kv = Signal(MAX_SGE)
        m.d.comb += kv.eq(Mux(ke.nowrite, 0, ke.pv))
        k_first = _first_valid(m, kv)
        k_next = _first_valid(m, kv, j)
        # The lookup request leaves from registers: its payload is loaded every cycle from the
        # piece ``j`` will select next (``j_d``, the D input of ``j``), and ``lk_look`` is "the
        # next state is K_LOOK with a piece left", so the port carries exactly what the FSM's
        # combinational decode of ``j`` and its state carried before, cycle for cycle, while
        # the paths into the Key Cache's round-robin grant and stage-1 key start at flops, not
        # at ``j``'s decode and the piece mux. ``ke`` is the head of ``key_q``, valid from
        # K_IDLE's take to K_PUSH.
        j_d = Signal.like(j)
        m.d.comb += j_d.eq(j)
        m.d.sync += j.eq(j_d)
        lk_look = Signal()
        lk_look_d = Signal()
        m.d.sync += lk_look.eq(lk_look_d)
        lk = self.lookup.req.payload
        m.d.comb += [bus_wr.addr.eq(Cat(j[:2], ke.slot[:3])),
                     bus_wr.data.eq(self.lookup.resp.payload.bus_addr)]
        k_pre, k_pre_sel = self._key_payload(m, t, j_d, lk)
        iq = iss_q.i
        # the entry as it leaves the key checks
        for name in ("slot", "qpn", "cqn", "write", "inv", "has_beats", "cstat", "fatal", "syn",
                     "cqe_on", "nowrite", "skip", "cdone", "rdflt", "pv", "read"):
            m.d.comb += getattr(iq.payload, name).eq(getattr(ke, name))
        with m.If(k_fail_c):
            # failed key: 0x62 (rkey of a WRITE or READ; a CQE only when the packet takes a
            # WQE) or 0x63 (lkey)
            rk = Signal()
            m.d.comb += rk.eq(ke.write | ke.read)
            m.d.comb += [iq.payload.fatal.eq(1), iq.payload.nowrite.eq(1),
                         iq.payload.syn.eq(Mux(rk, _SYN[0x62], _SYN[0x63])),
                         iq.payload.cstat.eq(Mux(rk, WcStatus.REM_ACCESS_ERR,
                                                 WcStatus.LOC_QP_OP_ERR)),
                         iq.payload.cqe_on.eq(~rk | ke.wqe),
                         iq.payload.cdone.eq(~rk | ke.wqe)]
        # (the entry may invalidate: registered in K_IDLE, so the push's count starts from a
        # flop and the lookup's response, not from the queue's LUT-RAM read; an entry with
        # no lookup leaves from K_IDLE with the flag read from the head, ``k_inv_c``)
        k_inv = Signal()
        k_inv_c = Signal()
        m.d.comb += k_inv_c.eq(k_inv)
        with m.If(k_idle):
            m.d.sync += k_inv.eq(Mux(k_pre_sel, t.c.inv, ke.inv & ~ke.nowrite))
        m.d.comb += iq.payload.invc.eq(k_inv_c & ~k_fail_c)
        # a READ whose lookup passes goes on to ``read_q`` and ``post_q`` without stages 3
        # and 4 (``rd_go``, ``rd_sc``, ``rd_post``: :meth:`_read_shortcut`)
        k_wait, rd_arm, rd_go, rd_sc, rd_post = (Signal(), Signal(), Signal(), Signal(),
                                                 Signal())
        return types.SimpleNamespace(
            iq=iq, j=j, j_d=j_d, k_fail=k_fail, k_fail_c=k_fail_c, k_first=k_first, k_next=k_next,
            kh=kh, lk_look=lk_look, lk_look_d=lk_look_d, k_inv_c=k_inv_c, k_pre=k_pre,
            k_pre_sel=k_pre_sel, k_wait=k_wait, rd_arm=rd_arm, rd_go=rd_go, rd_sc=rd_sc,
            rd_post=rd_post)

    def _key_payload(self, m, t, j_d, lk):
        """The lookup request's payload ``lk`` (the key checks' registers, or a new READ's
        request from the planner's registers). Returns ``(k_pre, k_pre_sel)``."""
        (inv_pend, k_idle, ke, key_q, kl_rd, kp_rd, kva_rd, pd_rd) = (
            t.inv_pend, t.k_idle, t.ke, t.key_q, t.kl_rd, t.kp_rd, t.kva_rd, t.pd_rd)
        # (loaded in every cycle, also for ``j_d`` = MAX_SGE, when no lookup follows: ``j_d``
        # addresses the data, it enables no flop). Only the key (the Key Cache's CAM reads it)
        # and a few bits are registered; the va, length and PD are read at a registered
        # address, {piece, slot}: the rows of a slot in ``key_q`` are not written while it is
        # there (the planner writes its own slot, the next one mod 4; ``plan_pd`` the one after
        # it at most), so they read as the registered words did.
        # A new READ the planner sends on from DEC while the key checks are idle and
        # ``key_q`` empty has its lookup offered in that cycle (``k_pre``), its request from
        # the planner's registers (the rkey in ``li_r``, the va in ``a_r``, ``dma_len`` in
        # ``mend``: unchanged until the planner's next take, in RD_RING at the earliest;
        # the PD in the slot's row written at the take). ``k_pre_on`` (that cycle and the
        # next, flops only) selects them: a request not taken at once is offered again from
        # K_LOOK, whose registers hold the plan RAMs' words of the entry (at ``key_q``'s
        # head from the next cycle) from the cycle after, the same words.
        k_pre_sel = Signal()
        k_pre = Signal()
        k_pre_r = Signal()
        k_pre_on = Signal()
        m.d.comb += [
            k_pre_sel.eq(k_idle & t.dec_sel & (key_q.level == 0)),
            k_pre.eq(k_pre_sel & t.dec_rd & t.dma_nz & (inv_pend == 0) & ~t.inv_inc_r),
            k_pre_on.eq(k_pre_sel | k_pre_r)]
        m.d.sync += k_pre_r.eq(k_pre_sel)
        lk_a = Signal(4)
        lk_s = Signal(_SLOT_BITS)
        lk_key = Signal(32)
        lk_acc = Signal.like(lk.access)
        lk_tag = Signal.like(lk.tag)
        m.d.comb += kp_rd.addr.eq(Cat(j_d[:2], ke.slot[:2]))
        m.d.sync += [lk_a.eq(Cat(j_d[:2], ke.slot[:2])),
                     lk_s.eq(Mux(k_pre_sel, t.wp, ke.slot))]
        m.d.comb += [kva_rd.addr.eq(lk_a), kl_rd.addr.eq(lk_a),
                     pd_rd.addr.eq(Mux(k_pre_sel, t.wp, lk_s)),
                     lk.va.eq(Mux(k_pre_on, t.a_r, kva_rd.data)),
                     lk.len.eq(Mux(k_pre_on, t.mend[:32], kl_rd.data)),
                     lk.pd.eq(pd_rd.data),
                     lk.key.eq(Mux(k_pre_on, t.li_r, lk_key)),
                     lk.access.eq(Mux(k_pre_on, Access.REMOTE_READ, lk_acc)),
                     lk.tag.eq(Mux(k_pre_on, 0, lk_tag))]
        m.d.sync += lk_key.eq(kp_rd.data)
        m.d.sync += [
            lk_acc.eq(Mux(ke.write, Access.REMOTE_WRITE,
                          Mux(ke.read, Access.REMOTE_READ, Access.LOCAL_WRITE))),
            lk_tag.eq(j_d),
        ]
        return k_pre, k_pre_sel

    def _key_fsm(self, m, t):
        """The key checks' FSM ``keys``: K_IDLE takes the plan at ``key_q``'s head, K_LOOK issues
        a piece's lookup (after an older packet's invalidate), K_WAIT writes its bus address
        and goes on to the next piece or pushes the entry (K_PUSH when ``iss_q`` is full)."""
        (bus_wr, inv_inc, inv_pend, iq, iss_q, j, j_d, k_fail, k_fail_c, k_first, k_idle, k_next,
         kh, lk_look, lk_look_d) = (
            t.bus_wr, t.inv_inc, t.inv_pend, t.iq, t.iss_q, t.j, t.j_d, t.k_fail, t.k_fail_c,
            t.k_first, t.k_idle, t.k_next, t.kh, t.lk_look, t.lk_look_d)
        with m.FSM(name="keys") as fsm:
            with m.State("K_IDLE"):
                m.d.comb += [k_idle.eq(1), j_d.eq(k_first)]
                m.d.sync += k_fail.eq(0)
                with m.If(kh.valid):
                    with m.If(kh.payload.nolook):       # (``k_first`` is MAX_SGE)
                        # nothing to look up: the entry goes on now (as from K_PUSH)
                        m.d.comb += [iq.valid.eq(1), k_fail_c.eq(0),
                                     t.k_inv_c.eq(kh.payload.inv & ~kh.payload.nowrite)]
                        with m.If(iq.ready):
                            m.d.comb += [kh.ready.eq(1), inv_inc.eq(iq.payload.invc)]
                        with m.Else():
                            m.next = "K_PUSH"
                    with m.Else():
                        m.d.comb += lk_look_d.eq(1)
                        m.next = "K_LOOK"
                with m.Elif(t.k_pre_sel):
                    # a new READ sent on from DEC: its lookup (piece 0) now; its entry is
                    # at ``key_q``'s head from the next cycle, in K_WAIT or K_LOOK
                    m.d.sync += j.eq(0)
                    with m.If(t.k_pre):
                        m.d.comb += self.lookup.req.valid.eq(1)
                        with m.If(self.lookup.req.ready):
                            m.next = "K_WAIT"
                        with m.Else():
                            m.d.comb += lk_look_d.eq(1)
                            m.next = "K_LOOK"
            with m.State("K_LOOK"):
                # (``lk_look`` is ``j != MAX_SGE`` here)
                with m.If(~lk_look):
                    m.next = "K_PUSH"
                with m.Elif(inv_pend == 0):
                    # an older packet's invalidate is done before this packet's lookups
                    m.d.comb += self.lookup.req.valid.eq(1)
                    with m.If(self.lookup.req.ready):
                        m.next = "K_WAIT"
                    with m.Else():
                        m.d.comb += lk_look_d.eq(1)
                with m.Else():
                    m.d.comb += lk_look_d.eq(1)
            with m.State("K_WAIT"):
                rr = self.lookup.resp
                m.d.comb += [rr.ready.eq(1), t.k_wait.eq(1)]
                with m.If(rr.valid):
                    m.d.comb += bus_wr.en.eq(1)
                    m.d.comb += j_d.eq(k_next)
                    with m.If(t.rd_go):
                        # a READ with stages 3 and 4 empty: its job and ``done`` go now
                        m.d.comb += [kh.ready.eq(1), t.rd_sc.eq(1)]
                        m.next = "K_IDLE"
                    with m.Elif(~rr.payload.ok | (k_next == MAX_SGE)):
                        # the entry's last lookup: it leaves now if ``iss_q`` has room, else
                        # from K_PUSH (its outcome registered)
                        m.d.comb += [k_fail_c.eq(~rr.payload.ok), iq.valid.eq(1)]
                        m.d.sync += k_fail.eq(~rr.payload.ok)
                        with m.If(iq.ready):
                            m.d.comb += [kh.ready.eq(1), inv_inc.eq(iq.payload.invc)]
                            m.next = "K_IDLE"
                        with m.Else():
                            m.next = "K_PUSH"
                    with m.Else():
                        m.d.comb += lk_look_d.eq(1)
                        m.next = "K_LOOK"
            with m.State("K_PUSH"):
                m.d.comb += iq.valid.eq(1)
                with m.If(iq.ready):
                    m.d.comb += [kh.ready.eq(1), inv_inc.eq(iq.payload.invc)]
                    m.next = "K_IDLE"
        _one_hot(fsm)

    def _reservation(self, m, t):
        """Stage 3, the reservation: the dead mark (a write fault sets it too) read again, a CQE slot reserved,
        the QP marked dead on a fatal outcome. Adds the dead-mark write request stage 4 shares
        (``post_dead_w``) and the queue into stage 4 (``pp_q``)."""
        (dead_rd2, dead_rd2_data, dead_wr, iss_q, iss_tok, post_plan_busy, r_idle, rst) = (
            t.dead_rd2, t.dead_rd2_data, t.dead_wr, t.iss_q, t.iss_tok, t.post_plan_busy, t.r_idle,
            t.rst)
        # ==== stage 3: CQE slot (reservation) ================================================
        # Its own stage, so the next packet's slot is reserved while stage 4 issues this one
        # and CqeGen writes the previous CQE. It works on the entry at ``iss_q``'s head (stable
        # until taken) and takes it when it goes into ``post_plan_q``: what it decides is two
        # registered flags, ``r_skip`` (the QP went dead) and ``r_full`` (the CQ is full).
        m.submodules.post_plan_q = pp_q = Queue(iss_tok, 2, buffered=False)
        m.d.comb += post_plan_busy.eq(pp_q.level != 0)
        h = iss_q.o.payload
        r = Signal(iss_tok)                    # the entry as it goes on (comb)
        r_skip = Signal()
        r_full = Signal()
        # stage 4 is in POST with a fatal outcome (it may write a dead mark this cycle):
        # stage 3, which may write one too, waits (a register's test, not POST's decision)
        post_dead_w = Signal()
        r_go = Signal()                        # the entry may go into ``post_plan_q`` now
        m.d.comb += r_go.eq(pp_q.i.ready & ~rst.valid & ~post_dead_w & ~t.wf_w)
        m.d.comb += r.eq(h)
        with m.If(r_skip):
            m.d.comb += [r.skip.eq(1), r.nowrite.eq(1), r.fatal.eq(0), r.syn.eq(0),
                         r.cqe_on.eq(0), r.cdone.eq(0)]
        with m.Elif(r_full):
            # CQ full: no CQE, nothing written
            m.d.comb += [r.fatal.eq(1), r.syn.eq(0), r.cstat.eq(0), r.cqe_on.eq(0),
                         r.nowrite.eq(1)]

        def r_push():
            # a fatal outcome marks the QP dead now, so the younger packets behind are
            # skipped before they reserve anything
            m.d.comb += [pp_q.i.valid.eq(1), iss_q.o.ready.eq(1)]
            with m.If(r.fatal):
                m.d.comb += [dead_wr.addr.eq(h.qpn), dead_wr.data.eq(1), dead_wr.en.eq(1)]
            m.next = "R_IDLE"
        # (with no entry at ``iss_q``'s head, the mark of the key checks' entry: the READ
        # shortcut's check, :meth:`_read_shortcut`)
        m.d.comb += [dead_rd2.addr.eq(Mux(iss_q.o.valid, h.qpn, t.ke.qpn)),
                     self.reserve.payload.cqn.eq(h.cqn),
                     pp_q.i.payload.eq(r)]
        with m.FSM(name="resv") as fsm:
            with m.State("R_IDLE"):
                m.d.comb += [r_idle.eq(1), dead_rd2.en.eq(1)]
                m.d.sync += [r_skip.eq(0), r_full.eq(0)]
                with m.If(iss_q.o.valid):
                    m.next = "R_CHK"
            with m.State("R_CHK"):
                # the QP may have gone dead after stage 1 read its mark (an older packet's
                # outcome, marked when that packet left this stage; or a write fault): skip
                with m.If(dead_rd2_data):
                    m.d.sync += r_skip.eq(1)
                    m.next = "R_PUSH"
                with m.Elif(~h.cqe_on):
                    # nothing to reserve: the entry leaves now if it can (as from R_PUSH)
                    with m.If(r_go):
                        r_push()
                    with m.Else():
                        m.next = "R_PUSH"
                with m.Else():
                    m.next = "R_RESV"
            with m.State("R_RESV"):
                m.d.comb += self.reserve.valid.eq(1)
                with m.If(self.reserve.ready):
                    m.next = "R_WAIT"
            with m.State("R_WAIT"):
                m.d.comb += self.reserve_resp.ready.eq(1)
                with m.If(self.reserve_resp.valid):
                    with m.If(~self.reserve_resp.payload.ok):
                        m.d.sync += r_full.eq(1)
                    m.next = "R_PUSH"
            with m.State("R_PUSH"):
                with m.If(r_go):
                    r_push()
        _one_hot(fsm)
        return types.SimpleNamespace(post_dead_w=post_dead_w, pp_q=pp_q)

    def _issue_select(self, m, t):
        """Stage 4's entry (``b``, from ``post_plan_q``) and piece (``jb``), and what it offers:
        the write request and the piece of piece ``jb``, the READ job (``rq``, into ``read_q``),
        the CQE and the post entry. Adds these."""
        (ab, b, b_ev, bus_rd, cqe_q, fl_cqe, fl_ev, head_rd, lb, plan_ev, plan_ev_qpn, post_q,
         pp_q, pq, sp_rd, wqpn_wr, wr_cnt) = (
            t.ab, t.b, t.b_ev, t.bus_rd, t.cqe_q, t.fl_cqe, t.fl_ev, t.head_rd, t.lb, t.plan_ev,
            t.plan_ev_qpn, t.post_q, t.pp_q, t.pq, t.sp_rd, t.wqpn_wr, t.wr_cnt)
        # ==== stage 4: writes, closing piece, invalidate, done/CQE ===========================
        jb = Signal(range(MAX_SGE + 1))
        pp_h = pp_q.o.payload
        pp_first = _first_valid(m, pp_h.pv)
        b_next = _first_valid(m, b.pv, jb)
        bh = head_rd.data
        bt = t.tk_rd.data
        m.d.comb += [head_rd.addr.eq(b.slot), t.tk_rd.addr.eq(b.slot)]
        j_len_b, j_src_b, j_bus_b = Signal(13), Signal(13), Signal(64)
        for i in range(MAX_SGE):
            m.d.comb += sp_rd[i].addr.eq(b.slot)
        # (a READ's piece is piece 0: ``jb`` stays 0 to POST; rows of ``jb`` = MAX_SGE are
        # never written: zero)
        m.d.comb += [bus_rd.addr.eq(Cat(jb[:2], b.slot[:3])), j_bus_b.eq(bus_rd.data)]
        with m.Switch(jb):
            for i in range(MAX_SGE):
                with m.Case(i):
                    m.d.comb += [j_len_b.eq(sp_rd[i].data.len), j_src_b.eq(sp_rd[i].data.src)]
        # The write request of piece ``jb`` leaves from registers: the length and the address
        # bits below the page (the operands of the AXI master's burst arithmetic) registered
        # from the piece's rows in every cycle, the page from ``plan_bus`` at the registered
        # address {jb, slot}, the tag the count. So it is offered from ISSUE's second cycle
        # for a piece (``wq_ok``: ``jb`` and ``b`` were unchanged in the cycle before), while
        # the piece goes from the first: the Scatter Path takes a request only after its
        # piece (two cycles after its push at the earliest), so the request is never later.
        wq_lo = Signal(12)
        wq_len = Signal(13)
        wq_ok = Signal()
        m.d.sync += [wq_lo.eq(j_bus_b[:12]), wq_len.eq(j_len_b), wq_ok.eq(0)]
        m.d.comb += [
            self.wr.req.payload.addr.eq(Cat(wq_lo, j_bus_b[12:])),
            self.wr.req.payload.len_bytes.eq(wq_len),
            self.wr.req.payload.tag.eq(wr_cnt[:8]),
            pq.payload.src.eq(j_src_b),
            pq.payload.len.eq(j_len_b),
            pq.payload.lane.eq(j_bus_b[:lb]),
            pq.payload.end.eq(0),
            wqpn_wr.addr.eq(wr_cnt[:MAX_WRITES.bit_length() - 1]),
            wqpn_wr.data.eq(b.qpn),
            self.inval.req.payload.key.eq(bt.imm_or_rkey),
            self.inval.req.payload.tag.eq(0),
            plan_ev_qpn.eq(b.qpn),
            plan_ev.eq(fl_ev | b_ev),
        ]

        # an answered READ's job (its PSN in the head's wr_id field, MSN and path MTU in
        # ``plan_take``'s imm_or_rkey). The jobs wait here while a long READ's responses are
        # sent (stage 4 stalls only when READ_JOBS wait), in LUT RAM read at the head (the READ
        # response engine registers the job it takes)
        m.submodules.read_q = read_q = Queue(_read_entry_layout(ab), READ_JOBS, buffered=False)
        m.d.comb += [self.read.valid.eq(read_q.o.valid), read_q.o.ready.eq(self.read.ready),
                     *[getattr(self.read.payload, k).eq(getattr(read_q.o.payload, k))
                       for k, _ in read_job_layout]]
        rq = read_q.i
        m.d.comb += [rq.payload.qpn.eq(b.qpn), rq.payload.psn.eq(bh.wr_id[0:24]),
                     rq.payload.msn.eq(bt.imm_or_rkey[0:24]),
                     rq.payload.pmtu.eq(bt.imm_or_rkey[24:27]),
                     rq.payload.addr.eq(bus_rd.data), rq.payload.len.eq(bh.byte_len)]

        # CQE and post entries (a flush's CQEs come from the planner while stage 4 is idle: it
        # loads ``b`` and writes the plan head of its slot, so they take the same path)
        cq = cqe_q.i.payload
        m.d.comb += [
            cq.cqn.eq(b.cqn), cq.wr_id.eq(bh.wr_id), cq.byte_len.eq(bh.byte_len),
            cq.imm_or_rkey.eq(bt.imm_or_rkey), cq.qpn.eq(b.qpn), cq.status.eq(b.cstat),
            cq.rdma_imm.eq(bh.rdma_imm), cq.imm.eq(bh.imm), cq.inv.eq(b.inv),
            cq.se.eq(bt.se), cq.flush.eq(fl_cqe),
        ]
        m.d.comb += [
            cqe_q.i.payload.need.eq(wr_cnt),
            # (the READ shortcut's entry: success, no beats)
            post_q.i.payload.fatal.eq(b.fatal & ~t.rd_post),
            post_q.i.payload.syndrome.eq(Mux(t.rd_post, 0, b.syn)),
            post_q.i.payload.beats.eq(b.has_beats & ~t.rd_post),
        ]
        return types.SimpleNamespace(b_next=b_next, bh=bh, jb=jb, pp_first=pp_first, pp_h=pp_h,
                                     rq=rq, wq_ok=wq_ok)

    def _read_shortcut(self, m, t):
        """A READ whose lookup passes while stages 3 and 4 are empty skips them: its answer
        takes the entry from ``key_q`` (``rd_sc``) and loads its slot and QP into idle stage
        4's ``b``; in the next cycle (``rd_post``) its ``done`` entry (success, no beats) and,
        unless its QP is dead, its job are pushed from ``b`` and the plan RAMs at ``b.slot``,
        as stage 4's POST pushes them, three cycles sooner. With no older command behind the
        key checks the order of the jobs and of the ``done`` is kept. ``rd_arm`` (a register)
        holds for the entry at ``key_q``'s head in K_WAIT while no answer came: a READ (one
        piece) that reserves, writes, invalidates and completes nothing, stage 3 idle with
        ``iss_q`` empty, ``post_plan_q`` empty, stage 4 idle, room for the job and the
        ``done``. All of that stays so until the push (only the key checks feed ``iss_q``;
        nothing else pushes the two queues meanwhile). Stage 3's dead re-check is made at the
        push, as stage 3 would make it a cycle later: stage 3's mark port reads the key
        checks' entry's QP while it has no entry (the answer's cycle included), and a mark
        written in the answer's cycle is taken from the table's registered write request. A
        dead QP's READ gets the ``done`` of a skipped command (0, 0) and no job, as through
        stages 3 and 4."""
        ke, rr, dead = t.ke, self.lookup.resp, t.dead
        m.d.sync += t.rd_arm.eq(
            t.k_wait & ~rr.valid & ~t.iss_q.o.valid & t.r_idle & ~t.post_plan_busy & t.b_idle
            & t.post_q.i.ready & t.rq.ready
            & ke.read & (ke.pv == 1) & ~ke.fatal & ~ke.skip & ~ke.nowrite & ~ke.cqe_on
            & ~ke.has_beats & ~ke.cdone & ~ke.rdflt & ~ke.inv)
        m.d.comb += t.rd_go.eq(t.rd_arm & rr.payload.ok)
        rd_post = t.rd_post
        m.d.sync += rd_post.eq(t.rd_sc)
        dead_now = Mux(dead._q_en & (dead._q_row == t.b.qpn), dead._q_bit, t.dead_rd2_data)
        with m.If(rd_post):
            m.d.comb += [t.post_q.i.valid.eq(1), t.rq.valid.eq(~dead_now)]

    def _issue_inv(self, m, t):
        """Stage 4's invalidate states: INV waits for the packet's last write beat, INV_REQ and
        INV_WAIT the Key Cache's ``inval`` (refused: fatal 0x1F, REM_INV_REQ_ERR)."""
        b, push_close, sc_out = t.b, t.push_close, t.sc_out
        with m.State("INV"):
            with m.If(~b.inv | b.nowrite):
                m.next = "POST"
            with m.Elif((sc_out == 0) & ~push_close):
                m.next = "INV_REQ"
        with m.State("INV_REQ"):
            m.d.comb += self.inval.req.valid.eq(1)
            with m.If(self.inval.req.ready):
                m.next = "INV_WAIT"
        with m.State("INV_WAIT"):
            m.d.comb += self.inval.resp.ready.eq(1)
            with m.If(self.inval.resp.valid):
                with m.If(~self.inval.resp.payload.ok):
                    m.d.sync += [b.fatal.eq(1), b.syn.eq(_SYN[0x1F]),
                                 b.cstat.eq(WcStatus.REM_INV_REQ_ERR)]
                m.next = "POST"

    def _issue(self, m, t):
        """Stage 4, the issue FSM: the writes, the closing piece, the invalidate, then the post
        entry with its CQE, READ job or event (and the dead mark on a fatal outcome)."""
        (b, b_ev, b_idle, b_next, bh, cnext_wr, cqe_q, dead_wr, ev_q, fl_cqe, inv_dec, jb,
         post_dead_w, post_q, pp_first, pp_q, pq, push_close, room, rq, rst, sc_out, sent_p,
         sent_w, wd_err, wqpn_wr, wr_cnt, wr_inc) = (
            t.b, t.b_ev, t.b_idle, t.b_next, t.bh, t.cnext_wr, t.cqe_q, t.dead_wr, t.ev_q,
            t.fl_cqe, t.inv_dec, t.jb, t.post_dead_w, t.post_q, t.pp_first, t.pp_q, t.pq,
            t.push_close, t.room, t.rq, t.rst, t.sc_out, t.sent_p, t.sent_w, t.wd_err, t.wqpn_wr,
            t.wr_cnt, t.wr_inc)
        with m.FSM(name="issue") as fsm:
            with m.State("B_IDLE"):
                m.d.comb += [b_idle.eq(1), pp_q.o.ready.eq(1)]
                with m.If(pp_q.o.valid):
                    m.d.sync += [b.eq(t.pp_h), jb.eq(pp_first)]
                    # (as ISSUE would: nothing to write -> CLOSE, or POST when there is
                    # nothing to close or invalidate either)
                    h = t.pp_h
                    h_nw = h.nowrite | h.read | (h.pv == 0)
                    with m.If(h_nw & ~h.has_beats & (~h.inv | h.nowrite)):
                        m.next = "POST"
                    with m.Elif(h_nw):
                        m.next = "CLOSE"
                    with m.Else():
                        m.next = "ISSUE"
                with m.Elif(t.rd_sc):
                    # the READ the key checks pass on (_read_shortcut): its slot and QP,
                    # for its post from ``b`` in the next cycle
                    m.d.sync += [b.slot.eq(t.ke.slot), b.qpn.eq(t.ke.qpn), jb.eq(0)]
            with m.State("ISSUE"):
                # (a READ's piece was checked, not written; a command with nothing to close or
                # invalidate goes straight to POST)
                m.d.sync += t.wq_ok.eq(1)
                with m.If(b.nowrite | b.read | (jb == MAX_SGE)):
                    with m.If(~b.has_beats & (~b.inv | b.nowrite)):
                        m.next = "POST"
                    with m.Else():
                        m.next = "CLOSE"
                with m.Elif(room):
                    m.d.comb += [self.wr.req.valid.eq(~sent_w & t.wq_ok), pq.valid.eq(~sent_p)]
                    w_ok = Signal()
                    p_ok = Signal()
                    m.d.comb += [w_ok.eq(sent_w | (t.wq_ok & self.wr.req.ready)),
                                 p_ok.eq(sent_p | pq.ready)]
                    with m.If(w_ok & p_ok):
                        m.d.comb += [wqpn_wr.en.eq(1), wr_inc.eq(1)]
                        m.d.sync += [sent_w.eq(0), sent_p.eq(0), jb.eq(b_next),
                                     wr_cnt.eq(wr_cnt + 1), t.wq_ok.eq(0)]
                        with m.If(b_next == MAX_SGE):
                            m.next = "CLOSE"
                    with m.Else():
                        m.d.sync += [sent_w.eq(w_ok), sent_p.eq(p_ok)]
            with m.State("CLOSE"):
                # (on to INV only for an invalidate: else POST, as INV would)
                no_inv = ~b.inv | b.nowrite
                with m.If(~b.has_beats):
                    m.next = "INV"
                    with m.If(no_inv):
                        m.next = "POST"
                with m.Else():
                    m.d.comb += [pq.valid.eq(1), pq.payload.len.eq(0),
                                 pq.payload.end.eq(1)]
                    with m.If(pq.ready):
                        m.d.comb += push_close.eq(1)
                        m.next = "INV"
                        with m.If(no_inv):
                            m.next = "POST"
            self._issue_inv(m, t)
            with m.State("POST"):
                go = Signal()
                evn = Signal()
                rjob = Signal()
                m.d.comb += post_dead_w.eq(b.fatal)
                m.d.comb += [evn.eq(b.rdflt & ~b.skip),
                             rjob.eq(b.read & ~b.fatal & ~b.skip),
                             go.eq(post_q.i.ready & (~b.cqe_on | cqe_q.i.ready)
                                   & (~rjob | rq.ready)
                                   & ~rst.valid & ~t.wf_w
                                   & (~evn | (~wd_err & ev_q.i.ready)))]
                # the marks' rows and words whenever no other writer has the tables (no
                # ``qp_reset``, no write fault; stage 3 waits for a fatal POST), their enables
                # with ``go``: the handshakes ``go`` waits for reach the write enables only
                with m.If(~rst.valid & ~t.wf_w):
                    with m.If(b.fatal):
                        m.d.comb += [dead_wr.addr.eq(b.qpn), dead_wr.data.eq(1)]
                    with m.If(b.cdone & ~b.skip):
                        m.d.comb += [cnext_wr.addr.eq(b.qpn), cnext_wr.data.eq(bh.widx + 1)]
                with m.If(go):
                    m.d.comb += [post_q.i.valid.eq(1), cqe_q.i.valid.eq(b.cqe_on & ~b.skip),
                                 rq.valid.eq(rjob),
                                 b_ev.eq(evn), inv_dec.eq(b.invc)]
                    with m.If(b.fatal):
                        m.d.comb += dead_wr.en.eq(1)
                    with m.If(b.cdone & ~b.skip):
                        m.d.comb += cnext_wr.en.eq(1)
                    m.next = "B_IDLE"
        _one_hot(fsm)
        with m.If(fl_cqe):
            m.d.comb += cqe_q.i.valid.eq(1)
