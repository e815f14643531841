"""Two `rnic` cores on a lossy wire: the Reliability Engine end to end (tb/system/test_lossy.py).

Built on the clean-wire bench ``tb/system/cocotb_two_rnic.py`` (:class:`Pair`,
:func:`random_traffic`): the wire's fault model drops, duplicates, reorders and corrupts frames, or
a directed test's filter removes exactly the frame it names. What is checked:

* random traffic both ways: every byte placed once and in order, every completion once and in
  order (``random_traffic``); every request frame on the wire equal to the model's packet of its
  PSN (first transmission or retransmission); every packet sent at least once; counter 13 of
  each core equal to the request frames it sent again; the wire's pcap decoded by tshark;
* directed paths: lost request (default US_CYCLES), lost ACK, go-back-N mid-message, RNR then
  recovery after a late post_recv, RNR exhaustion, retry exhaustion on a cut link, and the
  remote NAKs 0x61/0x62/0x63 (0x62 as the stale WRITE after SEND with Invalidate).
"""

import os
import random
from collections import Counter

import cocotb
from cocotb.triggers import ClockCycles

from rnic.opcodes import WcStatus
from rnic.resp.qp_context import QpState
from sim.driver.verbs import Access, SendOp
from sim.knobs import knob
from sim.models.requester import RDMA_READ, rnr_us, segment, timeout_us
from sim.packets import decode_frame
from tb.system.cocotb_two_rnic import SPORT, Pair, check_frame_fields, random_traffic

US = knob("LOSSY_US_CYCLES")      # US_CYCLES for the tests that set it
TIMEOUT = knob("LOSSY_TIMEOUT_CODE")


class Lossy:
    """Fault model of the wire: each frame is dropped, duplicated, corrupted (one bit after the
    Ethernet header) or held back behind the next frame of its direction, each with ``p``."""

    def __init__(self, seed, p=0.03):
        self.rng, self.p = random.Random(seed), p
        self.held = {}
        self.stats = Counter()

    def __call__(self, s, b):
        r, p = self.rng.random(), self.p
        out = [b]
        if r < p:
            self.stats["drop"] += 1
            out = []
        elif r < 2 * p:
            self.stats["dup"] += 1
            out = [b, b]
        elif r < 3 * p:
            self.stats["corrupt"] += 1
            bad = bytearray(b)
            i = self.rng.randrange(14, len(b))
            bad[i] ^= 1 << self.rng.randrange(8)
            out = [bytes(bad)]
        elif r < 4 * p and s not in self.held:
            self.stats["reorder"] += 1
            self.held[s] = b
            return []
        if s in self.held:
            out.append(self.held.pop(s))
        return out


class Filter:
    """A directed fault: ``rule(s, decoded) -> bool`` drops the frames it returns True for."""

    def __init__(self):
        self.rule = None
        self.dropped = []

    def __call__(self, s, b):
        if self.rule is not None and self.rule(s, decode_frame(b)):
            self.dropped.append((s, b))
            return []
        return [b]


def check_wire_lossy(p):
    """Every request frame equals the model's packet of its PSN; every packet was sent. Returns
    the request frames sent again, per side.

    READ response frames (0x0D–0x10) are not requests: they are checked elsewhere
    (``tb/system/cocotb_read_lossy.py``). A READ request may also be sent again from its response k
    (interface.md §7: PSN of that response, VA and length advanced): that frame must equal the
    model's ``segment(..., start=k)`` packet and counts as sent again."""
    exp, resume = {}, {}
    for key, q in p.expect.items():
        for pk in q:
            exp[(key, pk["psn"])] = pk
            if pk["opcode"] == 0x0C:
                r = pk["reth"]
                for k in range(1, pk["npsn"]):
                    (rp,), _ = segment(RDMA_READ, r["dmalen"], p.pmtu, psn=pk["psn"],
                                       raddr=r["va"], rkey=r["rkey"], start=k)
                    rp["data"] = b""
                    resume[(key, rp["psn"])] = rp
    seen, again = set(), Counter()
    for _, s, b in p.wire.frames:
        d = decode_frame(b)
        check_frame_fields(d, s, SPORT[s])
        bth = d["bth"]
        if 0x0D <= bth["opcode"] <= 0x11:
            continue
        k = ((s, bth["dqpn"]), bth["psn"])
        assert k in exp or k in resume, f"request frame with no model packet: {s} {bth}"
        pk = exp[k] if k in exp else resume[k]
        got = (bth["opcode"], bth["se"], bth["ackreq"], bth["padcnt"])
        assert got == (pk["opcode"], pk["se"], pk["ackreq"], pk["padcnt"]), (k, got)
        if pk["reth"] is not None:
            r = d["reth"]
            assert (r["va"], r["rkey"], r["dmalen"]) == \
                (pk["reth"]["va"], pk["reth"]["rkey"], pk["reth"]["dmalen"]), k
        else:
            assert "reth" not in d, k
        if pk["imm"] is not None:
            raw = b[54 + (16 if "reth" in d else 0):][:4]
            assert raw == pk["imm"], k
        assert d["payload"] == pk["data"], k
        if k in seen or k in resume:
            again[s] += 1
        seen.add(k)
    missing = set(exp) - seen
    assert not missing, f"packets never sent: {sorted(missing)[:5]}"
    return again


