"""Random responder traffic at the ``rnic`` top, through the contract only, against the model.

Several QPs (2..2+RESP_RANDOM_QPS-1) take random messages of every SEND and RDMA WRITE opcode
(FIRST/MIDDLE/LAST/ONLY, WITH_IMMEDIATE, WITH_INVALIDATE), 0 to 4 PMTUs long, from a go-back-N
requester that loses, duplicates, reorders and corrupts frames (bad ICRC, IPv4 checksum, MAC,
UDP port, P_Key, TVer, length, ``tuser``, foreign source IPv4, unknown QPN), meets empty receive
queues (RNR), stale and bad rkeys, too-small and bad receive buffers, refused invalidations and
opcode-sequence errors. Frames are built by scapy (``sim.packets``) and go in on ``s_axis_rx``
back to back; ACK/NAKs are decoded from ``m_axis_tx`` (ICRC recomputed); data and CQEs are read
from host memory (``sim.hostmem.HostMem``, hostile); control goes over AXI4-Lite through the
verbs driver. The scoreboard is :class:`sim.models.responder.TopResponderModel`, fed with the
same frames and the same driver commands.

The run is cut into rounds: software work (QP resets, key re-registration, posting receives)
while the core is quiet, then a burst of frames, then the core runs dry and everything is
compared: every ACK/NAK (per QP, in order: the model's list minus positive ACKs the hardware may
coalesce; the contract fixes no order between QPs), every
CQE (per QP in order; QPs sharing a CQ may interleave), every byte of the receive, RDMA WRITE and
fast-reg areas with 256 guard bytes around each, the host-memory write log (nothing written
outside those areas and the CQ rings), QUERY_QP of every QP, the events, every counter, and the
identity counter 0 = counters 1–6 + 15 + frames accepted by QPs (interface.md §4.5).

A QP whose frame fails after PSN Check (NAK 0x62/0x63, refused invalidate) gets no more frames
in that round: in the hardware its younger frames already decided are skipped rather than dropped,
which only a cycle-accurate model could predict (``TopResponderModel.fatal_late``).

Knobs: the RESP_RANDOM_* of sim/knobs.py (docs/testing.md).
"""

import random
import time

import cocotb
from cocotb.triggers import ClockCycles, with_timeout
from cocotbext.axi import AxiStreamFrame

from rnic.ifaces import CmdOp
from rnic.opcodes import Op
from sim.driver.regs import Regs
from sim.driver.verbs import Access, Device, QpState
from sim.hostmem import HostMem
from sim.knobs import knob
from sim.models.keys import FAST_REG_MR, MR, set_args
from sim.models.psn import table_match
from sim.models.responder import Frame, TeeMem, TopResponderModel
from sim.packets import LOCAL_IP, LOCAL_MAC, REMOTE_IP, REMOTE_MAC, build_frame, decode_frame
from sim.top_ports import top_ports

M24 = 0xFFFFFF
GUARD = 256
RA_SIZE = 16384          # receive area per QP
WA_SIZE = 8192           # RDMA WRITE area per QP
FR_SIZE = 4096           # per fast-reg MR
IOVA_OFF = 0x7000_0000_0000     # iova = bus + IOVA_OFF for the rkey MRs (a real translation)
RQ_LOG = 4
CQ_LOG = 6


def _pct(rng, p):
    return rng.random() < p


class Pkt:
    __slots__ = ("psn", "op", "payload", "kw", "ackreq")

    def __init__(self, psn, op, payload, kw, ackreq):
        self.psn, self.op, self.payload, self.kw, self.ackreq = psn, op, payload, kw, ackreq

    def frame(self, qpn, **over):
        kw = dict(self.kw, psn=self.psn, dqpn=qpn, ackreq=self.ackreq)
        kw.update(over)
        return build_frame(self.op, self.payload, **kw)


