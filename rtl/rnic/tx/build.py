"""The TX frame builder: every frame the core sends, one descriptor each.

A descriptor (:data:`pkt_layout`) names the headers and the payload length: a request packet
of the requester (with its RETH/IMMDT/IETH), an ACK/NAK of the responder (with its AETH, no
payload) or a READ response of the responder (FIRST, LAST and ONLY with an AETH, MIDDLE without;
all with payload). A frame's payload arrives as gather chunks (:data:`chunk_layout`: bus address
and length, in payload order), each read from host memory through a :class:`rnic.host.HostMemory`
read client. The :class:`~rnic.tx.arbiter.TxArbiter` ahead of the builder picks whole frames and
routes their chunks in the same order, so the chunks always belong to the descriptors with
payload in their order.

A frame with payload is whole in an on-chip frame FIFO before its first beat leaves, because
the MAC takes no gaps (interface.md §2); a frame without payload may leave while its header is
still written (cut-through, below), its words being written one a cycle. This block holds the
transmit side's one IPv4 checksum and its one ICRC generator.

Builder (per frame):

1. **HDR**: the header is Ethernet/IPv4/UDP/BTH[/RETH][/IMMDT, IETH or AETH], 54, 58, 70 or
   74 bytes, built with the :mod:`rnic.wire` tables. The destination (MAC, IPv4, UDP source
   port, QPN) comes from the **path table**, one row per local QPN written by SET_QP
   (``qp_arg``), read at the QPN of the descriptor queue's head. Its lengths, IPv4
   checksum and word counts are computed from the queue's head (3 register stages, the first
   in the cycle a descriptor reaches an empty queue) while the previous frame is built.
2. **GATHER**: each chunk's host read is issued as soon as the chunk is handed over (up to 4
   ahead, and two descriptors may wait ahead, so host latency overlaps the previous packet),
   split into parts at multiples of ``read_beats`` bus words, so that the next part is requested
   while the previous one drains (the host-memory master issues a burst only when the client's
   buffer has room for all of it). The raw aligned beats are realigned once
   (``{cur, prev} >> 8·(rotm + 1)``) onto the frame byte position, so chunks of any alignment land
   back to back after the header.
3. **One word at a time**: the header words and the realigned payload lanes are written into
   one word register, ``acc``, which leaves whole, once, when a write to the next word comes
   or the frame ends: into the frame FIFO (which takes ``acc`` at its word in every cycle it
   holds one, so the last write is the whole word) and, with the Ethernet bytes zeroed (they
   stand for the ICRC's 8 bytes of 0xFF) and IPv4 TOS/TTL/checksum, the UDP checksum and BTH
   byte 4 forced to ones, into :class:`rnic.crc.CRC32`. Lanes never written are zero, so the
   pad is.
   The ICRC is known CRC-latency cycles after the frame's last word: no second pass.

The frame FIFO is one block-RAM ring (one write port, one read port). A finished frame's record
(base word, lengths, counter class) and then its ICRC are queued (the record of a frame with
payload as its last raw beat is taken, when the payload's last chunk is known by then); the
**emitter** loads the record as soon as it is there and starts the frame as soon as its ICRC
is sure to be there when the word that carries it is read (the CRC unit's latency is fixed: up
to that word's index cycles before the ICRC, once the frame's last word leaves ``acc`` in the
next cycle), muxes in the zero
pad, the ICRC (little-endian) and the Ethernet padding to 60 bytes, and keeps ``tvalid`` high
from the first beat to the last; its output queue falls through when empty. The builder
writes only words the emitter has read, so it fills the next frame while the previous one
leaves. **Cut-through**: a frame without payload whose header spans three words or more (every
such frame at W = 64 and 128) has its record queued as its first header word is written; the
emitter may start it once the ICRC is sure to be there when its word is read, counting the
cycles until the builder's last word reaches the CRC unit, and no word is read sooner than two
cycles after its write.

Throughput: a frame takes the builder ``header words + payload beats + 1 per chunk`` cycles
when the next descriptor's values are ready as its last chunk ends (the frame's record is then
queued and the next descriptor taken in the same cycle; its last word leaves in the next
frame's first header cycle), one more (FIN) for a frame without payload, with a failed read or
with nothing ready to follow, and one more again (PAD) when the pad lies in a word of its own.
The emitter takes ``frame words`` cycles when the next frame may start as the previous one's
last word is read (``frame words + 1`` otherwise); the two overlap.
"""

import types

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .. import wire
from ..control.qp_args import ArgRow, qp_arg_layout
from ..crc import CRC32, crc_fixed_word, crc_init_before, crc_init_skipping
from ..host.axi_master import ReadClientSignature
from ..ifaces import NUM_COUNTERS, Counter, QpnStream
from ..stream import BeatStream, Queue, RoomFIFO, beat_layout, check_width
from ..parts import add as _add

__all__ = ["pkt_layout", "chunk_layout", "tx_hdr_layout", "TxBuild", "RETH_OPCODES",
           "IMM4_OPCODES", "MAX_PAYLOAD", "MAX_HDR"]

#: RC opcodes carrying a RETH, and those carrying 4 bytes of IMMDT or IETH after it.
RETH_OPCODES = (0x06, 0x0A, 0x0B, 0x0C)
IMM4_OPCODES = (0x03, 0x05, 0x09, 0x0B, 0x16, 0x17)
MAX_PAYLOAD = 4096
MAX_HDR = 74            # Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 + IMMDT 4

#: Where a QP's frames go: the SET_QP fields (interface.md §4.2) destination QPN (ARG1), remote
#: MAC (ARG11/12, ``rmac[47:40]`` the first wire byte), remote IPv4 (ARG13) and UDP source port
#: (ARG14). The builder keeps them in its path table's 9-bit lanes, by local QPN; descriptors
#: carry only the local QPN.
_PATH_ROW = ArgRow(("dest_qpn", "rmac", "rip", "sport"))
_PATH_HALF = 8          # lanes of a path-table row: a QP's 15 lanes in two rows

#: One ACK/NAK frame of the responder: header fields only (no payload).
tx_hdr_layout = data.StructLayout({
    "qpn": 24,          # local QPN: the path table's row
    "opcode": 8,
    "se": 1,
    "ackreq": 1,
    "psn": 24,
    "aeth": 1,          # the frame carries an AETH
    "syndrome": 8,
    "msn": 24,
})

#: One frame to build: a request packet, an ACK/NAK (``aeth`` set, no payload) or a READ
#: response (``aeth`` set on FIRST, LAST and ONLY; payload from its chunk).
pkt_layout = data.StructLayout({
    "opcode": 8,        # RC opcode; RETH/IMMDT/IETH follow from it
    "se": 1,
    "ackreq": 1,
    "psn": 24,
    "va": 64,           # RETH fields (opcodes 0x06, 0x0A, 0x0B, 0x0C)
    "rkey": 32,
    "dmalen": 32,
    "imm": 32,          # IMMDT or IETH as a big-endian word: imm[31:24] is the first wire byte
    "paylen": 13,       # payload bytes 0..4096 (pad excluded)
    "qpn": 24,          # local QPN: the path table's row, and returned with ``fault``
    "aeth": 1,          # an AETH follows the BTH (opcodes without RETH/IMMDT/IETH only)
    "syndrome": 8,      # AETH fields
    "msn": 24,
})

#: One gather chunk: ``len`` (1..4096) payload bytes at bus address ``addr``.
chunk_layout = data.StructLayout({
    "addr": 64,
    "len": 13,
})



