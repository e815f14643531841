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
until its ``resp`` returns the result (and, with ``write_args``, new ARG values).

Doorbells
---------
RQ_DB, SQ_DB, CQ_DB and CQ_ARM writes are decoded into the ``rq_db``, ``sq_db``, ``cq_db`` and
``cq_arm`` streams ({number 16, value 16}) through 4-entry queues; a full queue holds the
AXI4-Lite write (back-pressure) rather than losing a doorbell.

Reset sweep
-----------
While ``sweeping`` is high (any block clearing its tables after ``rst``), CMD_STATUS reads busy,
CMD writes are ignored and ``drop_all`` tells RX Parse to drop and count every frame (as 2).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..ifaces import (NUM_ARGS, NUM_COUNTERS, CmdOp, CommandSignature, Result, cmd_layout,
                      event_layout, resp_layout)
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

    def __init__(self, config=RnicConfig()):
        self.config = config
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
        m.submodules.axil = slave = AxiLiteSlave(read_latency=1)
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
        args = Signal(data.ArrayLayout(32, NUM_ARGS))
        m.d.comb += [self.local_mac.eq(Cat(mac_lo, mac_hi)), self.local_ip.eq(ipv4),
                     self.us_cycles.eq(us_cycles), self.drop_all.eq(self.sweeping)]

        # ---- counters ----------------------------------------------------------------------
        counters = Signal(data.ArrayLayout(32, NUM_COUNTERS))
        for i in range(NUM_COUNTERS):
            total = counters[i] + self.stat_inc[i]
            m.d.sync += counters[i].eq(total[32:].any().replicate(32) | total[:32])

        # ---- event queue -------------------------------------------------------------------
        ev_entry = data.StructLayout({"ev": event_layout, "lost": 1})
        m.submodules.evq = evq = Queue(ev_entry, self.event_depth, buffered=False)
        lost_pending = Signal()
        m.d.comb += [self.event.ready.eq(1),
                     evq.i.payload.ev.eq(self.event.payload),
                     evq.i.payload.lost.eq(lost_pending),
                     evq.i.valid.eq(self.event.valid)]
        with m.If(self.event.valid):
            m.d.sync += lost_pending.eq(~evq.i.ready)    # set on a loss, cleared once carried
        m.d.comb += self.irq.eq(irq_en & evq.o.valid)

        # ---- doorbells ---------------------------------------------------------------------
        # The slave issues a write only when every doorbell queue has room for it: a queue
        # with at most depth-2 entries can take the write in flight and one more.
        db_ready = Signal()
        m.d.comb += db_ready.eq(1)
        for name in ("rq_db", "sq_db", "cq_db", "cq_arm"):
            q = Queue(doorbell_layout, 4, buffered=False)
            m.submodules[f"{name}_q"] = q
            wiring.connect(m, q.o, wiring.flipped(getattr(self, name)))
            hit = word_w == at(name.upper())
            m.d.comb += [q.i.payload.eq(slave.wr_data),
                         q.i.valid.eq(slave.wr_en & hit)]
            with m.If(q.level > 2):
                m.d.comb += db_ready.eq(0)
        m.d.comb += slave.wr_ready.eq(db_ready)

        # ---- mailbox -----------------------------------------------------------------------
        busy = Signal()
        result = Signal(8)
        cmd = Signal(cmd_layout)
        target = Signal(2)      # 0 qp, 1 cq, 2 key
        resp_q = Signal(resp_layout)
        ports = [self.qp, self.cq, self.key]
        for p in ports:
            m.d.comb += p.cmd.payload.eq(cmd)
        status_busy = busy | self.sweeping
        with m.FSM(name="mailbox"):
            with m.State("IDLE"):
                # The command register follows the write data and ARGs in every IDLE cycle (no
                # port looks at it before ISSUE), so its 530 enables are a state decode only and
                # the CMD address decode drives just the state and busy.
                m.d.sync += [cmd.opcode.eq(slave.wr_data[:8]),
                             cmd.index.eq(slave.wr_data[8:]), cmd.args.eq(args)]
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
                            m.d.sync += resp_q.eq(p.resp.payload)
                            m.next = "WRITEBACK"
            with m.State("WRITEBACK"):
                # one registered stage between the block's answer and the 512 ARG flops
                m.d.sync += [result.eq(resp_q.result), busy.eq(0)]
                with m.If(resp_q.write_args):
                    m.d.sync += args.eq(resp_q.args)
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
                for i in range(NUM_ARGS):
                    with m.Case(at("ARG", i)):
                        with m.If(~busy):
                            m.d.sync += args[i].eq(slave.wr_data)

        # ---- register reads: two stages (group muxes on rd_en, then a 3-way select) --------
        caps0 = Cat(Const(cfg.data_width // 8, 8), Const(cfg.num_qp.bit_length() - 1, 8),
                    Const(cfg.num_cq.bit_length() - 1, 8),
                    Const(cfg.key_entries.bit_length() - 1, 8))
        arg_q, ctr_q, misc_q = Signal(32), Signal(32), Signal(32)
        group = Signal(2)          # 0 misc, 1 ARG, 2 COUNTER
        idx = word_r[:4]
        arg_base, ctr_base = at("ARG") >> 4, at("COUNTER") >> 4
        with m.If(slave.rd_en):
            m.d.sync += [arg_q.eq(args[idx]), ctr_q.eq(counters[idx])]
            with m.If(word_r[4:] == arg_base):
                m.d.sync += group.eq(1)
            with m.Elif(word_r[4:] == ctr_base):
                m.d.sync += group.eq(2)
            with m.Else():
                m.d.sync += group.eq(0)
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
                    m.d.comb += misc.eq(Cat(status_busy, Const(0, 7), result))
                with m.Case(at("IRQ_EN")):
                    m.d.comb += misc.eq(irq_en)
                with m.Case(at("EVENT")):
                    ev = evq.o.payload
                    with m.If(evq.o.valid):
                        m.d.comb += misc.eq(Cat(ev.ev.number, ev.ev.type, Const(0, 2),
                                                ev.lost, Const(1, 1)))
                    m.d.comb += evq.o.ready.eq(1)          # a read pops one event
            m.d.sync += misc_q.eq(misc)
        m.d.comb += slave.rd_data.eq(Mux(group == 1, arg_q, Mux(group == 2, ctr_q, misc_q)))
        return m
