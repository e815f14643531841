"""RDMA READ as responder at the `rnic` top (interface.md §7), through the contract only.

READ requests in on ``s_axis_rx`` (built by ``sim.packets`` from the wire tables), responses out
on ``m_axis_tx`` decoded by the tests' own parser with the ICRC recomputed; the data read is
compared with what the test wrote into host memory. Expected opcodes, PSNs, AETHs and lengths
come from a Python model of §7, not from the RTL.
"""

import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from rnic.opcodes import Op
from sim.driver.verbs import Access
from sim.models.responder import read_responses
from tb.system.cocotb_responder import PD, PSN0, QPN, TB

PMTU = 1024
KEY, SLOT = 0x5150, 5


def expected_responses(psn, length, msn, pmtu=PMTU):
    """[(opcode, psn, aeth msn or None, payload offset, payload length)] of a READ (§7)."""
    return read_responses(psn, length, pmtu, msn)


async def _setup(dut, *, access=Access.REMOTE_READ | Access.REMOTE_WRITE, ird=0,
                 key_access=Access.REMOTE_READ, size=1 << 16):
    tb = TB(dut)
    tb.dut = dut
    await tb.start()
    # the QP's access flags and IRD (SET_QP from RESET again, as an application would)
    await tb.dev.modify_qp(tb.qp, 0, access=access, ird=ird)
    await tb.dev.connect(tb.qp)
    buf = tb.dev.alloc(size, 4096)
    data = bytes(random.Random(7).getrandbits(8) for _ in range(size))
    tb.dev.write(buf, data)
    await tb.dev.reg_mr(SLOT, key=KEY, addr=buf, length=size, pd=PD, access=key_access)
    return tb, buf, data


async def _read(tb, psn, va, length, rkey=KEY):
    await tb.send(Op.RDMA_READ_REQUEST, b"", psn=psn, ackreq=1,
                  reth={"va": va, "rkey": rkey, "dmalen": length})


async def _expect_read(tb, psn, length, msn, data, off, pmtu=PMTU):
    """Receive and check the responses of one READ of ``length`` bytes at ``data[off:]``."""
    for op, p, m, o, ln in expected_responses(psn, length, msn, pmtu):
        d = await tb.recv_frame()
        b = d["bth"]
        assert (b["opcode"], b["psn"]) == (op, p), (hex(b["opcode"]), hex(b["psn"]), op, hex(p))
        assert b["ackreq"] == 0 and b["se"] == 0
        if m is None:
            assert "aeth" not in d
        else:
            assert (d["aeth"]["syndrome"], d["aeth"]["msn"]) == (0x1F, m)
        assert d["payload"] == data[off + o:off + o + ln], (hex(p), len(d["payload"]), ln)
        assert b["padcnt"] == (-ln) & 3


