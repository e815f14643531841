"""RDMA READ between two `rnic` cores (interface.md §7), through the contract only.

A posts READs (``Device.post_read``) of B's memory into its own buffers; B answers as responder.
The two-core harness of ``tb/system/cocotb_two_rnic.py`` (:class:`Pair`, the wire, host memories
with guard regions) is reused. Checked against independent references: the bytes placed in A's
memory equal B's source bytes (and nothing around them moves), A's completions (opcode 2, byte
count, in SQ order), every READ request frame against the requester model
(``sim.models.requester.segment``: opcode 0x0C, PSN, RETH), every READ response frame against a
model of §7 (opcode by position, PSN, AETH on FIRST/LAST/ONLY, PMTU bytes but the last, the bytes
of B's memory), and the pcap decoded by tshark with no error.
"""

import os
import random

import cocotb
from cocotb.triggers import ClockCycles

from rnic.opcodes import WcOpcode, WcStatus
from sim.driver.verbs import Access, SendOp
from sim.models.responder import read_responses
from sim.packets import decode_frame

from .cocotb_two_rnic import Pair

RKEY = 0x0B00_0001
LKEY = 0x0A00_0001
ACCESS_B = Access.REMOTE_WRITE | Access.REMOTE_READ


class ReadPair(Pair):
    """A :class:`Pair` whose QPs allow REMOTE_READ, with a source region on B (one key) and a
    destination region on A (one key), and READs posted with the requester model."""

    async def setup(self, *, src_len=70_000, dst_len=140_000, ord=4, ird=4, access=ACCESS_B,
                    **attrs):
        await self.start(access=access, ord=ord, ird=ird, **attrs)
        self.src = self.buffer("b", src_len)
        await self.mr("b", 0, self.src, src_len, RKEY, access=ACCESS_B)
        self.src_data = bytes(self.rng.randrange(256) for _ in range(src_len))
        self.s["b"].dev.write(self.src, self.src_data)
        self.dst = self.buffer("a", dst_len)
        await self.mr("a", 0, self.dst, dst_len, LKEY, access=Access.LOCAL_WRITE)
        self.dst_len = dst_len
        self.reads = []                  # (qpn, first psn, remote offset, length) per READ
        self.dst_next = 0

    def alloc_dst(self, n):
        """``n`` bytes of A's destination region (a random gap before them, never reused)."""
        self.dst_next += self.rng.randrange(0, 40)
        addr = self.dst + self.dst_next
        self.dst_next += n
        assert self.dst_next <= self.dst_len
        return addr

    async def post_read(self, wr_id, roff, n, *, nsge=1, qpn=2):
        """A READ of ``n`` bytes at B's source offset ``roff`` into ``nsge`` pieces of A's
        region; returns its SGEs."""
        cut = self.rng.randrange(n + 1) if nsge == 2 else n
        sges = [(self.alloc_dst(cut), cut, LKEY)]
        if nsge == 2:
            sges.append((self.alloc_dst(n - cut), n - cut, LKEY))
        self.reads.append((qpn, self.sent_psn[("a", qpn)], roff, n))
        await self.post_send("a", qpn, wr_id, SendOp.RDMA_READ, sges, n,
                             remote_addr=self.src + roff, rkey=RKEY)
        return sges

    def placed(self, sges):
        return b"".join(self.s["a"].dev.read(a, n) for a, n, _ in sges)

    def check_responses(self):
        """Every READ response frame B sent is a correct §7 response (``read_responses``) of
        one of the READs posted: per QP, a run starts with FIRST or ONLY at a PSN where A sent
        a READ request (a READ sent again from its response k starts at k) and goes on at
        consecutive PSNs with MIDDLE and LAST as the READ's position says; payload = B's bytes
        at the READ's offset, AETH (syndrome ACK) on all but MIDDLE, pad count; every run
        ends. Returns (responses checked, runs that started inside a READ)."""
        where = {}                       # (qpn, psn) -> (opcode, offset, length, remote offset)
        for qpn, psn, roff, n in self.reads:
            for op, p, _, off, ln in read_responses(psn, n, self.pmtu):
                where[(qpn, p)] = (op, off, ln, roff)
        requested = set()                # (qpn, psn) of every READ request frame A sent
        run = {}                         # qpn -> PSN the open response run continues at
        count = resumed = 0
        for _, s, b in self.wire.frames:
            d = decode_frame(b)
            bth = d["bth"]
            op, psn, qpn = bth["opcode"], bth["psn"], bth["dqpn"]
            if s == "a" and op == 0x0C:
                requested.add((qpn, psn))
                continue
            if s != "b" or not 0x0D <= op <= 0x10:
                continue
            key = (qpn, psn)
            assert key in where, f"READ response on QP {qpn} at PSN {psn:#x} of no READ"
            wop, off, ln, roff = where[key]
            if op in (0x0D, 0x10):
                assert qpn not in run, \
                    f"QP {qpn}: {op:#x} at {psn:#x} inside a run at {run[qpn]:#x}"
                assert key in requested, f"QP {qpn}: a run at {psn:#x} with no READ request there"
                # (from response k of a READ sent again: FIRST, or ONLY at its last response)
                assert (op == 0x10) == (wop in (0x0F, 0x10)), (qpn, hex(psn), hex(op), hex(wop))
                resumed += off > 0
            else:
                assert run.get(qpn) == psn, (qpn, hex(psn), hex(op), run.get(qpn))
                assert op == wop, (qpn, hex(psn), hex(op), hex(wop))
            assert d["payload"] == self.src_data[roff + off:roff + off + ln], (qpn, hex(psn))
            assert ("aeth" in d) == (op != 0x0E), (qpn, hex(psn), hex(op))
            if "aeth" in d:
                assert d["aeth"]["syndrome"] == 0x1F, (qpn, hex(psn), d["aeth"])
            assert bth["padcnt"] == (-ln) & 3, (qpn, hex(psn), bth["padcnt"])
            if op in (0x0F, 0x10):
                run.pop(qpn, None)
            else:
                run[qpn] = (psn + 1) & 0xFFFFFF
            count += 1
        assert not run, f"response runs never finished: {run}"
        return count, resumed


