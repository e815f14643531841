"""Host memory for cocotb benches: cocotbext-axi's ``AxiRam``, made hostile.

:class:`HostMem` is an :class:`cocotbext.axi.AxiRam` (same ``read``/``write``/``hexdump`` memory
API, same channel objects ``write_if.aw_channel`` …) whose read and write processes are replaced
to behave like a real, busy host:

* random latency per burst (``min_latency``..``max_latency`` cycles from AR/last W to data/B);
* read data out of order across IDs and interleaved beat by beat between bursts of different IDs
  (bursts of one ID stay in order, as AXI requires); B responses reordered across IDs likewise;
* back-pressure on every channel (``backpressure=True``: random ``ready`` low on AW/W/AR, random
  ``valid`` gaps on R/B, through cocotbext-axi pause generators);
* fault injection: :meth:`add_fault` makes accesses touching a range answer SLVERR or DECERR
  (a faulting write burst writes nothing, a faulting read beat returns zeros);
* a monitor of every write: :attr:`writes` logs ``(addr, bytes, awid)`` per contiguous strobe run
  and :meth:`add_guard` ranges that get written are recorded in :attr:`violations`;
* protocol checks of the master (INCR only, ``size`` = bus width, ``len`` ≤ 255, no 4 KiB
  crossing, ``WLAST`` on the right beat) recorded in :attr:`errors`.

Call :meth:`check` at the end of a test (asserts no protocol error and no guard violation).

Typical use::

    mem = HostMem(dut, "m_axi", dut.clk, dut.rst, seed=1, backpressure=True)
    mem.write(0x1000, bytes(range(64)))
    mem.add_fault(0x8000, 0x100, "r", AxiResp.DECERR)
    ...
    mem.check()
"""

import logging
import random

import cocotb
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiBus, AxiRam
from cocotbext.axi.axi_ram import AxiRamRead, AxiRamWrite
from cocotbext.axi.constants import AxiBurstType, AxiResp
from cocotbext.axi.memory import Memory

__all__ = ["HostMem", "AxiResp"]


def _pause_gen(rng, p):
    while True:
        yield rng.random() < p


def strobe_runs(strb, lanes):
    """The runs of set bits of a write strobe, as ``(first, end)`` byte-lane pairs."""
    i = 0
    while i < lanes:
        if strb >> i & 1:
            j = i
            while j < lanes and strb >> j & 1:
                j += 1
            yield i, j
            i = j
        else:
            i += 1


class _OwnTask:
    """A channel model that runs one coroutine of its own (``_task``), killed at reset."""
    owner = None
    _task = None

    def _handle_reset(self, state):
        if state and self._task is not None:
            self._task.kill()
            self._task = None
        super()._handle_reset(state)


class _Read(_OwnTask, AxiRamRead):

    async def _accept(self, pending):
        o = self.owner
        while True:
            while len(pending) >= o.max_reads:
                await RisingEdge(self.clock)
            ar = await self.ar_channel.recv()
            arid, addr = int(ar.arid), int(ar.araddr)
            length, size, burst = int(ar.arlen) + 1, int(ar.arsize), int(ar.arburst)
            o._check_burst("AR", arid, addr, length, size, burst, self.byte_lanes)
            base = addr - addr % self.byte_lanes
            beats = [base + k * self.byte_lanes for k in range(length)]
            o.reads.append((addr, length, arid))
            pending.append({"id": arid, "beats": beats, "n": 0,
                            "at": o.cycle + o.rng.randint(o.min_latency, o.max_latency)})

    async def _process_read(self):
        o = self.owner
        pending = []
        self._task = cocotb.start_soon(self._accept(pending))
        current = None
        while True:
            heads, seen = [], set()
            for b in pending:
                if b["id"] not in seen:
                    seen.add(b["id"])
                    if b["at"] <= o.cycle:
                        heads.append(b)
            if not heads:
                current = None
                await RisingEdge(self.clock)
                continue
            if current not in heads or (o.interleave and o.rng.random() < 0.5):
                prev, current = current, o.rng.choice(heads)
                if prev is not None and prev is not current and prev["n"]:
                    o.stats["r_interleaved"] += 1
            b = current
            if b["n"] == 0 and b is not pending[0]:
                o.stats["r_reordered"] += 1
            addr = b["beats"][b["n"]]
            r = self.r_channel._transaction_obj()
            r.rid = b["id"]
            r.rlast = b["n"] == len(b["beats"]) - 1
            resp = o._fault(addr, self.byte_lanes, "r")
            r.rresp = resp
            r.rdata = 0 if resp else int.from_bytes(o.read(addr, self.byte_lanes), "little")
            b["n"] += 1
            if r.rlast:
                pending.remove(b)
                current = None
            await self.r_channel.send(r)