async def set_us(p, us):
    for side in p.s.values():
        await side.regs.write("US_CYCLES", us)


@cocotb.test()
async def lossy_random(dut):
    """Random messages both ways over a wire that drops, duplicates, reorders and corrupts
    LOSSY_FAULT_RATE of the frames each: delivered exactly once, in order, byte for byte."""
    count = knob("LOSSY_MESSAGES")
    max_len = knob("LOSSY_MAX_LENGTH")
    fault = Lossy(knob("LOSSY_SEED"), knob("LOSSY_FAULT_RATE"))
    p = Pair(dut, fault=fault, seed=knob("LOSSY_SEED"))
    await p.start(qpns=(2, 3), timeout=TIMEOUT, retry_cnt=7, rnr_retry=7)
    await set_us(p, US)
    await random_traffic(p, count, max_len=max_len)
    await ClockCycles(dut.clk, 300)
    for side in p.s.values():
        side.mem.check()
    again = check_wire_lossy(p)
    for s, side in p.s.items():
        c = await side.regs.counters()
        assert c[13] == again[s], (s, c[13], again[s])
    p.wire.pcap(os.path.join(os.getcwd(), "lossy_random.pcap"))
    dut._log.info("lossy: %d messages, faults %s, sent again %s", count, dict(fault.stats),
                  dict(again))
    assert sum(fault.stats.values()) > 0


async def _pair(dut, fault, **attrs):
    p = Pair(dut, fault=fault, seed=2)
    await p.start(qpns=(2,), **attrs)
    a, b = p.s["a"], p.s["b"]
    src = p.buffer("a", 8192)
    await p.mr("a", 0, src, 8192, 0x0A000001, access=Access.LOCAL_WRITE)
    dst = p.buffer("b", 8192)
    await p.mr("b", 0, dst, 8192, 0x0B000001)
    data = bytes(p.rng.randrange(256) for _ in range(8192))
    a.dev.write(src, data)
    return p, a, b, src, dst, data


def _req_frames(p, s="a"):
    """(cycle, bth) of the request frames side ``s`` sent."""
    out = []
    for c, side, b in p.wire.frames:
        d = decode_frame(b)
        if side == s and d["bth"]["opcode"] != 0x11:
            out.append((c, d["bth"]))
    return out


async def _send(p, a, src, n, wr_id=0xA1, op=SendOp.SEND, **kw):
    await p.post_send("a", 2, wr_id, op, [(src, n, 0x0A000001)], n, **kw)


@cocotb.test()
async def lost_request_default_us(dut):
    """A's first request frame is lost: resent when the timer (timeout 1 = 8.192 µs, at the
    default US_CYCLES) expires; completed once on each side; counter 13 = 1."""
    f = Filter()
    p, a, b, src, dst, data = await _pair(dut, f, timeout=1, retry_cnt=3)
    us = await a.regs.read("US_CYCLES")
    assert us == 156, us                   # round(156.25 MHz)
    f.rule = lambda s, d: s == "a" and d["bth"]["opcode"] != 0x11 and not f.dropped
    await b.dev.post_recv(p.qps[("b", 2)], 0xB1, [(dst, 100, 0x0B000001)])
    await _send(p, a, src, 100)
    (ca,) = await p.wait_cqes("a", 1)
    (cb,) = await p.wait_cqes("b", 1)
    assert (ca.wr_id, ca.status, cb.wr_id, cb.status, cb.byte_len) == (0xA1, 0, 0xB1, 0, 100)
    assert b.dev.read(dst, 100) == data[:100]
    (t0, f0), (t1, f1) = _req_frames(p)
    assert f0["psn"] == f1["psn"]
    assert t1 - t0 >= timeout_us(1) * us, (t1 - t0, timeout_us(1) * us)
    assert (await a.regs.counters())[13] == 1
    assert check_wire_lossy(p)["a"] == 1


