"""READ response engine: the responder's RDMA READ responses (interface.md §7), as frame
descriptors and gather chunks for the TX frame builder, merged with PSN Check's ACK/NAKs.

A READ job (:data:`~rnic.ifaces.read_job_layout`) of L bytes becomes n = max(1, ⌈L/PMTU⌉)
frames: READ_RESPONSE_ONLY (0x10) when n is 1, else FIRST (0x0D), MIDDLE (0x0E)…, LAST (0x0F).
Frame i has PSN ``job.psn + i`` (mod 2^24) and ``job.qpn``; FIRST, LAST and ONLY carry an AETH
(syndrome 0x1F, ``job.msn``), MIDDLE none; every frame but the last carries PMTU bytes, the last
the rest. Each frame with payload is followed by exactly one chunk, ``job.addr + i·PMTU`` and its
length; a zero-length READ is one ONLY frame with no payload and no chunk.

Ordering: the READ responses and PSN Check's ACK/NAKs leave on one descriptor stream (``pkt``),
so an ACK/NAK decided after a READ never overtakes its responses. An ACK/NAK passes only when no
job is in progress and none waits on ``job``; once it is offered it is held until taken (a job
arriving meanwhile waits for it). So ACK/NAKs decided before a READ may also wait behind its
responses, when the job reaches this block first.

Per frame the engine offers the descriptor, then (payload > 0) the chunk, then the next
descriptor: registers hold the bytes left (``rem``), the next bus address, the next PSN and
whether the frame is the first and the last; PMTU is ``256 << (code − 1)``, kept one-hot. A job
is copied into these registers when taken, so ``job.ready`` comes from registers (the job is not
held on ``job`` until its last frame). A job's first descriptor is offered the cycle after the
job is taken; later ones three cycles after the previous frame's chunk. The frames leave faster
than the builder builds them (a frame every ~5 cycles through the arbiter, against the
builder's header words + payload beats + ~2).

Faults: a ``fault`` (the builder dropped a frame because its payload read failed) naming the QPN
of the job in progress ends the job, a cycle later: a descriptor offered and not taken is
withdrawn (the arbiter allows this), the chunk of one taken is still sent (the builder needs
it), and nothing more of the job follows. Frames of the job already handed to the builder are
built as they are (each read that fails is dropped and reported again). A fault of another QPN,
or when no job runs, is ignored; one of an earlier frame of the job's QP (a request's, or an
earlier READ's) ends the job too: the QP goes to ERROR either way (elsewhere).
"""

import types

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..ifaces import QpnStream, read_job_layout
from ..parts import add as _add
from .build import chunk_layout, pkt_layout, tx_hdr_layout

__all__ = ["ReadResp"]

#: BTH opcodes of the READ responses
FIRST, MIDDLE, LAST, ONLY = 0x0D, 0x0E, 0x0F, 0x10


def _at_most_pmtu(hi0, lo0, mid, pm, pm_above, pm_below):
    """rem ≤ PMTU = 2^k (``pm`` one-hot at k − 8, ``pm_above``/``pm_below`` its bits above and
    below), from the zero tests of rem's bits 13 up (``hi0``) and 0..7 (``lo0``) and its bits
    8..12 (``mid``): no bit of rem above k, and bit k only with none below it."""
    return (hi0 & ((mid & pm_above) == 0)
            & (((mid & pm) == 0) | lo0 & ((mid & pm_below) == 0)))


