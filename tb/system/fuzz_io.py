"""Lean cocotb drivers for the fuzz campaign at the `rnic` top (zero-wait host, one clock).

The general benches use cocotbext-axi's sources/sinks and ``sim.hostmem.HostMem``: several Python
coroutines per channel, some waking on every clock edge even when idle. The fuzz sends
100,000+ frames, so it uses these instead, each one coroutine that runs per cycle only while
its interface is busy and otherwise sleeps on a ``valid`` edge or an event:

* :class:`FastMem`: an AXI4 slave host memory with zero wait states (``awready``, ``wready``,
  ``arready`` always high, R and B offered the cycle after the request), read beats of
  different IDs interleaved and B responses reordered across IDs at random (seeded), every
  write logged (:attr:`writes`: ``(addr, bytes, awid)`` per contiguous strobe run), guard
  regions (:meth:`add_guard`, hits in :attr:`violations`) and the master's protocol checked
  (INCR, full-width size, <= 256 beats, no 4 KiB crossing, WLAST on the last beat) into
  :attr:`errors`; :meth:`check` asserts both empty. ``read``/``write`` are the host's view.
* :class:`RxDriver`: the MAC receive stream; frames are cut into beats once, queued, and sent
  back to back; :attr:`not_ready` counts the cycles a beat was offered and ``tready`` was low.
* :class:`TxSink`: the MAC transmit stream with ``tready`` always high.
"""

import collections
import random

import cocotb
from cocotb.triggers import Event, First, RisingEdge
from cocotb.utils import get_sim_time

from sim.hostmem import strobe_runs

__all__ = ["FastMem", "RxDriver", "TxSink"]

PAGE = 4096