class TxBuild(wiring.Component):
    """Frame FIFO, gather realigner, IPv4 checksum, ICRC and emitter for every frame sent.

    Parameters
    ----------
    width : int
        Data width W of the transmit stream and of host memory.
    num_qp : int
        Rows of the path table (a power of two, 2..65536): the local QPNs that send.
    read_beats : int
        Gather reads are split at multiples of this many bus words (a power of two; half the
        host-memory master's per-client ``read_buffer`` keeps two parts in flight).
    depth : int
        Words of the frame FIFO: a power of two of at least the largest frame
        (⌈4177 / (W/8)⌉ words) + 16, so that the next frame fills while one leaves; default the
        smallest such (1024 at W=64, 128 at W=512).
    frames : int
        Finished frames that may wait for the emitter (records and ICRCs queued), 2..16.

    Attributes
    ----------
    pkt : In(stream.Signature(pkt_layout))
        Frame descriptors (from :class:`~rnic.tx.arbiter.TxArbiter`), taken one at a time. A
        frame goes to the addresses of its ``qpn``'s path-table row as it stands when the
        builder takes the descriptor; ``qpn`` is below ``num_qp``.
    qp_arg : In(stream.Signature(qp_arg_layout, always_ready=True))
        The QP context's SET_QP ARG writes (PSN Check's ``qp_arg``, :mod:`rnic.control.qp_args`):
        the path table keeps ARG1's destination QPN and ARG11..14's remote MAC and IPv4 and UDP
        source port; the reset sweep after ``rst`` clears each QP's IPv4 row (a path is read
        only for a QP that sends, after its SET_QP has written every ARG). A ``qpn`` ≥
        ``num_qp`` is ignored.
    chunk : In(stream.Signature(chunk_layout))
        The gather chunks of the descriptors with payload (requests and READ responses), in
        descriptor and payload order, summing exactly to each ``paylen`` (none for an empty
        payload). ``ready`` comes from a register (a two-entry queue at the input), so the
        producer may drive register enables from it.
    rd : Out(ReadClientSignature(W))
        Host-memory read client (requests tagged 0), at most ``read_beats`` bus words each.
    tx : Out(BeatStream(W))
        Frames, byte 0 in ``data[7:0]``; ``user`` always 0; no gap within a frame.
    local_mac : In(48)
    local_ip : In(32)
    fault : Out(QpnStream())
        QPN of a packet dropped because a host read returned a non-OKAY response (no frame
        is sent for it).
    stat : Out(NUM_COUNTERS)
        Strobes on the last beat of a frame taken on ``tx``: counter 12 (frames sent) for
        every frame; for an ACKNOWLEDGE frame also 11 (syndrome 0x00–0x1F), 9 (RNR NAK), 8
        (0x60) or 10 (other NAKs).
    """

    def __init__(self, width, *, num_qp=256, read_beats=32, depth=None, frames=8):
        self.width = check_width(width)
        self.nb = width // 8
        if num_qp & (num_qp - 1) or not 2 <= num_qp <= 65536:
            raise ValueError(f"num_qp must be a power of two in 2..65536, not {num_qp!r}")
        self.num_qp = num_qp
        if read_beats & (read_beats - 1) or not 1 <= read_beats <= 256:
            raise ValueError(f"read_beats must be a power of two in 1..256, not {read_beats!r}")
        self.read_beats = read_beats
        #: words of the largest frame
        self.frame_words = -(-(MAX_HDR + MAX_PAYLOAD + 3 + 4) // self.nb)
        if depth is None:
            depth = 1 << (self.frame_words + 16 - 1).bit_length()
        if depth & (depth - 1) or depth < self.frame_words + 16:
            raise ValueError(f"depth must be a power of two of at least the largest frame + 16 "
                             f"words ({self.frame_words + 16}), not {depth!r}")
        self.depth = depth
        if not 2 <= frames <= 16:
            raise ValueError(f"frames must be in 2..16, not {frames!r}")
        self.frames = frames
        super().__init__({
            "pkt": In(stream.Signature(pkt_layout)),
            "qp_arg": In(stream.Signature(qp_arg_layout, always_ready=True)),
            "chunk": In(stream.Signature(chunk_layout)),
            "rd": Out(ReadClientSignature(width)),
            "tx": Out(BeatStream(width)),
            "local_mac": In(48),
            "local_ip": In(32),
            "fault": Out(QpnStream()),
            "stat": Out(NUM_COUNTERS),
        })

    def elaborate(self, platform):
        m = Module()
        W, nb = self.width, self.nb
        lg = nb.bit_length() - 1
        C = self.depth
        CB = C.bit_length() - 1                     # bits of a buffer word address
        PB = 14                                     # bits of a frame byte position
        WB = (self.frame_words + 1).bit_length() + 1    # bits of a frame word index (+1)
        ONES = (1 << nb) - 1
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace(W=W, nb=nb, lg=lg, C=C, CB=CB, PB=PB, WB=WB, ONES=ONES)
        _add(t, self._frame_fifo(m, t))
        _add(t, self._head_values(m, t))
        _add(t, self._header(m, t))
        t.RBB, t.chq, t.chunk = self._gather_reads(m, lg)
        _add(t, self._realign(m, t))
        _add(t, self._word_register(m, t))
        _add(t, self._crc_feed(m, t))
        _add(t, self._frame_queues(m, t))
        _add(t, self._builder_flags(m, t))
        self._emitter(m, t)
        self._emitter_fsm(m, t)
        _add(t, self._frame_record(m, t))
        self._builder_fsm(m, t)
        self._write_select(m, t)
        return m

    def _shared_path(self):
        """Whether the frame being built reads the path's row 1 from the head's registers: the
        head's values, delayed until the header word holding byte 35 (the UDP source port's
        last) is written, are still ready when a header-only frame of 54 bytes ends, or the
        delay is none (the head's row 1 comes no sooner anyway)."""
        k = 35 // self.nb
        return k <= 1 or k + 4 <= -(-54 // self.nb) + 1

    def _frame_fifo(self, m, t):
        """The frame FIFO's block-RAM ring (``mem``), the CRC unit and the emitter's output queue
        (``outq``), with the frame counters strobed as a frame's last beat leaves on ``tx``. Adds
        the ring's ports (``wp``, ``rp``), ``crc``, ``outq`` and ``out_cls`` (the counter class of
        the beat on ``tx``, which the emitter drives)."""
        C, W = t.C, t.W
        # ``no_rw_check``: the emitter reads only words whose last write is done (a frame whose
        # last word leaves ``acc`` in this cycle or the next, its words read one a cycle from
        # word 0 and its last word no sooner than two cycles on, see :meth:`_emitter_frame`; a
        # cut-through
        # frame's word two cycles after its write, see :meth:`_emitter_start`), the builder writes
        # only words the emitter has read (``room``; the word of ``acc`` too, in every cycle
        # from the write that moved acc to it), so an enabled read never meets an enabled
        # write at one address.
        m.submodules.mem = mem = Memory(shape=W, depth=C, init=[], attrs={"no_rw_check": 1})
        wp = mem.write_port()
        rp = mem.read_port()
        # the CRC unit takes whole words: the ICRC's input (Ethernet header to pad, 14 bytes
        # + a multiple of 4 long, the Ethernet bytes zero standing for the 8 bytes of 0xFF) is
        # fed shifted so that its end is a word's, behind ``s`` = 2 mod 4 bytes of ``y``'s
        # repeated, the 4 bytes that leave the register where it is before the Ethernet header
        # (:meth:`_crc_feed`); the unit's initial value leads through the first 2 of them there
        start = crc_init_skipping(14, b"\xff" * 8)
        t.crc_y = crc_fixed_word(start)
        m.submodules.crc = crc = CRC32(W, init=crc_init_before(t.crc_y[2:], start),
                                       premasked=True, whole=True, fold=W <= 128)
        # each beat carries the frame's counter class (0: not an ACKNOWLEDGE, 1 ACK, 2 RNR NAK,
        # 3 NAK 0x60, 4 other NAK), used on its last beat
        m.submodules.outq = outq = Queue(data.StructLayout({"beat": beat_layout(W), "cls": 3}),
                                         6, buffered=False)
        out_cls = Signal(3)             # the counter class of the beat on ``tx``
        with m.If(self.tx.valid & self.tx.ready & self.tx.payload.last):
            m.d.comb += self.stat[Counter.TX_FRAMES].eq(1)
            cls = out_cls
            for c, ctr in ((1, Counter.ACKS), (2, Counter.RNR_NAKS), (3, Counter.SEQ_NAKS),
                           (4, Counter.OTHER_NAKS)):
                with m.If(cls == c):
                    m.d.comb += self.stat[ctr].eq(1)
        return types.SimpleNamespace(wp=wp, rp=rp, crc=crc, outq=outq, out_cls=out_cls)

    def _desc_ring(self, m):
        """The descriptor queue: two descriptors wait (``pkt.ready`` and the head's ``valid`` are
        registers, as an unbuffered two-entry queue's), in a ring of four LUT-RAM slots read
        combinationally. The fields the head's precomputation reads (``h``) are read at the head's
        slot; the header template's (``r``: the BTH fields, RETH, and the AETH or IMMDT/IETH as
        wire bytes) at the slot of the descriptor
        taken last, which stays unwritten while its frame is built: the two waiting are the two
        slots after it. Returns the queue (its head stream ends ``o.valid``, ``o.ready``), ``h`` and
        ``r``."""
        p = self.pkt.payload
        # (a descriptor's ``qpn`` is below ``num_qp``: its low bits are kept)
        # (with the frame's counter class, see ``outq``, in place of the AETH syndrome)
        # (the opcode's decodes are made as the descriptor is queued: the header's length over
        # 4, ``hdr_hi``; a READ response, ``rdr``; a MIDDLE or LAST one, ``cont``)
        head_layout = data.StructLayout({"hdr_hi": range((MAX_HDR >> 2) + 1), "rdr": 1,
                                         "cont": 1, "paylen": 13, "cls": 3,
                                         "qpn": (self.num_qp - 1).bit_length()})
        # the 20 bytes after the BTH as the RETH opcodes place them: ``tail``, RETH bytes 0..15
        # with, in place of the first 4 when there is no RETH, ``x``; then ``x`` (the bytes past
        # the header are never written into the frame). ``x`` is the AETH or the IMMDT/IETH: a
        # frame has at most one of them (an AETH only with an opcode without RETH/IMMDT/IETH).
        # Both choices are made as the descriptor is queued, not on the header's write path.
        hdr_layout = data.StructLayout({"opcode": 8, "se": 1, "ackreq": 1, "psn": 24,
                                        "tail": 8 * 16, "x": 32})
        reth = wire.RETH.assemble({"va": p.va, "rkey": p.rkey, "dmalen": p.dmalen})
        imm = wire.IMMDT.assemble({"imm": p.imm})
        aeth = wire.AETH.assemble({"syndrome": p.syndrome, "msn": p.msn})
        has_reth = Cat(*[p.opcode == o for o in RETH_OPCODES]).any()
        has_imm = Cat(*[p.opcode == o for o in IMM4_OPCODES]).any()
        # (a header is 54 + 4·k bytes: its length over 4 is kept)
        hdr_hi = (54 + Mux(has_reth, 16, 0) + Mux(has_imm | p.aeth, 4, 0))[2:]
        x = Mux(p.aeth, Cat(*aeth), Cat(*imm))
        syn, cls = p.syndrome, Signal(3)
        with m.If(p.opcode == 0x11):
            m.d.comb += cls.eq(Mux(syn[5:7] == 0, 1, Mux(syn[5:7] == 1, 2, Mux(syn == 0x60, 3, 4))))
        slots = 4
        heads = Memory(shape=head_layout, depth=slots, init=[], attrs={"no_rw_check": 1})
        hdrs = Memory(shape=hdr_layout, depth=slots, init=[], attrs={"no_rw_check": 1})
        m.submodules.pkt_heads, m.submodules.pkt_hdrs = heads, hdrs
        hw, hr = heads.write_port(), heads.read_port(domain="comb")
        tw, tr = hdrs.write_port(), hdrs.read_port(domain="comb")
        produce, consume = Signal(2), Signal(2)
        cur = Signal(2, init=slots - 1)          # the slot taken last: consume − 1
        level = Signal(range(3))
        w_rdy, r_rdy, w_rdy_next = Signal(init=1), Signal(), Signal()
        o = types.SimpleNamespace(valid=r_rdy, ready=Signal())
        do_write = self.pkt.valid & w_rdy
        do_read = r_rdy & o.ready
        RoomFIFO._ready_flags(m, level, 2, do_write, do_read, w_rdy, r_rdy, w_rdy_next)
        with m.If(do_write & ~do_read):
            m.d.sync += level.eq(level + 1)
        with m.If(do_read & ~do_write):
            m.d.sync += level.eq(level - 1)
        with m.If(do_write):
            m.d.sync += produce.eq(produce + 1)
        with m.If(do_read):
            m.d.sync += [consume.eq(consume + 1), cur.eq(consume)]
        # (written whenever there is room: ``produce`` is then ``consume`` or the slot after it,
        # never ``cur``; an enabled read of the head meets no write: it is held)
        m.d.comb += [
            self.pkt.ready.eq(w_rdy),
            hw.addr.eq(produce), hw.en.eq(w_rdy), tw.addr.eq(produce), tw.en.eq(w_rdy),
            hw.data.eq(Cat(hdr_hi[:(MAX_HDR >> 2).bit_length()],
                           (p.opcode >= 0x0D) & (p.opcode <= 0x10),
                           (p.opcode == 0x0E) | (p.opcode == 0x0F),
                           p.paylen, cls, p.qpn[:head_layout.members["qpn"]])),
            tw.data.eq(Cat(p.opcode, p.se, p.ackreq, p.psn,
                           Mux(has_reth, Cat(*reth[:4]), x), *reth[4:], x)),
            hr.addr.eq(consume), tr.addr.eq(cur),
        ]
        # the head's fields as the values start on them (``hx``): the head's slot, or while the
        # queue is empty the descriptor being written (selected by the register ``r_rdy``), so
        # a descriptor that arrives at an empty queue starts its values in the cycle it is
        # queued (``byp``: :meth:`_head_values` then counts that cycle as its first stage)
        hx = Signal(head_layout)
        m.d.comb += hx.eq(Mux(r_rdy, hr.data.as_value(), hw.data))
        byp = Signal()
        m.d.comb += byp.eq(do_write & ~r_rdy)
        return types.SimpleNamespace(o=o, hx=hx, byp=byp), hr.data, tr.data

    def _path_table(self, m, h, hst, t_hx):
        """The path table, read at the QPN of the descriptor queue's head ``h`` as its values'
        stage ``hst`` says. Returns ``path_row0`` (row 0 as read), ``path_b`` (row 1 in
        registers, ``dhi`` and ``dlo`` the IPv4 address's halves among them) and ``path_busy``
        (driven by the builder)."""
        # ---- the path table: a QP's addresses, two 72-bit rows per QP (``_PATH_HALF`` lanes
        # each) in one table of 2·num_qp rows: row 1 the remote MAC's first two bytes, the
        # remote IPv4 and the UDP source port (ARG12..14), row 0 the destination QPN and the
        # rest of the MAC (ARG1, ARG11). Read at the queue head's QPN: row 1 when the head's
        # values start (``hst`` 0), its fields kept in registers a cycle later (the IPv4
        # address's halves feed the checksum), then row 0, there from two cycles after the head
        # arrives; the head's values are ready four cycles after it arrives at the earliest. A
        # table write restarts the head's values (``hst``), so a frame's addresses and its IPv4
        # checksum both come from the rows as they stand when the descriptor is taken, and a
        # read that met the write (``no_rw_check``) is read again.
        ab = (self.num_qp - 1).bit_length()
        LN = _PATH_ROW.LANE
        m.submodules.paths = paths = Memory(shape=_PATH_HALF * LN, depth=2 * self.num_qp,
                                            init=[], attrs={"no_rw_check": 1})
        path_wp = paths.write_port(granularity=LN)
        path_rp = paths.read_port()
        qa = self.qp_arg
        # an ARG's lanes lie in one row (ARG1 and ARG11 in lanes 0..6, ARG12..14 in 7..14);
        # the reset sweep's write (``all``) clears row 1: a row is read only for a QP that
        # sends, after its SET_QP, which writes every ARG
        vw = types.SimpleNamespace(addr=Signal(24), data=Signal(_PATH_ROW.width),
                                   en=Signal(_PATH_ROW.lanes))
        _PATH_ROW.write(m, vw, qa.payload, qa.valid & (qa.payload.qpn < self.num_qp))
        w_hi = Signal()
        m.d.comb += [
            w_hi.eq(vw.en[_PATH_HALF - 1:].any()),
            path_wp.addr.eq(Cat(w_hi, vw.addr[:ab])),
            path_wp.data.eq(Mux(w_hi, vw.data[(_PATH_HALF - 1) * LN:],
                                vw.data[:(_PATH_HALF - 1) * LN])),
            path_wp.en.eq(Mux(w_hi, vw.en[_PATH_HALF - 1:], vw.en[:_PATH_HALF - 1])),
        ]
        # row 1's fields of the head's path, kept in registers (``path_b``) that are also the
        # frame's own where that costs no cycle (``_shared_path``: its header reads them): they
        # then take the head's row 1 at ``hst`` 1 once the frame's header words that need them
        # are written (``path_busy`` low; ``hst`` waits at 1 and row 1 stays addressed until
        # then), so at W = 64 the head's values are ready at the earliest as a header-only
        # frame's header ends; row 0's fields come from the table
        path_busy = Signal()
        b_rmac, b_sport, dhi, dlo = Signal(16), Signal(16), Signal(16), Signal(16)
        row1 = Signal()
        m.d.comb += [row1.eq((hst == 0) | (hst == 1) & path_busy),
                     path_rp.addr.eq(Cat(row1, t_hx.qpn))]
        rb = path_rp.data                                   # row 1: lanes 7..14 of the QP's
        with m.If((hst == 1) & ~path_busy):
            # the destination address's two halves, for the IPv4 checksum: row 1 read as
            # the head arrives (the block RAM's output straight into registers), so the
            # checksum's chain starts a cycle later than the lengths' and still ends before
            # ``head_ok`` (:meth:`_head_values`)
            m.d.sync += [b_rmac.eq(rb[0:16]), dlo.eq(rb[18:34]), dhi.eq(rb[34:50]),
                         b_sport.eq(rb[54:70])]
        path_b = Cat(b_rmac, Const(0, 2), dlo, dhi, Const(0, 4), b_sport, Const(0, 2))
        return types.SimpleNamespace(
            path_row0=path_rp.data[:(_PATH_HALF - 1) * _PATH_ROW.LANE], path_b=path_b,
            path_busy=path_busy, dhi=dhi, dlo=dlo)

    def _head_values(self, m, t):
        """The descriptor queue (``pktq``, its head ``h``), the path table read at the head's QPN
        (``path_row0``; row 1 in registers, ``path_b``), and the head's lengths, IPv4 checksum
        and word counts, computed in registers while the previous frame is built (``p_*``, ready
        when ``head_ok``). Adds them, with ``pop`` (the builder takes the head) and ``sip``."""
        PB, WB, lg, nb = t.PB, t.WB, t.lg, t.nb
        # ---- the next descriptor's lengths and IPv4 checksum, computed from the queue head
        # while the previous frame is built (a register chain of 3 stages, the first a copy of
        # the head's fields they need: ``hst`` counts them)
        pktq, h, r = self._desc_ring(m)

        hst = Signal(range(4))
        qa = self.qp_arg
        pt = self._path_table(m, h, hst, pktq.hx)
        dhi, dlo = pt.dhi, pt.dlo

        hq = Signal(data.StructLayout({"hdr_hi": range((MAX_HDR >> 2) + 1), "paylen": 13}))
        hx = pktq.hx
        m.d.sync += [hq.hdr_hi.eq(hx.hdr_hi), hq.paylen.eq(hx.paylen)]
        sip = self.local_ip
        ssum = Signal(18)
        m.d.sync += ssum.eq(0x4500 + 0x4000 + 0x4011 + 4 - 14 + sip[16:32] + sip[0:16])
        h_hdr_len = Cat(Const(2, 2), hq.hdr_hi)
        h_pad = Signal(2)
        m.d.comb += h_pad.eq(-hq.paylen)
        p_data_end = Signal(PB)         # (from the head's registers, into the take's)
        m.d.comb += p_data_end.eq(h_hdr_len + hq.paylen)
        # (the ICRC's input, Ethernet header to pad, ends 2 bytes past a multiple of 4: its
        # headers are 54 + a multiple of 4 bytes and the pad fills the payload to 4, so
        # crc_end's two low bits are the constant 2, not registers)
        p_crc_hi = Signal(PB - 2)
        p_crc_end = Cat(Const(2, 2), p_crc_hi)
        # (the header's length, 54 + a multiple of 4, is 2 mod 4 too: its word count and last
        # lanes are slices of its bits from 2 up, as the ICRC's last word is of crc_end's)
        p_hdr_hi = hq.hdr_hi             # (read at the take only, as the head's registers are)
        p_hdr_len = Cat(Const(2, 2), p_hdr_hi)
        p_csum_sum = Signal(20)
        p_csum = Signal(16)
        p_out_words = Signal(WB)        # words sent: max(crc_end + 4, 60) bytes
        p_hdr_last = p_hdr_hi[lg - 2:]  # the word holding the header's last byte
        p_padw = Signal()               # the pad lies in a word the payload does not reach
        p_nopay = Signal()              # no payload
        m.d.sync += [
            p_crc_hi.eq((h_hdr_len + hq.paylen + h_pad)[2:]),
            # (the IPv4 total length is crc_end + 4 − 14: its 4 − 14 is in ``ssum``)
            # (one four-term sum: the checksum's chain ends with the lengths')
            p_csum_sum.eq(ssum + dhi + dlo + p_crc_end),
            p_out_words.eq(Mux(p_crc_end < wire.MIN_FRAME - 4, -(-wire.MIN_FRAME // nb),
                               (p_crc_end + 4 + nb - 1) >> lg)),
            # (data_end − 1 is crc_end − 1 − pad: in an earlier word exactly when
            # (crc_end − 1) mod nb < pad)
            p_padw.eq((p_crc_end - 1)[:lg] < h_pad),
            p_nopay.eq(hq.paylen == 0),
        ]
        fold1 = Signal(17)
        m.d.comb += fold1.eq(p_csum_sum[0:16] + p_csum_sum[16:20])
        # (the fold, from the sum's register, feeds the take's ``csum`` register)
        m.d.comb += p_csum.eq(~(fold1[0:16] + fold1[16]))
        pop = Signal()
        # the head's values are ready: hst is 3 (a register). The chain: the head's fields
        # into ``hq`` (hst 0), ``p_crc_hi`` and the path's row-1 registers (hst 1), the
        # ``p_*`` registers (hst 2); ``p_csum`` folds ``p_csum_sum`` combinationally into the
        # take's register, and row 0 is read at hst 2 into the take's ``rpath_a``
        head_ok = Signal()
        with m.If(pop | qa.valid | ~pktq.o.valid & ~pktq.byp):
            m.d.sync += [hst.eq(0), head_ok.eq(0)]
        with m.Elif(~pktq.o.valid):
            # a descriptor queued at the empty queue: its fields went into ``hq`` and its row
            # 1 was addressed in this cycle (``hx``), its first stage
            m.d.sync += [hst.eq(1), head_ok.eq(0)]
        with m.Elif((hst != 3) & ~((hst == 1) & pt.path_busy)):
            m.d.sync += [hst.eq(hst + 1), head_ok.eq(hst == 2)]
        return types.SimpleNamespace(
            pktq=pktq, h=h, r=r, path_row0=pt.path_row0, path_b=pt.path_b,
            path_busy=pt.path_busy, sip=sip, p_data_end=p_data_end, p_crc_end=p_crc_end,
            p_crc_hi=p_crc_hi, p_hdr_hi=p_hdr_hi, p_hdr_len=p_hdr_len, p_csum=p_csum,
            p_out_words=p_out_words, p_hdr_last=p_hdr_last, p_padw=p_padw,
            p_nopay=p_nopay, pop=pop, head_ok=head_ok)

    def _header(self, m, t):
        """The builder's frame registers, latched when it takes a descriptor (``r``, ``rpath``, the
        lengths and lane masks), and the header template ``hdr`` (``hdr_words`` words) assembled
        from them with the :mod:`rnic.wire` tables. Adds them."""
        PB, WB, nb, sip = t.PB, t.WB, t.nb, t.sip
        # the builder's packet (its ring slot, ``r``) and its path, latched with its precomputed
        # values
        r = t.r
        rpath_a = Signal((_PATH_HALF - 1) * _PATH_ROW.LANE)    # the path's row 0
        rpath_b = t.path_b if self._shared_path() else Signal(len(t.path_b))     # and row 1
        rpath = _PATH_ROW.decode(m, Cat(rpath_a, rpath_b), "rpath")
        data_end = Signal(PB)           # first byte after the payload
        crc_hi = Signal(PB - 2)
        crc_end = Cat(Const(2, 2), crc_hi)      # first byte of the ICRC (2 mod 4)
        hdr_hi = Signal(range((MAX_HDR >> 2) + 1))
        hdr_len_r = Cat(Const(2, 2), hdr_hi)
        ip_len = Cat(Const(0, 2), (crc_hi - 2)[:14])    # crc_end + 4 − 14: a multiple of 4
        udp_len = Cat(Const(0, 2), (crc_hi - 7)[:14])   # ip_len − 20, from crc_hi in one step
        csum = Signal(16)
        out_words = Signal(WB)
        crc_last = crc_hi[t.lg - 2:]    # the word of the ICRC input's last byte, crc_end − 1
        # the CRC feed's shift (:meth:`_crc_feed`): crc_end mod nb is 2 + 4·crsel
        crsel = Signal(max(1, t.lg - 2))
        hdr_last = hdr_hi[t.lg - 2:]    # the word of the header's last byte, and its lanes
        # hdr_last − 1, set with it (all ones when hdr_last is 0: above every header word)
        hdr_lm1 = Signal(len(hdr_last) + 1)
        hkeep = Signal(nb)
        m.d.comb += hkeep.eq((Const(2, nb + 1) << Cat(Const(1, 2), hdr_hi)[:t.lg]) - 1)
        padw = Signal()
        padcnt = Signal(2)

        # ---- the header bytes ---------------------------------------------------------------
        hdr_words = -(-MAX_HDR // nb)
        dip = rpath.rip
        eth = wire.ETH.assemble({"dst": rpath.rmac, "src": self.local_mac,
                                 "ethertype": wire.ETHERTYPE_IPV4})
        ip = wire.IPV4.assemble({"version": 4, "ihl": 5, "total_length": ip_len, "flags": 2,
                                 "ttl": 64, "protocol": wire.IP_PROTO_UDP, "checksum": csum,
                                 "src": sip, "dst": dip})
        udp = wire.UDP.assemble({"sport": rpath.sport, "dport": wire.ROCE_UDP_PORT,
                                 "length": udp_len})
        bth = wire.BTH.assemble({"opcode": r.opcode, "se": r.se, "padcnt": padcnt,
                                 "pkey": 0xFFFF, "dqpn": rpath.dest_qpn, "ackreq": r.ackreq,
                                 "psn": r.psn})
        tail = [r.tail[8 * i:8 * i + 8] for i in range(16)]
        tail += [r.x[8 * i:8 * i + 8] for i in range(4)]
        hdr_bytes = eth + ip + udp + bth + tail
        hdr_bytes += [Const(0, 8)] * (hdr_words * nb - len(hdr_bytes))
        hdr = Signal(8 * hdr_words * nb)
        m.d.comb += hdr.eq(Cat(*hdr_bytes))
        return types.SimpleNamespace(
            rpath_a=rpath_a, rpath_b=rpath_b, data_end=data_end, crc_end=crc_end, crc_hi=crc_hi,

            hdr_len_r=hdr_len_r, hdr_hi=hdr_hi,
            ip_len=ip_len, csum=csum, out_words=out_words, crc_last=crc_last, crsel=crsel,
            hdr_last=hdr_last, hdr_lm1=hdr_lm1, hkeep=hkeep, padw=padw,
            padcnt=padcnt, hdr_words=hdr_words, hdr=hdr)

    def _realign(self, m, t):
        """The gather's position and realignment registers: where the next chunk starts in the frame
        (``pos``), the funnel that shifts a raw beat onto the frame byte position (``funnel``, by
        ``rotm``), the word each raw beat completes (``wqm1``) and the lanes a write takes
        (``gmask``), with the header word counter (``wcount``) and the frame-end tests. Adds them;
        the builder sets them."""
        (ONES, PB, RBB, W, WB, data_end, lg, nb) = (
            t.ONES, t.PB, t.RBB, t.W, t.WB, t.data_end, t.lg, t.nb)
        pos = Signal(PB)                 # where the next chunk starts in the frame
        parts = Signal(13 - RBB + 2)     # parts of the chunk still to come back
        # the funnel's shift in bytes less 1: nb − 1 − ((pos − off) mod nb) (the shift is 1..nb,
        # so the funnel drops {cur, prev}'s first byte and shifts by 0..nb − 1: an nb-way byte
        # multiplexer, not a 2·nb-way one)
        rotm = Signal(lg)
        prev = Signal(W)
        bad = Signal()
        wcount = Signal(range(-(-MAX_HDR // nb) + 1))     # header word
        hlast = Signal()                 # wcount is the header's last word

        funnel = Signal(2 * W)
        # the raw beat being taken (DATA); in FLUSH the lanes that come from it lie past the
        # chunk's end and are not written (gmask), so it needs no state decode
        cur = self.rd.resp.payload.data
        m.d.comb += funnel.eq(Cat(prev, cur)[8:] >> (rotm * 8))
        wqm1 = Signal(WB)                # the word the current raw beat completes
        c_lastw = Signal(WB)             # the word holding the chunk's last byte
        c_skip = Signal()                # the chunk's first raw beat completes no word of it
        c_first = Signal()               # the next raw beat is the chunk's first
        # the lanes a write takes, from registers: every lane, except in the chunk's first word
        # (``c_lo``: no lane of the chunk written yet; lanes from ``pos``, ``lo_mask``; that
        # word is ``acc``'s when ``pos`` is not on a word boundary, ``lo_same``) and its last
        # (``w_last``: wqm1 is c_lastw; lanes up to the chunk's end, ``hi_mask``)
        c_lo = Signal()
        lo_mask = Signal(nb)
        lo_same = Signal()
        hi_mask = Signal(nb)
        w_last = Signal()
        # the frame-end tests, registered: ``pos_end`` is "no payload" (set with the take);
        # ``c_done`` is pos == data_end as of the cycle before (FLUSH follows DATA, and pos
        # moves to the chunk's end when the chunk starts)
        pos_end = Signal()
        c_done = Signal()
        m.d.sync += c_done.eq(pos == data_end)
        gmask = Signal(nb)
        m.d.comb += gmask.eq(Mux(c_lo, lo_mask, ONES) & Mux(w_last, hi_mask, ONES))
        return types.SimpleNamespace(
            pos=pos, parts=parts, rotm=rotm, prev=prev, bad=bad, wcount=wcount,
            hlast=hlast, funnel=funnel, wqm1=wqm1, c_lastw=c_lastw, c_skip=c_skip, c_first=c_first,
            c_lo=c_lo, lo_mask=lo_mask, lo_same=lo_same, hi_mask=hi_mask, w_last=w_last,
            pos_end=pos_end, c_done=c_done, gmask=gmask)

    def _word_register(self, m, t):
        """The word register ``acc``: the frame word being assembled, filled by a write of
        ``w_data``'s ``w_mask`` lanes to frame word ``w_addr`` (``w_en``), leaving whole (``flush``)
        when a write to the next word comes or the frame ends; with the frame's place in the buffer
        (``fbase``, ``wabs``) and the emitter's read pointer less its slack (``rptr8``). Adds them;
        the builder drives the write."""
        (CB, W, WB, crsel, crc_last, lg, nb, p_crc_end) = (
            t.CB, t.W, t.WB, t.crsel, t.crc_last, t.lg, t.nb, t.p_crc_end)
        # ---- the frame word being assembled -----------------------------------------------------
        # Every frame word is assembled in ``acc`` (the header's last word and the payload's
        # first, a chunk's last and the next chunk's first share one) and leaves it once, whole,
        # when a write to the next word comes or the frame ends: into the buffer and, masked,
        # into the CRC unit, in frame order. Lanes never written are zero, so the pad is.
        acc = Signal(W)
        acc_w = Signal(WB)               # its frame word index
        acc_v = Signal()
        # acc_w's tests that the CRC input's masking uses, as flip-flops set with acc_w (from
        # the write's word): acc_w is crc_last; acc_w is header word k (the words of the
        # forced and the Ethernet lanes)
        forced_at = (15, 22, 24, 25, 40, 41, 46)     # TOS, TTL, IP csum, UDP csum, BTH[4]
        acc_last = Signal()
        acc_hw = {k: Signal(name=f"acc_hw{k}")
                  for k in sorted({fo // nb for fo in forced_at} | set(range(-(-14 // nb))))}
        w_en = Signal()                  # a write of w_data's w_mask lanes to frame word w_addr
        w_addr = Signal(WB)
        w_data = Signal(W)
        w_mask = Signal(nb)
        flush = Signal()                 # acc leaves this cycle (with or without a write)
        same = Signal()                  # w_addr is acc_w (set with the write)
        fbase = Signal(CB + 1)           # the frame's first word in the buffer (absolute)
        wabs = Signal(CB + 1)            # acc's buffer word, fbase + acc_w (set with them)
        # the next word the emitter reads (absolute), less the 8 words of slack ``room`` keeps
        rptr8 = Signal(CB + 1, init=(1 << (CB + 1)) - 8)
        # the cycle after a take (the first HDR cycle): the previous frame's last word, if acc
        # still holds it (FLUSH took the descriptor), leaves now, with or without the header's
        # write (``crsel`` is the previous frame's until the end of this cycle, when it is
        # loaded from ``p_crc_end``, still the taken frame's for three cycles after the take)
        ck_ld = Signal()
        m.d.sync += ck_ld.eq(0)
        with m.If(ck_ld):
            m.d.sync += crsel.eq(p_crc_end[2:max(3, lg)])
            with m.If(acc_v):
                m.d.comb += flush.eq(1)
                m.d.sync += acc_v.eq(0)
        with m.If(w_en):
            with m.If(~same):
                m.d.comb += flush.eq(acc_v)
                m.d.sync += [acc_w.eq(w_addr), wabs.eq(fbase + w_addr),
                             acc_last.eq(w_addr == crc_last)]
                m.d.sync += [f.eq(w_addr == k) for k, f in acc_hw.items()]
            m.d.sync += acc_v.eq(1)
            for i in range(nb):
                lane = slice(8 * i, 8 * i + 8)
                m.d.sync += acc[lane].eq(Mux(w_mask[i], w_data[lane],
                                             Mux(same, acc[lane], 0)))
        return types.SimpleNamespace(
            acc=acc, acc_w=acc_w, acc_v=acc_v, forced_at=forced_at, acc_last=acc_last,
            acc_hw=acc_hw, w_en=w_en, w_addr=w_addr, w_data=w_data, w_mask=w_mask, flush=flush,
            same=same, fbase=fbase, wabs=wabs, rptr8=rptr8, ck_ld=ck_ld)

    def _crc_feed(self, m, t):
        """The frame FIFO's write of ``acc`` at its word, and the CRC unit's input: ``acc``'s word
        as it leaves (or PAD's word of zeros, ``in_pad``), registered and masked. Adds ``feed_v``
        and ``in_pad``, which the builder drives in FIN and PAD."""
        (CB, ONES, W, WB, acc, acc_hw, acc_last, acc_v, acc_w, crsel, crc, crc_last, flush,
         forced_at, nb, wabs, wp) = (
            t.CB, t.ONES, t.W, t.WB, t.acc, t.acc_hw, t.acc_last, t.acc_v, t.acc_w, t.crsel,
            t.crc, t.crc_last, t.flush, t.forced_at, t.nb, t.wabs, t.wp)
        # the CRC input, masked and registered here (the unit takes it as it is): acc's word,
        # or PAD's word of zeros (index crc_last); the Ethernet lanes zeroed, the forced lanes
        # ones. The word, its index and the lanes are selected by the state only: they matter
        # only with feed_v (flush, or PAD).
        feed_v = Signal()
        feed_w = Signal(WB)
        feed_last = Signal()             # feed_w is crc_last
        in_pad = Signal()
        # The frame FIFO takes acc at its word (wabs) in every cycle acc holds one, not only as it
        # leaves: the last of those writes is the whole word, and the write's enable, address
        # and data are registers (the take does not reach the block RAM). No reader sees the
        # earlier ones: the emitter reads a word after its last write (:meth:`_emitter`).
        m.d.comb += [wp.addr.eq(wabs[:CB]), wp.data.eq(acc), wp.en.eq(acc_v),
                     feed_w.eq(Mux(in_pad, crc_last, acc_w)),
                     feed_last.eq(in_pad | acc_last)]
        with m.If(flush):
            m.d.comb += feed_v.eq(1)
        cvalid, cdata = Signal(), Signal(W)
        cfirst, clast = Signal(), Signal()
        m.d.sync += [cvalid.eq(feed_v), cfirst.eq(feed_w == 0), clast.eq(feed_last)]
        mword = Signal(W)
        for i in range(nb):
            # (the forced and Ethernet words are header words, never PAD's)
            forced = Const(0, 1)
            for fo in forced_at:
                if fo % nb == i:
                    forced = forced | acc_hw[fo // nb]
            zero = Const(0, 1)
            for wi in range(-(-14 // nb)):                # the Ethernet header's lanes
                if wi * nb + i < 14:
                    zero = zero | acc_hw[wi]
            m.d.comb += mword[8 * i:8 * i + 8].eq(
                Mux(in_pad, 0, Mux(forced, 0xFF, Mux(zero, 0, acc[8 * i:8 * i + 8]))))
        # The unit takes the input shifted by s = nb − r bytes, r = crc_end mod nb (2 + 4·crsel),
        # so that it ends with a word: word k of it is the frame's bytes k·nb − s ..
        # (k + 1)·nb − s − 1, bytes r.. of the previous word (``carry``: its lanes 2 up) and the
        # word's first r; before the frame's first word, ``carry`` holds ``y`` repeated (lane L
        # ``y[L mod 4]``), whose last s bytes lead the register from the unit's initial value
        # to where it starts the Ethernet header. The lanes past the end go into ``carry``,
        # which the frame's last word sets back to ``y``'s.
        y_word = int.from_bytes(bytes(t.crc_y[L % 4] for L in range(nb)), "little")
        carry = Signal(W - 16, init=y_word >> 16)
        with m.If(feed_v):
            m.d.sync += carry.eq(Mux(feed_last, y_word >> 16, mword[16:]))
        both = Cat(Const(0, 16), carry, mword)
        with m.Switch(crsel):
            for v in range(max(1, nb // 4)):
                with m.Case(v):
                    m.d.sync += cdata.eq(both[8 * (2 + 4 * v):8 * (2 + 4 * v) + W])
        m.d.comb += [
            crc.i.valid.eq(cvalid),
            crc.i.payload.data.eq(cdata),
            crc.i.payload.keep.eq(ONES),
            crc.i.payload.first.eq(cfirst),
            crc.i.payload.last.eq(clast),
        ]
        return types.SimpleNamespace(feed_v=feed_v, in_pad=in_pad)

    def _frame_queues(self, m, t):
        """The frames built, waiting for their ICRC (records ``recq``, ICRCs ``icq``), for the
        emitter that sends them (payload, zero pad, ICRC, Ethernet padding: :meth:`_emitter` and
        :meth:`_emitter_fsm`), and the room flag the builder writes by. Adds the queues' ends the
        emitter takes from (``recq``, ``ic_v``, ``ic_d``, ``ic_take``) and ``room``."""
        CB, PB, WB, crc, nb, rptr8, wabs = t.CB, t.PB, t.WB, t.crc, t.nb, t.rptr8, t.wabs
        # ---- frames built, waiting for their ICRC and the emitter ----------------------------
        # (``crc_end`` holds the ICRC's first byte over 4: its low bits are 2)
        rec_layout = data.StructLayout({"base": CB, "data_end": PB, "crc_end": PB - 2,
                                        "words": WB, "cls": 3, "drop": 1})
        # (the records' queue has a registered output for what the emitter's load decides on:
        # that starts from registers; the lane masks and class, only stored, are read from the
        # ring at the head. A record queued while none waits is offered the next cycle)
        m.submodules.recq = recq = Queue(
            rec_layout, self.frames, registered=("base", "data_end", "crc_end", "words", "drop"),
            bypass=True)
        m.submodules.icq = icq = Queue(32, self.frames, buffered=False)
        # The ICRCs come in frame order, each after its frame's record: the oldest, queued or
        # out of the CRC unit this cycle (when none is queued), is the ICRC of the frame the
        # emitter loaded or is loading. One the emitter takes as it comes out is not queued.
        ic_v, ic_d, ic_take = [Signal(w) for w in (1, 32, 1)]
        m.d.comb += [ic_v.eq(icq.o.valid | crc.o.valid),
                     ic_d.eq(Mux(icq.o.valid, icq.o.payload, crc.o.payload)),
                     icq.o.ready.eq(ic_take),
                     icq.i.valid.eq(crc.o.valid & ~(ic_take & ~icq.o.valid)),
                     icq.i.payload.eq(crc.o.payload)]

        # room for the builder's writes: at most C − 8 words held or being assembled, as of
        # the cycle before (the builder's index moves at most 3 words in between)
        room = Signal()
        fill = Signal(CB + 1)
        m.d.comb += fill.eq(wabs - rptr8)
        m.d.sync += room.eq(~fill[CB])
        return types.SimpleNamespace(recq=recq, ic_v=ic_v, ic_d=ic_d, ic_take=ic_take, room=room)

    def _emitter(self, m, t):
        """The emitter's datapath: the frame's lanes per word (payload, ICRC) from registers set
        when it is loaded, the ICRC's arrival (``soon``), two read stages and the output queue
        onto ``tx``. Its parts add what :meth:`_emitter_fsm` sets and reads (the ``e_*``
        registers, ``eaddr``, ``evalid``, ``elast1``, ``occ``, ``issue``, ``rec``, ``soon``,
        ``rec_soon``) and what they share."""
        # its parts, called in the order of their statements
        _add(t, self._emitter_frame(m, t))
        _add(t, self._emitter_start(m, t))
        _add(t, self._emitter_reads(m, t))
        _add(t, self._emitter_output(m, t))

    @staticmethod
    def _cw_reach(cw, L):
        """``cw ≥ L − j`` for j in 0..L − 1, as LUT terms: the bits above the constant's width
        OR-ed, not a carry chain."""
        def ge(k):
            b = k.bit_length()
            return (cw[b:] != 0) | (cw[:b] >= k) if len(cw) > b else cw >= k
        return Cat(*[ge(L - j) for j in range(L)])

    def _icrc_soon(self, t, reach):
        """Whether the oldest ICRC in the CRC unit or its feed comes by the time the frame's
        ICRC word ``cw`` can be read, given ``reach`` (:meth:`_cw_reach` for L + 2): one whose
        last input word leaves ``acc`` in the next cycle (``pend[0]``) comes out in ``L + 2``,
        one whose last word leaves it now (``pend[1]``) in ``L + 1``, one whose last input
        went into the unit ``j`` cycles ago (``pend[j + 2]``) in ``L − j``."""
        return (t.pend & reach).any()

    def _emitter_frame(self, m, t):
        """The loaded frame's registers (``e_*``: its base, last word, ICRC and where its
        payload and ICRC lanes are in its words), set when the emitter loads its record, and
        ``pend``, the CRC unit's ICRCs in flight by age, from which :meth:`_icrc_soon` tells
        whether a frame may start before its ICRC. Adds them."""
        CB, WB, crc, nb = t.CB, t.WB, t.crc, t.nb
        # ---- EMIT: payload, zero pad, ICRC (little-endian), Ethernet padding -------------------
        e_base = Signal(CB)
        e_wlast = Signal(WB)             # the frame's last word
        e_icrc = Signal(32)
        # the frame's lanes per word, from registers set when it is loaded: payload in words
        # before e_dword and in e_dmask of it; the ICRC in e_imask of word e_cw (lanes from
        # crc_end mod nb) and, when it crosses a word, e_imask1 of the next; e_fkeep the last
        # word's keep
        e_dword, e_cw, e_cw1 = [Signal(WB) for _ in range(3)]
        e_reach = Signal(crc.latency + 2)    # :meth:`_cw_reach` of e_cw, set with it
        e_dmask, e_fkeep = [Signal(nb) for _ in range(2)]
        e_imask = Signal(nb + 4)
        # A frame may start before its ICRC when the ICRC is sure to be there by the time the
        # word that carries it is read: the CRC unit has a fixed latency L and no back-pressure,
        # so an ICRC whose last input word went in j cycles ago comes out in L − j cycles
        # (``pend[j]``), and the words before ``e_cw`` are read one a cycle at most. The loaded
        # frame's ICRC is the oldest one not taken (the emitter takes each frame's ICRC before
        # it loads the next record), so when none is queued or coming out, it is the oldest
        # one in the unit. A frame's last word leaving ``acc`` into the feed (FIN, PAD, or the
        # next frame's first HDR cycle) counts one cycle before the unit: a frame may start in
        # that cycle, its words before the last all written (the ICRC word ``cw`` ≥ L + 1 ≥ 2
        # is read at the earliest a cycle after the last word's last write).
        # One whose record was queued early (``early``) counts a cycle sooner again, in FLUSH:
        # its last word leaves ``acc`` in the next cycle (FIN, where ``room`` holds for a frame
        # the emitter loads: every earlier word is read; or the next frame's first HDR cycle);
        # its ICRC word ``cw`` ≥ L + 2 ≥ 3 is read after the last word's last write then too.
        L = crc.latency
        st = t.st
        pend = Signal(L + 2)
        m.d.comb += [
            pend[0].eq(st["FLUSH"] & t.room & t.early),
            pend[1].eq(t.acc_v & t.acc_last & (t.ck_ld | st["FIN"] & t.room
                                                 & (t.recq.i.ready | t.ct)) | st["PAD"]),
            pend[2].eq(crc.i.valid & crc.i.payload.last),
        ]
        if L > 1:
            m.d.sync += pend[3:].eq(pend[2:-1])
        return types.SimpleNamespace(
            e_base=e_base, e_wlast=e_wlast, e_icrc=e_icrc, e_dword=e_dword, e_cw=e_cw, e_cw1=e_cw1,
            e_reach=e_reach,
            e_dmask=e_dmask, e_fkeep=e_fkeep, e_imask=e_imask, pend=pend)

    def _emitter_start(self, m, t):
        """When a cut-through frame may start (``ct_go``, with ``rq_none``/``rq_one``: which
        record it is), and ``soon``: the loaded frame's ICRC is sure to be there by the time
        its ICRC word ``e_cw`` is read. Adds them."""
        recq = t.recq
        # A cut-through frame (no payload, its record queued as its header starts: see
        # :meth:`_builder_states`) may start while the builder still writes it. Once the emitter
        # is at it, every earlier frame's words are read, so ``room`` holds and the builder
        # writes its words one a cycle without a stall; word k is in the ring two cycles after
        # its write (``acc`` writes it as it leaves), and its last word goes into the CRC unit
        # in hdr_last − wcount + 2 cycles from HDR, 1 from FIN. So it may start when the ICRC
        # is sure to be there by the time its word cw is read and two words or more are
        # written: in HDR once wcount ≥ max(2, hdr_last + 2 + L − cw), in FIN when
        # cw ≥ 1 + L (all are written: the builder queues only frames of three words or more
        # so). The builder keeps that as a flag, ``ct_ready`` (:meth:`_builder_states`). The
        # frame at the queue's head is the cut-through one when it is the only record queued
        # (``rq_one``), the loaded frame when none is (``rq_none``): the cut-through frame is
        # the last one queued, and it leaves only after its ICRC, so after its FIN. All of
        # these are registers.
        ct, ct_ready, room = t.ct, t.ct_ready, t.room
        rq_none, rq_one = Signal(init=1), Signal()
        rq_next = (recq.level + (recq.i.valid & recq.i.ready)
                   - (recq.o.valid & recq.o.ready))[:len(recq.level)]
        m.d.sync += [rq_none.eq(rq_next == 0), rq_one.eq(rq_next == 1)]
        ct_go = ct & ct_ready & room

        soon = Signal()                  # for the loaded frame (its ICRC word e_cw)
        m.d.comb += soon.eq(self._icrc_soon(t, t.e_reach) | (ct_go & rq_none))
        return types.SimpleNamespace(rq_one=rq_one, ct_go=ct_go, soon=soon)

    def _emitter_reads(self, m, t):
        """The emitter's two read stages: the word read (``eaddr``, ``evalid``; ``elast1``: it is
        the frame's last), per
        lane whether it is payload, ICRC (and which byte) or zero (``s1data``, ``s1icrc``, set
        as the word is read), its lanes so chosen in stage 1, with the word's ``keep``,
        ``last`` and class. Adds the read's registers and stage 2's lanes (``out_lanes``) with
        their ``keep``/``last``/class."""
        (ONES, W, WB, e_fkeep, e_icrc, e_wlast, nb, rp) = (
            t.ONES, t.W, t.WB, t.e_fkeep, t.e_icrc, t.e_wlast, t.nb, t.rp)
        eaddr = Signal(WB)
        evalid = Signal()
        elast1 = Signal()
        m.d.sync += evalid.eq(0)
        evalid2, edata = Signal(), Signal(W)
        m.d.sync += evalid2.eq(evalid)
        # the lanes of the word in read stage 1, set as it is read (:meth:`_emitter_fsm`)
        s1data, s1icrc = Signal(nb), Signal(nb)
        # the word's lanes are chosen in stage 1, with the ICRC ``e_icrc`` as it stands then:
        # a word that carries ICRC lanes is read no sooner than its frame's ICRC is taken
        # (``soon``), and the next frame's ICRC is taken (at the end of a cycle) no sooner than
        # the cycle after this frame's last word is read. (The ICRC starts 2 bytes past a
        # multiple of 4: lane i carries its byte (i − 2) mod 4.)
        m.d.sync += edata.eq(Cat(*[Mux(s1data[i], rp.data[8 * i:8 * i + 8],
                                       Mux(s1icrc[i], e_icrc.word_select((i - 2) % 4, 8), 0))
                                   for i in range(nb)]))
        ekeep, elast = Signal(nb), Signal()
        e_cls, ecls = [Signal(3) for _ in range(2)]
        m.d.sync += [ekeep.eq(Mux(elast1, e_fkeep, ONES)), elast.eq(elast1), ecls.eq(e_cls)]
        out_lanes = [edata[8 * i:8 * i + 8] for i in range(nb)]
        return types.SimpleNamespace(
            eaddr=eaddr, evalid=evalid, elast1=elast1, evalid2=evalid2, s1data=s1data,
            s1icrc=s1icrc,
            ekeep=ekeep, elast=elast, e_cls=e_cls, ecls=ecls, out_lanes=out_lanes)

    def _emitter_output(self, m, t):
        """The emitter's output: read stage 2's word into the falling-through output queue and
        onto ``tx`` (``tvalid`` from a register of its own), the count of words read and not
        yet sent (``occ``, by ``issue``), and the record at the queue's head with its
        ``rec_soon``. Adds ``occ``, ``issue``, ``rec``, ``rec_soon``."""
        (W, ct_go, ecls, ekeep, elast, evalid, evalid2, lg, out_cls, out_lanes, outq, recq,
         rq_one) = (t.W, t.ct_go, t.ecls, t.ekeep, t.elast, t.evalid, t.evalid2, t.lg, t.out_cls,
                    t.out_lanes, t.outq, t.recq, t.rq_one)
        # the output queue falls through: a word leaving read stage 2 while the queue is empty
        # is offered on ``tx`` at once and queued only if ``tx`` does not take it (the queue's
        # ``o.valid`` is a register: it is empty exactly when it is low)
        sbeat = Signal(beat_layout(W))
        # ``tvalid`` is ``outq.o.valid | evalid2``, kept as a register of its own (the queue
        # holds an entry in the next cycle exactly when its next level is not 0): the port
        # comes straight from a flip-flop
        txv = Signal()
        q_next = Signal()
        m.d.comb += q_next.eq((outq.level - (outq.o.valid & outq.o.ready)
                               + (outq.i.valid & outq.i.ready)) != 0)
        m.d.sync += txv.eq(q_next | evalid)
        m.d.comb += [
            sbeat.data.eq(Cat(*out_lanes)),
            sbeat.keep.eq(ekeep),
            sbeat.last.eq(elast),
            outq.i.valid.eq(evalid2 & (outq.o.valid | ~self.tx.ready)),
            outq.i.payload.beat.eq(sbeat),
            outq.i.payload.cls.eq(ecls),
            self.tx.valid.eq(txv),
            self.tx.payload.eq(Mux(outq.o.valid, outq.o.payload.beat, sbeat)),
            out_cls.eq(Mux(outq.o.valid, outq.o.payload.cls, ecls)),
            outq.o.ready.eq(self.tx.ready),
        ]

        # words queued in ``outq`` or in its two read stages (``outq.level + evalid + evalid2``),
        # kept as a count of its own so that the read's enable starts from one register
        occ = Signal(range(8))
        issue = Signal()                 # a word is read
        m.d.sync += occ.eq(occ + issue - (self.tx.valid & self.tx.ready))

        rec = recq.o.payload
        rec_soon = Signal()              # ``soon`` for the record at the queue's head
        rce = Cat(Const(2, 2), rec.crc_end)
        m.d.comb += rec_soon.eq(self._icrc_soon(t, self._cw_reach(rce >> lg, t.crc.latency + 2))
                                | (ct_go & rq_one))
        # the lanes of its last word: to the ICRC's end, or to 60 bytes
        rec_fkeep = Signal(t.nb)
        m.d.comb += rec_fkeep.eq((Const(2, t.nb + 1) << Mux(rce < wire.MIN_FRAME - 4,
                                                           (wire.MIN_FRAME - 1) % t.nb,
                                                           (rce + 3)[:lg])) - 1)
        return types.SimpleNamespace(occ=occ, issue=issue, rec=rec, rec_soon=rec_soon,
                                     rec_fkeep=rec_fkeep)

    def _issue_lanes(self, m, t, rec_crc_end=None):
        """Set the lanes of the word read now, for read stage 1 (``s1data``: payload, before
        e_dword and in e_dmask of it; ``s1icrc``: the ICRC, in e_imask of words e_cw and
        e_cw1): word ``eaddr`` of the loaded frame, or word 0 of the record being loaded (its
        ``crc_end`` given: the e_* values are loaded with it; its ICRC ends past word 0)."""
        ONES, lg, nb = t.ONES, t.lg, t.nb
        if rec_crc_end is None:
            a = t.eaddr
            m.d.sync += [
                t.s1data.eq(Mux(a < t.e_dword, ONES, Mux(a == t.e_dword, t.e_dmask, 0))),
                t.s1icrc.eq(Mux(a == t.e_cw, t.e_imask[:nb], Mux(a == t.e_cw1, t.e_imask[nb:], 0)))]
        else:
            d_end = t.rec.data_end
            m.d.sync += [
                t.s1data.eq(Mux((d_end >> lg) != 0, ONES, (Const(1, nb + 1) << d_end[:lg]) - 1)),
                t.s1icrc.eq(Mux((rec_crc_end >> lg) == 0,
                                (Const(0xF, nb + 4) << rec_crc_end[:lg])[:nb], 0))]

    def _emitter_fsm(self, m, t):
        """The emitter's FSM: it loads a built frame's record (with its ICRC, or waits for it, or
        starts early when the ICRC is sure to come in time) and reads the frame's words into the
        read stages, back to back across frames."""
        (CB, e_base, e_cls, e_cw, e_cw1, e_dmask, e_dword, e_fkeep, e_icrc, e_imask, e_wlast,
         eaddr, evalid, elast1, ic_d, ic_take, ic_v, issue, lg, nb, occ, rec, rec_soon,
         recq, rp, rptr8, soon) = (
            t.CB, t.e_base, t.e_cls, t.e_cw, t.e_cw1, t.e_dmask, t.e_dword, t.e_fkeep,
            t.e_icrc, t.e_imask, t.e_wlast, t.eaddr, t.evalid, t.elast1, t.ic_d, t.ic_take, t.ic_v,
            t.issue, t.lg, t.nb, t.occ, t.rec, t.rec_soon, t.recq, t.rp, t.rptr8,
            t.soon)

        def take_icrc():
            """The ICRC coming (queued or out of the unit) is the loaded frame's."""
            m.d.comb += ic_take.eq(1)
            m.d.sync += e_icrc.eq(ic_d)

        def emit_load():
            """Take the next built frame's record, with its ICRC if it is there (else WAIT for
            it) and read its first word if the ICRC is there or ``soon``; a dropped frame only
            frees its words, with its ICRC."""
            with m.If(recq.o.valid & (~rec.drop | ic_v)):
                m.d.comb += recq.o.ready.eq(1)
                with m.If(rec.drop):
                    m.d.comb += ic_take.eq(1)
                    m.d.sync += rptr8.eq(rptr8 + rec.words)
                    m.next = "IDLE"
                with m.Else():
                    rec_crc_end = Cat(Const(2, 2), rec.crc_end)
                    m.d.sync += [
                        e_base.eq(rec.base),
                        e_dword.eq(rec.data_end >> lg),
                        e_dmask.eq((Const(1, nb + 1) << rec.data_end[:lg]) - 1),
                        e_cw.eq(rec_crc_end >> lg),
                        t.e_reach.eq(self._cw_reach(rec_crc_end >> lg, t.crc.latency + 2)),
                        e_cw1.eq((rec_crc_end >> lg) + 1),
                        e_imask.eq(Const(0xF, nb + 4) << rec_crc_end[:lg]),
                        e_fkeep.eq(t.rec_fkeep),
                        e_wlast.eq(rec.words - 1),
                        e_cls.eq(rec.cls),
                        eaddr.eq(0),
                    ]
                    with m.If(ic_v):
                        take_icrc()
                        m.next = "RUN"
                    with m.Elif(rec_soon):
                        m.next = "EARLY"
                    with m.Else():
                        m.next = "WAIT"
                    # the first word's read (at ``rec.base``: ``rp.addr`` in IDLE and DRAIN)
                    with m.If((ic_v | rec_soon) & (occ < 5)):
                        m.d.comb += [rp.en.eq(1), issue.eq(1)]
                        m.d.sync += [evalid.eq(1), elast1.eq(rec.words == 1), eaddr.eq(1),
                                     rptr8.eq(rptr8 + 1)]
                        self._issue_lanes(m, t, rec_crc_end)
                        with m.If(rec.words == 1):
                            m.next = "DRAIN"
            with m.Else():
                m.next = "IDLE"

        def read_word():
            # at most 5 words queued or in flight (2 read stages): the queue never refuses one
            with m.If(occ < 5):
                m.d.comb += [rp.en.eq(1), issue.eq(1)]
                m.d.sync += [evalid.eq(1), elast1.eq(eaddr == e_wlast), eaddr.eq(eaddr + 1),
                             rptr8.eq(rptr8 + 1)]
                self._issue_lanes(m, t)
                with m.If(eaddr == e_wlast):
                    m.next = "DRAIN"

        with m.FSM(name="emitter") as efsm:
            m.d.comb += rp.addr.eq(Mux(efsm.ongoing("IDLE") | efsm.ongoing("DRAIN"), rec.base,
                                       e_base + eaddr)[:CB])
            with m.State("IDLE"):
                emit_load()
            with m.State("WAIT"):
                # the frame's record is loaded; it starts in the cycle its ICRC comes, or
                # earlier, as soon as the ICRC is sure to come in time (``soon``)
                with m.If(ic_v):
                    take_icrc()
                    m.next = "RUN"
                    read_word()
                with m.Elif(soon):
                    m.next = "EARLY"
                    read_word()
            with m.State("EARLY"):
                # words before the ICRC's are read while the ICRC is on its way; it comes at
                # the latest in the cycle the word e_cw is read (``soon``), and travels from
                # there with that word
                with m.If(ic_v):
                    take_icrc()
                    m.next = "RUN"
                read_word()
            with m.State("RUN"):
                read_word()
            with m.State("DRAIN"):
                # the last word is in read stage 1 (its lane selections use the e_* values now):
                # the next frame's values are latched at the end of this cycle, and its first
                # word read in this cycle when it may start (back to back)
                emit_load()

    def _frame_record(self, m, t):
        """What the builder keeps of a frame besides ``r``: its counter class and QPN (``r_cls``,
        ``r_qpn``, ``fault``'s payload), the drop of a READ's later responses after a payload fault
        (``rk_v``, ``rk_qpn``, ``kill``), and the record it queues for the emitter. Adds them, with
        the head's decodes (``h_rdr``, ``h_cont``, ``h_cls``)."""
        (CB, bad, crc_end, data_end, fbase, h, out_words, recq) = (
            t.CB, t.bad, t.crc_end, t.data_end, t.fbase, t.h, t.out_words, t.recq)
        # the frame's counter class (see ``outq``) and QPN are kept from the take (its header
        # template ``r`` stays in the descriptor ring's slot)
        r_cls = Signal(3)
        ab = (self.num_qp - 1).bit_length()
        r_qpn = Signal(ab)
        m.d.comb += self.fault.payload.qpn.eq(r_qpn)
        # A READ's responses end at a payload fault (interface.md §7): after a READ response
        # of QP ``rk_qpn`` was dropped for a fault, its later MIDDLE/LAST frames already handed
        # over are dropped too (``kill``: not reported again), until a FIRST/ONLY of that QP
        # starts another READ.
        rk_v = Signal()
        rk_qpn = Signal(ab)
        r_rdr = Signal()                # the frame is a READ response
        kill = Signal()
        h_rdr = h.rdr
        h_cls = h.cls
        # the head's QPN against ``rk_qpn``, registered: a MIDDLE/LAST of that QP (``h_kill``)
        # or a FIRST/ONLY that ends the drop (``h_rkclr``). The head is taken (``head_ok``) no
        # sooner than two cycles after it arrives and is not rewritten while it waits, so the
        # flags are its own; they compare with ``rk_qpn`` as it stands in the next cycle (FAULT
        # sets it to ``r_qpn``, see :meth:`_builder_states`)
        h_kill, h_rkclr = Signal(), Signal()
        t.rk_cmp = lambda q: [h_kill.eq(h.cont & (h.qpn == q)),
                              h_rkclr.eq(h.rdr & ~h.cont & (h.qpn == q))]
        m.d.sync += t.rk_cmp(rk_qpn)
        m.d.comb += [
            recq.i.payload.base.eq(fbase[:CB]),
            recq.i.payload.data_end.eq(data_end),
            recq.i.payload.crc_end.eq(crc_end[2:]),
            recq.i.payload.words.eq(out_words),
            recq.i.payload.cls.eq(r_cls),
            recq.i.payload.drop.eq(bad | kill | t.st["DATA"] & self.rd.resp.payload.err),
        ]
        return types.SimpleNamespace(
            r_cls=r_cls, r_qpn=r_qpn, rk_v=rk_v, rk_qpn=rk_qpn, r_rdr=r_rdr, kill=kill, h_rdr=h_rdr,
            h_kill=h_kill, h_rkclr=h_rkclr, h_cls=h_cls)

    def _builder_flags(self, m, t):
        """The builder's state flags ``st`` (HDR, DATA, FLUSH, FIN, PAD) and ``take`` (DATA takes a
        raw beat), which its FSM drives. Adds these."""
        # the builder's states that the write and the flush decode, as flip-flops set with each
        # transition (the same as the FSM's state): ``w_en``, ``flush`` and the write's
        # selects start from them, not from a decode of the state
        st = {n: Signal(name=f"st_{n.lower()}")
              for n in ("HDR", "CHUNK", "DATA", "FLUSH", "FIN", "PAD")}
        st["IDLE"] = Signal(name="st_idle", init=1)      # (the FSM's reset state)

        take = Signal()                  # DATA takes a raw beat
        # the frame being built has its record queued before FIN: a cut-through frame's in its
        # first HDR cycle, or a frame's in FLUSH with no descriptor ready to follow (then with
        # ``ct_ready`` clear: not cut-through, see :meth:`_builder_states`); cleared as its last
        # word leaves (FIN)
        ct = Signal()
        # ... and it may start now as far as the builder goes (:meth:`_emitter_start`): its words up
        # to the one carrying the ICRC are written, and the ICRC comes, in time
        ct_ready = Signal()
        # the frame taken may be cut-through: no payload, three header words or more, not
        # killed (set at the take); cleared as its first header word is written
        ct_can = Signal()
        # the frame's record was queued as its last raw beat was taken (``early``: the chunk
        # ends the payload, known from DATA's second cycle on; the pad in the payload's last
        # word), so the emitter may load it in FLUSH. ``ep_arm``, a register: a beat taken now
        # with ``last`` would be that beat (not DATA's first cycle, the chunk ends the payload,
        # its last part, no pad word, no fault so far), so the push is ``take & last & ep_arm``
        early = Signal()
        ep_arm = Signal()
        return types.SimpleNamespace(st=st, take=take, ct=ct, ct_ready=ct_ready, ct_can=ct_can,
                                     early=early, ep_arm=ep_arm)

    def _builder_fsm(self, m, t):
        """The builder's FSM: takes a descriptor once its values are ready, writes the header words,
        starts each chunk, takes its raw beats, and queues the frame's record (FIN, PAD and FAULT
        when the frame does not end in FLUSH), setting the state flags ``st`` with each transition.
        Its states are :meth:`_builder_states`; here are the steps they share."""
        bad, chq, data_end, head_ok, padw, parts, pos, st = (
            t.bad, t.chq, t.data_end, t.head_ok, t.padw, t.parts, t.pos, t.st)

        def goto(state):
            m.next = state
            m.d.sync += [f.eq(n == state) for n, f in st.items()]

        def take_packet():
            """Take the next descriptor if its values are ready (its registers:
            :meth:`_take_packet`)."""
            with m.If(head_ok):
                goto("HDR")
            with m.Else():
                goto("IDLE")

        def start_chunk():
            """Take the next chunk if there is one (its registers: :meth:`_chunk_start`)."""
            with m.If(chq.o.valid):
                goto("DATA")
            with m.Else():
                goto("CHUNK")

        # (``c_done``'s, ``parts``' and ``bad``'s values in the next cycle; start_chunk clears
        # it, after this)
        resp = self.rd.resp.payload
        m.d.sync += t.ep_arm.eq((pos == data_end) & ~padw
                                & Mux(t.take & resp.last, parts == 2, parts == 1)
                                & ~bad & ~(t.take & resp.err))
        with m.FSM(name="builder"):
            self._builder_states(m, t, goto, take_packet, start_chunk)
        self._chunk_start(m, t)
        self._take_packet(m, t)

    def _take_packet(self, m, t):
        """The take of a descriptor, where the builder's FSM calls ``take_packet`` with
        ``head_ok`` (IDLE; PAD and FIN without a fault or a pad word; FLUSH at the payload's
        end): ``pop`` from the state flags and registers (not the FSM's state decode), and the
        frame's registers loaded from the head's values."""
        st, rdy = t.st, t.recq.i.ready
        pop_st = Signal()
        m.d.comb += [
            pop_st.eq(st["IDLE"] | ~t.bad & (
                st["PAD"] | t.room & (st["FIN"] & (rdy | t.ct) & ~t.padw
                                      | st["FLUSH"] & t.c_done & (t.early | rdy & ~t.padw)))),
            t.pop.eq(t.head_ok & pop_st),
            t.pktq.o.ready.eq(t.pop),
        ]
        kill_now = t.rk_v & t.h_kill
        with m.If(t.pop):
            m.d.sync += [t.r_cls.eq(t.h_cls), t.r_qpn.eq(t.h.qpn),
                         t.data_end.eq(t.p_data_end), t.crc_hi.eq(t.p_crc_hi),
                         t.hdr_hi.eq(t.p_hdr_hi), t.csum.eq(t.p_csum),
                         t.out_words.eq(t.p_out_words), t.ck_ld.eq(1), t.padw.eq(t.p_padw),
                         t.padcnt.eq(-t.h.paylen),
                         t.wcount.eq(0), t.hlast.eq(t.p_hdr_last == 0),
                         t.hdr_lm1.eq(t.p_hdr_last - 1), t.bad.eq(0),
                         t.ct_can.eq(t.p_nopay & (t.p_hdr_last >= 2) & ~kill_now),
                         t.pos.eq(t.p_hdr_len), t.pos_end.eq(t.p_nopay),
                         t.r_rdr.eq(t.h_rdr), t.kill.eq(kill_now), t.early.eq(0)]
            with m.If(t.h_rkclr):
                m.d.sync += t.rk_v.eq(0)

    def _chunk_start(self, m, t):
        """A chunk's start, where the builder's FSM calls ``start_chunk`` (CHUNK; HDR's last
        word and FLUSH without the payload's end, with ``room``): the chunk's registers loaded
        from the chunk queue's head and ``pos``, enabled from the state flags and registers
        (not the FSM's state decode)."""
        PB, WB, chq, lg, nb, pos, st = t.PB, t.WB, t.chq, t.lg, t.nb, t.pos, t.st
        want = Signal()
        m.d.comb += [want.eq(st["CHUNK"] | t.room & (st["HDR"] & t.hlast & ~t.pos_end
                                                     | st["FLUSH"] & ~t.c_done)),
                     chq.o.ready.eq(want)]
        c = chq.o.payload
        # D = pos − off; raw beat 0's low part goes to word floor(D / nb): before the word of
        # ``pos`` (−1 when D < 0) when off > pos mod nb, and then it writes no byte of the
        # chunk (c_skip)
        d0 = Signal(signed(PB + 1))
        m.d.comb += d0.eq(pos - c.off)
        ce = Signal(PB)
        # (pos + lenm1 + 1, one adder: the 1 as the carry into an extra low bit)
        m.d.comb += ce.eq((Cat(Const(1, 1), pos) + Cat(Const(1, 1), c.lenm1))[1:])
        lastw = Signal(WB)
        m.d.comb += lastw.eq((pos + c.lenm1) >> lg)
        # (with a = pos mod nb: raw beat 0 starts a word early exactly when off > a, and the
        # chunk ends in that first word exactly when off ≤ a and a + lenm1 < nb; both from
        # the low bits only, not from d0 and lastw)
        a_lo, lm1 = pos[:lg], c.lenm1
        with m.If(want & chq.o.valid):
            m.d.sync += [t.parts.eq(c.parts),
                         t.wqm1.eq(d0 >> lg), t.c_skip.eq(c.off > a_lo),
                         t.c_first.eq(1), pos.eq(ce), t.c_lastw.eq(lastw),
                         t.w_last.eq((c.off <= a_lo) & (lm1[lg:] == 0) & ((a_lo + lm1[:lg]) < nb)),
                         t.c_lo.eq(1), t.lo_mask.eq(~((Const(1, nb + 1) << a_lo) - 1)),
                         t.lo_same.eq(a_lo != 0),
                         t.hi_mask.eq((Const(2, nb + 1) << (a_lo + lm1[:lg])[:lg]) - 1),
                         t.rotm.eq(~d0[:lg]), t.ep_arm.eq(0)]

    def _builder_states(self, m, t, goto, take_packet, start_chunk):
        """The builder's states, in its FSM: IDLE takes a descriptor, HDR writes the header words,
        CHUNK and DATA start each chunk and take its raw beats, FLUSH ends a chunk, FIN, PAD and
        FAULT end a frame that does not end in FLUSH. ``goto``, ``take_packet`` and
        ``start_chunk`` are :meth:`_builder_fsm`'s."""
        (acc_hw, acc_last, acc_v, acc_w, bad, c_done, ct, ct_ready, fbase, hdr_last,
         head_ok, hlast, kill, lg, out_words, padw, parts, pos, pos_end, r_qpn, r_rdr, recq, rk_qpn,
         rk_v, room, take, wabs, wcount) = (
            t.acc_hw, t.acc_last, t.acc_v, t.acc_w, t.bad, t.c_done, t.ct, t.ct_ready,
            t.fbase, t.hdr_last, t.head_ok, t.hlast, t.kill, t.lg, t.out_words, t.padw, t.parts,
            t.pos, t.pos_end, t.r_qpn, t.r_rdr, t.recq, t.rk_qpn, t.rk_v, t.room, t.take, t.wabs,
            t.wcount)
        # the cut-through frame's start conditions (see :meth:`_emitter_start`), from registers set
        # at the take, registered in its first HDR cycle: ct_thr = max(2, hdr_last + 2 + L −
        # cw), ct_fin = cw ≥ 1 + L, with cw the word of the frame's ICRC (crc_end / nb)
        # (a cut-through frame has no payload: its ICRC starts at the header's end, so cw is
        # the header's length over nb, a narrower value than crc_end's)
        L = t.crc.latency
        hwb = (-(-MAX_HDR // t.nb)).bit_length()
        cw = t.hdr_len_r >> lg
        ct_thr = Signal(range(-(-MAX_HDR // t.nb) + 4), init=2)
        ct_fin = Signal()
        need = Signal(signed(max(hwb, len(cw)) + 2))
        m.d.comb += need.eq(hdr_last[:hwb] + 2 + L - cw)

        with m.State("IDLE"):
            take_packet()
        with m.State("HDR"):
            # header words 0 .. hdr_last (the template's bytes past the header are not written)
            with m.If(wcount == 0):
                m.d.sync += [ct_thr.eq(Mux(need < 2, 2, need)), ct_fin.eq(cw >= 1 + L)]
            with m.If(room):
                m.d.sync += [wcount.eq(wcount + 1), hlast.eq(wcount == t.hdr_lm1),
                             t.ct_can.eq(0)]
                # cut-through: a frame without payload, of three header words or more, has
                # its record queued as its first word is written (``ct``), so the emitter may
                # start it before its last word is written (:meth:`_emitter_start`); ``ct_ready``
                # is its condition for the next cycle: wcount ≥ ct_thr in HDR (ct_thr ≥ 2,
                # set in the first HDR cycle), cw ≥ 1 + L in FIN (``ct_fin``)
                with m.If(t.ct_can & recq.i.ready):
                    m.d.sync += ct.eq(1)
                m.d.sync += ct_ready.eq(Mux(hlast, ct_fin, wcount + 1 >= ct_thr))
                with m.If(hlast):
                    with m.If(pos_end):
                        goto("FIN")
                    with m.Else():
                        start_chunk()
        with m.State("CHUNK"):
            start_chunk()
        with m.State("DATA"):
            # (the beat's take, ``take``, below)
            with m.If(take & self.rd.resp.payload.last & (parts == 1)):
                goto("FLUSH")
        with m.State("FLUSH"):
            self._flush_state(m, t, goto, take_packet, start_chunk)
        with m.State("FIN"):
            # the last word leaves acc; the frame's record is queued (its ICRC follows), unless
            # it was queued already (``ct``: cut-through, or in FLUSH)
            with m.If(room & (recq.i.ready | ct)):
                m.d.sync += [ct.eq(0), ct_ready.eq(0), acc_v.eq(0), acc_w.eq(0),
                             fbase.eq(fbase + out_words),
                             wabs.eq(fbase + out_words)]
                # (acc_w's tests matter only once a write sets them with acc_w again)
                m.d.sync += [acc_last.eq(0)] + [f.eq(k == 0) for k, f in acc_hw.items()]
                with m.If(padw):            # (acc_w is the word of data_end − 1)
                    goto("PAD")             # the pad lies in a word of its own
                with m.Elif(bad):
                    goto("FAULT")
                with m.Else():
                    take_packet()
        with m.State("PAD"):
            # the word of pad bytes the payload did not reach: zeros, to the CRC only
            with m.If(bad):
                goto("FAULT")
            with m.Else():
                take_packet()
        with m.State("FAULT"):
            m.d.comb += self.fault.valid.eq(1)
            with m.If(self.fault.ready):
                with m.If(r_rdr):
                    m.d.sync += [rk_v.eq(1), rk_qpn.eq(r_qpn)] + t.rk_cmp(r_qpn)
                goto("IDLE")

    def _flush_state(self, m, t, goto, take_packet, start_chunk):
        """FLUSH, the builder's state after a chunk's last raw beat: that beat's upper bytes, if
        any in the next word, are written; then the next chunk, or the frame's end."""
        with m.If(t.room):
            with m.If(t.c_done):
                # the common end, without FIN: the record is queued now (or was, ``early``,
                # with the drop mark of a fault) and the next descriptor taken; acc's word (the
                # frame's last) leaves in the next frame's first HDR cycle (``ck_ld``). A pad
                # word of its own, a fault, no room for the record or no descriptor ready (the
                # record queued here all the same, ``ct`` set: the write does not wait for
                # ``head_ok``) go to FIN.
                with m.If(t.head_ok & ~t.bad & (t.early | t.recq.i.ready & ~t.padw)):
                    m.d.sync += t.fbase.eq(t.fbase + t.out_words)
                    take_packet()
                with m.Else():
                    with m.If(t.early | t.recq.i.ready & ~t.padw & ~t.bad):
                        m.d.sync += [t.ct.eq(1), t.ct_ready.eq(0)]
                    goto("FIN")
            with m.Else():
                start_chunk()

    def _write_select(self, m, t):
        """The write into ``acc``, selected by the state flags only (HDR: the header template's
        word; otherwise the gather's), a raw beat's take, the flushes of FIN and PAD, and the load
        of ``r`` and ``rpath``'s row 0 from the queue head outside HDR."""
        (ONES, W, WB, bad, c_first, c_lastw, c_lo, c_skip, feed_v, flush, funnel, gmask, h, hdr,
         hdr_words, hkeep, hlast, in_pad, lo_same, parts, prev, r, recq, room, same, st,
         take, w_addr, w_data, w_en, w_last, w_mask, wcount, wqm1) = (
            t.ONES, t.W, t.WB, t.bad, t.c_first, t.c_lastw, t.c_lo, t.c_skip, t.feed_v, t.flush,
            t.funnel, t.gmask, t.h, t.hdr, t.hdr_words, t.hkeep, t.hlast, t.in_pad, t.lo_same,
            t.parts, t.prev, t.r, t.recq, t.room, t.same, t.st, t.take, t.w_addr, t.w_data,
            t.w_en, t.w_last, t.w_mask, t.wcount, t.wqm1)
        # the write's word, lanes and data are selected by the state only (HDR: the header
        # template's word ``wcount``; otherwise the gather's), not by its enable: ``w_en`` (the
        # take of a raw beat, ``room``) reaches ``acc`` only as its load enable
        in_hdr = st["HDR"]
        m.d.comb += [
            in_pad.eq(st["PAD"]),
            self.rd.resp.ready.eq(st["DATA"] & room),
            take.eq(st["DATA"] & room & self.rd.resp.valid),
            w_en.eq(room & st["HDR"] | take & ~(c_first & c_skip) | room & st["FLUSH"] & w_last),
        ]
        # a raw beat taken (DATA)
        with m.If(take):
            m.d.sync += [prev.eq(self.rd.resp.payload.data), wqm1.eq(wqm1 + 1),
                         w_last.eq((wqm1 + 1)[:WB] == c_lastw), c_first.eq(0)]
            with m.If(~(c_first & c_skip)):
                m.d.sync += c_lo.eq(0)
            with m.If(self.rd.resp.payload.err):
                m.d.sync += bad.eq(1)
            with m.If(self.rd.resp.payload.last):
                m.d.sync += parts.eq(parts - 1)
        with m.If(st["FIN"] & room & (recq.i.ready | t.ct)):
            m.d.comb += flush.eq(1)
        # the record's push (:meth:`_builder_states`: HDR's cut-through one, FLUSH's, FIN's),
        # from the state flags and registers, and DATA's (``early``) at the take of the
        # payload's last raw beat, its fault mark with it (:meth:`_frame_record`)
        early_push = Signal()
        m.d.comb += early_push.eq(take & self.rd.resp.payload.last & t.ep_arm)
        m.d.comb += recq.i.valid.eq(room & recq.i.ready & (
            st["FLUSH"] & t.c_done & ~t.padw & ~bad & ~t.early | st["FIN"] & ~t.ct
            | st["HDR"] & t.ct_can | early_push))
        with m.If(early_push & recq.i.ready):
            m.d.sync += t.early.eq(1)
        with m.If(st["PAD"]):
            m.d.comb += feed_v.eq(1)
        m.d.comb += [
            w_addr.eq(Mux(in_hdr, wcount, wqm1)),
            w_mask.eq(Mux(in_hdr, Mux(hlast, hkeep, ONES), gmask)),
            w_data.eq(Mux(in_hdr, hdr.word_select(wcount[:max(1, (hdr_words - 1).bit_length())]
                                                  if hdr_words > 1 else 0, W), funnel[:W])),
            same.eq(~in_hdr & c_lo & lo_same),
        ]
        with m.If(~in_hdr):
            m.d.sync += t.rpath_a.eq(t.path_row0)
        if self._shared_path():
            # the header words that read the path's row-1 registers, up to the UDP source
            # port's, are not all written (the last is written in a cycle with ``room``)
            m.d.comb += t.path_busy.eq(in_hdr & ((wcount < 35 // t.nb)
                                                 | (wcount == 35 // t.nb) & ~room))
        else:
            with m.If(~in_hdr):
                m.d.sync += t.rpath_b.eq(t.path_b)

    def _gather_reads(self, m, lg):
        """The payload reads of the frame's gather chunks (see the comment below). Returns
        log2 of a read part's span in bytes, the chunk-metadata queue (``chq``) the builder
        takes the beats by, and the chunk stream after its input queue."""
        # ---- gather: chunk reads are issued as soon as the engine hands them over, split at
        # multiples of ``read_beats`` bus words, so that the next part of a long chunk is
        # requested while the previous one drains (the host-memory master issues a burst only
        # when the client's response buffer has room for all of it). The builder takes the
        # beats in order (the read client returns them in request order); the parts of a chunk
        # are aligned to the bus, so their beats are exactly the chunk's beats.
        RBB = self.read_beats.bit_length() - 1 + lg      # log2 of a part's span in bytes
        meta = data.StructLayout({"off": lg, "lenm1": 13, "parts": 13 - RBB + 2})
        # (registered output: the chunk's start below begins from registers)
        m.submodules.chq = chq = Queue(meta, 4)
        issuing = Signal()               # a chunk's later parts are being requested
        # a later part starts on a part boundary (s_addr, its low RBB bits zero) and its length
        # and last flag are kept in registers (s_len, s_final, s_plen); a chunk's first part is
        # sized from the chunk. ``issuing`` only selects between the two at the end.
        s_addr = Signal(64)
        s_len = Signal(13)               # bytes of the chunk still to request
        s_final = Signal()               # s_len fits in one part
        s_plen = Signal(13)              # the next part's length: min(s_len, 2**RBB)
        # The chunk enters through a queue that also carries its first part's length and
        # last flag, the parts it spans and, for a chunk of several parts, the bytes after the
        # first part and whether they fit in one part, all computed before the queue: the
        # chunk is taken (``ready``) when its last part is requested, and that test and the
        # next part's registers then start at the queue's entry, not at chained adders and
        # comparisons on the chunk.
        cin_layout = data.StructLayout({"chunk": chunk_layout, "final": 1, "plen": 13,
                                        "rest": 13, "rest_final": 1,
                                        "parts": meta.members["parts"]})
        # (a two-entry queue in LUT RAM: ``ready`` and ``valid`` are registers, the entry is read
        # combinationally, with no copy in flip-flops)
        m.submodules.cin = cin = Queue(cin_layout, 2, buffered=False)
        i_room = Signal(RBB + 1)
        i_final = Signal()
        i_rest = Signal(13)
        # parts spanned by the chunk: only the address bits below a part boundary matter
        i_span = Signal(14)
        m.d.comb += i_span.eq(self.chunk.payload.addr[:RBB] + self.chunk.payload.len - 1)
        m.d.comb += [
            i_room.eq((1 << RBB) - self.chunk.payload.addr[:RBB]),
            i_final.eq(self.chunk.payload.len <= i_room),
            i_rest.eq(self.chunk.payload.len - i_room),
            cin.i.payload.chunk.eq(self.chunk.payload),
            cin.i.payload.final.eq(i_final),
            cin.i.payload.plen.eq(Mux(i_final, self.chunk.payload.len, i_room)),
            cin.i.payload.rest.eq(i_rest),
            cin.i.payload.rest_final.eq(i_rest <= (1 << RBB)),
            cin.i.payload.parts.eq((i_span >> RBB) + 1),
            cin.i.valid.eq(self.chunk.valid),
            self.chunk.ready.eq(cin.i.ready),
        ]
        chunk = cin.o
        c_addr, c_len0 = chunk.payload.chunk.addr, chunk.payload.chunk.len
        c_final = chunk.payload.final
        c_plen = chunk.payload.plen
        final = Signal()
        part_len = Signal(13)
        m.d.comb += [final.eq(Mux(issuing, s_final, c_final)),
                     part_len.eq(Mux(issuing, s_plen, c_plen))]
        # the next part's address and length (used when this part is not the chunk's last),
        # and whether that part is the last: s_len − 2**RBB ≤ 2**RBB is s_len ≤ 2**(RBB+1),
        # a comparison on the register beside the subtraction rather than after it
        # (one incrementer, behind the address the request carries)
        a_sel = Signal(64)
        n_addr_hi = Signal(64 - RBB)
        n_len = Signal(13)
        n_final = Signal()
        m.d.comb += [a_sel.eq(Mux(issuing, s_addr, c_addr)), n_addr_hi.eq(a_sel[RBB:] + 1),
                     n_len.eq(Mux(issuing, s_len - (1 << RBB), chunk.payload.rest)),
                     n_final.eq(Mux(issuing, s_len <= (2 << RBB), chunk.payload.rest_final))]
        m.d.comb += [
            self.rd.req.payload.addr.eq(a_sel),
            self.rd.req.payload.len_bytes.eq(part_len),
            self.rd.req.payload.tag.eq(0),
            self.rd.req.valid.eq(chunk.valid & (issuing | chq.i.ready)),
            chq.i.payload.off.eq(c_addr[:lg]),
            chq.i.payload.lenm1.eq(c_len0 - 1),
            chq.i.payload.parts.eq(chunk.payload.parts),
            chq.i.valid.eq(chunk.valid & ~issuing & self.rd.req.ready),
        ]
        with m.If(self.rd.req.valid & self.rd.req.ready):
            with m.If(final):
                m.d.comb += chunk.ready.eq(1)
                m.d.sync += issuing.eq(0)
            with m.Else():
                m.d.sync += [issuing.eq(1), s_addr.eq(Cat(Const(0, RBB), n_addr_hi)),
                             s_len.eq(n_len), s_final.eq(n_final),
                             s_plen.eq(Mux(n_final, n_len, 1 << RBB))]
        return RBB, chq, chunk
