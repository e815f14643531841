"""RX Parse: width-generic RoCEv2 frame parser with a store-and-forward ICRC verdict.

Data path
---------
::

    i ──► header capture (74 bytes, kept once) ─► V1 fields/checks ─► V2 ─► desc queue (d) ─┐
     │           └──── raw metadata fields, at the last beat ─────────► desc queue (m) ───────┤
     │                                            V2 ─► V3 reason ─┐                         │
     ├──► ICRC (masked bytes, rnic.crc.CRC32, residue check) ─────┴──► verdict ─────────────┤
     └──► frame buffer (lib.memory, ring of beats) ◄── read side ◄──────────────────────────┘
                                                          │
                                  meta queue ◄────────────┤ (meta formed from m + opcode flags)
                                  payload realign ► payload queue

* Every beat of a frame (up to ``ceil(4200 / lanes)`` beats) is written into a ring of beats
  ``depth`` = next power of two ≥ ``buffer_frames · ceil(4200 / lanes)`` (``buffer_frames`` = 1:
  1,024 beats at W=64, four DP16KD). Beats of a frame longer than 4,200 bytes past that are not
  written, so such a frame never stalls the input. The read side releases a frame's beats as it
  reads them (all of a dropped frame's at once), so a maximum frame's space is free again while
  it drains and one maximum frame of buffer keeps up with back-to-back maximum frames.
* The 74 header bytes (Ethernet, IPv4, UDP, BTH and up to RETH+ImmDt) are captured once, in
  ``hdr``, as their beats arrive (lanes past ``keep`` captured as 0; past the frame's end
  the bytes a runt's verdict reads are 0, cleared while a frame's first beat is awaited, and
  the others keep the frame before's, which no check and no meta of the frame reads); a
  byte of beat j stays until the next frame's beat j is awaited; the destination MAC, EtherType
  and UDP destination port bytes as one bit each, the byte equal to its reference (``local_mac``
  compared as its bytes arrive). In the cycle after the last beat
  ``hdr`` still holds the frame's header (the next frame's first beat is written at that
  cycle's end), so V1 reads it there: no snapshot. Three pipeline stages check it (V1: fields,
  equality checks, the frame's and the UDP length against the IPv4 total length, the checksum
  in three partial sums; V2: the UDP length against the headers, payload length and span, the
  checksum's sum; V3: the checksum verdict) and V3
  has the header drop reason, four cycles after the last beat, in the cycle of its ICRC
  verdict at W <= 128 (:func:`icrc_latency` + 1 = 4 cycles; 5 above, the reason delayed).
* The metadata is not carried through these stages: its raw fields (the BTH fields, the IPv4
  source and the 20 bytes after the BTH: :data:`mh_layout`, 252 bits) are written once into
  the descriptor queue's header RAM ``h`` at the frame's handle, from ``hdr``, one word a
  cycle from the cycle after the last beat (:class:`_SplitQueue`): four words of 63 bits at
  W <= 128 (two DP16KD at 128 entries; a DP16KD gives 36 bits a cycle), two of 126 at W=256,
  one at W=512. V2 writes the ``d`` part (payload length and where the payload sits, 36 bits
  at W=64: one DP16KD) into its ``d`` RAM, one entry per frame. Only the ``d`` part travels
  to the read side's head registers; the take pushes the handle into the meta queue with the
  payload length and the opcode's RETH/ImmDt/IETH/AETH flags, which travel with the frame's
  drop reason and verdict. The meta stage loads the queue's head and reads the header RAM at
  its handle, a word a cycle, each but the last into a register (the BTH fields in the first);
  the ``meta`` port's ``rx_meta_layout`` is formed from the stage's registers and the RAM's
  output (fields of absent headers 0).
* The ICRC runs over the frame as it arrives: the 14 Ethernet bytes are fed as zeros with an
  initial state standing for the 8 bytes of 0xFF (``crc_init_skipping``), the variant fields
  (IPv4 TOS, TTL, checksum; UDP checksum; BTH byte 4) are forced to 0xFF, and the CRC stops at
  the end of the IPv4 datagram, byte 14 + total length (``keep`` ends there; the beats after it
  are not fed, the one holding the end is fed with the frame's last beat), so the received
  ICRC, the datagram's last 4 bytes, is included, bytes after the datagram (Ethernet padding, a
  trailer) are not, and a good frame leaves the CRC-32 residue ``0x2144DF1C``.
* The verdict (lowest reason of interface.md §4.5 wins: 1 MAC error, 2 not for us, 3 bad
  IPv4/UDP or too long, 4 bad ICRC, 5 bad BTH) is final :func:`icrc_latency` + 1 cycles after
  the last beat (the CRC's input is registered once). Dropped frames are counted then and skipped
  by the read side (their buffer space is released without reading them); nothing of them is
  ever forwarded.
* The read side takes one descriptor and its verdict, pushes the metadata and streams the payload
  beats out of the buffer, realigned with ``{cur, prev} >> 8·sel``. The payload offset is
  42 + header length, always 2 mod 4, so ``sel`` is never 0 and a frame needs at most as many
  buffer reads as it had beats on the wire: the read side keeps up with back-to-back frames.
* Idle path, the same results sooner when nothing is queued before a frame: V2's ``d`` part
  goes straight into the head queue (the descriptor queue counts it as read), the verdict is
  used in the cycle it comes out (and popped from the verdict queue a cycle later), the meta is
  pushed in the take's cycle and the idle meta stage reads its header RAM word 0 then, so the
  load reads word 1 at once. Queued frames take the queues, as above.

Checks (counter of interface.md §4.5; the lowest applicable number is counted)
------------------------------------------------------------------------------
1. ``user`` on the last beat (MAC error).
2. ``drop_all``; destination MAC ≠ ``local_mac``; EtherType ≠ 0x0800; IPv4 destination ≠
   ``local_ip``; protocol ≠ 17; UDP destination port ≠ 4791.
3. IPv4 version ≠ 4, IHL ≠ 5, MF or a fragment offset, bad header checksum; UDP length < 8 or
   ≠ total length − 20; frame length < max(60, 14 + total length) (a frame truncated inside its
   datagram, or a runt shorter than 60 bytes); frame longer than 4,200 bytes.
4. Bad ICRC.
5. TVer ≠ 0; P_Key low 15 bits ≠ 0x7FFF; an opcode not in :data:`rnic.opcodes.OPCODES` (UC,
   UD, CNP, 0x15, 0x18–0x1F …); UDP length < 8 + BTH/extended headers + PadCnt + 4 (a frame
   shorter than its headers, or PadCnt larger than the bytes after the headers).

The IPv4 total length, not the frame length, ends the datagram and its ICRC (interface.md §3):
bytes after it (Ethernet padding up to 60 bytes, a trailer of any length within 4,200 bytes) are
ignored, so such a frame gives the same metadata, payload, verdict and counters as its datagram
padded to 60 bytes; they are buffered with the frame and never read into the payload.
READ and atomic requests and every RC response opcode pass (with their payload bytes, if any);
WRITE length and PadCnt-vs-opcode rules are the PSN stage's. Header bytes past the end of a short
frame read as 0. The UDP checksum is not checked. ``payload_len`` = UDP length − 8 − header
length − PadCnt − 4.

Throughput and stalls
---------------------
One beat per cycle in, with back-to-back frames of any length: ``i.ready`` falls only when the
frame buffer (or the descriptor queue, ``slots`` frames) is full because ``meta``/``payload``
are back-pressured. ``slots`` covers the minimum (60-byte) frames that arrive while the read
side drains the buffer's maximum frames, and 16 more for those in the check stages and the
read side's pipeline (``buffer_frames · ceil(4200 / lanes) / ceil(60 / lanes) + 16``), then
every entry the descriptor RAMs hold (120 by default at every width), so any mix of short
frames arriving while a maximum frame drains fits; only back-pressure or a flood of runts
shorter than 60 bytes (which a MAC does not deliver) can fill it first.

Ordering guarantee
------------------
``meta`` entries and payload frames come in the same order (frame order on the wire, dropped
frames removed). Once every earlier meta has been taken, a frame's meta is offered no later
than its first payload beat: with one header word (W=512) its meta enters the meta queue
(5 entries, then the meta stage) at least two cycles before that beat; with more, where a meta
is offered at most every second (W=256) or fourth (W <= 128) cycle, the frame's first payload
beat waits until its meta has been offered. A frame with ``payload_len`` 0 has a meta and no
payload beats. The meta of the next frame may be offered while the payload of the current one
is still streaming. The payload of a frame never waits for its meta to be taken, so a consumer
may take meta then payload, or both independently.

Latency (cycles, idle outputs, measured by ``tb/blocks/cocotb_rx_parse.py``): see
:func:`rx_parse_latency`.
"""

import types

from amaranth.hdl import Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .. import wire
from ..crc import CRC32, crc_init_skipping
from ..ifaces import NUM_COUNTERS, Counter, bth_fields, rx_meta_layout
from ..opcodes import OPCODES, opcode_info
from ..parts import add as _add
from ..stream import BeatStream, BypassFIFO, Queue, beat_layout, check_width

__all__ = ["RxParse", "rx_parse_latency", "HDR_BYTES", "PAYLOAD_OFFSETS", "ICRC_RESIDUE"]

#: Header bytes captured: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ImmDt 4.
HDR_BYTES = 74
_IP, _UDP, _BTH, _EXT = 14, 34, 42, 54
#: zlib.crc32(m + crc32(m).to_bytes(4, "little")) for any m.
ICRC_RESIDUE = 0x2144DF1C
#: Header lengths (BTH + extended headers) of the known RC opcodes, one ``sel`` code each.
HDR_LENS = sorted({row.hdr_len for row in OPCODES.values()})
#: Byte offset of the payload in the frame for each code.
PAYLOAD_OFFSETS = [_BTH + h for h in HDR_LENS]
# Bytes cleared while a frame's first beat is awaited: those a runt's reason-2 checks read
# (IPv4 protocol and destination), so that past its end they read as 0.
_RUNT_CLEAR = (_IP + 9, _IP + 16, _IP + 17, _IP + 18, _IP + 19)
# Bytes the ICRC sees as 0xFF (IPv4 TOS, TTL, checksum; UDP checksum; BTH FECN/BECN/Resv6).
_ICRC_FF = (_IP + 1, _IP + 8, _IP + 10, _IP + 11, _UDP + 6, _UDP + 7, _BTH + 4)


def icrc_latency(width):
    """Cycles from the ICRC checker's last input to its verdict: the least of the checker at
    ``width`` (2, 3 above W=128) and one register after its residue compare, so the verdict
    meets the header's drop reason (V3, in the same cycle at W <= 128, one register later
    above) from registers."""
    return 3 + (width > 128)