async def _reads(dut, sizes, *, pmtu, mixed=False, nsge_choices=(1, 2), title,
                 limit=2_000_000):
    p = ReadPair(dut, pmtu=pmtu, seed=3)
    await p.setup()
    a, b = p.s["a"], p.s["b"]
    p.trace.section(title)
    jobs = []                            # (wr_id, kind, sges, bytes expected)
    roff = 0
    # for the mixed case: B's receive buffers and a WRITE target on B
    if mixed:
        rbuf = p.buffer("b", 4096)
        await p.mr("b", 1, rbuf, 4096, 0x0B00_0002, access=ACCESS_B | Access.LOCAL_WRITE)
        wsrc = p.buffer("a", 4096)
        await p.mr("a", 1, wsrc, 4096, 0x0A00_0002, access=Access.LOCAL_WRITE)
        wdata = bytes(p.rng.randrange(256) for _ in range(4096))
        a.dev.write(wsrc, wdata)
    nrecv = 0
    for i, n in enumerate(sizes):
        roff = p.rng.randrange(0, len(p.src_data) - n + 1)
        sges = await p.post_read(0x100 + i, roff, n, nsge=p.rng.choice(nsge_choices))
        jobs.append((0x100 + i, WcOpcode.RDMA_READ, sges, p.src_data[roff:roff + n]))
        if mixed:
            k = i % 2
            ln = p.rng.randrange(1, 3000)
            if k == 0:
                await b.dev.post_recv(p.qps[("b", 2)], 0x900 + i, [(rbuf, 4096, 0x0B00_0002)])
                nrecv += 1
                await p.post_send("a", 2, 0x200 + i, SendOp.SEND, [(wsrc, ln, 0x0A00_0002)],
                                  ln)
                jobs.append((0x200 + i, WcOpcode.SEND, None, None))
            else:
                await p.post_send("a", 2, 0x200 + i, SendOp.RDMA_WRITE,
                                  [(wsrc, ln, 0x0A00_0002)], ln, remote_addr=rbuf,
                                  rkey=0x0B00_0002)
                jobs.append((0x200 + i, WcOpcode.RDMA_WRITE, None, None))
    try:
        got = await p.wait_cqes("a", len(jobs), limit=limit)
    except AssertionError:
        p.check_wire()                   # a request frame off the model names itself first
        raise
    assert len(got) == len(jobs), got
    for c, (wr_id, op, sges, want) in zip(got, jobs):
        assert (c.wr_id, c.status, c.qpn, c.opcode) == (wr_id, WcStatus.SUCCESS, 2, op), c
        if op == WcOpcode.RDMA_READ:
            assert c.byte_len == len(want), c
            assert p.placed(sges) == want, f"READ {wr_id:#x}: bytes differ"
    if mixed:
        await p.wait_cqes("b", nrecv)
    n = await p.finish(title.replace(" ", "_"))
    nr, resumed = p.check_responses()
    assert resumed == 0, resumed            # (a clean wire: no READ is sent again)
    # tshark decoded every frame (finish); the READ opcodes are among them, as READ
    rows = p.wire.pcap(os.path.join(os.getcwd(), title.replace(" ", "_") + ".pcap"))
    ops = {r["opcode"] for r in rows}
    assert 0x0C in ops and ops & {0x0D, 0x0E, 0x0F, 0x10}, ops
    dut._log.info("%s: %d request frames, %d READ responses checked", title, n, nr)
    return p


