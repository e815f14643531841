"""Python model of the responder's PSN Check (``roce-reference.md`` §3.2–3.7, §3.10–3.13 with the
normative choices, interface.md §4.2/§6): what the hardware of ``rnic.resp.psn_check`` must do,
written independently of it, frame for frame.

Use::

    rm = ResponderModel(num_qp=16)
    rm.set_qp(5, args)                 # ARG0..ARG15 of SET_QP → result
    rm.rq_db(5, 3)
    out = rm.packet(meta)              # meta: rx_meta_layout fields (dict)
    out.frames                         # [Frame(qpn, psn, syndrome, msn)] ACK/NAKs it sends
    out.exe, out.stats, out.events, out.payload_pass

``packet(meta, outcome=...)`` takes the later stages' answer for an executed frame (``None``:
success; else the ``done`` syndrome of a fatal outcome: 0x62/0x63 NAK, 0x1F positive ACK, 0 none).
"""

from dataclasses import dataclass, field
from typing import NamedTuple

from rnic.opcodes import OPCODES, Op

__all__ = ["ResponderModel", "Frame", "Outcome", "QpState", "coalesced_match"]


class QpState:
    RESET, INIT, RTR, RTS, ERROR = 0, 1, 2, 3, 6


class Frame(NamedTuple):
    qpn: int
    psn: int
    syndrome: int
    msn: int


@dataclass
class Outcome:
    frames: list = field(default_factory=list)
    exe: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    payload_pass: bool = False
    ack_out: bool = False

    def count(self, n):
        self.stats[n] = self.stats.get(n, 0) + 1


SEND_CONT = {0x01, 0x02, 0x03, 0x16}
WRITE_CONT = {0x07, 0x08, 0x09}
M24 = 0xFFFFFF


class _Qp:
    def __init__(self):
        self.state = QpState.RESET
        self.static = {}
        self.reset_dyn()

    def reset_dyn(self):
        self.epsn = self.msn = self.nak = 0
        self.open = None            # None, "send", "write"
        self.off = self.wlen = self.va = self.rkey = 0
        self.rq_prod = self.rq_cons = 0
        self.sq_psn = self.sq_cons = 0


