"""Python model of the requester's segmentation: the packets one send WQE must produce.

Written from interface.md §5.2 and roce-reference.md §5 (rxe's ``next_opcode_rc``,
``init_req_packet``), not from the RTL; the requester bench compares the hardware's frames with it.

* :func:`segment` → one dict per packet: ``opcode``, ``psn``, ``se``, ``ackreq``, ``padcnt``,
  ``off``/``len`` (the packet's slice of the message payload), ``reth`` (dict or None),
  ``imm`` (the 4 bytes of IMMDT/IETH as on the wire, or None).
* :func:`wqe_bytes` → the 64-byte send WQE of interface.md §5.2.
* :class:`SendQp` → the Reliability Engine of one QP (roce-reference.md §5 and its normative
  choices): retirement by PSN, go-back-N after a timeout or NAK 0x60, RNR NAKs, retry_cnt and
  rnr_retry, remote-NAK errors and the flush that follows; :func:`timeout_us`, :func:`rnr_us`.
"""

import struct

__all__ = ["WrOp", "SEND", "SEND_WITH_IMM", "SEND_WITH_INV", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM",
           "RDMA_READ", "read_psns",
           "SIGNALED", "SOLICITED", "MAX_NOACK", "segment", "wqe_bytes", "ext_bytes",
           "psn_before", "timeout_us", "rnr_us", "nak_status", "SendQp"]

SEND, SEND_WITH_IMM, SEND_WITH_INV, RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ = range(6)
WrOp = (SEND, SEND_WITH_IMM, SEND_WITH_INV, RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ)
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