@cocotb.test()
async def lost_ack(dut):
    """B's ACK is lost: A resends after its timeout, B answers the duplicate with an ACK and
    does not deliver it twice."""
    f = Filter()
    p, a, b, src, dst, data = await _pair(dut, f, timeout=TIMEOUT, retry_cnt=3)
    await set_us(p, US)
    f.rule = lambda s, d: s == "b" and d["bth"]["opcode"] == 0x11 and not f.dropped
    await b.dev.post_recv(p.qps[("b", 2)], 0xB1, [(dst, 600, 0x0B000001)])
    await _send(p, a, src, 600)
    (ca,) = await p.wait_cqes("a", 1)
    await ClockCycles(dut.clk, 2000)
    await b.poll(b.cq)
    assert [c.wr_id for c in b.cqes[b.cq.cqn]] == [0xB1]
    assert ca.status == 0 and b.dev.read(dst, 600) == data[:600]
    assert (await b.regs.counters())[7] >= 1           # duplicates answered
    assert check_wire_lossy(p)["a"] == 3                # the 3 packets of the message again


@cocotb.test()
async def go_back_n_mid_message(dut):
    """The 2nd packet of a 5-packet SEND is lost: B NAKs 0x60 at its PSN, A resends from there
    with MIDDLE/LAST (no timer involved)."""
    f = Filter()
    p, a, b, src, dst, data = await _pair(dut, f, timeout=0)
    first = p.sent_psn[("a", 2)]
    f.rule = lambda s, d: (s == "a" and d["bth"]["opcode"] != 0x11
                           and d["bth"]["psn"] == (first + 1) & 0xFFFFFF and not f.dropped)
    await b.dev.post_recv(p.qps[("b", 2)], 0xB1, [(dst, 5 * 256, 0x0B000001)])
    await _send(p, a, src, 5 * 256 - 9)
    (ca,) = await p.wait_cqes("a", 1)
    (cb,) = await p.wait_cqes("b", 1)
    assert ca.status == 0 and cb.byte_len == 5 * 256 - 9
    assert b.dev.read(dst, 5 * 256 - 9) == data[:5 * 256 - 9]
    # the wire's record is before the fault: the lost packet is in it
    ops = [(bth["psn"] - first) & 0xFFFFFF for _, bth in _req_frames(p)]
    assert ops == [0, 1, 2, 3, 4, 1, 2, 3, 4], ops
    resent = [bth["opcode"] for _, bth in _req_frames(p)][5:]
    assert resent == [0x01, 0x01, 0x01, 0x02], resent
    assert (await b.regs.counters())[8] == 1            # one sequence-error NAK
    assert check_wire_lossy(p)["a"] == 4


@cocotb.test()
async def rnr_then_late_recv(dut):
    """No receive posted: B answers RNR NAK (min_rnr_timer 1 = 10 µs); A waits and retries
    (rnr_retry 7 = forever) until the late post_recv, then the SEND completes on both sides."""
    p, a, b, src, dst, data = await _pair(dut, None, timeout=0, rnr_retry=7, min_rnr_timer=1)
    await set_us(p, US)
    await _send(p, a, src, 300)
    await ClockCycles(dut.clk, 3000)
    assert await a.poll(a.cq) == []
    naks = (await b.regs.counters())[9]
    assert naks >= 2, naks
    await b.dev.post_recv(p.qps[("b", 2)], 0xB1, [(dst, 300, 0x0B000001)])
    (ca,) = await p.wait_cqes("a", 1)
    (cb,) = await p.wait_cqes("b", 1)
    assert (ca.status, cb.status, cb.byte_len) == (0, 0, 300)
    assert b.dev.read(dst, 300) == data[:300]
    fr = _req_frames(p)                                 # rounds of FIRST, LAST
    firsts = [t for t, bth in fr if bth["opcode"] == 0x00]
    gaps = [t1 - t0 for t0, t1 in zip(firsts, firsts[1:])]
    assert len(firsts) >= 3 and min(gaps) >= rnr_us(1) * US, gaps   # each after the coded wait
    assert (await a.regs.counters())[13] == len(fr) - 2


@cocotb.test()
async def rnr_exhausted(dut):
    """rnr_retry 2 and no receive ever posted: three RNR NAKs, then RNR_RETRY_EXC_ERR on A (the
    WQE unsignaled), A's QP in ERROR, the next WQE flushed."""
    p, a, b, src, dst, data = await _pair(dut, None, timeout=0, rnr_retry=2, min_rnr_timer=1)
    await set_us(p, US)
    await _send(p, a, src, 40, signaled=False)
    await _send(p, a, src, 40, wr_id=0xA2)
    got = await p.wait_cqes("a", 2)
    assert [(c.wr_id, c.status) for c in got] == \
        [(0xA1, WcStatus.RNR_RETRY_EXC_ERR), (0xA2, WcStatus.WR_FLUSH_ERR)], got
    assert (await a.dev.query_qp(p.qps[("a", 2)]))["state"] == QpState.ERROR
    assert (await b.regs.counters())[9] == 3


