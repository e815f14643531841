"""The host-memory master: one AXI4 master shared by every block that reads or writes host memory.

Clients (WQE fetch, Scatter Path and CQE Generation now; the requester's SQ fetch and gather
later) each get a read or a write client port. The master splits each request into AXI4 INCR
bursts (at 4 KiB boundaries and at the burst limit), arbitrates round-robin between clients on
AR and on AW, bounds the bursts outstanding, and returns read data and write completions to each
client in that client's request order.

Each address channel has one splitter for all its clients: a client's request is held in small
LUT-RAM tables (page, tag, progress) and a four-stage pipeline visits the clients in turn,
one a cycle, each every ``max(clients, 3)`` cycles. In its turn an idle client's ``req`` is
taken (``ready`` is high in that cycle only) or a busy client's next burst is offered to the
channel; the turns are the round robin. A request of one burst (inside its 4 KiB page, at
most the burst limit) is offered in the next cycle already when the channel and the client's
room allow: on an idle master the address leaves two cycles after the request is taken.
Bursts are the longest the request, the 4 KiB page and the burst limit allow, from the
request's first beat on.

ID map
------
Read client ``i`` issues every burst with ``ARID = i``; write client ``j`` with ``AWID = j``
(AXI4 read and write IDs are independent). A client's bursts share one ID, so the slave returns
them in order; bursts of different clients may come back reordered and, for reads, interleaved
beat by beat. ``R``/``B`` beats with an ID that names no client are taken and ignored.

Reads
-----
A burst is issued only when its client's response buffer (``read_buffer`` beats, one figure
for every client or one per client) has room reserved for all of its beats, so ``rready`` is
always 1. Bursts are at most ``max_burst`` beats (default: 256 or the smallest buffer, whichever
is less). A client whose buffer holds several bursts keeps several in flight, which is what
covers the memory's latency: with latency L cycles, a client streams at one beat per cycle
only if its buffer holds about L + ``max_burst`` beats. A client holds at most
``max(8, max_reads)`` bursts in flight and in its buffer together. Every client's buffer is a
region (its size rounded up to a power of two) of one block RAM written by ``R`` and read one
word a cycle, round-robin, into the client's output register; a client that does not take
its beat is not read for, so it holds up no other client. An ``R`` beat that finds its
client's buffer empty and the output register free (or being taken) also goes straight into
that register when no word read from the buffer lands in that cycle (every output register
loads from one shared word): on an idle client a beat is offered the cycle after ``R``, not
three.
The data is **not realigned**: the client receives the raw aligned bus beats covering
``[addr, addr + len_bytes)``; byte ``addr % (W/8)`` of the first beat is the first requested byte,
and the client knows the offset from its own ``addr``. ``last`` marks the last beat of the request;
``err`` is 1 on every beat whose ``RRESP`` was not OKAY.

Writes
------
The client sends the request, then exactly ``ceil((addr % (W/8) + len_bytes) / (W/8))`` data
beats already aligned to the bus (beat ``k`` covers bus word ``addr // (W/8) + k``; the client
sets ``strb`` for unaligned starts and ends). The master sets ``WLAST`` itself at each burst
end (the client's ``last`` is not used). When every ``B`` of the request is back, one ``done``
transfer ``{tag, err}`` follows (``err`` = some ``BRESP`` was not OKAY), in request order.
W beats leave in AW order, so a writer should issue ``req`` only when its data follows: a
writer that is slow to supply data stalls the W channel for every writer.
``bready`` is always 1: a request's last burst is issued only when its ``done`` has room.

Non-OKAY responses
------------------
The master only reports them (``err``); the client knows which QP the access served and raises
event 4 (host-memory fault) and moves the QP to ERROR (interface.md §2).

Lengths: ``len_bytes`` is 1..4096 in this design's use (any 13-bit length works; a request
may cross several 4 KiB pages). ``len_bytes`` = 0 moves one beat: a reader gets one beat, a
writer must send one beat (with ``strb`` = 0 it writes nothing).
"""

import types

from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..parts import add as _add
from ..stream import Queue, check_width

__all__ = ["HostMemory", "AxiSignature", "ReadClientSignature", "WriteClientSignature",
           "req_layout", "read_beat_layout", "write_beat_layout", "done_layout"]

PAGE = 4096
MAX_AXI_BEATS = 256

#: One read or write request of a client.
req_layout = data.StructLayout({
    "addr": 64,
    "len_bytes": 13,     # 1..4096
    "tag": 8,            # the client's own, returned with the data / completion
})

#: A write request's completion: all B responses of the request are back.
done_layout = data.StructLayout({
    "tag": 8,
    "err": 1,
})

_meta_layout = data.StructLayout({"tag": 8, "final": 1})


def read_beat_layout(width):
    """One aligned bus beat returned to a read client."""
    return data.StructLayout({"data": width, "last": 1, "tag": 8, "err": 1})


