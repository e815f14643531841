"""Fuzz campaign at the `rnic` top, through the contract only.

Hostile frames (scapy-built, then mutated: bit flips anywhere, truncation at every byte, random
header fields, wrong QPN/P_Key/TVer/source IP, IPv4/UDP lengths and PadCnt that lie, oversized
payloads, random opcodes, runt and jumbo frames, MAC errors, garbage) are mixed with valid SEND
and RDMA WRITE traffic on two *clean* QPs. Host memory answers with zero wait.

QPs: 2 (clean, SENDs into posted receive WQEs), 3 (clean, RDMA WRITEs under an rkey),
4..7 (*victims*: connected, with receive WQEs and a REMOTE_WRITE and REMOTE_READ key, fair game
for frames that pass the parser, RDMA READs among them), every other QPN in RESET. A mutant
built from a clean QP's next packet (the most dangerous frame: the right QPN and the expected
PSN) is sent only when the reference
(``sim.packets.drop_reason``) says RX Parse must drop it; a mutant that would pass the parser is
sent only when its (full 24-bit) destination QPN is not a clean QP, or when it comes from a
foreign source IPv4 (then it must count as 6 and change nothing).

Invariants, checked after every batch of frames (and ``tready`` on its edges):

1. ``s_axis_rx_tready`` never low once the core is set up (zero-wait host memory);
2. counter 0 = frames sent; counters 1–5 = the reference's drop reasons, frame for frame; 15 = 0;
   counter 0 − (1..6 + 15) = frames accepted by a QP, which lies between the clean frames and the
   clean frames plus the parser-passing frames to connected victims (an unknown QPN, a QP in
   RESET, a wrong source IPv4 are always 6);
3. every host-memory write lies in a CQ ring, a posted clean receive buffer (exactly the
   message's bytes), a clean WRITE's target range, or the victims' registered region; guard
   regions around every buffer stay unwritten;
4. no ACK/NAK for a QP that was sent no parser-passing frame; a clean QP never NAKs and its last
   ACK acknowledges its last PSN; success CQEs on the victims' CQ never outnumber the victim
   frames that could complete a message;
5. the clean traffic completes byte-exact: one CQE per SEND with its wr_id and length, the data
   in its buffer, every WRITE's data in place, the clean QPs' ePSN as expected.

Knobs: the FUZZ_* of sim/knobs.py (docs/testing.md), among them the campaign's size and seed,
attribution modes and traces.

Every check is counted per invariant (``invariants`` in the report: checks, violations, the
first messages). Checks run once the core is quiescent: counters, AXI traffic and the transmit
stream unchanged over ``SETTLE`` cycles plus the beats of the batch's longest parser-passing
frame (a dropped payload drains with nothing visible, and the frames behind it wait).
The drivers are tb/system/fuzz_io.py's (one coroutine per interface, per cycle only while busy).

``foreign_ip_duplicate`` is a directed test: requests from a foreign source IPv4 to a connected
QP at PSNs behind, at and ahead of its ePSN count as 6 and draw nothing.
"""

import json
import random
import struct
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge, Timer
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from rnic.opcodes import OPCODES, Op, WcStatus
from sim.driver.regs import Regs
from sim.driver.verbs import Access, Device, QpState
from sim.knobs import knob
from sim.packets import (LOCAL_IP, LOCAL_MAC, REMOTE_IP, REMOTE_MAC, build_frame, decode_frame,
                         drop_reason, icrc)
from tb.system.fuzz_frames import CheckedBuilder
from tb.system.fuzz_io import FastMem, RxDriver, TxSink

PD = 1
PMTU = 256
CLEAN_SEND, CLEAN_WRITE = 2, 3
CLEAN = (CLEAN_SEND, CLEAN_WRITE)
VICTIMS = (4, 5, 6, 7)
CONNECTED = CLEAN + VICTIMS
DEST = {q: 0x100 + q for q in CONNECTED}           # the remote QPN each QP answers to
PSN0 = {2: 0x00FFF0, 3: 0xFFFFF8, 4: 100, 5: 0x7FFFFF, 6: 0, 7: 0xABCDE}
K_CLEAN_RECV, K_CLEAN_WRITE, K_VICTIM = 0xC1EA0000, 0xC1EA0001, 0x7EC70002
VICTIM_WQES = 3
VICTIM_BUF = 2048


def ip_checksum(hdr):
    s = sum(int.from_bytes(hdr[i:i + 2], "big") for i in range(0, 20, 2) if i != 10)
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def fix_ip(f):
    if len(f) >= 34:
        f[24:26] = ip_checksum(f[14:34]).to_bytes(2, "big")
    return f


def fix_icrc(f):
    """Rewrite the ICRC where the IPv4 total length says it sits (if the frame holds it)."""
    if len(f) < 34:
        return f
    end = 14 + int.from_bytes(f[16:18], "big")
    # (a flipped version nibble can make the header read as IPv6: 40 bytes + UDP + BTH)
    need = 33 if f[14] >> 4 == 4 else 53
    if 14 + need <= end - 4 and end <= len(f):
        f[end - 4:end] = icrc(bytes(f[14:end - 4]))
    return f