class ResponderModel:
    def __init__(self, num_qp=16):
        self.num_qp = num_qp
        self.qps = [_Qp() for _ in range(num_qp)]

    # ---- commands ----------------------------------------------------------------------------
    def set_qp(self, qpn, args):
        if not 2 <= qpn < self.num_qp:
            return 2
        q = self.qps[qpn]
        args = list(args) + [0] * (16 - len(args))
        new = args[0] & 0xF
        pmtu = (args[0] >> 8) & 0xF
        legal = new in (QpState.RESET, QpState.ERROR) or (q.state, new) in (
            (QpState.RESET, QpState.INIT), (QpState.INIT, QpState.RTR), (QpState.RTR, QpState.RTS))
        if (not legal or (args[8] & 0x1F) > 15 or ((args[8] >> 8) & 0x1F) > 15
                or (new in (QpState.RTR, QpState.RTS) and not 1 <= pmtu <= 5)):
            return 3
        q.static = dict(pmtu=pmtu, min_rnr=(args[0] >> 16) & 0x1F, dest_qpn=args[1] & M24,
                        access=(args[4] >> 16) & 0xFF,
                        rmac=((args[12] & 0xFFFF) << 32) | args[11], rip=args[13],
                        sport=args[14] & 0xFFFF)
        if new == QpState.RESET:
            q.reset_dyn()
        if new == QpState.RTR:
            q.epsn = args[2] & M24
        if new == QpState.RTS:
            q.sq_psn = args[3] & M24
        q.state = new
        return 0

    def query_qp(self, qpn):
        q = self.qps[qpn]
        return [q.state, q.epsn, q.sq_psn, q.msn, q.rq_cons, q.sq_cons]

    def rq_db(self, qpn, index):
        if 2 <= qpn < self.num_qp and self.qps[qpn].state != QpState.RESET:
            self.qps[qpn].rq_prod = index & 0xFFFF
            return self.qps[qpn].state == QpState.ERROR     # a flush request
        return False

    # ---- packets -----------------------------------------------------------------------------
    def packet(self, mt, outcome=None):
        out = Outcome()
        op = mt["opcode"]
        info = OPCODES[Op(op)]
        if info.ack:
            out.ack_out = True
            return out
        qpn = mt["dqpn"]
        if not 2 <= qpn < self.num_qp:
            out.count(6)
            return out
        q = self.qps[qpn]
        if q.state not in (QpState.RTR, QpState.RTS) or mt["src_ip"] != q.static["rip"]:
            out.count(6)
            return out
        psn = mt["psn"]
        diff = (psn - q.epsn) & M24
        if diff & 0x800000:
            out.count(7)
            out.frames.append(Frame(qpn, (q.epsn - 1) & M24, 0x1F, q.msn))
            return out
        if diff:
            if not q.nak:
                q.nak = 1
                out.frames.append(Frame(qpn, q.epsn, 0x60, q.msn))
            return out
        q.nak = 0
        pmtu = 128 << q.static["pmtu"]
        length = mt["payload_len"]
        held = False
        err = None
        if (op in SEND_CONT) if q.open == "send" else (op in WRITE_CONT) if q.open == "write" \
                else not (op in SEND_CONT or op in WRITE_CONT):
            if info.read or info.atomic or (info.write and not q.static["access"] & 0x02):
                err = 0x61
            elif info.rwr and q.rq_prod == q.rq_cons:
                out.frames.append(Frame(qpn, psn, 0x20 | q.static["min_rnr"], q.msn))
                return out
            else:
                if info.start and info.end:
                    bad = length > pmtu
                elif not info.end:
                    bad = length != pmtu
                else:
                    bad = length == 0 or length > pmtu
                if info.reth and mt["reth_len"] > 1 << 31:
                    bad = True
                if info.write:
                    resid = mt["reth_len"] if info.start else (q.wlen - q.off) & 0xFFFFFFFF
                    if resid > pmtu:
                        bad |= length != pmtu or mt["padcnt"] != 0
                    else:
                        bad |= length != resid or mt["padcnt"] != (-resid) & 3
                if bad:
                    err = 0x61
                    held = q.open == "send" or info.rwr
        else:
            err = 0x61
            held = q.open == "send"
        if err is not None:
            q.state = QpState.ERROR
            out.events.append(qpn)
            if held:
                q.rq_cons = (q.rq_cons + 1) & 0xFFFF
                out.exe.append(dict(qpn=qpn, psn=psn, status=9))
            out.frames.append(Frame(qpn, psn, err, q.msn))
            return out
        # execute
        msn_prev = q.msn
        exe = dict(qpn=qpn, psn=psn, status=0, opcode=op, offset=0 if info.start else q.off,
                   rq_index=q.rq_cons, payload_len=length)
        q.epsn = (psn + 1) & M24
        q.msn = (q.msn + info.end) & M24
        exe["msn"] = q.msn
        if info.end and (info.send or info.rwr):
            q.rq_cons = (q.rq_cons + 1) & 0xFFFF
        if info.start and info.write:
            q.wlen, q.va, q.rkey = mt["reth_len"], mt["reth_va"], mt["reth_rkey"]
        if info.end:
            q.open, q.off = None, 0
        else:
            q.open = "send" if info.send else "write"
            q.off = (0 if info.start else q.off) + length
        out.exe.append(exe)
        out.payload_pass = True
        if outcome is None:
            if mt["ackreq"]:
                out.frames.append(Frame(qpn, psn, 0x1F, q.msn))
        else:
            q.state = QpState.ERROR
            out.events.append(qpn)
            if outcome == 0x1F and mt["ackreq"] or outcome in (0x62, 0x63):
                out.frames.append(Frame(qpn, psn, outcome, msn_prev))
        return out


def coalesced_match(expected, got):
    """True when ``got`` is ``expected`` with some positive ACKs left out, each of them followed
    directly (in ``expected``) by a positive ACK of the same QP: the hardware's coalescing."""
    reach = {0}
    for k, e in enumerate(expected):
        nxt = expected[k + 1] if k + 1 < len(expected) else None
        optional = (e.syndrome == 0x1F and nxt is not None and nxt.syndrome == 0x1F
                    and nxt.qpn == e.qpn)
        new = {j + 1 for j in reach if j < len(got) and got[j] == e}
        if optional:
            new |= reach
        reach = new
        if not reach:
            return False
    return len(got) in reach