def rx_parse_latency(width):
    """Latencies in cycles of :class:`RxParse` with idle outputs (always ready) and nothing
    queued before the frame.

    ``meta``: from the cycle the last beat of a frame is accepted on ``i`` to the cycle its meta
    is first offered; ``payload``: to the cycle its first payload beat is offered (both measured
    by the benchmark of ``tb/blocks/cocotb_rx_parse.py``); ``stat``: to the cycle the
    drop-reason strobe is high (bit 0 is one cycle after the last beat). The verdict comes out
    ``crc`` = :func:`icrc_latency` + 1 cycles after the last beat (the ICRC checker's input is
    registered once; 4 at W <= 128, 5 above) and is used in its cycle; the head descriptor
    (written by V2 three cycles after the last beat, straight into the head queue when nothing
    is queued) is there 4 cycles after the last beat. The frame is taken when both are there;
    its meta is pushed in the take's cycle, offered by the (empty) meta queue in the next and
    loaded into the meta stage then, which has its header RAM words but the last already (one
    word: none; two: word 0, read at the pushed handle; four: words 0 to 2, each read a cycle
    after its write) and reads the last at the load, offering the meta in the next cycle; the
    buffer's two first reads, its output register and the payload queue take four.
    """
    crc = icrc_latency(width) + 1           # + the register in front of the CRC
    take = max(4, crc)
    return {"meta": take + 2, "payload": take + 4, "stat": crc + 1}