def read_psns(length, pmtu):
    """PSNs an RDMA READ of ``length`` bytes takes: its responses, max(1, ⌈length/PMTU⌉)
    (interface.md §7)."""
    return max(1, -(-length // pmtu))


def segment(opcode, length, pmtu, *, flags=0, psn=0, imm=b"\0\0\0\0", raddr=0, rkey=0,
            noack=0, start=0):
    """The packets of one WQE whose first PSN is ``psn``, from its packet ``start`` (a
    retransmission resuming mid-message). ``noack`` is the QP's count of consecutive
    non-AckReq packets before the first one returned; returns ``(packets, noack_after)``.
    Each packet's ``npsn`` is the PSNs it takes: 1, or for an RDMA READ (one request for the
    bytes from response ``start`` on, AckReq set) the responses still to come."""
    if opcode == RDMA_READ:
        off = start * pmtu
        return [dict(opcode=0x0C, psn=(psn + start) & 0xFFFFFF, se=0, ackreq=1, padcnt=0,
                     off=0, len=0, npsn=read_psns(length, pmtu) - start,
                     reth=dict(va=(raddr + off) & (2**64 - 1), rkey=rkey, dmalen=length - off),
                     imm=None)], 0
    first_op, mid_op, last_op, only_op = _OPS[opcode]
    pkts, off = [], start * pmtu
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
            opcode=op, psn=(psn + start + len(pkts)) & 0xFFFFFF, se=se, ackreq=ackreq,
            padcnt=(-n) & 3, off=off, len=n, npsn=1,
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


# ---- the Reliability Engine (roce-reference.md §2, §5 and its normative choices) --------------

#: 24-bit PSN arithmetic (roce-reference.md §1.4)
PSN_MASK = 0xFFFFFF


def psn_before(a, b):
    """PSN ``a`` is strictly before ``b`` (serial arithmetic)."""
    return a != b and ((a - b) & PSN_MASK) >= 0x800000


def timeout_us(code):
    """Retransmit timer of a QP's ``timeout`` code: 4.096 µs · 2^code, 0 = none (§5); the
    hardware counts whole microseconds, rounded up."""
    return 0 if code == 0 else -(-4096 * 2 ** code // 1000)


#: RNR NAK timer codes in ms (roce-reference.md §2; code 0 is the longest)
RNR_MS = [655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96,
          1.28, 1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92,
          122.88, 163.84, 245.76, 327.68, 491.52]


def rnr_us(code):
    return round(RNR_MS[code & 31] * 1000)


# IB work-completion statuses (roce-reference.md §5)
SUCCESS, LOC_QP_OP_ERR, LOC_PROT_ERR, WR_FLUSH_ERR = 0, 2, 4, 5
REM_INV_REQ_ERR, REM_ACCESS_ERR, REM_OP_ERR, RETRY_EXC_ERR, RNR_RETRY_EXC_ERR = 9, 10, 11, 12, 13


def nak_status(syndrome):
    """Status of a NAK that ends the QP: 0x61/0x62/0x63, any other → REM_OP_ERR."""
    return {0x61: REM_INV_REQ_ERR, 0x62: REM_ACCESS_ERR}.get(syndrome, REM_OP_ERR)


class SendQp:
    """One requester QP as the hardware must behave on the wire and on its completions.

    WQEs are dicts ``{wr_id, opcode, flags, payload (bytes), imm, raddr, rkey}``. ``send()``
    returns the packets of their first transmission; ``ack``/``nak``/``timeout`` return the
    completions due and, for a go-back-N, the packets to expect again (from the NAKed or
    oldest unacknowledged PSN: mid-message with MIDDLE/LAST, later WQEs in full, AckReq
    counting restarted at 0). Completions are dicts ``{wr_id, status, opcode, flags,
    byte_len}`` (errors: byte_len/flags 0).
    """

    def __init__(self, psn, pmtu, *, retry_cnt=7, rnr_retry=7):
        self.pmtu, self.retry_cnt, self.rnr_retry = pmtu, retry_cnt, rnr_retry
        self.una = self.psn = psn & PSN_MASK
        self.noack = 0
        self.sent = []              # unretired WQEs with first_psn / npkts
        self.rused = self.nused = 0
        self.error = False
        self.rnr_wait = False       # until rnr_elapsed(): an RNR NAK's timer runs

    def _pkts(self, w, start, noack):
        pkts, noack = segment(w["opcode"], len(w["payload"]), self.pmtu, flags=w["flags"],
                              psn=w["first_psn"], imm=w["imm"], raddr=w["raddr"],
                              rkey=w["rkey"], noack=noack, start=start)
        return pkts, noack

    def send(self, w):
        """First transmission of a posted WQE (the QP is not in error)."""
        w = dict(w, first_psn=self.psn)
        pkts, self.noack = self._pkts(w, 0, self.noack)
        w["npkts"] = max(1, -(-len(w["payload"]) // self.pmtu))
        self.psn = (self.psn + w["npkts"]) & PSN_MASK
        self.sent.append(w)
        return pkts

    @staticmethod
    def _cqe(w, status=SUCCESS):
        op = int(w["opcode"] in (RDMA_WRITE, RDMA_WRITE_WITH_IMM))
        if status != SUCCESS:
            return dict(wr_id=w["wr_id"], status=status, opcode=op)
        return dict(wr_id=w["wr_id"], status=SUCCESS, opcode=op,
                    flags=2 if w["opcode"] in (SEND_WITH_IMM, RDMA_WRITE_WITH_IMM) else 0,
                    byte_len=len(w["payload"]))

    def _retire(self):
        out = []
        while self.sent:
            w = self.sent[0]
            last = (w["first_psn"] + w["npkts"] - 1) & PSN_MASK
            if not psn_before(last, self.una):
                break
            self.sent.pop(0)
            if w["flags"] & SIGNALED:
                out.append(self._cqe(w))
        return out

    def _resend(self):
        """Go back to ``una``: the packets of every sent WQE from there."""
        pkts, noack = [], 0
        for w in self.sent:
            start = (self.una - w["first_psn"]) & PSN_MASK if w is self.sent[0] else 0
            p, noack = self._pkts(w, start, noack)
            pkts += p
        self.noack = noack
        return pkts

    def _end(self, status, posted=()):
        """The oldest unretired WQE completes with ``status``, every later one (sent or only
        posted) with WR_FLUSH_ERR."""
        self.error = True
        ws = self.sent + list(posted)
        self.sent = []
        return [self._cqe(w, status if i == 0 else WR_FLUSH_ERR) for i, w in enumerate(ws)]

    def ack(self, psn):
        """A positive ACK: (completions, [])."""
        if self.error or not psn_before(self.una, (psn + 1) & PSN_MASK):
            return [], []
        self.una = (psn + 1) & PSN_MASK
        self.rused = self.nused = 0
        return self._retire(), []

    def _retry(self, posted=()):
        if self.rused == self.retry_cnt:
            return self._end(RETRY_EXC_ERR, posted), []
        self.rused += 1
        return [], self._resend()

    def nak(self, psn, syndrome, posted=()):
        """A NAK at ``psn``: (completions, packets sent again). An RNR NAK's packets are due
        after its timer (``rnr_us(syndrome & 31)``)."""
        if self.error or psn_before(psn, self.una):
            return [], []
        if syndrome == 0x60 and self.rnr_wait:
            return [], []       # the sequence error behind an RNR NAK: the RNR wait goes back
        out = []
        if psn != self.una:
            self.una = psn
            self.rused = self.nused = 0
            out = self._retire()
        if syndrome == 0x60:
            c, p = self._retry(posted)
        elif syndrome & 0x60 == 0x20:
            if self.rnr_retry != 7 and self.nused == self.rnr_retry:
                c, p = self._end(RNR_RETRY_EXC_ERR, posted), []
            else:
                self.nused += self.rnr_retry != 7
                self.rnr_wait = True
                c, p = [], self._resend()
        else:
            c, p = self._end(nak_status(syndrome), posted), []
        return out + c, p

    def rnr_elapsed(self):
        """The RNR timer ran out (the packets of the RNR NAK are sent now)."""
        self.rnr_wait = False

    def timeout(self, posted=()):
        """The retransmit timer expired: (completions, packets sent again)."""
        if self.error:
            return [], []
        return self._retry(posted)
