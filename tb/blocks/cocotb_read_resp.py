"""cocotb bench for the READ response engine with the TX arbiter and frame builder
(tb/blocks/test_read_resp.py builds the harness).

READ jobs, ACK/NAK descriptors and request frames (with their gather chunks, on the arbiter's
requester side) are queued; the payload comes from the hostile host memory of sim/hostmem.py.
Every frame taken from ``tx`` (with back-pressure) is decoded with scapy (Ethernet/IPv4/UDP/BTH;
the AETH and RETH read from the bytes after the BTH) and compared with the frames the Python
model below expects: READ responses per interface.md §7 (opcode, PSN, AETH syndrome and MSN,
payload bytes from the bench's copy of host memory), the ACK/NAKs and requests as offered. The
IPv4 checksum and the ICRC are recomputed by scapy and by sim/packets.py's ICRC model.
"""
import logging
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamSink
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from rnic import wire
from rnic.control.qp_args import qp_arg_layout
from rnic.ifaces import Counter, read_job_layout
from rnic.tx.build import chunk_layout, pkt_layout, tx_hdr_layout
from sim.hostmem import AxiResp, HostMem
from sim.knobs import knob
from sim.packets import icrc
from sim.wrap import unpack
from tb.blocks.cocotb_axi_master import Source

W = knob("READ_RESP_WIDTH")
LMAC, LIP = 0x020000000001, 0x0A000001
BUS, MRLEN = 0x0010_0000, 0x10000
FIRST, MIDDLE, LAST, ONLY = 0x0D, 0x0E, 0x0F, 0x10
READ_OPS = (FIRST, MIDDLE, LAST, ONLY)
SEND_ONLY, WRITE_ONLY = 0x04, 0x0A


def path(qpn):
    """The QP's path-table row (SET_QP's ARG1, ARG11..14)."""
    return dict(dest_qpn=0x100 + qpn, rmac=0x020000000002 + qpn, rip=0x0A000002,
                sport=0xC000 + qpn)