def _h_words(width):
    """Words of the header RAM (:class:`RxParse`'s ``h_words``): as many as a minimum frame
    has beats, up to 4."""
    beats = -(-wire.MIN_FRAME // (width // 8))
    return 4 if beats >= 4 else (2 if beats >= 2 else 1)


#: The metadata's raw fields, written once into the descriptor queue's header RAM after the
#: last beat and read by the frame's handle when its meta is offered: the BTH fields (opcode,
#: SE, PadCnt, destination QP, AckReq, PSN), the IPv4 source and the 20 bytes after the BTH
#: (RETH, ImmDt, IETH, AETH, whichever are present): 252 bits, in ``h_words`` words. The order
#: matters where a word is written late (see ``RxParse._raw_metadata``): the BTH fields and
#: the PSN lie in the first 63 bits, the IPv4 source in the first 126.
mh_layout = data.StructLayout({
    **{k: v for k, v in bth_fields.items() if k != "psn"},
    "psn": bth_fields["psn"],
    "src_ip": 32,
    "ext": 8 * (HDR_BYTES - _EXT),
})


def _mq_layout(hbits):
    """The meta queue's entry: the opcode's flags (RETH, AETH, ImmDt or IETH), the payload
    length and the frame's handle (``hbits`` bits) in the header RAM."""
    return data.StructLayout({"fl": 3, "payload_len": 13, "handle": hbits})


class _SplitQueue(Elaboratable):
    """An in-order queue (``SyncFIFOBuffered`` at its read side) of frames whose entries are
    written in two parts at different times, each into a block RAM of its own. An entry is
    pushed at its frame's last beat (``a_en``: it gets the next handle, its index); part ``b``
    is written later (``b_en``), and the entry is readable once it is. The ``b`` parts are read
    in order into ``r_b`` (``r_rdy``/``r_en``); while none is held (``b_empty``) the writer may
    take a ``b`` part itself (``b_byp`` with ``b_en``), and the entry counts as read. A second
    pointer, ``a_idx``, names the oldest entry not yet taken (``a_next`` moves it), which must
    be one already read into ``r_b``: its handle.

    Part ``h`` is ``h_words`` words of ``h_bits`` bits, word ``w`` of an entry at address
    ``{handle, w}``, written from ``h_data`` (``h_words`` words side by side) ``w`` + 1 cycles
    after the push, one word a cycle, word ``w`` from ``h_data`` of that cycle. A push while
    the words of the one before are still being written (but for its last) gets no ``h`` part:
    the entries pushed fewer than ``h_words`` cycles apart are frames the reader never
    reads (RX Parse: runts, always dropped). A word is read by address (``h_addr``, ``h_en``:
    on ``r_h`` in the next cycle, held while ``h_en`` is low); ``f_valid`` and ``f_addr`` (from
    the writer's registers) name the word written in the cycle before when it is not its
    entry's last, for a reader that follows the writes. An entry's ``h`` part stays until
    ``margin`` more entries than ``depth`` were pushed after it. The writer never holds more
    than ``depth`` entries (not checked here: RX Parse's slot count bounds them); ``b`` is
    written in every cycle at its write pointer (a free slot), so its strobe only moves the
    pointer.
    """

    def __init__(self, b_shape, h_bits, h_words, depth, margin):
        if h_words not in (1, 2, 4):
            raise ValueError(f"h_words must be 1, 2 or 4, not {h_words!r}")
        self.abits = (depth + margin).bit_length()  # 2^abits > depth + margin: a held entry
                                                    # is never at a write pointer
        self.h_words = h_words
        self.wbits = h_words.bit_length() - 1
        self.hbits = self.abits + self.wbits        # header RAM address {handle, word}
        self.h_bits = h_bits
        self.h_data = Signal(h_bits * h_words)
        self.a_en = Signal()
        self.b_data = Signal(b_shape)
        self.b_en = Signal()
        self.b_byp = Signal()
        self.b_empty = Signal()
        self.r_b = Signal(b_shape)
        self.r_h = Signal(h_bits)
        self.r_rdy = Signal()
        self.r_en = Signal()
        self.a_next = Signal()
        self.a_idx = Signal(self.abits)
        self.h_addr = Signal(self.hbits)
        self.h_en = Signal()
        # the word the writer wrote in the cycle before, if not an entry's last: ``f_valid``,
        # at address ``f_addr`` (from the writer's registers; the reader may follow the writes)
        self.f_valid = Signal()
        self.f_addr = Signal(self.hbits)

    def elaborate(self, platform):
        m = Module()
        n = 1 << self.abits
        hw = self.h_words
        # ``no_rw_check``: the read address ``c`` holds an entry whose ``b`` part is written,
        # the write address ``pb`` a free slot, and fewer than ``n`` entries are ever held (at
        # most ``depth`` < ``n``), so a read never meets a write and the block RAMs need no
        # read-during-write logic (yosys would emulate it with a register on every data bit).
        # ``mem_h``'s read address names an entry taken at most ``margin`` entries ago, which
        # the write pointer reaches only after ``depth + margin`` < ``n`` more pushes; its words
        # are written before the entry can be taken (RX Parse takes a frame 4 or more cycles
        # after its last beat and reads word ``w`` no sooner than ``w`` cycles after the
        # take), and the words written are the newest entry's, not yet taken; a word read as
        # it is written (``f_addr``) is read a cycle after its write.
        m.submodules.mem_b = mem_b = Memory(shape=len(self.b_data.as_value()), depth=n,
                                            init=[], attrs={"no_rw_check": 1})
        m.submodules.mem_h = mem_h = Memory(shape=self.h_bits, depth=n * hw,
                                            init=[], attrs={"no_rw_check": 1})
        wh, rh = mem_h.write_port(), mem_h.read_port(domain="sync")
        pa, pb, c = Signal(self.abits), Signal(self.abits), Signal(self.abits)
        ca = Signal(self.abits)
        wb = mem_b.write_port()
        rb = mem_b.read_port(domain="sync")
        # entries with both parts written and not yet read into r_b; the "not empty"
        # flag is a register (the next level compared), as in ``RoomFIFO``
        level = Signal(self.abits + 1)
        inner_rdy = Signal()
        do_read = Signal()
        b_in = Signal()                     # a ``b`` part that enters the level (not bypassed)
        m.d.comb += [do_read.eq(inner_rdy & (~self.r_rdy | self.r_en)),
                     b_in.eq(self.b_en & ~self.b_byp),
                     self.b_empty.eq(~inner_rdy & ~self.r_rdy)]
        m.d.comb += [
            wb.addr.eq(pb), wb.data.eq(self.b_data), wb.en.eq(1),
            rb.addr.eq(c), rb.en.eq(do_read),
            self.r_b.eq(rb.data),
            rh.addr.eq(self.h_addr), rh.en.eq(self.h_en), self.r_h.eq(rh.data),
            self.a_idx.eq(ca),
        ]
        # The ``h`` writer: word ``wc`` of entry ``hh`` in each cycle ``wc`` < ``hw`` (``wc``
        # = ``hw``: idle). A push starts it (word 0 in the next cycle) when it is idle or on
        # its last word.
        wc = Signal(range(hw + 1), init=hw)
        hh = Signal(self.abits)
        words = [self.h_data[k * self.h_bits:(k + 1) * self.h_bits] for k in range(hw)]
        wdata = Signal(self.h_bits)
        with m.Switch(wc):
            for k in range(hw):
                with m.Case(k):
                    m.d.comb += wdata.eq(words[k])
        m.d.comb += [wh.addr.eq(Cat(wc[:self.wbits], hh)), wh.data.eq(wdata),
                     wh.en.eq(wc != hw)]
        # the word written in the cycle before: word ``wc`` - 1 of ``hh`` (``wc`` = 0: the
        # entry before's last, or none)
        m.d.comb += [self.f_valid.eq((wc != 0) & (wc < hw)),
                     self.f_addr.eq(Cat((wc - 1)[:self.wbits], hh))]
        with m.If(self.a_en & (wc >= hw - 1)):
            m.d.sync += [wc.eq(0), hh.eq(pa)]
        with m.Elif(wc != hw):
            m.d.sync += wc.eq(wc + 1)
        with m.If(self.a_en):
            m.d.sync += pa.eq(pa + 1)
        with m.If(self.b_en):
            m.d.sync += pb.eq(pb + 1)
        # ``b_byp`` (with ``b_en``, only while ``b_empty``): the writer takes the ``b`` part
        # itself; the entry counts as read (``c`` moves past it, the level does not)
        with m.If(do_read | (self.b_en & self.b_byp)):
            m.d.sync += c.eq(c + 1)
        with m.If(self.a_next):
            m.d.sync += ca.eq(ca + 1)
        with m.If(b_in & ~do_read):
            m.d.sync += level.eq(level + 1)
        with m.If(do_read & ~b_in):
            m.d.sync += level.eq(level - 1)
        m.d.sync += inner_rdy.eq(~(((level == 0) & ~b_in)
                                   | ((level == 1) & do_read & ~b_in)))
        with m.If(do_read):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        return m


class RxParse(wiring.Component):
    """RX Parse: checks RoCEv2 frames, buffers them whole and forwards header metadata and the
    lane-0-aligned payload of the frames that pass.

    Parameters
    ----------
    width : int
        Data width W of the MAC stream (64, 128, 256 or 512).
    buffer_frames : int
        Frame buffer size in maximum (4,200-byte) frames, rounded up to a power of two beats,
        ≥ 1 (default 1: its beats are released as they are read, so one beat per cycle with
        back-to-back maximum frames).

    Attributes
    ----------
    i : In(BeatStream(W))
        The MAC receive stream (interface.md §2): a frame per packet from the destination MAC,
        FCS stripped, ``user`` on the last beat = MAC error.
    meta : Out(stream.Signature(rnic.ifaces.rx_meta_layout))
        One entry per accepted frame.
    payload : Out(BeatStream(W))
        The payload of each accepted frame with ``payload_len`` > 0: byte 0 in lane 0, pad and
        ICRC removed, ``keep`` all ones except on the ``last`` beat, ``user`` 0.
    local_mac : In(48)
        Local MAC, first wire byte most significant, compared as a frame's bytes arrive.
    local_ip : In(32)
        Local IPv4, first octet most significant.
    drop_all : In(1)
        While high (sampled at a frame's last beat), every frame is dropped and counted as 2.
    stat : Out(16)
        Counter strobes (interface.md §4.5): bit 0 once per received frame, bits 1–5 once per
        dropped frame (its lowest reason).
    """

    def __init__(self, width=64, buffer_frames=1):
        self.width = check_width(width)
        if not isinstance(buffer_frames, int) or buffer_frames < 1:
            raise ValueError(f"buffer_frames must be a positive integer, not {buffer_frames!r}")
        self.lanes = width // 8
        self.lg = self.lanes.bit_length() - 1
        self.cap = -(-wire.MAX_FRAME // self.lanes)                 # beats of a maximum frame
        self.depth = 1 << (buffer_frames * self.cap - 1).bit_length()
        self.abits = self.depth.bit_length() - 1
        self.ptrw = self.abits + 1                  # buffer pointers: the address and a lap bit
        # the payload's distinct shifts (offset mod L): the read side's ``sel`` is an index into
        # them (2 at W=64: the realignment is a 2-way mux, not one of 6 header lengths)
        self.shifts = sorted({o % self.lanes for o in PAYLOAD_OFFSETS})
        assert 0 not in self.shifts         # offsets are 2 mod 4: a payload never in lane 0
        self.buffer_frames = buffer_frames
        # frames in flight / queued: at least the minimum (60-byte) frames that arrive while
        # the read side drains the buffer's maximum frames, and 16 more for those in the check
        # stages and the read side's pipeline, so short frames never stall the input while
        # the outputs take what is offered; then every entry the descriptor RAMs hold (a
        # power of two above ``slots`` + ``margin``): 120 at the default buffer size, every
        # width. Only back-pressure or a flood of sub-60-byte runts can exhaust it first.
        self.min_beats = -(-wire.MIN_FRAME // self.lanes)
        self.out_depth = 8
        self.meta_depth = 5
        self.margin = self.meta_depth + 2       # entries read by the meta stage after the take
        need = max(16, -(-buffer_frames * self.cap // self.min_beats) + 16)
        self.slots = (1 << (need + self.margin).bit_length()) - self.margin - 1
        # The header RAM in words read in turn: ``mh_layout``'s 252 bits in as many words as
        # a minimum frame has beats, up to 4 (design-rules.md §2: a DP16KD gives 36 bits a
        # cycle): four of 63 bits at W <= 128, two DP16KD at 128 entries (``meta`` offered at
        # most every fourth cycle, a minimum frame's time at W=128); two of 126 at W=256 (every
        # second cycle, what PSN Check takes); one at W=512, where a frame may end in every
        # cycle. Word w is written w + 1 cycles after the last beat, so a frame ending fewer
        # than ``h_words`` cycles after the one before loses its words: it has fewer beats
        # than a minimum frame, a runt, dropped.
        self.h_words = _h_words(width)
        self.h_bits = -(-mh_layout.size // self.h_words)
        super().__init__({
            "i": In(BeatStream(width)),
            "meta": Out(stream.Signature(rx_meta_layout)),
            "payload": Out(BeatStream(width)),
            "local_mac": In(48),
            "local_ip": In(32),
            "drop_all": In(1),
            "stat": Out(NUM_COUNTERS),
        })

    def elaborate(self, platform):
        """The parts, in the order they are built: the write side, the header capture, the ICRC
        feed, check stages V0–V3, the descriptor and verdict queues, the verdict and
        counters, the read side, the realignment."""
        m = Module()

        # ================================ write side ================================
        wr = self._write_side(m)
        hdr, hdr_next, hdr_eq = self._header_capture(m, wr.beat, wr.byte, wr.at)
        crc = self._icrc_feed(m, wr.beat, wr.byte, wr.at, wr.accept, wr.first)

        # ================================ check pipeline ================================
        v01 = self._check_v0_v1(m, wr, hdr, hdr_next, hdr_eq)
        v23 = self._check_v2_v3(m, v01)
        q = self._descriptor_queues(m, v01, v23)
        q.verdict = self._verdict(m, crc, v23, q.verdict_q, v01.end_frame)

        # ================================ read side ================================
        out_q, tok, tok1, tok2 = self._read_side(m, wr, q)
        self._realign(m, wr.rp, out_q, tok, tok1, tok2)
        return m

    def _write_side(self, m):
        """The frame buffer and its write side: every beat of a frame (up to ``cap``) written into
        the ring, the beat index and its one-hot flags ``at``, the room checks behind
        ``i.ready`` (buffer space, descriptor slots). Returns a namespace of the signals later
        parts use; the read side drives ``rd_free`` and ``slot_give`` and reads through ``rp``."""
        L, cap, ptrw = self.lanes, self.cap, self.ptrw
        # ``no_rw_check``: a beat the read side uses belongs to a whole frame, which lies in
        # [rd_free, wr_ptr) and so in a slot the write side does not write while fewer than
        # ``depth`` beats are held (``space_ok``); reads of any other address (the buffer is
        # read every cycle) are discarded. No read-during-write logic is needed (yosys would
        # emulate it with a register on every data bit).
        mem = Memory(shape=self.width, depth=self.depth, init=[], attrs={"no_rw_check": 1})
        m.submodules.buffer = mem
        wp = mem.write_port()
        rp = mem.read_port(domain="sync")

        beat = self.i.payload
        byte = [beat.data[8 * j:8 * j + 8] for j in range(L)]

        idx = Signal(range(cap + 1))        # beat index in the frame, saturating at cap
        longf = Signal()                    # a beat started at byte >= cap*L (>= 4200)
        wr_ptr = Signal(ptrw)
        frame_base = Signal(ptrw)
        rd_free = Signal(ptrw)              # first beat not yet released by the read side
        slots_used = Signal(range(self.slots + 1))
        slot_take = Signal()
        slot_give = Signal()

        first = Signal(init=1)              # idx == 0, registered
        write_this = Signal(init=1)         # idx < cap, registered
        # idx == k for the beats holding header bytes, one-hot registers (a shift of ``at[0]``),
        # so the header capture enables, the CRC lane substitutions (synchronous resets of the
        # CRC's input register) and the datagram-end compares need no 10-bit compare of ``idx``.
        # ``at[0]`` equals ``first`` (a separate name; synthesis may merge the two).
        nat = HDR_BYTES // L + 1
        at = [Signal(init=(k == 0), name=f"at{k}") for k in range(nat)]
        at_cap = Signal()                   # idx == cap
        at_cap1 = Signal()                  # idx == cap - 1
        # Both room checks are registers, so ``i.ready`` (and every enable of the write side)
        # is one LUT from flip-flops. ``space_ok``: the buffer held < depth - 1 beats last cycle,
        # so (one write a cycle at most, the read side only frees) it holds < depth now.
        # ``slot_ok``: the next value of ``slots_used`` compared ahead, exact.
        space_ok = Signal(init=1)
        slot_ok = Signal(init=1)
        m.d.sync += space_ok.eq((wr_ptr - rd_free)[:ptrw] < self.depth - 1)
        m.d.comb += self.i.ready.eq((~write_this | space_ok) & (~first | slot_ok))
        accept = Signal()
        m.d.comb += accept.eq(self.i.valid & self.i.ready)

        m.d.comb += [
            wp.addr.eq(wr_ptr[:self.abits]),
            wp.data.eq(beat.data),
            wp.en.eq(accept & write_this),
        ]
        with m.If(accept):
            with m.If(write_this):
                m.d.sync += wr_ptr.eq(wr_ptr + 1)
            with m.If(first):
                m.d.sync += frame_base.eq(wr_ptr)
            with m.If(beat.last):
                m.d.sync += [idx.eq(0), longf.eq(0), first.eq(1), write_this.eq(1)]
                m.d.sync += [a.eq(k == 0) for k, a in enumerate(at)]
                m.d.sync += [at_cap.eq(0), at_cap1.eq(0)]
            with m.Else():
                m.d.sync += [idx.eq(Mux(at_cap, cap, idx + 1)), first.eq(0),
                             write_this.eq(idx < cap - 1)]
                m.d.sync += [at[0].eq(0)] + [at[k].eq(at[k - 1]) for k in range(1, nat)]
                m.d.sync += [at_cap.eq(at_cap | at_cap1), at_cap1.eq(idx == cap - 2)]
                with m.If(at_cap):
                    m.d.sync += longf.eq(1)
        m.d.comb += slot_take.eq(accept & first)
        # ``slots_used`` ± 1 and its compares with constants come from the register alone; the
        # take/give strobes (``accept`` is ``i.ready``'s AND) only select among them.
        slots_inc = Signal.like(slots_used)
        slots_dec = Signal.like(slots_used)
        lt_now = Signal()                   # slots_used < slots (its value unchanged)
        lt_inc = Signal()                   # slots_used + 1 < slots
        m.d.comb += [slots_inc.eq(slots_used + 1), slots_dec.eq(slots_used - 1),
                     lt_now.eq(slots_used < self.slots), lt_inc.eq(slots_used < self.slots - 1)]
        with m.If(slot_take & ~slot_give):
            m.d.sync += [slots_used.eq(slots_inc), slot_ok.eq(lt_inc)]
        with m.Elif(slot_give & ~slot_take):
            m.d.sync += [slots_used.eq(slots_dec), slot_ok.eq(1)]
        with m.Else():
            m.d.sync += slot_ok.eq(lt_now)
        return types.SimpleNamespace(
            rp=rp, beat=beat, byte=byte, accept=accept, idx=idx, longf=longf, wr_ptr=wr_ptr,
            frame_base=frame_base, rd_free=rd_free, slot_give=slot_give, first=first,
            write_this=write_this, at=at, at_cap=at_cap, at_cap1=at_cap1)

    def _header_capture(self, m, beat, byte, at):
        """The 74 header bytes, captured once as their beats arrive. Returns ``hdr`` (the
        registers, the frame's header in the cycle after its last beat; None for the bytes only
        compared), ``hdr_next`` (their next values) and ``hdr_eq`` (the compared bytes' equality
        with their references)."""
        L = self.lanes
        # Header capture, kept once: byte n of the frame sits in beat j = n // L, lane n % L.
        # The bytes of beat j follow the input in every cycle ``at[j]`` is high, not only with
        # ``accept``: ``at`` moves only on an accepted beat, so the last cycle of ``at[j]`` is
        # beat j's accept. The handshake then enables ~80 flops, not ~560 (a handshake net
        # spread over hundreds of enables is long after placement). Lanes past ``keep``
        # (contiguous from lane 0, all ones but on the last beat: interface.md §2) are captured
        # as 0. In the cycle after the frame's last beat (V1) ``hdr`` holds its header: the next
        # frame's first beat, if it comes in that cycle, is written at its end; its byte of
        # beat j stays until the next frame's beat j is awaited, so the header RAM's later words
        # are written from ``hdr`` (:meth:`_raw_metadata`).
        # Bytes past a frame's end keep the frame before's: only the bytes a runt's verdict
        # reads past its end (``_RUNT_CLEAR``: IPv4 protocol and destination, for reason 2;
        # the compared bytes below) are cleared in every cycle of ``at[0]`` (waiting for a
        # frame's first beat), so that they read as 0. A runt (shorter than 60 bytes) is
        # dropped for reason 3 whatever else its header holds; a frame of 60 bytes or more has
        # every byte the checks read (bytes < 54), and an accepted frame every header byte its
        # meta carries (an absent header's fields are 0).
        # Bytes only compared with a reference (destination MAC, EtherType, UDP destination
        # port: ``_eq_refs``) keep one flip-flop each, whether the byte (0 if absent) equals
        # its reference byte, not the byte: ``hdr_eq``. ``local_mac`` is compared as its
        # bytes arrive.
        refs = self._eq_refs()
        hdr = [None if n in refs else Signal(8, name=f"hdr{n}") for n in range(HDR_BYTES)]
        hdr_next = [None if n in refs else Signal(8, name=f"hdr_next{n}")
                    for n in range(HDR_BYTES)]
        hdr_eq = {n: Signal(name=f"hdr_eq{n}") for n in refs}
        # written as a clear and an enable (per byte: shared by its 8 flip-flops as the
        # slice's LSR and CE), not a mux in front of every bit
        for n in range(HDR_BYTES):
            j, l = divmod(n, L)
            clear = Signal(name=f"hdr_clr{n}")
            load = Signal(name=f"hdr_ld{n}")
            stale = j and (n in refs or n in _RUNT_CLEAR)
            m.d.comb += [clear.eq((at[j] & ~beat.keep[l]) | ((at[0] & ~at[j]) if stale else 0)),
                         load.eq(at[j])]
            if n in refs:
                with m.If(clear):
                    m.d.sync += hdr_eq[n].eq(refs[n] == 0)
                with m.Elif(load):
                    m.d.sync += hdr_eq[n].eq(byte[l] == refs[n])
                continue
            m.d.comb += hdr_next[n].eq(Mux(clear, 0, Mux(load, byte[l], hdr[n])))
            with m.If(clear):
                m.d.sync += hdr[n].eq(0)
            with m.Elif(load):
                m.d.sync += hdr[n].eq(byte[l])
        return hdr, hdr_next, Cat(*hdr_eq.values())

    def _eq_refs(self):
        """The header bytes checked only for equality with a reference (the destination MAC
        against ``local_mac``, the EtherType, the UDP destination port): ``{byte: value}``."""
        refs = {}
        for header, base, name, value in ((wire.ETH, 0, "dst", self.local_mac),
                                          (wire.ETH, 0, "ethertype", wire.ETHERTYPE_IPV4),
                                          (wire.UDP, _UDP, "dport", wire.ROCE_UDP_PORT)):
            f = header.fields[name]
            assert f.bit == 0 and f.width == 8 * f.nbytes      # whole bytes
            b = header.assemble({name: value})
            refs.update({base + f.offset + k: b[f.offset + k] for k in range(f.nbytes)})
        return refs

    def _icrc_feed(self, m, beat, byte, at, accept, first):
        """The ICRC: the CRC-32 and its registered input, the masked bytes of the datagram only
        (Ethernet header as zeros, variant fields as 0xFF, nothing past 14 + total length).
        Returns the CRC block, whose ``o`` is a frame's ICRC result."""
        L, lg, cap = self.lanes, self.lg, self.cap
        # ICRC feed.
        m.submodules.crc = crc = CRC32(self.width, init=crc_init_skipping(14, b"\xff" * 8),
                                       residue=ICRC_RESIDUE,
                                       latency=icrc_latency(self.width))
        lane = list(byte)
        for p in range(_IP):
            if p // L <= cap:
                lane[p % L] = Mux(at[p // L], 0, lane[p % L])
        for p in _ICRC_FF:
            lane[p % L] = Mux(at[p // L], 0xFF, lane[p % L])
        crc_data = Signal(self.width)
        m.d.comb += crc_data.eq(Cat(*lane))
        # keep stops at the datagram end 14 + total length (incl. ICRC). Beats before the one
        # holding the total length (``tb``) are all inside; on that beat the length comes straight
        # from the input lanes and is compared with constants; after it, ``rem`` holds the bytes
        # of the datagram left from the start of the beat (saturating at 0), so no add sits
        # between the input and the CRC.
        tb = (_IP + 2) // L
        tot_in = Signal(16)
        m.d.comb += tot_in.eq(Cat(byte[(_IP + 3) % L], byte[(_IP + 2) % L]))
        # ``rem`` (bytes of the datagram left from the start of the beat, saturating at 0) is
        # kept split at the lane bits, so that every compare a lane needs is a register: ``hi``
        # = rem // L (a beat down-counter), ``lo_th[j]`` == (rem % L > j) (a thermometer, fixed
        # while whole beats are taken off), ``hi_nz`` == (rem >= L), ``hi_ge2`` == (rem >= 2L).
        # Then rem > j (a lane's ``keep``) is ``hi_nz | lo_th[j]`` and rem > L (the datagram
        # goes on past this beat) ``hi_ge2 | (hi_nz & lo_th[0])``: no wide compare sits between
        # these registers and the lanes, nor under the accept enable (``i.ready``'s AND, late).
        hi = Signal(17 - lg)
        hi_nz = Signal()
        hi_ge2 = Signal()
        lo_th = Signal(L)
        nxt = (tb + 1) * L - _IP                # bytes of the datagram in beats 0 .. tb
        before_tb = Cat(*at[:tb]).any() if tb else 0   # idx < tb
        after_tb = ~Cat(*at[:tb + 1]).any()     # idx > tb
        t0 = Signal(17)                         # tot_in - nxt, taken when tot_in > nxt
        pos0 = Signal()
        m.d.comb += [t0.eq(tot_in - nxt), pos0.eq(tot_in > nxt)]
        with m.If(accept):
            with m.If(at[tb]):
                m.d.sync += [hi.eq(Mux(pos0, t0[lg:], 0)),
                             hi_nz.eq(tot_in >= nxt + L), hi_ge2.eq(tot_in >= nxt + 2 * L)]
                m.d.sync += [lo_th[j].eq(pos0 & (t0[:lg] > j)) for j in range(L)]
            with m.Else():
                with m.If(hi_nz):
                    m.d.sync += hi.eq(hi - 1)
                with m.Else():
                    m.d.sync += lo_th.eq(0)     # rem < L: nothing left after this beat
                m.d.sync += [hi_nz.eq(hi_ge2), hi_ge2.eq(hi >= 3)]
        rem_gt = Signal(L)                      # rem > j
        rem_gtl = Signal()                      # rem > L
        m.d.comb += [rem_gt.eq(Mux(hi_nz, Const(-1, L), lo_th)),
                     rem_gtl.eq(hi_ge2 | (hi_nz & lo_th[0]))]
        in_dgram = [before_tb | (at[tb] & (tot_in > tb * L + j - _IP))
                    | (after_tb & rem_gt[j]) for j in range(L)]
        # Bytes after the datagram (Ethernet padding, a trailer) are not the ICRC's: the CRC
        # takes beats 0 .. e, e the beat holding the datagram's last byte (or the frame's last
        # beat, if the frame ends first), ``last`` on beat e, so its result is the datagram's.
        # Beat e is held in the CRC's input register (``past``) and fed, as the packet's last,
        # with the frame's last beat, so the verdict keeps its time (the frame's last beat
        # + icrc_latency + 1) whatever follows the datagram.
        more = Signal()                         # the datagram goes on past this beat
        m.d.comb += more.eq(before_tb | (at[tb] & (tot_in > nxt)) | (after_tb & rem_gtl))
        past = Signal()                         # beat e taken, the frame's last beat not yet
        with m.If(accept):
            m.d.sync += past.eq(~beat.last & (past | ~more))
        # One register stage in front of the CRC: the ``rem`` compares and the lane substitutions
        # above stay out of the CRC's data-term cone (one cycle more to the ICRC verdict).
        m.d.sync += [
            crc.i.valid.eq(accept & (beat.last | (more & ~past))),
            crc.i.payload.last.eq(beat.last),
        ]
        with m.If(~past):
            m.d.sync += [
                crc.i.payload.data.eq(crc_data),
                crc.i.payload.keep.eq(Cat(*[beat.keep[j] & in_dgram[j] for j in range(L)])),
                crc.i.payload.first.eq(first),
            ]
        return crc

    def _check_v0_v1(self, m, wr, hdr, hdr_next, hdr_eq):
        """Check stages V0 (the frame's length and where it sits, at its last beat) and V1 (the
        header's fields, equality and length checks, the operands of V2's arithmetic), and the raw
        metadata fields written into the descriptor queue. Returns a namespace of the V1
        registers, ``end_frame`` and ``mh``."""
        # The parts below share their signals through ``t`` (see rnic.parts), called in the
        # order of their statements.
        t = types.SimpleNamespace(wr=wr, hdr=hdr, hdr_next=hdr_next, hdr_eq=hdr_eq)
        _add(t, self._check_v0(m, t))
        _add(t, self._check_v1_fields(m, t))
        _add(t, self._raw_metadata(t))
        v1 = self._check_v1_regs(m, t)
        return types.SimpleNamespace(end_frame=t.end_frame, mh=t.mh, **vars(v1))

    def _check_v0(self, m, t):
        """Check stage V0: the frame's length (``frame_len``, from the beat index and the last
        beat's ``keep``) and where it sits in the buffer, registered in the cycle of its last
        beat (``end_frame``), so that V1 reads them in the cycle its header is in ``hdr``.
        Returns ``frame_len``, ``end_frame`` and the V0 registers."""
        L, lg, cap, ptrw = self.lanes, self.lg, self.cap, self.ptrw
        wr = t.wr
        beat, accept, idx, longf, first = wr.beat, wr.accept, wr.idx, wr.longf, wr.first
        at_cap, at_cap1, wr_ptr, frame_base = wr.at_cap, wr.at_cap1, wr.wr_ptr, wr.frame_base
        write_this = wr.write_this
        frame_len = Signal(range(cap * L + L + 1))
        n_keep = Signal(range(L + 1))
        m.d.comb += [n_keep.eq(sum(beat.keep[j] for j in range(L))),
                     frame_len.eq((idx << lg) + n_keep)]

        # V0: the frame's length and where it sits, registered in the cycle of its last beat;
        # its header is ``hdr`` in the next cycle (V1).
        v0_valid = Signal()
        v0_len = Signal.like(frame_len)
        v0_long, v0_user, v0_dropall = Signal(), Signal(), Signal()
        v0_base, v0_end = Signal(ptrw), Signal(ptrw)
        end_frame = accept & beat.last
        m.d.sync += v0_valid.eq(end_frame)
        # the V0 registers are read only in the cycle after ``end_frame`` (``v0_valid``), so they
        # follow their inputs in every cycle (``end_frame``, the input handshake, stays off
        # their enables: design-rules.md §7)
        m.d.sync += [
            v0_len.eq(frame_len),
            # idx*L + n_keep > 4200 only on the beat idx = cap - 1 (or when idx = cap)
            v0_long.eq(longf | at_cap
                       | (at_cap1 & (n_keep > wire.MAX_FRAME - (cap - 1) * L))),
            v0_user.eq(beat.user),
            v0_dropall.eq(self.drop_all),
            v0_base.eq(Mux(first, wr_ptr, frame_base)),
            v0_end.eq(wr_ptr + write_this),
        ]
        return types.SimpleNamespace(
            frame_len=frame_len, end_frame=end_frame, v0_valid=v0_valid, v0_len=v0_len,
            v0_long=v0_long, v0_user=v0_user, v0_dropall=v0_dropall, v0_base=v0_base,
            v0_end=v0_end)

    def _check_v1_fields(self, m, t):
        """The inputs of check stage V1, from the captured header ``hdr``: the opcode's
        information, the drop reasons the equality and length checks decide (``r2``, ``r3a``,
        ``r3b``, ``r5a``), the operands of V2's UDP-against-headers compare, the IPv4
        checksum's three partial sums and the header
        length's code. Combinational; V1 registers them (:meth:`_check_v1_regs`)."""
        ncode = len(HDR_LENS)
        v0_dropall, v0_long = t.v0_dropall, t.v0_long
        b = t.hdr

        def f(header, base, name):
            return header.extract(name, b[base:base + header.size])

        # V1: fields, equality checks, metadata; the length arithmetic's operands.
        op = f(wire.BTH, _BTH, "opcode")
        info = opcode_info(m, op, name="v1_info_d")
        tot = f(wire.IPV4, _IP, "total_length")
        udp_len = f(wire.UDP, _UDP, "length")
        padcnt = f(wire.BTH, _BTH, "padcnt")
        hdr_len = info.hdr_len

        r2 = (v0_dropall
              | ~t.hdr_eq.all()         # destination MAC, EtherType, UDP destination port
              | (f(wire.IPV4, _IP, "dst") != self.local_ip)
              | (f(wire.IPV4, _IP, "protocol") != wire.IP_PROTO_UDP))
        flags = f(wire.IPV4, _IP, "flags")
        r3a = ((f(wire.IPV4, _IP, "version") != 4)
               | (f(wire.IPV4, _IP, "ihl") != 5)
               | flags[0]                                       # MF (flags = reserved, DF, MF)
               | (f(wire.IPV4, _IP, "frag_offset") != 0)
               | v0_long
               | (udp_len < wire.UDP_LEN))
        r5a = ((f(wire.BTH, _BTH, "tver") != 0)
               | (f(wire.BTH, _BTH, "pkey")[:15] != 0x7FFF)
               | ~info.known)
        # the length checks of reason 3 that compare the header with the frame, decided in V1
        # from registers (``hdr``, ``v0_len``) into one bit, not carried as operands: a frame
        # shorter than max(60, 14 + total length) (bytes past the datagram are padding or a
        # trailer, ignored), a UDP length other than the total length less 20
        # The sums with a constant are registered a cycle ahead (from ``hdr`` in the cycle of
        # the last beat) where the field's beat comes before the last beat of every frame of
        # MIN_FRAME bytes or more: a shorter frame is refused by the first term whatever
        # they hold, a longer one has the field in ``hdr`` by then. V1's compares are then one
        # carry chain each.
        last60 = (wire.MIN_FRAME - 1) // self.lanes

        def ahead(value, end_byte, width):
            if (end_byte - 1) // self.lanes >= last60:
                return value
            reg = Signal(width, name=f"v1_ahead{end_byte}")
            m.d.sync += reg.eq(value)
            return reg
        tot_end = ahead(_IP + tot, _IP + 4, 17)                         # total length: bytes 16, 17
        udp_tot = ahead(udp_len + wire.IPV4_LEN, _UDP + 6, 17)          # UDP length: bytes 38, 39
        r3b = Signal()
        m.d.comb += r3b.eq((t.v0_len < wire.MIN_FRAME) | (t.v0_len < tot_end)
                           | (udp_tot != tot))
        need_now = Signal(17)
        m.d.comb += need_now.eq(wire.UDP_LEN + wire.ICRC_LEN + hdr_len + padcnt)
        # the IPv4 header's ten 16-bit words in three sums of four, four and two (each two
        # adders deep), which V2 adds
        words = [Cat(b[_IP + 2 * k + 1], b[_IP + 2 * k]) for k in range(10)]
        part = [Signal(18, name=f"csum_g{k}") for k in range(3)]
        m.d.comb += [part[0].eq((words[0] + words[1]) + (words[2] + words[3])),
                     part[1].eq((words[4] + words[5]) + (words[6] + words[7])),
                     part[2].eq(words[8] + words[9])]

        code = Signal(range(ncode))
        with m.Switch(hdr_len):
            for c, h in enumerate(HDR_LENS):
                with m.Case(h):
                    m.d.comb += code.eq(c)
        return types.SimpleNamespace(
            info=info, tot=tot, udp_len=udp_len, r2=r2, r3a=r3a, r3b=r3b, r5a=r5a,
            need_now=need_now, part=part, code=code)

    def _raw_metadata(self, t):
        """The raw metadata fields (``mh``: ``mh_layout``, from ``hdr``) of the frame whose last
        beat was taken in the cycle before, written into the descriptor queue's header RAM a
        word a cycle from then on, not copied through the check stages."""
        # ``hdr`` keeps a frame's bytes of beat j until the next frame's beat j is awaited:
        # through the cycle j + 1 after the last beat at the soonest (only the bytes the
        # checks of a runt read are cleared sooner, and none of them is here). Word w of
        # ``mh`` is written w + 1 cycles after the last beat (``_SplitQueue``), so it may hold
        # bytes of beats >= w: at W <= 128 the IPv4 source (bytes 26..29, beat 26 // lanes)
        # lies in words 0 and 1 and the BTH in word 0 (``mh_layout``'s order); at W=64 every
        # byte here is in beat 3 or later.
        b = t.hdr

        def fd(header, base, name):
            return header.extract(name, b[base:base + header.size])
        f = {
            "opcode": fd(wire.BTH, _BTH, "opcode"),
            "se": fd(wire.BTH, _BTH, "se"),
            "padcnt": fd(wire.BTH, _BTH, "padcnt"),
            "dqpn": fd(wire.BTH, _BTH, "dqpn"),
            "ackreq": fd(wire.BTH, _BTH, "ackreq"),
            "psn": fd(wire.BTH, _BTH, "psn"),
            "src_ip": fd(wire.IPV4, _IP, "src"),
            "ext": Cat(*b[_EXT:HDR_BYTES]),
        }
        return types.SimpleNamespace(mh=Cat(*[f[k] for k in mh_layout.members]))

    def _check_v1_regs(self, m, t):
        """Check stage V1's registers, loaded in the cycle after the frame's last beat
        (``v0_valid``): the drop reasons so far, the opcode's flags, the header length's code,
        where the frame sits and the operands of V2's compare and checksum sum. Returns
        them, the namespace :meth:`_check_v2_v3` reads."""
        ncode = len(HDR_LENS)
        ptrw = self.ptrw
        info, part = t.info, t.part
        v0_valid, v0_user, v0_base, v0_end = t.v0_valid, t.v0_user, t.v0_base, t.v0_end
        r2, r3a, r3b, r5a, code = t.r2, t.r3a, t.r3b, t.r5a, t.code
        udp_len, tot, need_now = t.udp_len, t.tot, t.need_now
        v1_valid = Signal()
        v1_r1, v1_r2, v1_r3, v1_r5 = Signal(), Signal(), Signal(), Signal()
        v1_flags = Signal(4)
        v1_code = Signal(range(ncode))
        v1_base, v1_end = Signal(ptrw), Signal(ptrw)
        v1_udp, v1_need = Signal(16), Signal(17)
        v1_part = [Signal(18 - (k == 2), name=f"v1_csum_g{k}") for k in range(3)]
        m.d.sync += v1_valid.eq(v0_valid)
        with m.If(v0_valid):
            m.d.sync += [
                v1_r1.eq(v0_user), v1_r2.eq(r2), v1_r3.eq(r3a | r3b), v1_r5.eq(r5a),
                v1_flags.eq(Cat(info.reth, info.immdt, info.ieth, info.aeth)),
                v1_code.eq(code), v1_base.eq(v0_base), v1_end.eq(v0_end),
                v1_udp.eq(udp_len),
                v1_need.eq(need_now),
            ]
            m.d.sync += [r.eq(p) for r, p in zip(v1_part, part)]
        return types.SimpleNamespace(
            v1_valid=v1_valid, v1_r1=v1_r1, v1_r2=v1_r2, v1_r3=v1_r3, v1_r5=v1_r5,
            v1_flags=v1_flags, v1_code=v1_code, v1_base=v1_base, v1_end=v1_end,
            v1_udp=v1_udp, v1_need=v1_need, v1_part=v1_part)

    def _check_v2_v3(self, m, v01):
        """Check stages V2 (length compares, payload length, where the payload lies: the
        descriptor's ``d`` part) and V3 (checksum verdict, the header drop reason ``hreason``),
        then the header reason delayed to meet the ICRC verdict. Returns a namespace of the
        signals the queues and the verdict are written from."""
        # The parts below share their signals through ``t`` (see rnic.parts), called in the
        # order of their statements.
        t = types.SimpleNamespace(**vars(v01))
        _add(t, self._check_v2(m, t))
        v3 = self._check_v3(m, t)
        return types.SimpleNamespace(
            v2_valid=t.v2_valid, v2_len=t.v2_len, v2_first=t.v2_first, v2_end=t.v2_end,
            v2_shi=t.v2_shi, **vars(v3))

    def _check_v2(self, m, t):
        """Check stage V2's registers: the UDP length against the headers' need merged into the
        drop reasons, the payload length and span (its first beat from the header length's
        code, the shift index ``v2_shi``), and the checksum's sum. Returns them."""
        ptrw, L = self.ptrw, self.lanes
        shifts = self.shifts
        nsh = len(shifts)
        v1_valid, v1_r1, v1_r2, v1_r3, v1_r5 = t.v1_valid, t.v1_r1, t.v1_r2, t.v1_r3, t.v1_r5
        v1_flags, v1_code, v1_base, v1_end = t.v1_flags, t.v1_code, t.v1_base, t.v1_end
        v1_udp, v1_need, v1_part = t.v1_udp, t.v1_need, t.v1_part
        pl_diff = Signal(18)
        m.d.comb += pl_diff.eq(v1_udp - v1_need)
        shi = Signal(range(nsh))
        skip = Signal(range(PAYLOAD_OFFSETS[-1] // L + 1))
        with m.Switch(v1_code):
            for c, o in enumerate(PAYLOAD_OFFSETS):
                with m.Case(c):
                    m.d.comb += [skip.eq(o // L), shi.eq(shifts.index(o % L))]
        v2_valid = Signal()
        v2_r1, v2_r2, v2_r3, v2_r5 = Signal(), Signal(), Signal(), Signal()
        v2_len = Signal(13)
        v2_flags = Signal(4)
        v2_shi = Signal(range(nsh))
        v2_first, v2_end = Signal(ptrw), Signal(ptrw)
        v2_q = Signal(20, name="v2_csum")
        m.d.sync += v2_valid.eq(v1_valid)
        with m.If(v1_valid):
            m.d.sync += [
                v2_r1.eq(v1_r1), v2_r2.eq(v1_r2),
                v2_r3.eq(v1_r3),
                v2_r5.eq(v1_r5 | pl_diff[-1]),                  # udp_len < need
                v2_len.eq(pl_diff[:13]), v2_flags.eq(v1_flags),
                v2_shi.eq(shi), v2_first.eq(v1_base + skip), v2_end.eq(v1_end),
                v2_q.eq(v1_part[0] + v1_part[1] + v1_part[2]),
            ]
        return types.SimpleNamespace(
            v2_valid=v2_valid, v2_r1=v2_r1, v2_r2=v2_r2, v2_r3=v2_r3, v2_r5=v2_r5,
            v2_len=v2_len, v2_flags=v2_flags, v2_shi=v2_shi, v2_first=v2_first, v2_end=v2_end,
            v2_q=v2_q)

    def _check_v3(self, m, t):
        """Check stage V3: the checksum verdict merged into the drop reasons and the opcode's
        flags as the meta fields' selects (``fl``: RETH, AETH, ImmDt or IETH), delayed to
        the ICRC verdict (one register above W=128); the header drop reason ``hreason`` (the
        lowest wins) of the frame whose ICRC verdict is out in this cycle."""
        v2_valid, v2_r1, v2_r2, v2_r3, v2_r5 = t.v2_valid, t.v2_r1, t.v2_r2, t.v2_r3, t.v2_r5
        v2_flags, v2_q = t.v2_flags, t.v2_q
        # The sum of ten words is < 0xA0000: its one's complement fold low + high is 0xFFFF
        # exactly when low == ~high (16 bits; high <= 9), an equality, not a second adder.
        csum = v2_q
        bad = Signal()
        m.d.comb += bad.eq(csum[:16] != ~Cat(csum[16:], Const(0, 12)))
        reth, immdt, ieth, aeth = v2_flags
        rs = Signal(8)                      # r1, r2, r3, r5, the flags, then any reason
        m.d.sync += rs.eq(Cat(v2_r1, v2_r2, v2_r3 | bad, v2_r5, reth, aeth, immdt | ieth,
                              v2_r1 | v2_r2 | v2_r3 | bad | v2_r5))
        for k in range(icrc_latency(self.width) - 3):
            nrs = Signal(8, name=f"v3_rs_d{k}")
            m.d.sync += nrs.eq(rs)
            rs = nrs
        hreason = Signal(3)
        with m.If(rs[0]):
            m.d.comb += hreason.eq(1)
        with m.Elif(rs[1]):
            m.d.comb += hreason.eq(2)
        with m.Elif(rs[2]):
            m.d.comb += hreason.eq(3)
        with m.Elif(rs[3]):
            m.d.comb += hreason.eq(5)
        return types.SimpleNamespace(hreason=hreason, fl=rs[4:7], hbad=rs[7])

    def _descriptor_queues(self, m, v01, v23):
        """The descriptor queue (its ``h`` part written after the last beat, its ``d`` part by V2)
        and the verdict queue (one entry per frame). Returns a namespace of the queues and the
        descriptor layout."""
        ptrw, hb = self.ptrw, self.h_bits
        nsh = len(self.shifts)
        end_frame = v01.end_frame
        # The descriptor, in two parts of one in-order queue: ``h`` (the raw metadata fields)
        # written from the cycle after the last beat, ``d`` (payload length, where the payload
        # sits) by V2. The
        # ``d`` part keeps only what the read side cannot derive: 36 bits at W=64, one DP16KD
        # row (the beat counts and the last ``keep`` are computed after the RAM, the opcode's
        # flags travel with the verdict).
        d_layout = data.StructLayout({
            "payload_len": 13,
            "first": ptrw,
            "end": ptrw,
            "sel": range(nsh),              # index into the shifts
        })
        m.submodules.desc_q = desc_q = _SplitQueue(d_layout, hb, self.h_words,
                                                   self.slots, self.margin)
        m.d.comb += [
            desc_q.a_en.eq(end_frame),
            desc_q.h_data.eq(v01.mh),
            desc_q.b_en.eq(v23.v2_valid),
            desc_q.b_data.payload_len.eq(v23.v2_len),
            desc_q.b_data.first.eq(v23.v2_first),
            desc_q.b_data.end.eq(v23.v2_end),
            desc_q.b_data.sel.eq(v23.v2_shi),
        ]
        # The read side's decision starts from registers, not a LUT-RAM read; a verdict that
        # finds the queue empty is there in the next cycle.
        # Its entry: drop, and the opcode's flags (one DPR16X4 column, as the drop bit alone).
        m.submodules.verdict_q = verdict_q = BypassFIFO(width=4, depth=self.slots)
        return types.SimpleNamespace(d_layout=d_layout, desc_q=desc_q, verdict_q=verdict_q)

    def _verdict(self, m, crc, v23, verdict_q, end_frame):
        """Each frame's verdict (its ICRC result meets its header reason ``hreason``, in the
        same cycle: both pipelines take a frame a cycle at fixed latencies; the lowest reason
        wins) into ``verdict_q`` (drop or not, and the opcode's flags), and the counter strobes
        on ``stat``."""
        stat = Signal(NUM_COUNTERS)
        m.d.sync += stat.eq(0)
        m.d.sync += stat[Counter.RX_FRAMES].eq(end_frame)
        final = Signal(3)
        hr = v23.hreason
        with m.If((hr == 0) | (hr == 5)):
            m.d.comb += final.eq(Mux(crc.o.payload, hr, 4))
        with m.Else():
            m.d.comb += final.eq(hr)
        m.d.comb += [
            verdict_q.w_en.eq(crc.o.valid),
            verdict_q.w_data.eq(Cat(final != 0, v23.fl)),
        ]
        with m.If(crc.o.valid):
            for r in (1, 2, 3, 4, 5):
                m.d.sync += stat[r].eq(final == r)
        m.d.comb += self.stat.eq(stat)
        # the verdict as it comes out, for the read side's idle path: drop = any header
        # reason (one register, ``hbad``) or a bad ICRC
        drop = Signal()
        m.d.comb += drop.eq(v23.hbad | ~crc.o.payload)
        return types.SimpleNamespace(valid=crc.o.valid, drop=drop, fl=v23.fl)

    def _read_side(self, m, wr, q):
        """The read side: the output queues, the head descriptor in registers, the decision to
        take it (its meta pushed, or a dropped frame's space released) and the tokens (buffer
        read, payload beat) of its payload. Returns the payload queue and the tokens of this
        cycle and of the two read stages, for :meth:`_realign`."""
        # The parts below share their signals through ``t`` (see rnic.parts), called in the
        # order of their statements.
        t = types.SimpleNamespace(wr=wr, q=q)
        _add(t, self._read_queues(m, t))
        _add(t, self._read_state(m, t))
        _add(t, self._read_head(m, t))
        self._read_take(m, t)
        return t.out_q, t.tok, t.tok1, t.tok2

    def _read_queues(self, m, t):
        """The read side's output queues, ``meta_q`` (one entry per accepted frame) and
        ``out_q`` (the realigned payload beats), connected to the ``meta`` and ``payload``
        ports. Returns them."""
        # Only what the consumers decide on leaves from the output registers; the rest is read
        # from the queues' LUT RAM at the head entry (design rule 4): PSN Check addresses its
        # tables with ``dqpn`` and selects the operation with ``opcode`` in the cycle it takes
        # the meta, and only stores the other fields; its payload router pops a frame's
        # decision on ``last`` and passes the beat on to Execute's payload FIFO.
        # (an entry into an empty queue is offered in the next cycle: ``bypass``)
        # The meta queue holds the BTH fields as the descriptor RAM delivers them (its write
        # data is the RAM's output, no logic after the RAM's long clock-to-out), the payload
        # length, the opcode's flags and the frame's handle; its head loads the meta stage
        # (:meth:`_meta_stage`), which reads the rest of the header by the handle.
        m.submodules.meta_q = meta_q = Queue(_mq_layout(t.q.desc_q.abits), self.meta_depth,
                                             registered=("handle",), bypass=True)
        m.submodules.out_q = out_q = Queue(beat_layout(self.width), self.out_depth,
                                           registered=("last",), bypass=True)
        mp = Signal(_mq_layout(t.q.desc_q.abits))      # a meta pushed (``mp_v``)
        mp_v = Signal()
        inc = self._meta_stage(m, meta_q, t.q.desc_q, mp, mp_v)
        if t.q.desc_q.h_words == 1:
            wiring.connect(m, wiring.flipped(self.payload), out_q.o)
        else:
            self._payload_gate(m, out_q, inc)
        return types.SimpleNamespace(meta_q=meta_q, out_q=out_q, mp=mp, mp_v=mp_v)

    def _payload_gate(self, m, out_q, inc):
        """The ``payload`` port, where a meta is offered at most every second cycle: a frame's
        first beat waits until its meta has been offered (``inc``: a meta with payload is
        offered from the next cycle), so that, once every earlier meta is taken, a frame's
        meta is offered no later than its first payload beat. ``mcnt`` counts the metas
        offered whose payload has not started (at most the frames in the payload queue and
        the read stages); ``pok`` (``mcnt`` ≠ 0) falls only with a first beat taken, so an
        offered beat stays offered from any state."""
        pfirst = Signal(init=1)                 # the next beat is a frame's first
        mcnt = Signal(range(self.out_depth + self.meta_depth + 4))
        pok = Signal()
        go = Signal()
        dec = Signal()
        mnext = Signal.like(mcnt)
        p = self.payload
        m.d.comb += [
            go.eq(~pfirst | pok),
            p.valid.eq(out_q.o.valid & go), p.payload.eq(out_q.o.payload),
            out_q.o.ready.eq(p.ready & go),
            dec.eq(p.valid & p.ready & pfirst),
            mnext.eq(mcnt + inc - dec),
        ]
        m.d.sync += mcnt.eq(mnext)
        with m.If(p.valid & p.ready):
            m.d.sync += pfirst.eq(p.payload.last)
        with m.If(dec):
            m.d.sync += pok.eq(mnext != 0)
        with m.Elif(inc):
            m.d.sync += pok.eq(1)

    def _meta_stage(self, m, meta_q, desc_q, mp, mp_v):
        """The ``meta`` port: a register stage loaded from the meta queue's head (the opcode's
        flags, the payload length, the handle) and the header RAM read at the head's handle,
        a word a cycle (``h_words`` of them), each word but the last into a register (``hw``;
        the BTH fields in the first, so PSN Check addresses its tables with ``dqpn`` and decodes
        ``opcode`` from flip-flops in the cycle it takes the meta), the last held on the RAM's
        output: the meta is offered in the cycle after the last word's read, so at most every
        ``h_words``-th cycle (every cycle with one word). All hold while an offered meta is not
        taken (the reads wait for ``~mv``: from any state a held meta keeps its payload). The
        ``rx_meta_layout`` fields are formed from them: fields of absent headers 0 (one LUT per
        bit after the registers and the block RAM).

        Idle path: while the stage and the meta queue are empty (``mq_e``) the header RAM is
        read at word 0 of the handle being pushed (``mp``), so a meta pushed then, offered by
        the queue in the next cycle, is loaded with its word 0 on ``r_h`` (``w0ok``): the load
        reads word 1 at once (``fast``) and the meta is offered ``h_words`` - 1 cycles later.
        With four words the idle port follows the header RAM's writes instead (a word a cycle
        after its write, :meth:`_meta_follow`), and a meta pushed with its words but the last so
        read has its load read the last (``hit``): it is offered in the cycle after the load."""
        nw_ = desc_q.h_words
        wb = desc_q.wbits
        st_layout = data.StructLayout({"fl": 3, "payload_len": 13,
                                       "handle": len(desc_q.a_idx), "has": 1})
        st = Signal(st_layout)
        mv, ph = Signal(), Signal()
        load = Signal()
        idle, mq_e, w0ok, fast = Signal(), Signal(), Signal(), Signal()
        hsel = Signal.like(mp.handle)
        head = meta_q.o.payload
        m.d.comb += [load.eq(meta_q.o.valid & ~ph & (~mv | self.meta.ready)),
                     mq_e.eq(meta_q.level == 0), idle.eq(~ph & ~mv & mq_e),
                     meta_q.i.valid.eq(mp_v), meta_q.i.payload.eq(mp),
                     hsel.eq(Mux(mq_e, mp.handle, head.handle)),
                     meta_q.o.ready.eq(load),
                     self.meta.valid.eq(mv)]
        # a push while idle enters the empty queue and is offered (and loaded: the stage is
        # idle) in the next cycle (``pushed``)
        pushed = Signal()
        m.d.sync += pushed.eq(idle & mp_v)
        hw = [Signal(desc_q.h_bits, name=f"hw{k}") for k in range(nw_ - 1)]
        last_rd = Signal()                      # the last word is read in this cycle
        fol, fol_d, hit = Signal(), Signal(), Signal()
        if nw_ > 2:
            self._meta_follow(m, desc_q, mp, idle, load, pushed, fol, fol_d, hit,
                              meta_q.o.valid & ~ph & ~mv)
        m.d.comb += w0ok.eq(pushed & ~fol_d)
        if nw_ > 1:
            # ``ph``: the words ``nw`` .. are being read at ``st.handle``, one a cycle; ``rk``:
            # the word on ``r_h`` (read in the cycle before), loaded into its register
            # (``rd``: the reads wait for ``~mv``, so an offered meta's words hold from any
            # state, reachable or not; ``fol_d``: a followed word)
            nw = Signal(range(nw_))
            rk = Signal(range(nw_))
            rword = Signal(range(nw_))
            rd = Signal()
            m.d.comb += [rd.eq(ph & ~mv),
                         fast.eq(w0ok & meta_q.o.valid & ~ph & ~mv),
                         rword.eq(Mux(rd, nw, Mux(hit, nw_ - 1, fast))),
                         last_rd.eq(Mux(rd, nw == nw_ - 1, hit | (fast & (nw_ == 2)))),
                         desc_q.h_en.eq(load | rd | idle),
                         desc_q.h_addr.eq(Mux(fol, desc_q.f_addr,
                                              Cat(rword[:wb], Mux(rd, st.handle, hsel))))]
            with m.If(desc_q.h_en):
                m.d.sync += rk.eq(Mux(fol, desc_q.f_addr[:wb], rword))
            with m.If(rd | fast | (fol_d & ~mv)):
                with m.Switch(rk):
                    for k in range(nw_ - 1):
                        with m.Case(k):
                            m.d.sync += hw[k].eq(desc_q.r_h)
            with m.If(load):
                m.d.sync += [mv.eq(last_rd), ph.eq(~last_rd), nw.eq(rword + 1)]
            with m.Elif(rd):
                m.d.sync += nw.eq(nw + 1)
                with m.If(last_rd):
                    m.d.sync += [mv.eq(1), ph.eq(0)]
            with m.Elif(self.meta.ready):
                m.d.sync += mv.eq(0)
        else:
            m.d.comb += [desc_q.h_en.eq(load | idle), desc_q.h_addr.eq(hsel)]
            with m.If(load):
                m.d.sync += mv.eq(1)
            with m.Elif(self.meta.ready):
                m.d.sync += mv.eq(0)
        with m.If(load):
            m.d.sync += [st.has.eq(head.payload_len != 0)] + [
                getattr(st, k).eq(getattr(head, k)) for k in st_layout.members if k != "has"]
        self._meta_out(m, data.View(mh_layout, Cat(*hw, desc_q.r_h)), st)
        # a meta with payload is offered from the next cycle (``inc``, the payload gate's
        # count): after its last word's read; a fast load's (two words) counts a cycle later,
        # when ``st`` holds it
        fast_d = Signal()
        m.d.sync += fast_d.eq((fast | hit) & load & last_rd)
        return ((ph & ~mv & last_rd) | fast_d) & st.has

    def _meta_out(self, m, hd, st):
        """The ``meta`` port's fields, from the header words ``hd`` and the stage's registers
        ``st``: fields of absent headers 0."""
        reth, aeth, imm = st.fl
        xb = [hd.ext[8 * k:8 * k + 8] for k in range(HDR_BYTES - _EXT)]
        o = self.meta.payload
        m.d.comb += [
            o.opcode.eq(hd.opcode), o.se.eq(hd.se), o.padcnt.eq(hd.padcnt),
            o.dqpn.eq(hd.dqpn), o.ackreq.eq(hd.ackreq), o.psn.eq(hd.psn),
            o.reth_va.eq(Mux(reth, wire.RETH.extract("va", xb), 0)),
            o.reth_rkey.eq(Mux(reth, wire.RETH.extract("rkey", xb), 0)),
            o.reth_len.eq(Mux(reth, wire.RETH.extract("dmalen", xb), 0)),
            # ImmDt after a RETH, or ImmDt / IETH rkey right after the BTH (the same bytes)
            o.imm_or_rkey.eq(Mux(imm, Mux(reth, wire.IMMDT.extract("imm", xb[16:]),
                                          wire.IMMDT.extract("imm", xb)), 0)),
            o.aeth_syndrome.eq(Mux(aeth, wire.AETH.extract("syndrome", xb), 0)),
            o.src_ip.eq(hd.src_ip),
            o.payload_len.eq(st.payload_len),
        ]

    def _meta_follow(self, m, desc_q, mp, idle, load, pushed, fol, fol_d, hit, free):
        """The meta stage's follow path (four header words): while the stage and the meta
        queue are empty (``idle``) the header RAM's port reads each word but the last a cycle
        after it is written (``fol``; ``fol_d`` a cycle later, as the word lands on ``r_h`` and
        in its register ``hw``). ``fcnt`` counts the words of the entry being written (or
        written last) so read in a row from its word 0; a word written and not followed, or a
        load, clears it (an entry is taken four or more cycles after its push, when its words
        are written and the count is its own). A push while idle of that entry with all its words but the last so read (``hit``, in the load's
        cycle, when the stage is ``free`` and the queue offers) has its load read the last word
        at once: the meta is offered two cycles after the take, as with one or two words. A
        word is followed only while no meta is held, so an offered meta's words hold."""
        nw_, wb = desc_q.h_words, desc_q.wbits
        f_word, f_h = desc_q.f_addr[:wb], desc_q.f_addr[wb:]
        fcnt, fcnt_n = Signal(range(nw_)), Signal(range(nw_))
        hc = Signal()
        m.d.comb += [fol.eq(desc_q.f_valid & idle & ((f_word == 0) | (fcnt == f_word))),
                     fcnt_n.eq(Mux(fol, f_word + 1, Mux(desc_q.f_valid, 0, fcnt))),
                     hit.eq(pushed & hc & free)]
        m.d.sync += [fcnt.eq(Mux(load, 0, fcnt_n)), fol_d.eq(fol),
                     hc.eq((fcnt_n == nw_ - 1) & (mp.handle == f_h))]

    def _read_state(self, m, t):
        """The read side's state: the tokens (this cycle's ``tok`` and the two read stages'),
        the frame being read (``busy``, its next address, beats left, shift and last ``keep``),
        the pending flush beat of a frame read to its end (``pend``), and the payload queue's
        registered ``credit`` for one more token. Returns them."""
        L, cap, ptrw = self.lanes, self.cap, self.ptrw
        nsh = len(self.shifts)
        out_q = t.out_q
        tok_layout = data.StructLayout({
            "rd": 1, "emit": 1, "last": 1, "sel": range(nsh), "keep": range(L + 1)})
        tok = Signal(tok_layout)
        tok1 = Signal(tok_layout)
        tok2 = Signal(tok_layout)
        rd_addr = Signal(ptrw)

        busy = Signal()
        addr = Signal(ptrw)
        left = Signal(range(cap + 2))
        f_sel = Signal(range(nsh))
        f_keep = Signal(range(L + 1))
        f_flush = Signal()
        f_end = Signal(ptrw)
        pend = Signal()
        p_sel = Signal(range(nsh))
        p_keep = Signal(range(L + 1))

        # Payload-queue credit, registered: the entries held or in flight next cycle are at most
        # those held now plus every token in flight now (including this cycle's).
        credit = Signal()
        m.d.sync += credit.eq((out_q.level + tok.emit + tok1.emit + tok2.emit) < self.out_depth)
        return types.SimpleNamespace(
            tok=tok, tok1=tok1, tok2=tok2, rd_addr=rd_addr, busy=busy, addr=addr, left=left,
            f_sel=f_sel, f_keep=f_keep, f_flush=f_flush, f_end=f_end, pend=pend, p_sel=p_sel,
            p_keep=p_keep, credit=credit)

    def _read_head(self, m, t):
        """The head descriptor in registers: a register after the descriptor queue's block RAM
        (``pr_d``; V2's straight in when nothing is queued), then a two-entry queue of its ``d``
        part in flip-flops (``head``), popped by ``take``; the meta push, in the take's cycle
        or the next; and ``head_ok``, whether the head may be taken now (its verdict is out, in
        the verdict queue or coming out now, and the meta queue has room unless a queued
        verdict drops it).
        Returns ``take``, ``push`` (the take pushes a meta), ``head``, ``drop``, ``head_ok`` and
        the verdict queue's state."""
        d_layout = t.q.d_layout
        desc_q, verdict_q, meta_q = t.q.desc_q, t.q.verdict_q, t.meta_q
        # The head descriptor in registers of its own: desc_q sits in block RAM (132 slots),
        # whose clock-to-out (~4 ns on ECP5) must not feed the read address and its adders.
        # A two-entry ``Queue`` (``buffered=False``: ``RoomFIFO`` with registered ready flags;
        # in flip-flops: as LUT RAM its write path would add a LUT after the block RAM's
        # clock-to-out), whose storage is written whenever it has room: the enables of its
        # flops -- and desc_q's read enable -- are functions of registers, not of the take
        # decision (a wide enable driven by a late decision is a long path after placement).
        # The next descriptor is at its head by the cycle after a take exactly when it was in
        # a single ``head`` reloaded in the take's cycle, so the takes happen in the same
        # cycles.
        # Only the descriptor's ``d`` part (what the read side decides on) travels; the raw
        # metadata stays in the descriptor queue's ``m`` RAM until the take names it.
        # reset-less: read only under pr_v, so it can be the block RAM's output register
        pr_d = Signal(d_layout, reset_less=True)
        # Idle path: a ``d`` part that V2 writes while nothing is queued before it (the
        # descriptor queue, ``pr_d``) goes straight into the head queue (``byp``), 3 cycles
        # sooner; the descriptor queue counts it as read.
        pr_v = Signal()
        byp = Signal()
        d_in = Signal(d_layout)
        m.d.comb += d_in.eq(Mux(pr_v, pr_d, desc_q.b_data))
        head_in = self._head_fields(m, d_in)
        m.submodules.head_q = head_q = Queue(head_in.shape(), 2, buffered=False, registers=True)
        m.d.comb += [byp.eq(desc_q.b_en & desc_q.b_empty & ~pr_v & head_q.i.ready),
                     desc_q.b_byp.eq(byp)]
        take = Signal()
        push = Signal()
        head = head_q.o.payload
        head_v = head_q.o.valid
        # A plain register between the block RAM and the head queue: its data input is the
        # RAM's output (the head queue's storage has a write mux in front of each word) and its
        # enable a function of registers, so the RAM's clock-to-out (about two thirds of a
        # 156.25 MHz cycle on ECP5) meets a route and at most the enable's LUT.
        pr_go = Signal()
        m.d.comb += [pr_go.eq(~pr_v | head_q.i.ready), desc_q.r_en.eq(pr_go),
                     head_q.i.valid.eq(pr_v | byp), head_q.i.payload.eq(head_in)]
        with m.If(pr_go):
            m.d.sync += [pr_v.eq(desc_q.r_rdy), pr_d.eq(desc_q.r_b)]
        m.d.comb += [head_q.o.ready.eq(take), desc_q.a_next.eq(take)]
        # Idle path of the verdict: while the verdict queue holds none (``vq_z``), the head's
        # verdict is the one coming out of the check (``v.valid``), used in its cycle. It is
        # written into the queue all the same and popped in the next cycle (``vskip``), when
        # no take happens, so the queue's write side needs no decision.
        v = t.q.verdict
        vq_n = Signal(range(self.slots + 3))
        vq_z = Signal(init=1)
        vskip = Signal()
        v_rdy = Signal()
        drop = Signal()
        fl = Signal(3)
        vq_z1 = Signal()
        m.d.comb += [
            v_rdy.eq(Mux(vq_z, v.valid, verdict_q.r_rdy & ~vskip)),
            drop.eq(Mux(vq_z, v.drop, verdict_q.r_data[0])),
            fl.eq(Mux(vq_z, v.fl, verdict_q.r_data[1:])),
            vq_z1.eq(vq_n == 1),
        ]
        m.d.sync += [vq_n.eq(vq_n + verdict_q.w_en - verdict_q.r_en), vskip.eq(take & vq_z),
                     vq_z.eq(Mux(verdict_q.r_en, Mux(verdict_q.w_en, vq_z, vq_z1),
                                 ~verdict_q.w_en & vq_z))]
        # The decision to take the head descriptor is a small function of registers:
        # * a frame's descriptor is written (V2, 3 cycles after the last beat) before its
        #   verdict (4 or 5) and reaches ``head`` a cycle later on the idle path, 4 through the
        #   queue: ``head_v`` and the verdict (``v_rdy``) are both in the test;
        # * ``meta_room``: the meta queue held < 3 entries last cycle; a take pushes in its
        #   cycle, so with the push of the cycle before it holds <= 3 of 5 when the push
        #   comes, and takes it.
        # * a dropped frame is taken without room in the meta queue only with its verdict
        #   queued (a register): on the idle path the ICRC's compare, out in this cycle, decides
        #   what the take pushes but not whether it happens.
        meta_room = Signal(init=1)
        m.d.sync += meta_room.eq(meta_q.level < 3)
        head_ok = v_rdy & head_v & (meta_room | (~vq_z & verdict_q.r_data[0]))
        # the payload does not wait for the decision (no decode in front of the queue's data)
        self._meta_fields(m, t.mp, t.mp_v, desc_q, head, fl, push, take)
        return types.SimpleNamespace(take=take, push=push, head=head, drop=drop,
                                     head_ok=head_ok, head_v=head_v, vq_z=vq_z, vskip=vskip,
                                     meta_room=meta_room)

    def _head_fields(self, m, d):
        """The head queue's entry, from the descriptor ``d`` part ``d`` (payload length, first
        and end beat, shift index): the buffer reads of the payload less one (``reads_m1``,
        when ``has``: some; ``one`` = one), whether its last beat needs a flush beat after the
        last read (``flush``) and the ``keep`` count of its last beat. Combinational, from the
        descriptor RAM's output: one adder, the rest constant compares picked by ``sel``, no
        carry chain behind another."""
        L, lg, cap = self.lanes, self.lg, self.cap
        shifts = self.shifts
        head_layout = data.StructLayout({
            "payload_len": 13,
            "first": len(d.first),
            "end": len(d.end),
            "reads_m1": range(cap + 1),
            "has": 1,
            "one": 1,
            "sel": range(len(shifts)),      # index into the shifts
            "flush": 1,
            "last_keep": range(L + 1),
        })
        h = Signal(head_layout)
        # With len = payload_len > 0 and the payload's first byte in lane ``shift`` (never 0)
        # of its first read: reads - 1 = (len + shift - 1) // L; one read when
        # len <= L - shift; with r = len % L, a flush beat when the last byte stays in the
        # same output beat, (r - 1) % L + shift < L, that is 1 <= r <= L - shift.
        ln = d.payload_len
        r = ln[:lg]
        cm1 = Signal(range(L))                      # shift - 1
        one = Signal()
        flush = Signal()
        with m.Switch(d.sel):
            for c, sh in enumerate(shifts):
                with m.Case(c):
                    m.d.comb += [cm1.eq(sh - 1), one.eq(ln <= L - sh),
                                 flush.eq((r != 0) & (r <= L - sh))]
        m.d.comb += [
            h.payload_len.eq(ln), h.first.eq(d.first), h.end.eq(d.end),
            h.sel.eq(d.sel), h.has.eq(ln != 0),
            h.reads_m1.eq((ln + cm1) >> lg),
            h.one.eq(h.has & one),
            h.flush.eq(flush),
            h.last_keep.eq(Mux(r == 0, L, r)),
        ]
        return h

    def _read_take(self, m, t):
        """The read side's decision, while the payload queue has ``credit``: the next beat of
        the frame being read (releasing the beats before it), else the pending flush beat and
        the take of the head descriptor (its meta pushed and its first read, or a dropped
        frame's space released); then the buffer's read address, read in every cycle."""
        L = self.lanes
        rp, rd_free, slot_give = t.wr.rp, t.wr.rd_free, t.wr.slot_give
        verdict_q, meta_q = t.q.verdict_q, t.meta_q
        tok, rd_addr, busy, addr, left = t.tok, t.rd_addr, t.busy, t.addr, t.left
        f_sel, f_keep, f_flush, f_end = t.f_sel, t.f_keep, t.f_flush, t.f_end
        pend, p_sel, p_keep, credit = t.pend, t.p_sel, t.p_keep, t.credit
        take, push, head, drop, head_ok = t.take, t.push, t.head, t.drop, t.head_ok
        # The registers of the frame being read (``addr``, ``left``, ``f_*``) are loaded from
        # the head in every cycle the side is not busy, and ``p_sel``/``p_keep`` in every cycle
        # they may change (no flush beat waiting for credit): their enables are functions of
        # registers, and only ``busy`` and ``pend`` take the decision (a late decision on many
        # enables is a long path after placement).
        with m.If(~busy):
            m.d.sync += [addr.eq(head.first + 1), left.eq(head.reads_m1),
                         f_sel.eq(head.sel), f_keep.eq(head.last_keep),
                         f_flush.eq(head.flush), f_end.eq(head.end)]
            with m.If(credit | ~pend):
                m.d.sync += [p_sel.eq(head.sel), p_keep.eq(head.last_keep)]
        with m.If(credit):
            with m.If(busy):
                m.d.comb += [
                    tok.rd.eq(1), tok.emit.eq(1),
                    tok.last.eq((left == 1) & ~f_flush), tok.sel.eq(f_sel),
                    tok.keep.eq(Mux((left == 1) & ~f_flush, f_keep, L)),
                ]
                # the beats before the one read now are released as the frame is read (its
                # last beat releases the whole frame), so a maximum frame's buffer space is
                # free again while it drains: one maximum frame of buffer keeps up with
                # back-to-back maximum frames
                m.d.sync += [addr.eq(addr + 1), left.eq(left - 1), rd_free.eq(addr)]
                with m.If(left == 1):
                    m.d.sync += [busy.eq(0), rd_free.eq(f_end),
                                 pend.eq(f_flush), p_sel.eq(f_sel), p_keep.eq(f_keep)]
            with m.Else():
                with m.If(pend):
                    m.d.comb += [tok.emit.eq(1), tok.last.eq(1), tok.sel.eq(p_sel),
                                 tok.keep.eq(p_keep)]
                    m.d.sync += pend.eq(0)
                with m.If(head_ok):
                    m.d.comb += take.eq(1)
                    with m.If(drop | ~head.has):
                        m.d.sync += rd_free.eq(head.end)
                    with m.If(~drop):
                        m.d.comb += push.eq(1)
                        with m.If(head.has):
                            m.d.comb += tok.rd.eq(1)
                            with m.If(head.one):
                                m.d.sync += [rd_free.eq(head.end), pend.eq(head.flush)]
                            with m.Else():
                                m.d.sync += busy.eq(1)
        # The buffer is read in every cycle (its address needs no decision) and ``data2`` keeps
        # only the reads a token asked for: the take decision stays off the block RAMs' read
        # enables (a late decision on many RAM pins is a long path); ``data2`` is the same
        # register as before in every cycle (it held the last asked-for read then too).
        m.d.comb += rd_addr.eq(Mux(busy, addr, head.first))
        m.d.comb += [rp.addr.eq(rd_addr[:self.abits]), rp.en.eq(1)]
        # The take with a queued verdict, alone (``take`` with ``vq_z`` low), pops the verdict
        # queue; the slot count learns of a take a cycle later (one register, the slots only
        # look fuller for a cycle): neither waits for a verdict that comes out in this cycle.
        take_q = Signal()
        give = Signal()
        m.d.comb += [take_q.eq(credit & ~busy & ~t.vq_z & verdict_q.r_rdy & ~t.vskip & t.head_v
                               & (verdict_q.r_data[0] | t.meta_room)),
                     verdict_q.r_en.eq(take_q | t.vskip), slot_give.eq(give)]
        m.d.sync += give.eq(take)

    def _meta_fields(self, m, mp, mp_v, desc_q, head, fl, push, take):
        """The meta push (``mp``, ``mp_v``) of a take that pushes (``push``), in the take's
        cycle: the opcode's flags (``fl``), the payload length and the taken entry's handle
        (for the header RAM, the descriptor queue's ``a_idx``)."""
        m.d.comb += [mp_v.eq(push), mp.fl.eq(fl), mp.payload_len.eq(head.payload_len),
                     mp.handle.eq(desc_q.a_idx)]

    def _realign(self, m, rp, out_q, tok, tok1, tok2):
        """Read stages S1 (memory read in flight) and S2 (registered read data): the payload
        realigned to lane 0 (``{cur, prev} >> 8·sel``) into the payload queue ``out_q``."""
        L = self.lanes
        shifts = self.shifts
        # S1: memory read in flight; S2: registered read data, realign into the payload queue.
        # reset-less: read only under tok2, so it can be the block RAM's output register
        data2 = Signal(self.width, reset_less=True)
        prev = Signal(self.width)
        m.d.sync += [tok1.eq(tok), tok2.eq(tok1)]
        with m.If(tok1.rd):
            m.d.sync += data2.eq(rp.data)
        with m.If(tok2.rd):
            m.d.sync += prev.eq(data2)
        pair = Signal(2 * self.width)
        m.d.comb += pair.eq(Cat(prev, data2))
        shifted = Signal(self.width)
        with m.Switch(tok2.sel):
            for c, s in enumerate(shifts):
                with m.Case(c):
                    m.d.comb += shifted.eq(pair[8 * s:8 * s + self.width])
        m.d.comb += [
            out_q.i.valid.eq(tok2.emit),
            out_q.i.payload.data.eq(shifted),
            out_q.i.payload.keep.eq(Cat(*[tok2.keep > j for j in range(L)])),
            out_q.i.payload.last.eq(tok2.last),
        ]
