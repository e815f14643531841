"""RC opcode table (``roce-reference.md`` §1.3), shared by hardware and Python.

Each RC opcode this design knows has a row of flags. The hardware decodes them with
:func:`opcode_info` (a ROM-like ``Switch`` built from this table) so that no block carries its
own copy of the table.
"""

from amaranth.lib import enum
from typing import NamedTuple

__all__ = ["Op", "OpInfo", "OPCODES", "OPCODES_NO_READ", "opcode_info_layout", "opcode_info", "CNP_OPCODE",
           "AethSyndrome", "WcStatus", "WcOpcode"]


class Op(enum.IntEnum, shape=8):
    SEND_FIRST = 0x00
    SEND_MIDDLE = 0x01
    SEND_LAST = 0x02
    SEND_LAST_WITH_IMMEDIATE = 0x03
    SEND_ONLY = 0x04
    SEND_ONLY_WITH_IMMEDIATE = 0x05
    RDMA_WRITE_FIRST = 0x06
    RDMA_WRITE_MIDDLE = 0x07
    RDMA_WRITE_LAST = 0x08
    RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09
    RDMA_WRITE_ONLY = 0x0A
    RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B
    RDMA_READ_REQUEST = 0x0C
    RDMA_READ_RESPONSE_FIRST = 0x0D
    RDMA_READ_RESPONSE_MIDDLE = 0x0E
    RDMA_READ_RESPONSE_LAST = 0x0F
    RDMA_READ_RESPONSE_ONLY = 0x10
    ACKNOWLEDGE = 0x11
    ATOMIC_ACKNOWLEDGE = 0x12
    COMPARE_SWAP = 0x13
    FETCH_ADD = 0x14
    SEND_LAST_WITH_INVALIDATE = 0x16
    SEND_ONLY_WITH_INVALIDATE = 0x17


CNP_OPCODE = 0x81


class OpInfo(NamedTuple):
    """Flags of one RC opcode.

    ``hdr_len`` counts BTH and extended headers; ``payload`` says the packet may carry payload.
    """
    req: bool       # a request (goes to the responder)
    ack: bool       # a response (goes to the requester's ACK handling)
    send: bool
    write: bool
    read: bool
    atomic: bool
    start: bool     # FIRST or ONLY
    end: bool       # LAST or ONLY
    rwr: bool       # consumes a receive WQE
    comp: bool      # generates a responder CQE
    reth: bool
    immdt: bool
    ieth: bool
    aeth: bool
    hdr_len: int
    payload: bool


def _i(req=0, ack=0, send=0, write=0, read=0, atomic=0, start=0, end=0, rwr=0, comp=0,
       reth=0, immdt=0, ieth=0, aeth=0, extra=0, payload=1):
    hdr = 12 + 16 * reth + 4 * immdt + 4 * ieth + 4 * aeth + extra
    return OpInfo(bool(req), bool(ack), bool(send), bool(write), bool(read), bool(atomic),
                  bool(start), bool(end), bool(rwr), bool(comp), bool(reth), bool(immdt),
                  bool(ieth), bool(aeth), hdr, bool(payload))


