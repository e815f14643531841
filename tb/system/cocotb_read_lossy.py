"""RDMA READ between two `rnic` cores on a lossy wire (interface.md §7;
tb/system/test_read_lossy.py).

Built on :class:`tb.system.cocotb_read_pair.ReadPair` (B's source region, A's destination region,
READs posted with the requester model) and on the lossy wire of ``tb/system/cocotb_lossy.py``
(:class:`Lossy` for the random run, :class:`Filter` for the directed faults). What is checked:

* every WQE completes exactly once, SUCCESS, in SQ order per QP; a READ with opcode 2 and its
  byte count, its bytes already in A's memory when its completion is seen (polled every few
  cycles); A's destination bytes equal B's source bytes exactly, no guard byte touched; B's
  receive completions for the SENDs once each, the SEND and WRITE bytes exact on B;
* every request frame equals the model's packet of its PSN, a READ sent again from its response
  k included (``check_wire_lossy``); counter 13 equals the request frames sent again;
* every READ response frame is a correct §7 response (``ReadPair.check_responses``): per QP, a run
  FIRST, MIDDLE…, LAST (or ONLY) starting at the PSN of a READ request A did send (first
  transmission or sent again from response k), numbered on from there, PMTU bytes but the last,
  AETH with syndrome 0x1F on FIRST/LAST/ONLY only, the payload equal to B's memory at the
  response's offset;
* directed: a lost MIDDLE response, a lost request, a lost LAST response, a READ whose
  responses are all lost while the ACK of the SEND behind it arrives, and a lost MIDDLE
  response while doorbells keep A's work queue full (receive never stalls for long);
* the wire's pcap decoded by tshark with no error.
"""

import os
import random
from collections import Counter

import cocotb
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from rnic.opcodes import WcOpcode, WcStatus
from sim.driver.verbs import Access, SendOp
from sim.knobs import knob
from sim.models.requester import RDMA_READ, segment, timeout_us
from sim.packets import build_frame, decode_frame

from .cocotb_lossy import TIMEOUT, US, Filter, Lossy, check_wire_lossy, set_us
from .cocotb_read_pair import ACCESS_B, LKEY, RKEY, ReadPair

M24 = 0xFFFFFF
WKEY_A = 0x0A00_0002                  # A's source of SENDs and WRITEs
WKEY_B = 0x0B00_0002                  # B's receive buffers and WRITE targets


class LossyReadPair(ReadPair):
    """A :class:`ReadPair` with guard bytes around every destination."""

    def alloc_dst(self, n):
        """``n`` bytes of A's destination region, 8 to 40 guarded bytes before and after."""
        self.dst_next += self.rng.randrange(8, 40)
        addr = self.dst + self.dst_next
        self.dst_next += n
        assert self.dst_next + 8 <= self.dst_len
        self.s["a"].mem.add_guard(addr - 8, 8)
        self.s["a"].mem.add_guard(addr + n, 8)
        return addr

    def read_requests(self, qpn=2):
        """(cycle, bth, reth) of the READ request frames A sent on ``qpn``."""
        out = []
        for c, s, b in self.wire.frames:
            d = decode_frame(b)
            if s == "a" and d["bth"]["opcode"] == 0x0C and d["bth"]["dqpn"] == qpn:
                out.append((c, d["bth"], d["reth"]))
        return out


