"""cocotb bench for READ Place with host memory (tb/blocks/test_read_place.py builds the harness).

The bench plays PSN Check (response headers on ``hdr``, payload beats on ``pay``, with garbage
beyond ``len`` in the last beat), the requester's engine (READ slots written on ``rec``) and the
completer (a ``dec`` answer a few cycles after each DECIDE taken, from a script). A Python model
follows the block's contract (the one-entry cache, the checks, the placement through two SGEs)
and gives the exact sequence of ``ack`` events, the drops, the faults and the host memory bytes
after placement; host memory is compared byte for byte over the whole region, with guard
regions around it.
"""
import random
from collections import deque

import cocotb
from amaranth.hdl import Shape
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge

from rnic.ifaces import AckKind, ack_layout, qpn_layout, read_dec_layout, read_rec_layout
from rnic.ifaces import resp_hdr_layout
from sim.hostmem import AxiResp, HostMem
from sim.knobs import knob
from sim.wrap import pack, unpack
from tb.blocks.cocotb_axi_master import Sink, Source

W = knob("READ_PLACE_WIDTH")
B = W // 8
BUS, MRLEN = 0x0010_0000, 0x20000
ACKNOWLEDGE, FIRST, MIDDLE, LAST, ONLY = 0x11, 0x0D, 0x0E, 0x0F, 0x10
M24 = 0xFFFFFF
WIRE, PLACED, DECIDE = int(AckKind.WIRE), int(AckKind.PLACED), int(AckKind.DECIDE)


class PaySource:
    """Drives ``pay`` (AXI-Stream names) from a queue of beats (data, keep, last)."""

    def __init__(self, dut, clk, rng, idle):
        self.dut, self.clk, self.rng, self.idle = dut, clk, rng, idle
        self.q = deque()
        self.taken_n = 0
        self.cycle = 0
        self.stamps = []
        dut.pay_tvalid.value = 0
        dut.pay_tdata.value = 0
        dut.pay_tkeep.value = 0
        dut.pay_tlast.value = 0
        dut.pay_tuser.value = 0
        cocotb.start_soon(self._run())

    @property
    def busy(self):
        return bool(self.q)

    async def _run(self):
        d = self.dut
        cur = None
        while True:
            await FallingEdge(self.clk)
            self.cycle += 1
            if cur is None and self.q and self.rng.random() >= self.idle:
                cur = self.q.popleft()
                d.pay_tdata.value, d.pay_tkeep.value, d.pay_tlast.value = cur
                d.pay_tvalid.value = 1
            elif cur is None:
                d.pay_tvalid.value = 0
            await ReadOnly()
            if cur is not None and int(d.pay_tready.value):
                cur = None
                self.taken_n += 1
                self.stamps.append(self.cycle)


class Pulser:
    """Drives an always-ready stream ``<name>_valid``/``_payload``: one item per cycle."""

    def __init__(self, dut, name, layout, clk):
        self.valid = getattr(dut, f"{name}_valid")
        self.payload = getattr(dut, f"{name}_payload")
        self.layout, self.clk = layout, clk
        self.q = deque()
        self.valid.value = 0
        self.payload.value = 0
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            await FallingEdge(self.clk)
            if self.q and not self.valid.value:     # (an idle cycle after each, as the
                self.payload.value = pack(self.layout, self.q.popleft())    # requester's)
                self.valid.value = 1
            else:
                self.valid.value = 0


class AckSink(Sink):
    def __init__(self, tb, *args, **kw):
        self.tb = tb
        super().__init__(*args, **kw)

    def decode(self, value):
        a = {name: value >> f.offset & ((1 << Shape.cast(f.shape).width) - 1)
             for name, f in ack_layout}          # (unpack does not take the enum field)
        if a["kind"] == DECIDE:
            self.tb.on_decide(a)
        return (a["kind"], a["qpn"], a["psn"], a["syndrome"])


