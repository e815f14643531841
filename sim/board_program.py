"""The board sequencer's script, recorded from the project's own driver.

:func:`record` runs the verbs driver of ``sim/driver`` (the same code every cocotb test uses)
against a recorder instead of a bus: each ``write_dword`` becomes a ``("W", addr, data)`` step,
each read of CMD_STATUS a ``("POLL", addr)`` step (wait until busy clears, fail unless result is 0);
other reads (query results) are not needed and return 0. Host-memory writes of the driver (the
zeroed CQ ring, the receive WQE) land in a byte image that becomes the block RAM's initial
contents. The frame to play in is built by scapy (``sim/packets.py``), and so is the ACK the
core must answer with; the CQE expected in RAM follows interface.md §5.4.

The scenario is the book's 9-step SEND: one QP, one CQ, one MR, one posted receive, one
SEND_ONLY with AckReq; expected: the ACK for its PSN (MSN 1), the payload in the buffer and a
successful RECV CQE with phase 1. The result is a :class:`rnic.board.program.Program`.
"""

import asyncio
import struct

from rnic.board.program import MEM_BYTES, Program

__all__ = ["record", "QPN", "DEST_QPN", "PSN0", "PAYLOAD"]

QPN, DEST_QPN, PSN0, PD = 2, 0x11, 1000, 1
WR_ID = 0xB0A2D
PAYLOAD = bytes((7 * i + 3) & 0xFF for i in range(100))


class _Recorder:
    """Looks like cocotbext-axi's AxiLiteMaster to ``sim.driver.regs.Regs``."""

    def __init__(self, status_offset):
        self.steps = []
        self.status_offset = status_offset

    async def write_dword(self, addr, data):
        self.steps.append(("W", addr, data & 0xFFFFFFFF))

    async def read_dword(self, addr):
        if addr == self.status_offset:
            if not self.steps or self.steps[-1][0] != "POLL":
                self.steps.append(("POLL", addr))
        return 0


class _Mem:
    def __init__(self, size):
        self.data = bytearray(size)

    def write(self, addr, data):
        self.data[addr:addr + len(data)] = data

    def read(self, addr, n):
        return bytes(self.data[addr:addr + n])


def record(data_width=64):
    """Return the :class:`Program` of the 9-step SEND."""
    from rnic.control.regmap import BY_NAME
    from rnic.opcodes import Op, WcOpcode
    from sim.driver.regs import Regs
    from sim.driver.verbs import Access, Device
    from sim.packets import LOCAL_IP, LOCAL_MAC, REMOTE_IP, REMOTE_MAC, build_frame

    rec = _Recorder(BY_NAME["CMD_STATUS"].offset)
    mem = _Mem(MEM_BYTES)
    dev = Device(Regs(rec), mem, base=0, size=MEM_BYTES)
    out = {}

    async def script():
        await dev.open(LOCAL_MAC, LOCAL_IP)
        cq = await dev.create_cq(0, 2)
        qp = await dev.create_qp(QPN, recv_cq=cq, send_cq=cq, pd=PD, rq_log2=2, sq_log2=2,
                                 dest_qpn=DEST_QPN, remote_mac=REMOTE_MAC, remote_ip=REMOTE_IP,
                                 udp_sport=0xC123, pmtu=1024, rq_psn=PSN0,
                                 access=Access.REMOTE_WRITE, min_rnr_timer=12)
        await dev.connect(qp)
        buf = dev.alloc(256)
        await dev.reg_mr(0, key=0x1234, addr=buf, length=256, pd=PD,
                         access=Access.LOCAL_WRITE)
        await dev.post_recv(qp, WR_ID, [(buf, 256, 0x1234)])
        out.update(cq=cq, buf=buf)

    asyncio.run(script())
    frame = build_frame(Op.SEND_ONLY, PAYLOAD, psn=PSN0, ackreq=1, dqpn=QPN)
    ack = build_frame(Op.ACKNOWLEDGE, b"", psn=PSN0, dqpn=DEST_QPN,
                      aeth={"syndrome": 0x1F, "msn": 1},
                      src_mac=LOCAL_MAC, dst_mac=REMOTE_MAC, src_ip=LOCAL_IP, dst_ip=REMOTE_IP)
    cqe = bytearray(32)
    struct.pack_into("<QII", cqe, 0, WR_ID, len(PAYLOAD), 0)
    struct.pack_into("<I", cqe, 16, QPN)
    cqe[20], cqe[21], cqe[22], cqe[31] = 0, WcOpcode.RECV, 0, 1
    cq = out["cq"]
    return Program(steps=rec.steps, mem=mem.data, frame=frame, ack=ack,
                   checks=[(cq.base, bytes(cqe)), (out["buf"], PAYLOAD)], cqe_addr=cq.base)


if __name__ == "__main__":
    p = record()
    for s in p.steps:
        print(s[0], *(hex(x) for x in s[1:]))
    print(len(p.steps), "steps;", len(p.frame), "B frame;", len(p.ack), "B ACK;",
          [(hex(a), len(b)) for a, b in p.checks])