@cocotb.test()
async def read_sizes(dut):
    """READs of 0..9221 bytes at odd addresses: max(1, ⌈L/PMTU⌉) responses each, FIRST/MIDDLE/
    LAST or ONLY, one PSN per response, the MSN counted per READ; a SEND behind them is ACKed
    at its own PSN after the last response."""
    tb, buf, data = await _setup(dut)
    psn, msn = PSN0, 0
    sizes = (0, 1, 3, PMTU - 1, PMTU, PMTU + 1, 3 * PMTU, 3 * PMTU + 5, 9 * PMTU + 5)
    for i, size in enumerate(sizes):
        off = (i * 37) % 512
        msn += 1
        await _read(tb, psn, buf + off, size)
        await _expect_read(tb, psn, size, msn, data, off)
        psn += max(1, -(-size // PMTU))
    # back to back, answered in order
    plan = []
    for size in (2 * PMTU + 3, 0, 17):
        msn += 1
        await _read(tb, psn, buf + 5, size)
        plan.append((psn, size, msn))
        psn += max(1, -(-size // PMTU))
    # a SEND behind the READs: its ACK follows their last response
    rbuf = tb.dev.alloc(64)
    await tb.dev.reg_mr(6, key=0x77, addr=rbuf, length=64, pd=PD, access=Access.LOCAL_WRITE)
    await tb.dev.post_recv(tb.qp, 9, [(rbuf, 64, 0x77)])
    await tb.send(Op.SEND_ONLY, b"after", psn=psn, ackreq=1)
    for p, size, m in plan:
        await _expect_read(tb, p, size, m, data, 5)
    tb.expect_ack(await tb.recv_frame(), psn, msn + 1)
    (cqe,) = await tb.wait_cqes(1)
    assert (cqe.wr_id, cqe.status, cqe.byte_len) == (9, 0, 5)
    q = await tb.dev.query_qp(tb.qp)
    assert q["epsn"] == psn + 1 and q["msn"] == msn + 1, q


@cocotb.test()
async def read_requests_behind(dut):
    """Requests behind a long READ are still received and checked at one beat a cycle: 16
    back-to-back 1 KiB RDMA WRITE_ONLYs right behind a 32 KiB READ never see
    ``s_axis_rx_tready`` fall, their data is in host memory while the READ's responses are
    still leaving, and their ACK follows the READ's last response (PSN order)."""
    tb, buf, data = await _setup(dut, size=1 << 17)
    wbuf = tb.dev.alloc(16 << 10, 4096)
    await tb.dev.reg_mr(6, key=0x66, addr=wbuf, length=16 << 10, pd=PD,
                        access=Access.REMOTE_WRITE)
    stalls, beats = [], []

    async def watch():
        while True:
            await RisingEdge(dut.clk)
            if dut.s_axis_rx_tvalid.value:
                (beats if dut.s_axis_rx_tready.value else stalls).append(1)
    watcher = cocotb.start_soon(watch())
    rng = random.Random(11)
    writes = [bytes(rng.getrandbits(8) for _ in range(1024)) for _ in range(16)]
    psn, size = PSN0, 32 << 10
    n_resp = -(-size // PMTU)
    await _read(tb, psn, buf, size)
    for i, w in enumerate(writes):
        await tb.send(Op.RDMA_WRITE_ONLY, w, psn=psn + n_resp + i, ackreq=int(i == 15),
                      reth={"va": wbuf + 1024 * i, "rkey": 0x66, "dmalen": 1024})
    await tb.src.wait()
    for _ in range(200):
        if tb.dev.read(wbuf, 16 << 10) == b"".join(writes):
            break
        await ClockCycles(dut.clk, 10)
    assert tb.dev.read(wbuf, 16 << 10) == b"".join(writes)
    # the READ is still answering while the WRITEs behind it are placed
    assert tb.sink.count() < n_resp, tb.sink.count()
    await _expect_read(tb, psn, size, 1, data, 0)
    tb.expect_ack(await tb.recv_frame(), psn + n_resp + 15, 17)
    watcher.cancel()
    lanes = len(dut.s_axis_rx_tdata) // 8
    assert len(beats) >= 16 * -(-(1024 + 70) // lanes), len(beats)
    assert not stalls, f"s_axis_rx_tready fell for {len(stalls)} cycles behind the READ"


@cocotb.test()
async def read_errors(dut):
    """The normative checks: the QP without REMOTE_READ → NAK 0x61; an unknown rkey, a key
    without REMOTE_READ, another PD's key or a range past the key → NAK 0x62; each moves the QP
    to ERROR (event 3). A zero-length READ is not key-checked."""
    cases = (
        ("qp access", dict(access=Access.REMOTE_WRITE), KEY, 0, 16, 0x61),
        ("unknown rkey", {}, 0xBAD, 0, 16, 0x62),
        ("key without REMOTE_READ", dict(key_access=Access.REMOTE_WRITE), KEY, 0, 16, 0x62),
        ("range past the key", dict(size=4096), KEY, 4000, 200, 0x62),
    )
    tb = None
    for name, kw, rkey, off, length, syn in cases:
        tb, buf, data = await _setup(dut, **kw)
        # a zero-length READ with any rkey: one ONLY, no payload (when the QP allows READ)
        psn = PSN0
        if syn == 0x62:
            await _read(tb, psn, 0x1234, 0, rkey=0xBAD)
            await _expect_read(tb, psn, 0, 1, data, 0)
            psn += 1
        await _read(tb, psn, buf + off, length, rkey=rkey)
        tb.expect_ack(await tb.recv_frame(), psn, 1 if syn == 0x62 else 0, syndrome=syn)
        q = await tb.dev.query_qp(tb.qp)
        assert q["state"] == 6, (name, q)
        # nothing more for this QP
        await _read(tb, psn + 1, buf, 8)
        await ClockCycles(dut.clk, 400)
        assert tb.sink.empty(), name


@cocotb.test()
async def read_duplicates(dut):
    """A duplicate READ is answered again from its own RETH, numbered from its own PSN, with
    the current MSN and no state change, while IRD holds it; a duplicate of a READ no longer
    held → NAK 0x61, QP to ERROR."""
    for ird in (0, 2):          # 0 means 1
        tb, buf, data = await _setup(dut, ird=ird)
        a, b = PSN0, PSN0 + 3
        await _read(tb, a, buf, 3 * PMTU)               # A: 3 responses, MSN 1
        await _expect_read(tb, a, 3 * PMTU, 1, data, 0)
        await _read(tb, b, buf + 100, 10)               # B: 1 response, MSN 2
        await _expect_read(tb, b, 10, 2, data, 100)
        # B again (the most recent READ is always held)
        await _read(tb, b, buf + 100, 10)
        await _expect_read(tb, b, 10, 2, data, 100)
        # B again with a payload (malformed): a plain duplicate, ACKed at ePSN − 1; the core
        # goes on (a hang here once: the execute stage waited for beats PSN Check drained)
        await tb.send(Op.RDMA_READ_REQUEST, b"junk", psn=b, ackreq=1,
                      reth={"va": buf + 100, "rkey": KEY, "dmalen": 10})
        tb.expect_ack(await tb.recv_frame(), b, 2)
        # a retry from inside A (its second response on): held only when IRD ≥ 2
        await _read(tb, a + 1, buf + PMTU, 2 * PMTU)
        if ird >= 2:
            await _expect_read(tb, a + 1, 2 * PMTU, 2, data, PMTU)
            q = await tb.dev.query_qp(tb.qp)
            assert q["epsn"] == b + 1 and q["msn"] == 2 and q["state"] == 3, q
        else:
            tb.expect_ack(await tb.recv_frame(), a + 1, 2, syndrome=0x61)
            q = await tb.dev.query_qp(tb.qp)
            assert q["state"] == 6, q


@cocotb.test()
async def read_host_fault(dut):
    """A host-memory read fault ends the READ: event 4, the QP to ERROR, nothing more sent for
    it."""
    tb, buf, data = await _setup(dut)
    tb.mem.add_fault(buf + 2 * PMTU, 64, "r")
    await _read(tb, PSN0, buf, 4 * PMTU)
    got = []
    for _ in range(40):
        await ClockCycles(dut.clk, 50)
        while not tb.sink.empty():
            got.append(await tb.recv_frame())
    tb.mem.clear_faults()
    # the two responses before the faulted one (their reads are good), none from it on
    psns = [d["bth"]["psn"] for d in got]
    assert psns == [PSN0, PSN0 + 1], psns
    q = await tb.dev.query_qp(tb.qp)
    assert q["state"] == 6, q
    evs = await tb.dev.events()
    assert any(e.type == 4 and e.number == QPN for e in evs), evs


def _frame_beats(paylen, aeth, lanes):
    """Beats of one READ response frame: headers, payload, pad, ICRC, Ethernet minimum 60."""
    n = 14 + 20 + 8 + 12 + (4 if aeth else 0) + paylen + ((-paylen) & 3) + 4
    return -(-max(n, 60) // lanes)


@cocotb.test()
async def read_bench(dut):
    """``rnic bench`` (``read_top-w*``): a READ's latency on an idle core — the request's last
    beat to the first response beat, beside the host's read latency (first AR to first R) — and
    the goodput of READs of 4 KiB and 64 KiB at PMTU 4096 with zero-wait host memory, beside the
    wire's limit (the response frames' beats back to back)."""
    from sim.bench import record
    lanes = len(dut.m_axis_tx_tdata) // 8
    tb, buf, data = await _setup(dut, size=1 << 17)
    await tb.dev.modify_qp(tb.qp, 0, pmtu=4096)
    await tb.dev.connect(tb.qp)
    from tb.system.cocotb_resp_bench import Mon
    w = Mon(dut)
    cfg = {"W": lanes * 8, "pmtu": 4096}
    psn, msn = PSN0, 0
    # latency: one short READ at a time
    lat, host = [], []
    for i in range(4):
        msn += 1
        ar0 = len(w.ar)
        await _read(tb, psn, buf + 64 * i, 64)
        await _expect_read(tb, psn, 64, msn, data, 64 * i, 4096)
        lat.append(w.tx_first[-1] - w.rx_tlast[-1])
        a = w.ar[ar0]
        host.append(min(c for c in w.r if c >= a) - a)
        psn += 1
    record("read_top", "READ request last beat → first response beat (cycles), 64 B",
           sorted(lat)[len(lat) // 2], unit="cycles", config=cfg, target=40 + min(host))
    record("read_top", "host read latency under it, first AR → first R (cycles)", min(host),
           unit="cycles", config=cfg)
    for size in (4096, 65536):
        msn += 1
        t0 = len(w.tx_first)
        await _read(tb, psn, buf, size)
        await _expect_read(tb, psn, size, msn, data, 0, 4096)
        n = max(1, -(-size // 4096))
        beats = sum(_frame_beats(ln, m is not None, lanes)
                    for _, _, m, _, ln in expected_responses(psn, size, msn, 4096))
        span = w.tx_last[-1] - w.tx_first[t0] + 1
        psn += n
        # goodput: payload bytes per cycle over the responses' span, as a share of the wire's
        # (the frames' beats back to back)
        limit = size / (beats * lanes)
        got = size / (span * lanes)
        record("read_top", f"READ {size // 1024} KiB goodput, share of the wire's limit",
               got / limit, limit=1.0, config=cfg, target=0.97)