class _Write(_OwnTask, AxiRamWrite):

    async def _send_b(self, pending):
        o = self.owner
        while True:
            heads, seen = [], set()
            for b in pending:
                if b["id"] not in seen:
                    seen.add(b["id"])
                    if b["at"] <= o.cycle:
                        heads.append(b)
            if not heads:
                await RisingEdge(self.clock)
                continue
            b = o.rng.choice(heads)
            if b is not pending[0]:
                o.stats["b_reordered"] += 1
            pending.remove(b)
            t = self.b_channel._transaction_obj()
            t.bid = b["id"]
            t.bresp = b["resp"]
            await self.b_channel.send(t)

    async def _process_write(self):
        o = self.owner
        pending = []
        self._task = cocotb.start_soon(self._send_b(pending))
        lanes = self.byte_lanes
        while True:
            while len(pending) >= o.max_writes:
                await RisingEdge(self.clock)
            aw = await self.aw_channel.recv()
            awid, addr = int(aw.awid), int(aw.awaddr)
            length, size, burst = int(aw.awlen) + 1, int(aw.awsize), int(aw.awburst)
            o._check_burst("AW", awid, addr, length, size, burst, lanes)
            base = addr - addr % lanes
            ops, resp = [], AxiResp.OKAY
            for n in range(length):
                w = await self.w_channel.recv()
                word = int(w.wdata).to_bytes(lanes, "little")
                strb = int(w.wstrb)
                if int(w.wlast) != (n == length - 1):
                    o.errors.append(f"AW id {awid} addr {addr:#x}: WLAST wrong on beat {n}")
                wa = base + n * lanes
                ops += [(wa + i, word[i:j]) for i, j in strobe_runs(strb, lanes)]
            for a, d in ops:                   # only the bytes actually written can fault
                resp = max(resp, o._fault(a, len(d), "w"))
            if resp == AxiResp.OKAY:
                for a, d in ops:
                    o.write(a, d)
                    o._monitor(a, d, awid)
            pending.append({"id": awid, "resp": resp,
                            "at": o.cycle + o.rng.randint(o.min_latency, o.max_latency)})


class _ReadLatency:
    """A view of a HostMem for its read side only: every read burst waits ``lat`` cycles."""

    def __init__(self, mem, lat):
        self._mem = mem
        self.min_latency = self.max_latency = lat

    def __getattr__(self, name):
        return getattr(self._mem, name)