@cocotb.test()
async def retry_exhausted_cut(dut):
    """The link is cut after setup: retry_cnt 2 gives three transmissions, then RETRY_EXC_ERR,
    A's QP in ERROR, the next WQE flushed."""
    f = Filter()
    p, a, b, src, dst, data = await _pair(dut, f, timeout=TIMEOUT, retry_cnt=2)
    await set_us(p, US)
    f.rule = lambda s, d: True
    await _send(p, a, src, 40, signaled=False)
    await _send(p, a, src, 40, wr_id=0xA2)
    got = await p.wait_cqes("a", 2, limit=400_000)
    assert [(c.wr_id, c.status) for c in got] == \
        [(0xA1, WcStatus.RETRY_EXC_ERR), (0xA2, WcStatus.WR_FLUSH_ERR)], got
    assert len(_req_frames(p)) == 3 * 2
    assert (await a.dev.query_qp(p.qps[("a", 2)]))["state"] == QpState.ERROR
    assert (await a.regs.counters())[13] == 2 * 2


@cocotb.test()
async def remote_naks(dut):
    """NAK 0x61 (WRITE to a QP without REMOTE_WRITE), 0x63 (SEND larger than the receive
    buffer) and 0x62 (the stale WRITE after SEND with Invalidate): A's WQE gets REM_INV_REQ_ERR /
    REM_OP_ERR / REM_ACCESS_ERR, the next WQE WR_FLUSH_ERR, both QPs end in ERROR."""
    p = Pair(dut, seed=3)
    await p.start(qpns=(2, 3, 4), timeout=0)
    a, b = p.s["a"], p.s["b"]
    await b.dev.modify_qp(p.qps[("b", 2)], QpState.RESET, access=0)
    await b.dev.connect(p.qps[("b", 2)])
    src = p.buffer("a", 1024)
    await p.mr("a", 0, src, 1024, 0x0A000001, access=Access.LOCAL_WRITE)
    dst = p.buffer("b", 1024)
    await p.mr("b", 0, dst, 1024, 0x0B000001)
    await p.mr("b", 1, dst, 1024, 0x0B0000FF, fast_reg=True)
    sg = [(src, 64, 0x0A000001)]
    # 0x61: B's QP 2 has no REMOTE_WRITE
    await p.post_send("a", 2, 0x21, SendOp.RDMA_WRITE, sg, 64, signaled=False,
                      remote_addr=dst, rkey=0x0B000001)
    await p.post_send("a", 2, 0x22, SendOp.SEND, sg, 64)
    # 0x63: 64 bytes into a 16-byte receive buffer
    await b.dev.post_recv(p.qps[("b", 3)], 0xB3, [(dst, 16, 0x0B000001)])
    await p.post_send("a", 3, 0x31, SendOp.SEND, sg, 64)
    await p.post_send("a", 3, 0x32, SendOp.SEND, sg, 64)
    # 0x62: SEND with Invalidate of B's fast-reg key, then a WRITE with it
    await b.dev.post_recv(p.qps[("b", 4)], 0xB4, [(dst + 512, 64, 0x0B000001)])
    await p.post_send("a", 4, 0x41, SendOp.SEND_WITH_INV, sg, 64, inv_rkey=0x0B0000FF)
    await p.post_send("a", 4, 0x42, SendOp.RDMA_WRITE, sg, 64, remote_addr=dst, rkey=0x0B0000FF)
    await p.post_send("a", 4, 0x43, SendOp.SEND, sg, 64)
    got = await p.wait_cqes("a", 7)
    by = {c.wr_id: (c.qpn, c.status) for c in got}
    assert by == {0x21: (2, WcStatus.REM_INV_REQ_ERR), 0x22: (2, WcStatus.WR_FLUSH_ERR),
                  0x31: (3, WcStatus.REM_OP_ERR), 0x32: (3, WcStatus.WR_FLUSH_ERR),
                  0x41: (4, WcStatus.SUCCESS), 0x42: (4, WcStatus.REM_ACCESS_ERR),
                  0x43: (4, WcStatus.WR_FLUSH_ERR)}, got
    for qpn in (2, 3, 4):
        for s in ("a", "b"):
            st = (await p.s[s].dev.query_qp(p.qps[(s, qpn)]))["state"]
            assert st == QpState.ERROR, (s, qpn, st)
    c = await b.regs.counters()
    assert c[10] == 3, c
