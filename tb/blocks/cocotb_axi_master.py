"""cocotb bench for rnic.host.HostMemory with the hostile AxiRam of sim/hostmem.py.

Also holds the small stream drivers (:class:`Source`, :class:`Sink`) other host-side benches
import. Drive on FallingEdge, sample after ReadOnly (values then hold until the next rising
edge, where the transfer happens).
"""
import random
from collections import deque

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from rnic.host import done_layout, read_beat_layout, req_layout, write_beat_layout
from sim.hostmem import AxiResp, HostMem
from sim.knobs import knob
from sim.wrap import pack, unpack


class Source:
    """Drives ``<name>_valid``/``_payload`` of a DUT input stream from a queue of dicts."""

    def __init__(self, dut, name, layout, clk, *, rng=None, idle=0.0):
        self.valid = getattr(dut, f"{name}_valid")
        self.ready = getattr(dut, f"{name}_ready")
        self.payload = getattr(dut, f"{name}_payload")
        self.layout, self.clk = layout, clk
        self.rng, self.idle = rng or random.Random(0), idle
        self.q = deque()
        self.cur = None
        self.valid.value = 0
        cocotb.start_soon(self._run())

    def put(self, values):
        self.q.append(values)

    @property
    def busy(self):
        return self.cur is not None or bool(self.q)

    async def _run(self):
        taken = False
        while True:
            await FallingEdge(self.clk)
            if taken:
                self.cur, taken = None, False
            if self.cur is None:
                if self.q and self.rng.random() >= self.idle:
                    self.cur = self.q.popleft()
                    self.payload.value = self.encode(self.cur)
                    self.valid.value = 1
                else:
                    self.valid.value = 0
            await ReadOnly()
            if self.cur is not None and int(self.ready.value):
                taken = True
                self.on_taken(self.cur)

    def encode(self, values):
        """The payload word of one queued item."""
        return pack(self.layout, values)

    def on_taken(self, values):
        """Called in the cycle an item is taken (after ReadOnly)."""


class Sink:
    """Takes a DUT output stream with random back-pressure; ``items`` are decoded dicts."""

    def __init__(self, dut, name, layout, clk, *, rng=None, stall=0.0):
        self.valid = getattr(dut, f"{name}_valid")
        self.ready = getattr(dut, f"{name}_ready")
        self.payload = getattr(dut, f"{name}_payload")
        self.layout, self.clk = layout, clk
        self.rng, self.stall = rng or random.Random(0), stall
        self.items = []
        self.ready.value = 0
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            await FallingEdge(self.clk)
            rdy = self.rng.random() >= self.stall
            self.ready.value = int(rdy)
            await ReadOnly()
            if rdy and int(self.valid.value):
                self.items.append(self.decode(int(self.payload.value)))

    def decode(self, value):
        """The item recorded for one transfer of payload word ``value``."""
        return unpack(self.layout, value)


async def reset(dut, cycles=3):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for _ in range(cycles):
        await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0


async def wait_until(dut, cond, limit, what):
    for _ in range(limit):
        if cond():
            return
        await RisingEdge(dut.clk)
    raise AssertionError(f"timeout waiting for {what}")


