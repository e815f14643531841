"""A verbs-shaped driver that speaks only the register and host-memory contract (interface.md).

It plays the host's software: it owns a region of host memory (any object with
``write(addr, bytes)`` and ``read(addr, n)``, e.g. cocotbext-axi's ``AxiRam``), allocates rings and
buffers in it, and drives the core through :class:`sim.driver.regs.Regs`.

    dev = Device(regs, mem, base=0x1000_0000, size=1 << 24)
    cq = await dev.create_cq(log2_entries=6)
    qp = await dev.create_qp(qpn=2, recv_cq=cq, send_cq=cq, pd=1, remote=...)
    await dev.modify_qp(qp, QpState.INIT) ... RTR ... RTS
    mr = await dev.reg_mr(slot=0, key=0x1234, addr=buf, length=4096, pd=1,
                          access=Access.LOCAL_WRITE)
    await dev.post_recv(qp, wr_id=7, sges=[(buf, 4096, 0x1234)])
    cqes = await dev.poll_cq(cq)

Nothing here reads the core's internal signals.
"""

import enum
import struct
from dataclasses import dataclass, field

from rnic.formats import (CQE_BYTES, CQE_FORMAT, RECV_MAX_SGE, RECV_WQE_BYTES, RECV_WQE_FORMAT,
                          SEND_MAX_SGE, SEND_SIGNALED, SEND_SOLICITED, SEND_WQE_BYTES,
                          SEND_WQE_FORMAT)
from rnic.ifaces import CmdOp
from .regs import CmdError, Regs, ip_to_reg, mac_to_regs

__all__ = ["Device", "QpState", "Access", "KeyType", "Qp", "Cq", "Cqe", "Event",
           "RECV_WQE_SIZE", "SEND_WQE_SIZE", "CQE_SIZE", "SendOp"]

# the host-memory formats (interface.md §5) are rnic.formats' tables, shared with the hardware
RECV_WQE_SIZE = RECV_WQE_BYTES
SEND_WQE_SIZE = SEND_WQE_BYTES
CQE_SIZE = CQE_BYTES


class QpState(enum.IntEnum):
    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    ERROR = 6


class Access(enum.IntFlag):
    LOCAL_WRITE = 0x01
    REMOTE_WRITE = 0x02
    REMOTE_READ = 0x04
    REMOTE_ATOMIC = 0x08
    MW_BIND = 0x10


class KeyType(enum.IntEnum):
    MR = 0
    FAST_REG_MR = 1
    MW_TYPE1 = 2
    MW_TYPE2 = 3


class SendOp(enum.IntEnum):
    SEND = 0
    SEND_WITH_IMM = 1
    SEND_WITH_INV = 2
    RDMA_WRITE = 3
    RDMA_WRITE_WITH_IMM = 4
    RDMA_READ = 5


PMTU_CODE = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}


@dataclass
class Cq:
    cqn: int
    base: int
    log2: int
    consumer: int = 0          # free-running 16-bit index software has consumed up to
    phase: int = 1             # the phase of the next entry on this pass

    @property
    def entries(self):
        return 1 << self.log2


@dataclass
class Qp:
    qpn: int
    pd: int
    recv_cq: Cq
    send_cq: Cq
    rq_base: int
    rq_log2: int
    sq_base: int
    sq_log2: int
    dest_qpn: int = 0
    remote_mac: int = 0
    remote_ip: int = 0
    udp_sport: int = 0xC000
    pmtu: int = 1024
    access: int = 0
    min_rnr_timer: int = 0
    timeout: int = 0
    retry_cnt: int = 7
    rnr_retry: int = 7
    rq_psn: int = 0
    sq_psn: int = 0
    ord: int = 0            # RDMA READs outstanding as requester (0 means 1, at most 8)
    ird: int = 0            # READs held for duplicates as responder (0 means 1, at most 8)
    state: QpState = QpState.RESET
    rq_producer: int = 0
    sq_producer: int = 0


@dataclass
class Cqe:
    wr_id: int
    byte_len: int
    imm_or_rkey: bytes
    qpn: int
    status: int
    opcode: int
    flags: int
    phase: int

    @classmethod
    def decode(cls, raw):
        f = CQE_FORMAT.unpack(raw)
        return cls(f["wr_id"], f["byte_len"], f["imm_or_rkey"].to_bytes(4, "little"), f["qpn"],
                   f["status"], f["opcode"], f["flags"], f["phase"])

    @property
    def imm(self):
        """The immediate data as its wire bytes (WITH_IMM)."""
        return self.imm_or_rkey

    @property
    def invalidated_rkey(self):
        return struct.unpack("<I", self.imm_or_rkey)[0]


@dataclass
class Event:
    lost: int
    type: int
    number: int


