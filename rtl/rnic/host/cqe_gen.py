"""CQE Generation: per-CQ rings in host memory, 32-byte completion entries (interface.md §5.4).

CQ table
--------
One row per CQ in block RAM: valid, ring base (64-byte aligned), log2 entries, producer,
consumer, reserved count, arm mode. It is cleared by a sweep after ``rst`` (``sweeping`` high,
no input taken). Every operation is a read-modify-write of one row done by one FSM, one
operation at a time, so no forwarding is needed (read address, registered read, registered
row, registered tests, modify and write: 5 cycles plus the operation's own output cycles).
A completion's table operation places it (slot, phase, producer advanced) and hands the entry
to a separate writer through a 2-entry queue, so the next operation — typically the next
packet's reservation — does not wait while the CQE's write waits for the AXI W channel behind
a payload burst. CQEs are written in the order they were placed.

Operations
----------
``cmd`` (SET_CQ 0x03, index = CQN): ARG0/ARG1 ring base lo/hi, ARG2[4:0] log2 entries.
Producer, consumer and reserved count to 0, disarmed, phase 1. Result 2 for CQN ≥ num_cq,
3 for log2 > 15 or a base not 64-byte aligned (interface.md §4.2; nothing changes), 1 for any
other opcode.

``cq_db`` {cqn, index}: CQ_DB, the consumer index becomes ``index``.

``cq_arm`` {cqn, mode}: CQ_ARM; mode 1 (next completion) or 2 (next completion with SE, or any
error completion); other modes are ignored. One-shot: a matching completion disarms it.

``reserve`` {cqn} → ``reserve_resp`` {ok}: reserve one CQE slot (exactly one response per
request). Full when ``producer + reserved − consumer ≥ 2^log2`` (16-bit arithmetic), or the CQ
is unset: ``ok`` = 0 and event 2 (CQ overflow, number = CQN) is raised; the caller sends no ACK
and moves its QP to ERROR. The caller must reserve before it releases the ACK.

``complete`` {cqe_layout}: write one CQE. A non-flush completion uses one of the CQ's
reservations. A flush completion (``flush`` = 1) is never reserved: if the CQ is full it is
discarded silently. A non-flush completion that finds no reservation is admitted if there is
room, else discarded with event 2. The entry goes to ring slot ``producer mod 2^log2`` at
``base + 32·slot`` with phase = 1 on even passes (``producer >> log2`` even), then the producer
advances; the arm is tested and disarmed at this point (mode 1: any; mode 2: ``se`` or
status ≠ 0). The CQE is written as one 32-byte burst through the ``mem`` write client.

**Ordering with the data.** The entry must be written only after OKAY write responses for all
the data it reports (§5.4): the caller submits ``complete`` only after the ``done`` of its own
data writes came back OKAY (a write that came back non-OKAY is the caller's fault to report).

After the write's ``done`` is back (in order, up to ``max_inflight`` CQE writes in flight):
OKAY → ``stat`` bit 14 (completions written) and, if the arm matched, event 1 (number = CQN);
non-OKAY → event 4 (host-memory fault, number = QPN of the CQE) and one ``fault`` {qpn} transfer
so that the QP's owner moves that QP to ERROR; no count and no event 1 then.

CQE layout: :data:`rnic.formats.Cqe`, the table of interface.md §5.4 the driver and the docs
use too (0–7 wr_id; 8–11 byte_len; 12–15 the immediate in wire byte order (WITH_IMM) or the
invalidated rkey little-endian; 16–19 QPN[23:0]; 20 status; 21 opcode; 22 flags; 23–30 zero;
31 bit 0 phase). The entry is a signal of that layout, every field assigned by name and every
other bit 0. On an error CQE (status ≠ 0) byte_len, bytes 12–15 and flags are written as 0
(only wr_id, QPN, status and opcode are valid).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..formats import CQE_BYTES, CQE_WITH_IMM, CQE_WITH_INVALIDATE
from ..formats import Cqe as cqe_entry_layout
from ..ifaces import NUM_COUNTERS, CmdOp, CommandSignature, Counter, EventType, Result
from ..ifaces import event_layout
from ..stream import Queue, check_width
from .axi_master import WriteClientSignature

__all__ = ["CqeGen", "cqe_layout", "WITH_IMM", "WITH_INVALIDATE", "CQE_BYTES"]

WITH_IMM = CQE_WITH_IMM
WITH_INVALIDATE = CQE_WITH_INVALIDATE

#: One completion as a client submits it.
#: ``imm_or_rkey``: with ``flags & WITH_IMM`` the immediate as an integer whose bits [31:24] are
#: its first wire byte (``rx_meta_layout.imm``); CQE Generation stores it in wire byte order.
#: Otherwise the invalidated rkey (stored little-endian).
cqe_layout = data.StructLayout({
    "cqn": 16,
    "wr_id": 64,
    "byte_len": 32,
    "imm_or_rkey": 32,
    "qpn": 24,
    "status": 8,
    "opcode": 8,
    "flags": 8,
    "se": 1,
    "flush": 1,
})

_row_layout = data.StructLayout({
    "valid": 1,
    "base": 59,        # ring base >> 5
    "log2": 4,
    "prod": 16,
    "cons": 16,
    "resv": 16,
    "arm": 2,
})

_inflight_layout = data.StructLayout({"qpn": 24, "cqn": 16, "fire": 1})

#: A CQE the table FSM has placed (producer advanced), handed to the writer.
_write_layout = data.StructLayout({
    "base": 59,        # ring base >> 5
    "slot": 15,
    "entry": 8 * CQE_BYTES,
    "qpn": 24,
    "cqn": 16,
    "fire": 1,
})


class CqeGen(wiring.Component):
    """CQE Generation (see the module docstring for every rule).

    Parameters
    ----------
    width : int
        Host-memory data width W (64, 128, 256, 512).
    num_cq : int
        Number of CQs, a power of two, 1..1024.
    max_inflight : int
        CQE writes issued whose ``done`` is not back yet, at most.

    Attributes
    ----------
    cmd : Out(CommandSignature())
        Mailbox command port (``cmd.cmd`` in, ``cmd.resp`` out); SET_CQ.
    cq_db : In(stream.Signature({cqn 16, index 16}))
        CQ_DB doorbell.
    cq_arm : In(stream.Signature({cqn 16, mode 2}))
        CQ_ARM doorbell.
    reserve : In(stream.Signature({cqn 16}))
        Slot reservation request.
    reserve_resp : Out(stream.Signature({ok 1}))
        One answer per reservation, in order.
    complete : In(stream.Signature(cqe_layout))
        Completions to write.
    mem : Out(WriteClientSignature(width))
        A write client of :class:`rnic.host.HostMemory`.
    event : Out(stream.Signature(event_layout))
        Events 1 (completion on an armed CQ), 2 (CQ overflow), 4 (host-memory fault).
    fault : Out(stream.Signature({qpn 24}))
        A CQE write came back non-OKAY: this QP goes to ERROR.
    stat : Out(16)
        Counter strobes; bit 14 = one CQE written.
    sweeping : Out(1)
        The CQ table is being cleared after reset; no input is taken.
    """

    def __init__(self, *, width=64, num_cq=64, max_inflight=4):
        check_width(width)
        if not isinstance(num_cq, int) or not 1 <= num_cq <= 1024 or num_cq & (num_cq - 1):
            raise ValueError(f"num_cq must be a power of two in 1..1024, not {num_cq!r}")
        if not isinstance(max_inflight, int) or not 1 <= max_inflight <= 256:
            raise ValueError(f"max_inflight must be in 1..256, not {max_inflight!r}")
        self.width = width
        self.num_cq = num_cq
        self.max_inflight = max_inflight
        super().__init__({
            "cmd": Out(CommandSignature()),
            "cq_db": In(stream.Signature(data.StructLayout({"cqn": 16, "index": 16}))),
            "cq_arm": In(stream.Signature(data.StructLayout({"cqn": 16, "mode": 2}))),
            "reserve": In(stream.Signature(data.StructLayout({"cqn": 16}))),
            "reserve_resp": Out(stream.Signature(data.StructLayout({"ok": 1}))),
            "complete": In(stream.Signature(cqe_layout)),
            "mem": Out(WriteClientSignature(width)),
            "event": Out(stream.Signature(event_layout)),
            "fault": Out(stream.Signature(data.StructLayout({"qpn": 24}))),
            "stat": Out(NUM_COUNTERS),
            "sweeping": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        ib = ceil_log2(self.num_cq)

        m.submodules.table = table = Memory(shape=_row_layout, depth=self.num_cq, init=[])
        rd = table.read_port()
        wr = table.write_port()
        m.submodules.inflight = inflight = Queue(_inflight_layout, self.max_inflight,
                                                 buffered=False)
        # CQEs decided by the table FSM, waiting for the writer (so a reservation never waits
        # behind a CQE write that waits for the AXI W channel)
        m.submodules.wq = wq = Queue(_write_layout, 2, buffered=False)

        cur = Signal(16)                      # CQN of the operation
        in_range = Signal()
        m.d.comb += in_range.eq(cur < self.num_cq)
        row = Signal(_row_layout, reset_less=True)     # a plain pipeline register
        new = Signal(_row_layout)
        m.d.comb += [rd.addr.eq(cur[:ib]), rd.en.eq(1), wr.addr.eq(cur[:ib]), wr.data.eq(new),
                     new.eq(row)]
        # The row register follows the RAM every cycle (no enable: EBR clock-to-out is long).
        # It holds the row of ``cur`` from CHECK on; the only later write to that row (EXEC)
        # leaves ``base``, the one field still used afterwards (ADDR, ADDR2), unchanged.
        m.d.sync += row.eq(rd.data)

        # latched inputs
        op = Signal(2)                        # 0 DB, 1 ARM, 2 RSV, 3 CMP
        db_index = Signal(16)
        arm_mode = Signal(2)
        c = Signal(cqe_layout)
        cmd = Signal.like(self.cmd.cmd.payload)
        cmd_args = Signal(data.ArrayLayout(32, 3))  # SET_CQ's ARG0..2, read one per cycle
        arg_cnt = Signal(range(4))
        m.d.comb += self.cmd.arg_addr.eq(arg_cnt)
        result = Signal(8)
        rsv_ok = Signal()

        # derived from the row
        size = Signal(17)
        occ = Signal(16)
        full = Signal()
        m.d.comb += [
            size.eq(Const(1, 17) << row.log2),
            occ.eq(row.prod + row.resv - row.cons),
            full.eq(~row.valid | ~in_range | (occ >= size)),
        ]
        has_resv = Signal()
        m.d.comb += has_resv.eq(~c.flush & (row.resv != 0) & row.valid & in_range)
        full_r, has_resv_r, match_r = Signal(), Signal(), Signal()
        match = Signal()
        m.d.comb += match.eq((row.arm == 1) | ((row.arm == 2) & (c.se | (c.status != 0))))

        # the CQE being written
        slot = Signal(15)
        phase = Signal()
        addr_lo = Signal(17)
        addr = Signal(64)
        imm = Signal(32)
        err = Signal()
        m.d.comb += [
            err.eq(c.status != 0),
            imm.eq(Mux(c.flags & WITH_IMM,
                       Cat(c.imm_or_rkey[24:32], c.imm_or_rkey[16:24],
                           c.imm_or_rkey[8:16], c.imm_or_rkey[0:8]),
                       c.imm_or_rkey)),
        ]
        entry = Signal(cqe_entry_layout, name="cqe")    # the 32-byte entry; other bits are 0
        m.d.comb += [
            entry.wr_id.eq(c.wr_id),
            entry.byte_len.eq(Mux(err, 0, c.byte_len)),
            entry.imm_or_rkey.eq(Mux(err, 0, imm)),
            entry.qpn.eq(c.qpn),
            entry.status.eq(c.status),
            entry.opcode.eq(c.opcode),
            entry.flags.eq(Mux(err, 0, c.flags)),
            entry.phase.eq(phase),
        ]
        cqe = entry.as_value()                # its bits, byte i = bits 8·i..8·i+7
        assert len(cqe) == 8 * CQE_BYTES
        nbeats = max(1, 256 // W)
        beat = Signal(range(nbeats + 1))
        tag = Signal(8)

        # event merge: the main FSM (a) and the completion FSM (b) share the event output
        a_valid, a_ready, a_ev = Signal(), Signal(), Signal(event_layout)
        b_valid, b_ready, b_ev = Signal(), Signal(), Signal(event_layout)
        ev_valid = Signal()
        ev = Signal(event_layout)
        m.d.comb += [self.event.valid.eq(ev_valid), self.event.payload.eq(ev)]
        with m.If(~ev_valid | self.event.ready):
            with m.If(a_valid):
                m.d.comb += a_ready.eq(1)
                m.d.sync += [ev.eq(a_ev), ev_valid.eq(1)]
            with m.Elif(b_valid):
                m.d.comb += b_ready.eq(1)
                m.d.sync += [ev.eq(b_ev), ev_valid.eq(1)]
            with m.Else():
                m.d.sync += ev_valid.eq(0)

        with m.FSM(name="cqe"):
            with m.State("SWEEP"):
                m.d.comb += [self.sweeping.eq(1), new.eq(0), wr.en.eq(1)]
                m.d.sync += cur.eq(cur + 1)
                with m.If(cur == self.num_cq - 1):
                    m.d.sync += cur.eq(0)
                    m.next = "IDLE"

            with m.State("IDLE"):
                with m.If(self.cmd.cmd.valid):
                    m.d.comb += self.cmd.cmd.ready.eq(1)
                    m.d.sync += [cmd.eq(self.cmd.cmd.payload),
                                 cur.eq(self.cmd.cmd.payload.index), arg_cnt.eq(0)]
                    m.next = "CMD_ARGS"
                with m.Elif(self.cq_db.valid):
                    m.d.comb += self.cq_db.ready.eq(1)
                    m.d.sync += [op.eq(0), cur.eq(self.cq_db.payload.cqn),
                                 db_index.eq(self.cq_db.payload.index)]
                    m.next = "READ"
                with m.Elif(self.cq_arm.valid):
                    m.d.comb += self.cq_arm.ready.eq(1)
                    m.d.sync += [op.eq(1), cur.eq(self.cq_arm.payload.cqn),
                                 arm_mode.eq(self.cq_arm.payload.mode)]
                    m.next = "READ"
                with m.Elif(self.reserve.valid):
                    m.d.comb += self.reserve.ready.eq(1)
                    m.d.sync += [op.eq(2), cur.eq(self.reserve.payload.cqn)]
                    m.next = "READ"
                with m.Elif(self.complete.valid & wq.i.ready):
                    m.d.comb += self.complete.ready.eq(1)
                    m.d.sync += [op.eq(3), cur.eq(self.complete.payload.cqn),
                                 c.eq(self.complete.payload)]
                    m.next = "READ"

            with m.State("CMD_ARGS"):
                # ARG arg_cnt is addressed this cycle and arrives the next
                m.d.sync += arg_cnt.eq(arg_cnt + 1)
                for i in range(3):
                    with m.If(arg_cnt == i + 1):
                        m.d.sync += cmd_args[i].eq(self.cmd.arg_data)
                with m.If(arg_cnt == 3):
                    m.next = "CMD"

            with m.State("CMD"):
                base = Cat(cmd_args[0], cmd_args[1])
                log2 = cmd_args[2][:5]
                with m.If(cmd.opcode != CmdOp.SET_CQ):
                    m.d.sync += result.eq(Result.UNKNOWN_OPCODE)
                with m.Elif(cmd.index >= self.num_cq):
                    m.d.sync += result.eq(Result.BAD_INDEX)
                with m.Elif((log2 > 15) | (base[:6] != 0)):     # 64-byte aligned (§4.2)
                    m.d.sync += result.eq(Result.BAD_ARGUMENT)
                with m.Else():
                    m.d.sync += result.eq(Result.OK)
                m.next = "CMD_WRITE"

            with m.State("CMD_WRITE"):          # checks registered first (timing)
                base = Cat(cmd_args[0], cmd_args[1])
                with m.If(result == Result.OK):
                    m.d.comb += [wr.en.eq(1), new.eq(0), new.valid.eq(1),
                                 new.base.eq(base[5:]), new.log2.eq(cmd_args[2][:5])]
                m.next = "CMD_RESP"

            with m.State("CMD_RESP"):
                m.d.comb += [self.cmd.resp.valid.eq(1),
                             self.cmd.resp.payload.result.eq(result)]
                with m.If(self.cmd.resp.ready):
                    m.next = "IDLE"

            with m.State("READ"):               # rd.addr = cur this cycle
                m.next = "LATCH"

            with m.State("LATCH"):              # rd.data → row register (loaded every cycle)
                m.next = "CHECK"

            with m.State("CHECK"):              # occupancy and arm tests → registers
                m.d.sync += [
                    full_r.eq(full), has_resv_r.eq(has_resv), match_r.eq(match),
                    slot.eq(row.prod & (size - 1)),
                    phase.eq(~(row.prod >> row.log2)[0]),
                ]
                m.next = "EXEC"

            with m.State("EXEC"):
                m.d.sync += a_ev.number.eq(cur)
                m.d.sync += a_ev.type.eq(EventType.CQ_OVERFLOW)
                with m.Switch(op):
                    with m.Case(0):
                        with m.If(row.valid & in_range):
                            m.d.comb += [wr.en.eq(1), new.cons.eq(db_index)]
                        m.next = "IDLE"
                    with m.Case(1):
                        with m.If(row.valid & in_range & ((arm_mode == 1) | (arm_mode == 2))):
                            m.d.comb += [wr.en.eq(1), new.arm.eq(arm_mode)]
                        m.next = "IDLE"
                    with m.Case(2):
                        m.d.sync += rsv_ok.eq(~full_r)
                        with m.If(~full_r):
                            m.d.comb += [wr.en.eq(1), new.resv.eq(row.resv + 1)]
                        m.next = "RSV_RESP"
                    with m.Case(3):
                        with m.If(has_resv_r | ~full_r):
                            m.d.comb += [wr.en.eq(1), new.prod.eq(row.prod + 1)]
                            with m.If(has_resv_r):
                                m.d.comb += new.resv.eq(row.resv - 1)
                            with m.If(match_r):
                                m.d.comb += new.arm.eq(0)
                            m.d.comb += [
                                wq.i.valid.eq(1),
                                wq.i.payload.base.eq(row.base),
                                wq.i.payload.slot.eq(slot),
                                wq.i.payload.entry.eq(cqe),
                                wq.i.payload.qpn.eq(c.qpn),
                                wq.i.payload.cqn.eq(cur),
                                wq.i.payload.fire.eq(match_r),
                            ]
                            m.next = "IDLE"
                        with m.Elif(~c.flush):
                            m.next = "EVENT"
                        with m.Else():
                            m.next = "IDLE"

            with m.State("RSV_RESP"):
                m.d.comb += [self.reserve_resp.valid.eq(1),
                             self.reserve_resp.payload.ok.eq(rsv_ok)]
                with m.If(self.reserve_resp.ready):
                    m.next = "IDLE"
                    with m.If(~rsv_ok):
                        m.next = "EVENT"

            with m.State("EVENT"):
                m.d.comb += a_valid.eq(1)
                with m.If(a_ready):
                    m.next = "IDLE"

        # ---- the writer: one placed CQE at a time, address then one 32-byte burst ----------
        w = Signal(_write_layout)
        with m.FSM(name="writer"):
            with m.State("IDLE"):
                m.d.comb += wq.o.ready.eq(1)
                with m.If(wq.o.valid):
                    m.d.sync += w.eq(wq.o.payload)
                    m.next = "ADDR"

            with m.State("ADDR"):
                m.d.sync += addr_lo.eq(w.base[:16] + w.slot)
                m.next = "ADDR2"

            with m.State("ADDR2"):
                m.d.sync += addr.eq(Cat(Const(0, 5), addr_lo[:16], w.base[16:] + addr_lo[16]))
                m.next = "WREQ"

            with m.State("WREQ"):
                m.d.comb += [
                    self.mem.req.valid.eq(inflight.i.ready),
                    self.mem.req.payload.addr.eq(addr),
                    self.mem.req.payload.len_bytes.eq(CQE_BYTES),
                    self.mem.req.payload.tag.eq(tag),
                ]
                with m.If(self.mem.req.ready & inflight.i.ready):
                    m.d.comb += [
                        inflight.i.valid.eq(1),
                        inflight.i.payload.qpn.eq(w.qpn),
                        inflight.i.payload.cqn.eq(w.cqn),
                        inflight.i.payload.fire.eq(w.fire),
                    ]
                    m.d.sync += [tag.eq(tag + 1), beat.eq(0)]
                    m.next = "WDATA"

            with m.State("WDATA"):
                wcqe = w.entry
                m.d.comb += [self.mem.data.valid.eq(1),
                             self.mem.data.payload.last.eq(beat == nbeats - 1)]
                if W >= 256:
                    lanes = W // 256
                    hi = addr[5:ceil_log2(W // 8)] if lanes > 1 else Const(0, 1)
                    m.d.comb += [
                        self.mem.data.payload.data.eq(wcqe << (hi * 256)),
                        self.mem.data.payload.strb.eq(Const(0xFFFFFFFF, W // 8) << (hi * 32)),
                    ]
                else:
                    with m.Switch(beat):
                        for k in range(nbeats):
                            with m.Case(k):
                                m.d.comb += self.mem.data.payload.data.eq(wcqe[k * W:(k + 1) * W])
                    m.d.comb += self.mem.data.payload.strb.eq(Const((1 << (W // 8)) - 1, W // 8))
                with m.If(self.mem.data.ready):
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(beat == nbeats - 1):
                        m.next = "IDLE"

        # completions of CQE writes: count, arm events, faults
        d = Signal(_inflight_layout)
        d_err = Signal()
        with m.FSM(name="done"):
            with m.State("IDLE"):
                with m.If(self.mem.done.valid):
                    m.d.comb += [self.mem.done.ready.eq(1), inflight.o.ready.eq(1)]
                    m.d.sync += [d.eq(inflight.o.payload), d_err.eq(self.mem.done.payload.err)]
                    with m.If(self.mem.done.payload.err):
                        m.next = "EVENT"
                    with m.Else():
                        m.d.comb += self.stat[Counter.COMPLETIONS].eq(1)
                        with m.If(inflight.o.payload.fire):
                            m.next = "EVENT"
            with m.State("EVENT"):
                m.d.comb += [
                    b_valid.eq(1),
                    b_ev.type.eq(Mux(d_err, EventType.HOST_FAULT, EventType.COMPLETION)),
                    b_ev.number.eq(Mux(d_err, d.qpn, d.cqn)),
                ]
                with m.If(b_ready):
                    m.next = "IDLE"
                    with m.If(d_err):
                        m.next = "FAULT"
            with m.State("FAULT"):
                m.d.comb += [self.fault.valid.eq(1), self.fault.payload.qpn.eq(d.qpn)]
                with m.If(self.fault.ready):
                    m.next = "IDLE"
        return m