OPCODES = {
    Op.SEND_FIRST: _i(req=1, send=1, start=1, rwr=1),
    Op.SEND_MIDDLE: _i(req=1, send=1),
    Op.SEND_LAST: _i(req=1, send=1, end=1, comp=1),
    Op.SEND_LAST_WITH_IMMEDIATE: _i(req=1, send=1, end=1, comp=1, immdt=1),
    Op.SEND_ONLY: _i(req=1, send=1, start=1, end=1, rwr=1, comp=1),
    Op.SEND_ONLY_WITH_IMMEDIATE: _i(req=1, send=1, start=1, end=1, rwr=1, comp=1, immdt=1),
    Op.RDMA_WRITE_FIRST: _i(req=1, write=1, start=1, reth=1),
    Op.RDMA_WRITE_MIDDLE: _i(req=1, write=1),
    Op.RDMA_WRITE_LAST: _i(req=1, write=1, end=1),
    Op.RDMA_WRITE_LAST_WITH_IMMEDIATE: _i(req=1, write=1, end=1, comp=1, rwr=1, immdt=1),
    Op.RDMA_WRITE_ONLY: _i(req=1, write=1, start=1, end=1, reth=1),
    Op.RDMA_WRITE_ONLY_WITH_IMMEDIATE: _i(req=1, write=1, start=1, end=1, comp=1, rwr=1,
                                          reth=1, immdt=1),
    Op.RDMA_READ_REQUEST: _i(req=1, read=1, start=1, end=1, reth=1, payload=0),
    Op.RDMA_READ_RESPONSE_FIRST: _i(ack=1, start=1, aeth=1),
    Op.RDMA_READ_RESPONSE_MIDDLE: _i(ack=1),
    Op.RDMA_READ_RESPONSE_LAST: _i(ack=1, end=1, aeth=1),
    Op.RDMA_READ_RESPONSE_ONLY: _i(ack=1, start=1, end=1, aeth=1),
    Op.ACKNOWLEDGE: _i(ack=1, start=1, end=1, aeth=1, payload=0),
    Op.ATOMIC_ACKNOWLEDGE: _i(ack=1, start=1, end=1, aeth=1, extra=8, payload=0),
    Op.COMPARE_SWAP: _i(req=1, atomic=1, start=1, end=1, extra=28, payload=0),
    Op.FETCH_ADD: _i(req=1, atomic=1, start=1, end=1, extra=28, payload=0),
    Op.SEND_LAST_WITH_INVALIDATE: _i(req=1, send=1, end=1, comp=1, ieth=1),
    Op.SEND_ONLY_WITH_INVALIDATE: _i(req=1, send=1, start=1, end=1, rwr=1, comp=1, ieth=1),
}

#: The table of a core built without RDMA READ (``RnicConfig.read`` False, contract version
#: 1.0): a READ request has the flags of an atomic request (with its RETH), so the responder
#: refuses it as it refuses an atomic (NAK 0x61, the QP to ERROR), and ``read`` is 0 for every
#: opcode.
OPCODES_NO_READ = {**OPCODES, Op.RDMA_READ_REQUEST: _i(req=1, atomic=1, start=1, end=1, reth=1,
                                                       payload=0)}


def opcode_info_layout():
    from amaranth.lib import data
    return data.StructLayout({
        "known": 1, **{name: 1 for name in OpInfo._fields if name not in ("hdr_len",)},
        "hdr_len": 6,
    })


def opcode_info(m, opcode, *, name="opinfo", read=True):
    """Decode ``opcode`` (8-bit value) into a combinational ``opcode_info_layout()`` signal.

    ``known`` is 1 only for the RC opcodes of :data:`OPCODES`; every other value (UC, UD, CNP,
    0x15, 0x18–0x1F) decodes to all zeros. ``read`` False decodes by :data:`OPCODES_NO_READ`.
    """
    from amaranth.hdl import Signal
    info = Signal(opcode_info_layout(), name=name)
    with m.Switch(opcode):
        for op, row in (OPCODES if read else OPCODES_NO_READ).items():
            with m.Case(int(op)):
                m.d.comb += info.known.eq(1)
                for fname, value in row._asdict().items():
                    m.d.comb += getattr(info, fname).eq(int(value))
    return info


class AethSyndrome(enum.IntEnum, shape=8):
    ACK = 0x1F           # ACK, credits invalid
    RNR_NAK = 0x20       # | timer code
    NAK_PSN_SEQ = 0x60
    NAK_INV_REQ = 0x61
    NAK_REM_ACCESS = 0x62
    NAK_REM_OP = 0x63


class WcStatus(enum.IntEnum, shape=8):
    SUCCESS = 0
    LOC_QP_OP_ERR = 2
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13


class WcOpcode(enum.IntEnum, shape=8):
    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
    RECV = 128
    RECV_RDMA_WITH_IMM = 129