class Requester:
    """The remote requester of one QP: a go-back-N packet stream."""

    def __init__(self, qpn, pmtu, psn):
        self.qpn, self.pmtu = qpn, pmtu
        self.pkts = []
        self.nxt = 0
        self.next_psn = psn

    def reset(self, psn):
        self.pkts, self.nxt, self.next_psn = [], 0, psn

    def add(self, op, payload, ackreq, **kw):
        self.pkts.append(Pkt(self.next_psn, op, payload, kw, ackreq))
        self.next_psn = (self.next_psn + 1) & M24

    def index_of(self, psn):
        for i, p in enumerate(self.pkts):
            if p.psn == psn:
                return i
        return len(self.pkts)

    def go_back(self, epsn):
        """Retire what the responder executed; resend from its ePSN."""
        k = self.index_of(epsn)
        self.pkts = self.pkts[k:]
        self.nxt = 0


def _fmt(frames):
    return " ".join(f"{f.qpn}:{f.psn:x}/{f.syndrome:x}/{f.msn}" for f in frames)


def _qp_diff(expected, got):
    """The QPs whose responses differ, with both lists. Per QP the frames must be what PSN
    Check's pending-response table can send for the decided responses (``table_match``: an ACK
    may be replaced by a newer ACK, a NAK by a newer NAK of the same QP while they wait for the
    transmit side; the last of each is sent; order kept)."""
    out = []
    for qpn in sorted({f.qpn for f in expected} | {f.qpn for f in got}):
        e = [f for f in expected if f.qpn == qpn]
        g = [f for f in got if f.qpn == qpn]
        if not table_match(e, g):
            out.append(f"QP {qpn}: got {_fmt(g)}\n   expected {_fmt(e)}")
    return "responses differ: " + "\n ".join(out) + "\n " if out else ""