def read_frames(job, mem):
    """The model: the frames of a READ job (interface.md §7), each a dict of the BTH opcode and
    PSN, the AETH (syndrome, MSN) or None, and the payload bytes from ``mem`` (bus address 0 =
    ``mem[0]``)."""
    pm = 256 << (job["pmtu"] - 1)
    n = max(1, -(-job["len"] // pm))
    out = []
    for i in range(n):
        op = ONLY if n == 1 else FIRST if i == 0 else LAST if i == n - 1 else MIDDLE
        plen = pm if i < n - 1 else job["len"] - (n - 1) * pm
        a = job["addr"] + i * pm - BUS
        out.append(dict(kind="read", qpn=job["qpn"], opcode=op, psn=(job["psn"] + i) & 0xFFFFFF,
                        se=0, ackreq=0, aeth=None if op == MIDDLE else (0x1F, job["msn"]),
                        reth=None, payload=mem[a:a + plen]))
    return out


class TB:
    def __init__(self, dut, seed=1, hostile=True):
        self.dut = dut
        self.rng = random.Random(seed)
        self.mem = HostMem(dut, "m_axi", dut.clk, dut.rst, seed=seed + 2,
                           max_latency=12 if hostile else 4, backpressure=hostile,
                           interleave=hostile)
        self.tx = AxiStreamSink(AxiStreamBus.from_prefix(dut, "tx"), dut.clk, dut.rst)
        self.tx.log.setLevel(logging.WARNING)
        prng = random.Random(seed + 10)

        def pause():
            while True:
                yield prng.random() < 0.3
        if hostile:
            self.tx.set_pause_generator(pause())
        self.job = Source(dut, "job", read_job_layout, dut.clk)
        self.ack = Source(dut, "ack", tx_hdr_layout, dut.clk)
        self.req = Source(dut, "req", pkt_layout, dut.clk, rng=random.Random(seed + 3),
                          idle=0.2 if hostile else 0)
        self.req_chunk = Source(dut, "req_chunk", chunk_layout, dut.clk,
                                rng=random.Random(seed + 4), idle=0.2 if hostile else 0)
        self.qp_arg = Source(dut, "qp_arg", qp_arg_layout, dut.clk)
        self.src = self.rng.randbytes(MRLEN)
        self.mem.write(BUS, self.src)
        self.frames = []           # bytes of every frame taken from tx, in order
        self.expected = []         # (put index, frame dict): everything offered, by kind
        self.puts = 0              # things put so far (jobs and ACK/NAKs), for the ordering rule
        self.faults = []           # QPNs the builder reported
        self.rr = []               # ReadResp's descriptors taken: (qpn, psn, opcode)
        self.stat = [0] * 16
        self.gap_errors = 0
        self.starts = []           # cycle of each frame's first beat on tx
        self.cycle = 0
        for q in range(2, 10):
            for arg, word in ((1, path(q)["dest_qpn"]), (11, path(q)["rmac"] & 0xFFFFFFFF),
                              (12, path(q)["rmac"] >> 32), (13, path(q)["rip"]),
                              (14, path(q)["sport"])):
                self.qp_arg.put(dict(qpn=q, arg=arg, data=word, all=0))
        cocotb.start_soon(self._collect())
        cocotb.start_soon(self._watch())

    async def _collect(self):
        while True:
            f = await self.tx.recv()
            self.frames.append(bytes(f.tdata))

    async def _watch(self):
        """Per cycle: counter strobes, faults, ReadResp's descriptors, tvalid gaps."""
        d, in_frame = self.dut, False
        while True:
            await RisingEdge(d.clk)
            await ReadOnly()
            self.cycle += 1
            st = int(d.stat.value)
            for k in range(16):
                self.stat[k] += st >> k & 1
            if int(d.fault_valid.value):
                self.faults.append(int(d.fault_qpn.value))
            if int(d.rr_taken.value):
                f = unpack(pkt_layout, int(d.rr_pkt.value))
                self.rr.append((f["qpn"], f["psn"], f["opcode"]))
            v, r = int(d.tx_tvalid.value), int(d.tx_tready.value)
            if in_frame and not v:
                self.gap_errors += 1
            if v and r:
                if not in_frame:
                    self.starts.append(self.cycle)
                in_frame = not int(d.tx_tlast.value)

    # ---- offering -------------------------------------------------------------------------------
    async def phase(self):
        """Align to a rising edge: what is put now is offered by every Source at the same
        falling edge."""
        await RisingEdge(self.dut.clk)

    def put_job(self, qpn, length, pmtu, addr, psn=None, msn=None):
        job = dict(qpn=qpn, psn=self.rng.getrandbits(24) if psn is None else psn,
                   msn=self.rng.getrandbits(24) if msn is None else msn, addr=addr, len=length,
                   pmtu=pmtu)
        self.job.put(job)
        self.puts += 1
        self.expected.append((self.puts, "job", job, read_frames(job, self.src)))
        return job

    def put_ack(self, qpn, syndrome=0x1F):
        a = dict(qpn=qpn, opcode=0x11, se=0, ackreq=0, psn=self.rng.getrandbits(24), aeth=1,
                 syndrome=syndrome, msn=self.rng.getrandbits(24))
        self.ack.put(a)
        self.puts += 1
        self.expected.append((self.puts, "ack", a, [dict(kind="ack", qpn=qpn, opcode=0x11,
                                                         psn=a["psn"], se=0, ackreq=0,
                                                         aeth=(syndrome, a["msn"]), reth=None,
                                                         payload=b"")]))

    def put_req(self, qpn, opcode, length, nchunks, at=None):
        """A request frame on the arbiter's requester side, its payload in ``nchunks`` chunks
        at unaligned places of the bench's memory (or in one at bus address ``at``)."""
        chunks, payload = [], b""
        cuts = sorted(self.rng.sample(range(1, length), nchunks - 1)) if nchunks > 1 else []
        for a, b in zip([0] + cuts, cuts + [length]):
            off = self.rng.randrange(MRLEN - (b - a)) if at is None else at - BUS
            chunks.append(dict(addr=BUS + off, len=b - a))
            payload += self.src[off:off + b - a]
        reth = (dict(va=self.rng.getrandbits(64), rkey=self.rng.getrandbits(32), dmalen=length)
                if opcode == WRITE_ONLY else None)
        d = dict(opcode=opcode, se=self.rng.getrandbits(1), ackreq=self.rng.getrandbits(1),
                 psn=self.rng.getrandbits(24), paylen=length, qpn=qpn, aeth=0, syndrome=0,
                 msn=0, imm=0, **(reth or dict(va=0, rkey=0, dmalen=0)))
        self.req.put(d)
        for c in chunks:
            self.req_chunk.put(c)
        self.expected.append((None, "req", d, [dict(kind="req", qpn=qpn, opcode=opcode,
                                                    psn=d["psn"], se=d["se"],
                                                    ackreq=d["ackreq"], aeth=None, reth=reth,
                                                    payload=payload)]))

    # ---- checking -------------------------------------------------------------------------------
    def check_frame(self, p, frame, where):
        """``frame`` is the model frame ``p``: every header field, the payload, pad, checksums."""
        c = path(p["qpn"])
        assert len(frame) >= 60, where
        e = Ether(frame)
        ip, udp, bth = e[IP], e[UDP], e[BTH]
        assert e.dst == ":".join(f"{b:02x}" for b in c["rmac"].to_bytes(6, "big")), where
        assert e.src == "02:00:00:00:00:01" and e.type == 0x0800, where
        assert (ip.src, ip.dst) == ("10.0.0.1", "10.0.0.2"), where
        assert ip.ttl == 64 and ip.flags == 2 and ip.ihl == 5 and ip.proto == 17, where
        assert ip.tos == 0 and ip.id == 0 and ip.frag == 0, where
        trimmed = frame[:14 + ip.len]
        assert frame[14 + ip.len:] == bytes(len(frame) - 14 - ip.len), f"{where}: Ethernet pad"
        chk = Ether(trimmed)
        del chk[IP].chksum
        chk[BTH].icrc = None
        assert bytes(chk) == trimmed, f"{where}: IP checksum or ICRC differs from scapy"
        assert icrc(trimmed[14:-4]) == trimmed[-4:], f"{where}: ICRC differs from the model"
        assert udp.sport == c["sport"] and udp.dport == 4791 and udp.chksum == 0, where
        assert udp.len == ip.len - 20, where
        plen = len(p["payload"])
        got = dict(opcode=bth.opcode, psn=bth.psn, se=bth.solicited, ackreq=bth.ackreq,
                   padcnt=bth.padcount)
        exp = dict(opcode=p["opcode"], psn=p["psn"], se=p["se"], ackreq=p["ackreq"],
                   padcnt=-plen & 3)
        assert got == exp, f"{where}: {got} != {exp}"
        assert bth.pkey == 0xFFFF and bth.dqpn == c["dest_qpn"] and bth.version == 0, where
        assert (bth.fecn, bth.becn, bth.migreq, bth.resv6, bth.resv7) == (0, 0, 0, 0, 0), where
        rest = trimmed[54:-4]
        if p["reth"] is not None:
            assert wire.RETH.unpack(rest) == p["reth"], where
            rest = rest[16:]
        if p["aeth"] is not None:
            a = AETH(rest[:4])
            assert (a.syndrome, a.msn) == p["aeth"], f"{where}: AETH {a.syndrome:#x} {a.msn:#x}"
            rest = rest[4:]
        assert len(rest) == plen + (-plen & 3), f"{where}: {len(rest)} bytes after the headers"
        assert rest[:plen] == p["payload"], f"{where}: payload"
        assert rest[plen:] == bytes(-plen & 3), f"{where}: pad"

    async def wait_frames(self, n, limit=200000):
        for _ in range(limit):
            if len(self.frames) >= n:
                break
            await RisingEdge(self.dut.clk)
        await ClockCycles(self.dut.clk, 300)          # nothing more follows
        assert len(self.frames) == n, f"{len(self.frames)} frames, {n} expected"

    def check_all(self, skip_qpns=()):
        """Every frame against the model: per kind in the order offered (READ responses in job
        order), each ACK/NAK after every frame of the jobs put before it; returns the wire
        position of each frame, by kind and index."""
        exp = {"read": [], "ack": [], "req": []}
        order = []
        for put, kind, item, frames in self.expected:
            for f in frames:
                if f["qpn"] in skip_qpns and kind == "job":
                    continue
                exp[f["kind"]].append(dict(f, put=put, job=id(item)))
        got = {"read": [], "ack": [], "req": []}
        for pos, fr in enumerate(self.frames):
            op = fr[42]
            kind = "ack" if op == 0x11 else "read" if op in READ_OPS else "req"
            k = len(got[kind])
            assert k < len(exp[kind]), f"frame {pos}: an extra {kind} frame"
            self.check_frame(exp[kind][k], fr, f"frame {pos} ({kind} {k})")
            got[kind].append(pos)
            order.append((kind, exp[kind][k]))
        for kind in exp:
            assert len(got[kind]) == len(exp[kind]), (kind, len(got[kind]), len(exp[kind]))
        # the ordering rule: an ACK/NAK never overtakes the responses of a job put before it
        last_of = {}
        for pos, (kind, f) in enumerate(order):
            if kind == "read":
                last_of[f["job"]] = (pos, f["put"])
        for pos, (kind, f) in enumerate(order):
            if kind == "ack":
                for jpos, jput in last_of.values():
                    if jput < f["put"]:
                        assert jpos < pos, f"ACK at frame {pos} overtook a READ ending at {jpos}"
        assert self.gap_errors == 0, "tvalid dropped inside a frame"
        n_ack = sum(1 for kind, f in order if kind == "ack" and f["aeth"][0] < 0x20)
        n_seq = sum(1 for kind, f in order if kind == "ack" and f["aeth"][0] == 0x60)
        assert self.stat[Counter.TX_FRAMES] == len(self.frames), self.stat
        assert self.stat[Counter.ACKS] == n_ack, (self.stat, n_ack)
        assert self.stat[Counter.SEQ_NAKS] == n_seq, (self.stat, n_seq)
        assert self.stat[Counter.RNR_NAKS] == self.stat[Counter.OTHER_NAKS] == 0, self.stat
        return order


async def start(dut, seed=1, hostile=True):
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    dut.rst.value = 1
    dut.local_mac.value = LMAC
    dut.local_ip.value = LIP
    await ClockCycles(dut.clk, 5)
    dut.rst.value = 0
    tb = TB(dut, seed, hostile)
    await ClockCycles(dut.clk, 60)       # the path table written
    return tb


def unaligned(tb, length):
    """A bus address in the bench's memory for ``length`` bytes, never 4- or W-aligned."""
    off = tb.rng.randrange(0, (MRLEN - length - 64) // 64) * 64 + tb.rng.choice((1, 3, 6, 13, 61))
    return BUS + off


@cocotb.test()
async def read_lengths(dut):
    tb = await start(dut)
    await tb.phase()
    tb.put_ack(9)                               # no job: leaves at once
    for _ in range(3):
        await RisingEdge(dut.clk)
    k = 0
    for code in (1, 3):
        pm = 256 << (code - 1)
        for length in (0, 1, 3, pm - 1, pm, pm + 1, 3 * pm, 3 * pm + 5):
            await tb.phase()
            tb.put_job(2 + k % 4, length, code, unaligned(tb, length),
                       psn=0xFFFFFE if k == 5 else None)
            if k % 3 == 1:
                tb.put_ack(2 + k % 4, 0x60 if k % 6 == 1 else 0x1F)   # behind the job
            k += 1
            if k % 5 == 0:
                # wait until the job is taken and then offer an ACK: it waits for the job's
                # last response
                while tb.job.busy:
                    await RisingEdge(dut.clk)
                await tb.phase()
                tb.put_ack(3)
    await tb.phase()
    tb.put_job(5, 2 * 4096 + 5, 5, unaligned(tb, 2 * 4096 + 5))
    tb.put_ack(5)
    n = sum(len(f) for _, _, _, f in tb.expected)
    await tb.wait_frames(n)
    order = tb.check_all()
    assert order[0][0] == "ack", "the first ACK waited"
    assert not tb.faults
    dut._log.info("W=%d: %d frames checked", W, len(tb.frames))
    tb.mem.check()


@cocotb.test()
async def read_with_requests(dut):
    tb = await start(dut, seed=2)
    await tb.phase()
    for k in range(4):
        code = (1, 2, 3)[k % 3]
        pm = 256 << (code - 1)
        length = (3 * pm + 7, 2 * pm, pm + 1)[k % 3]
        tb.put_job(2 + k % 3, length, code, unaligned(tb, length))
        for j in range(3):
            tb.put_req(6 + j % 2, (SEND_ONLY, WRITE_ONLY)[j % 2], tb.rng.randint(1, 300),
                       1 + (j + k) % 2)
    tb.put_ack(4)
    n = sum(len(f) for _, _, _, f in tb.expected)
    await tb.wait_frames(n)
    order = tb.check_all()
    # a request frame went between two responses of one READ
    inside = 0
    for a, b, c in zip(order, order[1:], order[2:]):
        if a[0] == c[0] == "read" and b[0] == "req" and a[1]["job"] == c[1]["job"]:
            inside += 1
    assert inside >= 3, f"requests and READ responses did not interleave ({inside})"
    assert not tb.faults
    tb.mem.check()


@cocotb.test()
async def read_fault(dut):
    tb = await start(dut, seed=3)
    length = 32 * 256
    bad = unaligned(tb, length)
    tb.mem.add_fault(bad, length, "r", AxiResp.SLVERR)
    await tb.phase()
    tb.put_job(6, length, 1, bad, psn=0x1000)
    tb.put_ack(6)                              # decided after the READ: follows its abort
    good = unaligned(tb, 700)
    while bad - 700 <= good < bad + length:
        good = unaligned(tb, 700)
    tb.put_job(7, 700, 1, good)
    n = 1 + 3                                  # the ACK and the next READ's three frames
    await tb.wait_frames(n, limit=20000)
    tb.check_all(skip_qpns=(6,))
    assert tb.faults and set(tb.faults) == {6}, tb.faults
    sent6 = [p for p in tb.rr if p[0] == 6 and p[2] in READ_OPS]
    assert 1 <= len(sent6) < 32, f"the faulted READ was not aborted: {len(sent6)} frames offered"
    assert [p[1] for p in sent6] == [0x1000 + i for i in range(len(sent6))]
    # every frame of the job the builder took was dropped and reported
    assert len(tb.faults) == len(sent6), (tb.faults, sent6)
    dut._log.info("fault: %d of 32 frames offered before the abort", len(sent6))


@cocotb.test()
async def read_rate(dut):
    """A READ's responses leave as fast as the same frames offered as requests: the engine adds
    no bubble the builder does not need (no back-pressure, short host latency)."""
    tb = await start(dut, seed=4, hostile=False)
    n, pm = 16, 256
    base = BUS + 0x1000
    await tb.phase()
    for i in range(n):                          # requests first: MIDDLE-sized SEND frames
        tb.put_req(2, 0x01, pm, 1, at=base + i * pm)
    await tb.wait_frames(n, limit=20000)
    req_starts = tb.starts[:]
    await tb.phase()
    tb.put_job(2, n * pm, 1, base)
    await tb.wait_frames(2 * n, limit=20000)
    tb.check_all()
    rd_starts = tb.starts[n:]
    # cycles per frame in steady state (the first few frames fill the pipeline)
    per_req = (req_starts[-1] - req_starts[4]) / (n - 5)
    per_rd = (rd_starts[-1] - rd_starts[4]) / (n - 5)
    dut._log.info("W=%d PMTU %d: %.2f cycles per request frame, %.2f per READ response",
                  W, pm, per_req, per_rd)
    # (a READ response's header has 4 bytes more: at most one word more per frame)
    assert per_rd <= per_req + 1.01, (per_req, per_rd)
