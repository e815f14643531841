"""cocotb bench for rnic.resp.execute.Execute (wrapped with HostMemory, KeyCache and CqeGen).

``exe`` commands and their payload beats are driven directly (no PSN Check); host memory is
the hostile AxiRam of sim/hostmem.py. A Python model places each message's bytes into an image
of the buffer area (filled with a random pattern first, so every byte outside the buffers is a
guard byte) and lists the CQEs; the test compares the whole area byte by byte, every ``done``
in order and every CQE field.
"""
import random

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from rnic.ifaces import event_layout, qpn_layout
from rnic.resp.execute import PREFETCH_DEPTH, flush_layout
from rnic.resp.psn_check import done_layout, exe_layout
from sim.bench import record
from sim.hostmem import AxiResp, HostMem
from sim.knobs import knob
from sim.models.keys import FAST_REG_MR, MR, set_args
from tb.blocks.cocotb_axi_master import Sink, Source, reset, wait_until
from tb.blocks.cocotb_mailbox import ArgRegs, CommandSink, CommandSource

W = knob("EXECUTE_WIDTH")
PD = 5
CQ_BASE = 0x20000
CQ_LOG = 8
RQ_BASE = 0x40000          # + 0x1000 per QP (QP 3's ring is not 64-byte aligned)
RQ_LOG = 4
BUF = 0x100000             # receive buffers (identity-mapped MR, key K_RECV)
BUF_LEN = 0x10000
WBUF = 0x300000            # RDMA WRITE target (MR key K_WRITE, iova IOVA_W → bus WBUF)
WBUF_LEN = 0x10000
IOVA_W = 0x7000_0000_0000
K_RECV, K_WRITE, K_FAST, K_OTHERPD, K_NOLW = 0x1000_0100, 0x2000_0201, 0x3000_0302, \
    0x4000_0403, 0x5000_0504
FAST_BUF = 0x380000

LOCAL_WRITE, REMOTE_WRITE = 1, 2
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_LAST_IMM, SEND_ONLY, SEND_ONLY_IMM = 0, 1, 2, 3, 4, 5
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM = \
    6, 7, 8, 9, 10, 11
SEND_LAST_INV, SEND_ONLY_INV = 0x16, 0x17
_QPN = qpn_layout


def rq_base(qpn):
    # 64-byte aligned, as SET_QP requires (interface.md §4.2); QP 3's at another offset
    return RQ_BASE + 0x1000 * qpn + (0x40 if qpn == 3 else 0)