class Bench:
    def __init__(self, dut, qps=None):
        self.dut = dut
        self.nqp = qps or knob("RESP_RANDOM_QPS")       # QPs taking traffic
        self.rng = random.Random(knob("RESP_RANDOM_SEED"))
        self.axil, self.src, self.sink = top_ports(dut)
        bp = knob("RESP_RANDOM_HOST_HOSTILITY")
        self.mem = HostMem(dut, "m_axi", dut.clk, dut.rst, seed=self.rng.randrange(1 << 30),
                           backpressure=bp if bp > 0 else False,
                           max_latency=int(60 * bp) if bp > 0 else 0)
        self.regs = Regs(self.axil)
        self.tx = []
        self.tx_seen = 0
        self.phase = "reset"

    async def _watchdog(self):
        d = self.dut
        while True:
            await ClockCycles(d.clk, 20000)
            d._log.info("watchdog: phase %s, rx tvalid %s tready %s, tx tvalid %s tready %s, "
                        "tx frames %d", self.phase, d.s_axis_rx_tvalid.value,
                        d.s_axis_rx_tready.value, d.m_axis_tx_tvalid.value,
                        d.m_axis_tx_tready.value, len(self.tx))

    async def _collect(self):
        while True:
            f = await self.sink.recv()
            self.tx.append(bytes(f.tdata))

    # ---- set-up ------------------------------------------------------------------------------
    async def start(self):
        dut = self.dut
        dut.rst.value = 1
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        await self.regs.wait_idle()
        caps = await self.regs.read("CAPS0")
        self.num_qp, self.num_cq = 1 << (caps >> 8 & 0xFF), 1 << (caps >> 16 & 0xFF)
        self.num_keys = 1 << (caps >> 24 & 0xFF)
        self.lanes = caps & 0xFF
        self.model = TopResponderModel(self.num_qp, self.num_keys, local_mac=LOCAL_MAC,
                                       local_ip=LOCAL_IP)
        # RESP_RANDOM_ACCEPT_CLASSJ_BUG=1: accept the known deviation (a refused invalidate
        # ACKed without AckReq)
        self.model.psn.classj_always_ack = knob("RESP_RANDOM_ACCEPT_CLASSJ_BUG")
        self.dev = Device(self.regs, TeeMem(self.mem, self.model.mem), base=0x1000_0000,
                          size=1 << 26)
        await self.dev.open(LOCAL_MAC, LOCAL_IP)
        cocotb.start_soon(self._collect())
        cocotb.start_soon(self._watchdog())
        rng = self.rng
        nqp = self.nqp
        assert 2 * nqp + 2 <= self.num_keys and 2 + nqp <= self.num_qp
        self.qpns = list(range(2, 2 + nqp))
        self.cqs = {}
        for c in range(min(self.num_cq, nqp)):
            cq = await self.dev.create_cq(c, CQ_LOG)
            self.model.set_cq(c, cq.base, CQ_LOG)
            self.cqs[c] = cq
        self.areas = []          # (start, end) compared byte for byte (guards included)
        self.qps, self.req, self.lkey, self.rkey, self.ra, self.wa = {}, {}, {}, {}, {}, {}
        for i, qpn in enumerate(self.qpns):
            pd = 1 + i % 2
            pmtu = rng.choice([256, 512, 1024])
            cq = self.cqs[i % len(self.cqs)]
            qp = await self.dev.create_qp(qpn, recv_cq=cq, send_cq=cq, pd=pd,
                                          dest_qpn=0x100 + qpn, remote_mac=REMOTE_MAC,
                                          remote_ip=REMOTE_IP, udp_sport=0xC000 + qpn,
                                          pmtu=pmtu, access=Access.REMOTE_WRITE,
                                          min_rnr_timer=1 + i, rq_log2=RQ_LOG)
            self.model.set_qp(qpn, self.dev.qp_args(qp, QpState.RESET))
            self.qps[qpn] = qp
            self.req[qpn] = Requester(qpn, pmtu, 0)
            self.ra[qpn] = self._area(RA_SIZE)
            self.wa[qpn] = self._area(WA_SIZE)
            self.lkey[qpn] = 0x1000 + qpn
            self.rkey[qpn] = 0x2000 + qpn
            await self.set_key(2 * i, set_args(self.lkey[qpn], self.ra[qpn], RA_SIZE,
                                               self.ra[qpn], pd, Access.LOCAL_WRITE, MR, 1))
            await self.set_key(2 * i + 1, set_args(
                self.rkey[qpn], self.wa[qpn] + IOVA_OFF, WA_SIZE, self.wa[qpn], pd,
                Access.LOCAL_WRITE | Access.REMOTE_WRITE, MR, 1))
            await self.connect(qpn)
        # fast-reg MRs in the remaining slots: targets of WRITEs and of SEND_WITH_INVALIDATE
        self.fr = {}
        for k, slot in enumerate(range(2 * nqp, self.num_keys)):
            if k == 8:
                break
            self.fr[slot] = dict(pd=1 + k % 2, base=self._area(FR_SIZE), key=0x3000 + 0x100 * k,
                                 gen=0)
            await self.reg_fr(slot)

    def _area(self, size):
        a = self.dev.alloc(size + 2 * GUARD, 4096) + GUARD
        self.dev.write(a - GUARD, self.rng.randbytes(size + 2 * GUARD))
        self.areas.append((a - GUARD, a + size + GUARD))
        return a

    async def set_key(self, slot, args):
        r, _ = await self.regs.command(CmdOp.SET_KEY, slot, args, check=False)
        assert r == self.model.set_key(slot, args), (slot, r)

    async def reg_fr(self, slot):
        f = self.fr[slot]
        f["gen"] += 1
        await self.set_key(slot, set_args(f["key"] + (f["gen"] & 0xFF), f["base"], FR_SIZE,
                                          f["base"], f["pd"],
                                          Access.LOCAL_WRITE | Access.REMOTE_WRITE,
                                          FAST_REG_MR, 1))

    async def set_qp(self, qpn, state):
        qp = self.qps[qpn]
        r = await self.dev.modify_qp(qp, state, check=False)
        assert r == self.model.set_qp(qpn, self.dev.qp_args(qp, state)), (qpn, state, r)

    async def connect(self, qpn):
        psn = self.rng.choice([0, M24 - 3, self.rng.randrange(1 << 24)])
        self.qps[qpn].rq_psn = psn
        self.req[qpn].reset(psn)
        for s in (QpState.RESET, QpState.INIT, QpState.RTR, QpState.RTS):
            await self.set_qp(qpn, s)

    async def post_recv(self, qpn):
        rng = self.rng
        qp = self.qps[qpn]
        base = self.ra[qpn]
        maxlen = 4 * self.req[qpn].pmtu
        total = maxlen + rng.randrange(512) if not _pct(rng, 0.015) else rng.randrange(maxlen)
        n = rng.choice([1, 1, 2, 3, 3]) if total else rng.choice([0, 1])
        cuts = sorted(rng.randrange(total + 1) for _ in range(n - 1)) if n else []
        lens = [b - a for a, b in zip([0] + cuts, cuts + [total])] if n else []
        sges = []
        for ln in lens:
            addr = base + rng.randrange(RA_SIZE - ln + 1)
            key = self.lkey[qpn]
            if _pct(rng, 0.007):
                key = rng.choice([0xDEAD0000 + qpn, self.lkey[self.qpns[(self.qpns.index(qpn)
                                                                      + 1) % len(self.qpns)]],
                                  self.rkey[qpn]])
            elif _pct(rng, 0.005):
                addr = base + RA_SIZE - ln + 1 + rng.randrange(8)      # past the MR
            sges.append((addr, ln, key))
        wr_id = rng.randrange(1 << 64)
        await self.dev.post_recv(qp, wr_id, sges)
        self.model.rq_db(qpn, qp.rq_producer)

    # ---- messages ----------------------------------------------------------------------------
    def _length(self, pmtu):
        rng = self.rng
        r = rng.random()
        if r < 0.1:
            return 0
        if r < 0.4:
            return rng.randrange(1, 65)
        if r < 0.55:
            return pmtu * rng.randrange(1, 5)
        return rng.randrange(1, 4 * pmtu + 1)

    def new_message(self, qpn):
        """Append one random message's packets to the QP's requester."""
        rng = self.rng
        r = self.req[qpn]
        pmtu = r.pmtu
        pd = self.qps[qpn].pd
        kind = rng.choices(["send", "send_imm", "send_inv", "write", "write_imm", "bogus"],
                           [60, 30, 20, 60, 30, 1])[0]
        if kind == "bogus":          # a requester bug: opcode-sequence or length error (0x61)
            how = rng.randrange(5)
            if how == 0:
                r.add(Op.SEND_MIDDLE, rng.randbytes(pmtu), 1)
            elif how == 1:
                r.add(Op.RDMA_WRITE_LAST, rng.randbytes(10), 1)
            elif how == 2:
                r.add(Op.SEND_FIRST, rng.randbytes(pmtu), 0)
                r.add(Op.SEND_ONLY, rng.randbytes(8), 1)
            elif how == 3:
                r.add(Op.SEND_ONLY, rng.randbytes(pmtu + 4), 1)
            else:
                r.add(Op.SEND_FIRST, rng.randbytes(pmtu - 4), 1)
            return
        n = self._length(pmtu)
        data = rng.randbytes(n)
        npk = max(1, -(-n // pmtu))
        chunks = [data[k * pmtu:(k + 1) * pmtu] for k in range(npk)]
        imm = rng.randrange(1 << 32)
        if kind == "send_inv" and not any(self.model.keys.slots[s].valid for s in self.fr) \
                and not _pct(rng, 0.1):
            kind = "send_imm"
        if kind.startswith("send"):
            if kind == "send_inv":
                valid = [s for s, f in self.fr.items() if self.model.keys.slots[s].valid]
                if valid and not _pct(rng, 0.03):
                    ieth = self.model.keys.slots[rng.choice(valid)].key
                else:
                    ieth = rng.choice([self.lkey[qpn], 0xBAD00000 + rng.randrange(256)]
                                      + [f["key"] + (f["gen"] & 0xFF) for f in self.fr.values()])
            last = {"send": (Op.SEND_LAST, Op.SEND_ONLY, {}),
                    "send_imm": (Op.SEND_LAST_WITH_IMMEDIATE, Op.SEND_ONLY_WITH_IMMEDIATE,
                                 {"imm": imm}),
                    "send_inv": (Op.SEND_LAST_WITH_INVALIDATE, Op.SEND_ONLY_WITH_INVALIDATE,
                                 {"ieth": ieth if kind == "send_inv" else 0})}[kind]
            if npk == 1:
                r.add(last[1], chunks[0], int(not _pct(rng, 0.1)), se=rng.randrange(2),
                      **last[2])
                return
            r.add(Op.SEND_FIRST, chunks[0], int(_pct(rng, 0.1)))
            for c in chunks[1:-1]:
                r.add(Op.SEND_MIDDLE, c, int(_pct(rng, 0.1)))
            r.add(last[0], chunks[-1], int(not _pct(rng, 0.1)), se=rng.randrange(2), **last[2])
            return
        # RDMA WRITE: own rkey MR, a fast-reg MR of the QP's PD, or something bad
        frs = [s for s, f in self.fr.items() if f["pd"] == pd
               and (self.model.keys.slots[s].valid or _pct(rng, 0.05))]
        if frs and _pct(rng, 0.25):
            s = rng.choice(frs)
            key, lo, size = self.model.keys.slots[s].key, self.fr[s]["base"], FR_SIZE
        else:
            key, lo, size = self.rkey[qpn], self.wa[qpn] + IOVA_OFF, WA_SIZE
        va = lo + rng.randrange(size - n + 1)
        x = rng.random()
        if x < 0.008:
            key = rng.randrange(1 << 32)
        elif x < 0.016:
            va = lo + size - n + 1 + rng.randrange(16)
        elif x < 0.02:
            key = self.rkey[self.qpns[(self.qpns.index(qpn) + 1) % len(self.qpns)]]
        reth = {"va": va, "rkey": key, "dmalen": n}
        wi = kind == "write_imm"
        if npk == 1:
            r.add(Op.RDMA_WRITE_ONLY_WITH_IMMEDIATE if wi else Op.RDMA_WRITE_ONLY, chunks[0],
                  int(not _pct(rng, 0.1)), reth=reth, imm=imm)
            return
        r.add(Op.RDMA_WRITE_FIRST, chunks[0], int(_pct(rng, 0.1)), reth=reth)
        for c in chunks[1:-1]:
            r.add(Op.RDMA_WRITE_MIDDLE, c, int(_pct(rng, 0.1)))
        r.add(Op.RDMA_WRITE_LAST_WITH_IMMEDIATE if wi else Op.RDMA_WRITE_LAST, chunks[-1],
              int(not _pct(rng, 0.1)), imm=imm)

    def corrupt(self, pkt, qpn):
        """(frame, tuser) of a damaged copy of ``pkt``."""
        rng = self.rng
        f = bytearray(pkt.frame(qpn))
        how = rng.randrange(11)
        if how == 0:
            return bytes(f), 1                                  # MAC says bad
        if how == 1:
            k = rng.randrange(54, len(f) - 4 if len(f) > 62 else len(f))
            f[k] ^= 1 << rng.randrange(8)                       # ICRC (or trailing pad)
        elif how == 2:
            f[18] ^= 0x40                                       # IPv4 id: header checksum
        elif how == 3:
            f[5] ^= 0x10                                        # destination MAC
        elif how == 4:
            f[36:38] = b"\x12\xb8"                              # UDP port 4792
        elif how == 5:
            return pkt.frame(qpn, pkey=0x1234), 0
        elif how == 6:
            return pkt.frame(qpn, tver=1), 0
        elif how == 7:
            return bytes(f[:len(f) - rng.randrange(1, 5)]), 0    # truncated
        elif how == 8:
            return pkt.frame(qpn, src_ip=REMOTE_IP + 7), 0      # not the QP's remote
        elif how == 9:
            return pkt.frame(rng.choice([0, 1, self.num_qp - 1, 0x800 + qpn])), 0
        else:
            f[-1] ^= 0x80                                       # last byte
        return bytes(f), 0

    # ---- one round ---------------------------------------------------------------------------
    async def round(self, budget, stats):
        rng, model = self.rng, self.model
        # software work while the core is quiet
        self.phase = "software"
        for qpn in self.qpns:
            st = model.psn.qps[qpn].state
            if st == QpState.ERROR and not _pct(rng, 0.25):
                await self.connect(qpn)
                stats["resets"] += 1
        for slot in self.fr:
            if not model.keys.slots[slot].valid:
                await self.reg_fr(slot)
        for qpn in self.qpns:
            x, q = model.qx[qpn], model.psn.qps[qpn]
            room = (1 << RQ_LOG) - ((q.rq_prod - x.cnext) & 0xFFFF)
            n = 0 if _pct(rng, 0.1) else max(0, room - rng.randrange(4))
            for _ in range(n):
                await self.post_recv(qpn)
        prng = random.Random(rng.randrange(1 << 30))     # used while the simulation runs
        self.src.set_pause_generator(None if _pct(rng, 0.7) else
                                     iter(lambda: prng.random() < 0.2, None))
        if knob("RESP_RANDOM_TX_BACKPRESSURE") and _pct(rng, 0.3):
            self.sink.set_pause_generator(iter(lambda: prng.random() < 0.5, None))
        else:
            self.sink.set_pause_generator(None)
        for s in (self.src, self.sink):
            if s._pause_generator is None:
                s.pause = False          # a killed generator leaves its last value behind
        # the burst
        self.phase = "generate"
        frames = []
        f0 = len(model.frames)
        active = list(self.qpns)
        for qpn in self.qpns:
            self.req[qpn].go_back(model.psn.qps[qpn].epsn)
        while active:
            qpn = rng.choice(active)
            r = self.req[qpn]
            if r.nxt >= len(r.pkts):
                if budget <= 0:
                    active.remove(qpn)
                    continue
                self.new_message(qpn)
                budget -= 1
                stats["messages"] += 1
            pkt = r.pkts[r.nxt]
            x = rng.random()
            emit = []
            if x < 0.03:                                   # lost
                r.nxt += 1
                stats["lost"] += 1
            elif x < 0.06 and r.nxt > 0:                   # an old one again
                emit.append((r.pkts[rng.randrange(max(0, r.nxt - 4), r.nxt)].frame(qpn), 0))
                stats["dup"] += 1
            elif x < 0.09 and r.nxt + 1 < len(r.pkts):     # swapped with the next
                emit += [(r.pkts[r.nxt + 1].frame(qpn), 0), (pkt.frame(qpn), 0)]
                r.nxt += 2
                stats["reorder"] += 1
            elif x < 0.13:                                 # damaged (and maybe resent)
                emit.append(self.corrupt(pkt, qpn))
                stats["corrupt"] += 1
                if _pct(rng, 0.5):
                    emit.append((pkt.frame(qpn), 0))
                r.nxt += 1
            else:
                emit.append((pkt.frame(qpn), 0))
                r.nxt += 1
            resp = []
            for f, tuser in emit:
                out = model.frame(f, tuser)
                frames.append((f, tuser))
                resp += [fr for fr in (out.frames if out else []) if fr.qpn == qpn]
                if model.fatal_late:
                    break
            q = model.psn.qps[qpn]
            if model.fatal_late:
                active.remove(qpn)
                continue
            if any(fr.syndrome & 0xE0 == 0x20 for fr in resp) and _pct(rng, 0.6):
                active.remove(qpn)                          # waits for its RNR timer
            elif any(fr.syndrome == 0x60 for fr in resp) and _pct(rng, 0.6):
                r.go_back(q.epsn)                           # NAK: resend from the ePSN
            elif q.state == QpState.ERROR and _pct(rng, 0.5):
                active.remove(qpn)
        stats["frames"] += len(frames)
        self.phase = f"burst of {len(frames)} frames"
        for f, tuser in frames:
            self.src.send_nowait(AxiStreamFrame(f, tuser=tuser))
        cycles = 20000 + 8 * sum(len(f) for f, _ in frames) // self.lanes
        await with_timeout(self.src.wait(), 10 * cycles, "ns")
        self.phase = "settle"
        await self.settle(model.frames[f0:])
        self.phase = "check"
        await self.check(model.frames[f0:], stats)

    async def settle(self, expected, limit=30000):
        """Wait until every frame is counted, every response and CQE is out, then some more."""
        model = self.model
        waited = 0
        while True:
            got = self._decoded(self.tx[self.tx_seen:])
            c0 = await self.regs.counter(0)
            cq_ok = all(self._owned(c) >= len(model.cqes[c]) - self.cqs[c].done
                        for c in self.cqs)
            if c0 == model.counters[0] and cq_ok and not _qp_diff(expected, got):
                break
            await ClockCycles(self.dut.clk, 200)
            waited += 200
            assert waited < limit, (
                f"core did not settle: counter0 {c0}/{model.counters[0]}, "
                + _qp_diff(expected, got) +
                f"frames got {_fmt(got[-40:])}\n expected {_fmt(expected[-40:])}\n "
                + ", ".join(f"cq{c}: {self._owned(c)}/{len(model.cqes[c]) - self.cqs[c].done}"
                            for c in self.cqs))
        await ClockCycles(self.dut.clk, 400)

    def _owned(self, cqn):
        cq = self.cqs[cqn]
        n, cons, phase = 0, cq.consumer, cq.phase
        while n < cq.entries:
            raw = self.mem.read(cq.base + 32 * (cons % cq.entries), 32)
            if raw[31] & 1 != phase:
                break
            n += 1
            cons = (cons + 1) & 0xFFFF
            if cons % cq.entries == 0:
                phase ^= 1
        return n

    def _decoded(self, frames):
        out = []
        for raw in frames:
            d = decode_frame(raw)
            assert d["icrc_ok"], "transmitted ICRC must be correct"
            assert d["eth"]["dst"] == REMOTE_MAC and d["eth"]["src"] == LOCAL_MAC
            assert d["ipv4"]["src"] == LOCAL_IP and d["ipv4"]["dst"] == REMOTE_IP
            assert d["ipv4"]["ttl"] == 64 and d["ipv4"]["flags"] == 2
            assert d["bth"]["opcode"] == Op.ACKNOWLEDGE and d["bth"]["pkey"] == 0xFFFF
            qpn = d["bth"]["dqpn"] - 0x100
            assert qpn in self.qps, hex(d["bth"]["dqpn"])
            assert d["udp"]["sport"] == 0xC000 + qpn and d["udp"]["dport"] == 4791
            assert d["udp"]["checksum"] == 0
            out.append(Frame(qpn, d["bth"]["psn"], d["aeth"]["syndrome"], d["aeth"]["msn"]))
        return out

    async def check(self, expected, stats):
        model = self.model
        # ACK/NAKs
        got = self._decoded(self.tx[self.tx_seen:])
        assert not _qp_diff(expected, got), _qp_diff(expected, got)
        self.tx_seen = len(self.tx)
        stats["acks"] += len(got)
        # CQEs: per QP in model order; the CQ ring slot by slot
        for c, cq in self.cqs.items():
            want = model.cqes[c][cq.done:]
            cqes = await self.dev.poll_cq(cq)
            model.cq_db(c, cq.consumer)
            assert len(cqes) == len(want), (c, len(cqes), len(want), cqes, want)
            for qpn in {w.qpn for w in want} | {g.qpn for g in cqes}:
                g = [(e.wr_id, e.byte_len, e.imm_or_rkey, e.qpn, e.status, e.opcode, e.flags)
                     for e in cqes if e.qpn == qpn]
                w = [(e.wr_id, e.byte_len, e.imm_or_rkey, e.qpn, e.status, e.opcode, e.flags)
                     for e in want if e.qpn == qpn]
                assert g == w, f"CQ {c} QP {qpn}:\n got {g}\n exp {w}"
            cq.done += len(cqes)
            stats["cqes"] += len(cqes)
            stats["cqe_ok"] += sum(1 for e in cqes if e.status == 0)
            assert self._owned(c) == 0, f"CQ {c}: an extra CQE"
        # host memory: every byte of every area and its guards
        for a, b in self.areas:
            hw, exp = bytes(self.mem.read(a, b - a)), model.mem.read(a, b - a)
            if hw != exp:
                k = next(i for i in range(b - a) if hw[i] != exp[i])
                raise AssertionError(f"host memory differs at {a + k:#x} (area {a:#x}..{b:#x}):"
                                     f" got {hw[k:k + 16].hex()} expected {exp[k:k + 16].hex()}")
        rings = [(cq.base, cq.base + 32 * cq.entries) for cq in self.cqs.values()]
        for addr, data, _ in self.mem.writes:
            assert any(s <= addr and addr + len(data) <= e for s, e in self.areas + rings), \
                f"write outside the buffers: {addr:#x} +{len(data)}"
        self.mem.writes.clear()
        self.mem.check()
        # QP state
        for qpn in self.qpns:
            q = await self.dev.query_qp(self.qps[qpn])
            m = model.psn.query_qp(qpn)
            assert (q["state"], q["epsn"], q["msn"], q["rq_ci"]) == (m[0], m[1], m[3], m[4]), \
                (qpn, q, m)
        # events (the queue may overflow: then the lost bit is set)
        ev = await self.dev.events()
        want = model.events[self.ev_seen:]
        self.ev_seen = len(model.events)
        got_ev = sorted((e.type, e.number) for e in ev)
        if any(e.lost for e in ev):
            assert set(got_ev) <= set(want), (got_ev, want)
        else:
            assert got_ev == sorted(want), (got_ev, want)
        # counters
        c = await self.regs.counters()
        for k in (0, 1, 2, 3, 4, 5, 6, 7, 14):
            assert c[k] == model.counters[k], (k, c, model.counters)
        # counters 8-11 count the responses sent (the header builder counts them), so they are
        # compared with the frames received: a waiting NAK replaced by a newer one of its QP
        # (``table_match``) is never sent and never counted
        kinds = {8: lambda s: s == 0x60, 9: lambda s: 0x20 <= s < 0x40,
                 10: lambda s: 0x61 <= s < 0x80, 11: lambda s: s == 0x1F}
        for k, kind in kinds.items():
            key = f"sent{k}"
            assert c[k] == stats.get(key, 0) + sum(1 for f in got if kind(f.syndrome)), (k, c)
            stats[key] = c[k]
        assert c[8] + c[9] + c[10] <= model.counters[8] + model.counters[9] + model.counters[10]
        assert c[12] == stats["acks"], (c[12], stats["acks"])
        assert c[13] == 0 and c[15] == 0, c
        assert c[0] == sum(c[1:7]) + c[15] + model.accepted, (c, model.accepted)


async def run_random(dut):
    tb = Bench(dut)
    await tb.start()
    for cq in tb.cqs.values():
        cq.done = 0
    tb.ev_seen = 0
    total = knob("RESP_RANDOM_MESSAGES")
    per = knob("RESP_RANDOM_ROUND_MESSAGES")
    stats = dict(messages=0, frames=0, lost=0, dup=0, reorder=0, corrupt=0, resets=0, acks=0,
                 cqes=0, cqe_ok=0, pos_acks=0, rounds=0)
    t0 = time.time()
    while stats["messages"] < total:
        await tb.round(min(per, total - stats["messages"]), stats)
        stats["rounds"] += 1
        if stats["rounds"] % 10 == 1:
            cocotb.log.warning("resp_random round %d: %s", stats["rounds"], stats)
    dt = time.time() - t0
    stats["seconds"] = round(dt, 1)
    stats["msgs_per_s"] = round(stats["messages"] / dt, 1)
    cocotb.log.warning("resp_random: %s counters %s", stats, tb.model.counters)
    out = knob("RESP_RANDOM_STATS_FILE")
    if out:
        with open(out, "a") as f:
            f.write(repr(stats) + "\n")
    # every kind of trouble happened
    assert stats["cqe_ok"] > 0 and stats["lost"] and stats["dup"] and stats["corrupt"]
    for k in (1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 14):
        assert tb.model.counters[k] > 0 or total < 200, (k, tb.model.counters)


@cocotb.test()
async def random_traffic(dut):
    """Random traffic on several QPs against the model (see the module docstring)."""
    await run_random(dut)


@cocotb.test()
async def classj_without_ackreq(dut):
    """Minimal reproducer: SEND_ONLY_WITH_INVALIDATE with AckReq = 0 naming an ordinary MR.
    The invalidation is refused (normative choice 3): REM_INV_REQ_ERR, the QP to ERROR, and a
    positive ACK *only if AckReq* — here nothing may be sent (roce-reference.md §3.10/§3.11)."""
    tb = Bench(dut, qps=1)
    await tb.start()
    qpn = tb.qpns[0]
    await tb.post_recv(qpn)
    psn = tb.qps[qpn].rq_psn
    f = build_frame(Op.SEND_ONLY_WITH_INVALIDATE, b"x" * 8, psn=psn, dqpn=qpn, ackreq=0,
                    ieth=tb.lkey[qpn])
    tb.model.frame(f)
    assert tb.model.frames == [] and tb.model.cqes[0][0].status == 9
    await tb.src.send(AxiStreamFrame(f))
    await tb.src.wait()
    await ClockCycles(dut.clk, 2000)
    assert tb.tx == [], f"a refused invalidate without AckReq was answered: {tb._decoded(tb.tx)}"