class FastMem:
    def __init__(self, dut, prefix, clock, *, seed=1, lanes=8, period_ns=10):
        self.dut, self.clock, self.lanes, self.period = dut, clock, lanes, period_ns
        self.rng = random.Random(seed)
        self.pages = {}
        self.writes, self.reads = [], []
        self.guards, self.violations, self.errors = [], [], []
        self.stats = {"r_reordered": 0, "r_interleaved": 0, "b_reordered": 0,
                      "aw": 0, "ar": 0, "w_beats": 0, "r_beats": 0}
        s = lambda n: getattr(dut, f"{prefix}_{n}")          # noqa: E731
        self.s = {n: s(n) for n in (
            "awid", "awaddr", "awlen", "awsize", "awburst", "awvalid", "awready",
            "wdata", "wstrb", "wlast", "wvalid", "wready", "bid", "bresp", "bvalid", "bready",
            "arid", "araddr", "arlen", "arsize", "arburst", "arvalid", "arready",
            "rid", "rdata", "rresp", "rlast", "rvalid", "rready")}
        for n in ("awready", "wready", "arready"):
            self.s[n].value = 1
        for n in ("bvalid", "rvalid", "bid", "bresp", "rid", "rdata", "rresp", "rlast"):
            self.s[n].value = 0
        cocotb.start_soon(self._run())

    @property
    def cycle(self):
        return int(get_sim_time("ns")) // self.period

    # ---- host view -------------------------------------------------------------------------
    def write(self, addr, data):
        data = bytes(data)
        i = 0
        while i < len(data):
            a = addr + i
            pg = self.pages.get(a // PAGE)
            if pg is None:
                pg = self.pages[a // PAGE] = bytearray(PAGE)
            o = a % PAGE
            n = min(PAGE - o, len(data) - i)
            pg[o:o + n] = data[i:i + n]
            i += n

    def read(self, addr, n):
        out = bytearray()
        while len(out) < n:
            a = addr + len(out)
            o = a % PAGE
            k = min(PAGE - o, n - len(out))
            pg = self.pages.get(a // PAGE)
            out += pg[o:o + k] if pg is not None else bytes(k)
        return bytes(out)

    def add_guard(self, start, length):
        self.guards.append((start, start + length))

    def check(self):
        assert not self.errors, "AXI protocol errors: " + "; ".join(self.errors[:5])
        assert not self.violations, f"writes into guard regions: {self.violations[:5]}"

    # ---- the slave -------------------------------------------------------------------------
    def _check_burst(self, ch, xid, addr, length, size, burst):
        where = f"{ch} id {xid} addr {addr:#x} len {length}"
        if burst != 1:
            self.errors.append(f"{where}: burst type {burst}, not INCR")
        if 1 << size != self.lanes:
            self.errors.append(f"{where}: size {size}, not log2({self.lanes})")
        if length > 256:
            self.errors.append(f"{where}: more than 256 beats")
        if (addr - addr % self.lanes & 0xFFF) + length * self.lanes > 0x1000:
            self.errors.append(f"{where}: crosses a 4 KiB boundary")

    def _store(self, wa, word, strb, awid):
        for i, j in strobe_runs(strb, self.lanes):
            a, d = wa + i, word[i:j]
            self.write(a, d)
            self.writes.append((a, d, awid))
            for gs, ge in self.guards:
                if a < ge and gs < a + len(d):
                    self.violations.append((a, len(d), awid))

    async def _run(self):
        s, lanes, rng = self.s, self.lanes, self.rng
        awvalid, wvalid, arvalid = s["awvalid"], s["wvalid"], s["arvalid"]
        bready, rready = s["bready"], s["rready"]
        clk = RisingEdge(self.clock)
        aws = []            # [awid, base, length, beats seen]
        wq = []             # W beats ahead of their AW: (data, strb, last)
        bq = []             # pending B: (id, resp)
        rq = []             # pending read bursts: {"id", "beats", "n"}
        b_out = r_out = None
        r_cur = None
        while True:
            await clk
            # handshakes of the cycle that ends at this edge
            if b_out is not None and bready.value:
                b_out = None
            if r_out is not None and rready.value:
                b = r_out
                b["n"] += 1
                if b["n"] == len(b["beats"]):
                    rq.remove(b)
                    r_cur = None
                r_out = None
            if awvalid.value:
                awid, addr = int(s["awid"].value), int(s["awaddr"].value)
                length = int(s["awlen"].value) + 1
                self._check_burst("AW", awid, addr, length, int(s["awsize"].value),
                                  int(s["awburst"].value))
                aws.append([awid, addr - addr % lanes, length, 0])
                self.stats["aw"] += 1
            if wvalid.value:
                wq.append((int(s["wdata"].value), int(s["wstrb"].value), int(s["wlast"].value)))
                self.stats["w_beats"] += 1
            while wq and aws:
                data, strb, last = wq.pop(0)
                aw = aws[0]
                if last != (aw[3] == aw[2] - 1):
                    self.errors.append(f"AW id {aw[0]} addr {aw[1]:#x}: WLAST wrong on beat "
                                       f"{aw[3]}")
                self._store(aw[1] + aw[3] * lanes, data.to_bytes(lanes, "little"), strb, aw[0])
                aw[3] += 1
                if aw[3] == aw[2]:
                    aws.pop(0)
                    bq.append(aw[0])
            if arvalid.value:
                arid, addr = int(s["arid"].value), int(s["araddr"].value)
                length = int(s["arlen"].value) + 1
                self._check_burst("AR", arid, addr, length, int(s["arsize"].value),
                                  int(s["arburst"].value))
                base = addr - addr % lanes
                self.reads.append((addr, length, arid))
                rq.append({"id": arid, "beats": [base + k * lanes for k in range(length)],
                           "n": 0})
                self.stats["ar"] += 1
            # offer the next B (any ID's oldest, chosen at random)
            if b_out is None:
                if bq:
                    heads, seen = [], set()
                    for k, i in enumerate(bq):
                        if i not in seen:
                            seen.add(i)
                            heads.append(k)
                    k = rng.choice(heads)
                    if k:
                        self.stats["b_reordered"] += 1
                    b_out = bq.pop(k)
                    s["bid"].value = b_out
                    s["bvalid"].value = 1
                else:
                    s["bvalid"].value = 0
            # offer the next R beat (bursts of one ID in order; IDs interleaved at random)
            if r_out is None:
                if rq:
                    heads, seen = [], set()
                    for b in rq:
                        if b["id"] not in seen:
                            seen.add(b["id"])
                            heads.append(b)
                    if r_cur not in heads or rng.random() < 0.5:
                        prev, r_cur = r_cur, rng.choice(heads)
                        if prev is not None and prev is not r_cur and prev["n"]:
                            self.stats["r_interleaved"] += 1
                        if r_cur["n"] == 0 and r_cur is not rq[0]:
                            self.stats["r_reordered"] += 1
                    b = r_out = r_cur
                    s["rid"].value = b["id"]
                    s["rdata"].value = int.from_bytes(self.read(b["beats"][b["n"]], lanes),
                                                      "little")
                    s["rlast"].value = int(b["n"] == len(b["beats"]) - 1)
                    s["rvalid"].value = 1
                    self.stats["r_beats"] += 1
                else:
                    s["rvalid"].value = 0
            if (b_out is None and r_out is None and not aws and not wq
                    and not awvalid.value and not wvalid.value and not arvalid.value):
                await First(RisingEdge(awvalid), RisingEdge(wvalid), RisingEdge(arvalid))


class RxDriver:
    """``send_nowait(frame, tuser)`` queues a frame; ``gap(n)`` queues n idle cycles;
    ``await wait()`` returns once everything queued has been taken."""

    def __init__(self, dut, prefix, clock, lanes=8):
        self.lanes = lanes
        self.tdata, self.tkeep = getattr(dut, f"{prefix}_tdata"), getattr(dut, f"{prefix}_tkeep")
        self.tlast, self.tuser = getattr(dut, f"{prefix}_tlast"), getattr(dut, f"{prefix}_tuser")
        self.tvalid = getattr(dut, f"{prefix}_tvalid")
        self.tready = getattr(dut, f"{prefix}_tready")
        self.clock = clock
        self.queue = []        # beats: (data, keep, last, user) or ("gap", n)
        self.pos = 0
        self.not_ready = 0     # cycles a beat was offered with tready low
        self.beats = 0
        self.frames = 0
        self.current = None    # the tag of the frame being sent
        self.history = collections.deque(maxlen=24)    # (cycle, tag) of the last frames started
        self._kick = Event()
        self._idle = Event()
        self._idle.set()
        self.tvalid.value = 0
        cocotb.start_soon(self._run())

    def send_nowait(self, frame, tuser=0, tag=None):
        """Queue ``frame``; ``tag`` (anything) is :attr:`current` while the frame is sent."""
        frame = bytes(frame)
        n, lanes = len(frame), self.lanes
        q = self.queue
        for i in range(0, n, lanes):
            chunk = frame[i:i + lanes]
            q.append((int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1,
                      int(i + lanes >= n), tuser, tag if i == 0 else None))
        self.frames += 1
        self._idle.clear()
        self._kick.set()

    def gap(self, n):
        if n > 0:
            self.queue.append(("gap", n))
            self._idle.clear()
            self._kick.set()

    async def send(self, frame, tuser=0):
        self.send_nowait(frame, tuser)

    def idle(self):
        return self._idle.is_set()

    async def wait(self):
        await self._idle.wait()

    async def _run(self):
        clk = RisingEdge(self.clock)
        tdata, tkeep, tlast, tuser, tvalid, tready = (self.tdata, self.tkeep, self.tlast,
                                                      self.tuser, self.tvalid, self.tready)
        offered = False
        gap = 0
        while True:
            if self.pos >= len(self.queue) and not offered and not gap:
                self.queue.clear()
                self.pos = 0
                tvalid.value = 0
                self._idle.set()
                self._kick.clear()
                await self._kick.wait()
            await clk
            if offered:
                if tready.value:
                    offered = False
                    self.beats += 1
                else:
                    self.not_ready += 1
                    continue
            if gap:
                gap -= 1
                if gap:
                    continue
            q = self.queue
            if self.pos < len(q):
                b = q[self.pos]
                self.pos += 1
                if b[0] == "gap":
                    tvalid.value = 0
                    gap = b[1]
                    continue
                tdata.value = b[0]
                tkeep.value = b[1]
                tlast.value = b[2]
                tuser.value = b[3]
                tvalid.value = 1
                if b[4] is not None:
                    self.current = b[4]
                    self.history.append((int(get_sim_time("ns")) // 10, b[4]))
                offered = True
            else:
                tvalid.value = 0


class TxSink:
    """The MAC transmit side, ``tready`` always high; ``recv_nowait()`` gives frame bytes."""

    def __init__(self, dut, prefix, clock, lanes=8):
        self.lanes = lanes
        self.tdata, self.tkeep = getattr(dut, f"{prefix}_tdata"), getattr(dut, f"{prefix}_tkeep")
        self.tlast, self.tvalid = getattr(dut, f"{prefix}_tlast"), getattr(dut, f"{prefix}_tvalid")
        getattr(dut, f"{prefix}_tready").value = 1
        self.clock = clock
        self.frames = []
        self.beats = 0
        cocotb.start_soon(self._run())

    def empty(self):
        return not self.frames

    def recv_nowait(self):
        return self.frames.pop(0)

    async def _run(self):
        clk = RisingEdge(self.clock)
        tdata, tkeep, tlast, tvalid = self.tdata, self.tkeep, self.tlast, self.tvalid
        cur = bytearray()
        lanes = self.lanes
        while True:
            if not tvalid.value and not cur:
                await RisingEdge(tvalid)
            await clk
            if tvalid.value:
                self.beats += 1
                keep = int(tkeep.value)
                word = int(tdata.value).to_bytes(lanes, "little")
                cur += bytes(word[i] for i in range(lanes) if keep >> i & 1)
                if tlast.value:
                    self.frames.append(bytes(cur))
                    cur = bytearray()
