"""cocotb bench for RX Parse (rnic.rx.RxParse through sim.wrap.flat_top names).

Knobs: the RX_PARSE_* of sim/knobs.py (docs/testing.md).
"""
import json
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from rnic import wire
from rnic.ifaces import rx_meta_layout
from rnic.opcodes import Op
from sim.knobs import knob
from sim.packets import (LOCAL_IP, LOCAL_MAC, build_frame, drop_reason, expected_meta, icrc)
from sim.wrap import unpack

WIDTH = knob("RX_PARSE_WIDTH")
LANES = WIDTH // 8
FULL = knob("RX_PARSE_FULL")

SENDS = [Op.SEND_FIRST, Op.SEND_MIDDLE, Op.SEND_LAST, Op.SEND_LAST_WITH_IMMEDIATE,
         Op.SEND_ONLY, Op.SEND_ONLY_WITH_IMMEDIATE, Op.SEND_LAST_WITH_INVALIDATE,
         Op.SEND_ONLY_WITH_INVALIDATE]
WRITES = [Op.RDMA_WRITE_FIRST, Op.RDMA_WRITE_MIDDLE, Op.RDMA_WRITE_LAST,
          Op.RDMA_WRITE_LAST_WITH_IMMEDIATE, Op.RDMA_WRITE_ONLY,
          Op.RDMA_WRITE_ONLY_WITH_IMMEDIATE]
ACKS = [Op.ACKNOWLEDGE]
OPS = SENDS + WRITES + ACKS
MTUS = (256, 512, 1024, 2048, 4096)

# (idle cycles on the input, back-pressure on the outputs)
MODES = [(False, False), (True, False), (False, True), (True, True)]


def random_frame(rng, opcode, length, **kw):
    args = dict(
        psn=rng.getrandbits(24), dqpn=rng.getrandbits(24), se=rng.getrandbits(1),
        mig=rng.getrandbits(1), ackreq=rng.getrandbits(1), pkey=rng.choice([0xFFFF, 0x7FFF]),
        fecn=rng.getrandbits(1), becn=rng.getrandbits(1),
        reth=dict(va=rng.getrandbits(64), rkey=rng.getrandbits(32), dmalen=rng.getrandbits(32)),
        imm=rng.getrandbits(32), ieth=rng.getrandbits(32),
        aeth=dict(syndrome=rng.getrandbits(8), msn=rng.getrandbits(24)),
        src_mac=rng.getrandbits(48) & ~(1 << 40), src_ip=rng.getrandbits(32),
        sport=rng.getrandbits(16), ttl=rng.randrange(1, 256), tos=rng.getrandbits(8),
        ip_id=rng.getrandbits(16),
    )
    args.update(kw)
    return build_frame(opcode, rng.randbytes(length), **args)


