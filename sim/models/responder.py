"""Python model of the responder's PSN Check (``roce-reference.md`` §3.2–3.7, §3.10–3.13
with the normative choices, interface.md §4.2/§6): what the hardware of
``rnic.resp.psn_check`` must do, written independently of it, frame for frame.

Use::

    rm = ResponderModel(num_qp=16)
    rm.set_qp(5, args)                 # ARG0..ARG15 of SET_QP → result
    rm.rq_db(5, 3)
    out = rm.packet(meta)              # meta: rx_meta_layout fields (dict)
    out.frames                         # [Frame(qpn, psn, syndrome, msn)] ACK/NAKs it sends
    out.exe, out.stats, out.events, out.payload_pass

``packet(meta, outcome=...)`` takes the later stages' answer for an executed frame (``None``:
success; else the ``done`` syndrome of a fatal outcome: 0x62/0x63 NAK, 0x1F positive ACK, 0 none),
or ``packet(meta, execute=fn)`` asks ``fn`` for it.

:class:`TopResponderModel` is the whole responder at the ``rnic`` top on top of it (frames in;
ACK/NAKs, placed bytes, CQEs, events and counters out), the scoreboard of
``tb/system/cocotb_resp_random.py``.
"""

from dataclasses import dataclass, field
from typing import NamedTuple

from rnic.opcodes import OPCODES, Op

__all__ = ["ResponderModel", "Frame", "Outcome", "QpState", "coalesced_match", "read_responses"]