class TB:
    def __init__(self, dut, seed=1, hostile=True):
        self.dut = dut
        self.rng = random.Random(seed)
        self.mem = HostMem(dut, "m_axi", dut.clk, dut.rst, seed=seed + 2,
                           max_latency=30 if hostile else 2, backpressure=hostile,
                           interleave=hostile)
        self.hdr = Source(dut, "hdr", resp_hdr_layout, dut.clk, rng=random.Random(seed + 3),
                          idle=0.3 if hostile else 0)
        self.hdr_stamps = []                # the cycles the headers were taken
        self.hdr.on_taken = lambda _: self.hdr_stamps.append(self.cycle)
        self.pay = PaySource(dut, dut.clk, random.Random(seed + 4), 0.2 if hostile else 0)
        self.ack = AckSink(self, dut, "ack", ack_layout, dut.clk, rng=random.Random(seed + 5),
                           stall=0.3 if hostile else 0)
        self.fault = Sink(dut, "fault", qpn_layout, dut.clk, rng=random.Random(seed + 6),
                          stall=0.3 if hostile else 0)
        self.rec = Pulser(dut, "rec", read_rec_layout, dut.clk)
        self.qp_set = Pulser(dut, "qp_set", qpn_layout, dut.clk)
        dut.dec_valid.value = 0
        dut.dec_payload.value = 0
        self.dec_q = deque()                # answers due: (cycle, ok, idx, una or None, gap)
        self.dec_delay = None               # cycles to each answer (None: 1, or 1..6 hostile)
        self.hostile = hostile
        self.init = self.rng.randbytes(MRLEN)
        self.mem.write(BUS, self.init)
        self.mem.add_guard(BUS - 0x10000, 0x10000)
        self.mem.add_guard(BUS + MRLEN, 0x10000)
        self.model = bytearray(self.init)   # host memory as the model says
        self.masked = []                    # (start, end) not compared (faulted placements)
        self.slots = {}                     # idx → record dict (+ "data": the READ's bytes)
        self.cache = None                   # the model's cache: (qpn, idx, next)
        self.mark = None                    # the model's stale mark: (qpn, una, gap)
        self.links = {}                     # slot → the slot of the READ recorded after it
        self.prev = None                    # the record written last
        self.script = {}                    # (qpn, psn) → deque of (ok, idx, una, gap): the
        #                                     completer's answers (una None: ``una_v`` 0)
        self.exp = []                       # ack events expected
        self.exp_faults = []
        self.exp_drops = 0
        self.drops = 0
        self.decides = 0
        self.cycle = 0
        self.dec_bad = 0
        cocotb.start_soon(self._watch())
        cocotb.start_soon(self._dec())

    # ---- the completer ----------------------------------------------------------------------
    def on_decide(self, a):
        ok, idx, una, gap = self.script[(a["qpn"], a["psn"])].popleft()
        delay = self.dec_delay or self.rng.randint(1, 6 if self.hostile else 1)
        self.dec_q.append((self.cycle + delay, ok, idx, una, gap))

    async def _dec(self):
        d = self.dut
        while True:
            await FallingEdge(d.clk)
            if self.dec_q and self.dec_q[0][0] <= self.cycle:
                _, ok, idx, una, gap = self.dec_q.popleft()
                d.dec_payload.value = pack(read_dec_layout, dict(
                    ok=ok, idx=idx, una=una or 0, una_v=int(una is not None), gap=int(gap)))
                d.dec_valid.value = 1
            else:
                d.dec_valid.value = 0
            await ReadOnly()
            if int(d.dec_valid.value) and not int(d.dec_ready.value):
                self.dec_bad += 1

    async def _watch(self):
        d = self.dut
        while True:
            await RisingEdge(d.clk)
            await ReadOnly()
            self.cycle += 1
            self.drops += int(d.drop.value)

    # ---- the engine: READ slots ---------------------------------------------------------------
    def add_read(self, idx, qpn, fpsn, total, pmtu, addr0, len0, addr1):
        data = self.rng.randbytes(total)
        r = dict(idx=idx, qpn=qpn, fpsn=fpsn,
                 lpsn=(fpsn + max(1, -(-total // (128 << pmtu))) - 1) & M24,
                 pmtu=pmtu, total=total, addr0=addr0, len0=len0, addr1=addr1)
        self.rec.q.append(dict({f: r[f] for f in read_rec_layout.members if f in r},
                               span=(r["lpsn"] - fpsn) & M24))
        self.slots[idx] = dict(r, data=data)
        if self.cache is not None and self.cache[1] == idx:
            self.cache = None
        # links: none from or to the slot rewritten; one from the record before when this READ
        # follows it on its QP
        self.links = {s: t for s, t in self.links.items() if idx not in (s, t)}
        p = self.prev
        if p is not None and p["qpn"] == qpn and (p["lpsn"] + 1) & M24 == fpsn and p["idx"] != idx:
            self.links[p["idx"]] = idx
        self.prev = r
        return self.slots[idx]

    def set_qp(self, qpn):
        self.qp_set.q.append(dict(qpn=qpn))
        if self.cache is not None and self.cache[0] == qpn:
            self.cache = None
        if self.mark is not None and self.mark[0] == qpn:
            self.mark = None

    def responses(self, s):
        """The READ responses of slot record ``s``: (opcode, psn, bytes)."""
        pm = 128 << s["pmtu"]
        n = max(1, -(-s["total"] // pm))
        out = []
        for i in range(n):
            op = ONLY if n == 1 else FIRST if i == 0 else LAST if i == n - 1 else MIDDLE
            out.append((op, (s["fpsn"] + i) & M24, s["data"][i * pm:(i + 1) * pm]))
        return out

    # ---- PSN Check: headers and beats, and the model ----------------------------------------
    def put_ack(self, qpn, psn, syndrome=0):
        self.hdr.put(dict(opcode=ACKNOWLEDGE, qpn=qpn, psn=psn, syndrome=syndrome, len=0))
        self.exp.append((WIRE, qpn, psn, syndrome))

    def put_resp(self, qpn, op, psn, payload, decide=None, fault=False, keep=True):
        """One READ response; ``decide`` = the completer's answer (ok, idx[, una[, gap]]) if
        asked (default: ok through the slot whose READ holds ``psn``; una None: not given).
        ``keep``: the model keeps the answer's una as the stale mark (False: a SET_QP of the
        QP meets the answer)."""
        length = len(payload)
        self.hdr.put(dict(opcode=op, qpn=qpn, psn=psn, syndrome=0x1F if op != MIDDLE else 0,
                          len=length))
        if length:
            nb = -(-length // B)
            padded = payload + self.rng.randbytes(nb * B - length)
            for k in range(nb):
                n = min(B, length - k * B)
                self.pay.q.append((int.from_bytes(padded[k * B:(k + 1) * B], "little"),
                                   (1 << n) - 1, int(k == nb - 1)))
        # the model
        c = self.cache
        mk = self.mark
        if c is not None and c[0] == qpn and c[2] == psn:
            idx = c[1]
        elif mk is not None and mk[0] == qpn and ((psn - mk[1]) & M24 >= 1 << 23
                                                  or mk[2] and psn != mk[1]):
            self.exp_drops += 1                 # before the mark's una (or after, after a
            #                                     gap): refused, not asked
            self.cache = None
            return "stale"
        else:
            if decide is None:
                decide = (1, self.find(qpn, psn))
            decide = tuple(decide) + (None, False)[len(decide) - 2:]
            self.script.setdefault((qpn, psn), deque()).append(decide)
            self.exp.append((DECIDE, qpn, psn, 0))
            if decide[2] is not None and keep:
                self.mark = (qpn, decide[2], decide[3])
            if not decide[0]:
                self.exp_drops += 1
                self.cache = None
                return "refused"
            idx = decide[1]
        s = self.slots[idx]
        pm = 128 << s["pmtu"]
        dp = (psn - s["fpsn"]) & M24
        off = dp * pm
        last = psn == s["lpsn"]
        good = dp <= ((s["lpsn"] - s["fpsn"]) & M24) and (
            op in (LAST, ONLY) and length == s["total"] - off if last
            else op in (FIRST, MIDDLE) and length == pm) and (
            psn != s["fpsn"] or op in (FIRST, ONLY))
        if not good:
            self.exp_drops += 1
            self.cache = None
            return "dropped"
        if self.mark is not None and self.mark[0] == qpn:
            self.mark = self.mark[:2] + (False,)      # accepted: no gap any more
        if not last:
            self.cache = (qpn, idx, (psn + 1) & M24)
        elif idx in self.links:
            self.cache = (qpn, self.links[idx], (psn + 1) & M24)
        else:
            self.cache = None
        parts = []
        a = min(length, max(0, s["len0"] - off))
        if a:
            parts.append((s["addr0"] + off, payload[:a]))
        if length - a:
            parts.append((s["addr1"] + off + a - s["len0"], payload[a:]))
        for addr, b in parts:
            if fault:
                self.masked.append((addr - BUS, addr - BUS + len(b)))
            else:
                self.model[addr - BUS:addr - BUS + len(b)] = b
        if fault:
            self.exp_faults.append(qpn)
            self.cache = None
            return "fault"
        self.exp.append((PLACED, qpn, psn, 0))
        return "placed"

    def find(self, qpn, psn):
        for idx, s in self.slots.items():
            if s["qpn"] == qpn and ((psn - s["fpsn"]) & M24) <= ((s["lpsn"] - s["fpsn"]) & M24):
                return idx
        return 0

    def put_read(self, s, **kw):
        for op, psn, b in self.responses(s):
            self.put_resp(s["qpn"], op, psn, b, **kw)

    # ---- checking -----------------------------------------------------------------------------
    async def settle(self, limit=200000):
        """Wait until everything offered is taken and every expected event is out."""
        for _ in range(limit):
            if (not self.hdr.busy and not self.pay.busy and not self.rec.q and not self.qp_set.q
                    and len(self.ack.items) >= len(self.exp)
                    and len(self.fault.items) >= len(self.exp_faults)):
                break
            await RisingEdge(self.dut.clk)
        else:
            raise AssertionError(f"timeout: {len(self.ack.items)} of {len(self.exp)} events, "
                                 f"hdr busy {self.hdr.busy}, pay busy {self.pay.busy}")
        await ClockCycles(self.dut.clk, 200)        # nothing more follows

    def check(self):
        got = self.ack.items
        for k, (g, e) in enumerate(zip(got, self.exp)):
            assert g == e, f"event {k}: {g} != {e} (before: {got[max(0, k - 3):k]})"
        assert len(got) == len(self.exp), (len(got), len(self.exp), got[len(self.exp):][:4])
        assert [f["qpn"] for f in self.fault.items] == self.exp_faults, self.fault.items
        assert self.drops == self.exp_drops, (self.drops, self.exp_drops)
        assert self.dec_bad == 0, "dec.ready low"
        mem = self.mem.read(BUS, MRLEN)
        exp = bytearray(self.model)
        got_m = bytearray(mem)
        for a, e in self.masked:
            exp[a:e] = bytes(e - a)
            got_m[a:e] = bytes(e - a)
        if bytes(got_m) != bytes(exp):
            bad = [i for i in range(MRLEN) if got_m[i] != exp[i]]
            raise AssertionError(f"{len(bad)} bytes differ, first at {BUS + bad[0]:#x}")
        self.mem.check()


async def start(dut, seed=1, hostile=True):
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 5)
    dut.rst.value = 0
    tb = TB(dut, seed, hostile)
    await ClockCycles(dut.clk, 5)
    return tb


def dest(tb, length, odd=True):
    """A bus address of the region for ``length`` bytes (odd unless asked)."""
    off = tb.rng.randrange(0, (MRLEN - length - 128) // 64) * 64
    return BUS + off + (tb.rng.choice((1, 3, 5, 13, 61)) if odd else 0)


@cocotb.test()
async def place_all(dut):
    """READs of many lengths (0, 1, PMTU − 1, PMTU, PMTU + 1, 3·PMTU + 5), PMTU 256 and 4096,
    one or two SGEs (the boundary inside a response, at a response's edge, at 0), odd
    addresses, two READs interleaved (cache misses: DECIDE again), ACKs between responses, the
    PSN wrapping through 0."""
    tb = await start(dut)
    idx = 0
    reads = []
    for pmtu in (1, 5):
        pm = 128 << pmtu
        for total in (0, 1, pm - 1, pm, pm + 1, 3 * pm + 5):
            for split in ("one", "inside", "edge"):
                if total > 8192 and split == "edge":
                    continue
                if total < 2 and split != "one":
                    continue
                len0 = {"one": total, "inside": total // 2 + 7 if total > 20 else 1,
                        "edge": pm if total > pm else 0}[split]
                len0 = min(len0, total)
                a0 = dest(tb, max(len0, 1))
                a1 = dest(tb, max(total - len0, 1))
                fpsn = M24 - 1 if idx == 3 else tb.rng.getrandbits(24)
                reads.append(tb.add_read(idx % 16, 2 + idx % 5, fpsn, total, pmtu, a0, len0,
                                         a1))
                idx += 1
                if idx % 16 == 0:
                    await run_reads(tb, reads)
                    reads = []
    await run_reads(tb, reads)
    # two READs interleaved response by response, on one QP and on two
    for qa, qb in ((7, 7), (7, 8)):
        ra = tb.add_read(0, qa, 100, 5 * 256, 1, dest(tb, 5 * 256), 5 * 256, 0)
        rb = tb.add_read(1, qb, 105, 4 * 256 + 9, 1, dest(tb, 700), 700, dest(tb, 500))
        for x, y in zip(tb.responses(ra), tb.responses(rb) + [None]):
            tb.put_resp(qa, *x)
            if y:
                tb.put_resp(qb, *y)
        tb.put_ack(qa, 110)
        await tb.settle()
    tb.check()
    dut._log.info("W=%d: %d events, %d DECIDE", W, len(tb.exp),
                  sum(1 for e in tb.exp if e[0] == DECIDE))


@cocotb.test()
async def place_pmtu(dut):
    """Every PMTU code 1..5 (the offset (p − fpsn) · PMTU is made one shift a cycle, as many as
    the code): READs of 3·PMTU + 5 bytes whose second SGE starts inside the third response,
    and one of PMTU + 1 bytes in one SGE, each response placed at its offset."""
    tb = await start(dut, seed=11)
    reads = []
    idx = 0
    for pmtu in range(1, 6):
        pm = 128 << pmtu
        for total, len0 in ((3 * pm + 5, 2 * pm + pm // 2 + 3), (pm + 1, pm + 1)):
            reads.append(tb.add_read(idx, 2 + pmtu, tb.rng.getrandbits(24), total, pmtu,
                                     dest(tb, len0), len0, dest(tb, max(total - len0, 1))))
            idx += 1
    await run_reads(tb, reads)
    tb.check()


async def run_reads(tb, reads):
    """The responses of ``reads`` in turn, an ACK after some; then wait."""
    for k, r in enumerate(reads):
        tb.put_read(r)
        if k % 3 == 1:
            tb.put_ack(r["qpn"], r["lpsn"], 0x1F if k % 2 else 0x60)
    await tb.settle()


@cocotb.test()
async def place_drops(dut):
    """Drops: completer refusal, a wrong length, a wrong opcode (MIDDLE at fpsn, LAST before
    lpsn, MIDDLE at lpsn), a PSN beyond lpsn (passed by the completer), a refusal of a zero-length
    response; the responses after each are placed (their beats not mixed up)."""
    tb = await start(dut, seed=2)
    pm = 256
    r = tb.add_read(3, 4, 0x500, 4 * pm + 10, 1, dest(tb, 3 * pm), 3 * pm, dest(tb, pm + 10))
    z = tb.add_read(4, 5, 0x900, 0, 1, dest(tb, 1), 0, dest(tb, 1))
    await ClockCycles(dut.clk, 4)
    res = r["data"]
    f = lambda i: res[i * pm:(i + 1) * pm]     # noqa: E731
    out = []
    out.append(tb.put_resp(4, FIRST, 0x500, f(0), decide=(0, 0)))          # refused
    out.append(tb.put_resp(4, MIDDLE, 0x500, f(0)))                        # MIDDLE first: drop
    out.append(tb.put_resp(4, FIRST, 0x500, f(0)))                         # asked again: ok
    out.append(tb.put_resp(4, MIDDLE, 0x501, f(1)[:-1]))                   # short: dropped
    out.append(tb.put_resp(4, MIDDLE, 0x501, f(1)))                        # slow path, ok
    out.append(tb.put_resp(4, LAST, 0x502, f(2)))                          # LAST early: drop
    out.append(tb.put_resp(4, MIDDLE, 0x502, f(2)))
    out.append(tb.put_resp(4, MIDDLE, 0x503, f(3)))
    out.append(tb.put_resp(4, MIDDLE, 0x504, res[4 * pm:]))                # MIDDLE at lpsn
    tb.put_ack(4, 0x503)
    out.append(tb.put_resp(4, LAST, 0x505, res[4 * pm:], decide=(1, 3)))   # beyond lpsn
    out.append(tb.put_resp(4, LAST, 0x504, res[4 * pm:] + b"x"))           # too long
    out.append(tb.put_resp(4, LAST, 0x504, res[4 * pm:]))                  # placed
    out.append(tb.put_resp(5, ONLY, 0x900, b"", decide=(0, 4)))            # refused, len 0
    out.append(tb.put_resp(5, ONLY, 0x900, b"", decide=(1, 4)))            # placed, len 0
    out.append(tb.put_resp(5, ONLY, 0x900, b"\x01\x02", decide=(1, 4)))    # len 2 ≠ 0: drop
    assert out == ["refused", "dropped", "placed", "dropped", "placed", "dropped", "placed",
                   "placed", "dropped", "dropped", "dropped", "placed", "refused", "placed",
                   "dropped"], out
    await tb.settle()
    tb.check()


@cocotb.test()
async def place_cache(dut):
    """The cache: a SET_QP of the cached QPN, or a slot write of the cached slot, sends the
    next response of the READ to the slow path (DECIDE again); a SET_QP of another QPN or a
    write of another slot does not; the READ's last response clears it."""
    tb = await start(dut, seed=3)
    pm = 256
    r = tb.add_read(5, 9, 0x10, 8 * pm, 1, dest(tb, 8 * pm), 8 * pm, 0)
    resp = tb.responses(r)
    await ClockCycles(dut.clk, 4)
    n0 = len(tb.exp)
    for k, x in enumerate(resp):
        tb.put_resp(9, *x)
        await tb.settle()
        if k == 1:
            tb.set_qp(9)                         # the cached QPN
        elif k == 2:
            tb.set_qp(10)                        # another one
            tb.add_read(6, 11, 0, 1, 1, dest(tb, 1), 1, 0)
        elif k == 3:
            tb.add_read(5, 9, r["fpsn"], r["total"], 1, r["addr0"], r["len0"], 0)
            tb.slots[5]["data"] = r["data"]      # rewritten as it was
        await ClockCycles(dut.clk, 3)
    decides = [e for e in tb.exp[n0:] if e[0] == DECIDE]
    assert [e[2] for e in decides] == [0x10, 0x12, 0x14], decides
    tb.check()


@cocotb.test()
async def place_fault(dut):
    """A write answered SLVERR: ``fault`` with the QPN, no PLACED; earlier and later READs are
    placed, the next response of the faulted READ goes to the slow path."""
    tb = await start(dut, seed=4)
    pm = 256
    good = tb.add_read(1, 3, 0x40, 2 * pm, 1, dest(tb, 2 * pm), 2 * pm, 0)
    bad = tb.add_read(2, 4, 0x80, 3 * pm, 1, dest(tb, 3 * pm), 3 * pm, 0)
    tb.mem.add_fault(bad["addr0"] + pm, 16, "w", AxiResp.SLVERR)    # inside the 2nd response
    await ClockCycles(dut.clk, 4)
    tb.put_read(good)
    rb = tb.responses(bad)
    tb.put_resp(4, *rb[0])
    tb.put_resp(4, *rb[1], fault=True)
    await tb.settle()
    tb.put_resp(4, *rb[2])                       # the cache was cleared: DECIDE
    tb.put_ack(4, 0x82)
    later = tb.add_read(3, 5, 0x100, pm + 3, 1, dest(tb, pm + 3), 100, dest(tb, pm))
    tb.put_read(later)
    await tb.settle()
    assert tb.exp[-3][0] == DECIDE and tb.exp[-3][2] == 0x100, tb.exp[-6:]
    assert tb.exp[-6][0] == DECIDE and tb.exp[-6][2] == 0x82, tb.exp[-6:]
    tb.check()


@cocotb.test()
async def place_links(dut):
    """Links: READs recorded one after the other on one QP with contiguous PSNs are placed with
    one DECIDE (the first response of the first); a READ recorded after another QP's READ, or
    after a PSN gap, or whose link's target slot was rewritten, is asked for again (the response
    of the READ that was in the rewritten slot is not placed through the new record)."""
    tb = await start(dut, seed=6)
    pm = 256
    reads = []
    psn = 0x300
    for k, total in enumerate((2 * pm, 1, 0, 3 * pm + 1, pm)):
        reads.append(tb.add_read(k, 7, psn, total, 1, dest(tb, max(total, 1)),
                                 total, 0))
        psn += max(1, -(-total // pm))
    await ClockCycles(dut.clk, 12)
    n0 = len(tb.exp)
    for r in reads:
        tb.put_read(r)
    await tb.settle()
    decides = [e[2] for e in tb.exp[n0:] if e[0] == DECIDE]
    assert decides == [0x300], decides
    # not linked: another QP's READ recorded between, then a PSN gap (a SEND between)
    a = tb.add_read(5, 7, psn, pm, 1, dest(tb, pm), pm, 0)
    tb.add_read(6, 8, 0x10, pm, 1, dest(tb, pm), pm, 0)
    b = tb.add_read(7, 7, psn + 1, pm, 1, dest(tb, pm), pm, 0)
    c = tb.add_read(8, 7, psn + 3, 2 * pm, 1, dest(tb, 2 * pm), 2 * pm, 0)
    d = tb.add_read(9, 7, psn + 5, pm, 1, dest(tb, pm), pm, 0)      # linked to c
    await ClockCycles(dut.clk, 12)
    n0 = len(tb.exp)
    for r in (a, b, c):
        tb.put_read(r)
    await tb.settle()
    # d's slot rewritten (d retired elsewhere, the slot reused) before c's last response
    d2 = tb.add_read(9, 3, 0x40, pm, 1, dest(tb, pm), pm, 0)
    await ClockCycles(dut.clk, 6)
    assert tb.put_resp(7, ONLY, psn + 5, d["data"], decide=(0, 0)) == "refused"
    tb.put_read(d2)
    await tb.settle()
    decides = [e[2] for e in tb.exp[n0:] if e[0] == DECIDE]
    assert decides == [psn, psn + 1, psn + 3, psn + 5, 0x40], decides
    assert d is not d2 and tb.slots[9] is d2
    tb.check()


async def _rate(tb, reads, label):
    """The responses of ``reads`` back to back: payload beats taken per cycle from the second
    response's first beat on (the first may take the slow path); asserted ≥ 0.97."""
    await ClockCycles(tb.dut.clk, 8)
    total = sum(r["total"] for r in reads)
    n0 = tb.pay.taken_n
    tb.pay.stamps = []
    for r in reads:
        tb.put_read(r)
    t0 = tb.cycle
    while tb.pay.taken_n < n0 + total // B:
        assert tb.cycle - t0 < 4 * total // B + 1000, f"{tb.pay.taken_n - n0} beats taken"
        await RisingEdge(tb.dut.clk)
    st = tb.pay.stamps
    beats = len(st)
    await tb.settle()
    tb.check()
    per = 4096 // B
    steady = (beats - per) / (st[-1] - st[per] + 1)
    tb.dut._log.warning("W=%d, %s: steady state from the 2nd response: %.4f beats/cycle "
                        "(%d beats in %d cycles over all)", W, label, steady, beats,
                        st[-1] - st[0] + 1)
    assert steady >= 0.97, (label, steady)


@cocotb.test()
async def place_rate(dut):
    """Back-to-back READ responses of 4096 bytes (PMTU 4096), no back-pressure, short host
    latency: the MIDDLE responses of one READ, then one ONLY response each of READs recorded
    one after the other on one QP (linked: no DECIDE between them)."""
    tb = await start(dut, seed=5, hostile=False)
    n = 16 if W == 512 else 8
    total = n * 4096
    r = tb.add_read(7, 12, 0x200, total, 5, BUS + 0x40, total, 0)
    await _rate(tb, [r], "one READ")
    reads = [tb.add_read(k, 12, 0x200 + n + k, 4096, 5, BUS + 0x40 + 4096 * k, 4096, 0)
             for k in range(n)]
    await _rate(tb, reads, f"{n} READs")
    assert sum(1 for e in tb.exp if e[0] == DECIDE) == 2


@cocotb.test()
async def place_held(dut):
    """Two pieces per response, back to back on the fast path, with host memory back-pressure:
    the checks of a response wait until the output registers have handed over the pieces and
    requests of the one before (their lengths are the checks' part lengths)."""
    tb = await start(dut, seed=8)
    pm = 256
    reads = []
    psn = 0x600
    for k in range(8):
        total = 2 * pm - 3 * k
        len0 = 37 + 11 * k                   # (the split inside the first response)
        reads.append(tb.add_read(k, 11, psn, total, 1, dest(tb, len0), len0,
                                 dest(tb, total - len0)))
        psn += 2
    await ClockCycles(dut.clk, 20)
    n0 = len(tb.exp)
    for r in reads:
        tb.put_read(r)
    await tb.settle()
    assert sum(1 for e in tb.exp[n0:] if e[0] == DECIDE) == 1
    tb.check()


async def _coupled(tb, qpn, resps, **kw):
    """``resps`` offered one at a time: each header (and its payload) only once the previous
    header and payload beats are taken (the beats go into the Scatter Path's FIFO, as at the
    top). Returns the cycles between the takes of consecutive headers (the block's own time
    per response: it takes a header once it is done with the one before)."""
    gaps = []
    for op, psn, b in resps:
        n0 = tb.pay.taken_n
        h0 = len(tb.hdr_stamps)
        tb.put_resp(qpn, op, psn, b, **kw)
        nb = -(-len(b) // B)
        while tb.pay.taken_n < n0 + nb or len(tb.hdr_stamps) == h0:
            await RisingEdge(tb.dut.clk)
        if h0:
            gaps.append(tb.hdr_stamps[h0] - tb.hdr_stamps[h0 - 1])
    return gaps


@cocotb.test()
async def place_stale(dut):
    """The stale mark (each answer's ``una`` and ``gap``): a READ placed, then its responses
    again (the responder answering a duplicate READ): the first is asked (refused, una past the
    READ), the others are refused without a DECIDE; a response at una is asked; an answer
    without una leaves the mark, one with una moves it (one entry: the first QP's stale
    responses are asked again); an answer a SET_QP of its QP met (between the DECIDE and the
    answer) leaves no mark; a SET_QP of the mark's QP clears it. After a gap (a response lost,
    the next refused with ``gap``) the responses after una are refused at once too, until the
    one at una is placed. Then the rate, each response offered once the previous one's header
    and beats are taken: a run of stale responses refused by the mark goes at the rate of its
    beats (or a response every 9 cycles); asked one by one they would each wait for the
    completer."""
    tb = await start(dut, seed=7, hostile=False)
    pm = 256
    r = tb.add_read(2, 6, 0x700, 6 * pm, 1, dest(tb, 6 * pm), 6 * pm, 0)
    u = tb.add_read(3, 7, 0x40, 2 * pm, 1, dest(tb, 2 * pm), 2 * pm, 0)
    await ClockCycles(dut.clk, 4)
    tb.put_read(r)
    tb.put_read(u)
    await tb.settle()
    rr, ru = tb.responses(r), tb.responses(u)
    n0 = len(tb.exp)
    out = [tb.put_resp(6, *rr[0], decide=(0, 0, 0x706))]        # asked: una 0x706
    out += [tb.put_resp(6, *x) for x in rr[1:]]                 # stale: refused at once
    out.append(tb.put_resp(6, MIDDLE, 0x706, rr[1][2], decide=(0, 0, 0x706)))   # at una
    out.append(tb.put_resp(7, *ru[0], decide=(0, 0)))           # no una: the mark stays
    out.append(tb.put_resp(6, *rr[2]))                          # still stale
    out.append(tb.put_resp(7, *ru[1], decide=(0, 0, 0x42)))     # the mark moves to QP 7
    out.append(tb.put_resp(6, *rr[3], decide=(0, 0, 0x706)))    # asked again (QP 6 again)
    await tb.settle()
    tb.set_qp(6)                                                # clears the mark
    await ClockCycles(dut.clk, 4)
    out.append(tb.put_resp(6, *rr[4], decide=(0, 0, 0x706), keep=False))
    # ... whose answer a SET_QP of QP 6 meets: not kept
    tb.dec_delay = 12
    while not [e for e in tb.ack.items[n0:] if e[0] == DECIDE and e[2] == 0x704]:
        await RisingEdge(dut.clk)
    tb.set_qp(6)
    await tb.settle()
    tb.dec_delay = None
    out.append(tb.put_resp(6, *rr[5], decide=(0, 0, 0x706)))    # asked: no mark was kept
    out.append(tb.put_resp(6, *rr[0]))                          # stale again
    await tb.settle()
    assert out == ["refused"] + ["stale"] * 5 + ["refused", "refused", "stale", "refused",
                                                 "refused", "refused", "refused",
                                                 "stale"], out
    decides = [(e[1], e[2]) for e in tb.exp[n0:] if e[0] == DECIDE]
    assert decides == [(6, 0x700), (6, 0x706), (7, 0x40), (7, 0x41), (6, 0x703), (6, 0x704),
                       (6, 0x705)], decides
    tb.check()
    # after a gap: a READ's 2nd response lost, the 3rd asked (refused, una at the 2nd, gap):
    # the rest of the run, and its 1st again, refused at once; the 2nd asked and placed, which
    # clears the gap (the 3rd, after the cache is lost to another QP's refusal, is asked)
    g = tb.add_read(5, 10, 0xA00, 6 * pm, 1, dest(tb, 6 * pm), 6 * pm, 0)
    await ClockCycles(dut.clk, 4)
    rg = tb.responses(g)
    n2 = len(tb.exp)
    out = [tb.put_resp(10, *rg[0]), tb.put_resp(10, *rg[2], decide=(0, 0, 0xA01, True))]
    out += [tb.put_resp(10, *x) for x in rg[3:] + rg[:1]]
    out.append(tb.put_resp(10, *rg[1]))
    out.append(tb.put_resp(7, *ru[0], decide=(0, 0)))
    out += [tb.put_resp(10, *x) for x in rg[2:]]
    await tb.settle()
    assert out == ["placed", "refused"] + ["stale"] * 4 + ["placed", "refused"] + \
        ["placed"] * 4, out
    decides = [(e[1], e[2]) for e in tb.exp[n2:] if e[0] == DECIDE]
    assert decides == [(10, 0xA00), (10, 0xA02), (10, 0xA01), (7, 0x40), (10, 0xA02)], decides
    tb.check()
    # the rate: a READ of 12 responses placed, then answered again twice: through the mark,
    # then asked one by one (answers without una)
    n = 12
    q = tb.add_read(4, 9, 0x900, n * pm, 1, dest(tb, n * pm), n * pm, 0)
    await ClockCycles(dut.clk, 4)
    rq = tb.responses(q)
    await _coupled(tb, 9, rq)
    await tb.settle()
    n1 = len(tb.exp)
    tb.set_qp(9)
    await ClockCycles(dut.clk, 4)
    g_mark = await _coupled(tb, 9, rq[:1], decide=(0, 0, 0x900 + n)) + \
        await _coupled(tb, 9, rq[1:])
    await tb.settle()
    tb.set_qp(9)
    await ClockCycles(dut.clk, 4)
    g_ask = await _coupled(tb, 9, rq, decide=(0, 0))
    await tb.settle()
    assert sum(1 for e in tb.exp[n1:] if e[0] == DECIDE) == 1 + n
    tb.check()
    dut._log.warning("W=%d: cycles between the headers of stale responses taken: %s refused "
                     "by the mark (the first asked), %s asked", W, g_mark[1:], g_ask[1:])
    # (the first gap is from the response before the run, the second the asked one's): a run
    # refused by the mark goes at the rate of its beats, and at least one every 9 cycles
    assert max(g_mark[2:]) <= max(pm // B, 9), g_mark