def pause_gen(rng, p):
    while True:
        yield rng.random() < p


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "i"), dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "payload"), dut.clk, dut.rst)
        self.metas = []
        self.meta_cycles = []
        self.reasons = []           # drop reason strobes in order
        self.frames_seen = 0        # stat bit 0
        self.cycle = 0
        self.in_beats = 0
        self.stalls = 0             # cycles with i_tvalid and not i_tready
        self.first_beat_cycle = None
        self.last_beat_cycle = None
        self.last_in_cycle = None   # cycle of the last accepted tlast
        self.payload_first_cycles = []
        self.meta_ready_p = 0.0
        self.expected_meta_for_payload = []   # meta index of the k-th payload frame
        self.order_errors = []
        self.rng = random.Random(WIDTH * 7 + 1)

    async def start(self):
        dut = self.dut
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        dut.rst.value = 1
        dut.local_mac.value = LOCAL_MAC
        dut.local_ip.value = LOCAL_IP
        dut.drop_all.value = 0
        dut.meta_ready.value = 0
        for _ in range(3):
            await RisingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.rst.value = 0
        cocotb.start_soon(self._monitor())
        cocotb.start_soon(self._meta_ready())

    async def _meta_ready(self):
        dut = self.dut
        while True:
            await FallingEdge(dut.clk)
            dut.meta_ready.value = int(self.rng.random() >= self.meta_ready_p)

    async def _monitor(self):
        dut = self.dut
        in_payload = False
        while True:
            # mid-cycle: every input is driven and settled for the next rising edge
            await FallingEdge(dut.clk)
            await ReadOnly()
            self.cycle += 1
            if dut.i_tvalid.value and not dut.i_tready.value:
                self.stalls += 1
            if dut.i_tvalid.value and dut.i_tready.value:
                self.in_beats += 1
                if self.first_beat_cycle is None:
                    self.first_beat_cycle = self.cycle
                self.last_beat_cycle = self.cycle
                if dut.i_tlast.value:
                    self.last_in_cycle = self.cycle
            stat = int(dut.stat.value)
            if stat & 1:
                self.frames_seen += 1
            for r in range(1, 6):
                if stat >> r & 1:
                    self.reasons.append(r)
            offered = len(self.metas) + int(dut.meta_valid.value)
            if dut.payload_tvalid.value and not in_payload:
                in_payload = True
                k = len(self.payload_first_cycles)
                self.payload_first_cycles.append(self.cycle)
                if k < len(self.expected_meta_for_payload):
                    need = self.expected_meta_for_payload[k]
                    # the guarantee: once every earlier meta has been taken, a frame's meta is
                    # offered no later than its first payload beat (an earlier meta still
                    # waiting for ``meta_ready`` may hold it back)
                    if len(self.metas) >= need and offered <= need:
                        self.order_errors.append((k, need, offered))
            if dut.payload_tvalid.value and dut.payload_tready.value and dut.payload_tlast.value:
                in_payload = False
            if dut.meta_valid.value and dut.meta_ready.value:
                self.metas.append(unpack(rx_meta_layout, int(dut.meta_payload.value)))
                self.meta_cycles.append(self.cycle)

    def set_mode(self, idle, bp):
        if idle:
            self.source.set_pause_generator(pause_gen(random.Random(1), 0.3))
        else:
            self.source.clear_pause_generator()
            self.source.pause = False           # clearing leaves the last value in place
        if bp:
            self.sink.set_pause_generator(pause_gen(random.Random(2), 0.4))
            self.meta_ready_p = 0.3
        else:
            self.sink.clear_pause_generator()
            self.sink.pause = False
            self.meta_ready_p = 0.0

    async def idle_wait(self, extra=40):
        for _ in range(200000):
            if self.source.empty() and self.source.idle():
                break
            await RisingEdge(self.dut.clk)
        else:
            d = self.dut.dut
            state = {n: str(getattr(d, n).value) for n in (
                "slots_used", "wr_ptr", "rd_free", "busy", "pend", "idx", "level")}
            raise AssertionError(f"input stalled: {state} ready {self.dut.i_tready.value}")
        for _ in range(extra):
            await RisingEdge(self.dut.clk)

    async def run(self, frames, *, tuser=None, check=True, drop_all=False, refs=None,
                  gaps=None):
        """Send frames; check every accepted one comes out exactly, the drops counted.

        ``refs``: the frames the reference model judges instead of ``frames`` (one each; a
        frame must come out exactly as its ref would). ``gaps``: idle input cycles after each
        frame (each frame then sent once the one before has gone in).
        """
        tuser = tuser or [0] * len(frames)
        refs = refs or frames
        assert len(refs) == len(frames)
        exp_metas, exp_payloads, exp_reasons = [], [], []
        base_meta = len(self.metas)
        for f, u in zip(refs, tuser):
            r = drop_reason(f, tuser=bool(u), drop_all=drop_all)
            if r:
                exp_reasons.append(r)
            else:
                meta = expected_meta(f)
                if meta["payload_len"]:
                    self.expected_meta_for_payload.append(base_meta + len(exp_metas))
                    exp_payloads.append(_payload_of(f))
                exp_metas.append(meta)
        r0 = len(self.reasons)
        n0 = self.frames_seen
        self.dut.drop_all.value = int(drop_all)
        for k, (f, u) in enumerate(zip(frames, tuser)):
            self.source.send_nowait(AxiStreamFrame(f, tuser=u))
            if gaps is not None:
                await self.idle_wait(extra=gaps[k])
        await self.idle_wait()
        # drain the outputs
        for _ in range(20000):
            if len(self.metas) - base_meta >= len(exp_metas) and \
                    self.sink.count() >= len(exp_payloads):
                break
            await RisingEdge(self.dut.clk)
        for _ in range(60):
            await RisingEdge(self.dut.clk)
        got_metas = self.metas[base_meta:]
        got_payloads = []
        while not self.sink.empty():
            got_payloads.append(bytes(self.sink.recv_nowait().tdata))
        if check:
            assert self.frames_seen - n0 == len(frames), (self.frames_seen - n0, len(frames))
            assert self.reasons[r0:] == exp_reasons, (self.reasons[r0:], exp_reasons)
            assert len(got_metas) == len(exp_metas), (len(got_metas), len(exp_metas))
            for i, (g, e) in enumerate(zip(got_metas, exp_metas)):
                assert g == e, f"meta {i}: got {g}\nexpected {e}"
            assert len(got_payloads) == len(exp_payloads), \
                ([len(x) for x in got_payloads], [len(x) for x in exp_payloads])
            for i, (g, e) in enumerate(zip(got_payloads, exp_payloads)):
                assert g == e, f"payload {i}: {len(g)} vs {len(e)} bytes\n{g.hex()}\n{e.hex()}"
            assert not self.order_errors, self.order_errors
            assert not int(self.dut.meta_valid.value) and not int(self.dut.payload_tvalid.value)
            # every frame taken in has left the descriptor/verdict queues and the buffer
            assert int(self.dut.dut.slots_used.value) == 0
            assert self.dut.dut.wr_ptr.value == self.dut.dut.rd_free.value
        self.dut.drop_all.value = 0
        return got_metas, got_payloads


def _payload_of(frame):
    from sim.packets import decode_frame
    return decode_frame(frame)["payload"]


async def new_tb(dut):
    tb = TB(dut)
    await tb.start()
    return tb