class ReadResp(wiring.Component):
    """The responder's READ responses and ACK/NAKs, as frame descriptors and gather chunks.

    Parameters
    ----------
    num_qp : int or None
        Local QPNs (a power of two, 2..65536, as the builder's path table): the engine keeps
        and compares only the QPN bits below ``num_qp`` (the jobs' and faults' QPNs are below
        it). ``None`` (default): all 24 bits.

    Attributes
    ----------
    job : In(stream.Signature(read_job_layout))
        READ jobs in PSN order (from the execute stage). ``len`` 0..2^31; ``pmtu`` 1..5 (other
        codes are not expected: they act as 1). ``ready`` comes from registers.
    ack : In(stream.Signature(tx_hdr_layout))
        PSN Check's ACK/NAK frame descriptors (its ``ack_tx``).
    pkt : Out(stream.Signature(pkt_layout))
        Frame descriptors, to :class:`~rnic.tx.arbiter.TxArbiter`'s ``resp``: the ACK/NAKs
        (``paylen`` 0, no RETH/IMMDT fields) and the READ responses (``se``, ``ackreq`` 0;
        ``syndrome`` 0x1F and ``msn`` also on a MIDDLE, where ``aeth`` 0 makes the builder
        ignore them). A descriptor may be withdrawn before it is taken (a fault, see above).
    chunk : Out(stream.Signature(chunk_layout))
        One chunk per READ response with payload, after its descriptor: to the arbiter's
        ``resp_chunk``.
    fault : In(QpnStream())
        The builder's payload-read faults (QPN of the frame dropped); always ready.
    """

    def __init__(self, *, num_qp=None):
        if num_qp is not None and (not isinstance(num_qp, int) or num_qp & (num_qp - 1)
                                   or not 2 <= num_qp <= 65536):
            raise ValueError(f"num_qp must be a power of two in 2..65536, not {num_qp!r}")
        self.num_qp = num_qp
        super().__init__({
            "job": In(stream.Signature(read_job_layout)),
            "ack": In(stream.Signature(tx_hdr_layout)),
            "pkt": Out(stream.Signature(pkt_layout)),
            "chunk": Out(stream.Signature(chunk_layout)),
            "fault": In(QpnStream()),
        })

    def elaborate(self, platform):
        """The parts, in the order of their statements: the job's and frame's registers, the
        "last frame" test and the job's PMTU decode, the fault and ACK/NAK conditions, the
        offers on ``pkt``/``chunk``/``ack``/``job``, and the frame sequence's next state."""
        m = Module()
        # The parts below share their signals through ``t`` (see rnic.parts): each takes from
        # it what it reads and adds what it makes.
        t = types.SimpleNamespace(
            j=self.job.payload,
            ab=24 if self.num_qp is None else (self.num_qp - 1).bit_length())
        _add(t, self._frame_state(m, t))
        _add(t, self._last_test(m, t))
        _add(t, self._fault_and_ack(m, t))
        _add(t, self._offers(m, t))
        self._next_state(m, t)
        return m

    def _frame_state(self, m, t):
        """The job in progress and its next frame, in registers: the frame sequence's states
        (one flip-flop each), the first/last flags, the bytes left, bus address, PSN, QPN, MSN
        and the PMTU (one-hot as PMTU / 256, ``pm``), with the PMTU in bytes and the frame's
        payload length. Adds these."""
        ab = t.ab
        # The job in progress and its next frame. PMTU is 256 << (code − 1), kept one-hot as
        # PMTU / 256 (``pm``): the address and the bytes left move by it above their low 8
        # bits, and "at most PMTU" is a test of zero bits, not a comparator.
        # The frame sequence, one flip-flop per state (the outputs and enables start at one):
        # idle → offer (the descriptor) → chunk (payload > 0) → settle1 → settle2 → offer …;
        # the two settle cycles let ``last`` follow a new ``rem`` (below); the job's first
        # ``last`` is loaded with the job.
        idle = Signal(init=1)
        settle1, settle2 = Signal(), Signal()
        offer = Signal()        # the descriptor is offered
        in_chunk = Signal()     # it was taken; its chunk is offered
        dead = Signal()         # a fault ended the job: nothing more is offered
        nil = Signal()          # the job has no payload (its one frame has no chunk)
        first = Signal()        # the frame is the job's first
        last = Signal()         # the frame is the job's last (rem ≤ PMTU)
        rem = Signal(32)        # bytes of the job from this frame on
        addr = Signal(64)       # bus address of the frame's first byte
        psn = Signal(24)
        qpn = Signal(ab)
        msn = Signal(24)
        pm = Signal(5)          # PMTU / 256, one-hot
        pm_above = Signal(5)    # its bits above the one set, and those below (from ``pm``)
        pm_below = Signal(5)
        m.d.comb += [pm_below.eq(Cat(*[pm[i + 1:].any() for i in range(5)])),
                     pm_above.eq(Cat(*[pm[:i].any() for i in range(5)]))]
        pmtu = Signal(13)
        m.d.comb += pmtu.eq(Cat(Const(0, 8), pm))
        paylen = Signal(13)
        m.d.comb += paylen.eq(Mux(last, rem[:13], pmtu))
        return types.SimpleNamespace(
            idle=idle, settle1=settle1, settle2=settle2, offer=offer, in_chunk=in_chunk,
            dead=dead, nil=nil, first=first, last=last, rem=rem, addr=addr, psn=psn, qpn=qpn,
            msn=msn, pm=pm, pm_above=pm_above, pm_below=pm_below, paylen=paylen)

    def _last_test(self, m, t):
        """``last`` (rem ≤ PMTU) for every frame after the job's first, from the zero tests
        of ``rem``'s bits 13 up and 0..7 registered first (``hi0``, ``lo0``), and the job's
        PMTU code decoded as ``pm``, ``pm_above``, ``pm_below`` (``j_*``), loaded with the
        job. Adds these."""
        j, last, pm, pm_above, pm_below, rem = t.j, t.last, t.pm, t.pm_above, t.pm_below, t.rem
        # rem ≤ PMTU = 2^k: no bit of rem above k, and bit k only with none below it. For every
        # frame after the first, two cycles behind rem (the zero tests of its bits 13 up and
        # 0..7 registered first); for the first, the same test on the job as it is taken
        hi0, lo0 = Signal(), Signal()
        m.d.sync += [hi0.eq(rem[13:] == 0), lo0.eq(rem[:8] == 0),
                     last.eq(_at_most_pmtu(hi0, lo0, rem[8:13], pm, pm_above, pm_below))]
        # the job's PMTU code, decoded as ``pm``, ``pm_above`` and ``pm_below`` (codes other
        # than 1..5 act as 1)
        j_pm, j_above, j_below = Signal(5), Signal(5), Signal(5)
        with m.Switch(j.pmtu):
            for c in range(1, 6):
                with m.Case(*([c] if c > 1 else [0, 1, 6, 7])):
                    m.d.comb += [j_pm.eq(1 << (c - 1)), j_above.eq(0x1F & -(2 << (c - 1))),
                                 j_below.eq((1 << (c - 1)) - 1)]
        return types.SimpleNamespace(hi0=hi0, lo0=lo0, j_pm=j_pm, j_above=j_above,
                                     j_below=j_below)

    def _fault_and_ack(self, m, t):
        """Whether a fault ends the job in progress (``hit``, registered; ``kill``: now or
        before), and when an ACK/NAK may be offered: only while no job runs or waits, held
        once offered until taken (``ack_ok``, ``ack_on``). Adds these."""
        ab, dead, idle, qpn = t.ab, t.dead, t.idle, t.qpn
        # a fault naming the job's QPN, registered (the builder's fault is a block away); a job
        # loaded meanwhile is not named by it (idle in the cycle of the load)
        hit = Signal()
        m.d.sync += hit.eq(self.fault.valid & (self.fault.payload.qpn[:ab] == qpn) & ~idle)
        kill = Signal()         # the job in progress is ended (used outside idle only)
        m.d.comb += kill.eq(hit | dead)

        # ACK/NAKs: offered only while no job runs or waits; once offered, held until taken
        ack_on = Signal()       # an ACK/NAK was offered and not taken
        ack_ok = Signal()
        m.d.comb += ack_ok.eq(idle & (ack_on | ~self.job.valid))
        m.d.sync += ack_on.eq(ack_ok & self.ack.valid & ~self.pkt.ready)
        return types.SimpleNamespace(hit=hit, kill=kill, ack_on=ack_on, ack_ok=ack_ok)

    def _offers(self, m, t):
        """The ports: the descriptor on ``pkt`` (a READ response's while a job runs, else the
        ACK/NAK's), the chunk, and the handshakes of ``job``, ``ack`` and ``fault``, with the
        strobes the frame sequence moves on (``load``: a job taken, ``took``: its descriptor,
        ``sent``: its chunk). Adds the strobes."""
        (ack_ok, ack_on, addr, first, idle, in_chunk, last, msn, offer, paylen, psn, qpn) = (
            t.ack_ok, t.ack_on, t.addr, t.first, t.idle, t.in_chunk, t.last, t.msn, t.offer,
            t.paylen, t.psn, t.qpn)
        p, a = self.pkt.payload, self.ack.payload
        with m.If(~idle):
            m.d.comb += [
                p.qpn.eq(qpn), p.psn.eq(psn), p.paylen.eq(paylen),
                p.opcode.eq(Mux(first, Mux(last, ONLY, FIRST), Mux(last, LAST, MIDDLE))),
                p.aeth.eq(first | last), p.syndrome.eq(0x1F), p.msn.eq(msn),
            ]
        with m.Else():
            m.d.comb += [getattr(p, f).eq(getattr(a, f)) for f in
                         ("qpn", "opcode", "se", "ackreq", "psn", "aeth", "syndrome", "msn")]
        load, took, sent = Signal(), Signal(), Signal()
        m.d.comb += [
            self.pkt.valid.eq(offer | ack_ok & self.ack.valid),
            self.ack.ready.eq(ack_ok & self.pkt.ready),
            self.job.ready.eq(idle & ~ack_on),
            self.chunk.valid.eq(in_chunk),
            self.chunk.payload.addr.eq(addr),
            self.chunk.payload.len.eq(paylen),
            self.fault.ready.eq(1),
            load.eq(self.job.valid & self.job.ready),
            took.eq(offer & self.pkt.ready),                # the descriptor taken
            sent.eq(in_chunk & self.chunk.ready),           # the chunk taken
        ]
        return types.SimpleNamespace(load=load, took=took, sent=sent)

    def _next_state(self, m, t):
        """The frame sequence's next state, a job's registers loaded as it is taken (its first
        ``last`` tested on the job itself), the dead mark of a fault, and the move to the next
        frame when a chunk is taken (PSN + 1, address and bytes left by PMTU)."""
        (ab, addr, dead, first, hi0, hit, idle, in_chunk, j, j_above, j_below, j_pm, kill, last,
         lo0, load, msn, nil, offer, pm, pm_above, pm_below, psn, qpn, rem, sent, settle1,
         settle2, took) = (
            t.ab, t.addr, t.dead, t.first, t.hi0, t.hit, t.idle, t.in_chunk, t.j, t.j_above,
            t.j_below, t.j_pm, t.kill, t.last, t.lo0, t.load, t.msn, t.nil, t.offer, t.pm,
            t.pm_above, t.pm_below, t.psn, t.qpn, t.rem, t.sent, t.settle1, t.settle2, t.took)
        # the next state: a descriptor offered is withdrawn when the job is killed, unless it
        # is taken in that cycle (its chunk then still goes); ``pkt.valid`` is then low for a
        # cycle (settle2) before an ACK/NAK may be offered. (A fault cannot kill the job in
        # the cycle after its load: ``hit`` names only a job loaded before.)
        m.d.sync += [
            idle.eq(idle & ~load | took & nil | sent & (last | kill) | (settle1 | settle2) & kill),
            settle1.eq(sent & ~last & ~kill),
            settle2.eq(settle1 & ~kill | offer & kill & ~self.pkt.ready),
            offer.eq(load | settle2 & ~kill | offer & ~kill & ~self.pkt.ready),
            in_chunk.eq(took & ~nil | in_chunk & ~self.chunk.ready),
        ]
        with m.If(load):
            m.d.sync += [dead.eq(0), first.eq(1), nil.eq(j.len == 0), rem.eq(j.len),
                         addr.eq(j.addr), psn.eq(j.psn), qpn.eq(j.qpn[:ab]), msn.eq(j.msn),
                         pm.eq(j_pm),
                         hi0.eq(j.len[13:] == 0), lo0.eq(j.len[:8] == 0),
                         last.eq(_at_most_pmtu(j.len[13:] == 0, j.len[:8] == 0, j.len[8:13],
                                               j_pm, j_above, j_below))]
        with m.If(hit & ~idle):
            m.d.sync += dead.eq(1)          # (a hit while idle names the job before)
        with m.If(took):
            m.d.sync += first.eq(0)
        with m.If(sent):
            # the next frame (rem > PMTU unless this one was the last)
            m.d.sync += [psn.eq(psn + 1), addr[8:].eq(addr[8:] + pm), rem[8:].eq(rem[8:] - pm)]
