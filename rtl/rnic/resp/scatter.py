"""Scatter Path: cut a packet's payload into pieces and realign each to its bus address.

The payload of a packet arrives on ``pay`` realigned to lane 0 (byte 0 of the packet's payload
in lane 0 of its first beat). A *piece* ``{src, len, lane, end}`` asks for payload bytes
``[src, src + len)`` as host-memory write beats for a bus address whose low bits are ``lane``:
``ceil((lane + len) / (W/8))`` beats, beat ``k`` covering bus word ``addr // (W/8) + k``, with
``strb`` set only on the piece's bytes (the format of a :class:`~rnic.host.HostMemory` write
client's ``data``). Pieces of one packet come in increasing ``src`` order, without overlap;
a piece with ``end`` = 1 closes the packet: after its bytes (``len`` may be 0) the rest of the
packet's beats, up to the one with ``last``, are dropped and ``pkt_done`` pulses.

Realignment: a window ``{head, prev}`` of two source beats (``head`` = the input beat not yet
taken, ``prev`` = the beat taken before it) shifted right by a byte count; the input beat is taken
only when the next output beat needs a later source beat, so a source beat shared by two pieces
stays available for the second. One output beat per cycle while a piece runs; one bubble at
most at the start of a piece and one cycle for the closing piece (none when a closing piece
with bytes ends on the packet's ``last`` beat: that beat is taken with the piece's last output
beat). A piece offered while the
previous one runs is taken into a set-up register at once and starts when that one ends; one
offered to an idle Scatter Path starts a cycle after it is taken.

The byte shift is done in two registered steps (by whole 8-byte words, then by ``sh mod 8``
bytes), and the write beats pass through a 4-entry output queue (no combinational path from
``pay`` to ``data``); the closing piece puts a marker into it, which is dropped at the queue's
output and pulses ``pkt_done`` there (or flags its own last beat, whose taking pulses ``pkt_done``),
so ``pkt_done`` means the packet's last write beat was taken.

:class:`SharedScatter` puts one Scatter Path, and the payload FIFO in front of it, behind two
clients: the responder's execute stage and the requester's READ placement.
"""

import types

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..host.axi_master import WriteClientSignature, done_layout, req_layout, write_beat_layout
from ..parts import add as _add
from ..stream import BeatStream, Queue, beat_layout, check_width

__all__ = ["ScatterPath", "SharedScatter", "PlaceSignature", "piece_layout", "CLIENT_TAG_BIT"]

#: One piece of a packet's payload (see the module docstring).
piece_layout = data.StructLayout({"src": 13, "len": 13, "lane": 6, "end": 1})


