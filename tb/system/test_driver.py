"""The verbs-style driver's encodings against interface.md §4.2 and §5 (pure Python)."""
import asyncio
import struct

from sim.driver.verbs import Access, Cq, Cqe, Device, QpState, SendOp


class FakeMem:
    def __init__(self):
        self.b = bytearray(1 << 20)

    def write(self, a, d):
        self.b[a - 0x10000:a - 0x10000 + len(d)] = d

    def read(self, a, n):
        return bytes(self.b[a - 0x10000:a - 0x10000 + n])


class FakeRegs:
    def __init__(self):
        self.cmds, self.dbs = [], []

    async def command(self, op, index, args=(), check=True):
        self.cmds.append((op, index, list(args)))
        return 0, [0] * 16

    async def doorbell(self, name, number, value):
        self.dbs.append((name, number, value))


def test_qp_and_wqe_encoding():
    regs, mem = FakeRegs(), FakeMem()
    dev = Device(regs, mem, base=0x10000, size=1 << 20)

    async def go():
        cq = await dev.create_cq(3, 4)
        qp = await dev.create_qp(5, recv_cq=cq, send_cq=cq, pd=0x77, dest_qpn=0x123456,
                                 remote_mac=0x020000000002, remote_ip="10.0.0.2",
                                 udp_sport=0xC123, pmtu=4096, access=Access.REMOTE_WRITE,
                                 min_rnr_timer=12, timeout=14, retry_cnt=6, rnr_retry=5,
                                 rq_psn=0xABCDEF, sq_psn=0x10)
        await dev.modify_qp(qp, QpState.RTR)
        await dev.post_recv(qp, 0x1122334455667788, [(0x20000, 100, 0xAA), (0x30000, 5, 0xBB)])
        await dev.post_send(qp, 9, SendOp.SEND_WITH_IMM, [(0x40000, 64, 0xCC)],
                            imm=b"\xde\xad\xbe\xef", solicited=True)
        return cq, qp

    cq, qp = asyncio.run(go())
    op, idx, args = regs.cmds[0]
    assert (op, idx, args[:3]) == (3, 3, [cq.base, 0, 4])
    op, idx, a = regs.cmds[-1]
    assert (op, idx) == (1, 5)
    assert a[0] == 2 | (5 << 8) | (12 << 16) | (14 << 24)
    assert a[1] == 0x123456 and a[2] == 0xABCDEF and a[3] == 0x10
    assert a[4] == 0x77 | (0x02 << 16) and a[5] == 3 | (3 << 16)
    assert a[8] == 6 | (6 << 8) | (6 << 16) | (5 << 20)
    assert (a[11], a[12], a[13], a[14]) == (0x00000002, 0x0200, 0x0A000002, 0xC123)
    wqe = mem.read(qp.rq_base, 64)
    assert struct.unpack_from("<QI", wqe) == (0x1122334455667788, 2)
    assert struct.unpack_from("<QII", wqe, 16) == (0x20000, 100, 0xAA)
    assert struct.unpack_from("<QII", wqe, 32) == (0x30000, 5, 0xBB)
    swqe = mem.read(qp.sq_base, 64)
    assert swqe[8:12] == bytes([1, 0x03, 1, 0]) and swqe[12:16] == b"\xde\xad\xbe\xef"
    assert regs.dbs == [("RQ_DB", 5, 1), ("SQ_DB", 5, 1)]


def test_poll_cq_phase():
    regs, mem = FakeRegs(), FakeMem()
    dev = Device(regs, mem, base=0x10000, size=1 << 20)
    cq = asyncio.run(dev.create_cq(1, 1))          # two entries

    def put(slot, wr_id, phase):
        raw = bytearray(32)
        struct.pack_into("<QI", raw, 0, wr_id, 10)
        raw[12:16] = b"\x01\x02\x03\x04"
        struct.pack_into("<I", raw, 16, 7)
        raw[20], raw[21], raw[22], raw[31] = 0, 128, 2, phase
        mem.write(cq.base + 32 * slot, raw)

    put(0, 1, 1)
    got = asyncio.run(dev.poll_cq(cq))
    assert [c.wr_id for c in got] == [1] and got[0].imm == b"\x01\x02\x03\x04"
    assert asyncio.run(dev.poll_cq(cq)) == []           # slot 1 still has phase 0
    put(1, 2, 1)
    put(0, 3, 0)                                         # second pass: phase flips to 0
    assert [c.wr_id for c in asyncio.run(dev.poll_cq(cq))] == [2, 3]
    assert regs.dbs[-1] == ("CQ_DB", 1, 3)