class BusChecker:
    """Per cycle: rready/bready high, outstanding bounds, valid/payload held until ready."""

    def __init__(self, dut, max_reads, max_writes):
        self.dut, self.max_reads, self.max_writes = dut, max_reads, max_writes
        self.reads = self.writes = 0
        self.peak_reads = self.peak_writes = 0
        self.id_reads, self.id_peak = {}, {}     # read bursts outstanding per ARID, and peak
        self.errors = []
        cocotb.start_soon(self._run())

    async def _run(self):
        d = self.dut
        held = {}
        chans = {"ar": ("araddr", "arlen", "arid"), "aw": ("awaddr", "awlen", "awid"),
                 "w": ("wdata", "wstrb", "wlast")}
        while True:
            await FallingEdge(d.clk)
            await ReadOnly()
            if not int(d.m_axi_rready.value) or not int(d.m_axi_bready.value):
                self.errors.append("rready or bready low")
            for ch, sigs in chans.items():
                v = int(getattr(d, f"m_axi_{ch}valid").value)
                r = int(getattr(d, f"m_axi_{ch}ready").value)
                now = tuple(int(getattr(d, f"m_axi_{s}").value) for s in sigs)
                if ch in held and (not v or now != held[ch]):
                    self.errors.append(f"{ch}: valid or payload dropped before ready")
                held.pop(ch, None)
                if v and not r:
                    held[ch] = now
            if int(d.m_axi_arvalid.value) and int(d.m_axi_arready.value):
                self.reads += 1
                i = int(d.m_axi_arid.value)
                self.id_reads[i] = self.id_reads.get(i, 0) + 1
                self.id_peak[i] = max(self.id_peak.get(i, 0), self.id_reads[i])
            if int(d.m_axi_rvalid.value) and int(d.m_axi_rlast.value):
                self.reads -= 1
                i = int(d.m_axi_rid.value)
                self.id_reads[i] = self.id_reads.get(i, 0) - 1
            if int(d.m_axi_awvalid.value) and int(d.m_axi_awready.value):
                self.writes += 1
            if int(d.m_axi_bvalid.value) and int(d.m_axi_bready.value):
                self.writes -= 1
            self.peak_reads = max(self.peak_reads, self.reads)
            self.peak_writes = max(self.peak_writes, self.writes)
            if self.reads > self.max_reads or self.writes > self.max_writes:
                self.errors.append(f"outstanding {self.reads} reads / {self.writes} writes")


