"""Python model of the requester's segmentation: the packets one send WQE must produce.

Written from interface.md §5.2 and roce-reference.md §5 (rxe's ``next_opcode_rc``,
``init_req_packet``), not from the RTL; the requester bench compares the hardware's frames with it.

* :func:`segment` → one dict per packet: ``opcode``, ``psn``, ``se``, ``ackreq``, ``padcnt``,
  ``off``/``len`` (the packet's slice of the message payload), ``reth`` (dict or None),
  ``imm`` (the 4 bytes of IMMDT/IETH as on the wire, or None).
* :func:`wqe_bytes` → the 64-byte send WQE of interface.md §5.2.
"""

import struct

__all__ = ["WrOp", "SEND", "SEND_WITH_IMM", "SEND_WITH_INV", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM",
           "SIGNALED", "SOLICITED", "MAX_NOACK", "segment", "wqe_bytes", "ext_bytes"]

SEND, SEND_WITH_IMM, SEND_WITH_INV, RDMA_WRITE, RDMA_WRITE_WITH_IMM = range(5)
WrOp = (SEND, SEND_WITH_IMM, SEND_WITH_INV, RDMA_WRITE, RDMA_WRITE_WITH_IMM)
SIGNALED, SOLICITED = 0x01, 0x02
MAX_NOACK = 64          # rxe RXE_MAX_PKT_PER_ACK: the 66th consecutive non-AckReq packet asks

# (first, middle, last, only) RC opcodes per WQE opcode
_OPS = {
    SEND: (0x00, 0x01, 0x02, 0x04),
    SEND_WITH_IMM: (0x00, 0x01, 0x03, 0x05),
    SEND_WITH_INV: (0x00, 0x01, 0x16, 0x17),
    RDMA_WRITE: (0x06, 0x07, 0x08, 0x0A),
    RDMA_WRITE_WITH_IMM: (0x06, 0x07, 0x09, 0x0B),
}
_RETH = {0x06, 0x0A, 0x0B}
_IMM4 = {0x03, 0x05, 0x09, 0x0B, 0x16, 0x17}


def ext_bytes(imm_field, opcode):
    """Wire bytes of the IMMDT/IETH of a WQE whose bytes 12–15 are ``imm_field`` (4 bytes):
    immediate data is stored in wire order, the rkey to invalidate little-endian."""
    if opcode == SEND_WITH_INV:
        return struct.pack(">I", struct.unpack("<I", imm_field)[0])
    return bytes(imm_field)


def segment(opcode, length, pmtu, *, flags=0, psn=0, imm=b"\0\0\0\0", raddr=0, rkey=0,
            noack=0):
    """The packets of one WQE. ``noack`` is the QP's count of consecutive non-AckReq packets
    before it; returns ``(packets, noack_after)``."""
    first_op, mid_op, last_op, only_op = _OPS[opcode]
    pkts, off = [], 0
    while True:
        n = min(length - off, pmtu)
        is_first, is_last = off == 0, off + n == length
        op = (only_op if is_last else first_op) if is_first else (last_op if is_last else mid_op)
        if is_last:
            ackreq, noack = 1, 0
        elif noack > MAX_NOACK:
            ackreq, noack = 1, 0
        else:
            ackreq, noack = 0, noack + 1
        se = int(is_last and bool(flags & SOLICITED)
                 and opcode in (SEND, SEND_WITH_IMM, SEND_WITH_INV, RDMA_WRITE_WITH_IMM))
        pkts.append(dict(
            opcode=op, psn=(psn + len(pkts)) & 0xFFFFFF, se=se, ackreq=ackreq,
            padcnt=(-n) & 3, off=off, len=n,
            reth=dict(va=raddr, rkey=rkey, dmalen=length) if op in _RETH else None,
            imm=ext_bytes(imm, opcode) if op in _IMM4 else None))
        off += n
        if is_last:
            return pkts, noack


def wqe_bytes(wr_id, opcode, flags, sges, *, imm=b"\0\0\0\0", raddr=0, rkey=0, num_sge=None):
    """64-byte send WQE; ``sges`` = [(addr, length, lkey), ...] (at most 2 stored)."""
    num = len(sges) if num_sge is None else num_sge
    b = struct.pack("<QBBBx4sQI4x", wr_id, opcode, flags, num, bytes(imm), raddr, rkey)
    for a, n, k in sges[:2]:
        b += struct.pack("<QII", a, n, k)
    return b.ljust(64, b"\0")
