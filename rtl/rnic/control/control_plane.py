"""The control plane: register file, command mailbox, doorbells, event queue, counters, irq.

Everything software sees through AXI4-Lite (interface.md §4) lives here; the datapath blocks
are reached through the ports below.

Command ports
-------------
``qp``, ``cq`` and ``key`` are :func:`rnic.ifaces.CommandSignature` ports seen from the mailbox
(it drives ``cmd`` and takes ``resp``). A write to CMD while not busy decodes the opcode:
SET_QP/QUERY_QP → ``qp`` (index must be 2 ≤ QPN < num_qp: QPN 0 and 1 are reserved),
SET_CQ → ``cq`` (index < num_cq), SET_KEY/QUERY_KEY → ``key`` (index < key_entries),
INVALIDATE → ``key`` (no index). Any other opcode completes at once with result 1, a bad index
with result 2. Otherwise the command goes out on the owner's ``cmd`` stream and busy stays set
until its ``resp`` returns the result. Meanwhile the owner reads (and a query writes) the ARGs
one word at a time through its port's ARG access.

Storage
-------
ARG0..15 and the sixteen counters are two 16 × 32-bit LUT RAMs. The counters share one
adder: a scan visits one counter per cycle and adds what that counter collected since its last
visit (a per-counter pending count) to its RAM word, in two stages (read, then add and write
back). A read of a counter takes the scan's slot (the scan waits a cycle) and returns the sum
written back, so it is exact. Reads come at most one in five cycles (the AXI4-Lite slave's
read latency is 2), so in any 20 cycles the scan advances 16 times and visits every counter:
the pending counts hold 20 × ``max_inc``. rst does not reach a RAM: the scan's first pass after rst (16 cycles)
writes 0 to both. Until the pass is over the AXI4-Lite port holds writes; an ARG it has not
reached reads 0, and a counter read before its word is cleared starts from 0 (a 16-bit mask
records which words were written since rst).

Doorbells
---------
RQ_DB, SQ_DB, CQ_DB and CQ_ARM writes are decoded into the ``rq_db``, ``sq_db``, ``cq_db`` and
``cq_arm`` streams ({number 16, value 16}) through one 4-entry queue, in the order written; a
full queue holds the AXI4-Lite write (back-pressure) rather than losing a doorbell. A doorbell
waits for the one ahead of it, whichever stream that goes to.

Reset sweep
-----------
While ``sweeping`` is high (any block clearing its tables after ``rst``), CMD_STATUS reads busy,
CMD writes are ignored and ``drop_all`` tells RX Parse to drop and count every frame (as 2).
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..ifaces import (NUM_ARGS, NUM_COUNTERS, CmdOp, CommandSignature, Result, cmd_layout,
                      event_layout)
from ..params import RnicConfig
from ..stream import Queue
from .axil import AxiLiteSignature, AxiLiteSlave
from .regmap import BY_NAME, ID_VALUE, VERSION_VALUE

__all__ = ["ControlPlane", "doorbell_layout"]

doorbell_layout = data.StructLayout({"value": 16, "number": 16})


def _off(name, i=0):
    return BY_NAME[name].offset + 4 * i


class ControlPlane(wiring.Component):
    """Register file, mailbox, doorbells, event queue and counters.

    Parameters
    ----------
    config : RnicConfig
    max_inc : int
        The most any counter's ``stat_inc`` lane can carry in one cycle (1..15; the top passes
        the number of blocks whose strobes it adds). It sizes the pending counts.

    Attributes
    ----------
    axil : Out(AxiLiteSignature())
        The control port.
    irq : Out(1)
        High while IRQ_EN[0] is set and the event queue is not empty.
    local_mac : Out(48)
        MAC_HI:MAC_LO, first wire byte most significant.
    local_ip : Out(32)
    us_cycles : Out(32)
    qp, cq, key : In(CommandSignature())
        Command ports toward the QP context, the CQ table and the key table.
    rq_db, sq_db, cq_db, cq_arm : Out(stream.Signature(doorbell_layout))
        Decoded doorbells: ``number`` = bits 31:16 of the write, ``value`` = bits 15:0.
    event : In(stream.Signature(event_layout))
        Events to queue (merge several sources in front). Never back-pressured: when the queue
        is full the event is dropped and the next one queued carries the "lost" flag.
    stat_inc : In(data.ArrayLayout(4, 16))
        Per-counter increments this cycle (the sum of every block's ``stat`` strobes).
    sweeping : In(1)
        Some block is clearing its tables.
    drop_all : Out(1)
        RX Parse drops every frame (reset sweep).
    """

    def __init__(self, config=RnicConfig(), *, max_inc=15):
        if not isinstance(max_inc, int) or not 1 <= max_inc <= 15:
            raise ValueError(f"max_inc must be an integer in 1..15, not {max_inc!r}")
        self.config = config
        self.max_inc = max_inc
        self.event_depth = max(16, 1 << (config.num_cq - 1).bit_length())
        super().__init__({
            "axil": Out(AxiLiteSignature()),
            "irq": Out(1),
            "local_mac": Out(48),
            "local_ip": Out(32),
            "us_cycles": Out(32, init=config.us_cycles),
            "qp": In(CommandSignature()),
            "cq": In(CommandSignature()),
            "key": In(CommandSignature()),
            "rq_db": Out(stream.Signature(doorbell_layout)),
            "sq_db": Out(stream.Signature(doorbell_layout)),
            "cq_db": Out(stream.Signature(doorbell_layout)),
            "cq_arm": Out(stream.Signature(doorbell_layout)),
            "event": In(stream.Signature(event_layout)),
            "stat_inc": In(data.ArrayLayout(4, NUM_COUNTERS)),
            "sweeping": In(1),
            "drop_all": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.axil = slave = AxiLiteSlave(read_latency=2)
        for name, member in self.axil.signature.members.items():
            ours, theirs = getattr(self.axil, name), getattr(slave.bus, name)
            m.d.comb += (theirs.eq(ours) if member.flow == In else ours.eq(theirs))
        word_w = slave.wr_addr[2:]
        word_r = slave.rd_addr[2:]

        def at(name, i=0):
            return _off(name, i) >> 2

        # ---- plain registers ---------------------------------------------------------------
        mac_lo, mac_hi, ipv4 = Signal(32), Signal(16), Signal(32)
        us_cycles = Signal(32, init=cfg.us_cycles)
        irq_en = Signal()
        m.d.comb += [self.local_mac.eq(Cat(mac_lo, mac_hi)), self.local_ip.eq(ipv4),
                     self.us_cycles.eq(us_cycles), self.drop_all.eq(self.sweeping)]

        # ---- the scan: one ARG/counter entry per cycle; its first pass after rst clears ------
        assert NUM_ARGS == NUM_COUNTERS == 16
        scan = Signal(4)
        clearing = Signal(init=1)
        word_r_ctr = word_r[4:] == (at("COUNTER") >> 4)
        ctr_rd = Signal()               # a counter read takes the scan's slot (read stage 1)
        m.d.sync += ctr_rd.eq(slave.rd_en & word_r_ctr)
        with m.If(~ctr_rd):
            m.d.sync += scan.eq(scan + 1)
            with m.If(scan == 15):
                m.d.sync += clearing.eq(0)

        # ---- counters: LUT RAM, one incrementer, a pending count per counter ---------------
        m.submodules.counters = cmem = memory.Memory(shape=32, depth=NUM_COUNTERS, init=[])
        c_wr = cmem.write_port()
        c_rd = cmem.read_port(domain="comb")
        pending = Array(Signal(range(20 * self.max_inc + 1), name=f"pending{i}")
                        for i in range(NUM_COUNTERS))
        # Two stages: the visit reads the RAM word and the pending count into registers (A),
        # the next cycle adds, saturates and writes back (B). A visit of the entry B writes in
        # the same cycle takes B's sum instead of the RAM word (a read right after a scan of
        # the same counter, or the reverse).
        visit = Signal(4)               # the counter visited this cycle (stage A)
        m.d.comb += visit.eq(Mux(ctr_rd, word_r[:4], scan))
        for i in range(NUM_COUNTERS):
            # folded at its visit; collects ≤ 20 cycles of increments
            m.d.sync += pending[i].eq(Mux(visit == i, 0, pending[i]) + self.stat_inc[i])
        b_visit = Signal(4)
        b_ram = Signal(32)
        cleared = Signal(NUM_COUNTERS)  # the counter's RAM word was written since rst
        b_pend = Signal.like(pending[0])
        s_total = Signal(33)
        s_sat = Signal(32)              # stage B: the counter's value, written back
        m.d.comb += [c_rd.addr.eq(visit),
                     s_total.eq(b_ram + b_pend),
                     s_sat.eq(Mux(s_total[32], Const(0xFFFFFFFF, 32), s_total[:32])),
                     c_wr.addr.eq(b_visit), c_wr.data.eq(s_sat), c_wr.en.eq(1)]
        m.d.sync += [b_visit.eq(visit), b_pend.eq(pending[visit]),
                     b_ram.eq(Mux(cleared.bit_select(visit, 1),
                                  Mux(visit == b_visit, s_sat, c_rd.data), 0)),
                     cleared.bit_select(visit, 1).eq(1)]

        # ---- event queue -------------------------------------------------------------------
        # an entry keeps the number whole and the type in 3 bits (types 1..4)
        ev_entry = data.StructLayout({"type": 3, "number": 24, "lost": 1})
        m.submodules.evq = evq = Queue(ev_entry, self.event_depth, buffered=False)
        lost_pending = Signal()
        m.d.comb += [self.event.ready.eq(1),
                     evq.i.payload.type.eq(self.event.payload.type),
                     evq.i.payload.number.eq(self.event.payload.number),
                     evq.i.payload.lost.eq(lost_pending),
                     evq.i.valid.eq(self.event.valid)]
        with m.If(self.event.valid):
            m.d.sync += lost_pending.eq(~evq.i.ready)    # set on a loss, cleared once carried
        m.d.comb += self.irq.eq(irq_en & evq.o.valid)

        # ---- doorbells ---------------------------------------------------------------------
        # One 4-entry queue for the four doorbell registers, each entry tagged with its
        # register; the head goes to its own stream. The slave issues a write only when the
        # queue has room for it: at most depth-2 entries can take the write in flight and one
        # more. No write is issued during the clearing pass (the ARG RAM's write port is the
        # pass's).
        db_names = ("rq_db", "sq_db", "cq_db", "cq_arm")
        db_entry = data.StructLayout({"kind": 2, "db": doorbell_layout})
        m.submodules.db_q = dbq = Queue(db_entry, 4, buffered=False)
        db_hit = Signal()
        m.d.comb += [dbq.i.payload.db.eq(slave.wr_data), dbq.i.valid.eq(slave.wr_en & db_hit)]
        with m.Switch(word_w):
            for k, name in enumerate(db_names):
                with m.Case(at(name.upper())):
                    m.d.comb += [db_hit.eq(1), dbq.i.payload.kind.eq(k)]
        for k, name in enumerate(db_names):
            out = getattr(self, name)
            m.d.comb += [out.payload.eq(dbq.o.payload.db),
                         out.valid.eq(dbq.o.valid & (dbq.o.payload.kind == k))]
            with m.If(dbq.o.payload.kind == k):
                m.d.comb += dbq.o.ready.eq(out.ready)
        db_ready = Signal()
        m.d.comb += [db_ready.eq(~clearing & (dbq.level <= 2)), slave.rd_ready.eq(1),
                     slave.wr_ready.eq(db_ready)]

        # ---- mailbox -----------------------------------------------------------------------
        busy = Signal()
        result = Signal(2)              # CMD_STATUS [15:8]: the result codes are 0..3
        cmd = Signal(cmd_layout)
        target = Signal(2)      # 0 qp, 1 cq, 2 key
        ports = [self.qp, self.cq, self.key]
        for p in ports:
            m.d.comb += p.cmd.payload.eq(cmd)
        status_busy = busy | self.sweeping | clearing

        # ARG0..15: one LUT RAM. Its write port is the clearing pass's, then software's while
        # no command runs, then the command's owner's; the owner's read port answers a cycle
        # after the address, like a block RAM.
        m.submodules.args = amem = memory.Memory(shape=32, depth=NUM_ARGS, init=[])
        a_wr = amem.write_port()
        a_blk = amem.read_port(domain="comb")
        a_bus = amem.read_port(domain="comb")
        blk_addr, blk_we, blk_wdata = Signal(4), Signal(), Signal(32)
        with m.Switch(target):
            for t, p in enumerate(ports):
                with m.Case(t):
                    m.d.comb += [blk_addr.eq(p.arg_addr), blk_we.eq(p.arg_we),
                                 blk_wdata.eq(p.arg_wdata)]
        blk_rdata = Signal(32)
        m.d.comb += a_blk.addr.eq(blk_addr)
        m.d.sync += blk_rdata.eq(a_blk.data)
        for p in ports:
            m.d.comb += p.arg_data.eq(blk_rdata)
        sw_arg = slave.wr_en & (word_w[4:] == (at("ARG") >> 4)) & ~busy
        with m.If(clearing):
            m.d.comb += [a_wr.addr.eq(scan), a_wr.data.eq(0), a_wr.en.eq(1)]
        with m.Elif(busy):
            m.d.comb += [a_wr.addr.eq(blk_addr), a_wr.data.eq(blk_wdata), a_wr.en.eq(blk_we)]
        with m.Else():
            m.d.comb += [a_wr.addr.eq(word_w[:4]), a_wr.data.eq(slave.wr_data),
                         a_wr.en.eq(sw_arg)]

        with m.FSM(name="mailbox"):
            with m.State("IDLE"):
                # The command register follows the write data in every IDLE cycle (no port
                # looks at it before ISSUE): its enables are a state decode only.
                m.d.sync += [cmd.opcode.eq(slave.wr_data[:8]), cmd.index.eq(slave.wr_data[8:])]
                with m.If(slave.wr_en & (word_w == at("CMD")) & ~status_busy):
                    m.d.sync += busy.eq(1)
                    m.next = "DECODE"
            with m.State("DECODE"):
                # limits are powers of two: "index < limit" is "no bit at or above log2(limit)"
                def below(limit):
                    return ~cmd.index[limit.bit_length() - 1:].any()
                with m.Switch(cmd.opcode):
                    for opc, tgt, limit, low in (
                            (CmdOp.SET_QP, 0, cfg.num_qp, 2), (CmdOp.QUERY_QP, 0, cfg.num_qp, 2),
                            (CmdOp.SET_CQ, 1, cfg.num_cq, 0),
                            (CmdOp.SET_KEY, 2, cfg.key_entries, 0),
                            (CmdOp.QUERY_KEY, 2, cfg.key_entries, 0),
                            (CmdOp.INVALIDATE, 2, None, 0)):
                        with m.Case(opc):
                            ok = Const(1) if limit is None else below(limit)
                            if low:
                                ok = ok & cmd.index[1:].any()          # QPN 0 and 1 reserved
                            with m.If(ok):
                                m.d.sync += target.eq(tgt)
                                m.next = "ISSUE"
                            with m.Else():
                                m.d.sync += [result.eq(Result.BAD_INDEX), busy.eq(0)]
                                m.next = "IDLE"
                    with m.Default():
                        m.d.sync += [result.eq(Result.UNKNOWN_OPCODE), busy.eq(0)]
                        m.next = "IDLE"
            with m.State("ISSUE"):
                for t, p in enumerate(ports):
                    with m.If(target == t):
                        m.d.comb += p.cmd.valid.eq(1)
                        with m.If(p.cmd.ready):
                            m.next = "WAIT"
            with m.State("WAIT"):
                for t, p in enumerate(ports):
                    with m.If(target == t):
                        m.d.comb += p.resp.ready.eq(1)
                        with m.If(p.resp.valid):
                            m.d.sync += [result.eq(p.resp.payload.result[:2]), busy.eq(0)]
                            m.next = "IDLE"

        # ---- register writes ---------------------------------------------------------------
        with m.If(slave.wr_en):
            with m.Switch(word_w):
                with m.Case(at("MAC_LO")):
                    m.d.sync += mac_lo.eq(slave.wr_data)
                with m.Case(at("MAC_HI")):
                    m.d.sync += mac_hi.eq(slave.wr_data[:16])
                with m.Case(at("IPV4")):
                    m.d.sync += ipv4.eq(slave.wr_data)
                with m.Case(at("US_CYCLES")):
                    m.d.sync += us_cycles.eq(slave.wr_data)
                with m.Case(at("IRQ_EN")):
                    m.d.sync += irq_en.eq(slave.wr_data[0])

        # ---- register reads: a counter read steals the scan's slot in stage 1 (its stage A);
        #      the data is chosen in stage 2 (read_latency 2) from the address the slave still
        #      holds: the counter's stage B sum, an ARG word, or the misc mux; EVENT pops there.
        #      An ARG the clearing pass has not reached yet reads 0. ------------------------
        caps0 = Cat(Const(cfg.data_width // 8, 8), Const(cfg.num_qp.bit_length() - 1, 8),
                    Const(cfg.num_cq.bit_length() - 1, 8),
                    Const(cfg.key_entries.bit_length() - 1, 8))
        rd_stage1, rd_stage2 = Signal(), Signal()
        m.d.sync += [rd_stage1.eq(slave.rd_en), rd_stage2.eq(rd_stage1)]
        m.d.comb += a_bus.addr.eq(word_r[:4])
        misc = Signal(32)
        with m.Switch(word_r):
            with m.Case(at("ID")):
                m.d.comb += misc.eq(ID_VALUE)
            with m.Case(at("VERSION")):
                m.d.comb += misc.eq(VERSION_VALUE)
            with m.Case(at("CAPS0")):
                m.d.comb += misc.eq(caps0)
            with m.Case(at("MAC_LO")):
                m.d.comb += misc.eq(mac_lo)
            with m.Case(at("MAC_HI")):
                m.d.comb += misc.eq(mac_hi)
            with m.Case(at("IPV4")):
                m.d.comb += misc.eq(ipv4)
            with m.Case(at("US_CYCLES")):
                m.d.comb += misc.eq(us_cycles)
            with m.Case(at("CMD_STATUS")):
                m.d.comb += misc.eq(Cat(status_busy, Const(0, 7), result, Const(0, 6)))
            with m.Case(at("IRQ_EN")):
                m.d.comb += misc.eq(irq_en)
            with m.Case(at("EVENT")):
                ev = evq.o.payload
                with m.If(evq.o.valid):
                    m.d.comb += misc.eq(Cat(ev.number, ev.type, Const(0, 3), ev.lost,
                                            Const(1, 1)))
                m.d.comb += evq.o.ready.eq(rd_stage2)       # a read pops one event
        arg_page = word_r[4:] == (at("ARG") >> 4)
        m.d.comb += slave.rd_data.eq(
            Mux(word_r_ctr, s_sat,
                Mux(arg_page, Mux(clearing & (word_r[:4] >= scan), 0, a_bus.data), misc)))
        return m