class ScatterPath(wiring.Component):
    """Payload → aligned, strobed host-memory write beats, one piece at a time.

    Parameters
    ----------
    width : int
        Data width W (64, 128, 256, 512).

    Attributes
    ----------
    piece : In(stream.Signature(piece_layout))
        Pieces, in packet order.
    pay : In(BeatStream(W))
        Payload beats (lane-0 aligned, ``last`` on the packet's last beat).
    data : Out(stream.Signature(write_beat_layout(W)))
        Write beats (``last`` on each piece's last beat).
    pkt_done : Out(1)
        One-cycle pulse: a packet's closing piece finished: its remaining payload beats were
        dropped and every write beat of the packet was taken on ``data``.
    busy : Out(1)
        A piece is being worked on.
    """

    def __init__(self, *, width):
        self.width = check_width(width)
        super().__init__({
            "piece": In(stream.Signature(piece_layout)),
            "pay": In(BeatStream(width)),
            "data": Out(stream.Signature(write_beat_layout(width))),
            "pkt_done": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        B = W // 8
        lb = B.bit_length() - 1
        P = 16                                # bits of signed byte positions in a packet
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace(W=W, B=B, lb=lb, P=P)
        _add(t, self._registers(m, t))
        _add(t, self._output_stages(m, t))
        _add(t, self._piece_setup(m, t))
        self._piece_fsm(m, t)
        return m

    def _registers(self, m, t):
        """The window's and the piece's registers: the source beat ``prev`` before the head, the
        head's index ``h``, the output beats ``left``, the piece's lanes, the take decision's
        ``dm``/``dl`` with their flags, and the byte shift ``sh``. Adds these, with ``step``,
        which loads the flags for a move of ``dm`` and ``dl``."""
        B, P, W, lb = t.B, t.P, t.W, t.lb
        prev = Signal(W)
        h = Signal(range(4096 // B + 2))      # index of the source beat at the input head
        left = Signal(range(4096 // B + 2))   # output beats of the piece still to go
        first = Signal()                      # the next output beat is the piece's first
        lastb = Signal()                      # ... its last (left == 1)
        nlast = Signal()                      # left == 2
        lo = Signal(lb)                       # first lane of the piece
        hl = Signal(lb)                       # last lane of the piece
        end = Signal()
        # Source beat index of the last byte of the next output beat, minus h: ``dm`` for a full
        # (middle) beat, ``dl`` for the piece's last beat. > 0: take an input beat first.
        dm = Signal(signed(P))
        dl = Signal(signed(P))
        # Byte shift of the {head, prev} window for the next output beat.
        sh = Signal(lb + 2)

        lo_lane = Signal(lb)
        hi_lane = Signal(lb)
        m.d.comb += [lo_lane.eq(Mux(first, lo, 0)), hi_lane.eq(Mux(lastb, hl, B - 1))]
        # dm > 0, dm ≥ 0, dl > 0, dl ≥ 0 as registers, loaded with dm and dl (from compares
        # of their present values, dm and dl moving by ±1), so the take decision below starts
        # at a flip-flop rather than at a 16-bit sign test (timing)
        dm_gt, dm_ge, dl_gt, dl_ge = Signal(), Signal(), Signal(), Signal()
        ahead = Signal()
        m.d.comb += ahead.eq(Mux(lastb, dl_gt, dm_gt))
        nxt_ahead = Signal()                  # after this beat, the next one needs a take
        m.d.comb += nxt_ahead.eq(Mux(nlast, dl_ge, dm_ge))

        def step(d):
            """Load the flags for dm + d and dl + d (d = −1 or +1)."""
            return [dm_gt.eq(dm > -d), dm_ge.eq(dm >= -d), dl_gt.eq(dl > -d), dl_ge.eq(dl >= -d)]

        return types.SimpleNamespace(
            prev=prev, h=h, left=left, first=first, lastb=lastb, nlast=nlast, lo=lo, hl=hl, end=end,
            dm=dm, dl=dl, sh=sh, lo_lane=lo_lane, hi_lane=hi_lane, dm_gt=dm_gt, dm_ge=dm_ge,
            dl_gt=dl_gt, dl_ge=dl_ge, ahead=ahead, nxt_ahead=nxt_ahead, step=step)

    def _output_stages(self, m, t):
        """The output beat: the {head, prev} window, its strobes, the two registered shift steps
        into the 4-entry output queue ``out_q``, and the queue's output onto ``data`` and
        ``pkt_done`` (a marker is dropped there). Adds stage 1's inputs (``a_valid``,
        ``a_ready``, ``a_mark``, ``a_done``)."""
        (B, W, hi_lane, lastb, lb, lo_lane, prev, sh) = (
            t.B, t.W, t.hi_lane, t.lastb, t.lb, t.lo_lane, t.prev, t.sh)
        window = Signal(2 * W)
        m.d.comb += window.eq(Cat(prev, self.pay.payload.data))
        ones = Const((1 << B) - 1, B)
        strb = Signal(B)
        top = Signal(lb)
        m.d.comb += top.eq(B - 1 - hi_lane)
        m.d.comb += strb.eq((ones << lo_lane)[:B] & (ones >> top))
        # ``mark``: a marker (no beat), dropped at the queue's output; ``done``: the packet's
        # last beat (a closing piece that took the packet's ``last`` beat itself). What the
        # output's handshake decides on leaves the queue's output register; the beat's data and
        # strobes are read from its LUT RAM at the head (the host-memory write stores them)
        out_layout = data.StructLayout({"data": W, "strb": B, "last": 1, "mark": 1, "done": 1})
        m.submodules.out_q = out_q = Queue(out_layout, 4, registered=("last", "mark", "done"))
        o = out_q.i

        # The byte shift (sh < 2·W/8 when a beat leaves) in two registered steps: by whole
        # 8-byte words into stage 1, keeping the W + 56 bits the second step can reach, then by
        # sh mod 8 bytes into the output queue (the wide word multiplexer works on W + 56 bits,
        # the 8-way byte multiplexer on W, rather than 8-way on 2·W bits then words on W).
        a_valid = Signal()                    # a beat (or a marker) enters stage 1
        a_ready = Signal()
        a_mark = Signal()
        a_done = Signal()
        s1_valid = Signal()
        s1_win = Signal(W + 56)
        s1_lo = Signal(3)
        s1_strb = Signal(B)
        s1_last = Signal()
        s1_mark = Signal()
        s1_done = Signal()
        m.d.comb += a_ready.eq(~s1_valid | o.ready)
        with m.If(a_ready):
            # the data registers load whenever stage 1 is free (their enable does not wait for
            # the FSM's decision); ``s1_valid`` says whether they hold a beat
            m.d.sync += [s1_valid.eq(a_valid),
                         s1_win.eq((window >> (sh[3:lb + 1] * 64))[:W + 56]), s1_lo.eq(sh[:3]),
                         s1_strb.eq(strb), s1_last.eq(lastb), s1_mark.eq(a_mark),
                         s1_done.eq(a_done)]
        shifted = Signal(W + 56)
        m.d.comb += shifted.eq(s1_win >> (s1_lo * 8))
        m.d.comb += [
            o.valid.eq(s1_valid),
            o.payload.data.eq(shifted[:W]),
            o.payload.strb.eq(s1_strb),
            o.payload.last.eq(s1_last),
            o.payload.mark.eq(s1_mark),
            o.payload.done.eq(s1_done),
        ]
        q = out_q.o
        m.d.comb += [self.data.payload.data.eq(q.payload.data),
                     self.data.payload.strb.eq(q.payload.strb),
                     self.data.payload.last.eq(q.payload.last)]
        with m.If(q.payload.mark):
            m.d.comb += [q.ready.eq(1), self.pkt_done.eq(q.valid)]
        with m.Else():
            m.d.comb += [self.data.valid.eq(q.valid), q.ready.eq(self.data.ready),
                         self.pkt_done.eq(q.valid & self.data.ready & q.payload.done)]
        return types.SimpleNamespace(a_valid=a_valid, a_ready=a_ready, a_mark=a_mark, a_done=a_done)

    def _piece_setup(self, m, t):
        """The piece port into the ``n_*`` registers: the set-up that does not depend on ``h``, a
        one-entry buffer loaded while the previous piece runs. Adds them, with ``nv`` and
        ``n_take`` (IDLE takes the piece)."""
        B, P, lb, left = t.B, t.P, t.lb, t.left
        # Piece set-up in two steps: what does not depend on ``h`` is computed from the piece
        # port into the ``n_*`` registers (a one-entry buffer, loaded while the previous piece
        # runs), so IDLE subtracts ``h`` once and loads the FSM's registers (timing: the
        # set-up's chained adds no longer run into ``dm``/``dl``'s multiplexers).
        # Each is one carry chain at most, from the piece's fields (a short one of lb + 2 bits
        # at most in front of some): with e = lane + len − 1 (the piece's last byte, counted from
        # its first beat's lane 0) and bk = src − lane (the source byte of lane 0 of its first
        # beat), left = e // B + 1, the last lane e mod B, the source beat of a middle beat's last
        # byte (bk + B − 1) // B = (src + (B − 1 − lane)) // B, of the last beat's
        # (bk + e mod B) // B = (src + (e mod B − lane)) // B, and the byte shift bk + B.
        p = self.piece.payload
        p_lane = p.lane[:lb]
        e_lo = Signal(lb)
        m.d.comb += e_lo.eq(p_lane + p.len[:lb] - 1)
        fits1 = Signal()                      # lane + len ≤ B: one output beat
        fits2 = Signal()                      # lane + len ≤ 2·B
        m.d.comb += [fits1.eq((p.len[lb + 1:] == 0) & (p.len[:lb + 1] <= B - p_lane)),
                     fits2.eq((p.len[lb + 2:] == 0) & (p.len[:lb + 2] <= 2 * B - p_lane))]
        lo_d = Signal(signed(lb + 2))         # e mod B − lane, in (−B, B)
        m.d.comb += lo_d.eq(e_lo - p_lane)
        nv = Signal()                         # the n_* registers hold a piece
        n_take = Signal()                     # IDLE takes it
        n_left = Signal.like(left)
        n_lastb, n_nlast, n_end, n_zero = Signal(), Signal(), Signal(), Signal()
        n_lo, n_hl = Signal(lb), Signal(lb)
        n_mb = Signal(signed(P))              # source beat of the last byte of a middle beat
        n_lb = Signal(signed(P))              # ... of the piece's last beat
        n_sh = Signal(lb + 2)                 # byte shift before h is subtracted
        m.d.comb += self.piece.ready.eq(~nv | n_take)
        with m.If(self.piece.ready):
            m.d.sync += [
                nv.eq(self.piece.valid),
                n_left.eq((p.len + (p_lane + (B - 1))) >> lb),
                n_lastb.eq(fits1),
                n_nlast.eq(fits2 & ~fits1),
                n_lo.eq(p_lane),
                n_hl.eq(e_lo),
                n_mb.eq((p.src + ~p_lane) >> lb),         # ~lane = B − 1 − lane
                n_lb.eq((p.src + lo_d) >> lb),
                n_sh.eq(p.src - p_lane + B),
                n_end.eq(p.end),
                n_zero.eq(p.len == 0),
            ]
        return types.SimpleNamespace(
            nv=nv, n_take=n_take, n_left=n_left, n_lastb=n_lastb, n_nlast=n_nlast, n_end=n_end,
            n_zero=n_zero, n_lo=n_lo, n_hl=n_hl, n_mb=n_mb, n_lb=n_lb, n_sh=n_sh)

    def _piece_fsm(self, m, t):
        """The FSM: IDLE loads the next piece's registers from ``n_*`` (subtracting ``h``), RUN
        sends its output beats, taking input beats as they are needed, and DRAIN drops the rest
        of a closed packet's beats."""
        (B, a_done, a_mark, a_ready, a_valid, ahead, dl, dl_ge, dl_gt, dm, dm_ge, dm_gt, end, first,
         h, hl, lastb, lb, left, lo, n_end, n_hl, n_lastb, n_lb, n_left, n_lo, n_mb, n_nlast, n_sh,
         n_take, n_zero, nlast, nv, nxt_ahead, prev, sh, step) = (
            t.B, t.a_done, t.a_mark, t.a_ready, t.a_valid, t.ahead, t.dl, t.dl_ge, t.dl_gt, t.dm,
            t.dm_ge, t.dm_gt, t.end, t.first, t.h, t.hl, t.lastb, t.lb, t.left, t.lo, t.n_end,
            t.n_hl, t.n_lastb, t.n_lb, t.n_left, t.n_lo, t.n_mb, t.n_nlast, t.n_sh, t.n_take,
            t.n_zero, t.nlast, t.nv, t.nxt_ahead, t.prev, t.sh, t.step)
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += n_take.eq(nv)
                with m.If(nv):
                    m.d.sync += [
                        left.eq(n_left),
                        first.eq(1),
                        lastb.eq(n_lastb),
                        nlast.eq(n_nlast),
                        lo.eq(n_lo),
                        hl.eq(n_hl),
                        dm.eq(n_mb - h), dl.eq(n_lb - h),
                        dm_gt.eq(n_mb > h), dm_ge.eq(n_mb >= h),
                        dl_gt.eq(n_lb > h), dl_ge.eq(n_lb >= h),
                        sh.eq(n_sh - (h << lb)),
                        end.eq(n_end),
                    ]
                    with m.If(n_zero):
                        m.next = "DRAIN"
                    with m.Else():
                        m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.busy.eq(1)
                with m.If(ahead):
                    with m.If(self.pay.valid):
                        m.d.comb += self.pay.ready.eq(1)
                        m.d.sync += [prev.eq(self.pay.payload.data), h.eq(h + 1),
                                     dm.eq(dm - 1), dl.eq(dl - 1), sh.eq(sh - B), *step(-1)]
                with m.Else():
                    m.d.comb += a_valid.eq(self.pay.valid)
                    with m.If(self.pay.valid & a_ready):
                        m.d.sync += [left.eq(left - 1), first.eq(0), lastb.eq(nlast),
                                     nlast.eq(left == 3)]
                        with m.If(lastb):
                            with m.If(end & self.pay.payload.last):
                                # the head is the packet's last beat and this output beat is
                                # the last it feeds: take it now, no DRAIN cycle
                                m.d.comb += [self.pay.ready.eq(1), a_done.eq(1)]
                                m.d.sync += h.eq(0)
                                m.next = "IDLE"
                            with m.Elif(end):
                                m.next = "DRAIN"
                            with m.Else():
                                m.next = "IDLE"
                        with m.Elif(nxt_ahead):
                            # take the input beat in the same cycle: net differences unchanged
                            m.d.comb += self.pay.ready.eq(1)
                            m.d.sync += [prev.eq(self.pay.payload.data), h.eq(h + 1)]
                        with m.Else():
                            m.d.sync += [dm.eq(dm + 1), dl.eq(dl + 1), sh.eq(sh + B), *step(1)]
            with m.State("DRAIN"):
                m.d.comb += [self.busy.eq(1),
                             self.pay.ready.eq(~self.pay.payload.last | a_ready),
                             a_valid.eq(self.pay.valid & self.pay.payload.last),
                             a_mark.eq(1)]
                with m.If(self.pay.valid & self.pay.payload.last & a_ready):
                    m.d.sync += h.eq(0)
                    m.next = "IDLE"


#: The bit of a write request's ``tag`` that :class:`SharedScatter` replaces with the client's
#: number (a client's ``done`` comes back with it): clients use the bits below it.
CLIENT_TAG_BIT = 7


def PlaceSignature():
    """A client port of :class:`SharedScatter`, as the client sees it: its host-memory write
    requests (``req``) and their pieces (``piece``) out, the requests' ``done`` and the
    ``pkt_done`` pulses of its packets in."""
    return wiring.Signature({
        "req": Out(stream.Signature(req_layout)),
        "piece": Out(stream.Signature(piece_layout)),
        "done": In(stream.Signature(done_layout)),
        "pkt_done": In(1),
    })


class SharedScatter(wiring.Component):
    """One Scatter Path for two clients, with the payload FIFO in front of it.

    The payload of the packets both clients place arrives on ``pay0`` (client 0's packets) and
    ``pay1`` (client 1's), whole packets at a time: a packet's beats are never interleaved with
    another's (the two inputs are taken a packet at a time, ``pay0`` first when both start one
    in the same cycle). Their beats go on, in the order the packets were taken, through one
    ``pay_depth``-beat FIFO (and two more beats in LUT RAM) into the Scatter Path; the owner of
    each packet is queued beside them (16 packets at most: a 17th waits).
    A piece passes a register on its way from the client to the Scatter Path (one cycle).

    Each client sends, for each of its packets with payload and in its packets' order, the
    packet's pieces (the last one with ``end``) and, for each piece with ``len`` > 0 and in the
    same order, one write request: its host-memory write client's ``req``, whose data beats
    are that piece's. The Scatter Path takes pieces from the owner of the packet at the head of
    the owner queue, so it works through the packets in the order their beats come; the write
    requests go to the one write client ``wr`` in the order of their pieces (a request waits
    until its piece is taken, so its data always follows), with bit :data:`CLIENT_TAG_BIT` of
    the ``tag`` replaced by the client's number. Each ``done`` goes back to the client that bit
    names (the bit as sent by the master, the others as the client set them), and a client's
    ``pkt_done`` pulses when the Scatter Path finished one of its packets.

    Parameters
    ----------
    width : int
        Data width W (64, 128, 256, 512).
    pay_depth : int
        Beats of the payload FIFO (0: none, and no two-beat queue behind it either). Default
        64: a whole 4 KiB packet at W=512, so the next command is planned while the FIFO still
        feeds the AXI W channel.

    Attributes
    ----------
    pay0, pay1 : In(BeatStream(W))
        The payload of client 0's and client 1's packets (lane 0 aligned, ``last`` on each
        packet's last beat).
    client0, client1 : In(PlaceSignature())
        The clients' requests, pieces, completions and packet pulses.
    wr : Out(WriteClientSignature(W))
        The host-memory write client.
    """

    def __init__(self, *, width, pay_depth=64):
        self.width = check_width(width)
        if not isinstance(pay_depth, int) or pay_depth < 0:
            raise ValueError(f"pay_depth must be an integer ≥ 0, not {pay_depth!r}")
        self.pay_depth = pay_depth
        super().__init__({
            "pay0": In(BeatStream(width)),
            "pay1": In(BeatStream(width)),
            "client0": In(PlaceSignature()),
            "client1": In(PlaceSignature()),
            "wr": Out(WriteClientSignature(width)),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        m.submodules.scatter = sc = ScatterPath(width=W)
        clients = (self.client0, self.client1)
        # owners (1: client 1), in order: of the packets whose first beat was offered (``own_q``,
        # popped by their closing pieces), of the pieces taken with a write request still to pass
        # (``req_q``), of the packets the Scatter Path works on (``pkt_q``, popped by pkt_done)
        m.submodules.own_q = own_q = Queue(1, 16, buffered=False)
        m.submodules.req_q = req_q = Queue(1, 16, buffered=False)
        m.submodules.pkt_q = pkt_q = Queue(1, 16, buffered=False)

        # ---- the payload: a packet at a time from either input, into the FIFO ----
        # (a packet's owner is queued when its first beat is offered, so the Scatter Path can
        # take the packet's first piece, and then the beat, even with no FIFO in between)
        beats = stream.Signature(beat_layout(W)).create()
        ann = Signal()                        # the owner of the input's packet is queued
        cur = Signal()                        # ... and it is this input
        pick = Signal()
        m.d.comb += pick.eq(Mux(ann, cur, ~self.pay0.valid))
        inp = Mux(pick, self.pay1.valid, self.pay0.valid)
        m.d.comb += [
            own_q.i.valid.eq(inp & ~ann),
            own_q.i.payload.eq(pick),
            beats.valid.eq(inp & (ann | own_q.i.ready)),
            beats.payload.eq(Mux(pick, self.pay1.payload, self.pay0.payload)),
            self.pay0.ready.eq(~pick & (ann | own_q.i.ready) & beats.ready),
            self.pay1.ready.eq(pick & (ann | own_q.i.ready) & beats.ready),
        ]
        with m.If(own_q.i.valid & own_q.i.ready):
            m.d.sync += [ann.eq(1), cur.eq(pick)]
        with m.If(beats.valid & beats.ready & beats.payload.last):
            m.d.sync += ann.eq(0)
        if self.pay_depth:
            m.submodules.pay_q = pay_q = Queue(beat_layout(W), self.pay_depth)
            # a two-entry queue in flip-flops behind it: at depth 64 the queue is block RAM
            # whose output is its last register, and the Scatter Path's ``ready`` depends on
            # the beat (``last``); each entry loads straight from the block RAM's output (no
            # multiplexer after its 4 ns clock-to-out), the entry taken is selected after them
            m.submodules.pay_ff = pay_ff = Queue(beat_layout(W), 2, buffered=False,
                                                 registers=True)
            wiring.connect(m, beats, pay_q.i)
            wiring.connect(m, pay_q.o, pay_ff.i)
            wiring.connect(m, pay_ff.o, sc.pay)
        else:
            wiring.connect(m, beats, sc.pay)

        # ---- the pieces: from the owner of the packet at the head, through a register ----
        # (``pr``: the Scatter Path's set-up arithmetic starts at flip-flops, not at the owner
        # queue's LUT-RAM read and the client multiplexer)
        po = own_q.o.payload
        pc = Signal(piece_layout)
        m.d.comb += pc.eq(Mux(po, self.client1.piece.payload, self.client0.piece.payload))
        pvalid = Mux(po, self.client1.piece.valid, self.client0.piece.valid)
        pr_v = Signal()
        pr = Signal(piece_layout)
        take = Signal()                       # a client's piece goes into ``pr``
        m.d.comb += [
            sc.piece.valid.eq(pr_v),
            sc.piece.payload.eq(pr),
            take.eq(own_q.o.valid & pvalid & req_q.i.ready & pkt_q.i.ready
                    & (~pr_v | sc.piece.ready)),
            self.client0.piece.ready.eq(take & ~po),
            self.client1.piece.ready.eq(take & po),
            own_q.o.ready.eq(take & pc.end),
            req_q.i.valid.eq(take & (pc.len != 0)),
            req_q.i.payload.eq(po),
            pkt_q.i.valid.eq(take & pc.end),
            pkt_q.i.payload.eq(po),
        ]
        with m.If(sc.piece.ready):
            m.d.sync += pr_v.eq(0)
        with m.If(take):
            m.d.sync += [pr_v.eq(1), pr.eq(pc)]
        wiring.connect(m, sc.data, wiring.flipped(self.wr.data))

        # ---- the write requests, in the order of their pieces; done back by the tag ----
        ro = req_q.o.payload
        req = self.wr.req
        m.d.comb += [
            req.valid.eq(req_q.o.valid & Mux(ro, self.client1.req.valid,
                                             self.client0.req.valid)),
            req.payload.eq(Mux(ro, self.client1.req.payload, self.client0.req.payload)),
            req.payload.tag[CLIENT_TAG_BIT].eq(ro),
            req_q.o.ready.eq(req.valid & req.ready),
            self.client0.req.ready.eq(req.ready & req_q.o.valid & ~ro),
            self.client1.req.ready.eq(req.ready & req_q.o.valid & ro),
        ]
        done = self.wr.done
        dto = done.payload.tag[CLIENT_TAG_BIT]
        for i, c in enumerate(clients):
            m.d.comb += [c.done.valid.eq(done.valid & (dto == i)), c.done.payload.eq(done.payload),
                         c.pkt_done.eq(sc.pkt_done & (pkt_q.o.payload == i))]
        m.d.comb += [done.ready.eq(Mux(dto, self.client1.done.ready, self.client0.done.ready)),
                     pkt_q.o.ready.eq(sc.pkt_done)]
        return m