async def wait_checked(p, jobs, limit=1_000_000, every=20, stall=None):
    """Poll A's CQ every ``every`` cycles until ``len(jobs)`` completions; a READ's bytes must be
    in A's memory when its completion is seen. ``jobs``: wr_id -> (qpn, opcode, sges, bytes).
    Fails as a hang when neither a frame nor a completion came for ``stall`` cycles (default:
    four retransmit timeouts)."""
    a = p.s["a"]
    got = a.cqes[a.cq.cqn]
    seen = len(got)
    stall = stall or 4 * timeout_us(TIMEOUT) * US + 2000
    last = (len(p.wire.frames), seen, p.wire.cycle)
    for i in range(limit // every):
        if len(got) >= len(jobs):
            break
        await a.poll(a.cq)
        for c in got[seen:]:
            assert c.wr_id in jobs, c
            qpn, op, sges, want = jobs[c.wr_id]
            if op == WcOpcode.RDMA_READ and c.status == WcStatus.SUCCESS:
                assert p.placed(sges) == want, \
                    f"READ {c.wr_id:#x} completed (cycle {p.wire.cycle}) without its bytes"
        seen = len(got)
        now = (len(p.wire.frames), seen)
        if now != last[:2]:
            last = (*now, p.wire.cycle)
        assert p.wire.cycle - last[2] < stall, \
            f"hang: no frame and no completion since cycle {last[2]} ({seen}/{len(jobs)} done)"
        if i % 250 == 0:
            print(f"read_lossy: cycle {p.wire.cycle}, {seen}/{len(jobs)} completions, "
                  f"{len(p.wire.frames)} frames", flush=True)
        await ClockCycles(p.dut.clk, every)
    assert len(got) >= len(jobs), f"A: expected {len(jobs)} CQEs, got {len(got)}: {got}"
    return got


def check_completions(got, jobs, order):
    """Each WQE once, SUCCESS, opcode and byte count, in SQ order per QP (``order``: qpn ->
    wr_ids as posted)."""
    assert sorted(c.wr_id for c in got) == sorted(jobs), "a WQE completed twice or never"
    for qpn, ids in order.items():
        assert [c.wr_id for c in got if c.qpn == qpn] == ids, f"QP {qpn}: out of SQ order"
    for c in got:
        qpn, op, sges, want = jobs[c.wr_id]
        assert (c.status, c.qpn, c.opcode) == (WcStatus.SUCCESS, qpn, op), c
        if op == WcOpcode.RDMA_READ:
            assert c.byte_len == len(want), c


async def finish_lossy(p, name):
    """Quiet wire, guards, request frames (with counter 13), READ responses, the pcap in
    tshark. Returns (frames sent again per side, READ responses checked, runs resumed)."""
    await ClockCycles(p.dut.clk, 300)
    for side in p.s.values():
        side.mem.check()
    assert not p.wire.gaps, f"tvalid fell inside a frame: {p.wire.gaps[:5]}"
    again = check_wire_lossy(p)
    for s, side in p.s.items():
        c = await side.regs.counters()
        assert c[13] == again[s], (s, c[13], again[s])
    nresp, resumed = p.check_responses()
    rows = p.wire.pcap(os.path.join(os.getcwd(), f"{name}.pcap"))
    assert len(rows) == len(p.wire.frames)
    ops = {r["opcode"] for r in rows}
    assert 0x0C in ops and ops & {0x0D, 0x10}, ops    # tshark saw the READ request/responses
    return again, nresp, resumed


# ---- random READ/SEND/WRITE on a lossy wire -----------------------------------------------------

async def _read_lossy_random(dut, *, pmtu, seed, count, prob, max_read, qpns=(2, 3)):
    fault = Lossy(seed, prob)
    p = LossyReadPair(dut, fault=fault, pmtu=pmtu, seed=seed)
    await p.setup(qpns=qpns, timeout=TIMEOUT, retry_cnt=7, rnr_retry=7, src_len=40_000,
                  dst_len=count * (max_read + 100) + 4096)
    await set_us(p, US)
    a, b = p.s["a"], p.s["b"]
    rng = p.rng
    p.trace.section(f"READ lossy random, PMTU {pmtu}")
    # A's source of SENDs/WRITEs; B's receive buffers and WRITE targets (never reused)
    wlen = 4096
    wsrc = p.buffer("a", wlen)
    await p.mr("a", 1, wsrc, wlen, WKEY_A, access=Access.LOCAL_WRITE)
    wdata = bytes(rng.randrange(256) for _ in range(wlen))
    a.dev.write(wsrc, wdata)
    blen = count * 1600 + 4096
    bbuf = p.buffer("b", blen)
    await p.mr("b", 1, bbuf, blen, WKEY_B, access=ACCESS_B | Access.LOCAL_WRITE)
    bnext = [0]

    def take_b(n):
        bnext[0] += rng.randrange(8, 40)
        addr = bbuf + bnext[0]
        bnext[0] += n
        assert bnext[0] <= blen
        p.s["b"].mem.add_guard(addr - 8, 8)
        p.s["b"].mem.add_guard(addr + n, 8)
        return addr

    jobs, order, recvs, landed = {}, {q: [] for q in qpns}, {q: [] for q in qpns}, []
    nread = 0
    mix = random.Random(seed * 7 + 3)   # the op mix, apart from sizes and addresses
    for i in range(count):
        qpn = mix.choice(qpns)
        kind = mix.random()
        wr_id = 0x1000 + i
        if kind < 0.6:
            r = rng.random()
            n = (0 if r < 0.08 else rng.randrange(1, 2 * pmtu + 2) if r < 0.55
                 else rng.randrange(1, max_read + 1))
            roff = rng.randrange(0, len(p.src_data) - n + 1)
            sges = await p.post_read(wr_id, roff, n, nsge=rng.choice((1, 2)), qpn=qpn)
            jobs[wr_id] = (qpn, WcOpcode.RDMA_READ, sges, p.src_data[roff:roff + n])
            nread += 1
        else:
            n = rng.randrange(0, 1501)
            off = rng.randrange(0, wlen - n + 1)
            dst = take_b(n)
            if kind < 0.8:
                await b.dev.post_recv(p.qps[("b", qpn)], 0x9000 + i, [(dst, max(n, 1), WKEY_B)])
                recvs[qpn].append((0x9000 + i, n))
                await p.post_send("a", qpn, wr_id, SendOp.SEND, [(wsrc + off, n, WKEY_A)], n)
                jobs[wr_id] = (qpn, WcOpcode.SEND, None, None)
            else:
                await p.post_send("a", qpn, wr_id, SendOp.RDMA_WRITE, [(wsrc + off, n, WKEY_A)],
                                  n, remote_addr=dst, rkey=WKEY_B)
                jobs[wr_id] = (qpn, WcOpcode.RDMA_WRITE, None, None)
            landed.append((dst, wdata[off:off + n]))
        order[qpn].append(wr_id)
    got = await wait_checked(p, jobs)
    nrecv = sum(len(v) for v in recvs.values())
    gotb = await p.wait_cqes("b", nrecv, limit=1_000_000)
    # nothing more: a late duplicate would complete twice
    await ClockCycles(dut.clk, timeout_us(TIMEOUT) * US + 500)
    await a.poll(a.cq)
    await b.poll(b.cq)
    check_completions(got, jobs, order)
    assert len(gotb) == nrecv, (len(gotb), nrecv)
    for qpn in qpns:
        mine = [c for c in gotb if c.qpn == qpn]
        assert [(c.wr_id, c.byte_len, c.status) for c in mine] == \
            [(w, n, WcStatus.SUCCESS) for w, n in recvs[qpn]], qpn
    for wr_id, (qpn, op, sges, want) in jobs.items():
        if op == WcOpcode.RDMA_READ:
            assert p.placed(sges) == want, hex(wr_id)
    for dst, data in landed:
        assert b.dev.read(dst, len(data)) == data, hex(dst)
    again, nresp, resumed = await finish_lossy(p, f"read_lossy_random_{pmtu}")
    reqs = sum(len(p.read_requests(q)) for q in qpns)
    c6 = (await a.regs.counters())[6]
    print("READ lossy random PMTU %d: %d WQEs (%d READs), faults %s, request frames "
                  "sent again %s, READ requests sent again %d (%d from a response k > 0), "
                  "%d READ responses checked, A counter 6 = %d, %d cycles" % (
              pmtu, count, nread, dict(fault.stats), dict(again), reqs - nread, resumed,
              nresp, c6, p.wire.cycle), flush=True)
    assert sum(fault.stats.values()) > 0
    return fault, again, reqs - nread


@cocotb.test()
async def read_lossy_random(dut):
    """READs (0 to ~10 KiB, 1 or 2 SGEs; 60 %) mixed with SENDs and WRITEs (0 to 1,500 bytes)
    on two QPs, READ_LOSSY_WQES WQEs (10), PMTU 256,
    over a wire dropping, duplicating, corrupting and reordering READ_LOSSY_FAULT_RATE of the frames
    each, the retransmit timer on."""
    await _read_lossy_random(
        dut, pmtu=knob("READ_LOSSY_PMTU"),
        seed=knob("READ_LOSSY_SEED"),
        count=knob("READ_LOSSY_WQES"),
        prob=knob("READ_LOSSY_FAULT_RATE"),
        max_read=knob("READ_LOSSY_MAX_READ"))


@cocotb.test()
async def read_lossy_random_1024(dut):
    """As read_lossy_random at PMTU 1024 (another seed)."""
    await _read_lossy_random(
        dut, pmtu=1024, seed=knob("READ_LOSSY_SEED") + 1,
        count=knob("READ_LOSSY_WQES"),
        prob=knob("READ_LOSSY_FAULT_RATE"),
        max_read=knob("READ_LOSSY_MAX_READ"))


# ---- directed faults -----------------------------------------------------------------------------

L5 = 5 * 256 - 9                         # five responses at PMTU 256
ROFF = 1001


async def _directed(dut, f):
    p = LossyReadPair(dut, fault=f, pmtu=256, seed=8)
    await p.setup(timeout=TIMEOUT, retry_cnt=7)
    await set_us(p, US)
    return p


async def _one_read(p, n=L5, roff=ROFF, wr_id=0x501, nsge=2):
    first = p.sent_psn[("a", 2)]
    sges = await p.post_read(wr_id, roff, n, nsge=nsge)
    return first, sges, {wr_id: (2, WcOpcode.RDMA_READ, sges, p.src_data[roff:roff + n])}


def _is_resp(d, op=None, psn=None):
    o = d["bth"]["opcode"]
    return ((0x0D <= o <= 0x10) if op is None else o == op) and \
        (psn is None or d["bth"]["psn"] == psn)


def _resent_from(p, first, k, n=L5, roff=ROFF):
    """The model's READ request sent again from response ``k``."""
    (pk,), _ = segment(RDMA_READ, n, p.pmtu, psn=first, raddr=p.src + roff, rkey=RKEY, start=k)
    return pk


def _assert_request(req, pk):
    _, bth, reth = req
    assert (bth["psn"], reth["va"], reth["rkey"], reth["dmalen"]) == \
        (pk["psn"], pk["reth"]["va"], pk["reth"]["rkey"], pk["reth"]["dmalen"]), (bth, reth, pk)


async def _done(p, jobs, name):
    got = await wait_checked(p, jobs, limit=400_000)
    await ClockCycles(p.dut.clk, timeout_us(TIMEOUT) * US + 500)
    await p.s["a"].poll(p.s["a"].cq)
    check_completions(got, jobs, {2: list(jobs)})
    for wr_id, (qpn, op, sges, want) in jobs.items():
        if op == WcOpcode.RDMA_READ:
            assert p.placed(sges) == want, hex(wr_id)
    return await finish_lossy(p, name)


@cocotb.test()
async def read_lost_response(dut):
    """A MIDDLE response (the 3rd of 5) is lost: A sees the gap and sends the READ again from
    that response (its PSN, VA + 2·PMTU, length − 2·PMTU), completes it once, bytes exact."""
    f = Filter()
    p = await _directed(dut, f)
    first = p.sent_psn[("a", 2)]
    f.rule = lambda s, d: s == "b" and _is_resp(d, 0x0E, (first + 2) & M24) and not f.dropped
    first, sges, jobs = await _one_read(p)
    again, nresp, resumed = await _done(p, jobs, "read_lost_response")
    reqs = p.read_requests()
    assert len(reqs) == 2, [r[1] for r in reqs]
    _assert_request(reqs[0], _resent_from(p, first, 0))
    _assert_request(reqs[1], _resent_from(p, first, 2))
    assert again["a"] == 1 and resumed == 1 and nresp == 5 + 3, (again, resumed, nresp)
    print("read_lost_response: A counter 6 = %d" % (await p.s["a"].regs.counters())[6])


@cocotb.test()
async def read_lost_request(dut):
    """The READ request is lost: after the timeout A sends it again whole (same PSN, VA and
    length), completes it once."""
    f = Filter()
    p = await _directed(dut, f)
    f.rule = lambda s, d: s == "a" and d["bth"]["opcode"] == 0x0C and not f.dropped
    first, sges, jobs = await _one_read(p)
    again, nresp, resumed = await _done(p, jobs, "read_lost_request")
    reqs = p.read_requests()
    assert len(reqs) == 2, [r[1] for r in reqs]
    _assert_request(reqs[0], _resent_from(p, first, 0))
    _assert_request(reqs[1], _resent_from(p, first, 0))
    assert reqs[1][0] - reqs[0][0] >= timeout_us(TIMEOUT) * US, (reqs[0][0], reqs[1][0])
    assert again["a"] == 1 and resumed == 0 and nresp == 5, (again, resumed, nresp)


@cocotb.test()
async def read_lost_last(dut):
    """The LAST response is lost (no gap to see): after the timeout A sends the READ again from
    it (PSN first + 4, VA + 4·PMTU, the last 247 bytes); B answers with ONLY."""
    f = Filter()
    p = await _directed(dut, f)
    first = p.sent_psn[("a", 2)]
    f.rule = lambda s, d: s == "b" and _is_resp(d, 0x0F) and not f.dropped
    first, sges, jobs = await _one_read(p)
    again, nresp, resumed = await _done(p, jobs, "read_lost_last")
    reqs = p.read_requests()
    assert len(reqs) == 2, [r[1] for r in reqs]
    _assert_request(reqs[1], _resent_from(p, first, 4))
    assert reqs[1][1]["psn"] == (first + 4) & M24
    last_resp = [c for c, s, b in p.wire.frames
                 if s == "b" and decode_frame(b)["bth"]["opcode"] == 0x0F][0]
    assert reqs[1][0] - last_resp >= timeout_us(TIMEOUT) * US, (last_resp, reqs[1][0])
    only = [decode_frame(b)["bth"] for _, s, b in p.wire.frames
            if s == "b" and decode_frame(b)["bth"]["opcode"] == 0x10]
    assert [o["psn"] for o in only] == [(first + 4) & M24], only
    assert again["a"] == 1 and resumed == 1 and nresp == 6, (again, resumed, nresp)


@cocotb.test()
async def read_then_send_ack(dut):
    """A READ (3 responses) then a SEND: every response of the READ is lost once, the SEND's
    ACK arrives. A must not complete the READ from that ACK (a READ completes only when its
    data is placed): it sends the READ again and completes both, in order; B receives the SEND
    once."""
    f = Filter()
    p = await _directed(dut, f)
    a, b = p.s["a"], p.s["b"]
    lost = set()

    def rule(s, d):
        if s == "b" and _is_resp(d) and d["bth"]["psn"] not in lost:
            lost.add(d["bth"]["psn"])
            return True
        return False
    f.rule = rule
    src = p.buffer("a", 300)
    await p.mr("a", 1, src, 300, WKEY_A, access=Access.LOCAL_WRITE)
    a.dev.write(src, bytes(range(256)) + bytes(44))
    rbuf = p.buffer("b", 300)
    await p.mr("b", 1, rbuf, 300, WKEY_B, access=ACCESS_B | Access.LOCAL_WRITE)
    await b.dev.post_recv(p.qps[("b", 2)], 0xB1, [(rbuf, 300, WKEY_B)])
    first, sges, jobs = await _one_read(p, n=700, nsge=1)
    await p.post_send("a", 2, 0x502, SendOp.SEND, [(src, 300, WKEY_A)], 300)
    jobs[0x502] = (2, WcOpcode.SEND, None, None)
    again, nresp, resumed = await _done(p, jobs, "read_then_send_ack")
    (cb,) = await p.wait_cqes("b", 1)
    await b.poll(b.cq)
    assert [(c.wr_id, c.status, c.byte_len) for c in b.cqes[b.cq.cqn]] == [(0xB1, 0, 300)]
    assert b.dev.read(rbuf, 300) == bytes(range(256)) + bytes(44)
    assert len(f.dropped) == 3, len(f.dropped)
    acks = [c for c, s, bb in p.wire.frames
            if s == "b" and decode_frame(bb)["bth"]["opcode"] == 0x11]
    reqs = p.read_requests()
    assert len(reqs) >= 2, [r[1] for r in reqs]
    _assert_request(reqs[1], _resent_from(p, first, 0, n=700))
    assert acks and acks[0] < reqs[1][0], (acks, reqs[1][0])   # the ACK came, the READ again
    print("read_then_send_ack: READ sent %d times, %d ACKs, resent %s, ACK at %d, READ again "
          "at %d" % (len(reqs), len(acks), dict(again), acks[0], reqs[1][0]))


@cocotb.test()
async def read_stale_replays(dut):
    """A READ of 40 responses whose request reaches B 8 times (the wire repeats it): B answers
    every copy (a duplicate READ is answered again), A places the first run and drops the other
    280 responses (counter 6), the READ completes once, bytes exact. At W=64 the drops keep up
    with the wire: A's ``s_axis_rx_tready`` never falls (interface.md §2: this host memory never
    back-pressures). (Asking the completer for each stale response, READ Place took 47 cycles a
    response against 41 on the wire: receive fell behind by hundreds of frames. At W=512 a
    256-byte response is 5 beats on the wire, fewer cycles than READ Place spends on one,
    placed or dropped (a drop by the stale mark: 6 beyond its 4 payload beats), so receive may
    stall there.)"""
    copies, n = 8, 40 * 256 - 9

    def repeat(s, b):
        return [b] * copies if s == "a" and decode_frame(b)["bth"]["opcode"] == 0x0C else [b]
    p = LossyReadPair(dut, fault=repeat, pmtu=256, seed=9)
    await p.setup(timeout=TIMEOUT, retry_cnt=7)
    await set_us(p, US)
    stalls = []

    async def watch():
        v, r = dut.a_s_axis_rx_tvalid, dut.a_s_axis_rx_tready
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            if int(v.value) and not int(r.value):
                stalls.append(p.wire.cycle)
    cocotb.start_soon(watch())
    first, sges, jobs = await _one_read(p, n=n, roff=3001)
    got = await wait_checked(p, jobs, limit=400_000)
    a = p.s["a"]
    for _ in range(400):                 # every copy answered, and dropped by A
        if (sum(1 for _, s, _b in p.wire.frames if s == "b") >= copies * 40 and a.rx.idle()
                and (await a.regs.counters())[6] >= (copies - 1) * 40):
            break
        await ClockCycles(dut.clk, 100)
    await a.poll(a.cq)
    check_completions(got, jobs, {2: list(jobs)})
    assert p.placed(sges) == jobs[0x501][3]
    again, nresp, resumed = await finish_lossy(p, "read_stale_replays")
    c6 = (await a.regs.counters())[6]
    print("read_stale_replays: %d READ responses, A counter 6 = %d, s_axis_rx_tready low %d "
          "cycles" % (nresp, c6, len(stalls)))
    if len(dut.a_m_axis_tx_tdata) == 64:
        assert not stalls, f"A's s_axis_rx_tready fell for {len(stalls)} cycles, from {stalls[0]}"
    assert nresp == copies * 40 and c6 == (copies - 1) * 40 and again["a"] == 0, \
        (nresp, c6, dict(again))


async def _rx_stalls(p):
    """The runs of cycles A's ``s_axis_rx_tready`` stays low with a beat offered: a list,
    filled as they end, of (first cycle, length)."""
    dut, runs = p.dut, []

    async def watch():
        v, r = dut.a_s_axis_rx_tvalid, dut.a_s_axis_rx_tready
        n = 0
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            if int(v.value) and not int(r.value):
                n += 1
            elif n:
                runs.append((p.wire.cycle - n, n))
                n = 0
    cocotb.start_soon(watch())
    return runs


@cocotb.test()
async def read_wake_queue_full(dut):
    """A READ on QP 2 loses a MIDDLE response, so the completer must make the engine go back (a
    wake-up), while A's work queue is kept full by SQ doorbells of QP 3, whose 40 SENDs the
    engine is serving, and while the responses of a READ on QP 4 arrive. The completer never
    waits for room in the work queue: waiting, it would answer no READ DECIDE and take no ACK
    or PLACED event, and receive would stall for as long as the engine serves QP 3. At W=64
    A's ``s_axis_rx_tready`` never stays low for more than 200 cycles with a beat offered (it
    did for 2,406 when the completer waited); both READs (QP 2's sent again from the lost
    response) and every SEND complete once, in order, bytes exact, and no WQE beyond the
    posted ones is sent (the engine once took QP 2's producer index for QP 3's when a doorbell
    of QP 3 met its read just after the engine changed QP)."""
    f = Filter()
    p = LossyReadPair(dut, fault=f, pmtu=256, seed=12)
    await p.setup(qpns=(2, 3, 4), timeout=TIMEOUT, retry_cnt=7, rnr_retry=7)
    await set_us(p, US)
    a, b = p.s["a"], p.s["b"]
    first = p.sent_psn[("a", 2)]
    f.rule = lambda s, d: (s == "b" and d["bth"]["dqpn"] == 2 and not f.dropped
                           and _is_resp(d, 0x0E, (first + 2) & M24))
    src = p.buffer("a", 4096)
    await p.mr("a", 1, src, 4096, WKEY_A, access=Access.LOCAL_WRITE)
    sdata = bytes(p.rng.randrange(256) for _ in range(4096))
    a.dev.write(src, sdata)
    nsend, slen = 40, 1024
    rbuf = p.buffer("b", nsend * slen)
    await p.mr("b", 1, rbuf, nsend * slen, WKEY_B, access=ACCESS_B | Access.LOCAL_WRITE)
    for i in range(nsend):
        await b.dev.post_recv(p.qps[("b", 3)], 0xB00 + i, [(rbuf + i * slen, slen, WKEY_B)])
    stalls = await _rx_stalls(p)
    # QP 3's SENDs written with no doorbell; the READs on QP 2 and QP 4; then QP 3's doorbell
    # again and again (its producer index as posted): the work queue full
    post, jobs = a.dev.post_send, {}
    a.dev.post_send = lambda *args, **kw: post(*args, doorbell=False, **kw)
    for i in range(nsend):
        off = (i * 97) % (4096 - slen)
        await p.post_send("a", 3, 0x600 + i, SendOp.SEND, [(src + off, slen, WKEY_A)], slen)
        jobs[0x600 + i] = (3, WcOpcode.SEND, None, None)
    a.dev.post_send = post
    n = 40 * 256 - 9
    first, sges, rjob = await _one_read(p, n=n, roff=2001)
    jobs.update(rjob)
    sges4 = await p.post_read(0x502, 5003, n, qpn=4)
    jobs[0x502] = (4, WcOpcode.RDMA_READ, sges4, p.src_data[5003:5003 + n])
    done = []

    async def hammer():
        qp = p.qps[("a", 3)]
        while not done:
            await a.regs.doorbell("SQ_DB", 3, qp.sq_producer)
    cocotb.start_soon(hammer())
    got = await wait_checked(p, jobs, limit=400_000)
    done.append(1)
    await ClockCycles(dut.clk, timeout_us(TIMEOUT) * US + 500)
    await a.poll(a.cq)
    check_completions(got, jobs, {2: [0x501], 4: [0x502], 3: [0x600 + i for i in range(nsend)]})
    for wr_id in (0x501, 0x502):
        assert p.placed(jobs[wr_id][2]) == jobs[wr_id][3], hex(wr_id)
    gotb = await p.wait_cqes("b", nsend)
    assert [(c.wr_id, c.byte_len, c.status) for c in gotb] == \
        [(0xB00 + i, slen, WcStatus.SUCCESS) for i in range(nsend)]
    for i in range(nsend):
        off = (i * 97) % (4096 - slen)
        assert b.dev.read(rbuf + i * slen, slen) == sdata[off:off + slen], i
    longest = max(stalls, key=lambda r: r[1], default=(0, 0))
    print("read_wake_queue_full: longest s_axis_rx_tready stall %d cycles (from %d)" % (
        longest[1], longest[0]), flush=True)
    again, nresp, resumed = await finish_lossy(p, "read_wake_queue_full")
    print("read_wake_queue_full: READ requests %d (%d resumed), request frames sent again %s" % (
        len(p.read_requests()), resumed, dict(again)))
    assert len(f.dropped) == 1 and resumed >= 1, (len(f.dropped), resumed)
    if len(dut.a_m_axis_tx_tdata) == 64:      # (at W=512 READ Place may lag the wire, see above)
        assert longest[1] <= 200, \
            f"A's receive stalled {longest[1]} cycles from cycle {longest[0]}"


# ---- a hostile responder: forged READ responses -----------------------------------------------

class Forger:
    """B's READ responses, each with probability ``p``, joined on the wire by a forged one (a
    well-formed frame, ICRC and all, built by ``sim.packets.build_frame``) that READ Place must
    drop without writing a byte:

    * ``length`` (before the real one): its PSN and opcode, ``k`` bytes more or fewer;
    * ``opcode`` (before): LAST where a FIRST/MIDDLE belongs, MIDDLE where a LAST/ONLY does;
    * ``qpn`` (before): the same response to ``idle_qpn``, a connected QP with no READ;
    * ``ahead`` (after): a MIDDLE of PMTU bytes 2 to 4 PSNs ahead of a response sent for the
      first time (so not the next response the requester expects).

    The forged payloads are 0xA5 bytes (no source byte is). A copy of a response with other
    bytes is not among them: it is the real thing whenever the real one was not placed (a
    requester going back refuses a response whose request it is about to send again), as a
    forged response at the PSN the requester expects, with the length and opcode its place
    calls for, always is."""

    def __init__(self, seed, p, pmtu, idle_qpn):
        self.rng, self.p, self.pmtu, self.idle_qpn = random.Random(seed), p, pmtu, idle_qpn
        self.stats = Counter()
        self.top = {}                    # qpn -> the newest response PSN B sent on it

    def __call__(self, s, b):
        if s != "b":
            return [b]
        d = decode_frame(b)
        bth = d["bth"]
        op = bth["opcode"]
        if not 0x0D <= op <= 0x10:
            return [b]
        # (ahead only of a response sent for the first time: ahead of one sent again, a PSN
        # may be the next the requester expects, and a forged frame there is the real thing)
        top = self.top.get(bth["dqpn"])
        new = top is None or 0 < (bth["psn"] - top) & M24 < 1 << 23
        if new:
            self.top[bth["dqpn"]] = bth["psn"]
        if self.rng.random() >= self.p:
            return [b]
        kind = self.rng.choice(("length", "opcode", "qpn") + (("ahead",) if new else ()))
        n = len(d["payload"])
        aeth = d.get("aeth", {"syndrome": 0x1F, "msn": 0})
        fop, psn, qpn = op, bth["psn"], bth["dqpn"]
        if kind == "length":
            k = self.rng.randrange(1, 9)
            n = n + k if n <= k or self.rng.random() < 0.5 else n - k
        elif kind == "opcode":
            fop = 0x0F if op in (0x0D, 0x0E) else 0x0E
        elif kind == "qpn":
            qpn = self.idle_qpn
        elif kind == "ahead":
            fop, psn, n = 0x0E, (psn + self.rng.randrange(2, 5)) & M24, self.pmtu
        e, ip, udp = d["eth"], d["ipv4"], d["udp"]
        forged = build_frame(fop, b"\xA5" * n, psn=psn, dqpn=qpn, aeth=aeth,
                             src_mac=e["src"], dst_mac=e["dst"], src_ip=ip["src"],
                             dst_ip=ip["dst"], sport=udp["sport"], ttl=ip["ttl"])
        self.stats[kind] += 1
        return [b, forged] if kind == "ahead" else [forged, b]


@cocotb.test()
async def read_hostile_responder(dut):
    """READs (0 to 3,000 bytes, 1 or 2 SGEs) on two QPs at PMTU 256, B's responses joined by
    forged ones (:class:`Forger`, 25 % of the responses, every kind): every forged response is
    dropped and counted (counter 6 on A), none writes a byte (A's bytes exact, its guards untouched,
    no 0xA5 anywhere it placed), and every READ completes in order."""
    pmtu, count = 256, knob("READ_LOSSY_WQES") * 3
    forger = Forger(51, 0.25, pmtu, idle_qpn=4)
    p = LossyReadPair(dut, fault=forger, pmtu=pmtu, seed=51)
    await p.setup(qpns=(2, 3, 4), timeout=TIMEOUT, retry_cnt=7, src_len=20_000,
                  dst_len=count * 3100 + 4096)
    await set_us(p, US)
    p.s["b"].dev.write(p.src, p.src_data.replace(b"\xA5", b"\x5A"))
    p.src_data = p.src_data.replace(b"\xA5", b"\x5A")
    rng = p.rng
    p.trace.section("READ from a hostile responder")
    jobs, order = {}, {2: [], 3: []}
    for i in range(count):
        qpn = rng.choice((2, 3))
        n = 0 if rng.random() < 0.1 else rng.randrange(1, 3001)
        roff = rng.randrange(0, len(p.src_data) - n + 1)
        sges = await p.post_read(0x2000 + i, roff, n, nsge=rng.choice((1, 2)), qpn=qpn)
        jobs[0x2000 + i] = (qpn, WcOpcode.RDMA_READ, sges, p.src_data[roff:roff + n])
        order[qpn].append(0x2000 + i)
    got = await wait_checked(p, jobs)
    await ClockCycles(dut.clk, timeout_us(TIMEOUT) * US + 500)
    await p.s["a"].poll(p.s["a"].cq)
    check_completions(got, jobs, order)
    for wr_id, (qpn, op, sges, want) in jobs.items():
        assert p.placed(sges) == want, hex(wr_id)
    again, nresp, resumed = await finish_lossy(p, "read_hostile_responder")
    c = await p.s["a"].regs.counters()
    forged = sum(forger.stats.values())
    print("READ hostile responder: %d READs, forged %s, A counters %s, request frames sent "
          "again %s, %d READ responses checked (%d runs resumed)" % (
              count, dict(forger.stats), {k: v for k, v in enumerate(c) if v}, dict(again),
              nresp, resumed), flush=True)
    assert len(forger.stats) == 4, forger.stats
    assert c[6] >= forged, (c[6], forged)