class Device:
    """One core and the host memory its software owns."""

    def __init__(self, regs: Regs, mem, *, base, size, align=64):
        self.regs = regs
        self.mem = mem
        self._next = base
        self._end = base + size
        self._align = align
        self.qps = {}
        self.cqs = {}

    # ---- memory ------------------------------------------------------------------------------
    def alloc(self, size, align=None):
        align = align or self._align
        addr = (self._next + align - 1) // align * align
        if addr + size > self._end:
            raise MemoryError("driver region exhausted")
        self._next = addr + size
        return addr

    def write(self, addr, data):
        self.mem.write(addr, bytes(data))

    def read(self, addr, n):
        return bytes(self.mem.read(addr, n))

    # ---- identity ----------------------------------------------------------------------------
    async def open(self, mac, ip):
        await self.regs.wait_idle()       # the reset sweep
        await self.regs.set_local(mac, ip)

    # ---- CQs ---------------------------------------------------------------------------------
    async def create_cq(self, cqn, log2_entries):
        base = self.alloc(CQE_SIZE << log2_entries, 4096)
        self.write(base, bytes(CQE_SIZE << log2_entries))        # software zeroes the ring
        await self.regs.command(CmdOp.SET_CQ, cqn, [base & 0xFFFFFFFF, base >> 32, log2_entries])
        cq = Cq(cqn, base, log2_entries)
        self.cqs[cqn] = cq
        return cq

    def peek_cq(self, cq):
        """The next CQE if software owns it (phase matches), without consuming it."""
        slot = cq.consumer % cq.entries
        cqe = Cqe.decode(self.read(cq.base + CQE_SIZE * slot, CQE_SIZE))
        return cqe if cqe.phase == cq.phase else None

    async def poll_cq(self, cq, max_entries=1 << 16, *, doorbell=True):
        """Every CQE software owns, in order; the consumer index goes back through CQ_DB."""
        out = []
        while len(out) < max_entries:
            cqe = self.peek_cq(cq)
            if cqe is None:
                break
            out.append(cqe)
            cq.consumer = (cq.consumer + 1) & 0xFFFF
            if cq.consumer % cq.entries == 0:
                cq.phase ^= 1
        if out and doorbell:
            await self.regs.doorbell("CQ_DB", cq.cqn, cq.consumer)
        return out

    async def arm_cq(self, cq, solicited_only=False):
        await self.regs.doorbell("CQ_ARM", cq.cqn, 2 if solicited_only else 1)

    async def events(self):
        out = []
        while True:
            valid, lost, type_, number = await self.regs.pop_event()
            if not valid:
                return out
            out.append(Event(lost, type_, number))

    # ---- QPs ---------------------------------------------------------------------------------
    async def create_qp(self, qpn, *, recv_cq, send_cq, pd, rq_log2=6, sq_log2=6, **attrs):
        qp = Qp(qpn=qpn, pd=pd, recv_cq=recv_cq, send_cq=send_cq,
                rq_base=self.alloc(RECV_WQE_SIZE << rq_log2, 4096), rq_log2=rq_log2,
                sq_base=self.alloc(SEND_WQE_SIZE << sq_log2, 4096), sq_log2=sq_log2, **attrs)
        self.qps[qpn] = qp
        await self._set_qp(qp, QpState.RESET)
        return qp

    def qp_args(self, qp, state):
        mac_lo, mac_hi = mac_to_regs(qp.remote_mac)
        return [
            (state & 0xF) | (PMTU_CODE[qp.pmtu] << 8) | ((qp.min_rnr_timer & 0x1F) << 16)
            | ((qp.timeout & 0x1F) << 24),
            qp.dest_qpn & 0xFFFFFF,
            qp.rq_psn & 0xFFFFFF,
            qp.sq_psn & 0xFFFFFF,
            (qp.pd & 0xFFFF) | ((qp.access & 0xFF) << 16),
            (qp.recv_cq.cqn & 0xFFFF) | ((qp.send_cq.cqn & 0xFFFF) << 16),
            qp.rq_base & 0xFFFFFFFF, qp.rq_base >> 32,
            (qp.rq_log2 & 0x1F) | ((qp.sq_log2 & 0x1F) << 8) | ((qp.retry_cnt & 7) << 16)
            | ((qp.rnr_retry & 7) << 20),
            qp.sq_base & 0xFFFFFFFF, qp.sq_base >> 32,
            mac_lo, mac_hi, ip_to_reg(qp.remote_ip), qp.udp_sport & 0xFFFF,
            (qp.ord & 0xF) | ((qp.ird & 0xF) << 4),
        ]

    async def _set_qp(self, qp, state, check=True):
        result, _ = await self.regs.command(CmdOp.SET_QP, qp.qpn, self.qp_args(qp, state),
                                            check=check)
        if result == 0:
            qp.state = QpState(state)
            if state == QpState.RESET:
                qp.rq_producer = qp.sq_producer = 0
        return result

    async def modify_qp(self, qp, state, check=True, **attrs):
        for k, v in attrs.items():
            setattr(qp, k, v)
        return await self._set_qp(qp, state, check)

    async def connect(self, qp):
        """RESET → INIT → RTR → RTS."""
        for s in (QpState.INIT, QpState.RTR, QpState.RTS):
            await self.modify_qp(qp, s)

    async def query_qp(self, qp):
        _, a = await self.regs.command(CmdOp.QUERY_QP, qp.qpn)
        return {"state": a[0] & 0xF, "epsn": a[1] & 0xFFFFFF, "send_psn": a[2] & 0xFFFFFF,
                "msn": a[3] & 0xFFFFFF, "rq_ci": a[4] & 0xFFFF, "sq_ci": a[5] & 0xFFFF}

    # ---- keys --------------------------------------------------------------------------------
    async def set_key(self, slot, *, key, iova, length, bus, pd, access, type=KeyType.MR,
                      valid=True, mr_slot=0, check=True):
        args = [key & 0xFFFFFFFF, iova & 0xFFFFFFFF, iova >> 32, length & 0xFFFFFFFF,
                length >> 32, bus & 0xFFFFFFFF, bus >> 32,
                (pd & 0xFFFF) | ((access & 0xFF) << 16) | ((type & 3) << 24)
                | (int(bool(valid)) << 28),
                mr_slot]
        result, _ = await self.regs.command(CmdOp.SET_KEY, slot, args, check=check)
        return result

    async def reg_mr(self, slot, *, key, addr, length, pd, access, fast_reg=False, check=True):
        """Register [addr, addr+length) with iova = addr (identity translation)."""
        return await self.set_key(slot, key=key, iova=addr, length=length, bus=addr, pd=pd,
                                  access=access,
                                  type=KeyType.FAST_REG_MR if fast_reg else KeyType.MR,
                                  check=check)

    async def query_key(self, slot):
        _, a = await self.regs.command(CmdOp.QUERY_KEY, slot)
        return {"key": a[0], "iova": a[1] | (a[2] << 32), "length": a[3] | (a[4] << 32),
                "bus": a[5] | (a[6] << 32), "pd": a[7] & 0xFFFF, "access": (a[7] >> 16) & 0xFF,
                "type": (a[7] >> 24) & 3, "valid": (a[7] >> 28) & 1, "mr_slot": a[8]}

    async def invalidate(self, key, check=False):
        result, _ = await self.regs.command(CmdOp.INVALIDATE, 0, [key], check=check)
        return result

    # ---- work requests -----------------------------------------------------------------------
    async def post_recv(self, qp, wr_id, sges, *, doorbell=True):
        """Write a receive WQE (interface.md §5.1) at the RQ producer index and ring RQ_DB."""
        if len(sges) > RECV_MAX_SGE:
            raise ValueError(f"a receive WQE holds at most {RECV_MAX_SGE} SGEs")
        raw = RECV_WQE_FORMAT.pack(wr_id=wr_id, num_sge=len(sges), sge=sges)
        return await self.post_recv_raw(qp, raw, doorbell=doorbell)

    async def post_recv_raw(self, qp, raw, *, doorbell=True):
        slot = qp.rq_producer % (1 << qp.rq_log2)
        self.write(qp.rq_base + RECV_WQE_SIZE * slot, raw)
        qp.rq_producer = (qp.rq_producer + 1) & 0xFFFF
        if doorbell:
            await self.regs.doorbell("RQ_DB", qp.qpn, qp.rq_producer)
        return slot

    async def post_send(self, qp, wr_id, op, sges, *, signaled=True, solicited=False,
                        imm=b"\0\0\0\0", inv_rkey=0, remote_addr=0, rkey=0, doorbell=True):
        """Write a send WQE (interface.md §5.2) at the SQ producer index and ring SQ_DB."""
        if len(sges) > SEND_MAX_SGE:
            raise ValueError(f"a send WQE holds at most {SEND_MAX_SGE} SGEs")
        raw = SEND_WQE_FORMAT.pack(
            wr_id=wr_id, opcode=int(op), num_sge=len(sges), sge=sges,
            flags=(SEND_SIGNALED if signaled else 0) | (SEND_SOLICITED if solicited else 0),
            # the rkey to invalidate as an integer; the immediate as its wire bytes
            imm_or_inv_rkey=inv_rkey if op == SendOp.SEND_WITH_INV else bytes(imm),
            remote_addr=remote_addr, rkey=rkey)
        slot = qp.sq_producer % (1 << qp.sq_log2)
        self.write(qp.sq_base + SEND_WQE_SIZE * slot, raw)
        qp.sq_producer = (qp.sq_producer + 1) & 0xFFFF
        if doorbell:
            await self.regs.doorbell("SQ_DB", qp.qpn, qp.sq_producer)
        return slot

    async def post_read(self, qp, wr_id, sges, *, remote_addr, rkey, signaled=True,
                        doorbell=True):
        """Post an RDMA READ (interface.md §7): the bytes at ``remote_addr`` (``rkey``, with
        REMOTE_READ on the remote QP's PD) land in ``sges`` (lkeys with LOCAL_WRITE), their
        lengths summed; it completes with opcode 2 (RDMA_READ) and the byte count."""
        return await self.post_send(qp, wr_id, SendOp.RDMA_READ, sges, signaled=signaled,
                                    remote_addr=remote_addr, rkey=rkey, doorbell=doorbell)
