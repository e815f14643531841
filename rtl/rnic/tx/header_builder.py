"""TX header builder: Ethernet/IPv4/UDP/BTH(/AETH) frames with IPv4 checksum and ICRC.

One request in, one whole frame out. The frame is assembled in a register from the request and
the local addresses with the field tables of :mod:`rnic.wire`, streamed once through a
:class:`rnic.crc.CRC32` (the 14 Ethernet bytes zeroed and standing for the ICRC's eight 0xFF
bytes, the IPv4 TOS/TTL/checksum, UDP checksum and BTH byte 4 forced to ones), then sent with the
ICRC appended. ``tvalid`` stays high from the first to the last beat.

Frames built (interface.md §3): source = ``local_mac``/``local_ip``, destination = the request's
``dmac``/``dip``, IPv4 TOS 0, ID 0, DF, TTL 64, UDP source port from the request, destination
4791, UDP checksum 0, BTH P_Key 0xFFFF, TVer 0, FECN/BECN 0. With ``aeth`` set the frame carries
an AETH (ACK/NAK: 62 bytes); without, BTH only, padded with zeros after the ICRC to 60 bytes.

Version 1 builds header-only frames (every responder ACK/NAK). The requester's data frames need
RETH/IMMDT/IETH and a payload stream spliced in before the ICRC: extend :data:`tx_hdr_layout`
and the FEED/EMIT states (the CRC unit already takes any keep on the last beat).

Pipelined: a request is streamed through the CRC (one beat per cycle) while earlier frames wait
for their ICRC in a queue and leave as soon as it arrives, so the builder takes one request per
``beats`` cycles (W=512: one 62-byte frame per cycle; W=64: one per 8 cycles), with a latency of
about ``beats + CRC latency + 4`` cycles from request to first beat.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .. import wire
from ..crc import CRC32, crc_init_skipping
from ..ifaces import NUM_COUNTERS, Counter
from ..stream import BeatStream, Queue, check_width

__all__ = ["tx_hdr_layout", "HeaderBuilder", "MAX_HDR_FRAME"]

#: one frame to build
tx_hdr_layout = data.StructLayout({
    "dmac": 48,
    "dip": 32,
    "sport": 16,
    "dqpn": 24,
    "opcode": 8,
    "se": 1,
    "ackreq": 1,
    "psn": 24,
    "aeth": 1,          # the frame carries an AETH
    "syndrome": 8,
    "msn": 24,
})

MAX_HDR_FRAME = 64      # bytes of the frame register


class HeaderBuilder(wiring.Component):
    """Builds one header-only RoCEv2 frame per request.

    Parameters
    ----------
    width : int
        Data width W of the transmit stream.

    Attributes
    ----------
    req : In(stream.Signature(tx_hdr_layout))
        Frame requests.
    tx : Out(BeatStream(W))
        Frames, byte 0 in ``data[7:0]``; ``user`` always 0.
    local_mac : In(48)
    local_ip : In(32)
    stat : Out(NUM_COUNTERS)
        Strobes on the last beat of an ACKNOWLEDGE frame: 11 (syndrome 0x00–0x1F), 9 (RNR NAK),
        8 (0x60), 10 (other NAKs).
    """

    def __init__(self, width):
        self.width = check_width(width)
        self.nb = width // 8
        super().__init__({
            "req": In(stream.Signature(tx_hdr_layout)),
            "tx": Out(BeatStream(width)),
            "local_mac": In(48),
            "local_ip": In(32),
            "stat": Out(NUM_COUNTERS),
        })

    def _bytes(self, m, r, icrc, name):
        """Frame bytes (and ICRC-masked bytes) of request ``r`` with ICRC ``icrc``."""
        nb = self.nb
        ip_len = Mux(r.aeth, 48, 44)
        udp_len = Mux(r.aeth, 28, 24)
        sip, dip = self.local_ip, r.dip
        # IPv4 header checksum over the fixed words and the addresses.
        csum_sum = Signal(20, name=f"{name}_csum_sum")
        m.d.comb += csum_sum.eq(0x4500 + ip_len + 0x4000 + 0x4011
                                + sip[16:32] + sip[0:16] + dip[16:32] + dip[0:16])
        fold1 = Signal(17, name=f"{name}_fold1")
        m.d.comb += fold1.eq(csum_sum[0:16] + csum_sum[16:20])
        csum = Signal(16, name=f"{name}_csum")
        m.d.comb += csum.eq(~(fold1[0:16] + fold1[16]))

        eth = wire.ETH.assemble({"dst": r.dmac, "src": self.local_mac,
                                 "ethertype": wire.ETHERTYPE_IPV4})
        ip = wire.IPV4.assemble({"version": 4, "ihl": 5, "total_length": ip_len, "flags": 2,
                                 "ttl": 64, "protocol": wire.IP_PROTO_UDP, "checksum": csum,
                                 "src": sip, "dst": dip})
        udp = wire.UDP.assemble({"sport": r.sport, "dport": wire.ROCE_UDP_PORT,
                                 "length": udp_len})
        bth = wire.BTH.assemble({"opcode": r.opcode, "se": r.se, "pkey": 0xFFFF,
                                 "dqpn": r.dqpn, "ackreq": r.ackreq, "psn": r.psn})
        aeth = wire.AETH.assemble({"syndrome": r.syndrome, "msn": r.msn})
        icrc_b = [icrc[8 * i:8 * i + 8] for i in range(4)]     # little-endian on the wire
        hdr = eth + ip + udp + bth                             # 54 bytes
        nbytes_reg = -(-MAX_HDR_FRAME // nb) * nb
        with_aeth = hdr + aeth + icrc_b
        without = hdr + icrc_b + [Const(0, 8)] * 4
        frame_bytes = [Mux(r.aeth, with_aeth[i], without[i]) for i in range(62)]
        frame_bytes += [Const(0, 8)] * (nbytes_reg - len(frame_bytes))
        frame = Signal(8 * nbytes_reg, name=f"{name}_frame")
        m.d.comb += frame.eq(Cat(*frame_bytes))

        # ICRC input: the same bytes with the variant fields forced to ones, Ethernet zeroed.
        masked_bytes = [Const(0, 8)] * 14 + ip + udp + bth + aeth
        for off in (14 + 1, 14 + 8, 14 + 10, 14 + 11, 34 + 6, 34 + 7, 42 + 4):
            masked_bytes[off] = Const(0xFF, 8)
        masked_bytes += [Const(0, 8)] * (nbytes_reg - len(masked_bytes))
        masked = Signal(8 * nbytes_reg, name=f"{name}_masked")
        m.d.comb += masked.eq(Cat(*masked_bytes))
        return frame, masked

    def _keep(self, m, beat, aeth, totals, nbytes_reg, name):
        """``keep`` and ``last`` of beat ``beat`` of a frame of ``totals[aeth]`` bytes.

        A table over (beat, aeth), so no subtractor or comparator sits on the paths into the
        CRC and ``req.ready``: for every value of ``beat`` it is exactly
        ``left = (total - beat·nb) mod 2^w`` (``w`` bits of 0..nbytes_reg), ``rem = min(left,
        nb)``, ``keep = 2^rem - 1``, ``last = left <= nb``.
        """
        nb = self.nb
        lw = nbytes_reg.bit_length()
        k = Signal(nb, name=f"{name}_keep")
        last = Signal(name=f"{name}_last")
        with m.Switch(Cat(beat, aeth)):
            for a, total in enumerate(totals):
                for b in range(1 << len(beat)):
                    left = (total - b * nb) % (1 << lw)
                    with m.Case(b | (a << len(beat))):
                        m.d.comb += [k.eq((1 << min(left, nb)) - 1), last.eq(left <= nb)]
        return k, last

    def elaborate(self, platform):
        m = Module()
        nb, W = self.nb, self.width
        m.submodules.crc = crc = CRC32(W, init=crc_init_skipping(14, b"\xff" * 8))
        nbytes_reg = -(-MAX_HDR_FRAME // nb) * nb
        nbeats_reg = nbytes_reg // nb
        kbits = max(1, (nbeats_reg - 1).bit_length())
        depth = crc.latency + 2 * nbeats_reg + 4

        # Feed stage: one request at a time through the CRC, one beat per cycle; the request
        # then waits in `pq` for its ICRC, which arrives in order in `cq`.
        m.submodules.pq = pq = Queue(tx_hdr_layout, depth)
        m.submodules.cq = cq = Queue(32, depth)
        r = Signal(tx_hdr_layout)
        feeding = Signal()
        fbeat = Signal(kbits + 1)
        inflight = Signal(range(depth + 2))
        _, masked = self._bytes(m, r, Const(0, 32), "feed")
        crc_keep, crc_last = self._keep(m, fbeat, r.aeth, (54, 58), nbytes_reg, "feed")
        feed_done = Signal()
        m.d.comb += feed_done.eq(feeding & crc_last)
        # Room for one more request in `pq`, registered (no adder in front of req.ready): the
        # requests held or being fed were < depth - 2 last cycle, and grow by at most one a
        # cycle, so they are < depth - 1 now.
        room = Signal(init=1)
        m.d.sync += room.eq(inflight + feeding < depth - 2)
        m.d.comb += self.req.ready.eq((~feeding | feed_done) & room)
        with m.If(self.req.valid & self.req.ready):
            m.d.sync += [r.eq(self.req.payload), fbeat.eq(0), feeding.eq(1)]
        with m.Elif(feed_done):
            m.d.sync += feeding.eq(0)
        with m.Elif(feeding):
            m.d.sync += fbeat.eq(fbeat + 1)
        # The finished request enters `pq` one cycle later, from registers (no decode in front
        # of the queue's write enable). `r` may take the next request in the cycle of
        # `feed_done`, so `pq_d` copies `r` every cycle. The ICRC comes CRC32.latency cycles
        # after the last beat, so the frame is not delayed.
        pq_v = Signal()
        pq_d = Signal(tx_hdr_layout)
        m.d.sync += [pq_v.eq(feed_done), pq_d.eq(r)]
        # The CRC's input is registered once (the beat select and the keep table stay out of
        # its data-term cone): the ICRC, and so the frame, comes one cycle later.
        m.d.sync += [
            crc.i.valid.eq(feeding),
            crc.i.payload.data.eq(masked.word_select(fbeat[:kbits] if nbeats_reg > 1 else 0, W)),
            crc.i.payload.keep.eq(crc_keep),
            crc.i.payload.first.eq(fbeat == 0),
            crc.i.payload.last.eq(crc_last),
        ]
        m.d.comb += [
            pq.i.valid.eq(pq_v),
            pq.i.payload.eq(pq_d),
            cq.i.valid.eq(crc.o.valid),
            cq.i.payload.eq(crc.o.payload),
        ]

        # Emit stage.
        e = pq.o.payload
        ebeat = Signal(kbits + 1)
        frame, _ = self._bytes(m, e, cq.o.payload, "emit")
        tx_keep, tx_last = self._keep(m, ebeat, e.aeth, (60, 62), nbytes_reg, "emit")
        ready_both = Signal()
        m.d.comb += ready_both.eq(pq.o.valid & cq.o.valid)
        m.d.comb += [
            self.tx.valid.eq(ready_both),
            self.tx.payload.data.eq(frame.word_select(ebeat[:kbits] if nbeats_reg > 1 else 0, W)),
            self.tx.payload.keep.eq(tx_keep),
            self.tx.payload.last.eq(tx_last),
        ]
        emit_done = Signal()
        m.d.comb += emit_done.eq(self.tx.valid & self.tx.ready & tx_last)
        with m.If(self.tx.valid & self.tx.ready):
            m.d.sync += ebeat.eq(Mux(tx_last, 0, ebeat + 1))
        m.d.comb += [pq.o.ready.eq(emit_done), cq.o.ready.eq(emit_done)]
        m.d.sync += inflight.eq(inflight + feed_done - emit_done)
        with m.If(emit_done & (e.opcode == 0x11)):
            syn = e.syndrome
            with m.If(syn[5:7] == 0):
                m.d.comb += self.stat[Counter.ACKS].eq(1)
            with m.Elif(syn[5:7] == 1):
                m.d.comb += self.stat[Counter.RNR_NAKS].eq(1)
            with m.Elif(syn == 0x60):
                m.d.comb += self.stat[Counter.SEQ_NAKS].eq(1)
            with m.Else():
                m.d.comb += self.stat[Counter.OTHER_NAKS].eq(1)
        return m