def write_beats(addr, payload, lanes):
    """Bus-aligned beats {data, strb, last} for writing ``payload`` at ``addr``."""
    first = addr % lanes
    n = -(-(first + len(payload)) // lanes)
    buf = bytes(first) + payload + bytes(n * lanes - first - len(payload))
    beats = []
    for k in range(n):
        strb = 0
        for i in range(lanes):
            if first <= k * lanes + i < first + len(payload):
                strb |= 1 << i
        beats.append({"data": int.from_bytes(buf[k * lanes:(k + 1) * lanes], "little"),
                      "strb": strb, "last": int(k == n - 1)})
    return beats


def ref_bursts(addr, length, lanes, max_beats):
    """The bursts ``[(addr, beats)]`` a request splits into: from its first beat, each as long
    as the beats left, the page end and ``max_beats`` allow (``length`` 0 moves one beat)."""
    a = addr - addr % lanes
    n = max(1, -(-(addr % lanes + length) // lanes))
    out = []
    while n:
        b = min(n, (0x1000 - a % 0x1000) // lanes, max_beats)
        out.append((a, b))
        a, n = a + b * lanes, n - b
    return out


class Bench:
    def __init__(self, dut, seed, *, hostile=True, wrap=False):
        self.dut = dut
        self.W = knob("HOST_MEM_WIDTH")
        self.lanes = self.W // 8
        self.R = knob("HOST_MEM_READ_CLIENTS")
        self.C = knob("HOST_MEM_WRITE_CLIENTS")
        self.max_burst = (knob("HOST_MEM_MAX_BURST")
                          or min([256] + knob("HOST_MEM_READ_BUFFER")))
        self.rng = random.Random(seed)
        clk = dut.clk
        if hostile:
            self.mem = HostMem(dut, "m_axi", clk, dut.rst, seed=seed, backpressure=0.3)
        else:
            self.mem = HostMem(dut, "m_axi", clk, dut.rst, seed=seed, backpressure=False,
                               max_latency=0)
        if wrap:
            # the model's store is 2**48 bytes: fold the whole 64-bit space onto it (the bus
            # addresses are checked as they are, in ``bursts``)
            size, rd, wr = self.mem.size, self.mem.read, self.mem.write
            self.mem.read = lambda addr, n: rd(addr % size, n)
            self.mem.write = lambda addr, data: wr(addr % size, data)
        # every AR and AW as the memory saw it: (channel, id, address, beats)
        self.bursts = []
        check = self.mem._check_burst

        def record(ch, xid, addr, length, *rest):
            self.bursts.append((ch, xid, addr, length))
            check(ch, xid, addr, length, *rest)
        self.mem._check_burst = record
        idle, stall = (0.3, 0.3) if hostile else (0.0, 0.0)
        self.check = BusChecker(dut, knob("HOST_MEM_MAX_READS"), knob("HOST_MEM_MAX_WRITES"))
        r = lambda k: random.Random(seed * 100 + k)
        self.rreq = [Source(dut, f"read_{i}__req", req_layout, clk, rng=r(i), idle=idle)
                     for i in range(self.R)]
        self.rresp = [Sink(dut, f"read_{i}__resp", read_beat_layout(self.W), clk, rng=r(10 + i),
                           stall=stall) for i in range(self.R)]
        self.wreq = [Source(dut, f"write_{j}__req", req_layout, clk, rng=r(20 + j), idle=idle)
                     for j in range(self.C)]
        self.wdata = [Source(dut, f"write_{j}__data", write_beat_layout(self.W), clk,
                             rng=r(30 + j), idle=idle) for j in range(self.C)]
        self.wdone = [Sink(dut, f"write_{j}__done", done_layout, clk, rng=r(40 + j), stall=stall)
                      for j in range(self.C)]
        self.reads = [[] for _ in range(self.R)]     # (addr, len, tag)
        self.writes = [[] for _ in range(self.C)]

    def read(self, i, addr, length, tag):
        self.rreq[i].put({"addr": addr, "len_bytes": length, "tag": tag})
        self.reads[i].append((addr, length, tag))

    def write(self, j, addr, payload, tag):
        self.wreq[j].put({"addr": addr, "len_bytes": len(payload), "tag": tag})
        beats = write_beats(addr, payload, self.lanes)
        for b in beats or [{"data": 0, "strb": 0, "last": 1}]:     # length 0: one beat
            self.wdata[j].put(b)
        self.writes[j].append((addr, len(payload), tag))

    def check_bursts(self):
        """Every client's AR and AW bursts are exactly its requests' :func:`ref_bursts`, in
        request order."""
        for ch, reqs, maxb in (("AR", self.reads, self.max_burst), ("AW", self.writes, 256)):
            for i, q in enumerate(reqs):
                want = [b for addr, length, _ in q
                        for b in ref_bursts(addr, length, self.lanes, maxb)]
                got = [(a, n) for c, x, a, n in self.bursts if c == ch and x == i]
                assert got == want, (f"{ch} id {i}: bursts "
                                     f"{[(hex(a), n) for a, n in got[:8]]} != "
                                     f"{[(hex(a), n) for a, n in want[:8]]}")

    def rand_len(self):
        k = self.rng.random()
        if k < 0.4:
            return self.rng.randint(1, 2 * self.lanes)
        if k < 0.85:
            return self.rng.randint(1, 700)
        return self.rng.choice([4096, self.rng.randint(3000, 4096)])

    def rand_addr(self, base, size, length):
        if self.rng.random() < 0.3:                  # straddle a 4 KiB boundary
            page = base + 0x1000 * self.rng.randint(1, size // 0x1000 - 2)
            return page - self.rng.randint(1, max(1, length - 1)) if length > 1 else page - 1
        return base + self.rng.randint(0, size - length - 1)

    async def drain(self, limit=knob("HOST_MEM_DRAIN_CYCLES")):
        def done():
            return (all(len([b for b in s.items if b["last"]]) == len(q)
                        for s, q in zip(self.rresp, self.reads))
                    and all(len(s.items) == len(q) for s, q in zip(self.wdone, self.writes))
                    and self.check.reads == 0 and self.check.writes == 0)
        try:
            await wait_until(self.dut, done, limit, "all completions")
        except AssertionError:
            raise AssertionError(
                f"timeout: read beats {[len(s.items) for s in self.rresp]} "
                f"lasts {[sum(b['last'] for b in s.items) for s in self.rresp]} of "
                f"{[len(q) for q in self.reads]}; done {[len(s.items) for s in self.wdone]} of "
                f"{[len(q) for q in self.writes]}; outstanding {self.check.reads} reads "
                f"{self.check.writes} writes; sources busy "
                f"{[s.busy for s in self.rreq + self.wreq + self.wdata]}; "
                f"bus errors {self.check.errors[:3]} {self.mem.errors[:3]}")
        for _ in range(20):
            await RisingEdge(self.dut.clk)
        assert not self.check.errors, self.check.errors[:5]
        self.mem.check()

    def check_writes(self, j, shadow, lo):
        """Writer j's completions: one per request, in request order, tags as issued, none with
        err; and the memory from ``lo`` on equals ``shadow`` (the bytes written, by offset)."""
        assert [d["tag"] for d in self.wdone[j].items] == [t for _, _, t in self.writes[j]]
        assert all(d["err"] == 0 for d in self.wdone[j].items)
        assert self.mem.read(lo, len(shadow)) == bytes(shadow), f"client {j} memory"

    def check_reads(self, i, expect_err=lambda a, n: set()):
        """Compare client i's beats with memory; ``expect_err(addr, len)`` gives the set of beat
        numbers that must have err=1 (all others 0)."""
        beats = list(self.rresp[i].items)
        for addr, length, tag in self.reads[i]:
            first = addr % self.lanes
            n = max(1, -(-(first + length) // self.lanes))      # length 0: one beat
            got, beats = beats[:n], beats[n:]
            assert len(got) == n, f"client {i}: missing beats"
            assert [b["last"] for b in got] == [0] * (n - 1) + [1], f"last flags @{addr:#x}"
            assert all(b["tag"] == tag for b in got), f"tags {[b['tag'] for b in got]} != {tag}"
            errs = {k for k, b in enumerate(got) if b["err"]}
            want = expect_err(addr, length)
            assert errs == want, f"read {addr:#x}+{length}: err beats {errs} != {want}"
            data = b"".join(b["data"].to_bytes(self.lanes, "little") for b in got)
            ref = self.mem.read(addr - first, n * self.lanes)
            for k in range(n):
                if k not in want:
                    lo, hi = max(first, k * self.lanes), min(first + length, (k + 1) * self.lanes)
                    assert data[lo:hi] == ref[lo:hi], f"read {addr:#x}+{length}: beat {k} data"
        assert not beats, f"client {i}: {len(beats)} extra beats"


@cocotb.test()
async def random_traffic(dut):
    """Both read and both write clients at once, lengths 1..4096, 4 KiB crossings, with latency,
    reordering, interleaving and back-pressure; data checked byte for byte, guards untouched."""
    await reset(dut)
    tb = Bench(dut, seed=1)
    tb.mem.max_latency = 60         # long enough that a later short write's B overtakes
    rbase, rsize = 0x200000, 0x10000
    tb.mem.write(rbase, random.Random(5).randbytes(rsize))
    shadow = {}
    for j in range(tb.C):
        base = 0x100000 + j * 0x20000
        tb.mem.write(base - 0x1000, random.Random(j).randbytes(0x12000))
        shadow[j] = bytearray(tb.mem.read(base - 0x1000, 0x12000))
        tb.mem.add_guard(base - 0x1000, 0x1000)
        tb.mem.add_guard(base + 0x10000, 0x1000)
    tb.mem.add_guard(rbase, rsize)
    nreq = knob("HOST_MEM_REQUESTS_PER_CLIENT")
    for n in range(nreq):
        for i in range(tb.R):
            length = tb.rand_len()
            tb.read(i, tb.rand_addr(rbase, rsize, length), length, (n * 7 + i) & 0xFF)
        for j in range(tb.C):
            base = 0x100000 + j * 0x20000
            length = tb.rand_len()
            addr = tb.rand_addr(base, 0x10000, length)
            payload = tb.rng.randbytes(length)
            tb.write(j, addr, payload, (n * 5 + j) & 0xFF)
            off = addr - (base - 0x1000)
            shadow[j][off:off + length] = payload
    await tb.drain()
    for i in range(tb.R):
        tb.check_reads(i)
    for j in range(tb.C):
        tb.check_writes(j, shadow[j], 0x100000 + j * 0x20000 - 0x1000)
    ids = {a[2] for a in tb.mem.reads}
    assert ids == set(range(tb.R)), f"AR IDs {ids}"
    assert {w[2] for w in tb.mem.writes} == set(range(tb.C))
    print(f"peak outstanding: {tb.check.peak_reads} reads, {tb.check.peak_writes} writes; "
          f"host memory {tb.mem.stats}", flush=True)
    assert (tb.check.peak_reads, tb.check.peak_writes) == (tb.check.max_reads,
                                                           tb.check.max_writes)
    assert all(tb.mem.stats.values()), "reordering/interleaving not exercised"


@cocotb.test()
async def faults(dut):
    """SLVERR/DECERR on reads and on writes: err on exactly the faulting beats / requests, the
    faulting write leaves memory alone, later requests are clean again."""
    await reset(dut)
    tb = Bench(dut, seed=2)
    lanes = tb.lanes
    base = 0x400000
    init = random.Random(9).randbytes(0x4000)
    tb.mem.write(base, init)
    rf = base + 0x1000 + 5 * lanes + 3          # read fault, mid-beat
    tb.mem.add_fault(rf, 2 * lanes, "r", AxiResp.DECERR)
    wf = base + 0x3000                          # write fault: the second page of a crossing write
    tb.mem.add_fault(wf, 16, "w", AxiResp.SLVERR)

    def read_errs(addr, length):
        first = addr % lanes
        a0 = addr - first
        n = -(-(first + length) // lanes)
        return {k for k in range(n)
                if a0 + k * lanes < rf + 2 * lanes and rf < a0 + (k + 1) * lanes}

    tb.read(0, rf - 3 * lanes - 1, 8 * lanes, 1)        # covers the fault
    tb.read(0, base + 0x100, 100, 2)                    # clean, after it
    tb.read(1, base + 0x0F00, 0x200, 3)                 # clean, crossing a page
    tb.read(1, base + 0xF80, 6000, 5)                   # > 4 KiB: two page crossings
    tb.read(0, rf - 0x800, 0x1000, 4)                   # long read through the fault
    tb.write(0, wf - 40, bytes(range(80)), 7)           # crosses into the fault page: err
    tb.write(0, base + 0x2800, b"\xAA" * 24, 8)         # clean
    tb.write(1, wf + 8, b"\x55" * 4, 9)                 # inside the fault: err
    tb.write(1, base + 0x4800, b"\x11" * 4000, 10)      # clean, several bursts
    await tb.drain()
    tb.check_reads(0, read_errs)
    tb.check_reads(1, read_errs)
    assert [(d["tag"], d["err"]) for d in tb.wdone[0].items] == [(7, 1), (8, 0)]
    assert [(d["tag"], d["err"]) for d in tb.wdone[1].items] == [(9, 1), (10, 0)]
    mem = tb.mem.read(base, 0x6000)
    assert mem[0x3000:0x3010] == init[0x3000:0x3010], "faulting burst wrote"
    assert mem[0x2800:0x2818] == b"\xAA" * 24
    assert mem[0x4800:0x4800 + 4000] == b"\x11" * 4000


@cocotb.test()
async def slow_reader(dut):
    """A read client that takes one beat in ten: its bursts wait for buffer room (rready stays
    high, nothing is lost), and the other client's reads are not blocked behind it."""
    await reset(dut)
    tb = Bench(dut, seed=3)
    base = 0x500000
    tb.mem.write(base, random.Random(3).randbytes(0x3000))
    tb.rresp[0].stall = 0.9
    tb.read(0, base + 3, 4096, 1)
    tb.read(0, base + 0x1800, 700, 2)
    for k in range(6):
        tb.read(1, base + 0x2000 + 100 * k, 300, 10 + k)
    await wait_until(dut, lambda: sum(b["last"] for b in tb.rresp[1].items) == 6, 20000,
                     "fast client")
    assert sum(b["last"] for b in tb.rresp[0].items) == 0, "fast client waited for slow one"
    await tb.drain()
    tb.check_reads(0)
    tb.check_reads(1)


@cocotb.test()
async def throughput(dut):
    """Streaming rate with an ideal memory (no latency, no back-pressure): 4 KiB reads on one
    client, then 4 KiB writes on one client, in bus beats per cycle."""
    await reset(dut)
    tb = Bench(dut, seed=4, hostile=False)
    base = 0x600000
    n = 4
    for k in range(n):
        tb.read(0, base + 0x1000 * k, 4096, k)
    t0 = tb.mem.cycle
    await wait_until(dut, lambda: sum(b["last"] for b in tb.rresp[0].items) == n, 20000, "reads")
    rd = n * 4096 // tb.lanes / (tb.mem.cycle - t0)
    for k in range(n):
        tb.write(0, base + 0x1000 * k, bytes(4096), k)
    t0 = tb.mem.cycle
    await wait_until(dut, lambda: len(tb.wdone[0].items) == n, 20000, "writes")
    wr = n * 4096 // tb.lanes / (tb.mem.cycle - t0)
    print(f"throughput W={tb.W}: reads {rd:.2f}, writes {wr:.2f} beats/cycle", flush=True)
    await tb.drain()
    tb.check_reads(0)
    assert rd > 0.75 and wr > 0.75


@cocotb.test()
async def deep_buffer(dut):
    """Per-client buffers (HOST_MEM_READ_BUFFER = "32,128", bursts of 32 beats) against a memory
    with 40 cycles of read latency: client 0's buffer holds one burst, so it has one burst in flight
    at a time; client 1's holds four, so it keeps up to ``max_reads`` in flight and streams
    several times faster."""
    bufs = knob("HOST_MEM_READ_BUFFER")
    await reset(dut)
    tb = Bench(dut, seed=5, hostile=False)
    tb.mem.min_latency = tb.mem.max_latency = 40
    base = 0x700000
    tb.mem.write(base, random.Random(5).randbytes(0x4000))
    rate = []
    for i in range(2):
        for k in range(4):
            tb.read(i, base + 0x1000 * k, 4096, k)
        t0 = tb.mem.cycle
        await wait_until(dut, lambda: sum(b["last"] for b in tb.rresp[i].items) == 4, 40000,
                         f"client {i} reads")
        rate.append(4 * 4096 // tb.lanes / (tb.mem.cycle - t0))
    print(f"deep_buffer W={tb.W}: buffers {bufs}, beats/cycle {rate[0]:.2f} {rate[1]:.2f}, "
          f"peak bursts in flight per client {tb.check.id_peak}", flush=True)
    await tb.drain()
    tb.check_reads(0)
    tb.check_reads(1)
    max_reads = knob("HOST_MEM_MAX_READS")
    assert bufs[0] < 2 * min(bufs) and tb.check.id_peak[0] == 1, tb.check.id_peak
    assert tb.check.id_peak[1] == min(max_reads, bufs[1] // min(bufs)), tb.check.id_peak
    assert rate[1] > 2 * rate[0], rate


TOP = 1 << 64


@cocotb.test()
async def top_of_address_space(dut):
    """Requests in the last pages of the 64-bit address space, crossing one and two 4 KiB
    boundaries (a 8191-byte read over three pages) and ending on the last byte: the upper
    address bits of every burst, the split and the data are right."""
    await reset(dut)
    tb = Bench(dut, seed=6, wrap=True)
    lanes, r1, w1 = tb.lanes, 1 % tb.R, 1 % tb.C
    init = random.Random(6).randbytes(0x4000)
    tb.mem.write(TOP - 0x4000, init)
    tb.read(0, TOP - 0x3000 + 0xFF0, 8191, 1)             # pages ..D000, ..E000, ..F000
    tb.read(r1, TOP - 0x1800 - 5, 4096, 2)
    tb.read(0, TOP - 0x40, 0x40, 3)                       # up to the last byte
    tb.read(r1, TOP - 0x1000 - 8, 16, 4)
    tb.read(0, TOP - 0x2000 - lanes, 0, 5)                # length 0: one beat
    await tb.drain()
    for i in range(tb.R):
        tb.check_reads(i)
    # writes after the reads (the reads were checked against this memory)
    payloads = [(0, TOP - 0x1000 - 3, random.Random(7).randbytes(100), 6),
                (w1, TOP - 0x3000 + 1, random.Random(8).randbytes(6000), 7),
                (0, TOP - 0x20, random.Random(9).randbytes(0x20), 8)]
    for j, addr, data, tag in payloads:
        tb.write(j, addr, data, tag)
    await tb.drain()
    for j, addr, data, _ in payloads:
        assert tb.mem.read(addr, len(data)) == data, f"write {addr:#x}"
    for j in range(tb.C):
        assert [d["tag"] for d in tb.wdone[j].items] == [t for _, _, t in tb.writes[j]]
    tb.check_bursts()
    assert all(a >> 16 == 0xFFFFFFFFFFFF for _, _, a, _ in tb.bursts), "upper address bits"


@cocotb.test()
async def many_clients(dut):
    """Every client back to back (no idle cycle between requests) against a memory with
    0..100 cycles of latency, reordering, interleaving and back-pressure: lengths 0..4096,
    one-beat requests and page crossings; data, tags, completion order and every burst's
    address and length (the split of each request) checked."""
    await reset(dut)
    tb = Bench(dut, seed=7)
    tb.mem.max_latency = 100
    for src in tb.rreq + tb.wreq + tb.wdata:
        src.idle = 0.0
    rbase, rsize = 0x800000, 0x10000
    tb.mem.write(rbase, random.Random(11).randbytes(rsize))
    shadow = {}
    for j in range(tb.C):
        base = 0x900000 + j * 0x20000
        tb.mem.write(base, bytes(0x10000))
        shadow[j] = bytearray(0x10000)
    tb.mem.add_guard(rbase, rsize)

    def length():
        k = tb.rng.random()
        return (0 if k < 0.1 else tb.rng.randint(1, tb.lanes) if k < 0.4
                else tb.rng.randint(1, 600) if k < 0.85 else tb.rng.randint(3000, 4096))

    for n in range(knob("HOST_MEM_REQUESTS_PER_CLIENT")):
        for i in range(tb.R):
            ln = length()
            tb.read(i, tb.rand_addr(rbase, rsize, max(ln, 1)), ln, (n * 3 + i) & 0xFF)
        for j in range(tb.C):
            base = 0x900000 + j * 0x20000
            ln = length()
            addr = tb.rand_addr(base, 0x10000, max(ln, 1))
            payload = tb.rng.randbytes(ln)
            tb.write(j, addr, payload, (n * 11 + j) & 0xFF)
            shadow[j][addr - base:addr - base + ln] = payload
    await tb.drain(limit=200000)
    for i in range(tb.R):
        tb.check_reads(i)
    for j in range(tb.C):
        tb.check_writes(j, shadow[j], 0x900000 + j * 0x20000)
    tb.check_bursts()


@cocotb.test()
async def r_bypass(dut):
    """An R beat that finds its client's buffer empty and the output register free or being
    taken is offered on ``resp`` in the next cycle (the bypass past the buffer): with a
    zero-wait memory and a client that always takes, every beat of a lone read is offered
    exactly one cycle after its R beat, back-to-back beats included; then, with the client
    stalled, beats go through the buffer and still come out in order and intact."""
    await reset(dut)
    tb = Bench(dut, seed=7, hostile=False)
    base = 0x700000
    tb.mem.write(base, random.Random(7).randbytes(0x2000))
    r_cycles, o_cycles = [], []
    cycle = 0

    async def watch():
        nonlocal cycle
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            cycle += 1
            if (int(dut.m_axi_rvalid.value) and int(dut.m_axi_rready.value)
                    and int(dut.m_axi_rid.value) == 0):
                r_cycles.append(cycle)
            if int(dut.read_0__resp_valid.value) and int(dut.read_0__resp_ready.value):
                o_cycles.append(cycle)
    watcher = cocotb.start_soon(watch())
    for k, (off, n) in enumerate(((0, 8), (0x400 + 5, 300), (0x800, 4 * tb.lanes))):
        r_cycles.clear()
        o_cycles.clear()
        tb.read(0, base + off, n, k)
        await wait_until(dut, lambda: sum(b["last"] for b in tb.rresp[0].items) == k + 1, 2000,
                         f"read {k}")
        await RisingEdge(dut.clk)
        assert r_cycles and o_cycles == [c + 1 for c in r_cycles], (k, r_cycles, o_cycles)
    # the client stalls: the beats wait in the buffer, in order
    tb.rresp[0].stall = 0.7
    for k in range(3, 8):
        tb.read(0, base + 0x1000 + 97 * k, 200 + 50 * k, k)
    await tb.drain()
    watcher.cancel()
    tb.check_reads(0)


@cocotb.test()
async def fast_fire(dut):
    """A request of one burst on an idle master leaves on AR (AW) exactly two cycles after its
    ``req`` handshake (it fires from the splitter's S3, without waiting for its client's next
    turn); a request of several bursts, and one-burst requests of several clients at once,
    still leave as their reference bursts, in order."""
    await reset(dut)
    tb = Bench(dut, seed=11, hostile=False)
    base = 0x900000
    tb.mem.write(base, random.Random(11).randbytes(0x8000))
    seen = {"AR": [], "AW": [], "r": [], "w": []}
    cycle = 0

    async def watch():
        nonlocal cycle
        while True:
            await FallingEdge(dut.clk)     # (the values the next rising edge takes)
            await ReadOnly()
            cycle += 1
            for ch in ("ar", "aw"):
                if int(getattr(dut, f"m_axi_{ch}valid").value) \
                        and int(getattr(dut, f"m_axi_{ch}ready").value):
                    seen[ch.upper()].append(cycle)
            for i in range(tb.R):
                if int(getattr(dut, f"read_{i}__req_valid").value) \
                        and int(getattr(dut, f"read_{i}__req_ready").value):
                    seen["r"].append(cycle)
            for j in range(tb.C):
                if int(getattr(dut, f"write_{j}__req_valid").value) \
                        and int(getattr(dut, f"write_{j}__req_ready").value):
                    seen["w"].append(cycle)
    watcher = cocotb.start_soon(watch())
    lone = [(0, 8), (5, 3 * tb.lanes), (0x1000 - 2 * tb.lanes, 2 * tb.lanes)]
    for k, (off, n) in enumerate(lone):
        for i in range(tb.R):
            for v in seen.values():
                v.clear()
            tb.read(i, base + off + 0x1000 * i, n, k)
            await tb.drain()
            assert len(seen["r"]) == 1 and seen["AR"] == [seen["r"][0] + 2], (i, off, n, seen)
        for j in range(tb.C):
            for v in seen.values():
                v.clear()
            data = random.Random(k).randbytes(n)
            tb.write(j, base + 0x10000 + off + 0x1000 * j, data, k)
            await tb.drain()
            assert tb.mem.read(base + 0x10000 + off + 0x1000 * j, n) == data, (j, off, n)
            assert len(seen["w"]) == 1 and seen["AW"] == [seen["w"][0] + 2], (j, off, n, seen)
    # several bursts (a page crossed), and every client at once
    tb.read(0, base + 0x1000 - tb.lanes, 3 * tb.lanes, 9)
    for i in range(tb.R):
        tb.read(i, base + 0x3000 + 0x100 * i, 2 * tb.lanes + i, 10 + i)
    last = [random.Random(j).randbytes(50) for j in range(tb.C)]
    for j in range(tb.C):
        tb.write(j, base + 0x20800 + 0x100 * j, last[j], 20 + j)
    await tb.drain()
    watcher.cancel()
    tb.check_bursts()
    for i in range(tb.R):
        tb.check_reads(i)
    for j in range(tb.C):
        assert tb.mem.read(base + 0x20800 + 0x100 * j, 50) == last[j], j
        assert all(d["err"] == 0 for d in tb.wdone[j].items)