class HostMem(AxiRam):
    """AXI4 slave host memory with random latency, reordering, back-pressure and faults.

    Parameters
    ----------
    dut : cocotb handle
        Top level holding ``<prefix>_awid`` … ``<prefix>_rready``.
    prefix : str
        Signal prefix, ``"m_axi"``.
    clock, reset : cocotb handles
        ``reset`` active high (or None).
    seed : int
        Seed of every random choice (latency, scheduling, back-pressure).
    min_latency, max_latency : int
        Cycles from AR (last W) to first R (B), drawn per burst.
    interleave : bool
        Interleave R beats of bursts with different IDs.
    backpressure : bool or float
        Probability of a ready-low / valid-gap cycle on every channel (True = 0.3).
    max_reads, max_writes : int
        Bursts the model holds at once before it back-pressures AR / AW.
    size : int
        Memory size (addresses wrap modulo it); sparse by default.
    """

    def __init__(self, dut, prefix, clock, reset=None, *, seed=1, min_latency=0, max_latency=30,
                 interleave=True, backpressure=True, max_reads=16, max_writes=16, size=2**48):
        Memory.__init__(self, size)
        self.rng = random.Random(seed)
        self.min_latency, self.max_latency = min_latency, max_latency
        self.interleave = interleave
        self.max_reads, self.max_writes = max_reads, max_writes
        self.cycle = 0
        self.faults = []          # (start, end, kind, resp)
        self.guards = []          # (start, end)
        self.writes = []          # (addr, bytes, awid)
        self.reads = []           # (addr, beats, arid)
        self.violations = []
        self.errors = []
        #: how often the hostility happened: R bursts started ahead of an older burst, R beats
        #: switched away from an unfinished burst, B sent ahead of an older one
        self.stats = {"r_reordered": 0, "r_interleaved": 0, "b_reordered": 0}
        bus = AxiBus.from_prefix(dut, prefix)
        self.write_if = _Write(bus.write, clock, reset, mem=self.mem)
        self.write_if.log.setLevel(logging.WARNING)
        self.write_if.owner = self
        self.read_if = _Read(bus.read, clock, reset, mem=self.mem)
        self.read_if.owner = self
        self.read_if.log.setLevel(logging.WARNING)
        self.clock = clock
        cocotb.start_soon(self._count())
        if backpressure:
            p = 0.3 if backpressure is True else float(backpressure)
            chans = (self.write_if.aw_channel, self.write_if.w_channel, self.write_if.b_channel,
                     self.read_if.ar_channel, self.read_if.r_channel)
            for k, ch in enumerate(chans):
                ch.set_pause_generator(_pause_gen(random.Random(seed * 7919 + k), p))

    def set_read_latency(self, lat):
        """Answer every read burst after exactly ``lat`` cycles (the benchmarks' "100 cycles of
        host read latency"); writes keep this memory's own latency."""
        self.read_if.owner = _ReadLatency(self, lat)

    async def _count(self):
        while True:
            await RisingEdge(self.clock)
            self.cycle += 1

    def add_fault(self, start, length, kind="rw", resp=AxiResp.SLVERR):
        """Accesses (``kind`` "r", "w" or "rw") touching ``[start, start+length)`` get ``resp``."""
        self.faults.append((start, start + length, kind, AxiResp(resp)))

    def clear_faults(self):
        self.faults.clear()

    def add_guard(self, start, length):
        """Any write into ``[start, start+length)`` is recorded as a violation."""
        self.guards.append((start, start + length))

    def _fault(self, addr, n, kind):
        resp = AxiResp.OKAY
        for s, e, k, r in self.faults:
            if kind in k and addr < e and s < addr + n:
                resp = max(resp, r)
        return resp

    def _monitor(self, addr, data, awid):
        self.writes.append((addr, bytes(data), awid))
        for s, e in self.guards:
            if addr < e and s < addr + len(data):
                self.violations.append((addr, len(data), awid))

    def _check_burst(self, ch, xid, addr, length, size, burst, lanes):
        where = f"{ch} id {xid} addr {addr:#x} len {length}"
        if burst != AxiBurstType.INCR:
            self.errors.append(f"{where}: burst type {burst}, not INCR")
        if 1 << size != lanes:
            self.errors.append(f"{where}: size {size}, not log2({lanes})")
        if length > 256:
            self.errors.append(f"{where}: more than 256 beats")
        base = addr - addr % lanes
        if (base & 0xFFF) + length * lanes > 0x1000:
            self.errors.append(f"{where}: crosses a 4 KiB boundary")

    def check(self):
        assert not self.errors, "AXI protocol errors: " + "; ".join(self.errors[:5])
        assert not self.violations, f"writes into guard regions: {self.violations[:5]}"
