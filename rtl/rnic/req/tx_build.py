"""TX Packet Build with the Gather Path's data mover: one RoCEv2 request frame per descriptor.

A packet descriptor (:data:`pkt_layout`) names the headers and the payload length. The payload
arrives as gather chunks (:data:`chunk_layout`: bus address and length, in message order). Each
chunk is read from host memory through a :class:`rnic.host.HostMemory` read client. The whole
frame is assembled in an on-chip frame buffer before its first beat leaves, because the MAC takes
no gaps (interface.md §2). The buffer has two banks: the *builder* fills one while the *emitter*
sends the other.

Builder (per packet):

1. **HDR**: the header is Ethernet/IPv4/UDP/BTH[/RETH][/IMMDT or IETH], 54, 58, 70 or 74
   bytes. It is built with the :mod:`rnic.wire` tables and written into words 0.. of the bank.
2. **GATHER**: each chunk's host read is issued as soon as the chunk is handed over (up to 4
   ahead, and one descriptor may wait ahead, so host latency overlaps the previous packet). The
   raw aligned beats are realigned once (``{cur, prev} >> 8·rot``) onto the frame byte position
   and written with byte enables. Chunks of any alignment therefore land back to back after the
   header.

Emitter (per packet, on the other bank):

3. **CRC**: the bank is read once through :class:`rnic.crc.CRC32`. The Ethernet bytes are zeroed
   (they stand for the 8 bytes of 0xFF). IPv4 TOS/TTL/checksum, the UDP checksum and BTH byte 4
   are forced to ones. Pad bytes are forced to zero.
4. **EMIT**: a second read port sends the bank ``CRC latency + 4`` cycles after the CRC pass
   starts, so the ICRC is known before the word that carries it is read. The zero pad, the ICRC
   (little-endian) and the Ethernet padding to 60 bytes are muxed in. ``tvalid`` stays high from
   the first beat to the last.

Why not :class:`rnic.tx.HeaderBuilder`: it builds header-only frames from a register. A data frame
needs its payload spliced in between the header and the ICRC at an arbitrary byte offset, and that
is what this block's frame buffer does. Both blocks use :mod:`rnic.wire` and
:class:`rnic.crc.CRC32`.

Throughput: a packet takes the larger of ``4 + hdr_words + payload beats + ~2 per chunk``
(builder; the 4 cycles register the lengths and the IPv4 checksum) and ``CRC latency + 6 + frame
words`` (emitter). Measured at W=64, PMTU 256: 53 cycles per 40-beat frame.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .. import wire
from ..crc import CRC32, crc_init_skipping
from ..host.axi_master import ReadClientSignature
from ..stream import BeatStream, Queue, beat_layout, check_width

__all__ = ["pkt_layout", "chunk_layout", "TxBuild", "RETH_OPCODES", "IMM4_OPCODES",
           "MAX_PAYLOAD", "MAX_HDR"]

#: RC opcodes carrying a RETH, and those carrying 4 bytes of IMMDT or IETH after it.
RETH_OPCODES = (0x06, 0x0A, 0x0B)
IMM4_OPCODES = (0x03, 0x05, 0x09, 0x0B, 0x16, 0x17)
MAX_PAYLOAD = 4096
MAX_HDR = 74            # Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 + IMMDT 4

#: One request packet to build.
pkt_layout = data.StructLayout({
    "dmac": 48,         # wire order: dmac[47:40] is the first byte
    "dip": 32,          # first octet in [31:24]
    "sport": 16,
    "dqpn": 24,
    "opcode": 8,        # RC opcode; RETH/IMMDT/IETH follow from it
    "se": 1,
    "ackreq": 1,
    "psn": 24,
    "va": 64,           # RETH fields (opcodes 0x06, 0x0A, 0x0B)
    "rkey": 32,
    "dmalen": 32,
    "imm": 32,          # IMMDT or IETH as a big-endian word: imm[31:24] is the first wire byte
    "paylen": 13,       # payload bytes 0..4096 (pad excluded)
    "qpn": 24,          # local QPN, returned with ``fault`` (not sent)
})

#: One gather chunk: ``len`` (1..4096) payload bytes at bus address ``addr``.
chunk_layout = data.StructLayout({
    "addr": 64,
    "len": 13,
})


class TxBuild(wiring.Component):
    """Frame buffer, gather realigner, ICRC and emitter for request frames.

    Parameters
    ----------
    width : int
        Data width W of the transmit stream and of host memory.

    Attributes
    ----------
    pkt : In(stream.Signature(pkt_layout))
        Packet descriptors, taken one at a time when the previous frame is read out.
    chunk : In(stream.Signature(chunk_layout))
        The packet's gather chunks, in payload order, summing exactly to ``paylen`` (none for an
        empty payload).
    rd : Out(ReadClientSignature(W))
        Host-memory read client (requests tagged 0).
    tx : Out(BeatStream(W))
        Frames, byte 0 in ``data[7:0]``; ``user`` always 0; no gap within a frame.
    local_mac : In(48)
    local_ip : In(32)
    fault : Out(stream.Signature(24))
        QPN of a packet dropped because a host read returned a non-OKAY response (no frame
        is sent for it).
    """

    def __init__(self, width):
        self.width = check_width(width)
        self.nb = width // 8
        super().__init__({
            "pkt": In(stream.Signature(pkt_layout)),
            "chunk": In(stream.Signature(chunk_layout)),
            "rd": Out(ReadClientSignature(width)),
            "tx": Out(BeatStream(width)),
            "local_mac": In(48),
            "local_ip": In(32),
            "fault": Out(stream.Signature(24)),
        })

    def elaborate(self, platform):
        m = Module()
        W, nb = self.width, self.nb
        lg = nb.bit_length() - 1
        frame_max = MAX_HDR + MAX_PAYLOAD + 3 + 4
        depth = -(-frame_max // nb)
        hdr_words = -(-MAX_HDR // nb)
        PB = 14                                     # bits of a frame byte position
        WB = (depth + 1).bit_length() + 1           # bits of a word index (+1 headroom)

        m.submodules.mem = mem = Memory(shape=W, depth=2 * depth, init=[])   # two banks
        wp = mem.write_port(granularity=8)
        rp = mem.read_port()
        m.submodules.crc = crc = CRC32(W, init=crc_init_skipping(14, b"\xff" * 8))
        m.submodules.outq = outq = Queue(beat_layout(W), 6, buffered=False)
        m.d.comb += [self.tx.valid.eq(outq.o.valid), self.tx.payload.eq(outq.o.payload),
                     outq.o.ready.eq(self.tx.ready)]

        r = Signal(pkt_layout)
        has_reth = Signal()
        has_imm = Signal()
        hdr_len = Signal(range(MAX_HDR + 1))
        m.d.comb += [
            has_reth.eq(Cat(*[r.opcode == op for op in RETH_OPCODES]).any()),
            has_imm.eq(Cat(*[r.opcode == op for op in IMM4_OPCODES]).any()),
            hdr_len.eq(54 + Mux(has_reth, 16, 0) + Mux(has_imm, 4, 0)),
        ]
        padcnt = Signal(2)
        m.d.comb += padcnt.eq(-r.paylen)
        data_end = Signal(PB)           # first byte after the payload
        crc_end = Signal(PB)            # first byte of the ICRC
        # derived lengths and the IPv4 checksum are registered in a chain (PREP waits for it)
        m.d.sync += [data_end.eq(hdr_len + r.paylen), crc_end.eq(hdr_len + r.paylen + padcnt)]
        hdr_len_r = Signal(range(MAX_HDR + 1))
        m.d.sync += hdr_len_r.eq(hdr_len)

        # ---- the header bytes ---------------------------------------------------------------
        ip_len = Signal(16)
        m.d.sync += ip_len.eq(crc_end + 4 - 14)
        sip, dip = self.local_ip, r.dip
        csum_sum = Signal(20)
        m.d.sync += csum_sum.eq(0x4500 + ip_len + 0x4000 + 0x4011
                                + sip[16:32] + sip[0:16] + dip[16:32] + dip[0:16])
        fold1 = Signal(17)
        m.d.comb += fold1.eq(csum_sum[0:16] + csum_sum[16:20])
        csum = Signal(16)
        m.d.sync += csum.eq(~(fold1[0:16] + fold1[16]))
        eth = wire.ETH.assemble({"dst": r.dmac, "src": self.local_mac,
                                 "ethertype": wire.ETHERTYPE_IPV4})
        ip = wire.IPV4.assemble({"version": 4, "ihl": 5, "total_length": ip_len, "flags": 2,
                                 "ttl": 64, "protocol": wire.IP_PROTO_UDP, "checksum": csum,
                                 "src": sip, "dst": dip})
        udp = wire.UDP.assemble({"sport": r.sport, "dport": wire.ROCE_UDP_PORT,
                                 "length": ip_len - 20})
        bth = wire.BTH.assemble({"opcode": r.opcode, "se": r.se, "padcnt": padcnt,
                                 "pkey": 0xFFFF, "dqpn": r.dqpn, "ackreq": r.ackreq,
                                 "psn": r.psn})
        reth = wire.RETH.assemble({"va": r.va, "rkey": r.rkey, "dmalen": r.dmalen})
        imm = wire.IMMDT.assemble({"imm": r.imm})
        tail = [Mux(has_reth, reth[i], imm[i] if i < 4 else Const(0, 8)) for i in range(16)]
        tail += [Mux(has_reth, imm[i], Const(0, 8)) for i in range(4)]
        hdr_bytes = eth + ip + udp + bth + tail
        hdr_bytes += [Const(0, 8)] * (hdr_words * nb - len(hdr_bytes))
        hdr = Signal(8 * hdr_words * nb)
        m.d.comb += hdr.eq(Cat(*hdr_bytes))

        # ---- byte-enable helper: lanes of word `w` whose byte index lies in [lo, hi) -----------
        def lane_mask(w, lo, hi, name):
            base = Signal(PB + 2, name=f"{name}_base")
            m.d.comb += base.eq(w << lg)
            a = Signal(range(nb + 1), name=f"{name}_a")
            b = Signal(range(nb + 1), name=f"{name}_b")
            m.d.comb += [
                a.eq(Mux(lo <= base, 0, Mux(lo >= base + nb, nb, lo - base))),
                b.eq(Mux(hi <= base, 0, Mux(hi >= base + nb, nb, hi - base))),
            ]
            mask = Signal(nb, name=f"{name}_mask")
            m.d.comb += mask.eq(((Const(1, nb + 1) << b) - 1) & ~((Const(1, nb + 1) << a) - 1))
            return mask

        # ---- gather: chunk reads are issued as soon as the engine hands them over; the
        # builder takes their beats in order (the read client returns them in request order).
        m.submodules.pktq = pktq = Queue(pkt_layout, 2, buffered=False)
        wiring.connect(m, wiring.flipped(self.pkt), pktq.i)
        meta = data.StructLayout({"off": lg, "len": 13})
        m.submodules.chq = chq = Queue(meta, 4, buffered=False)
        m.d.comb += [
            self.rd.req.payload.addr.eq(self.chunk.payload.addr),
            self.rd.req.payload.len_bytes.eq(self.chunk.payload.len),
            self.rd.req.payload.tag.eq(0),
            self.rd.req.valid.eq(self.chunk.valid & chq.i.ready),
            chq.i.payload.off.eq(self.chunk.payload.addr[:lg]),
            chq.i.payload.len.eq(self.chunk.payload.len),
            chq.i.valid.eq(self.chunk.valid & chq.i.ready & self.rd.req.ready),
            self.chunk.ready.eq(chq.i.ready & self.rd.req.ready),
        ]
        pos = Signal(PB)                 # next payload byte position in the frame
        c_len = Signal(13)
        rot = Signal(lg + 1)             # nb − ((pos − off) mod nb), 1..nb
        prev = Signal(W)
        bad = Signal()
        wcount = Signal(WB)

        funnel = Signal(2 * W)
        cur = Signal(W)
        m.d.comb += funnel.eq(Cat(prev, cur) >> (rot * 8))
        wqm1 = Signal(WB)                # the word the current raw beat completes (−1: none)
        wq0 = Signal()                   # wqm1 is −1: the word before the frame, not written
        c_end = Signal(PB)               # pos + c_len, registered
        gmask = lane_mask(wqm1, pos, c_end, "g")

        # ---- the emitter: CRC and EMIT of the other bank, overlapped ---------------------------
        # Bank b is ``full[b]`` from the end of its build to the end of its emission; the builder
        # fills one bank while the emitter sends the other.
        full = Signal(2)
        m_data_end = [Signal(PB, name=f"m_data_end{b}") for b in range(2)]
        m_crc_end = [Signal(PB, name=f"m_crc_end{b}") for b in range(2)]
        wbank = Signal()                 # the builder's bank
        ebank = Signal()                 # the emitter's bank
        e_data_end = Signal(PB)
        e_crc_end = Signal(PB)
        e_frame_end = Signal(PB)
        m.d.comb += e_frame_end.eq(Mux(e_crc_end + 4 < wire.MIN_FRAME, wire.MIN_FRAME,
                                       e_crc_end + 4))
        icrc = Signal(32)
        icrc_ok = Signal()
        rpc = mem.read_port()            # CRC pass
        caddr = Signal(WB)
        cvalid = Signal()
        cword = Signal(WB)
        eaddr = Signal(WB)
        evalid = Signal()
        eword = Signal(WB)
        delay = Signal(range(crc.latency + 5))
        ebase = Mux(ebank, depth, 0)
        m.d.comb += [rpc.addr.eq(ebase + caddr), rp.addr.eq(ebase + eaddr)]
        m.d.sync += [cvalid.eq(0), evalid.eq(0)]
        # the block RAM outputs are registered before any logic (stage 2)
        cvalid2, cdata = Signal(), Signal(W)
        evalid2, edata = Signal(), Signal(W)
        m.d.sync += [cvalid2.eq(cvalid), cdata.eq(rpc.data), evalid2.eq(evalid), edata.eq(rp.data)]

        # Lane selections are computed from the word index while the block RAM reads (stage 1)
        # and registered beside its data; stage 2 only muxes.
        # CRC feed: Ethernet bytes and pad zeroed, the variant fields forced to ones.
        cbase = Signal(PB + 2)
        m.d.comb += cbase.eq(cword << lg)
        cforced, czero = Signal(nb), Signal(nb)
        for i in range(nb):
            x = cbase + i
            forced = Const(0, 1)
            for fo in (15, 22, 24, 25, 40, 41, 46):      # TOS, TTL, IP csum, UDP csum, BTH[4]
                if fo % nb == i:
                    forced = forced | (cword == fo // nb)
            m.d.sync += [cforced[i].eq(forced), czero[i].eq((x >= e_data_end) | (x < 14))]
        crc_words = Signal(WB)          # these three are latched with e_crc_end
        ckeep, cfirst, clast = Signal(nb), Signal(), Signal()
        m.d.sync += [ckeep.eq(lane_mask(cword, 0, e_crc_end, "c")), cfirst.eq(cword == 0),
                     clast.eq(cword == crc_words - 1)]
        masked_lanes = [Mux(cforced[i], 0xFF, Mux(czero[i], 0, cdata[8 * i:8 * i + 8]))
                        for i in range(nb)]
        m.d.comb += [
            crc.i.valid.eq(cvalid2),
            crc.i.payload.data.eq(Cat(*masked_lanes)),
            crc.i.payload.keep.eq(ckeep),
            crc.i.payload.first.eq(cfirst),
            crc.i.payload.last.eq(clast),
        ]

        # EMIT: payload, zero pad, ICRC (little-endian), Ethernet padding
        ebyte = Signal(PB + 2)
        m.d.comb += ebyte.eq(eword << lg)
        sdata, sicrc, sidx = Signal(nb), Signal(nb), Signal(2 * nb)
        for i in range(nb):
            x = ebyte + i
            rel = Signal(PB + 2, name=f"rel{i}")
            m.d.comb += rel.eq(x - e_crc_end)
            m.d.sync += [sdata[i].eq(x < e_data_end), sicrc[i].eq((x >= e_crc_end) & (rel < 4)),
                         sidx[2 * i:2 * i + 2].eq(rel[:2])]
        out_words = Signal(WB)
        ekeep, elast = Signal(nb), Signal()
        m.d.sync += [ekeep.eq(lane_mask(eword, 0, e_frame_end, "o")),
                     elast.eq(eword == out_words - 1)]
        out_lanes = [Mux(sdata[i], edata[8 * i:8 * i + 8],
                         Mux(sicrc[i], icrc.word_select(sidx[2 * i:2 * i + 2], 8), 0))
                     for i in range(nb)]
        icrc_word = Signal(WB)
        m.d.comb += [
            outq.i.valid.eq(evalid2),
            outq.i.payload.data.eq(Cat(*out_lanes)),
            outq.i.payload.keep.eq(ekeep),
            outq.i.payload.last.eq(elast),
        ]

        with m.FSM(name="emitter"):
            with m.State("IDLE"):
                with m.If(full.bit_select(ebank, 1)):
                    n_crc_end = Mux(ebank, m_crc_end[1], m_crc_end[0])
                    n_frame_end = Mux(n_crc_end + 4 < wire.MIN_FRAME, wire.MIN_FRAME, n_crc_end + 4)
                    m.d.sync += [
                        e_data_end.eq(Mux(ebank, m_data_end[1], m_data_end[0])),
                        e_crc_end.eq(n_crc_end),
                        crc_words.eq((n_crc_end + nb - 1) >> lg),
                        out_words.eq((n_frame_end + nb - 1) >> lg),
                        icrc_word.eq(n_crc_end >> lg),
                        caddr.eq(0), eaddr.eq(0), delay.eq(0), icrc_ok.eq(0),
                    ]
                    m.next = "RUN"
            with m.State("RUN"):
                with m.If(caddr != crc_words):
                    m.d.comb += rpc.en.eq(1)
                    m.d.sync += [cvalid.eq(1), cword.eq(caddr), caddr.eq(caddr + 1)]
                with m.If(crc.o.valid):
                    m.d.sync += [icrc.eq(crc.o.payload), icrc_ok.eq(1)]
                # EMIT starts crc.latency + 4 cycles after CRC, so the ICRC is known before the
                # word that carries it is read (the check below never has to wait).
                with m.If(delay != crc.latency + 4):
                    m.d.sync += delay.eq(delay + 1)
                # at most 5 words queued or in flight (2 read stages): the queue never refuses one
                with m.Elif((outq.level + evalid + evalid2 < 5)
                            & ((eaddr < icrc_word) | icrc_ok)):
                    m.d.comb += rp.en.eq(1)
                    m.d.sync += [evalid.eq(1), eword.eq(eaddr), eaddr.eq(eaddr + 1)]
                    with m.If(eaddr == out_words - 1):
                        m.d.sync += [full.bit_select(ebank, 1).eq(0), ebank.eq(~ebank)]
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                # the last word is still in the read stages: keep e_* until it is queued
                m.next = "IDLE"

        m.d.comb += self.fault.payload.eq(r.qpn)
        wbase = Mux(wbank, depth, 0)

        with m.FSM(name="builder"):
            with m.State("IDLE"):
                with m.If(~full.bit_select(wbank, 1)):
                    m.d.comb += pktq.o.ready.eq(1)
                    with m.If(pktq.o.valid):
                        m.d.sync += [r.eq(pktq.o.payload), wcount.eq(0), bad.eq(0)]
                        m.next = "PREP"
            with m.State("PREP"):
                # r → lengths → IPv4 length → checksum sum → checksum: 4 register stages
                m.d.sync += wcount.eq(wcount + 1)
                with m.If(wcount == 3):
                    m.d.sync += wcount.eq(0)
                    m.next = "HDR"
            with m.State("HDR"):
                m.d.comb += [
                    wp.addr.eq(wbase + wcount),
                    wp.data.eq(hdr.word_select(wcount[:max(1, (hdr_words - 1).bit_length())]
                                               if hdr_words > 1 else 0, W)),
                    wp.en.eq((1 << nb) - 1),
                ]
                m.d.sync += wcount.eq(wcount + 1)
                with m.If(wcount == hdr_words - 1):
                    m.d.sync += pos.eq(hdr_len_r)
                    m.next = "CHUNK"
            with m.State("CHUNK"):
                with m.If(pos == data_end):
                    with m.If(bad):
                        m.next = "FAULT"
                    with m.Else():
                        for b in range(2):
                            with m.If(wbank == b):
                                m.d.sync += [m_data_end[b].eq(data_end),
                                             m_crc_end[b].eq(crc_end)]
                        m.d.sync += [full.bit_select(wbank, 1).eq(1), wbank.eq(~wbank)]
                        m.next = "IDLE"
                with m.Else():
                    m.d.comb += chq.o.ready.eq(1)
                    with m.If(chq.o.valid):
                        # D = pos − off; raw beat 0's low part goes to word floor(D / nb)
                        d1 = Signal(PB + 1)
                        m.d.comb += d1.eq(pos + nb - chq.o.payload.off)
                        m.d.sync += [c_len.eq(chq.o.payload.len),
                                     wqm1.eq((d1 >> lg) - 1), wq0.eq((d1 >> lg) == 0),
                                     c_end.eq(pos + chq.o.payload.len),
                                     rot.eq(nb - d1[:lg]), prev.eq(0)]
                        m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += [cur.eq(self.rd.resp.payload.data), self.rd.resp.ready.eq(1)]
                with m.If(self.rd.resp.valid):
                    m.d.comb += [wp.addr.eq(wbase + wqm1), wp.data.eq(funnel[:W]),
                                 wp.en.eq(Mux(wq0, 0, gmask))]
                    m.d.sync += [prev.eq(self.rd.resp.payload.data), wqm1.eq(wqm1 + 1),
                                 wq0.eq(0)]
                    with m.If(self.rd.resp.payload.err):
                        m.d.sync += bad.eq(1)
                    with m.If(self.rd.resp.payload.last):
                        m.next = "FLUSH"
            with m.State("FLUSH"):
                m.d.comb += [cur.eq(0), wp.addr.eq(wbase + wqm1), wp.data.eq(funnel[:W]),
                             wp.en.eq(gmask)]
                m.d.sync += pos.eq(pos + c_len)
                m.next = "CHUNK"
            with m.State("FAULT"):
                m.d.comb += self.fault.valid.eq(1)
                with m.If(self.fault.ready):
                    m.next = "IDLE"
        return m