SIZES = [0, 1, 3, 255, 256, 257, 1000, 1024, 1025, 4096, 4097, 9000, 65536]


@cocotb.test()
async def read_sizes(dut):
    """READs of every kind of size (0 to 64 KiB) at PMTU 1024, one or two SGEs, odd
    addresses; completions opcode 2 with the byte count; bytes exact; wire as §7."""
    await _reads(dut, SIZES, pmtu=1024, title="READ sizes")


#: cycles the PMTU tests wait for their completions (they need a few thousand): a wrong PSN
#: count leaves the QP retrying, which fails here rather than at the 2,000,000 of the others
LIMIT_PMTU = 50_000


def _pmtu_sizes(pmtu):
    """READ lengths around multiples of ``pmtu``: 0, 1, P − 1, P, P + 1, 3P + 5."""
    return [0, 1, pmtu - 1, pmtu, pmtu + 1, 3 * pmtu + 5]


@cocotb.test()
async def read_pmtu_512(dut):
    """READs at PMTU 512 of lengths around its multiples, each followed by a SEND or a WRITE:
    every request's PSN and the PSN after it (the READ's max(1, ⌈L/PMTU⌉) PSNs) as the
    requester model says; the count is shifted by the PMTU code, one bit a cycle."""
    await _reads(dut, _pmtu_sizes(512), pmtu=512, mixed=True, nsge_choices=(1,),
                 title="READ PMTU 512", limit=LIMIT_PMTU)


@cocotb.test()
async def read_pmtu_2048(dut):
    """The same at PMTU 2048."""
    await _reads(dut, _pmtu_sizes(2048), pmtu=2048, mixed=True, nsge_choices=(1,),
                 title="READ PMTU 2048", limit=LIMIT_PMTU)


@cocotb.test()
async def read_mixed(dut):
    """READs mixed with SENDs and WRITEs on the same QP at PMTU 256 (ORD 4 outstanding):
    completions in SQ order, every byte where it belongs."""
    sizes = [random.Random(7).randrange(0, 5000) for _ in range(10)]
    await _reads(dut, sizes, pmtu=256, mixed=True, title="READ mixed")


@cocotb.test()
async def read_ord_one(dut):
    """ORD 1: never a second READ request on the wire before the first one's last response."""
    p = ReadPair(dut, pmtu=256, seed=4)
    await p.setup(ord=1)
    sg = []
    for i in range(4):
        sg.append(await p.post_read(0x300 + i, 100 * i, 700))
    got = await p.wait_cqes("a", 4)
    assert [c.wr_id for c in got] == [0x300 + i for i in range(4)]
    outstanding = 0
    for _, s, b in p.wire.frames:
        op = decode_frame(b)["bth"]["opcode"]
        if s == "a" and op == 0x0C:
            outstanding += 1
            assert outstanding <= 1, "a second READ before the first one's responses"
        elif s == "b" and op in (0x0F, 0x10):
            outstanding -= 1
    await p.finish("read_ord_one")
    for i in range(4):
        assert p.placed(sg[i]) == p.src_data[100 * i:100 * i + 700]


