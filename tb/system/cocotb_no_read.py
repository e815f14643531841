"""A core built without RDMA READ (``RnicConfig.read`` False), through the contract only: VERSION
reads 1.0; a READ request is refused as an atomic one (NAK 0x61, the QP to ERROR) even on a QP
with REMOTE_READ; a READ response is dropped and counted as 6; a send WQE of opcode 5 is a bad
opcode (LOC_QP_OP_ERR); SEND and RDMA WRITE work as with READ, both ways.
"""

import cocotb
from cocotb.triggers import ClockCycles

from rnic.ifaces import Counter
from rnic.opcodes import Op, WcOpcode, WcStatus
from sim.driver.verbs import Access, SendOp
from tb.system.cocotb_responder import PD, PSN0, TB

KEY, SLOT = 0x4321, 4
ERROR, RTS = 6, 3


async def _setup(dut, sq_psn=0):
    """The QP in RTS with REMOTE_READ and REMOTE_WRITE, and one 4 KiB buffer every access may
    use."""
    tb = TB(dut)
    await tb.start()
    await tb.dev.modify_qp(tb.qp, 0, access=Access.REMOTE_READ | Access.REMOTE_WRITE,
                           sq_psn=sq_psn)
    await tb.dev.connect(tb.qp)
    buf = tb.dev.alloc(4096, 4096)
    await tb.dev.reg_mr(SLOT, key=KEY, addr=buf, length=4096, pd=PD,
                        access=Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ)
    return tb, buf


@cocotb.test()
async def no_read_responder(dut):
    """VERSION 1.0; a SEND and an RDMA WRITE are placed and ACKed; a READ request to the QP
    (which has REMOTE_READ) gets NAK 0x61 at its PSN with the MSN not incremented, the QP goes
    to ERROR, and a SEND after it gets nothing."""
    tb, buf = await _setup(dut)
    assert await tb.regs.read("VERSION") == 0x00010000
    await tb.dev.post_recv(tb.qp, 7, [(buf, 1024, KEY)])
    payload = bytes(range(200))
    await tb.send(Op.SEND_ONLY, payload, psn=PSN0, ackreq=1)
    tb.expect_ack(await tb.recv_frame(), PSN0, 1)
    (cqe,) = await tb.wait_cqes(1)
    assert (cqe.wr_id, cqe.status, cqe.byte_len, cqe.opcode) == \
        (7, WcStatus.SUCCESS, 200, WcOpcode.RECV)
    assert tb.dev.read(buf, 200) == payload
    data = bytes((3 * i + 1) & 0xFF for i in range(300))
    await tb.send(Op.RDMA_WRITE_ONLY, data, psn=PSN0 + 1, ackreq=1,
                  reth={"va": buf + 2048, "rkey": KEY, "dmalen": len(data)})
    tb.expect_ack(await tb.recv_frame(), PSN0 + 1, 2)
    assert tb.dev.read(buf + 2048, len(data)) == data
    await tb.send(Op.RDMA_READ_REQUEST, b"", psn=PSN0 + 2, ackreq=1,
                  reth={"va": buf, "rkey": KEY, "dmalen": 64})
    tb.expect_ack(await tb.recv_frame(), PSN0 + 2, 2, syndrome=0x61)
    assert (await tb.dev.query_qp(tb.qp))["state"] == ERROR
    await tb.send(Op.SEND_ONLY, b"after", psn=PSN0 + 3, ackreq=1)
    await ClockCycles(dut.clk, 400)
    assert tb.sink.empty()


@cocotb.test()
async def no_read_requester(dut):
    """A posted SEND goes out and its ACK retires it; a READ response to the QP is dropped and
    counted as 6, changing nothing; a posted RDMA READ (WQE opcode 5) sends nothing and
    completes with LOC_QP_OP_ERR (opcode 0, as any bad opcode), and the QP goes to ERROR."""
    sq_psn = 0x200
    tb, buf = await _setup(dut, sq_psn=sq_psn)
    out = bytes((5 * i + 3) & 0xFF for i in range(100))
    tb.dev.write(buf, out)
    await tb.dev.post_send(tb.qp, 0x51, SendOp.SEND, [(buf, len(out), KEY)])
    d = await tb.recv_frame()
    assert (d["bth"]["opcode"], d["bth"]["psn"], d["payload"]) == (Op.SEND_ONLY, sq_psn, out)
    await tb.send(Op.ACKNOWLEDGE, b"", psn=sq_psn, aeth=dict(syndrome=0x1F, msn=1))
    (cqe,) = await tb.wait_cqes(1)
    assert (cqe.wr_id, cqe.status, cqe.opcode) == (0x51, WcStatus.SUCCESS, WcOpcode.SEND)
    # a READ response (with payload) to the RTS QP: dropped, counted as 6
    before = await tb.regs.counter(Counter.NO_QP)
    await tb.send(Op.RDMA_READ_RESPONSE_ONLY, bytes(64), psn=sq_psn + 1,
                  aeth=dict(syndrome=0x1F, msn=2))
    await ClockCycles(dut.clk, 200)
    assert await tb.regs.counter(Counter.NO_QP) == before + 1
    assert (await tb.dev.query_qp(tb.qp))["state"] == RTS
    assert tb.sink.empty() and not await tb.dev.poll_cq(tb.cq)
    # an RDMA READ WQE: a bad opcode
    await tb.dev.post_read(tb.qp, 0x52, [(buf + 1024, 64, KEY)], remote_addr=0x1000, rkey=7)
    (cqe,) = await tb.wait_cqes(1)
    assert (cqe.wr_id, cqe.status, cqe.opcode) == \
        (0x52, WcStatus.LOC_QP_OP_ERR, WcOpcode.SEND), cqe
    for _ in range(20):
        if (await tb.dev.query_qp(tb.qp))["state"] == ERROR:
            break
        await ClockCycles(dut.clk, 50)
    assert (await tb.dev.query_qp(tb.qp))["state"] == ERROR
    assert tb.sink.empty()