def write_beat_layout(width):
    """One aligned bus beat sent by a write client."""
    return data.StructLayout({"data": width, "strb": width // 8, "last": 1})


def ReadClientSignature(width):
    """A read client port, as seen by the client (``req`` out, ``resp`` in)."""
    return wiring.Signature({
        "req": Out(stream.Signature(req_layout)),
        "resp": In(stream.Signature(read_beat_layout(width))),
    })


def WriteClientSignature(width):
    """A write client port, as seen by the client (``req`` and ``data`` out, ``done`` in)."""
    return wiring.Signature({
        "req": Out(stream.Signature(req_layout)),
        "data": Out(stream.Signature(write_beat_layout(width))),
        "done": In(stream.Signature(done_layout)),
    })


def AxiSignature(width):
    """AXI4 master signals, as seen by the master. Member ``<ch>_<sig>`` is Verilog
    ``m_axi_<ch><sig>`` (``aw_id`` → ``m_axi_awid``)."""
    return wiring.Signature({
        "aw_id": Out(8), "aw_addr": Out(64), "aw_len": Out(8), "aw_size": Out(3),
        "aw_burst": Out(2), "aw_valid": Out(1), "aw_ready": In(1),
        "w_data": Out(width), "w_strb": Out(width // 8), "w_last": Out(1),
        "w_valid": Out(1), "w_ready": In(1),
        "b_id": In(8), "b_resp": In(2), "b_valid": In(1), "b_ready": Out(1),
        "ar_id": Out(8), "ar_addr": Out(64), "ar_len": Out(8), "ar_size": Out(3),
        "ar_burst": Out(2), "ar_valid": Out(1), "ar_ready": In(1),
        "r_id": In(8), "r_data": In(width), "r_resp": In(2), "r_last": In(1),
        "r_valid": In(1), "r_ready": Out(1),
    })


def _round_robin(m, valids, last, name):
    """Combinational round-robin pick: the first valid after ``last`` (wrapping)."""
    n = len(valids)
    grant = Signal(range(max(n, 2)), name=f"{name}_grant")
    with m.Switch(last):
        for prev in range(n):
            with m.Case(prev):
                order = [(prev + 1 + k) % n for k in range(n)]
                for idx in reversed(order):        # later assignments win: order[0] first
                    with m.If(valids[idx]):
                        m.d.comb += grant.eq(idx)
    return grant


class _Splitter:
    """The burst splitter and round-robin arbiter of one address channel, shared by its clients.

    Each client's request lives in three small LUT-RAM tables indexed by client: its 4 KiB page
    (address bits 63..12), its tag, and its progress {beat offset from the start of the first
    page (0..3 pages: a request is at most 8191 bytes), beats left - 1}. One four-stage
    pipeline visits the clients in turn, one client per cycle, each every ``P = max(clients,
    3)`` cycles:

    * S0 reads the client's progress; the beats to its page end - 1 are the offset's complement;
    * S1 takes the next burst: ``min(beats left, beats to the page end, burst limit)`` (kept
      as ``bm1``, beats - 1) and whether it is the request's last, and asks the caller's
      reservation test (``pre_client``/``pre_final``/``pre_lm1``/``pre_em1`` in, ``ok`` out
      in the same cycle), registered into S2;
    * S2 either accepts a new request (an idle client: ``ready`` is high in this one cycle; its
      page, tag and first progress are written into the tables from the request bus, its
      beats - 1 and beat offset registered for S3) or fires the burst (``cand`` and the
      registered ``ok``) when the channel register is free: the register is loaded with
      {page + pages crossed, offset} (the channel's one 52-bit adder) and the burst's
      progress is written back. Every write lands before the client's next S0 (``P`` is at
      least 3), so no table read needs a bypass;
    * S3 holds the request just accepted. A request of one burst fires from S3 (``s3_gone``:
      the caller's second test, ``f_client``/``f_lm1`` in, ``ok3`` out, on the current
      state) when the register is free and S2 offers no burst (the page and tag tables are
      then read at S3's row, so one read of them serves both ways of firing); its client is
      idle again at its next turn (S0 then takes ``active`` from the fire: a bypass).

    A stale ``ok`` never fires: its inputs change between S1 and S2 only by a fire of another
    client, after which the channel register is busy for a cycle. The turns are the
    round robin; a client that cannot reserve (a reader whose buffer is full) lets its turn
    pass. Every handshake signal towards a client (``ready``) and every table write enable is
    decoded from pipeline registers: a client's ``valid`` reaches only its ``active`` flag,
    its payload only the tables' write data and S3's registers (20 bits). The fire reaches
    the channel register's ``valid``, the ``active`` flags and the burst registered for the
    caller (``p_fire``, ``p_grant``, ``p_bm1``, ``p_final``, ``p_tag``), from which the
    caller updates its per-client records a cycle later; the channel register's payload is
    loaded whenever it is free and a burst is on offer.
    """

    def __init__(self, m, name, reqs, lb, max_beats):
        """Build, into ``m``, the splitter of channel ``name`` (``ar`` or ``aw``) for the client
        request streams ``reqs``: ``lb`` is log2 of the bus width in bytes, ``max_beats`` the
        burst limit. Its parts are the methods below, in pipeline order."""
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        n = len(reqs)
        nb = max(n, 2)
        P = max(n, 3)
        pb = PAGE >> lb                 # beats in a page
        ow = 12 - lb                    # width of the beat offset inside a page
        lim_max = min(pb, max_beats)
        lw = range((2 * PAGE >> lb) + 2)
        lwb = Shape.cast(lw).width
        t = types.SimpleNamespace(name=name, n=n, nb=nb, P=P, pb=pb, ow=ow, lim_max=lim_max,
                                  lw=lw, lwb=lwb, lb=lb, max_beats=max_beats)
        self._interface(t)
        _add(t, self._tables(m, t))
        _add(t, self._stage0(m, t))
        _add(t, self._stage1(m, t))
        _add(t, self._stage2(m, t, reqs))
        _add(t, self._stage3(m, t))
        self._fire(m, t)

    def _interface(self, t):
        """The splitter's signals towards its caller, as attributes: the burst S1 is taking and
        the request S3 holds, for the caller's reservation tests (``ok``, ``ok3`` in, answered
        in the same cycle), the channel's ``handshake`` (in), the burst fired this cycle
        (``fire``, ``grant``, ``bm1``, ``final``, ``g_tag``) and the address-channel register
        (``valid``, ``client``, ``addr``, ``len``) the caller drives the channel from."""
        name, nb, ow, lim_max, lw = t.name, t.nb, t.ow, t.lim_max, t.lw
        # the burst S1 is taking, for the caller's reservation test (``ok``, answered in
        # the same cycle and registered: a fire in S2 needs no comparison)
        self.pre_client = Signal(range(nb), name=f"{name}_pre_client")
        self.pre_final = Signal(name=f"{name}_pre_final")
        self.pre_lm1 = Signal(lw, name=f"{name}_pre_lm1")      # beats left - 1
        self.pre_em1 = Signal(ow, name=f"{name}_pre_em1")      # beats to the page end - 1
        self.ok = Signal(name=f"{name}_ok")                                       # in
        # the request S3 holds, just accepted, for the caller's second reservation test (a
        # request of one burst fires from S3 when it passes: ``ok3`` in, the same cycle)
        self.f_client = Signal(range(nb), name=f"{name}_f_client")
        self.f_lm1 = Signal(lw, name=f"{name}_f_lm1")          # its beats - 1
        self.ok3 = Signal(name=f"{name}_ok3")                                     # in
        self.handshake = Signal(name=f"{name}_hs")                                # in
        self.cand = Signal(name=f"{name}_cand")
        self.fire = Signal(name=f"{name}_fire")
        self.grant = Signal(range(nb), name=f"{name}_grant")
        # the burst fired this cycle (with ``fire``): its client, beats - 1, last of its request,
        # tag
        self.bm1 = Signal(range(lim_max), name=f"{name}_bm1")
        self.final = Signal(name=f"{name}_final")
        self.g_tag = Signal(8, name=f"{name}_g_tag")
        # the address-channel register
        self.valid = Signal(name=f"{name}_valid")
        self.client = Signal(range(nb), name=f"{name}_client")
        self.addr = Signal(64, name=f"{name}_addr")
        self.len = Signal(8, name=f"{name}_len")

    def _tables(self, m, t):
        """The three tables indexed by client (``prog``: beat offset and beats left - 1,
        ``pages``: the 4 KiB page, ``tags``), in LUT RAM with asynchronous reads, and the
        clients' ``active`` flags (a request is held) and S3's client ``s3_c``. Adds the tables'
        ports, ``active`` and ``s3_c``."""
        name, n, nb, ow, lwb = t.name, t.n, t.nb, t.ow, t.lwb
        # {beat offset from the start of the request's first page (0..3 pages), beats left
        # - 1}: counts minus one, so that the beats to the page end are the offset's complement
        # and the burst's AXI length needs no subtraction
        prog = Memory(shape=ow + 2 + lwb, depth=n, init=[])
        pages = Memory(shape=52, depth=n, init=[])
        tags = Memory(shape=8, depth=n, init=[])
        m.submodules[f"{name}_prog"] = prog
        m.submodules[f"{name}_pages"] = pages
        m.submodules[f"{name}_tags"] = tags
        prog_r, prog_w = prog.read_port(domain="comb"), prog.write_port()
        page_r, page_w = pages.read_port(domain="comb"), pages.write_port()
        tag_r, tag_w = tags.read_port(domain="comb"), tags.write_port()
        active = Signal(n, name=f"{name}_active")              # holds a request
        s3_c = Signal(range(nb), name=f"{name}_s3_c")
        return types.SimpleNamespace(prog_r=prog_r, prog_w=prog_w, page_r=page_r,
                                     page_w=page_w, tag_r=tag_r, tag_w=tag_w, active=active,
                                     s3_c=s3_c)

    def _stage0(self, m, t):
        """S0: the turn's client (``slot``, one a cycle, each every ``P`` cycles) and its
        progress, read from the table, registered into S1; the beats to the page end - 1 are
        the offset's complement. The tables are written in S2, before the client's next S0; its
        ``active`` bit, cleared by a fire from S3 in the cycle of that S0 when ``P`` is 3, is
        taken from the fire then (a bypass). Adds ``slot``, ``s3_gone`` and S1's registers."""
        name, n, nb, P, ow, lw = t.name, t.n, t.nb, t.P, t.ow, t.lw
        prog_r, active, s3_c = t.prog_r, t.active, t.s3_c
        # S0: the client of this turn
        slot = Signal(range(P), name=f"{name}_slot")
        m.d.sync += slot.eq(Mux(slot == P - 1, 0, slot + 1))
        m.d.comb += prog_r.addr.eq(slot)
        off0, lm1_0 = prog_r.data[:ow + 2], prog_r.data[ow + 2:]
        s1_v = Signal(name=f"{name}_s1_v")
        s1_c = Signal(range(nb), name=f"{name}_s1_c")
        s1_acc = Signal(name=f"{name}_s1_acc")
        s1_off = Signal(ow + 2, name=f"{name}_s1_off")
        s1_lm1 = Signal(lw, name=f"{name}_s1_lm1")
        s1_em1 = ~s1_off[:ow]                               # beats to the page end - 1
        s3_gone = Signal(name=f"{name}_s3_gone")     # S3 fires its request whole (below)
        m.d.sync += [s1_v.eq(slot < n), s1_c.eq(slot), s1_acc.eq(~active.bit_select(slot, 1) | (s3_gone & (s3_c == slot))),
                     s1_off.eq(off0), s1_lm1.eq(lm1_0)]
        return types.SimpleNamespace(slot=slot, s1_v=s1_v, s1_c=s1_c, s1_acc=s1_acc,
                                     s1_off=s1_off, s1_lm1=s1_lm1, s1_em1=s1_em1,
                                     s3_gone=s3_gone)

    def _stage1(self, m, t):
        """S1: the client's next burst, the longest its request, its page and the burst limit
        allow (``bm1``, beats - 1), and whether it is the request's last; the caller's
        reservation test answers for it in this cycle (``ok``), registered into S2 with the
        burst, so a fire in S2 needs no comparison. Adds S2's registers and ``ok_r``."""
        name, nb, ow, lw, pb, lim_max, max_beats = (t.name, t.nb, t.ow, t.lw, t.pb, t.lim_max,
                                                    t.max_beats)
        s1_v, s1_c, s1_acc, s1_off, s1_lm1, s1_em1 = (t.s1_v, t.s1_c, t.s1_acc, t.s1_off,
                                                      t.s1_lm1, t.s1_em1)
        # S1: the next burst
        s2_v = Signal(name=f"{name}_s2_v")
        s2_c = Signal(range(nb), name=f"{name}_s2_c")
        s2_acc = Signal(name=f"{name}_s2_acc")
        s2_off = Signal(ow + 2, name=f"{name}_s2_off")
        s2_lm1 = Signal(lw, name=f"{name}_s2_lm1")
        in_page = s1_lm1 <= s1_em1
        if max_beats >= pb:
            final = in_page
            bm1 = Mux(in_page, s1_lm1, s1_em1)
        else:
            final = in_page & (s1_lm1 < max_beats)
            bm1 = Mux(final, s1_lm1, Mux(s1_em1 < max_beats, s1_em1, max_beats - 1))
        ok_r = Signal(name=f"{name}_ok_r")
        s2_bm1 = Signal(range(lim_max), name=f"{name}_s2_bm1")
        s2_final = Signal(name=f"{name}_s2_final")
        m.d.comb += [self.pre_client.eq(s1_c), self.pre_final.eq(final),
                     self.pre_lm1.eq(s1_lm1), self.pre_em1.eq(s1_em1)]
        m.d.sync += [s2_v.eq(s1_v), s2_c.eq(s1_c), s2_acc.eq(s1_acc), s2_off.eq(s1_off),
                     s2_lm1.eq(s1_lm1), s2_bm1.eq(bm1), s2_final.eq(final),
                     ok_r.eq(self.ok)]
        return types.SimpleNamespace(s2_v=s2_v, s2_c=s2_c, s2_acc=s2_acc, s2_off=s2_off,
                                     s2_lm1=s2_lm1, ok_r=ok_r, s2_bm1=s2_bm1, s2_final=s2_final)

    def _stage2(self, m, t, reqs):
        """S2: an idle client's request is accepted (``acc``: its ``ready`` is high in this one
        cycle, its page and tag written, the rest sampled for S3), or a busy client's burst is offered (``cand``) and
        fires (``fire2``) when the reservation passed and the channel register is free. Adds
        ``acc``, ``fire2``, the request ``req``/``req_valid`` and the burst's beats - 1 widened
        for S3's adders (``bm1_ow``, ``bm1_lw``)."""
        name, ow, lwb = t.name, t.ow, t.lwb
        s2_v, s2_c, s2_acc, s2_bm1, ok_r = t.s2_v, t.s2_c, t.s2_acc, t.s2_bm1, t.ok_r
        # S2: accept a request or offer the burst
        acc = Signal(name=f"{name}_acc")
        fire2 = Signal(name=f"{name}_fire2")
        m.d.comb += [acc.eq(s2_v & s2_acc), self.cand.eq(s2_v & ~s2_acc),
                     fire2.eq(self.cand & ok_r & ~self.valid)]
        req = Signal(req_layout, name=f"{name}_req")
        req_valid = Signal(name=f"{name}_req_valid")
        with m.Switch(s2_c):
            for i, r in enumerate(reqs):
                with m.Case(i):
                    m.d.comb += [req.eq(r.payload), req_valid.eq(r.valid), r.ready.eq(acc)]
        bm1_ow = Cat(s2_bm1, Const(0, ow + 2 - len(s2_bm1)))
        bm1_lw = Cat(s2_bm1, Const(0, lwb - len(s2_bm1)))
        return types.SimpleNamespace(acc=acc, fire2=fire2, req=req, req_valid=req_valid,
                                     bm1_ow=bm1_ow, bm1_lw=bm1_lw)

    def _stage3(self, m, t):
        """The tables' writes, in S2's cycle: an accepted request's page, tag and first
        progress from the request bus (its beats - 1, ``lm1``, by one 14-bit adder behind the
        client select), or a fired burst's progress from S2's registers; and S3, which holds
        an accepted request's beats - 1 and offset for its fire from S3. A client's next S0 is
        ``P`` (at least 3) cycles after its S0, after these writes. Adds ``s3_reqv`` (S2 took a
        request), ``s3_off`` (its beat offset in its page) and ``lm1`` (its beats - 1)."""
        name, ow, lw, lwb, lb = t.name, t.ow, t.lw, t.lwb, t.lb
        acc, req_valid, fire2, req, s2_c, s2_off, s2_lm1 = (t.acc, t.req_valid, t.fire2, t.req,
                                                            t.s2_c, t.s2_off, t.s2_lm1)
        bm1_ow, bm1_lw, s3_c = t.bm1_ow, t.bm1_lw, t.s3_c
        prog_w, page_w, tag_w, page_r, tag_r = t.prog_w, t.page_w, t.tag_w, t.page_r, t.tag_r
        # beats of the request - 1: (addr % B + len - 1) // B, one 14-bit adder (the -1 goes
        # into the small operand: addr % B - 1, all ones when addr % B is 0); len_bytes 0
        # moves one beat
        a = req.addr[:lb]
        lm1_2 = Signal(lw, name=f"{name}_lm1_2")
        m.d.comb += lm1_2.eq(Mux(req.len_bytes == 0, 0,
                                 (req.len_bytes + Cat((a - 1)[:lb],
                                                      (a == 0).replicate(14 - lb)))[lb:14]))
        # inside its first page (addr % 4096 + len <= 4096; a request of length 0 moves one
        # beat): its own adder, beside lm1's, so S3's fire test reads a register
        a_end = Signal(14, name=f"{name}_a_end")
        m.d.comb += a_end.eq(req.addr[:12] + req.len_bytes)
        s3_reqv = Signal(name=f"{name}_s3_reqv")      # S2 took a request
        s3_inpage = Signal(name=f"{name}_s3_inpage")
        s3_off = Signal(ow, name=f"{name}_s3_off")
        lm1 = Signal(lw, name=f"{name}_lm1")
        m.d.sync += [s3_reqv.eq(acc & req_valid), s3_c.eq(s2_c), s3_off.eq(req.addr[lb:12]),
                     lm1.eq(lm1_2),
                     s3_inpage.eq(~a_end[13] & (~a_end[12] | (a_end[:12] == 0)))]
        # page and tag: read for S2's burst, else for S3's request (which fires from S3 only
        # when S2 offers no burst). The tables of an idle client are written in its accept
        # turn whether or not a request is there (nothing reads them before it is active).
        rsel = Mux(self.cand, s2_c, s3_c)
        m.d.comb += [
            prog_w.addr.eq(s2_c), page_w.addr.eq(s2_c), tag_w.addr.eq(s2_c),
            page_r.addr.eq(rsel), tag_r.addr.eq(rsel),
            prog_w.en.eq(acc | fire2),
            # after a burst: offset + bm1 + 1 and beats left - 1 - (bm1 + 1), one adder each
            prog_w.data.eq(Mux(acc, Cat(req.addr[lb:12], Const(0, 2), lm1_2),
                               Cat((s2_off - ~bm1_ow)[:ow + 2], (s2_lm1 + ~bm1_lw)[:lwb]))),
            page_w.en.eq(acc), page_w.data.eq(req.addr[12:]),
            tag_w.en.eq(acc), tag_w.data.eq(req.tag),
        ]
        return types.SimpleNamespace(s3_reqv=s3_reqv, s3_inpage=s3_inpage, s3_off=s3_off, lm1=lm1)

    def _fire(self, m, t):
        """The burst that fires and the address-channel register: S2's burst, or an accepted
        request of one burst straight from S3 (``s3_gone``, when the caller's second test
        passes, the register is free and S2 offers no burst), which saves the request its wait
        for its next turn; the clients' ``active`` flags; and the register, loaded with the
        fired burst's client, address and length and freed by the channel's handshake."""
        lb, ow, max_beats, active = t.lb, t.ow, t.max_beats, t.active
        s2_c, s2_off, s2_bm1, s2_final, acc, req_valid, fire2 = (
            t.s2_c, t.s2_off, t.s2_bm1, t.s2_final, t.acc, t.req_valid, t.fire2)
        s3_c, s3_off, s3_reqv, s3_gone, lm1, page_r, tag_r = (
            t.s3_c, t.s3_off, t.s3_reqv, t.s3_gone, t.lm1, t.page_r, t.tag_r)
        # A request of one burst (inside its page, at most the burst limit) fires from S3, the
        # cycle after it was accepted, when the channel register is free, S2 offers no burst
        # (the page and tag tables are read for S3 then) and the caller's test passes
        # (``ok3``, on the current state: the last fire, of another client, is already
        # counted): its client is then idle again for its next turn (the S0 bypass
        # ``s3_gone``). Otherwise it waits for its turn as any request.
        # (a cycle after its accept, S3's client neither fired nor was asked for in S1)
        one = t.s3_inpage & (lm1 < max_beats)
        cand = self.cand
        m.d.comb += [self.f_client.eq(s3_c), self.f_lm1.eq(lm1),
                     s3_gone.eq(s3_reqv & one & self.ok3 & ~self.valid & ~cand),
                     self.fire.eq(fire2 | s3_gone),
                     # S2's burst when S2 offers one, else S3's request (``cand`` is decoded
                     # from registers: these selects wait for no test)
                     self.grant.eq(Mux(cand, s2_c, s3_c)),
                     self.bm1.eq(Mux(cand, s2_bm1, lm1)),
                     self.final.eq(~cand | s2_final),
                     self.g_tag.eq(tag_r.data)]
        with m.If(acc & req_valid):
            m.d.sync += active.bit_select(s2_c, 1).eq(1)
        with m.If(fire2 & s2_final):
            m.d.sync += active.bit_select(s2_c, 1).eq(0)
        with m.If(s3_gone):
            m.d.sync += active.bit_select(s3_c, 1).eq(0)

        # the page is read at the firing client's row either way: S3's request is in its first
        # page, S2's burst adds the pages crossed
        # (loaded in every cycle it is free and a burst is on offer, with the burst that would
        # fire: its enable is decoded from registers, not from the fire decision; only
        # ``valid`` waits for ``fire``)
        with m.If(~self.valid):
            m.d.sync += self.valid.eq(self.fire)
            with m.If(cand | s3_reqv):
                m.d.sync += [self.client.eq(self.grant), self.len.eq(self.bm1),
                             self.addr.eq(Cat(Const(0, lb), Mux(cand, s2_off[:ow], s3_off),
                                              page_r.data
                                              + (s2_off[ow:] & cand.replicate(2))))]
        with m.Elif(self.handshake):
            m.d.sync += self.valid.eq(0)

        # the burst fired in the last cycle (``p_*``): the callers' per-client records and
        # counts are updated from these registers, so the fire decision reaches one register
        # each, not every client's FIFO pointers
        self.p_fire = Signal(name=f"{t.name}_p_fire")
        self.p_grant = Signal.like(self.grant, name=f"{t.name}_p_grant")
        self.p_bm1 = Signal.like(self.bm1, name=f"{t.name}_p_bm1")
        self.p_final = Signal(name=f"{t.name}_p_final")
        self.p_tag = Signal(8, name=f"{t.name}_p_tag")
        m.d.sync += [self.p_fire.eq(self.fire), self.p_grant.eq(self.grant),
                     self.p_bm1.eq(self.bm1), self.p_final.eq(self.final),
                     self.p_tag.eq(self.g_tag)]


class HostMemory(wiring.Component):
    """AXI4 host-memory master shared by ``read_clients`` readers and ``write_clients`` writers.

    See the module docstring for the ID map, ordering and error rules.

    Parameters
    ----------
    width : int
        Data width W (64, 128, 256, 512); ``AxSIZE`` is always log2(W/8).
    read_clients : int
        Number of read client ports (0..256).
    write_clients : int
        Number of write client ports (0..256).
    max_reads : int
        Read bursts outstanding at most (AR issued, last R beat not yet back).
    max_writes : int
        Write bursts outstanding at most (AW issued, B not yet back).
    read_buffer : int or sequence of int
        Response buffer per read client, in beats: one figure for every client, or one per
        client (``read_clients`` of them). Each must hold at least ``max_burst`` beats.
    max_burst : int or None
        Read burst length limit in beats (1..256); ``None``: ``min(256, smallest buffer)``.
    done_depth : int
        Completion buffer per write client.

    Attributes
    ----------
    axi : Out(AxiSignature(width))
        AXI4 master; ``axi.aw_id`` is Verilog ``m_axi_awid``, and so on.
    read_<i> : In(ReadClientSignature(width))
        Read client ``i``: ``req`` {addr 64, len_bytes 13, tag 8} in, ``resp`` beats
        {data W, last, tag 8, err} out, in request order.
    write_<j> : In(WriteClientSignature(width))
        Write client ``j``: ``req`` in, ``data`` beats {data W, strb W/8, last} in,
        ``done`` {tag 8, err} out, in request order.

    The lists ``read_ports`` and ``write_ports`` hold the same client interfaces by index.
    """

    def __init__(self, *, width=64, read_clients=1, write_clients=1, max_reads=4, max_writes=4,
                 read_buffer=64, max_burst=None, done_depth=2):
        check_width(width)
        for name, v, lo, hi in (("read_clients", read_clients, 0, 256),
                                ("write_clients", write_clients, 0, 256),
                                ("max_reads", max_reads, 1, 256),
                                ("max_writes", max_writes, 1, 256),
                                ("done_depth", done_depth, 1, 256)):
            if not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an integer in {lo}..{hi}, not {v!r}")
        bufs = [read_buffer] * read_clients if isinstance(read_buffer, int) else list(read_buffer)
        if len(bufs) != read_clients:
            raise ValueError(f"read_buffer has {len(bufs)} figures for {read_clients} read "
                             f"clients")
        for v in bufs:
            if not isinstance(v, int) or not 1 <= v <= 1 << 16:
                raise ValueError(f"read_buffer must be integers in 1..65536, not {v!r}")
        if max_burst is None:
            max_burst = min([MAX_AXI_BEATS] + bufs)
        if not isinstance(max_burst, int) or not 1 <= max_burst <= MAX_AXI_BEATS:
            raise ValueError(f"max_burst must be an integer in 1..{MAX_AXI_BEATS}, "
                             f"not {max_burst!r}")
        if bufs and max_burst > min(bufs):
            raise ValueError(f"max_burst ({max_burst}) exceeds the smallest read_buffer "
                             f"({min(bufs)}): such a client's bursts could never issue")
        self.width = width
        self.read_clients = read_clients
        self.write_clients = write_clients
        self.max_reads = max_reads
        self.max_writes = max_writes
        self.read_buffer = bufs
        self.max_burst = max_burst
        self.done_depth = done_depth
        members = {"axi": Out(AxiSignature(width))}
        for i in range(read_clients):
            members[f"read_{i}"] = In(ReadClientSignature(width))
        for j in range(write_clients):
            members[f"write_{j}"] = In(WriteClientSignature(width))
        super().__init__(members)
        self.read_ports = [getattr(self, f"read_{i}") for i in range(read_clients)]
        self.write_ports = [getattr(self, f"write_{j}") for j in range(write_clients)]

    def elaborate(self, platform):
        m = Module()
        W = self.width
        lb = (W // 8).bit_length() - 1
        axi = self.axi
        m.d.comb += [
            axi.aw_size.eq(lb), axi.ar_size.eq(lb),
            axi.aw_burst.eq(1), axi.ar_burst.eq(1),      # INCR
            axi.r_ready.eq(1), axi.b_ready.eq(1),
        ]
        self._elaborate_reads(m, lb)
        self._elaborate_writes(m, lb)
        return m

    def _elaborate_reads(self, m, lb):
        """The read side: the response buffers (:meth:`_read_buffer`), the AR splitter and the
        reservation tests it asks (:meth:`_read_reservation`), each client's buffer pointers,
        credit and output register (:meth:`_read_client`), and the buffer's one read port
        shared round-robin between the clients and the AR channel (:meth:`_read_issue`).
        Nothing when there is no read client."""
        R = self.read_clients
        if R == 0:
            return
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace(R=R, W=self.width, lb=lb, bufs=self.read_buffer)
        _add(t, self._read_buffer(m, t))
        _add(t, self._read_reservation(m, t))
        for i, port in enumerate(self.read_ports):
            self._read_client(m, t, i, port)
        self._read_issue(m, t)

    def _read_buffer(self, m, t):
        """The one block RAM that holds every read client's response buffer, a region of it
        per client, and ``region(i, ptr)``, the RAM address of client ``i``'s word ``ptr``.
        Adds the RAM's write and read ports (``wp``, ``rp``), ``kbits`` (each region's
        address width) and ``region``."""
        R, W, bufs = t.R, t.W, t.bufs
        # One block RAM holds every client's response buffer: client i owns a region of
        # read_buffer[i] beats rounded up to a power of two (its credit is the exact figure).
        # Largest first, every region sits at a base aligned to its size, so a region address
        # is the base bits and the pointer, and pointers are plain counters with one bit
        # more than the region's address (the wrap phase).
        kbits = [(b - 1).bit_length() for b in bufs]
        base, top = [0] * R, 0
        for i in sorted(range(R), key=lambda i: -bufs[i]):
            base[i], top = top, top + (1 << kbits[i])
        aw = max(top - 1, 1).bit_length()
        # A read never meets a write of the same word (a word is read only once the region's
        # write pointer is past it), so the block RAM needs no read-during-write logic (yosys
        # would emulate it with a register on every write data bit).
        m.submodules.rbuf = rbuf = Memory(shape=W + 2, depth=top, init=[],
                                          attrs={"no_rw_check": 1})
        wp = rbuf.write_port()
        rp = rbuf.read_port(transparent_for=())

        def region(i, ptr):
            k = kbits[i]
            return Cat(ptr[:k], Const(base[i] >> k, aw - k))

        return types.SimpleNamespace(wp=wp, rp=rp, kbits=kbits, region=region)

    def _read_reservation(self, m, t):
        """The AR splitter (``sp``) and the reservation tests it asks: a burst is issued only
        when its client's buffer has room reserved for all of its beats (the client's
        ``credit``), its per-burst records have room, and fewer than ``max_reads`` bursts are
        out, so ``rready`` is always 1. Also makes the signals the clients and the read issue
        share. Adds ``sp``, ``outstanding``, ``retire``, the read issue's ``pend``,
        ``pend_client``, ``rd_last``, ``rd_sel``, ``hold``, their per-client lists ``wants``,
        ``raddrs``, ``lands``, the record depth ``mdepth`` and the tests' inputs (``g_*``,
        ``f_*``)."""
        R, lb, bufs = t.R, t.lb, t.bufs
        sp = _Splitter(m, "ar", [p.req for p in self.read_ports], lb, self.max_burst)
        outstanding = Signal(range(self.max_reads + 1), name="reads_outstanding")
        retire = Signal()
        # the read issued in the last cycle, or held since: its word is on the RAM's output now
        pend = Signal(name="rd_pend")
        pend_client = Signal(range(max(R, 2)), name="rd_pend_client")
        rd_last = Signal(range(max(R, 2)), name="rd_last")
        wants, raddrs = [], []
        rd_sel = Signal(range(max(R, 2)), name="rd_sel")
        mdepth = max(8, self.max_reads)
        # the pending word's client holds its beat and no client reads: the word stays on the
        # RAM's output (read enable low) and lands when the beat is taken, so a client that
        # stalls loses no cycle when it resumes
        hold = Signal(name="rd_hold")
        lands = []
        # the one word every output register loads from: the RAM's word when it lands for some
        # client, else the R beat (an R beat goes straight to its client only when no word
        # lands), so each client's register only chooses whether to load
        land_any = Signal(name="rd_land_any")
        o_src = Signal(t.W + 2, name="ro_src")
        # the reservation test of the burst in S1 (registered into S2). Its inputs can change
        # before S2 only by a fire in S2 of another client, and after a fire the channel
        # register is busy in the next cycle, so a stale answer never fires; this client's
        # own credit only grows in the meantime. credit > min(l, e, m) - 1 is tested as
        # credit > l or credit > e or credit >= m, three comparisons side by side.
        g_credit = Signal(range(max(bufs) + 1), name="rd_g_credit")
        g_room = Signal(name="rd_g_room")
        fits = (g_credit > sp.pre_lm1) | (g_credit > sp.pre_em1)
        if self.max_burst < (PAGE >> lb):
            fits |= g_credit >= self.max_burst
        m.d.comb += sp.ok.eq(fits & g_room & (outstanding < self.max_reads))
        # and of the one-burst request in S3 (current credit: this client did not fire in the
        # last two cycles, so its credit has no reservation still to take)
        f_credit = Signal(range(max(bufs) + 1), name="rd_f_credit")
        f_room = Signal(name="rd_f_room")
        m.d.comb += sp.ok3.eq((f_credit > sp.f_lm1) & f_room & (outstanding < self.max_reads))
        return types.SimpleNamespace(
            sp=sp, outstanding=outstanding, retire=retire, pend=pend, pend_client=pend_client,
            rd_last=rd_last, wants=wants, raddrs=raddrs, rd_sel=rd_sel, mdepth=mdepth, hold=hold,
            lands=lands, land_any=land_any, o_src=o_src, g_credit=g_credit, g_room=g_room, f_credit=f_credit, f_room=f_room)

    def _read_client(self, m, t, i, port):
        """Read client ``i`` (``port``): its per-burst records {tag, final}, its credit (the
        buffer's free words not yet reserved), its region's write pointer (written by the
        ``R`` beats with ID ``i``) and read pointer, and its output register, loaded from the
        word read for it, or straight from ``R`` when the buffer is empty, so an idle client
        sees a beat the cycle after ``R``. Appends its read request to ``wants``, ``raddrs``
        and ``lands``."""
        W, bufs, kbits, wp, rp, region = t.W, t.bufs, t.kbits, t.wp, t.rp, t.region
        sp, retire, pend, pend_client, hold, rd_sel, mdepth = (
            t.sp, t.retire, t.pend, t.pend_client, t.hold, t.rd_sel, t.mdepth)
        wants, raddrs, lands, land_any, o_src = t.wants, t.raddrs, t.lands, t.land_any, t.o_src
        g_credit, g_room, f_credit, f_room = t.g_credit, t.g_room, t.f_credit, t.f_room
        axi = self.axi
        size = bufs[i]
        # per burst {tag, final}, from the grant until the client has taken its last beat
        meta = Queue(_meta_layout, mdepth, buffered=False)
        m.submodules[f"rmeta_{i}"] = meta
        credit = Signal(range(size + 1), init=size, name=f"rcredit_{i}")
        wptr = Signal(kbits[i] + 1, name=f"rwptr_{i}")      # the next word to write
        iptr = Signal(kbits[i] + 1, name=f"riptr_{i}")      # the next word to read
        o_valid = Signal(name=f"ro_valid_{i}")
        o_word = Signal(W + 2, name=f"ro_word_{i}")          # {data, burst end, err}
        hit = axi.r_valid & (axi.r_id == i)
        with m.If(hit):
            m.d.comb += [wp.en.eq(1), wp.addr.eq(region(i, wptr)), retire.eq(axi.r_last)]
            m.d.sync += wptr.eq(wptr + 1)
        taken = o_valid & port.resp.ready
        # the word read in the last cycle lands in the output register if that is free or
        # being taken; else it is held on the RAM's output (``hold``) or, when another read
        # is issued, dropped and read again (the issue pointer goes back one)
        mine_rd = pend & (pend_client == i)
        land = Signal(name=f"rland_{i}")
        m.d.comb += land.eq(mine_rd & (~o_valid | port.resp.ready))
        lands.append(land)
        # an R beat that finds the buffer empty (every word written read, none in flight)
        # and the output register free or being taken goes straight into that register when
        # no word read lands in this cycle; it is written into the buffer all the same, and
        # counted read (else it is read from the buffer as any word)
        direct = Signal(name=f"rdirect_{i}")
        m.d.comb += direct.eq(hit & (iptr == wptr) & ~mine_rd & ~land_any
                              & (~o_valid | port.resp.ready))
        with m.If(land | direct):
            m.d.sync += [o_word.eq(o_src), o_valid.eq(1)]
        with m.Elif(taken):
            m.d.sync += o_valid.eq(0)
        # read a word when there is one not yet read and the output register is free or
        # being taken (a client that holds its beat is not read for, so a drop and an
        # issue of the same client never meet)
        want = Signal(name=f"rwant_{i}")
        m.d.comb += want.eq((iptr != wptr) & (~o_valid | port.resp.ready))
        wants.append(want)
        raddrs.append(region(i, iptr))
        back = mine_rd & ~land & ~hold
        with m.If(back | (want & (rd_sel == i)) | direct):
            m.d.sync += iptr.eq(iptr + Cat(Const(1, 1), back.replicate(len(iptr) - 1)))
        m.d.comb += [
            port.resp.valid.eq(o_valid),
            port.resp.payload.data.eq(o_word[:W]),
            port.resp.payload.err.eq(o_word[W + 1]),
            port.resp.payload.tag.eq(meta.o.payload.tag),
            port.resp.payload.last.eq(o_word[W] & meta.o.payload.final),
            meta.o.ready.eq(taken & o_word[W]),
        ]
        # the burst fired in the last cycle, if this client's (its records and credit are
        # updated a cycle after the fire; this client's next test is at least two cycles on)
        mine = sp.p_fire & (sp.p_grant == i)
        m.d.comb += [
            meta.i.valid.eq(mine),
            meta.i.payload.tag.eq(sp.p_tag),
            meta.i.payload.final.eq(sp.p_final),
        ]
        with m.If(sp.pre_client == i):
            m.d.comb += [g_credit.eq(credit), g_room.eq(meta.i.ready)]
        with m.If(sp.f_client == i):
            m.d.comb += [f_credit.eq(credit), f_room.eq(meta.i.ready)]
        # the reservation is taken from the credit a cycle after the fire (this client's
        # next turn is three cycles away)
        neg = ~Cat(sp.p_bm1, Const(0, len(credit) - len(sp.p_bm1)))    # -(bm1 + 1)
        m.d.sync += credit.eq(credit + Mux(mine, neg, 0) + taken)

    def _read_issue(self, m, t):
        """The read buffer's write data (every ``R`` beat, with its burst end and error), its
        one read port, given each cycle round-robin to a client that wants a word (``rd_sel``)
        and held while the word read waits for its client (``hold``), the AR channel from the
        splitter's register, and the count of bursts out."""
        R, wp, rp, sp, outstanding, retire = t.R, t.wp, t.rp, t.sp, t.outstanding, t.retire
        pend, pend_client, rd_last, rd_sel, hold = (t.pend, t.pend_client, t.rd_last, t.rd_sel,
                                                    t.hold)
        wants, raddrs, lands = t.wants, t.raddrs, t.lands
        axi = self.axi
        m.d.comb += wp.data.eq(Cat(axi.r_data, axi.r_last, axi.r_resp != 0))
        m.d.comb += rd_sel.eq(_round_robin(m, wants, rd_last, "rd"))
        m.d.comb += [t.land_any.eq(Cat(*lands).any()),
                     t.o_src.eq(Mux(t.land_any, rp.data, wp.data)),
                     hold.eq(pend & ~t.land_any & ~Cat(*wants).any()),
                     rp.en.eq(~hold)]
        m.d.sync += pend.eq(Cat(*wants).any() | hold)
        with m.If(~hold):
            m.d.sync += pend_client.eq(rd_sel)
        with m.If(Cat(*wants).any()):
            m.d.sync += rd_last.eq(rd_sel)
        with m.Switch(rd_sel):
            for i in range(R):
                with m.Case(i):
                    m.d.comb += rp.addr.eq(raddrs[i])
        m.d.comb += [
            sp.handshake.eq(sp.valid & axi.ar_ready),
            axi.ar_valid.eq(sp.valid),
            axi.ar_id.eq(sp.client),
            axi.ar_addr.eq(sp.addr),
            axi.ar_len.eq(sp.len),
        ]
        m.d.sync += outstanding.eq(outstanding + sp.fire - retire)

    def _elaborate_writes(self, m, lb):
        C = self.write_clients
        if C == 0:
            return
        axi = self.axi
        max_beats = MAX_AXI_BEATS
        metas, dones, dcredits, errs = [], [], [], []
        for j, port in enumerate(self.write_ports):
            meta = Queue(_meta_layout, self.max_writes, buffered=False)
            done = Queue(done_layout, self.done_depth, buffered=False)
            m.submodules[f"wmeta_{j}"] = meta
            m.submodules[f"wdone_{j}"] = done
            wiring.connect(m, done.o, wiring.flipped(port.done))
            metas.append(meta)
            dones.append(done)
            dcredits.append(Signal(range(self.done_depth + 1), init=self.done_depth,
                                   name=f"dcredit_{j}"))
            errs.append(Signal(name=f"werr_{j}"))

        job_layout = data.StructLayout({"client": range(max(C, 2)), "bm1": range(256)})
        m.submodules.wjobs = jobs = Queue(job_layout, self.max_writes, buffered=False)

        sp = _Splitter(m, "aw", [p.req for p in self.write_ports], lb, max_beats)
        outstanding = Signal(range(self.max_writes + 1), name="writes_outstanding")
        for j in range(C):
            # registered into S2, as for reads
            with m.If(sp.pre_client == j):
                m.d.comb += sp.ok.eq(metas[j].i.ready & (~sp.pre_final | (dcredits[j] != 0))
                                     & jobs.i.ready & (outstanding < self.max_writes))
            with m.If(sp.f_client == j):
                m.d.comb += sp.ok3.eq(metas[j].i.ready & (dcredits[j] != 0) & jobs.i.ready
                                      & (outstanding < self.max_writes))
        m.d.comb += [
            sp.handshake.eq(sp.valid & axi.aw_ready),
            axi.aw_valid.eq(sp.valid),
            axi.aw_id.eq(sp.client),
            axi.aw_addr.eq(sp.addr),
            axi.aw_len.eq(sp.len),
            jobs.i.valid.eq(sp.fire),
            jobs.i.payload.client.eq(sp.grant),
            jobs.i.payload.bm1.eq(sp.bm1),
        ]

        # B: retire bursts, complete requests
        retire = Signal()
        for j in range(C):
            hit = axi.b_valid & (axi.b_id == j)
            # (from the burst fired in the last cycle, as for reads)
            mine = sp.p_fire & (sp.p_grant == j)
            final = metas[j].o.payload.final
            bad = axi.b_resp != 0
            m.d.comb += [
                metas[j].i.valid.eq(mine),
                metas[j].i.payload.tag.eq(sp.p_tag),
                metas[j].i.payload.final.eq(sp.p_final),
                metas[j].o.ready.eq(hit),
                dones[j].i.valid.eq(hit & final),
                dones[j].i.payload.tag.eq(metas[j].o.payload.tag),
                dones[j].i.payload.err.eq(errs[j] | bad),
            ]
            with m.If(hit):
                m.d.comb += retire.eq(1)
                m.d.sync += errs[j].eq(Mux(final, 0, errs[j] | bad))
            popped = dones[j].o.valid & dones[j].o.ready
            m.d.sync += dcredits[j].eq(dcredits[j] - (mine & sp.p_final) + popped)
        m.d.sync += outstanding.eq(outstanding + sp.fire - retire)

        # W: forward each burst's beats from its client. The burst at the jobs queue's head is
        # the one being sent (its client selects the data, its beats - 1 end it); it is popped
        # with its last beat, so the next burst's first beat may follow in the next cycle.
        # With no burst to send, W's payload is 0.
        count = Signal(8, name="w_count")        # beats of the head burst sent
        head = jobs.o.payload
        w_end = Signal()
        with m.If(jobs.o.valid):
            with m.Switch(head.client):
                for j, port in enumerate(self.write_ports):
                    with m.Case(j):
                        m.d.comb += [
                            axi.w_valid.eq(port.data.valid),
                            axi.w_data.eq(port.data.payload.data),
                            axi.w_strb.eq(port.data.payload.strb),
                            port.data.ready.eq(axi.w_ready),
                        ]
            m.d.comb += axi.w_last.eq(count == head.bm1)
        m.d.comb += [w_end.eq(axi.w_valid & axi.w_ready & axi.w_last),
                     jobs.o.ready.eq(w_end)]
        with m.If(axi.w_valid & axi.w_ready):
            m.d.sync += count.eq(Mux(axi.w_last, 0, count + 1))