@cocotb.test()
async def read_remote_errors(dut):
    """A READ with an rkey B does not know → REM_ACCESS_ERR (NAK 0x62), the WQE behind it
    WR_FLUSH_ERR; on a fresh pair, a READ to a QP without REMOTE_READ → REM_INV_REQ_ERR."""
    p = ReadPair(dut, pmtu=256, seed=5)
    await p.setup()
    d = p.alloc_dst(100)
    await p.s["a"].dev.post_read(p.qps[("a", 2)], 0x401, [(d, 100, LKEY)],
                                 remote_addr=p.src, rkey=0x0BAD_0001)
    await p.s["a"].dev.post_read(p.qps[("a", 2)], 0x402, [(d, 100, LKEY)],
                                 remote_addr=p.src, rkey=RKEY)
    got = await p.wait_cqes("a", 2)
    assert [(c.wr_id, c.status, c.opcode) for c in got] == [
        (0x401, WcStatus.REM_ACCESS_ERR, WcOpcode.RDMA_READ),
        (0x402, WcStatus.WR_FLUSH_ERR, WcOpcode.RDMA_READ)], got


@cocotb.test()
async def read_without_remote_read(dut):
    """A READ to a QP whose access lacks REMOTE_READ: NAK 0x61 → REM_INV_REQ_ERR, the READ
    behind it WR_FLUSH_ERR, nothing written into A's buffer."""
    p = ReadPair(dut, pmtu=256, seed=6)
    await p.setup(access=Access.REMOTE_WRITE)
    d = p.alloc_dst(300)
    before = p.s["a"].dev.read(d, 300)
    for wr_id in (0x501, 0x502):
        await p.s["a"].dev.post_read(p.qps[("a", 2)], wr_id, [(d, 300, LKEY)],
                                     remote_addr=p.src, rkey=RKEY)
    got = await p.wait_cqes("a", 2)
    assert [(c.wr_id, c.status, c.opcode) for c in got] == [
        (0x501, WcStatus.REM_INV_REQ_ERR, WcOpcode.RDMA_READ),
        (0x502, WcStatus.WR_FLUSH_ERR, WcOpcode.RDMA_READ)], got
    assert p.s["a"].dev.read(d, 300) == before


@cocotb.test()
async def read_goodput(dut):
    """READ goodput (the benchmark ``read_pair-w<W>``): A reads 4 KiB and 64 KiB messages of B
    back to back (PMTU 4096, ORD 8, zero-wait host memories). Figures: the READ responses' beats
    on the wire over the cycles from the first response's first beat to the last one's end
    (1.0 = the wire's limit), and the cycles from the doorbell to the completion of one 4 KiB
    READ."""
    from sim.bench import record
    width = len(dut.a_m_axis_tx_tdata)
    lanes = width // 8
    p = ReadPair(dut, pmtu=4096, seed=8)
    await p.setup(src_len=1 << 17, dst_len=(1 << 18) + 4096, ord=8, ird=8)
    for size, count in ((4096, 16), (65536, 4)):
        start = len(p.wire.frames)
        before = len(p.s["a"].cqes[p.s["a"].cq.cqn])
        p.dst_next = 0
        for k in range(count):
            n = size
            d = p.dst + p.dst_next
            p.dst_next += n
            await p.s["a"].dev.post_read(p.qps[("a", 2)], k, [(d, n, LKEY)],
                                         remote_addr=p.src, rkey=RKEY,
                                         signaled=(k == count - 1), doorbell=False)
        t_db = p.wire.cycle
        await p.s["a"].regs.doorbell("SQ_DB", 2, p.qps[("a", 2)].sq_producer)
        await p.wait_cqes("a", before + 1, limit=20_000_000)
        t_done = p.wire.cycle
        resp = [(c, b) for c, s, b in p.wire.frames[start:]
                if s == "b" and 0x0D <= b[42] <= 0x10]
        beats = sum(-(-len(b) // lanes) for _, b in resp)
        first = resp[0][0] - (-(-len(resp[0][1]) // lanes))
        cycles = resp[-1][0] - first
        share = beats / cycles
        dut._log.info("READ %d B x%d: %d response beats in %d cycles (%.4f of the wire); "
                      "doorbell to completion %d cycles", size, count, beats, cycles, share,
                      t_done - t_db)
        record("requester+responder", f"READ goodput, {size} B messages, share of the wire",
               share, limit=1.0, target=0.97, config={"W": width, "PMTU": 4096, "ORD": 8})
        if count and size == 4096:
            record("requester+responder", "READ 4 KiB x16: doorbell to completion",
                   t_done - t_db, unit="cycles", config={"W": width, "PMTU": 4096})
        for k in range(count):
            assert p.s["a"].dev.read(p.dst + k * size, size) == p.src_data[:size]