class Fuzzer:
    """Builds hostile frames from templates; every choice from one seeded generator."""

    KINDS = ["bitflip", "bitflip_fixed", "truncate", "field", "qpn", "pkey", "tver", "srcip",
             "len_lie", "pad_lie", "oversize", "opcode", "runt", "garbage", "macerr",
             "victim_valid", "victim_write", "jumbo"]
    WEIGHTS = [10, 10, 8, 8, 5, 4, 4, 3, 8, 6, 3, 8, 4, 3, 3, 10, 6, 1]

    def __init__(self, rng, jumbo):
        self.rng = rng
        self.jumbo = jumbo
        #: scapy's build_frame, packed by struct and compared with scapy on a sample
        self.frame = CheckedBuilder(knob("FUZZ_SCAPY_CHECK_FIRST"),
                                    knob("FUZZ_SCAPY_CHECK_EVERY"))
        self.victim_psn = dict(PSN0)

    def payload(self, n):
        return bytes(self.rng.getrandbits(8) for _ in range(n))

    def template(self, qpn, psn):
        """A plausible request frame (kwargs for build_frame) to ``qpn`` at ``psn``."""
        r = self.rng
        op = r.choice([Op.SEND_ONLY, Op.SEND_FIRST, Op.SEND_MIDDLE, Op.SEND_LAST,
                       Op.SEND_ONLY_WITH_IMMEDIATE, Op.SEND_ONLY_WITH_INVALIDATE,
                       Op.RDMA_WRITE_ONLY, Op.RDMA_WRITE_FIRST, Op.RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                       Op.RDMA_READ_REQUEST, Op.FETCH_ADD, Op.ACKNOWLEDGE])
        n = PMTU if op in (Op.SEND_FIRST, Op.SEND_MIDDLE, Op.RDMA_WRITE_FIRST) \
            else r.randint(0, PMTU)
        kw = dict(opcode=op, payload=self.payload(n), dqpn=qpn, psn=psn & 0xFFFFFF,
                  ackreq=r.randint(0, 1), imm=r.getrandbits(32), ieth=r.getrandbits(32),
                  reth={"va": r.getrandbits(64), "rkey": r.getrandbits(32),
                        "dmalen": r.getrandbits(16)},
                  aeth={"syndrome": r.getrandbits(8), "msn": r.getrandbits(24)})
        return kw

    def build(self, kw, **over):
        k = dict(kw)
        k.update(over)
        op = k.pop("opcode")
        pay = k.pop("payload")
        return bytearray(self.frame(op, pay, **k))

    def mutate(self, kw, kind):
        """(frame bytes, tuser) of mutation ``kind`` applied to template ``kw``."""
        r = self.rng
        f = self.build(kw)
        if kind == "bitflip":
            for _ in range(r.randint(1, 4)):
                b = r.randrange(len(f))
                f[b] ^= 1 << r.randrange(8)
        elif kind == "bitflip_fixed":
            for _ in range(r.randint(1, 3)):
                b = r.randrange(min(len(f), 74))
                f[b] ^= 1 << r.randrange(8)
            fix_ip(f)
            fix_icrc(f)
        elif kind == "truncate":
            f = f[:r.randrange(1, len(f))]
        elif kind == "field":
            name = r.choice(["se", "mig", "fecn", "becn", "resv6", "resv7", "ackreq", "ttl",
                             "tos", "ip_id", "sport", "dport", "dst_ip", "dst_mac", "src_mac",
                             "udp_chksum", "df"])
            bits = {"se": 1, "mig": 1, "fecn": 1, "becn": 1, "resv6": 6, "resv7": 7, "ackreq": 1,
                    "ttl": 8, "tos": 8, "ip_id": 16, "sport": 16, "dport": 16, "dst_ip": 32,
                    "dst_mac": 48, "src_mac": 48, "udp_chksum": 16, "df": 1}[name]
            val = r.getrandbits(bits)
            if name == "df":
                val = bool(val)
            f = self.build(kw, **{name: val})
        elif kind == "qpn":
            f = self.build(kw, dqpn=r.choice([r.getrandbits(24), r.randrange(16),
                                              r.choice(CLEAN) | (r.randrange(1, 256) << 4)]))
        elif kind == "pkey":
            f = self.build(kw, pkey=r.getrandbits(16))
        elif kind == "tver":
            f = self.build(kw, tver=r.randrange(1, 16))
        elif kind == "srcip":
            f = self.build(kw, src_ip=r.getrandbits(32))
        elif kind == "len_lie":
            which = r.randrange(3)
            tot = int.from_bytes(f[16:18], "big")
            if which == 0:
                f[16:18] = ((tot + r.randint(-40, 40)) & 0xFFFF).to_bytes(2, "big")
            elif which == 1:
                f[38:40] = r.getrandbits(16).to_bytes(2, "big")
            else:
                tot = r.randint(0, 600)
                f[16:18] = tot.to_bytes(2, "big")
                f[38:40] = max(0, tot - 20).to_bytes(2, "big")
            fix_ip(f)
            if r.random() < 0.7:
                fix_icrc(f)
        elif kind == "pad_lie":
            f[43] = (f[43] & 0xCF) | (r.randrange(4) << 4)
            fix_icrc(f)
        elif kind == "oversize":
            f = self.build(kw, opcode=r.choice([Op.SEND_ONLY, Op.SEND_MIDDLE, Op.RDMA_WRITE_ONLY]),
                           payload=self.payload(r.randint(PMTU + 1, 4100)))
        elif kind == "opcode":
            f = self.build(kw, opcode=r.getrandbits(8))
        elif kind == "runt":
            f = f[:r.randint(1, 59)] if r.random() < 0.7 else bytearray(self.payload(
                r.randint(1, 59)))
        elif kind == "garbage":
            f = bytearray(self.payload(r.randint(60, 300)))
            if r.random() < 0.5:
                f[:42] = self.build(kw)[:42]
        elif kind == "jumbo":
            f = self.build(kw, payload=self.payload(r.randint(4200, 9000 - 60)))
        elif kind == "macerr":
            return f, 1
        return f, 0

    def victim_frame(self, write):
        """A parser-passing request to a victim, PSN near its expected one."""
        r = self.rng
        q = r.choice(VICTIMS)
        psn = (self.victim_psn[q] + r.choice([0, 0, 0, 1, -1, 5, 1 << 23])) & 0xFFFFFF
        kw = self.template(q, psn)
        if write:
            kw["opcode"] = r.choice([Op.RDMA_WRITE_ONLY, Op.RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                                     Op.RDMA_WRITE_FIRST])
            kw["reth"] = {"va": self.victim_base + r.randint(-64, VICTIM_SPAN + 64),
                          "rkey": K_VICTIM if r.random() < 0.8 else r.getrandbits(32),
                          "dmalen": r.choice([len(kw["payload"]), r.getrandbits(12)])}
            if kw["opcode"] == Op.RDMA_WRITE_FIRST:
                kw["payload"] = self.payload(PMTU)
            elif r.random() < 0.3:
                # an RDMA READ of the victims' region (or around it, or under another rkey):
                # answered from inside the key only
                kw["opcode"] = Op.RDMA_READ_REQUEST
                kw["payload"] = b""
                kw["reth"]["dmalen"] = r.choice([0, r.getrandbits(8), r.getrandbits(12),
                                                 r.getrandbits(15)])
        if r.random() < 0.5:
            self.victim_psn[q] = (psn + 1) & 0xFFFFFF
        return bytearray(self.build(kw)), 0