def good_cases(rng, full):
    lengths = list(range(0, 4 * LANES + 4)) + [m + d for m in MTUS for d in (-1, 0, 1)]
    cases = []
    if full:
        for op in OPS:
            for n in lengths:
                cases.append((op, n))
    else:
        for i, n in enumerate(lengths):
            cases.append((OPS[(i * 5) % len(OPS)], n))
        for op in OPS:                         # every opcode at 0 and at a 1-beat-odd length
            cases.append((op, 0))
            cases.append((op, LANES + 1))
    cases.append((Op.SEND_ONLY, 0))            # the 0-byte SEND_ONLY padded to 60 bytes
    rng.shuffle(cases)
    return cases


@cocotb.test()
async def good_frames(dut):
    """Every SEND/WRITE/ACK opcode, lengths 0..4·lanes+3 and MTU±1, modes rotated."""
    tb = await new_tb(dut)
    rng = random.Random(WIDTH)
    cases = good_cases(rng, FULL)
    frames = [random_frame(rng, op, n) for op, n in cases]
    assert any(len(f) == 60 and expected_meta(f)["payload_len"] == 0 for f in frames)
    chunk = -(-len(frames) // len(MODES))
    for k, (idle, bp) in enumerate(MODES):
        tb.set_mode(idle, bp)
        dut._log.warning("chunk %d: idle %s back-pressure %s", k, idle, bp)
        await tb.run(frames[k * chunk:(k + 1) * chunk])


# ---- ICRC vectors of roce-reference.md §1.6 -------------------------------------------------

def _eth(dst, src, ip_bytes, icrc_hex):
    return (bytes.fromhex(dst) + bytes.fromhex(src) + b"\x08\x00" + bytes.fromhex(ip_bytes)
            + bytes.fromhex(icrc_hex)).ljust(60, b"\0")


LM, RM = "020000000001", "020000000002"
VECTORS = {
    "A": (_eth(LM, RM, "4502003412344000401114810a0000010a000002" "c12312b700200000"
               "0430ffff00000011800001000102030405000000", "425ef66b"), 0x0A000002, LM),
    "B": (_eth(LM, RM, "45020030432140004011e3970a0000020a000001" "c45612b7001c0000"
               "1100ffff00000012000001001f000001", "e6ab38b4"), 0x0A000001, LM),
    "C": (_eth(LM, RM, "45020038123540004011147c0a0000010a000002" "c12312b700240000"
               "1780ffff000000118000010100001234aaaaaaaaaaaaaaaa", "3992d146"), 0x0A000002, LM),
    "1": (_eth(LM, RM, "45010040047840004011b4d5c0a80007c0a80007" "c00012b7002caca2"
               "2460ffff000000d300cf1710" "4630818be28935d90e9a95505401be885e500000",
               "78f353f3"), 0xC0A80007, LM),
    "2": (bytes.fromhex("e41d2dab2bc27cfe90643b320800" "45c2003c718c400040119161"
                        "0a0011010a001201" "000012b700280000" "8100ffff4000011800000000"
                        + "00" * 16 + "82fd002a"), 0x0A001201, "e41d2dab2bc2"),
}


@cocotb.test()
async def icrc_vectors(dut):
    """Vectors A–C are forwarded, the UC and CNP captures are counted under 5; a corrupted
    ICRC makes each of them count 4."""
    tb = await new_tb(dut)
    for name, (frame, ip, mac) in VECTORS.items():
        assert icrc(frame[14:14 + int.from_bytes(frame[16:18], "big") - 4]) == \
            frame[14 + int.from_bytes(frame[16:18], "big") - 4:][:4], name
        dut.local_ip.value = ip
        dut.local_mac.value = int(mac, 16)
        await FallingEdge(dut.clk)
        want = 0 if name in "ABC" else 5
        r0, m0 = len(tb.reasons), len(tb.metas)
        bad = bytearray(frame)
        bad[14 + int.from_bytes(frame[16:18], "big") - 1] ^= 0x01
        for f, w in ((frame, want), (bytes(bad), 4)):
            tb.source.send_nowait(AxiStreamFrame(f))
            await tb.idle_wait(60)
            if w == 0:
                assert len(tb.metas) == m0 + 1, name
                assert tb.metas[-1] == expected_meta(f), (name, tb.metas[-1])
                if _payload_of(f):
                    pay = bytes(tb.sink.recv_nowait().tdata)
                    assert pay == _payload_of(f), name
            else:
                assert tb.reasons[r0:] == [w], (name, tb.reasons[r0:])
                r0 += 1
        assert tb.sink.empty()
    dut.local_ip.value = LOCAL_IP
    dut.local_mac.value = LOCAL_MAC


@cocotb.test()
async def icrc_coverage(dut):
    """Corrupting any byte the ICRC covers is counted (4, or a lower reason); changing a masked
    field (TOS, TTL, UDP checksum, FECN/BECN/Resv6) with the same ICRC is accepted."""
    tb = await new_tb(dut)
    rng = random.Random(3)
    base = random_frame(rng, Op.RDMA_WRITE_ONLY_WITH_IMMEDIATE, 9, tos=0, ttl=64,
                        fecn=0, becn=0)
    tot = int.from_bytes(base[16:18], "big")
    frames = []
    for pos in range(14, 14 + tot):
        f = bytearray(base)
        f[pos] ^= 1 << (pos % 8)
        frames.append(bytes(f))
        if pos not in (15, 22, 24, 25, 40, 41, 46):       # fields the ICRC does not mask
            assert drop_reason(f) != 0, pos
    kw = dict(psn=5, dqpn=7, imm=1, reth=dict(va=1, rkey=2, dmalen=9))
    ref = build_frame(Op.RDMA_WRITE_ONLY_WITH_IMMEDIATE, bytes(9), **kw)
    ref_icrc = int.from_bytes(ref[-4:], "big")
    for mod in (dict(tos=0xB8), dict(ttl=3), dict(udp_chksum=0x1234), dict(fecn=1),
                dict(becn=1), dict(resv6=0x2A)):
        f = build_frame(Op.RDMA_WRITE_ONLY_WITH_IMMEDIATE, bytes(9), icrc=ref_icrc, **kw, **mod)
        assert drop_reason(f) == 0, mod
        frames.append(f)
    frames.append(base)
    await tb.run(frames)


# ---- one test per drop reason -----------------------------------------------------------------

def _fix(frame, icrc_too=True):
    """Recompute the IPv4 checksum (and the ICRC) of a mutated frame."""
    f = bytearray(frame)
    f[24:26] = b"\0\0"
    f[24:26] = wire.ipv4_checksum(bytes(f[14:34])).to_bytes(2, "big")
    if icrc_too:
        tot = int.from_bytes(f[16:18], "big")
        end = 14 + tot
        if end <= len(f) and tot >= 32:
            f[end - 4:end] = icrc(bytes(f[14:end - 4]))
    return bytes(f)


def _flip(frame, pos):
    f = bytearray(frame)
    f[pos] ^= 0x10
    return bytes(f)


def _set(frame, pos, value, icrc_too=True, csum_too=True):
    f = bytearray(frame)
    f[pos:pos + len(value)] = value
    return _fix(bytes(f), icrc_too) if csum_too else bytes(f)


def drop_cases(rng):
    g = lambda op=Op.SEND_ONLY, n=20, **kw: random_frame(rng, op, n, **kw)  # noqa: E731
    long_pay = wire.MAX_FRAME - 58 + 6
    return {
        1: [(g(), 1), (g(Op.RDMA_WRITE_ONLY, 300), 1)],
        2: [(g(dst_mac=0x020000000009), 0), (g(dst_ip=0x0A000009), 0),
            (_set(g(), 12, b"\x86\xdd"), 0), (_set(g(), 23, b"\x06"), 0),
            (g(dport=4792), 0), ("drop_all", 0)],
        3: [(_set(g(), 14, b"\x65"), 0), (_set(g(), 14, b"\x46"), 0),
            (_set(g(), 20, b"\x20\x00"), 0), (_set(g(), 20, b"\x00\x08"), 0),
            (_set(g(), 24, b"\x12\x34", csum_too=False), 0),
            (_set(g(), 38, b"\x00\x30"), 0), (_claim_more(g(), 8), 0), (g()[:-3], 0),
            (g(Op.SEND_ONLY, 0, min_len=0), 0),                # 58-byte runt
            (g(Op.ACKNOWLEDGE, 0, min_len=0)[:-1], 0),
            (g(Op.SEND_ONLY, long_pay), 0), (g(Op.SEND_ONLY, 5000), 0)],
        4: [(_flip(g(), 60), 0), (_flip(g(Op.ACKNOWLEDGE, 0), 52), 0),
            (_flip(g(), 14 + 20 + 8 + 12 + 20 + 3), 0)],
        5: [(g(tver=1), 0), (g(pkey=0x7FFE), 0), (g(Op.SEND_ONLY + 0x20), 0), (g(0x15), 0),
            (g(0x81), 0), (g(Op.RDMA_WRITE_ONLY, 4, ext=b""), 0),
            (_pad_short(rng), 0)],
    }


def _claim_more(frame, n):
    """``frame`` with IPv4 and UDP lengths ``n`` bytes longer than it holds (truncated)."""
    f = bytearray(frame)
    for pos in (16, 38):
        f[pos:pos + 2] = (int.from_bytes(f[pos:pos + 2], "big") + n).to_bytes(2, "big")
    return _fix(bytes(f))


def _pad_short(rng):
    """A SEND_ONLY whose PadCnt (3) is larger than the 2 bytes after the BTH."""
    f = random_frame(rng, Op.SEND_ONLY, 2, padcnt=0)
    f = bytearray(f)
    f[43] = (f[43] & 0xCF) | (3 << 4)
    tot = int.from_bytes(f[16:18], "big")
    f[14 + tot - 4:14 + tot] = icrc(bytes(f[14:14 + tot - 4]))
    return bytes(f)


async def _drop_test(dut, reason):
    tb = await new_tb(dut)
    rng = random.Random(100 + reason)
    for frame, user in drop_cases(rng)[reason]:
        good = random_frame(rng, Op.SEND_ONLY, rng.randrange(0, 3 * LANES))
        if frame == "drop_all":
            assert drop_reason(good, drop_all=True) == 2
            await tb.run([good], drop_all=True)
            await tb.run([good])
            continue
        assert drop_reason(frame, tuser=bool(user)) == reason, (reason, frame.hex())
        await tb.run([frame, good], tuser=[user, 0])
    assert tb.stalls == 0            # outputs always ready: drops (even > 4,200 bytes) never stall


@cocotb.test()
async def drop_1_mac_error(dut):
    await _drop_test(dut, 1)


@cocotb.test()
async def drop_2_not_for_us(dut):
    await _drop_test(dut, 2)


@cocotb.test()
async def drop_3_bad_ip_udp(dut):
    await _drop_test(dut, 3)


@cocotb.test()
async def drop_4_bad_icrc(dut):
    await _drop_test(dut, 4)


@cocotb.test()
async def drop_5_bad_bth(dut):
    await _drop_test(dut, 5)


@cocotb.test()
async def drop_several_reasons(dut):
    """Lowest reason wins: MAC error + wrong IP + bad ICRC → 1; wrong MAC + bad ICRC + TVer → 2;
    bad checksum + bad ICRC + UC opcode → 3; bad ICRC + bad P_Key → 4."""
    tb = await new_tb(dut)
    rng = random.Random(9)
    g = lambda **kw: random_frame(rng, Op.SEND_ONLY, 11, **kw)  # noqa: E731
    cases = [
        (_flip(g(dst_ip=0x01020304), 60), 1, 1),
        (_flip(g(dst_mac=0x0200000000AA, tver=2), 58), 0, 2),
        (_flip(_set(_set(g(), 42, b"\x24"), 24, b"\0\0", csum_too=False), 59), 0, 3),
        (_flip(g(pkey=0x1234), 57), 0, 4),
    ]
    frames, users = [], []
    for f, u, want in cases:
        assert drop_reason(f, tuser=bool(u)) == want
        frames += [f, g()]
        users += [u, 0]
    await tb.run(frames, tuser=users)


@cocotb.test()
async def drop_meta_full(dut):
    """A frame with a bad ICRC on the idle path (nothing queued before it) while the meta
    queue has no room (``meta.ready`` held low): it is not taken in the cycle its verdict comes
    out (on the idle path the take waits for meta room whatever the verdict), but a cycle
    later, its drop verdict queued, it is taken without room: dropped, its buffer space and
    slot released and its reason-4 strobe given while ``meta`` stays blocked; the good frame
    behind it waits for room. Released, the good frames' metas and payloads come out in order,
    and maximum frames still pass through the buffer. Every take is watched inside RX Parse
    (``take``, ``vq_z``, ``meta_room``): the drop's timing shows on no port."""
    tb = await new_tb(dut)
    d = dut.dut
    rng = random.Random(WIDTH * 17 + 4)
    tb.meta_ready_p = 1.0                       # meta.ready low from the next cycle on
    takes = []                                  # (vq_z, meta_room) of every take

    async def watch():
        while True:
            await FallingEdge(dut.clk)
            await ReadOnly()
            if d.take.value:
                takes.append((int(d.vq_z.value), int(d.meta_room.value)))

    cocotb.start_soon(watch())
    # the meta stage holds one meta and the meta queue (5 entries) three: no room (< 3)
    goods = [random_frame(rng, Op.SEND_ONLY, 3 * LANES + 5),
             random_frame(rng, Op.RDMA_WRITE_ONLY, 1),
             random_frame(rng, Op.ACKNOWLEDGE, 0),
             random_frame(rng, Op.SEND_ONLY, LANES + 1)]
    bad = _flip(random_frame(rng, Op.SEND_ONLY, 20 * LANES), 60)
    last = random_frame(rng, Op.SEND_ONLY, 2 * LANES)
    assert drop_reason(bad) == 4 and all(drop_reason(f) == 0 for f in goods + [last])
    exp_metas = [expected_meta(f) for f in goods + [last]]
    exp_payloads = [_payload_of(f) for f in goods + [last] if _payload_of(f)]
    tb.expected_meta_for_payload += [k for k, f in enumerate(goods + [last]) if _payload_of(f)]
    r0, n0 = len(tb.reasons), tb.frames_seen

    for f in goods:                             # each taken on the idle path, with room
        tb.source.send_nowait(AxiStreamFrame(f))
        await tb.idle_wait(extra=12)
    assert takes == [(1, 1)] * 4, takes
    assert not d.meta_room.value and d.vq_z.value and int(d.slots_used.value) == 0
    assert dut.meta_valid.value and not tb.metas

    tb.source.send_nowait(AxiStreamFrame(bad))
    await tb.idle_wait(extra=20)
    # taken with its verdict queued (not in the verdict's cycle), without room
    assert takes[4:] == [(0, 0)], takes
    assert tb.reasons[r0:] == [4] and tb.frames_seen - n0 == 5, (tb.reasons[r0:], tb.frames_seen)
    assert int(d.slots_used.value) == 0 and d.wr_ptr.value == d.rd_free.value
    assert not tb.metas

    tb.source.send_nowait(AxiStreamFrame(last))
    await tb.idle_wait(extra=20)
    assert len(takes) == 5 and int(d.slots_used.value) == 1        # waits for room
    assert tb.reasons[r0:] == [4] and tb.frames_seen - n0 == 6 and not tb.metas

    tb.meta_ready_p = 0.0
    for _ in range(2000):
        if len(tb.metas) >= len(exp_metas) and tb.sink.count() >= len(exp_payloads):
            break
        await RisingEdge(dut.clk)
    for _ in range(40):
        await RisingEdge(dut.clk)
    assert tb.metas == exp_metas, (tb.metas, exp_metas)
    got = [bytes(tb.sink.recv_nowait().tdata) for _ in range(tb.sink.count())]
    assert got == exp_payloads, ([len(x) for x in got], [len(x) for x in exp_payloads])
    assert tb.reasons[r0:] == [4] and not tb.order_errors, (tb.reasons[r0:], tb.order_errors)
    assert int(d.slots_used.value) == 0 and d.wr_ptr.value == d.rd_free.value
    assert takes[5:] == [(0, 1)], takes
    # the buffer whole again: two maximum frames back to back through one frame of buffer
    top = wire.MAX_FRAME - 58 - 2
    await tb.run([random_frame(rng, Op.SEND_ONLY, top), random_frame(rng, Op.SEND_ONLY, top)])
    assert all(mr for vz, mr in takes if vz), takes      # no take on the idle path without room


# ---- frames shorter than the header ------------------------------------------------------------

@cocotb.test()
async def short_prefixes(dut):
    """Every prefix (1–80 bytes) of a frame with a RETH and ImmDt, each right behind the whole
    frame (back to back): the header bytes a short frame lacks read as 0 (the reference model's
    rule), never as the previous frame's bytes, so each prefix is counted under the reason the
    model gives (2 while the destination MAC, EtherType, IPv4 destination, protocol or port is
    incomplete, 3 after)."""
    tb = await new_tb(dut)
    rng = random.Random(WIDTH * 5 + 3)
    frames = []
    for n in range(1, 81):
        whole = random_frame(rng, Op.RDMA_WRITE_ONLY_WITH_IMMEDIATE, rng.randrange(0, 2 * LANES))
        frames += [whole, whole[:n]]
    await tb.run(frames)
    assert tb.stalls == 0


@cocotb.test()
async def max_frames_backpressure(dut):
    """Back-to-back frames of up to 4,200 bytes (one maximum frame of buffer, its beats released
    as they are read) with short frames between them, outputs back-pressured, then always
    ready: every byte comes out exactly (no beat overwritten before it is read)."""
    tb = await new_tb(dut)
    rng = random.Random(WIDTH * 7 + 1)
    top = wire.MAX_FRAME - len(build_frame(Op.RDMA_WRITE_ONLY, b"", min_len=0))
    frames = []
    for k in range(8):
        frames.append(random_frame(rng, rng.choice([Op.SEND_ONLY, Op.RDMA_WRITE_ONLY]),
                                   top - rng.randrange(0, 8)))
        frames += [random_frame(rng, Op.SEND_ONLY, rng.randrange(0, 40))
                   for _ in range(k % 3)]
    assert max(len(f) for f in frames if len(f) <= wire.MAX_FRAME) > wire.MAX_FRAME - 8
    tb.set_mode(False, True)
    await tb.run(frames)
    tb.set_mode(False, False)
    await tb.run(frames)


# ---- bytes after the IPv4 datagram (interface.md §3) -------------------------------------------

def _datagram_frame(rng, align, op=None):
    """An unpadded frame (Ethernet header + IPv4 datagram) whose length is ``align`` mod lanes:
    PadCnt 0..3 with that many pad bytes, so the datagram's end takes every lane."""
    op = rng.choice(OPS) if op is None else op
    padcnt = rng.randrange(4)
    len0 = len(build_frame(op, b"", padcnt=0, min_len=0))
    k = rng.randrange(2 * LANES)
    n = k + (align - (len0 + k + padcnt)) % LANES
    d = random_frame(rng, op, n, padcnt=padcnt, min_len=0)
    assert len(d) % LANES == align and len(d) == len0 + n + padcnt
    return d


def _mutate(rng, d):
    """(datagram frame, tuser): unchanged most of the time, else a mutation that some check
    (of any reason 1–5) may catch; the reference model decides."""
    kind = rng.choices(["none", "icrc", "pkey", "dst", "csum", "udp", "padcnt", "mac"],
                       [14, 2, 1, 1, 1, 1, 1, 1])[0]
    f = bytearray(d)
    if kind == "icrc":                          # the 4 bytes ending at the datagram's end
        f[len(f) - 1 - rng.randrange(4)] ^= 1 << rng.randrange(8)
    elif kind == "pkey":
        f[44:46] = b"\x12\x34"
        f = bytearray(_fix(bytes(f)))
    elif kind == "dst":
        f[30] ^= 0x40
        f = bytearray(_fix(bytes(f)))
    elif kind == "csum":
        f[24] ^= 0x08
    elif kind == "udp":
        f[38:40] = ((int.from_bytes(f[38:40], "big") + rng.choice([-4, -1, 1, 4])) & 0xFFFF
                    ).to_bytes(2, "big")
        f = bytearray(_fix(bytes(f)))
    elif kind == "padcnt":
        f[43] = (f[43] & 0xCF) | (3 << 4)
        f = bytearray(_fix(bytes(f)))
    return bytes(f), int(kind == "mac")


def _with_trailer(rng, d, t):
    """``d`` (a frame ending at its datagram's end) with ``t`` random bytes after the datagram:
    directly after it or after zero padding to 60 bytes, the whole at least 60 bytes (short
    frames padded with random bytes: nothing after the datagram is read)."""
    body = d.ljust(wire.MIN_FRAME, b"\0") if rng.random() < 0.5 else d
    f = body + rng.randbytes(t)
    return f + rng.randbytes(max(0, wire.MIN_FRAME - len(f)))


@cocotb.test()
async def trailer(dut):
    """Bytes after the IPv4 datagram (a trailer of 1–40 bytes, or longer; Ethernet padding to
    60 bytes) are ignored: each frame gives exactly the outputs and counters the reference model
    gives for the same frame without them (the datagram padded with zeros to 60 bytes). The
    datagram's end takes every lane of the beat; good frames and frames dropped for reasons
    1–5; idle input cycles and back-pressure rotated."""
    tb = await new_tb(dut)
    rng = random.Random(WIDTH * 3 + 17)
    pairs = [(a, t) for a in range(LANES) for t in range(1, 41)]
    if len(pairs) > 320:                        # W ≥ 128: every lane, every trailer length
        pairs = [(a, 1 + (3 * a + 17 * k) % 40) for a in range(LANES) for k in range(3)]
        pairs += [(rng.randrange(LANES), t) for t in range(1, 41)]
    assert {a for a, _ in pairs} == set(range(LANES))
    assert {t for _, t in pairs} == set(range(1, 41))
    frames, refs, users = [], [], []
    for a, t in pairs:
        d, u = _mutate(rng, _datagram_frame(rng, a))
        frames.append(_with_trailer(rng, d, t))
        refs.append(d.ljust(wire.MIN_FRAME, b"\0"))
        users.append(u)
    # longer trailers, up to a 4,200-byte frame
    for t in (41, 63, 64, 65, 100, 257, 1000):
        d, u = _mutate(rng, _datagram_frame(rng, rng.randrange(LANES)))
        frames.append(_with_trailer(rng, d, t))
        refs.append(d.ljust(wire.MIN_FRAME, b"\0"))
        users.append(u)
    big = random_frame(rng, Op.SEND_ONLY, 4000, min_len=0)
    small = random_frame(rng, Op.ACKNOWLEDGE, 0, min_len=0)
    for d in (big, small):
        frames.append(d + rng.randbytes(wire.MAX_FRAME - len(d)))
        refs.append(d.ljust(wire.MIN_FRAME, b"\0"))
        users.append(0)
    # the Ethernet padding alone: short datagrams padded to 60 bytes with nonzero bytes
    for n in (0, 1, 0, 1):
        d = random_frame(rng, Op.SEND_ONLY, n, padcnt=0, min_len=0)      # 58, 59 bytes
        assert len(d) < wire.MIN_FRAME
        frames.append(d + rng.randbytes(wire.MIN_FRAME - len(d)))
        refs.append(d.ljust(wire.MIN_FRAME, b"\0"))
        users.append(0)
    for f, r in zip(frames, refs):
        assert len(f) > len(r) or (len(f) == len(r) == wire.MIN_FRAME and f != r)
        assert wire.MIN_FRAME <= len(f) <= wire.MAX_FRAME
    want = [drop_reason(r, tuser=bool(u)) for r, u in zip(refs, users)]
    assert want.count(0) > len(want) // 2 and set(want) == {0, 1, 2, 3, 4, 5}, want
    order = list(range(len(frames)))
    rng.shuffle(order)
    chunk = -(-len(order) // len(MODES))
    for k, (idle, bp) in enumerate(MODES):
        tb.set_mode(idle, bp)
        part = order[k * chunk:(k + 1) * chunk]
        await tb.run([frames[i] for i in part], refs=[refs[i] for i in part],
                     tuser=[users[i] for i in part])
    # past 4,200 bytes the frame is too long, whatever its datagram
    too_long = big + bytes(wire.MAX_FRAME + 1 - len(big))
    assert drop_reason(too_long) == 3
    await tb.run([too_long, small.ljust(wire.MIN_FRAME, b"\0")])


@cocotb.test()
async def spacing(dut):
    """Frames 0–14 idle cycles apart, so each meets the read side in another state: taken as
    its verdict comes out with nothing queued (its meta and first payload beat on the idle
    path) or queued behind the one before, takes in consecutive cycles, a dropped frame's
    verdict in the cycle before a good frame's; short, one-read and multi-read payloads,
    without and with back-pressure."""
    tb = await new_tb(dut)
    rng = random.Random(WIDTH * 11 + 5)
    kinds = [(Op.SEND_ONLY, 0), (Op.SEND_ONLY, 1), (Op.SEND_ONLY, LANES + 1),
             (Op.SEND_ONLY, 3 * LANES + 5), (Op.RDMA_WRITE_ONLY, LANES - 2),
             (Op.ACKNOWLEDGE, 0)]
    for bp in (False, True):
        tb.set_mode(False, bp)
        frames, gaps = [], []
        for g in range(15):
            for _ in range(4):
                op, n = rng.choice(kinds)
                f = bytearray(random_frame(rng, op, n))
                if rng.random() < 0.3:
                    f[rng.randrange(len(f) - 4, len(f))] ^= 1 << rng.randrange(8)
                frames.append(bytes(f))
                gaps.append(g if rng.random() < 0.75 else 0)
        await tb.run(frames, gaps=gaps)


# ---- throughput and latency ---------------------------------------------------------------------

@cocotb.test()
async def max_then_min_frames(dut):
    """Maximum frames, each followed back to back by more minimum frames than arrive while the
    read side drains it (60 and 62 bytes, dropped ones among them), outputs always ready: the
    descriptor slots hold every frame that waits meanwhile, so the input never stalls."""
    tb = await new_tb(dut)
    rng = random.Random(WIDTH * 13 + 7)
    max_pay = wire.MAX_FRAME - 58 - 2
    frames = []
    for _ in range(3):
        frames.append(random_frame(rng, Op.SEND_ONLY, max_pay))
        for _ in range(wire.MAX_FRAME // wire.MIN_FRAME + 20):
            f = bytearray(random_frame(rng, rng.choice([Op.SEND_ONLY, Op.ACKNOWLEDGE]),
                                       rng.randrange(2)))
            if rng.random() < 0.1:
                f[-1] ^= 1                              # a bad ICRC: dropped
            frames.append(bytes(f))
    await tb.run(frames)
    assert tb.stalls == 0


@cocotb.test()
async def benchmark(dut):
    """Beats per cycle with back-to-back minimum and maximum frames; latency of one frame."""
    tb = await new_tb(dut)
    rng = random.Random(5)
    results = {}
    max_pay = wire.MAX_FRAME - 58 - 2                 # 4198-byte frames (payload + pad = 4140)
    sets = {
        "min60": [random_frame(rng, Op.SEND_ONLY, 0) for _ in range(64)],
        "min62_1B": [random_frame(rng, Op.SEND_ONLY, 1) for _ in range(64)],
        "max": [random_frame(rng, Op.SEND_ONLY, max_pay) for _ in range(6)],
    }
    assert all(len(f) == 60 for f in sets["min60"])
    assert all(len(f) == 4198 for f in sets["max"])
    for name, frames in sets.items():
        tb.first_beat_cycle = None
        b0 = tb.in_beats
        await tb.run(frames)
        beats = tb.in_beats - b0
        cycles = tb.last_beat_cycle - tb.first_beat_cycle + 1
        results[name] = {"beats": beats, "cycles": cycles, "beats_per_cycle": beats / cycles}
        assert beats == cycles, (name, beats, cycles)
    # latency of an isolated frame with idle outputs
    f = random_frame(rng, Op.SEND_ONLY, 2 * LANES)
    m0, p0 = len(tb.meta_cycles), len(tb.payload_first_cycles)
    await tb.run([f])
    results["latency"] = {
        "meta": tb.meta_cycles[m0] - tb.last_in_cycle,
        "payload": tb.payload_first_cycles[p0] - tb.last_in_cycle,
    }
    from rnic.rx import rx_parse_latency
    assert results["latency"] == {k: v for k, v in rx_parse_latency(WIDTH).items()
                                  if k != "stat"}, results["latency"]
    from sim.bench import record
    for name, label in (("min60", "back-to-back 60-byte frames"),
                        ("min62_1B", "back-to-back 62-byte frames, 1-byte payload"),
                        ("max", "back-to-back 4,198-byte frames")):
        record("rx_parse", f"beats/cycle, {label}", results[name]["beats_per_cycle"],
               limit=1.0, target=1.0, config={"W": WIDTH})
    out = knob("RX_PARSE_BENCH_FILE")
    if out:
        with open(out, "w") as fh:
            json.dump(results, fh)
    dut._log.info("RX Parse W=%d: %s", WIDTH, results)



@cocotb.test(skip=knob("RX_PARSE_DEBUG_FRAMES") is None)
async def debug(dut):
    """RX_PARSE_DEBUG_FRAMES="op:len,op:len;..." sends each ';'-group and logs what came out
    (for debugging)."""
    tb = await new_tb(dut)
    rng = random.Random(1)
    for spec in knob("RX_PARSE_DEBUG_FRAMES").split(";"):
        ops = [(int(a.split(":")[0], 0), int(a.split(":")[1])) for a in spec.split(",")]
        frames = [random_frame(rng, op, n) for op, n in ops]
        got = await tb.run(frames, check=False)
        dut._log.warning("spec %s: metas %d payloads %s reasons %s", spec, len(got[0]),
                         [len(p) for p in got[1]], tb.reasons)