class TB:
    def __init__(self, dut, seed=1, backpressure=0.3, idle=0.2, max_latency=30):
        self.dut = dut
        self.rng = random.Random(seed)
        self.mem = HostMem(dut, "m_axi", dut.clk, dut.rst, seed=seed,
                           backpressure=backpressure, max_latency=max_latency)
        self.exe = Source(dut, "exe", exe_layout, dut.clk, rng=random.Random(seed + 1),
                          idle=idle)
        self.pay = AxiStreamSource(AxiStreamBus.from_prefix(dut, "pay"), dut.clk, dut.rst)
        if idle:
            prng = random.Random(seed + 2)
            self.pay.set_pause_generator(iter(lambda: prng.random() < idle, None))
        self.done = Sink(dut, "done", done_layout, dut.clk, rng=random.Random(seed + 3),
                         stall=idle)
        self.event = Sink(dut, "event", event_layout, dut.clk)
        self.fault = Sink(dut, "fault", _QPN, dut.clk)
        self.cq_event = Sink(dut, "cq_event", event_layout, dut.clk)
        self.kargs = ArgRegs(dut, "key_cmd__", dut.clk)
        self.kcmd = CommandSource(dut, "key_cmd__", dut.clk, self.kargs)
        self.kresp = CommandSink(dut, "key_cmd__", dut.clk, self.kargs)
        self.cargs = ArgRegs(dut, "cq_cmd__", dut.clk)
        self.ccmd = CommandSource(dut, "cq_cmd__", dut.clk, self.cargs)
        self.cresp = CommandSink(dut, "cq_cmd__", dut.clk, self.cargs)
        self.qp_reset = Source(dut, "qp_reset", _QPN, dut.clk)
        self.flush = Source(dut, "flush", flush_layout, dut.clk)
        self.rq_post = Source(dut, "rq_post", flush_layout, dut.clk)
        self.n_exe = 0
        self.expect_done = []
        self.cqes = {}                 # cqn -> list of expected CQE dicts
        self.cq_log = {}
        self.rq_index = {}             # qpn -> next WQE index (software producer)
        self.image = {}                # base -> bytearray model
        self.wr_id = 0x1122_3344_0000_0000

    async def start(self):
        await reset(self.dut)
        await wait_until(self.dut, lambda: not int(self.dut.cq_sweeping.value), 5000, "sweep")
        await self.set_key(0, K_RECV, BUF, BUF_LEN, BUF, LOCAL_WRITE | REMOTE_WRITE, MR)
        await self.set_key(1, K_WRITE, IOVA_W, WBUF_LEN, WBUF, REMOTE_WRITE, MR)
        await self.set_key(2, K_FAST, FAST_BUF, 0x1000, FAST_BUF, LOCAL_WRITE, FAST_REG_MR)
        await self.set_key(3, K_OTHERPD, BUF, BUF_LEN, BUF, LOCAL_WRITE, MR, pd=PD + 1)
        await self.set_key(4, K_NOLW, BUF, BUF_LEN, BUF, REMOTE_WRITE, MR)
        await self.set_cq(1, CQ_BASE, CQ_LOG)
        for base, n in ((BUF, BUF_LEN), (WBUF, WBUF_LEN), (FAST_BUF, 0x1000)):
            img = bytearray(self.rng.randbytes(n))
            self.mem.write(base, bytes(img))
            self.image[base] = img

    async def command(self, src, sink, opcode, index, args):
        n = len(sink.items)
        src.put({"opcode": opcode, "index": index, "args": list(args) + [0] * (16 - len(args))})
        await wait_until(self.dut, lambda: len(sink.items) > n, 2000, "command response")
        return sink.items[n]["result"]

    async def set_key(self, slot, key, iova, length, bus, access, type_, pd=PD):
        r = await self.command(self.kcmd, self.kresp, 0x04, slot,
                               set_args(key, iova, length, bus, pd, access, type_, True))
        assert r == 0, f"SET_KEY {slot}: {r}"

    async def set_cq(self, cqn, base, log2):
        self.mem.write(base, bytes(32 << log2))
        r = await self.command(self.ccmd, self.cresp, 0x03, cqn, [base, 0, log2])
        assert r == 0
        self.cqes[cqn] = []
        self.cq_log[cqn] = (base, log2)

    # ---- software side: post a receive WQE -------------------------------------------------
    def wqe_bytes(self, sges, num_sge=None, wr_id=0):
        w = bytearray(64)
        w[0:8] = wr_id.to_bytes(8, "little")
        w[8:12] = (len(sges) if num_sge is None else num_sge).to_bytes(4, "little")
        for k, (addr, length, lkey) in enumerate(sges[:3]):
            w[16 + 16 * k:32 + 16 * k] = (addr.to_bytes(8, "little") + length.to_bytes(4, "little")
                                          + lkey.to_bytes(4, "little"))
        return bytes(w)

    def post_wqe(self, qpn, sges, num_sge=None, base=None, doorbell=True):
        """Write the WQE at the producer index, then ring the doorbell (``rq_post``, what PSN
        Check forwards of an RQ_DB that took effect)."""
        idx = self.rq_index.get(qpn, 0)
        self.rq_index[qpn] = (idx + 1) & 0xFFFF
        self.wr_id += 0x1_0001
        base = rq_base(qpn) if base is None else base
        self.mem.write(base + 64 * (idx % (1 << RQ_LOG)), self.wqe_bytes(sges, num_sge, self.wr_id))
        if doorbell:
            self.doorbell(qpn, base)
        return idx, self.wr_id

    def doorbell(self, qpn, base=None):
        self.rq_post.put({"qpn": qpn, "index": self.rq_index.get(qpn, 0), "rcqn": 1,
                          "rq_base": rq_base(qpn) if base is None else base, "rq_log": RQ_LOG})

    def place(self, addr, data):
        if not data:
            return
        for base, img in self.image.items():
            if base <= addr and addr + len(data) <= base + len(img):
                img[addr - base:addr - base + len(data)] = data
                return
        raise AssertionError(f"model: {addr:#x} outside every image")

    # ---- driving -------------------------------------------------------------------------------
    def send_exe(self, fields, payload, done, cqe=None):
        base = {"qpn": 0, "psn": self.n_exe & 0xFFFFFF, "status": 0,
                "payload_len": len(payload), "se": 0,
                "wqe": 0, "comp": 0, "send": 0, "write": 0,
                "imm_valid": 0, "inv": 0, "offset": 0, "va": 0, "rkey": 0, "dma_len": 0,
                "imm_or_rkey": 0, "rq_index": 0, "pd": PD, "rcqn": 1,
                "rq_base": rq_base(fields["qpn"]), "rq_log": RQ_LOG}
        # (the packet's opcode and position are not in the command: Execute reads its flags)
        base.update({k: v for k, v in fields.items() if k not in ("opcode", "first", "last")})
        self.n_exe += 1
        self.exe.put(base)
        if payload:
            self.pay.send_nowait(AxiStreamFrame(bytes(payload)))
        self.expect_done.append(done)
        if cqe is not None:
            self.cqes[base["rcqn"]].append(cqe)

    def message(self, qpn, kind, length, pmtu, *, sges=None, wqe=None, va=0, rkey=K_WRITE,
                imm=0, inv_key=0, fail_at=None, place=True, data=None, cqn=1, expect=None):
        """Packets of one message as exe commands; returns the list of (fields, payload, done,
        cqe) so callers can interleave them. ``wqe`` = (index, wr_id) of the posted WQE."""
        data = self.rng.randbytes(length) if data is None else data
        n = max(1, -(-length // pmtu))
        pkts = []
        send = kind.startswith("send")
        for i in range(n):
            chunk = data[i * pmtu:(i + 1) * pmtu]
            first, last = i == 0, i == n - 1
            if send:
                op = (SEND_ONLY if first else SEND_LAST) if last else \
                     (SEND_FIRST if first else SEND_MIDDLE)
                if last and kind == "send_imm":
                    op = SEND_ONLY_IMM if first else SEND_LAST_IMM
                if last and kind == "send_inv":
                    op = SEND_ONLY_INV if first else SEND_LAST_INV
                takes = first
            else:
                op = (WRITE_ONLY if first else WRITE_LAST) if last else \
                     (WRITE_FIRST if first else WRITE_MIDDLE)
                if last and kind == "write_imm":
                    op = WRITE_ONLY_IMM if first else WRITE_LAST_IMM
                takes = last and kind == "write_imm"
            holds = send or kind == "write_imm"
            f = {"qpn": qpn, "opcode": op, "first": int(first), "last": int(last),
                 "wqe": int(takes), "comp": int(last and holds), "send": int(send),
                 "write": int(not send), "imm_valid": int(last and kind.endswith("imm")),
                 "inv": int(last and kind == "send_inv"), "offset": i * pmtu,
                 "imm_or_rkey": (imm if kind.endswith("imm") else inv_key) if last else 0,
                 "rq_index": wqe[0] if wqe else 0, "rcqn": cqn}
            if not send:
                f.update({"va": va, "rkey": rkey, "dma_len": length})
            cqe = None
            if last and holds:
                flags = (2 if kind.endswith("imm") else 0) | (4 if kind == "send_inv" else 0)
                cqe = {"wr_id": wqe[1], "byte_len": length, "qpn": qpn, "status": 0,
                       "opcode": 129 if kind == "write_imm" else 128, "flags": flags,
                       "imm": imm.to_bytes(4, "big") if kind.endswith("imm") else
                       inv_key.to_bytes(4, "little") if kind == "send_inv" else bytes(4)}
            pkts.append([f, chunk, (0, 0), cqe])
        if place:
            if send:
                self._place_sges(sges, data)
            else:
                self.place(WBUF + (va - IOVA_W), data)
        return pkts

    def _place_sges(self, sges, data):
        pos = 0
        for addr, length, _ in sges:
            take = min(length, len(data) - pos)
            if take > 0:
                self.place(addr, data[pos:pos + take])
                pos += take

    # ---- checking ------------------------------------------------------------------------------
    def read_cqes(self, cqn):
        base, log2 = self.cq_log[cqn]
        out = []
        for i in range(1 << log2):
            e = self.mem.read(base + 32 * i, 32)
            if not e[31] & 1:
                break
            out.append({"wr_id": int.from_bytes(e[0:8], "little"),
                        "byte_len": int.from_bytes(e[8:12], "little"), "imm": bytes(e[12:16]),
                        "qpn": int.from_bytes(e[16:20], "little"), "status": e[20],
                        "opcode": e[21], "flags": e[22]})
        return out

    async def finish(self, limit=200000):
        dut = self.dut
        total = lambda: sum(len(v) for v in self.cqes.values())      # noqa: E731
        await wait_until(dut, lambda: len(self.done.items) >= len(self.expect_done)
                         and sum(len(self.read_cqes(c)) for c in self.cqes) >= total(),
                         limit, "done and CQEs")
        for _ in range(300):
            await RisingEdge(dut.clk)
        got = [(d["fatal"], d["syndrome"]) for d in self.done.items]
        assert got == self.expect_done, f"done: got {got}\nexpected {self.expect_done}"
        for cqn, exp in self.cqes.items():
            got = self.read_cqes(cqn)
            assert len(got) == len(exp), f"CQ {cqn}: {len(got)} CQEs, expected {len(exp)}"
            for k, (g, e) in enumerate(zip(got, exp)):
                e = dict(e)
                if e["status"] != 0:
                    e.update(byte_len=0, imm=bytes(4), flags=0)
                assert g == e, f"CQ {cqn} entry {k}: got {g}\nexpected {e}"
        for base, img in self.image.items():
            now = self.mem.read(base, len(img))
            if now != bytes(img):
                bad = next(i for i in range(len(img)) if now[i] != img[i])
                raise AssertionError(f"memory differs at {base + bad:#x}: "
                                     f"{now[bad:bad + 16].hex()} expected "
                                     f"{bytes(img[bad:bad + 16]).hex()}")
        self.mem.check()
        self.dut._log.info("checked %d done, %s CQEs, %d host writes", len(self.done.items),
                              {c: len(v) for c, v in self.cqes.items()}, len(self.mem.writes))


def alloc_sges(tb, cursor, total, nsge, lkey=K_RECV, zero=False):
    """``nsge`` SGEs of random alignment summing to ≥ ``total``; returns (sges, new cursor)."""
    sges = []
    lens = []
    remaining = total + tb.rng.randrange(0, 64)
    for k in range(nsge):
        if k == nsge - 1:
            ln = remaining
        else:
            ln = tb.rng.randrange(0, remaining + 1)
        lens.append(ln)
        remaining -= ln
    if zero and nsge > 1:
        lens.insert(tb.rng.randrange(nsge), 0)
        lens = lens[:3]
        if sum(lens) < total:
            lens[-1] += total - sum(lens)
    for ln in lens:
        cursor += tb.rng.randrange(1, 40)
        sges.append((cursor, ln, lkey))
        cursor += ln
    return sges, cursor


@cocotb.test()
async def messages(dut):
    """Random SEND/WRITE messages of 0..several PMTUs, 1-3 SGEs, interleaved across QPs."""
    tb = TB(dut, seed=knob("EXECUTE_SEED"))
    await tb.start()
    pmtu = 256
    cursor = BUF
    wcursor = IOVA_W
    streams = {q: [] for q in (2, 3, 4, 5)}
    tb.rq_index[4] = 0xFFFC         # QP 4's indices wrap the ring and the 16-bit counter
    for q in streams:
        for _ in range(8):
            kind = tb.rng.choice(["send", "send", "send_imm", "write", "write_imm", "send"])
            length = tb.rng.choice([0, 1, 7, 64, pmtu, pmtu + 1, 2 * pmtu + tb.rng.randrange(pmtu),
                                    tb.rng.randrange(1, 4 * pmtu)])
            imm = tb.rng.getrandbits(32)
            if kind.startswith("send"):
                sges, cursor = alloc_sges(tb, cursor, length, tb.rng.randint(1, 3),
                                          zero=tb.rng.random() < 0.3)
                wqe = tb.post_wqe(q, sges)
                pk = tb.message(q, kind, length, pmtu, sges=sges, wqe=wqe, imm=imm)
            else:
                wcursor += tb.rng.randrange(0, 64)
                wqe = tb.post_wqe(q, []) if kind == "write_imm" else None
                pk = tb.message(q, kind, length, pmtu, wqe=wqe, va=wcursor, imm=imm)
                wcursor += length
            streams[q].extend(pk)
    assert cursor < BUF + BUF_LEN and wcursor < IOVA_W + WBUF_LEN
    while any(streams.values()):
        q = tb.rng.choice([k for k, v in streams.items() if v])
        tb.send_exe(*streams[q].pop(0))
    await tb.finish()
    assert not tb.event.items and not tb.fault.items


def _err_cqe(wqe, qpn, status, opcode=128):
    """The error CQE of receive WQE ``wqe`` (index, wr_id)."""
    return {"wr_id": wqe[1], "byte_len": 0, "qpn": qpn, "status": status, "opcode": opcode,
            "flags": 0, "imm": bytes(4)}


class _Errors:
    """What the phases of :func:`errors` share: the bench, PMTU 256, and their helpers."""

    def __init__(self, tb):
        self.tb, self.rng, self.pmtu = tb, tb.rng, 256

    def run(self, pkts, dones=None, cqe_over=None):
        """Send ``pkts``, with their ``done`` and CQE replaced where given (by index)."""
        for k, p in enumerate(pkts):
            f, chunk, done, cqe = p
            if dones is not None:
                done = dones[k]
            if cqe_over is not None and k in cqe_over:
                cqe = cqe_over[k]
            self.tb.send_exe(f, chunk, done, cqe)

    async def reset_qp(self, qpn):
        """Reset ``qpn`` once every command sent so far is done."""
        tb = self.tb
        await wait_until(tb.dut, lambda: len(tb.done.items) >= len(tb.expect_done), 50000,
                         "drain")
        tb.qp_reset.put({"qpn": qpn})
        tb.rq_index[qpn] = 0            # RESET restarts the ring at 0
        for _ in range(3):
            await RisingEdge(tb.dut.clk)


async def _errors_receive(e):
    """Receive-side errors: overflow, lkey, num_sge, range."""
    tb, rng, pmtu, run, err_cqe, reset_qp = e.tb, e.rng, e.pmtu, e.run, _err_cqe, e.reset_qp
    # 1. SEND_ONLY longer than the buffer: 0x63, LOC_QP_OP_ERR, nothing written
    sges = [(BUF + 0x13, 100, K_RECV)]
    wqe = tb.post_wqe(2, sges)
    run(tb.message(2, "send", 200, pmtu, sges=sges, wqe=wqe, place=False),
        dones=[(1, 0x63)], cqe_over={0: err_cqe(wqe, 2, 2)})
    # younger command of the dead QP 2: skipped (no fetch, no write, no CQE), done (0, 0)
    sges = [(BUF + 0x200, 100, K_RECV)]
    run(tb.message(2, "send", 50, pmtu, sges=sges, wqe=(tb.rq_index[2], 0), place=False),
        cqe_over={0: None})
    await reset_qp(2)
    # 2. overflow on the LAST packet: FIRST placed, LAST not
    sges = [(BUF + 0x305, 200, K_RECV), (BUF + 0x411, 100, K_RECV)]
    wqe = tb.post_wqe(2, sges)
    data = rng.randbytes(pmtu + 100)
    pk = tb.message(2, "send", pmtu + 100, pmtu, sges=sges, wqe=wqe, place=False, data=data)
    tb._place_sges(sges, data[:pmtu])
    run(pk, dones=[(0, 0), (1, 0x63)], cqe_over={1: err_cqe(wqe, 2, 2)})
    await reset_qp(2)
    # 3. lkey of another PD; 4. lkey without LOCAL_WRITE; 5. num_sge = 4; 6, 7. the SGEs
    # past num_sge (1, 2) hold lengths that would fit the message: they are not counted, so
    # the message overflows the buffer
    for q, sg, nsge in ((3, [(BUF + 0x600, 64, K_OTHERPD)], None),
                        (3, [(BUF + 0x700, 32, K_RECV), (BUF + 0x740, 64, K_NOLW)], None),
                        (3, [(BUF + 0x800, 64, K_RECV)], 4),
                        (3, [(BUF + 0x900, 64, K_RECV), (BUF + 0xA00, 200, K_RECV),
                             (BUF + 0xB00, 200, K_RECV)], 1),
                        (3, [(BUF + 0x900, 32, K_RECV), (BUF + 0x940, 32, K_RECV),
                             (BUF + 0xA00, 200, K_RECV)], 2)):
        wqe = tb.post_wqe(q, sg, num_sge=nsge)
        run(tb.message(q, "send", 80, pmtu, sges=sg, wqe=wqe, place=False),
            dones=[(1, 0x63)], cqe_over={0: err_cqe(wqe, q, 2)})
        await reset_qp(q)
    # 8. range outside the key: SGE past the MR end
    sg = [(BUF + BUF_LEN - 16, 64, K_RECV)]
    wqe = tb.post_wqe(3, sg)
    run(tb.message(3, "send", 40, pmtu, sges=sg, wqe=wqe, place=False),
        dones=[(1, 0x63)], cqe_over={0: err_cqe(wqe, 3, 2)})
    await reset_qp(3)


async def _errors_write(e):
    """RDMA WRITE errors: rkey, off the key's end, zero length."""
    tb, rng, pmtu, run, err_cqe, reset_qp = e.tb, e.rng, e.pmtu, e.run, _err_cqe, e.reset_qp
    # 7. RDMA WRITE with an unknown rkey: 0x62, no CQE; WRITE_ONLY_WITH_IMM: CQE REM_ACCESS_ERR
    run(tb.message(4, "write", 40, pmtu, va=IOVA_W + 0x100, rkey=0xDEAD, place=False),
        dones=[(1, 0x62)])
    await reset_qp(4)
    wqe = tb.post_wqe(4, [])
    run(tb.message(4, "write_imm", 40, pmtu, wqe=wqe, va=IOVA_W + 0x100, rkey=0xDEAD,
                   imm=0x01020304, place=False),
        dones=[(1, 0x62)], cqe_over={0: err_cqe(wqe, 4, 10, 129)})
    await reset_qp(4)
    # a multi-packet WRITE running off the key's end: the FIRST lands, the MIDDLE is refused
    va = IOVA_W + WBUF_LEN - pmtu - 8
    data = rng.randbytes(3 * pmtu)
    pk = tb.message(4, "write", 3 * pmtu, pmtu, va=va, place=False, data=data)
    tb.place(WBUF + (va - IOVA_W), data[:pmtu])
    run(pk[:2], dones=[(0, 0), (1, 0x62)])
    run(pk[2:], dones=[(0, 0)])            # younger: skipped
    await reset_qp(4)
    # 8. zero-length WRITE with a bad rkey: not checked; WRITE_ONLY_WITH_IMM of 0 bytes
    run(tb.message(4, "write", 0, pmtu, va=0, rkey=0xBAD))
    wqe = tb.post_wqe(4, [])
    run(tb.message(4, "write_imm", 0, pmtu, wqe=wqe, va=0, rkey=0xBAD, imm=0xA1B2C3D4))


async def _errors_invalidate_psn(e):
    """Invalidate accepted and refused; errors decided by PSN Check."""
    tb, rng, pmtu, run, err_cqe, reset_qp = e.tb, e.rng, e.pmtu, e.run, _err_cqe, e.reset_qp
    # 9. SEND with invalidate: fast-reg MR accepted, then its key fails as an lkey
    sg = [(BUF + 0x900, 300, K_RECV)]
    wqe = tb.post_wqe(5, sg)
    run(tb.message(5, "send_inv", 300, pmtu, sges=sg, wqe=wqe, inv_key=K_FAST))
    sg = [(FAST_BUF + 0x10, 64, K_FAST)]
    wqe = tb.post_wqe(5, sg)
    run(tb.message(5, "send", 20, pmtu, sges=sg, wqe=wqe, place=False),
        dones=[(1, 0x63)], cqe_over={0: err_cqe(wqe, 5, 2)})
    await reset_qp(5)
    # refused invalidate (ordinary MR): data placed, 0x1F, CQE REM_INV_REQ_ERR
    sg = [(BUF + 0xA00, 40, K_RECV), (BUF + 0xA40, 500, K_RECV)]
    wqe = tb.post_wqe(5, sg)
    run(tb.message(5, "send_inv", 2 * pmtu + 5, pmtu, sges=sg, wqe=wqe, inv_key=K_RECV),
        dones=[(0, 0), (0, 0), (1, 0x1F)], cqe_over={2: err_cqe(wqe, 5, 9)})
    await reset_qp(5)
    # 10. errors decided by PSN Check (status != 0): with a WQE taken here, and with one held
    sg = [(BUF + 0xD00, 100, K_RECV)]
    wqe = tb.post_wqe(6, sg)
    f = tb.message(6, "send", 30, pmtu, sges=sg, wqe=wqe, place=False)[0][0]
    f.update(status=9, payload_len=30)             # no beats come with status != 0
    tb.send_exe(f, b"", (1, 0), err_cqe(wqe, 6, 9))
    await reset_qp(6)
    sg = [(BUF + 0xE00, 600, K_RECV)]
    wqe = tb.post_wqe(6, sg)
    data = rng.randbytes(pmtu)
    pk = tb.message(6, "send", 2 * pmtu, pmtu, sges=sg, wqe=wqe, place=False, data=data * 2)
    tb._place_sges(sg, data)
    run(pk[:1])
    f = dict(pk[1][0], status=9, wqe=0, comp=0, payload_len=pmtu)
    tb.send_exe(f, b"", (1, 0), err_cqe(wqe, 6, 9))
    await reset_qp(6)


async def _errors_cq_full_flush(e):
    """CQ full; flush of a QP in ERROR."""
    tb, pmtu, run, err_cqe, reset_qp = e.tb, e.pmtu, e.run, _err_cqe, e.reset_qp
    # 11. CQ full (CQ 2 of 2 entries): the third completion gets (1, 0), event 2, no write
    await tb.set_cq(2, CQ_BASE + 0x4000, 1)
    for k in range(3):
        sg = [(BUF + 0xF00 + 0x40 * k, 40, K_RECV)]
        wqe = tb.post_wqe(7, sg)
        run(tb.message(7, "send", 30, pmtu, sges=sg, wqe=wqe, cqn=2, place=k < 2),
            dones=[(0, 0) if k < 2 else (1, 0)], cqe_over=None if k < 2 else {0: None})
    await reset_qp(7)
    # 12. flush: WQE 0 completes, WQE 1 fails (FIRST longer than the buffer), then a flush up
    # to the producer (3) completes WQE 2 only; a doorbell in ERROR (producer 5) flushes 3 and
    # 4; a flush behind the completion index does nothing. Then the QP is dead until reset.
    wqes = []
    for k in range(5):
        sg = [(BUF + 0x1300 + 0x100 * k, 0x80, K_RECV)]
        wqes.append((sg, tb.post_wqe(6, sg)))
    run(tb.message(6, "send", 0x70, pmtu, sges=wqes[0][0], wqe=wqes[0][1]))
    run(tb.message(6, "send", 2 * pmtu, pmtu, sges=wqes[1][0], wqe=wqes[1][1], place=False)[:1],
        dones=[(1, 0x63)], cqe_over={0: err_cqe(wqes[1][1], 6, 2)})
    await wait_until(tb.dut, lambda: len(tb.done.items) >= len(tb.expect_done), 50000, "drain")
    fl = {"qpn": 6, "rcqn": 1, "rq_base": rq_base(6), "rq_log": RQ_LOG}
    tb.flush.put(dict(fl, index=3))
    tb.cqes[1].append(err_cqe(wqes[2][1], 6, 5))
    tb.flush.put(dict(fl, index=5))
    tb.cqes[1] += [err_cqe(wqes[3][1], 6, 5), err_cqe(wqes[4][1], 6, 5)]
    tb.flush.put(dict(fl, index=4))
    sg = [(BUF + 0x1900, 0x80, K_RECV)]
    run(tb.message(6, "send", 0x10, pmtu, sges=sg, wqe=(5, 0), place=False),
        cqe_over={0: None})
    await tb.finish()
    await reset_qp(6)
    assert [(e["type"], e["number"]) for e in tb.cq_event.items] == [(2, 2)], tb.cq_event.items
    assert not tb.event.items and not tb.fault.items


async def _errors_faults(e):
    """Host-memory write and WQE read faults."""
    tb, pmtu, run, err_cqe, reset_qp = e.tb, e.pmtu, e.run, _err_cqe, e.reset_qp
    # 12. write fault: event 4 + fault {qpn}; 13. WQE read fault: (1, 0), event 4, no CQE
    tb.mem.add_fault(BUF + 0x1100, 0x40, "w", AxiResp.SLVERR)
    sg = [(BUF + 0x1100, 0x40, K_RECV)]
    wqe = tb.post_wqe(3, sg)
    pk = tb.message(3, "send", 0x20, pmtu, sges=sg, wqe=wqe, place=False)
    tb.send_exe(*pk[0][:3], err_cqe(wqe, 3, 2))
    await wait_until(tb.dut, lambda: tb.fault.items, 20000, "write fault")
    assert [e["qpn"] for e in tb.fault.items] == [3]
    assert [(e["type"], e["number"]) for e in tb.event.items] == [(4, 3)]
    await reset_qp(3)
    # (with the prefetch: the WQE is read ahead after its doorbell, that read fails silently,
    # the planner reads it again and reports the fault)
    idx = tb.rq_index[2]
    bad = rq_base(2) + 64 * (idx % (1 << RQ_LOG))
    tb.mem.add_fault(bad, 64, "r", AxiResp.DECERR)
    n_reads = len(tb.mem.reads)
    sg = [(BUF + 0x1200, 64, K_RECV)]
    wqe = tb.post_wqe(2, sg)
    for _ in range(200):
        await RisingEdge(tb.dut.clk)
    assert len(tb.event.items) == 1, "a failed prefetch raised an event"
    run(tb.message(2, "send", 16, pmtu, sges=sg, wqe=wqe, place=False), dones=[(1, 0)],
        cqe_over={0: None})
    await wait_until(tb.dut, lambda: len(tb.event.items) >= 2, 20000, "read fault")
    assert (tb.event.items[1]["type"], tb.event.items[1]["number"]) == (4, 2)
    nread = sum(1 for (a, _, _) in tb.mem.reads[n_reads:] if a - a % (W // 8) <= bad < a + 64)
    assert nread == (2 if knob("EXECUTE_PREFETCH") else 1), nread
    tb.mem.clear_faults()
    await tb.finish()


@cocotb.test()
async def errors(dut):
    """Every error path: overflow, bad lkey, num_sge, rkey, zero-length WRITE, invalidate,
    PSN-Check errors, dead QPs and qp_reset, CQ full, write and read faults."""
    tb = TB(dut, seed=5)
    await tb.start()
    e = _Errors(tb)
    await _errors_receive(e)
    await _errors_write(e)
    await _errors_invalidate_psn(e)
    await _errors_cq_full_flush(e)
    await _errors_faults(e)


class _Prefetch:
    """What the phases of :func:`prefetch` share: the bench, PMTU 256, the poison WQE in the
    ring slot past the producer, and their helpers."""

    def __init__(self, tb):
        self.tb, self.pmtu = tb, 256
        self.poison = tb.wqe_bytes([(BUF + 0xF000, 0x800, K_RECV)], wr_id=0xBAD)

    async def drain(self, extra=0):
        """Wait until every command is done and nothing is being sent, then ``extra`` cycles."""
        tb = self.tb
        await wait_until(tb.dut, lambda: len(tb.done.items) >= len(tb.expect_done)
                         and not tb.rq_post.busy and not tb.exe.busy, 50000, "drain")
        for _ in range(extra):
            await RisingEdge(tb.dut.clk)

    def ring_reads(self, base, idx):
        """Host-memory reads so far that covered WQE ``idx`` of the ring at ``base``."""
        a = base + 64 * (idx % (1 << RQ_LOG))
        return sum(1 for (addr, _, _) in self.tb.mem.reads
                   if addr - addr % (W // 8) <= a < addr + 64)


async def _prefetch_lazy(p, cursor):
    """A: only posted WQEs are read ahead."""
    tb, rng, pmtu, poison, drain = p.tb, p.tb.rng, p.pmtu, p.poison, p.drain
    # A. lazy posting on three QPs: slot idx+1 holds a poison WQE until it is posted
    for rnd in range(6):
        for q in rng.sample([2, 3, 4], 3):
            idx = tb.rq_index.get(q, 0)
            tb.mem.write(rq_base(q) + 64 * ((idx + 1) % (1 << RQ_LOG)), poison)
            length = rng.choice([0, 5, 100, pmtu, 2 * pmtu + 17])
            sges, cursor = alloc_sges(tb, cursor, length, rng.randint(1, 3))
            wqe = tb.post_wqe(q, sges)
            for p in tb.message(q, rng.choice(["send", "send_imm"]), length, pmtu, sges=sges,
                                wqe=wqe, imm=rng.getrandbits(32)):
                tb.send_exe(*p)
            if rng.random() < 0.5:
                await drain(rng.randrange(0, 200))
    await drain(200)
    return cursor


async def _prefetch_reset(p, cursor):
    """B: a QP reset voids what the pool holds."""
    tb, dut, pmtu, drain, ring_reads = p.tb, p.tb.dut, p.pmtu, p.drain, p.ring_reads
    # B. a QP reset voids what the pool holds for the QP: WQE 0 of QP 5 read ahead, never
    # used, then the QP is reset and a new WQE 0 posted; then the same with WQE 1
    sges, cursor = alloc_sges(tb, cursor, 50, 1)
    tb.post_wqe(5, [(BUF + 0xF400, 0x100, K_RECV)])
    await drain(300)
    assert ring_reads(rq_base(5), 0) == 1, "WQE 0 of QP 5 was not prefetched"
    tb.qp_reset.put({"qpn": 5})
    tb.rq_index[5] = 0
    for _ in range(5):
        await RisingEdge(dut.clk)
    w = tb.post_wqe(5, sges)
    for p in tb.message(5, "send", 50, pmtu, sges=sges, wqe=w):
        tb.send_exe(*p)
    await drain(300)
    tb.qp_reset.put({"qpn": 5})
    tb.rq_index[5] = 0
    for k in range(3):
        sges, cursor = alloc_sges(tb, cursor, 50, 1)
        w = tb.post_wqe(5, sges)
        if k == 0:
            first = (w, sges)
    for p in tb.message(5, "send", 50, pmtu, sges=first[1], wqe=first[0]):
        tb.send_exe(*p)
    await drain(300)
    assert ring_reads(rq_base(5), 1) == 1, "WQE 1 of QP 5 was not prefetched"
    tb.qp_reset.put({"qpn": 5})
    tb.rq_index[5] = 0
    for _ in range(5):
        await RisingEdge(dut.clk)
    for k in range(2):
        sges, cursor = alloc_sges(tb, cursor, 70, 2)
        w = tb.post_wqe(5, sges)
        for p in tb.message(5, "send", 70, pmtu, sges=sges, wqe=w):
            tb.send_exe(*p)
    await drain(300)
    return cursor


async def _prefetch_moved(p, cursor):
    """C: a WQE of a moved ring is not used."""
    tb, pmtu, drain, ring_reads = p.tb, p.pmtu, p.drain, p.ring_reads
    # C. the ring moves (SET_QP with a new base): the WQE prefetched from the old ring is
    # not used for a command naming the new one
    sges, cursor = alloc_sges(tb, cursor, 40, 1)
    w0 = tb.post_wqe(6, sges)
    tb.post_wqe(6, [(BUF + 0xF800, 0x100, K_RECV)])
    for p in tb.message(6, "send", 40, pmtu, sges=sges, wqe=w0):
        tb.send_exe(*p)
    await drain(300)
    assert ring_reads(rq_base(6), 1) == 1, "WQE 1 of QP 6 was not prefetched"
    nb = rq_base(6) + 0x800
    sges, cursor = alloc_sges(tb, cursor, 90, 1)
    tb.wr_id += 0x1_0001
    tb.mem.write(nb + 64, tb.wqe_bytes(sges, wr_id=tb.wr_id))
    tb.doorbell(6, nb)
    for p in tb.message(6, "send", 90, pmtu, sges=sges, wqe=(1, tb.wr_id)):
        p[0]["rq_base"] = nb
        tb.send_exe(*p)
    await drain(100)
    return cursor


async def _prefetch_ahead(p, cursor):
    """D: WQEs posted ahead, each read once."""
    tb, rng, pmtu, drain, ring_reads = p.tb, p.tb.rng, p.pmtu, p.drain, p.ring_reads
    # D. four WQEs posted ahead on QP 7: each read exactly once, before its message
    posted = []
    for k in range(4):
        sges, cursor = alloc_sges(tb, cursor, 300, rng.randint(1, 3))
        posted.append((tb.post_wqe(7, sges), sges))
    await drain(200)
    for k, (w, sges) in enumerate(posted):
        assert ring_reads(rq_base(7), k) == 1, f"WQE {k} of QP 7 not read ahead"
        for p in tb.message(7, "send", 300, pmtu, sges=sges, wqe=w):
            tb.send_exe(*p)
        await drain(200)
    assert all(ring_reads(rq_base(7), k) == 1 for k in range(4))
    return cursor


async def _prefetch_deep(p, cursor):
    """E: PREFETCH_DEPTH WQEs read ahead, each once."""
    tb, rng, pmtu, poison = p.tb, p.tb.rng, p.pmtu, p.poison
    drain, ring_reads = p.drain, p.ring_reads
    # E. PREFETCH_DEPTH-deep prefetch: six WQEs posted ahead on QP 1 (the slot past the
    # producer holds a poison WQE): WQEs 0 .. depth − 1 are read ahead, not the next; then six
    # small messages back to back: a take of WQE i keeps the slots of i+1 .. i+depth−1 (no
    # second read), each WQE is read exactly once and nothing past the producer
    n_e = 6
    tb.mem.write(rq_base(1) + 64 * (n_e % (1 << RQ_LOG)), poison)
    posted = []
    for k in range(n_e):
        sges, cursor = alloc_sges(tb, cursor, 64, rng.randint(1, 2))
        posted.append((tb.post_wqe(1, sges), sges))
    await drain(300)
    ahead = [ring_reads(rq_base(1), k) for k in range(PREFETCH_DEPTH + 1)]
    assert ahead == [1] * PREFETCH_DEPTH + [0], ahead
    for w, sges in posted:
        for p in tb.message(1, "send", rng.choice([0, 8, 33, 64]), pmtu, sges=sges, wqe=w):
            tb.send_exe(*p)
    await drain(300)
    got = [ring_reads(rq_base(1), k) for k in range(n_e + 1)]
    assert got == [1] * n_e + [0], f"reads of QP 1's WQEs 0..{n_e}: {got}"
    return cursor


async def _prefetch_doorbells(p, cursor):
    """G: the next index written while doorbells come."""
    tb, dut, rng, pmtu, poison = p.tb, p.tb.dut, p.tb.rng, p.pmtu, p.poison
    drain, ring_reads = p.drain, p.ring_reads
    # G. small messages back to back on QP 0 while another QP's doorbells (QP 3, its producer
    # index again: nothing new to read) come in every cycle: a take's next index shares the
    # per-QP row's write port with the doorbells and waits until they stop. Then one more WQE
    # is posted on QP 0: it is read ahead once and no WQE of QP 0 is read twice (with the
    # next index lost, the prefetcher would take a WQE already done for the next one)
    n_g = 6
    tb.mem.write(rq_base(0) + 64 * ((n_g + 1) % (1 << RQ_LOG)), poison)
    posted = []
    for k in range(n_g):
        sges, cursor = alloc_sges(tb, cursor, 64, rng.randint(1, 2))
        posted.append((tb.post_wqe(0, sges), sges))
    await drain(300)
    n_done = len(tb.expect_done)

    async def doorbells():
        while len(tb.done.items) < n_done + n_g:
            tb.doorbell(3)
            await RisingEdge(dut.clk)
        for _ in range(20):
            tb.doorbell(3)
            await RisingEdge(dut.clk)
    storm = cocotb.start_soon(doorbells())
    for w, sges in posted:
        for p in tb.message(0, "send", rng.choice([0, 8, 33, 64]), pmtu, sges=sges, wqe=w):
            tb.send_exe(*p)
    await storm
    await drain(300)
    sges, cursor = alloc_sges(tb, cursor, 64, 1)
    w = tb.post_wqe(0, sges)
    await drain(300)
    got = [ring_reads(rq_base(0), k) for k in range(n_g + 2)]
    assert got == [1] * (n_g + 1) + [0], f"reads of QP 0's WQEs 0..{n_g + 1}: {got}"
    for p in tb.message(0, "send", 8, pmtu, sges=sges, wqe=w):
        tb.send_exe(*p)
    await drain(100)
    return cursor


async def _prefetch_moved_mid(p, cursor):
    """F: a ring moved in the middle of a message."""
    tb, dut, pmtu, drain, ring_reads = p.tb, p.tb.dut, p.pmtu, p.drain, p.ring_reads
    # F. the ring moves in the middle of a message: QP 6's SEND_FIRST takes WQE 0 from the pool
    # (read from ring A); its SEND_LAST names ring B, whose WQE 0 has another wr_id. The slot
    # still holds index 0 of ring A: the last packet must read ring B's WQE 0 (its wr_id in the
    # CQE), not use the slot
    tb.qp_reset.put({"qpn": 6})
    tb.rq_index[6] = 0
    for _ in range(5):
        await RisingEdge(dut.clk)
    reads_a = ring_reads(rq_base(6), 0)
    sges, cursor = alloc_sges(tb, cursor, 300, 1)
    tb.post_wqe(6, sges)
    await drain(300)
    assert ring_reads(rq_base(6), 0) == reads_a + 1, "WQE 0 of QP 6 was not prefetched"
    ring_b = rq_base(6) + 0xC00
    tb.wr_id += 0x1_0001
    tb.mem.write(ring_b, tb.wqe_bytes(sges, wr_id=tb.wr_id))
    first, last = tb.message(6, "send", 300, pmtu, sges=sges, wqe=(0, tb.wr_id))
    tb.send_exe(*first)
    await drain(50)
    last[0]["rq_base"] = ring_b
    tb.send_exe(*last)
    await drain(100)
    assert ring_reads(ring_b, 0) == 1, "ring B's WQE 0 was not read for the SEND_LAST"
    return cursor


async def _prefetch_dec_claim(p, cursor):
    """H: a doorbell's claim in every cycle around the planner's DEC."""
    tb, dut, pmtu, drain, ring_reads = p.tb, p.tb.dut, p.pmtu, p.drain, p.ring_reads
    # H. QP 4's WQE posted (doorbell) d cycles before its own command, or before QP 2's
    # command (QP 2's WQE read ahead before): for some d the prefetcher's claim meets the
    # planner's DEC. A claim of the WQE the planner is taking is held off there (it would be
    # a second read); another QP's claim goes ahead. Each WQE is read exactly once.
    sges, cursor = alloc_sges(tb, cursor, 40, 1)
    wa = (tb.post_wqe(2, sges), sges)
    await drain(200)
    for d in range(14):
        for own in (True, False):
            sges_b, cursor = alloc_sges(tb, cursor, 40, 1)
            ib = tb.rq_index.get(4, 0)
            rb = ring_reads(rq_base(4), ib)
            ra = ring_reads(rq_base(2), wa[0][0])
            wb = tb.post_wqe(4, sges_b)
            for _ in range(d):
                await RisingEdge(dut.clk)
            q, w, sg = (4, wb, sges_b) if own else (2, wa[0], wa[1])
            for pk in tb.message(q, "send", 40, pmtu, sges=sg, wqe=w):
                tb.send_exe(*pk)
            await drain(100)
            assert ring_reads(rq_base(4), ib) == rb + 1, f"d={d} own={own}: QP 4's WQE reads"
            if not own:
                assert ring_reads(rq_base(2), wa[0][0]) == ra, f"d={d}: QP 2's WQE read again"
                for pk in tb.message(4, "send", 40, pmtu, sges=sges_b, wqe=wb):
                    tb.send_exe(*pk)
                sges, cursor = alloc_sges(tb, cursor, 40, 1)
                wa = (tb.post_wqe(2, sges), sges)
                await drain(200)
                assert ring_reads(rq_base(4), ib) == rb + 1, f"d={d}: QP 4's WQE read again"
    for pk in tb.message(2, "send", 40, pmtu, sges=wa[1], wqe=wa[0]):
        tb.send_exe(*pk)
    await drain(100)
    return cursor


@cocotb.test()
async def prefetch(dut):
    """WQE prefetch: only posted WQEs are read ahead (the next ring slot holds a poison WQE
    until it is posted), a QP reset and a changed ring base void what the pool holds, and
    WQEs posted ahead are read once, before their message arrives (pool hits); two deep: a
    take keeps the next WQE's slot, small messages back to back read each WQE once; a ring
    moved in the middle of a message is not served from the slot of the old one; a take's
    next index is kept while another QP's doorbells come; a doorbell's claim in any cycle
    around the planner's DEC reads each WQE once."""
    tb = TB(dut, seed=knob("EXECUTE_SEED") + 100)
    await tb.start()
    p = _Prefetch(tb)
    cursor = BUF
    for phase in (_prefetch_lazy, _prefetch_reset, _prefetch_moved, _prefetch_ahead,
                  _prefetch_deep, _prefetch_doorbells, _prefetch_moved_mid, _prefetch_dec_claim):
        cursor = await phase(p, cursor)
    assert cursor < BUF + 0xF000
    await tb.finish()
    assert not tb.event.items and not tb.fault.items


@cocotb.test()
async def evict(dut):
    """The WQE store loses the WQE of a message in progress: SENDs of four packets open on all
    eight QPs at once, their packets interleaved, more messages than the pool has slots; a QP
    whose WQE was evicted reads it again from its ring slot (it stays there until its
    completion). Data, CQEs and ``done`` against the model, and some WQEs read more than once
    (the re-read happened)."""
    tb = TB(dut, seed=knob("EXECUTE_SEED") + 200)
    await tb.start()
    pmtu = 256
    rng = tb.rng
    cursor = BUF
    qps = list(range(8))

    def wqe_reads(qpn, idx):
        a = rq_base(qpn) + 64 * (idx % (1 << RQ_LOG))
        return sum(1 for (addr, _, _) in tb.mem.reads if addr - addr % (W // 8) <= a < addr + 64)

    posted = []
    for rnd in range(3):
        streams = {}
        for q in qps:
            length = 3 * pmtu + rng.randrange(1, pmtu)
            sges, cursor = alloc_sges(tb, cursor, length, rng.randint(1, 3),
                                      zero=rng.random() < 0.3)
            wqe = tb.post_wqe(q, sges)
            posted.append((q, wqe[0]))
            streams[q] = tb.message(q, rng.choice(["send", "send_imm", "send"]), length, pmtu,
                                    sges=sges, wqe=wqe, imm=rng.getrandbits(32))
            if rnd == 1:
                # the later packets' ``rq_index`` is not used: the WQE is the one the QP took
                for p in streams[q][1:]:
                    p[0]["rq_index"] = (wqe[0] + 7) & 0xFFFF
        # every QP's first packet, then round robin (in random QP order) to the last
        while any(streams.values()):
            for q in rng.sample(qps, len(qps)):
                if streams[q]:
                    tb.send_exe(*streams[q].pop(0))
    assert cursor < BUF + BUF_LEN
    await tb.finish()
    assert not tb.event.items and not tb.fault.items
    reads = [wqe_reads(q, i) for q, i in posted]
    dut._log.info("WQE reads per WQE: %s", reads)
    assert min(reads) >= 1 and max(reads) > 1, f"no WQE was read again: {reads}"


@cocotb.test()
async def bench(dut):
    """Benchmarks on a quiet host (no back-pressure, writes answered at once, reads after
    $EXECUTE_READ_LATENCY cycles):

    * throughput: four 12 KiB SENDs (PMTU 4096, one SGE each) back to back on one QP, their
      WQEs posted as the first packet arrives; payload bytes per cycle from the first payload
      beat taken to the last (limit W/8);
    * latency: twelve 256-byte SEND_ONLY on one QP, one at a time, all WQEs posted as the
      first arrives; cycles from the request's last beat (the command's arrival plus its
      payload at one beat per cycle: the payload is stored whole upstream) to the last W beat
      of its CQE; the first message and the mean of the others.
    """
    lat = knob("EXECUTE_READ_LATENCY")
    pf = knob("EXECUTE_PREFETCH")
    tb = TB(dut, seed=3, backpressure=False, idle=0.0, max_latency=0)
    if lat:
        tb.mem.set_read_latency(lat)
    await tb.start()
    B = W // 8
    clk = dut.clk
    cyc = [0]
    exe_acc, pay_acc, cqe_done, aw, wl, paired = [], [], [], [], [], [0]
    cq_lo, cq_hi = CQ_BASE, CQ_BASE + (32 << CQ_LOG)

    async def monitor():
        while True:
            await FallingEdge(clk)          # the values the next rising edge takes
            await ReadOnly()
            cyc[0] += 1
            if int(dut.exe_valid.value) and int(dut.exe_ready.value):
                exe_acc.append(cyc[0])
            if int(dut.pay_tvalid.value) and int(dut.pay_tready.value):
                pay_acc.append(cyc[0])
            if int(dut.m_axi_awvalid.value) and int(dut.m_axi_awready.value):
                aw.append((int(dut.m_axi_awaddr.value), cyc[0]))
            if (int(dut.m_axi_wvalid.value) and int(dut.m_axi_wready.value)
                    and int(dut.m_axi_wlast.value)):
                wl.append(cyc[0])
            while len(aw) > paired[0] and len(wl) > paired[0]:   # the k-th WLAST ends AW k
                a, t = aw[paired[0]], wl[paired[0]]
                paired[0] += 1
                if cq_lo <= a[0] < cq_hi:
                    cqe_done.append(max(t, a[1]))

    cocotb.start_soon(monitor())
    cfg = {"W": W, "host read latency": lat, "prefetch": pf}

    # throughput
    pmtu, nmsg, length = 4096, 4, 12 * 1024
    pkts, cursor = [], BUF + 0x40
    for k in range(nmsg):
        sges = [(cursor, length, K_RECV)]
        cursor += length + 0x40
        pkts += tb.message(2, "send", length, pmtu, sges=sges, wqe=tb.post_wqe(2, sges))
    assert cursor <= BUF + BUF_LEN
    n0 = len(pay_acc)
    for p in pkts:
        tb.send_exe(*p)
    await tb.finish()
    beats = pay_acc[-1] - pay_acc[n0] + 1
    bpc = nmsg * length / beats
    record("execute", "payload bytes/cycle into host memory, 4 x 12 KiB SENDs on one QP", bpc,
           limit=B, target=B, unit="B/cycle", config=dict(cfg, pmtu=pmtu))

    # latency
    size, nlat = 256, 12
    posts = []
    for k in range(nlat):
        sges = [(BUF + 0x100 + 0x200 * k, size, K_RECV)]
        posts.append((tb.post_wqe(3, sges), sges))
    lats = []
    for k, (w, sges) in enumerate(posts):
        n_exe, n_cqe = len(exe_acc), len(cqe_done)
        for p in tb.message(3, "send", size, 256, sges=sges, wqe=w):
            tb.send_exe(*p)
        await wait_until(dut, lambda: len(cqe_done) > n_cqe, 20000, "CQE")
        lats.append(cqe_done[n_cqe] - (exe_acc[n_exe] + size // B - 1))
        for _ in range(50):
            await RisingEdge(clk)
    await tb.finish()
    floor = 2 + max(1, 32 // B)          # last payload B, then the CQE's AW and W beats
    record("execute", "cycles from a request's last beat to its CQE's last write, first "
           "256-byte SEND_ONLY on a QP", lats[0], limit=floor, unit="cycles", config=cfg)
    rest = sum(lats[1:]) / len(lats[1:])
    record("execute", "cycles from a request's last beat to its CQE's last write, 2nd-12th "
           "256-byte SEND_ONLY on a QP (mean)", rest, limit=floor, unit="cycles", config=cfg)
    dut._log.warning("BENCH W=%d rdlat=%d prefetch=%d: %.2f B/cycle (limit %d); latency "
                     "first %d, then %s", W, lat, pf, bpc, B, lats[0], lats[1:])
    assert bpc <= B


async def _scatter_run(dut, packets):
    """Feed ``packets`` (each ``(payload, [(src, len, lane), ...])``, the pieces contiguous
    from byte 0; any tail past the last piece is dropped by the closing piece) to the
    ScatterPath with idle input and back-pressured output, and check every output beat (bytes
    under strb, strb, last) against a Python model, and ``pkt_done`` once per packet."""
    from rnic.host.axi_master import write_beat_layout
    from rnic.resp.scatter import piece_layout
    B = W // 8
    pieces = Source(dut, "piece", piece_layout, dut.clk, rng=random.Random(8), idle=0.3)
    pay = AxiStreamSource(AxiStreamBus.from_prefix(dut, "pay"), dut.clk, dut.rst)
    prng = random.Random(9)
    pay.set_pause_generator(iter(lambda: prng.random() < 0.2, None))
    out = Sink(dut, "data", write_beat_layout(W), dut.clk, rng=random.Random(10), stall=0.3)
    await reset(dut)
    expect = []
    for payload, cut in packets:
        for a, n, lane in cut:
            pieces.put({"src": a, "len": n, "lane": lane, "end": 0})
            chunk = bytes(lane) + payload[a:a + n]
            chunk += bytes(-len(chunk) % B)
            nb = len(chunk) // B
            for k in range(nb):
                lo = lane if k == 0 else 0
                hi = (lane + n - 1) % B if k == nb - 1 else B - 1
                strb = sum(1 << i for i in range(lo, hi + 1))
                expect.append((chunk[k * B:(k + 1) * B], strb, int(k == nb - 1)))
        pieces.put({"src": 0, "len": 0, "lane": 0, "end": 1})
        pay.send_nowait(AxiStreamFrame(payload))
    done = [0]

    async def count():
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            done[0] += int(dut.pkt_done.value)

    cocotb.start_soon(count())
    npkt = len(packets)
    await wait_until(dut, lambda: len(out.items) >= len(expect) and done[0] >= npkt,
                     100000 + 4 * len(expect), "scatter output")
    for _ in range(20):
        await RisingEdge(dut.clk)
    assert len(out.items) == len(expect) and done[0] == npkt
    for k, (g, (data_, strb, last)) in enumerate(zip(out.items, expect)):
        gd = g["data"].to_bytes(B, "little")
        assert g["strb"] == strb and g["last"] == last, f"beat {k}: {g['strb']:x} {strb:x}"
        masked = bytes(gd[i] if strb >> i & 1 else 0 for i in range(B))
        assert masked == data_, f"beat {k}: {masked.hex()} expected {data_.hex()}"


@cocotb.test(skip=knob("EXECUTE_DUT") != "scatter")
async def scatter(dut):
    """ScatterPath alone: random packets cut into 1-4 contiguous pieces at random bus lanes
    (30 % of them with a dropped tail)."""
    rng = random.Random(7)
    B = W // 8
    packets = []
    for _ in range(60):
        plen = rng.choice([1, 2, B - 1, B, B + 1, rng.randrange(1, 700)])
        payload = rng.randbytes(plen)
        cuts = sorted(rng.sample(range(1, plen), min(plen - 1, rng.randint(0, 3))))
        bounds = [0] + cuts + [plen]
        if rng.random() < 0.3 and len(bounds) > 2:
            bounds = bounds[:-1]              # the tail is dropped by the closing piece
        packets.append((payload, [(a, b - a, rng.randrange(B))
                                  for a, b in zip(bounds, bounds[1:])]))
    await _scatter_run(dut, packets)


@cocotb.test(skip=knob("EXECUTE_DUT") != "scatter")
async def scatter_sweep(dut):
    """ScatterPath alone: every (source byte offset mod B, destination lane) pair, so every
    shift the realignment can make from every lane: B packets of B three-byte pieces (3 is odd:
    piece ``i`` starts at source offset 3·i, which runs through every residue mod B), packet
    ``t``'s piece ``i`` at lane (7·i + t) mod B; the pieces at the top lanes cross a beat."""
    rng = random.Random(11)
    B = W // 8
    packets = []
    for t in range(B):
        payload = rng.randbytes(3 * B)
        packets.append((payload, [(3 * i, 3, (7 * i + t) % B) for i in range(B)]))
    pairs = {(a % B, lane) for _, cut in packets for a, _, lane in cut}
    assert len(pairs) == B * B
    await _scatter_run(dut, packets)