VICTIM_SPAN = 16384
LANES = 8                      # W = 64
RUNT = 60
SETTLE = 200                   # cycles of no activity that make the core quiescent
#: 1: a frame shorter than 60 bytes is followed by idle beats up to a 60-byte frame's time
#: (as on a real wire); 0 (default): runts back to back, one beat after the other
RUNT_SLOT = knob("FUZZ_RUNT_PACING")
NUM_QP = 16
#: idle cycles after every frame (0, the default: frames back to back, one beat a cycle, harsher
#: than any wire; 3 at W=64 = the 24 bytes of FCS, preamble and inter-frame gap of Ethernet)
IFG = knob("FUZZ_GAP_CYCLES")
SERIAL = knob("FUZZ_SERIAL_HOSTILE")
STRICT_ACK = knob("FUZZ_STRICT_ACK")


class FuzzTB:
    def __init__(self, dut, seed):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        self.src = RxDriver(dut, "s_axis_rx", dut.clk, LANES)
        self.sink = TxSink(dut, "m_axis_tx", dut.clk, LANES)
        self.mem = FastMem(dut, "m_axi", dut.clk, seed=seed, lanes=LANES)
        self.regs = Regs(self.axil)
        self.dev = Device(self.regs, self.mem, base=0x1000_0000, size=1 << 26)
        self.tready_low = 0
        self.monitoring = False
        self.low_at = []          # (cycle, cycles, frame being sent) of the first tready-low runs

    async def watch_tready(self):
        """Counts the cycles ``s_axis_rx_tready`` is low (event-driven: no per-cycle cost)."""
        dut, mem = self.dut, self.mem
        while True:
            await FallingEdge(dut.s_axis_rx_tready)
            await ReadOnly()
            if dut.s_axis_rx_tready.value or not self.monitoring:
                continue                    # a zero-width glitch, or still setting up
            t0 = mem.cycle
            before = list(self.src.history)[-10:]   # the frames started just before the fall
            await RisingEdge(dut.s_axis_rx_tready)
            n = max(1, mem.cycle - t0)
            self.tready_low += n
            if len(self.low_at) < 20:
                self.low_at.append((t0, n, self.src.current, before))

    async def trace_psn(self, path):
        """FUZZ_TRACE_PSN_FILE (Icarus only: needs the internal signals): one line per request
        entering PSN Check (its dqpn) and per stage-C decision (kind, QP index, drop, counter-6
        strobe), for attributing a counter-6 shortfall to a frame."""
        p = self.dut.resp.psn_check
        with open(path, "w", buffering=1) as fh:        # line-buffered: the end of a run counts
            while True:
                await RisingEdge(self.dut.clk)
                cyc = self.mem.cycle
                if p.meta__valid.value and p.meta__ready.value:
                    v = int(p.meta__payload.value)
                    fh.write(f"{cyc} meta dqpn={v >> 30 & 0xFFFFFF:#x} op={v & 0xFF:#x}\n")
                if p.fire.value:
                    fh.write(f"{cyc} fire kind={int(p.c_kind.value)} idx={int(p.c_idx.value)} "
                             f"drop={int(p.c_drop.value)} qok={int(p.c_qok.value)} "
                             f"stat6={int(p.stat.value) >> 6 & 1}\n")
                if self.dut.resp.psn_check.ack_out__valid.value:
                    fh.write(f"{cyc} ack_out\n")

    async def trace_stall(self, path, lo, hi):
        """FUZZ_TRACE_STALL_CYCLES=lo,hi (Icarus only): per cycle in [lo, hi), the handshakes
        between RX Parse, PSN Check and Execute, for locating what holds ``s_axis_rx_tready``
        low."""
        d, p = self.dut, self.dut.resp.psn_check
        sig = [("rx_tready", d.s_axis_rx_tready), ("rx_tvalid", d.s_axis_rx_tvalid),
               ("meta_v", p.meta__valid), ("meta_r", p.meta__ready),
               ("pay_v", p.payload__valid), ("pay_r", p.payload__ready),
               ("out_v", p.pay_out__valid), ("out_r", p.pay_out__ready),
               ("exe_v", p.exe__valid), ("c_valid", p.c_valid), ("can_go", p.can_go),
               ("rq_db_v", p.rq_db__valid), ("tx_v", p.tx__valid), ("tx_r", p.tx__ready)]
        with open(path, "w", buffering=1) as fh:
            fh.write("cycle " + " ".join(n for n, _ in sig) + "\n")
            while True:
                await RisingEdge(d.clk)
                cyc = self.mem.cycle
                if cyc >= hi:
                    return
                if cyc >= lo:
                    fh.write(f"{cyc} " + " ".join(str(int(x.value)) for _, x in sig) + "\n")

    async def start(self):
        dut, dev = self.dut, self.dev
        dut.rst.value = 1
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        await dev.open(LOCAL_MAC, LOCAL_IP)
        self.ccq = await dev.create_cq(0, 8)
        self.vcq = await dev.create_cq(1, 8)
        self.allowed = [(self.ccq.base, self.ccq.base + 32 * self.ccq.entries),
                        (self.vcq.base, self.vcq.base + 32 * self.vcq.entries)]
        # clean pools, each under one key; victims' region under one key with remote write
        self.send_pool = dev.alloc(1 << 22, 4096)
        self.write_pool = dev.alloc(1 << 22, 4096)
        dev.alloc(4096)
        self.victim_base = dev.alloc(VICTIM_SPAN, 4096)
        dev.alloc(4096)
        self.mem.add_guard(self.victim_base - 4096, 4096)
        self.mem.add_guard(self.victim_base + VICTIM_SPAN, 4096)
        self.allowed.append((self.victim_base, self.victim_base + VICTIM_SPAN))
        await dev.reg_mr(0, key=K_CLEAN_RECV, addr=self.send_pool, length=1 << 22, pd=PD,
                         access=Access.LOCAL_WRITE)
        await dev.reg_mr(1, key=K_CLEAN_WRITE, addr=self.write_pool, length=1 << 22, pd=PD,
                         access=Access.LOCAL_WRITE | Access.REMOTE_WRITE)
        await dev.reg_mr(2, key=K_VICTIM, addr=self.victim_base, length=VICTIM_SPAN, pd=PD,
                         access=Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ)
        self.send_next = self.send_pool
        self.write_next = self.write_pool
        self.qps = {}
        for q in CONNECTED:
            cq = self.ccq if q in CLEAN else self.vcq
            self.qps[q] = await dev.create_qp(
                q, recv_cq=cq, send_cq=cq, pd=PD, dest_qpn=DEST[q], remote_mac=REMOTE_MAC,
                remote_ip=REMOTE_IP, udp_sport=0xC123, pmtu=PMTU, rq_psn=PSN0[q],
                access=Access.REMOTE_WRITE | (Access.REMOTE_READ if q in VICTIMS else 0),
                min_rnr_timer=1, rq_log2=6)
            await dev.connect(self.qps[q])
        for q in VICTIMS:
            await self.arm_victim(q, reset=False)
        self.epsn = {q: PSN0[q] for q in CLEAN}
        cocotb.start_soon(self.watch_tready())
        if knob("FUZZ_TRACE_PSN_FILE"):
            cocotb.start_soon(self.trace_psn(knob("FUZZ_TRACE_PSN_FILE")))
        if knob("FUZZ_TRACE_STALL_CYCLES"):
            lo, hi = knob("FUZZ_TRACE_STALL_CYCLES")
            cocotb.start_soon(self.trace_stall(knob("FUZZ_TRACE_STALL_FILE"),
                                               lo, hi))
        await ClockCycles(dut.clk, 10)
        self.monitoring = True

    async def arm_victim(self, q, reset=True):
        dev, qp = self.dev, self.qps[q]
        if reset:
            await dev.modify_qp(qp, QpState.RESET)
            await dev.connect(qp)
        k = VICTIMS.index(q)
        for i in range(VICTIM_WQES):
            buf = self.victim_base + (k * VICTIM_WQES + i) * VICTIM_BUF // 2
            await dev.post_recv(qp, 0xF000 + i, [(buf, VICTIM_BUF // 2, K_VICTIM)])


@cocotb.test()
async def fuzz(dut):
    prof = None
    if knob("FUZZ_PROFILE_FILE"):
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    try:
        await _fuzz(dut)
    finally:
        if prof is not None:
            prof.disable()
            prof.dump_stats(knob("FUZZ_PROFILE_FILE"))


class _Campaign:
    """The state of one fuzz campaign (:func:`_fuzz`): the bench, the figures reported
    (``stats``, ``invariants`` among them), the clean traffic still to complete and the sums
    the invariants compare across batches. One batch: :meth:`clean_traffic`,
    :meth:`hostile_frames`, :meth:`merge`, :meth:`send`, :meth:`settle`, then the checks."""

    def __init__(self, dut, tb, rng):
        self.dut, self.tb, self.rng = dut, tb, rng
        self.dev, self.mem, self.regs = tb.dev, tb.mem, tb.regs
        self.total = knob("FUZZ_FRAMES")
        self.batch = knob("FUZZ_BATCH")
        self.fz = Fuzzer(rng, knob("FUZZ_JUMBO"))
        self.fz.victim_base = tb.victim_base
        self.stats = {"frames": 0, "hostile": 0, "clean_frames": 0, "clean_messages": 0,
                      "by_kind": {}, "by_reason": {str(i): 0 for i in range(7)},
                      "discarded_mutants": 0, "clean_qpn_foreign_ip": 0, "ack_unchecked": 0,
                      "batches": 0, "checked_writes": 0, "tx_frames": 0,
                      "victim_rearms": 0, "victim_cqes": 0, "truncation_sweep": 0}
        self.counters = None
        self.expect_cqes = []         # clean CQEs still to come: (wr_id, len)
        self.send_msgs = []           # (buf, data) placed by clean SENDs
        self.write_msgs = []          # (va, data)
        self.wr_id = 1
        self.t0 = self.cyc0 = None    # wall time and cycle of the start
        self.sweep_frames = []
        self.invariants = None
        self.keep_going = knob("FUZZ_KEEP_GOING")
        self.low0 = self.nr0 = 0
        self.sent_hostile = 0
        self.cum_elig = {q: 0 for q in CONNECTED}
        self.cum_resp = {q: 0 for q in CONNECTED}
        self.cum_elig_total = 0
        self.cum_victim_ok = 0

    async def start(self):
        """The counters all 0; the truncation sweep: one clean-QP SEND frame cut at every byte
        (all must drop: 3)."""
        fz, tb = self.fz, self.tb
        self.counters = await self.regs.counters()
        assert all(c == 0 for c in self.counters[:16]), self.counters
        self.t0 = time.monotonic()
        self.cyc0 = tb.mem.cycle
        sweep_kw = fz.template(CLEAN_SEND, tb.epsn[CLEAN_SEND])
        sweep_kw.update(opcode=Op.SEND_ONLY, payload=fz.payload(40))
        sweep = fz.build(sweep_kw)
        self.sweep_frames = [(bytes(sweep[:n]), 0) for n in range(1, len(sweep))]
        self.invariants = self.stats["invariants"] = {}

    def more(self):
        """Hostile frames (or the truncation sweep) still to send."""
        return self.sent_hostile < self.total or self.sweep_frames

    def inv(self, name, ok, msg):
        """Count one check of invariant ``name``; a violation raises at once, or with
        FUZZ_KEEP_GOING=1 is recorded (the run fails at its end)."""
        rec = self.invariants.setdefault(name, {"checked": 0, "violated": 0, "first": []})
        rec["checked"] += 1
        if not ok:
            rec["violated"] += 1
            text = str(msg() if callable(msg) else msg)
            if len(rec["first"]) < 3:
                rec["first"].append(text[:3000])
            self.dut._log.error("fuzz invariant %s violated: %s", name, text[:3000])
            if not self.keep_going:
                raise AssertionError(text)
        return ok

    async def clean_traffic(self):
        """This batch's clean messages: a SEND on QP 2 (its receive WQE posted), a WRITE on
        QP 3. Returns their frames [(qpn, frame)] in order and each clean QP's last PSN."""
        rng, fz, tb = self.rng, self.fz, self.tb
        clean_seq = []
        # a SEND on QP 2
        n = rng.randint(1, 3 * PMTU)
        data = fz.payload(n)
        buf = tb.send_next
        tb.send_next += (n + 63) // 64 * 64 + 64
        tb.allowed.append((buf, buf + n))
        await self.dev.post_recv(tb.qps[CLEAN_SEND], self.wr_id, [(buf, n, K_CLEAN_RECV)])
        self.expect_cqes.append((self.wr_id, n))
        self.send_msgs.append((buf, data))
        self.wr_id += 1
        chunks = [data[i:i + PMTU] for i in range(0, n, PMTU)]
        for k, ch in enumerate(chunks):
            op = (Op.SEND_ONLY if len(chunks) == 1 else Op.SEND_FIRST if k == 0
                  else Op.SEND_LAST if k == len(chunks) - 1 else Op.SEND_MIDDLE)
            last = k == len(chunks) - 1
            clean_seq.append((CLEAN_SEND, fz.frame(op, ch, dqpn=CLEAN_SEND,
                                                      psn=tb.epsn[CLEAN_SEND], ackreq=int(last))))
            tb.epsn[CLEAN_SEND] = (tb.epsn[CLEAN_SEND] + 1) & 0xFFFFFF
        # a WRITE on QP 3
        n = rng.randint(1, 3 * PMTU)
        data = fz.payload(n)
        va = tb.write_next + rng.randrange(64)
        tb.write_next = (va + n + 63) // 64 * 64 + 64
        tb.allowed.append((va, va + n))
        self.write_msgs.append((va, data))
        chunks = [data[i:i + PMTU] for i in range(0, n, PMTU)]
        for k, ch in enumerate(chunks):
            op = (Op.RDMA_WRITE_ONLY if len(chunks) == 1 else Op.RDMA_WRITE_FIRST if k == 0
                  else Op.RDMA_WRITE_LAST if k == len(chunks) - 1 else Op.RDMA_WRITE_MIDDLE)
            reth = {"va": va, "rkey": K_CLEAN_WRITE, "dmalen": n} if k == 0 else None
            last = k == len(chunks) - 1
            clean_seq.append((CLEAN_WRITE, fz.frame(op, ch, dqpn=CLEAN_WRITE,
                                                       psn=tb.epsn[CLEAN_WRITE], reth=reth,
                                                       ackreq=int(last))))
            tb.epsn[CLEAN_WRITE] = (tb.epsn[CLEAN_WRITE] + 1) & 0xFFFFFF
        self.stats["clean_messages"] += 2
        last_psn = {q: (tb.epsn[q] - 1) & 0xFFFFFF for q in CLEAN}
        return clean_seq, last_psn

    def hostile_frame(self):
        """The next hostile frame: (bytes, tuser, kind), or None for a kind not run."""
        rng, fz, tb = self.rng, self.fz, self.tb
        if self.sweep_frames:
            f, tu = self.sweep_frames.pop(0)
            self.stats["truncation_sweep"] += 1
            return f, tu, "truncate_sweep"
        kind = rng.choices(Fuzzer.KINDS, Fuzzer.WEIGHTS)[0]
        if kind == "jumbo" and not fz.jumbo:
            return None
        if kind in ("victim_valid", "victim_write"):
            f, tu = fz.victim_frame(kind == "victim_write")
        else:
            # templates aimed at a clean QP's *next* PSN, or a victim, or anywhere
            tgt = rng.random()
            if tgt < 0.5:
                q = rng.choice(CLEAN)
                kw = fz.template(q, tb.epsn[q])
            elif tgt < 0.85:
                q = rng.choice(VICTIMS)
                kw = fz.template(q, fz.victim_psn[q])
            else:
                kw = fz.template(rng.getrandbits(24), rng.getrandbits(24))
            f, tu = fz.mutate(kw, kind)
        return f, tu, kind

    def classify(self, f, tu, kind):
        """(frame, tuser, reason, eligible, kind) of a hostile frame: the reference's drop
        reason (6 for a parser-passing frame no QP takes) and the victim (or "ack") that may
        take it; None for a parser-passing mutant of a clean QP (not sent)."""
        stats = self.stats
        f = bytes(f)
        reason = drop_reason(f, tuser=bool(tu))
        if reason != 0:
            return f, tu, reason, None, kind
        h = decode_frame(f.ljust(74, b"\0"))
        dq = h["bth"]["dqpn"]
        ok_src = h["ipv4"]["src"] == REMOTE_IP
        if dq in CLEAN and ok_src:
            stats["discarded_mutants"] += 1
            return None
        if dq in CLEAN:
            stats["clean_qpn_foreign_ip"] += 1
        elig = dq if (dq in VICTIMS and ok_src) else None
        if (elig is None and h["bth"]["opcode"] == Op.ACKNOWLEDGE and 1 < dq < NUM_QP
                and not STRICT_ACK):
            # the top hands every ACKNOWLEDGE to QPN 2..N-1 to the requester without the
            # source-IPv4/QP-state checks of counter 6 (reported; FUZZ_STRICT_ACK=1
            # expects 6 as interface.md §4.5 says)
            elig = "ack"
            stats["ack_unchecked"] += 1
        if elig is None:
            reason = 6
        return f, tu, reason, elig, kind

    def hostile_frames(self):
        """This batch's hostile frames: (frame, tuser, reason, eligible, kind)."""
        hostile = []
        while len(hostile) < self.batch and (self.sent_hostile + len(hostile) < self.total
                                             or self.sweep_frames):
            x = self.hostile_frame()
            if x is None:
                continue
            x = self.classify(*x)
            if x is not None:
                hostile.append(x)
        return hostile

    def merge(self, clean_seq, hostile):
        """Clean frames in order, hostile frames at random places (FUZZ_DUMP_BATCH: the batch
        as sent, one frame a line, for tracing a violation)."""
        seq = [(f, 0, 0, q, "clean") for q, f in clean_seq]
        for h in hostile:
            seq.insert(self.rng.randint(0, len(seq)), h)
        if knob("FUZZ_DUMP_BATCH") == self.stats["batches"]:
            with open(knob("FUZZ_DUMP_BATCH_FILE"), "w") as fh:
                for i, (f, tu, reason, elig, kind) in enumerate(seq):
                    h = f.ljust(74, b"\0")
                    fh.write(f"{i} {kind} reason={reason} elig={elig} tuser={tu} len={len(f)} "
                             f"op={h[42]:#x} dqpn={int.from_bytes(h[47:50], 'big'):#x} "
                             f"psn={int.from_bytes(h[51:54], 'big'):#x} src={h[26:30].hex()} "
                             f"hex={f[:80].hex()}\n")
        return seq

    async def send_serial(self, f, tu, tag, reason, kind):
        """Attribution mode: a hostile frame alone, counter 6 checked after it."""
        tb, regs = self.tb, self.regs
        await tb.src.wait()
        c6 = await regs.counter(6)
        c0 = await regs.counter(0)
        tb.src.send_nowait(f, tu, tag)
        await tb.src.wait()
        while await regs.counter(0) == c0:
            await Timer(100, "ns")
        await Timer(2000, "ns")
        got6 = await regs.counter(6) - c6
        if reason == 6 and got6 != 1:
            raise AssertionError(f"frame {kind} should count 6, counted {got6}: "
                                 f"{decode_frame(f.ljust(74, bytes(1)))['bth']} "
                                 f"src {f[26:30].hex()} len {len(f)} hex {f.hex()}")

    async def send(self, seq, eligible):
        """Send the batch (counted per kind and reason, and per victim in ``eligible``);
        returns the frames sent per drop reason."""
        stats, tb = self.stats, self.tb
        sent_reason = [0] * 7
        for f, tu, reason, elig, kind in seq:
            if kind != "clean":
                sent_reason[reason] += 1
                stats["by_kind"][kind] = stats["by_kind"].get(kind, 0) + 1
                stats["by_reason"][str(reason)] += 1
                if elig is not None:
                    eligible[elig] += 1
            else:
                stats["by_reason"]["0"] += 1
            tag = (kind, len(f), reason)
            if SERIAL and kind != "clean":
                await self.send_serial(f, tu, tag, reason, kind)
                continue
            # the whole batch is queued at once: the driver sends it back to back
            tb.src.send_nowait(f, tu, tag)
            if len(f) < RUNT and RUNT_SLOT:
                # a runt still occupies a minimum frame's time on the wire
                tb.src.gap(max(0, -(-RUNT // LANES) - -(-len(f) // LANES)))
            tb.src.gap(IFG)
        return sent_reason

    async def settle(self, seq, c_before):
        """Wait for every frame to be counted, then for the core to be quiescent; returns the
        counters' increments over the batch."""
        tb, regs = self.tb, self.regs
        await tb.src.wait()
        for _ in range(2000):
            if (await regs.counter(0)) - c_before[0] >= len(seq):
                break
            await Timer(200, "ns")
        # then until the core is quiescent: counters, host-memory traffic and transmit all
        # unchanged over a window. (Counters alone are not enough: a frame can wait in RX
        # Parse's queue for hundreds of cycles behind a long payload being written or
        # drained, with no counter moving; reading then undercounts 6 - seed 2, batch 3.)
        def activity():
            ms = tb.mem.stats
            return (ms["aw"], ms["ar"], ms["w_beats"], ms["r_beats"], tb.sink.beats,
                    tb.src.beats)
        # a dropped frame's payload is drained at one beat a cycle with nothing to see, and the
        # frames behind it wait: the window covers the longest frame that reaches PSN Check
        settle = SETTLE + max([len(x[0]) for x in seq if x[2] in (0, 6)] + [0]) // LANES
        c, a0 = await regs.counters(), activity()
        for k in range(400):
            await Timer(10 * settle, "ns")
            c2, a2 = await regs.counters(), activity()
            if c2 == c and a2 == a0:
                break
            c, a0 = c2, a2
        self.inv("quiescent", k < 399, f"the core did not settle within 400 x {settle} cycles")
        d = [(c[i] - c_before[i]) & 0xFFFFFFFF for i in range(16)]
        self.counters = c
        return d

    def check_counters(self, d, seq, sent_reason, n_clean, eligible):
        """2. counter 0 = frames sent, 1–5 = the reference, 15 = 0, 6 at least the certain
        no-QP frames, the frames accepted between the clean ones and those plus the eligible."""
        inv, stats = self.inv, self.stats
        inv("counter0_eq_frames", d[0] == len(seq), f"counter 0 {d[0]} != frames sent {len(seq)}")
        for r in range(1, 6):
            inv(f"counter{r}_eq_reference", d[r] == sent_reason[r],
                f"counter {r}: {d[r]} != reference {sent_reason[r]}")
        inv("counter15_zero", d[15] == 0, d)
        accepted = d[0] - sum(d[1:7]) - d[15]
        n_elig = sum(eligible.values())
        if d[6] < sent_reason[6]:
            six = []
            for f, tu, reason, elig, kind in seq:
                if reason == 6 and kind != "clean":
                    h = decode_frame(f.ljust(74, b"\0"))
                    six.append((kind, hex(h["bth"]["opcode"]), hex(h["bth"]["dqpn"]),
                                hex(h["ipv4"]["src"]), h["bth"]["psn"], len(f)))
        inv("counter6_ge_certain", d[6] >= sent_reason[6],
            lambda: f"counter 6 {d[6]} < certain no-QP frames {sent_reason[6]} (batch "
                    f"{stats['batches']}): {six}; counters {d}; clean epsn {self.tb.epsn}")
        inv("accepted_in_range", n_clean <= accepted <= n_clean + n_elig,
            f"accepted {accepted} not in [{n_clean}, {n_clean + n_elig}] (counters {d})")
        return n_elig

    def check_responses(self, eligible, n_elig, last_psn):
        """4. every frame sent answers a connected QP; the victims answered no more than they
        were sent; the clean QPs ACK (never NAK) up to their last PSN."""
        inv, tb = self.inv, self.tb
        acks = {q: [] for q in CONNECTED}
        while not tb.sink.empty():
            dd = decode_frame(tb.sink.recv_nowait())
            self.stats["tx_frames"] += 1
            inv("tx_icrc_ok", dd["icrc_ok"], "a transmitted frame with a bad ICRC")
            owner = [q for q in CONNECTED if DEST[q] == dd["bth"]["dqpn"]]
            if inv("tx_known_qpn", owner, f"a response to unknown QPN {dd['bth']['dqpn']:#x}"):
                # a READ is answered by one FIRST or ONLY and its MIDDLE/LAST frames: count
                # one response per READ
                op = dd["bth"]["opcode"]
                if op in (Op.RDMA_READ_RESPONSE_MIDDLE, Op.RDMA_READ_RESPONSE_LAST):
                    inv("victim_read_response",
                        owner[0] in VICTIMS and len(dd["payload"]) <= PMTU,
                        f"QP {owner[0]}: {dd['bth']} with {len(dd['payload'])} bytes")
                else:
                    acks[owner[0]].append(dd)
        self.cum_elig_total += n_elig
        for q in VICTIMS:
            self.cum_elig[q] += eligible[q]
            self.cum_resp[q] += len(acks[q])
            inv("victim_responses_le_frames", self.cum_resp[q] <= self.cum_elig[q],
                f"QP {q}: {self.cum_resp[q]} responses for {self.cum_elig[q]} parser-passing "
                "frames")
        for q in CLEAN:
            if not inv("clean_ack", acks[q], f"clean QP {q}: no ACK"):
                continue
            for a in acks[q]:
                inv("clean_no_nak", a["bth"]["opcode"] == Op.ACKNOWLEDGE
                    and a["aeth"]["syndrome"] == 0x1F,
                    f"clean QP {q} answered {a['bth']} {a.get('aeth')}")
            inv("clean_ack_last_psn", acks[q][-1]["bth"]["psn"] == last_psn[q],
                (q, hex(acks[q][-1]["bth"]["psn"]), hex(last_psn[q])))

    async def check_clean(self):
        """5. the clean completions, exact and in order, and the clean data in place."""
        inv, dev, expect_cqes = self.inv, self.dev, self.expect_cqes
        for _ in range(50):
            got = await dev.poll_cq(self.tb.ccq)
            for cqe in got:
                if not inv("clean_cqe_expected", expect_cqes, f"an unexpected clean CQE {cqe}"):
                    continue
                w, n = expect_cqes.pop(0)
                inv("clean_cqe_exact", (cqe.wr_id, cqe.byte_len, cqe.status, cqe.qpn) ==
                    (w, n, WcStatus.SUCCESS, CLEAN_SEND), (cqe, w, n))
            if not expect_cqes:
                break
            await Timer(500, "ns")
        inv("clean_cqes_all", not expect_cqes, f"clean CQEs missing: {expect_cqes}")
        expect_cqes.clear()
        for b, data in self.send_msgs:
            inv("clean_send_data", dev.read(b, len(data)) == data, f"SEND data at {b:#x} differs")
        for va, data in self.write_msgs:
            inv("clean_write_data", dev.read(va, len(data)) == data,
                f"WRITE data at {va:#x} differs")
        self.send_msgs.clear()
        self.write_msgs.clear()

    def progress(self):
        """Every 20 batches: a log line, and the figures so far (FUZZ_REPORT_FILE)."""
        stats = self.stats
        if stats["batches"] % 20 == 0:
            self.dut._log.info("fuzz: %d frames (%d hostile), %.1f frames/s, reasons %s",
                               stats["frames"], stats["hostile"],
                               stats["frames"] / (time.monotonic() - self.t0), stats["by_reason"])
            if knob("FUZZ_REPORT_FILE"):
                # progress of a long run: the figures so far
                stats["wall_seconds"] = round(time.monotonic() - self.t0, 1)
                stats["sim_cycles"] = self.tb.mem.cycle - self.cyc0
                stats["frames_per_second"] = round(stats["frames"] / stats["wall_seconds"], 1)
                with open(knob("FUZZ_REPORT_FILE") + ".progress", "w") as fh:
                    json.dump(stats, fh, indent=1)

    async def victim_cqes(self):
        """Poll the victims' CQ: their success CQEs so far."""
        vc = await self.dev.poll_cq(self.tb.vcq)
        self.cum_victim_ok += sum(1 for x in vc if x.status == WcStatus.SUCCESS)
        self.stats["victim_cqes"] += len(vc)

    def check_writes_tready(self):
        """3. every host-memory write in a granted buffer, no guard written, no AXI error;
        1. ``s_axis_rx_tready`` never low."""
        inv, tb, mem, stats = self.inv, self.tb, self.mem, self.stats
        for a, data, _ in mem.writes:
            e = a + len(data)
            inv("write_in_granted_buffer", any(s <= a and e <= t for s, t in tb.allowed),
                f"a write of {len(data)} B at {a:#x} outside every granted buffer")
        stats["checked_writes"] += len(mem.writes)
        mem.writes.clear()
        inv("no_guard_write", not mem.violations,
            f"writes into guard regions: {mem.violations[:5]}")
        inv("axi_protocol", not mem.errors, "AXI protocol errors: " + "; ".join(mem.errors[:5]))
        mem.violations.clear()
        mem.errors.clear()
        low0, nr0 = self.low0, self.nr0
        inv("tready_high", tb.tready_low == low0 and tb.src.not_ready == nr0,
            lambda: f"{tb.src.not_ready - nr0} beats waited for tready; s_axis_rx_tready low for "
                    f"{tb.tready_low - low0} cycles (batch {stats['batches']}): (cycle it fell, "
                    f"cycles low, frame being sent, [(cycle, frame) started before]) "
                    f"{tb.low_at[-1:]}")
        stats["tready_low_runs"] = tb.low_at
        self.low0, self.nr0 = tb.tready_low, tb.src.not_ready

    async def check_qps(self, eligible):
        """The clean QPs' state (every 8 batches); victims that went to ERROR re-armed (and
        their receive queues topped up)."""
        tb, dev, stats = self.tb, self.dev, self.stats
        if stats["batches"] % 8 == 1:
            for q in CLEAN:
                st = await dev.query_qp(tb.qps[q])
                self.inv("clean_qp_state",
                         st["state"] == QpState.RTS and st["epsn"] == tb.epsn[q], (q, st))
        for q in VICTIMS:
            if eligible[q]:
                st = await dev.query_qp(tb.qps[q])
                if (st["state"] == QpState.ERROR
                        or st["rq_ci"] != tb.qps[q].rq_producer - VICTIM_WQES):
                    await ClockCycles(self.dut.clk, 50)
                    await tb.arm_victim(q)
                    self.fz.victim_psn[q] = PSN0[q]
                    stats["victim_rearms"] += 1

    async def run_batch(self):
        """One batch: clean and hostile frames sent, the core settled, every invariant."""
        stats = self.stats
        stats["batches"] += 1
        eligible = {q: 0 for q in CONNECTED}
        eligible["ack"] = 0
        clean_seq, last_psn = await self.clean_traffic()
        hostile = self.hostile_frames()
        seq = self.merge(clean_seq, hostile)
        n_clean = len(clean_seq)
        c_before = self.counters
        sent_reason = await self.send(seq, eligible)
        self.sent_hostile += len(hostile)
        stats["frames"] += len(seq)
        stats["hostile"] += len(hostile)
        stats["clean_frames"] += n_clean
        d = await self.settle(seq, c_before)
        n_elig = self.check_counters(d, seq, sent_reason, n_clean, eligible)
        self.check_responses(eligible, n_elig, last_psn)
        await self.check_clean()
        self.progress()
        await self.victim_cqes()
        self.inv("victim_cqes_le_frames", self.cum_victim_ok <= self.cum_elig_total,
                 f"{self.cum_victim_ok} victim success CQEs for {self.cum_elig_total} "
                 "parser-passing frames")
        self.check_writes_tready()
        await self.check_qps(eligible)
        if stats["batches"] % 20 == 0:
            self.dut._log.info("fuzz: %d frames (%d hostile), %.1f frames/s, reasons %s",
                               stats["frames"], stats["hostile"],
                               stats["frames"] / (time.monotonic() - self.t0), stats["by_reason"])
        await self.victim_cqes()
        await self.dev.events()

    async def finish(self):
        """The figures (logged, FUZZ_REPORT_FILE); fails on any invariant violated."""
        tb, fz, stats, invariants = self.tb, self.fz, self.stats, self.invariants
        dt = time.monotonic() - self.t0
        stats["sim_cycles"] = tb.mem.cycle - self.cyc0
        stats["tready_low_cycles"] = tb.tready_low
        stats["rx_beats"] = tb.src.beats
        stats["rx_beats_not_ready"] = tb.src.not_ready
        stats["scapy_checked_frames"] = fz.frame.checked
        stats["frames_built"] = fz.frame.built
        stats["axi"] = dict(tb.mem.stats)
        stats["wall_seconds"] = round(dt, 1)
        stats["frames_per_second"] = round(stats["frames"] / dt, 1)
        stats["counters"] = await self.regs.counters()
        self.dut._log.info("fuzz figures: %s", json.dumps(stats))
        stats["invariant_checks"] = sum(v["checked"] for v in invariants.values())
        stats["invariant_violations"] = sum(v["violated"] for v in invariants.values())
        out = knob("FUZZ_REPORT_FILE")
        if out:
            with open(out, "w") as fh:
                json.dump(stats, fh, indent=1)
        bad = {k: v["violated"] for k, v in invariants.items() if v["violated"]}
        assert not bad, f"invariants violated (checks: violations): {bad}; first: " + \
            "; ".join(f"{k}: {invariants[k]['first'][0][:500]}" for k in bad)


async def _fuzz(dut):
    seed = knob("FUZZ_SEED")
    rng = random.Random(seed)
    tb = FuzzTB(dut, seed)
    await tb.start()
    c = _Campaign(dut, tb, rng)
    await c.start()
    while c.more():
        await c.run_batch()
    await c.finish()


@cocotb.test()
async def foreign_ip_duplicate(dut):
    """Directed reproducer: a request from a source IPv4 that is not the QP's must count as 6
    and draw no response, whatever its PSN (here: in the duplicate region of a connected QP)."""
    tb = FuzzTB(dut, 1)
    await tb.start()
    regs = tb.regs
    before = await regs.counters()
    q = 6
    for psn in ((PSN0[q] - 5) & 0xFFFFFF, PSN0[q], (PSN0[q] + 3) & 0xFFFFFF):
        f = build_frame(Op.RDMA_WRITE_ONLY, b"x" * 16, dqpn=q, psn=psn, ackreq=1,
                        src_ip=0xC66FF4C6, reth={"va": tb.victim_base, "rkey": K_VICTIM,
                                                 "dmalen": 16})
        tb.src.send_nowait(f)
    await tb.src.wait()
    await ClockCycles(dut.clk, 400)
    c = await regs.counters()
    d = [c[i] - before[i] for i in range(16)]
    tx = []
    while not tb.sink.empty():
        tx.append(decode_frame(tb.sink.recv_nowait())["bth"])
    assert d[0] == 3 and d[6] == 3 and not tx, \
        f"foreign-IPv4 requests: counter deltas {d}, responses {tx}"
    assert all(s <= a < e for a, _, _ in tb.mem.writes for s, e in tb.allowed[:2]) or \
        not tb.mem.writes, tb.mem.writes


@cocotb.test(skip=knob("FUZZ_IDLE_SPEED_CYCLES") is None)
async def idle_speed(dut):
    """Raw simulator speed: the clock alone (no Python per cycle), for the fuzz's profile."""
    from cocotb.triggers import Timer
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    await Timer(100, "ns")
    dut.rst.value = 0
    n = knob("FUZZ_IDLE_SPEED_CYCLES")
    t = time.monotonic()
    await Timer(10 * n, "ns")
    dt = time.monotonic() - t
    dut._log.warning("idle_speed: %d cycles in %.2f s: %.0f cycles/s", n, dt, n / dt)
    t = time.monotonic()
    await ClockCycles(dut.clk, n // 10)
    dt = time.monotonic() - t
    dut._log.warning("ClockCycles: %d cycles in %.2f s: %.0f cycles/s", n // 10, dt, n / 10 / dt)