def read_responses(psn, length, pmtu, msn=None):
    """The RDMA READ response packets of a READ of ``length`` bytes whose request had PSN
    ``psn`` (interface.md §7): ``[(opcode, psn, aeth, offset, length)]``, n = max(1,
    ⌈length/PMTU⌉) packets, ONLY when n is 1, else FIRST, MIDDLE…, LAST; PMTU payload bytes
    each but the last; ``aeth`` = ``msn`` on FIRST/LAST/ONLY, ``None`` on MIDDLE (no AETH)."""
    n = max(1, -(-length // pmtu))
    out = []
    for k in range(n):
        if n == 1:
            op = Op.RDMA_READ_RESPONSE_ONLY
        elif k == 0:
            op = Op.RDMA_READ_RESPONSE_FIRST
        elif k == n - 1:
            op = Op.RDMA_READ_RESPONSE_LAST
        else:
            op = Op.RDMA_READ_RESPONSE_MIDDLE
        out.append((int(op), (psn + k) & 0xFFFFFF,
                    None if op == Op.RDMA_READ_RESPONSE_MIDDLE else msn, k * pmtu,
                    min(pmtu, length - k * pmtu)))
    return out


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
        #: set to reproduce a known hardware deviation: a refused invalidate (fatal 0x1F) ACKed
        #: even without AckReq (PSN Check's response sequencer ignores AckReq on fatal 0x1F)
        self.classj_always_ack = False

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
                or args[6] % 64 or args[9] % 64          # RQ/SQ ring bases 64-byte aligned
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
    def packet(self, mt, outcome=None, execute=None):
        """Decide one request frame (``mt``: its ``rx_meta_layout`` dict). ``outcome`` is the
        later stages' answer for an executed frame (see the module docstring); or
        ``execute(cmd, qp)`` is called with a copy of each execute command (the error completion
        of a held WQE included, with its ``rq_index``) at the point the later stages would see
        it, and its return value (for a ``status`` 0 command) is taken as ``outcome``."""
        out = Outcome()
        op = mt["opcode"]
        info = OPCODES[Op(op)]
        qpn = mt["dqpn"]
        if not 2 <= qpn < self.num_qp:
            out.count(6)
            return out
        q = self.qps[qpn]
        if info.ack:
            # a response goes to the requester of an RTS QP, from the QP's remote IPv4
            if q.state != QpState.RTS or mt["src_ip"] != q.static["rip"]:
                out.count(6)
            else:
                out.ack_out = True
            return out
        if not self._in_sequence(q, qpn, mt, out):
            return out
        psn = mt["psn"]
        err, held = self._check(q, mt, info)
        if err is not None and err >> 5 == 1:
            out.frames.append(Frame(qpn, psn, err, q.msn))         # RNR NAK: nothing changes
            return out
        if err is not None:
            q.state = QpState.ERROR
            out.events.append(qpn)
            if held:
                out.exe.append(dict(qpn=qpn, psn=psn, status=9))
                if execute is not None:
                    execute(dict(out.exe[-1], opcode=op, rq_index=q.rq_cons), q)
                q.rq_cons = (q.rq_cons + 1) & 0xFFFF
            out.frames.append(Frame(qpn, psn, err, q.msn))
            return out
        self._execute(q, mt, info, out, outcome, execute)
        return out

    def _in_sequence(self, q, qpn, mt, out):
        """True for a request at the QP's expected PSN. Otherwise the frame is decided here: a
        QP not in RTR/RTS or a foreign source IPv4 counts 6; a duplicate counts 7 and is
        re-ACKed; a PSN ahead draws one sequence NAK until the expected PSN arrives."""
        if q.state not in (QpState.RTR, QpState.RTS) or mt["src_ip"] != q.static["rip"]:
            out.count(6)
            return False
        diff = (mt["psn"] - q.epsn) & M24
        if diff & 0x800000:
            out.count(7)
            out.frames.append(Frame(qpn, (q.epsn - 1) & M24, 0x1F, q.msn))
            return False
        if diff:
            if not q.nak:
                q.nak = 1
                out.frames.append(Frame(qpn, q.epsn, 0x60, q.msn))
            return False
        q.nak = 0
        return True

    @staticmethod
    def _check(q, mt, info):
        """(syndrome, held) for a request at the expected PSN: syndrome ``None`` when it
        executes, an RNR NAK's (0x20 | timer) when no receive WQE is posted, else 0x61 (invalid
        request); ``held``: the failed request takes a receive WQE (completed in error)."""
        op = mt["opcode"]
        if not ((op in SEND_CONT) if q.open == "send" else (op in WRITE_CONT)
                if q.open == "write" else not (op in SEND_CONT or op in WRITE_CONT)):
            return 0x61, q.open == "send"
        if info.read or info.atomic or (info.write and not q.static["access"] & 0x02):
            return 0x61, False
        if info.rwr and q.rq_prod == q.rq_cons:
            return 0x20 | q.static["min_rnr"], False
        pmtu = 128 << q.static["pmtu"]
        length = mt["payload_len"]
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
            return 0x61, q.open == "send" or info.rwr
        return None, False

    def _execute(self, q, mt, info, out, outcome, execute):
        """A valid request at the expected PSN: the execute command, the QP's new state, and
        the ACK (AckReq) or the later stages' fatal outcome."""
        qpn, psn, op, length = mt["dqpn"], mt["psn"], mt["opcode"], mt["payload_len"]
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
        if execute is not None:
            outcome = execute(dict(exe), q)
        if outcome is None:
            if mt["ackreq"]:
                out.frames.append(Frame(qpn, psn, 0x1F, q.msn))
        else:
            q.state = QpState.ERROR
            out.events.append(qpn)
            if outcome == 0x1F and (mt["ackreq"] or self.classj_always_ack) \
                    or outcome in (0x62, 0x63):
                out.frames.append(Frame(qpn, psn, outcome, msn_prev))


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


# ---- the whole responder at the top: PSN Check + execute + keys + CQEs + counters -----------

class SparseMem:
    """Byte-addressed sparse memory (4 KiB pages, unwritten bytes read 0): the model's image
    of host memory."""

    PAGE = 4096

    def __init__(self):
        self.pages = {}

    def write(self, addr, data):
        data = bytes(data)
        pos = 0
        while pos < len(data):
            a = addr + pos
            pg, off = divmod(a, self.PAGE)
            n = min(self.PAGE - off, len(data) - pos)
            page = self.pages.get(pg)
            if page is None:
                page = self.pages[pg] = bytearray(self.PAGE)
            page[off:off + n] = data[pos:pos + n]
            pos += n

    def read(self, addr, n):
        out = bytearray()
        while len(out) < n:
            a = addr + len(out)
            pg, off = divmod(a, self.PAGE)
            k = min(self.PAGE - off, n - len(out))
            page = self.pages.get(pg)
            out += page[off:off + k] if page is not None else bytes(k)
        return bytes(out)


class TeeMem:
    """Writes go to every memory, reads come from the first (the driver's view when the model
    must see what software writes into host memory)."""

    def __init__(self, *mems):
        self.mems = mems

    def write(self, addr, data):
        for m in self.mems:
            m.write(addr, bytes(data))

    def read(self, addr, n):
        return self.mems[0].read(addr, n)


class Cqe(NamedTuple):
    """One expected completion (interface.md §5.4; the phase bit apart)."""
    cqn: int
    wr_id: int
    byte_len: int
    imm_or_rkey: bytes
    qpn: int
    status: int
    opcode: int
    flags: int

    def raw(self, phase):
        import struct
        b = bytearray(32)
        struct.pack_into("<QI", b, 0, self.wr_id, self.byte_len)
        b[12:16] = self.imm_or_rkey
        struct.pack_into("<I", b, 16, self.qpn & M24)
        b[20], b[21], b[22] = self.status, self.opcode, self.flags
        b[31] = phase & 1
        return bytes(b)


class _QpExec:
    def __init__(self):
        self.reset()

    def reset(self):
        self.cnext = 0          # free-running index of the next WQE without a completion
        self.held = None        # (rq_index, wqe dict) of the message in progress
        self.static = {}


class TopResponderModel:
    """The responder as seen at the ``rnic`` top, written from the contract (interface.md
    §3–§6, roce-reference.md §3 with the normative choices, ``docs/execute.md`` for the
    design's own choices): frames in, ACK/NAK frames, host-memory writes, CQEs, events and
    counters out. It runs the PSN Check model above with an execute stage (receive WQE fetch
    from the model's memory, SGE/rkey checks through :class:`sim.models.keys.KeyModel`,
    placement, invalidate, completions, flush on ERROR).

    Mirror every command the driver issues (``set_qp``, ``set_cq``, ``set_key``, ``rq_db``,
    ``cq_db``) and give every frame to :meth:`frame` in wire order; have the driver write host
    memory through a :class:`TeeMem` of (host memory, ``model.mem``) so the model sees the
    WQEs. Results: ``frames`` (expected ACK/NAKs, :class:`Frame`), ``cqes`` (per CQN, in the
    order this model makes them), ``events`` ((type, number)), ``counters`` (model-decided
    ones: 0–10, 14; 11 and 12 depend on ACK coalescing), ``accepted`` (frames a QP took), and
    ``mem`` (the payload bytes placed).

    A fatal outcome found after PSN Check (NAK 0x62/0x63, refused invalidate) reaches PSN Check
    some cycles later in the hardware: younger frames of that QP already decided are skipped,
    not dropped. ``fatal_late`` lists the QPs for which that happened in the last frame; a bench
    that wants an exact comparison sends nothing more to such a QP until the core is quiet.
    """

    LOCAL_WRITE, REMOTE_WRITE = 0x01, 0x02

    def __init__(self, num_qp, key_entries, *, local_mac, local_ip):
        from .keys import KeyModel
        self.psn = ResponderModel(num_qp)
        self.keys = KeyModel(key_entries)
        self.mem = SparseMem()
        self.local_mac, self.local_ip = local_mac, local_ip
        self.qx = [_QpExec() for _ in range(num_qp)]
        self.cqs = {}
        self.cqes = {}
        self.frames = []
        self.events = []
        self.counters = [0] * 16
        self.accepted = 0
        self.fatal_late = set()

    # ---- commands ----------------------------------------------------------------------------
    def set_qp(self, qpn, args):
        q = self.psn.qps[qpn] if 2 <= qpn < self.psn.num_qp else None
        was = q.state if q else None
        r = self.psn.set_qp(qpn, args)
        if r == 0:
            a = list(args) + [0] * (16 - len(args))
            x = self.qx[qpn]
            x.static = dict(pd=a[4] & 0xFFFF, rcqn=a[5] & 0xFFFF,
                            rq_base=a[6] | a[7] << 32, rq_log=a[8] & 0x1F)
            if q.state == QpState.RESET:
                x.reset()
                x.static = dict(pd=a[4] & 0xFFFF, rcqn=a[5] & 0xFFFF,
                                rq_base=a[6] | a[7] << 32, rq_log=a[8] & 0x1F)
            elif q.state == QpState.ERROR and was != QpState.ERROR:
                self._flush(qpn)
        return r

    def set_cq(self, cqn, base, log2):
        self.cqs[cqn] = dict(base=base, log2=log2, prod=0, cons=0)
        self.cqes[cqn] = []

    def cq_db(self, cqn, consumer):
        self.cqs[cqn]["cons"] = consumer & 0xFFFF

    def set_key(self, slot, args):
        return self.keys.set_key(slot, list(args))

    def invalidate(self, key):
        return 0 if self.keys.invalidate(key) else 3

    def rq_db(self, qpn, index):
        if self.psn.rq_db(qpn, index):
            self._flush(qpn)

    # ---- frames ------------------------------------------------------------------------------
    def frame(self, frame, tuser=False):
        """One received frame; returns the :class:`Outcome` of PSN Check (or None if RX Parse
        drops it)."""
        from sim.packets import decode_frame, drop_reason, expected_meta
        self.counters[0] += 1
        self.fatal_late = set()
        r = drop_reason(frame, self.local_mac, self.local_ip, tuser=tuser)
        if r:
            self.counters[r] += 1
            return None
        mt = expected_meta(frame)
        payload = decode_frame(frame)["payload"]
        qpn = mt["dqpn"]
        q = self.psn.qps[qpn] if 2 <= qpn < self.psn.num_qp else None
        was = q.state if q else None
        late = []

        def execute(cmd, qp):
            res = self._execute(cmd, mt, qp, payload)
            if res is not None and cmd["status"] == 0:
                late.append(cmd["qpn"])
            return res

        out = self.psn.packet(mt, execute=execute)
        for k, v in out.stats.items():
            self.counters[k] += v
        if 6 not in out.stats:
            self.accepted += 1
        for f in out.frames:
            self.frames.append(f)
            s = f.syndrome
            self.counters[8 if s == 0x60 else 9 if s & 0xE0 == 0x20 else
                          10 if s & 0xE0 == 0x60 else 11] += 1
        self.events += [(3, n) for n in out.events]
        if q is not None and q.state == QpState.ERROR and was != QpState.ERROR:
            self._flush(qpn)
        self.fatal_late = set(late)
        return out

    # ---- execute -----------------------------------------------------------------------------
    def _fetch(self, qpn, index):
        import struct
        st = self.qx[qpn].static
        raw = self.mem.read(st["rq_base"] + 64 * (index % (1 << st["rq_log"])), 64)
        wr_id, num_sge = struct.unpack_from("<QI", raw, 0)
        sges = [struct.unpack_from("<QII", raw, 16 + 16 * k) for k in range(3)]
        return dict(wr_id=wr_id, num_sge=num_sge, sges=sges, index=index)

    def _cqe(self, qpn, wqe, status, opcode, byte_len=0, imm=b"\0\0\0\0", flags=0):
        cqn = self.qx[qpn].static["rcqn"]
        cq = self.cqs[cqn]
        assert (cq["prod"] - cq["cons"]) & 0xFFFF < 1 << cq["log2"], \
            f"model: CQ {cqn} overflow (the bench must size and poll its CQs)"
        if status:
            byte_len, imm, flags = 0, b"\0\0\0\0", 0
        self.cqes[cqn].append(Cqe(cqn, wqe["wr_id"], byte_len, bytes(imm), qpn, status, opcode,
                                  flags))
        cq["prod"] = (cq["prod"] + 1) & 0xFFFF
        self.counters[14] += 1
        x = self.qx[qpn]
        x.cnext = (wqe["index"] + 1) & 0xFFFF
        x.held = None

    def _flush(self, qpn):
        x, q = self.qx[qpn], self.psn.qps[qpn]
        while x.cnext != q.rq_prod:
            self._cqe(qpn, self._fetch(qpn, x.cnext), 5, 128)

    def _execute(self, cmd, mt, q, payload):
        import struct
        qpn = cmd["qpn"]
        x = self.qx[qpn]
        info = OPCODES[Op(cmd["opcode"])]
        opcode = 129 if info.write and info.immdt else 128
        if info.rwr or cmd["status"]:
            if x.held is None or x.held["index"] != cmd["rq_index"]:
                x.held = self._fetch(qpn, cmd["rq_index"])
        wqe = x.held
        if cmd["status"]:
            self._cqe(qpn, wqe, cmd["status"], opcode)
            return None
        pd = x.static["pd"]
        off, length = cmd["offset"], cmd["payload_len"]
        pieces = []
        if info.send:
            if wqe["num_sge"] > 3:
                self._cqe(qpn, wqe, 2, opcode)
                return 0x63
            sges = wqe["sges"][:wqe["num_sge"]]
            if off + length > sum(s[1] for s in sges):
                self._cqe(qpn, wqe, 2, opcode)
                return 0x63
            pos = 0
            for addr, ln, lkey in sges:
                if ln == 0:
                    continue
                s, e = max(off, pos), min(off + length, pos + ln)
                if s < e:
                    r = self.keys.lookup(lkey, pd, self.LOCAL_WRITE, addr + s - pos, e - s)
                    if not r["ok"]:
                        self._cqe(qpn, wqe, 2, opcode)
                        return 0x63
                    pieces.append((r["bus_addr"], payload[s - off:e - off]))
                pos += ln
        elif q.wlen:
            r = self.keys.lookup(q.rkey, pd, self.REMOTE_WRITE, (q.va + off) & ((1 << 64) - 1),
                                 length)
            if not r["ok"]:
                if info.rwr:
                    self._cqe(qpn, wqe, 10, opcode)
                return 0x62
            pieces.append((r["bus_addr"], payload))
        for addr, data in pieces:
            self.mem.write(addr, data)
        if info.ieth and not self.keys.invalidate(mt["imm_or_rkey"]):
            self._cqe(qpn, wqe, 9, opcode)
            return 0x1F
        if info.comp:
            if info.immdt:
                imm, flags = mt["imm_or_rkey"].to_bytes(4, "big"), 0x02
            elif info.ieth:
                imm, flags = struct.pack("<I", mt["imm_or_rkey"]), 0x04
            else:
                imm, flags = b"\0\0\0\0", 0
            self._cqe(qpn, wqe, 0, opcode, q.wlen if info.write else off + length, imm, flags)
        return None
