"""The control plane: register file, command mailbox, doorbells, event queue, counters, irq.

Everything software sees through AXI4-Lite (interface.md §4) lives here; the datapath blocks
are reached through the ports below.

Command ports
-------------
``qp``, ``cq`` and ``key`` are :func:`rnic.ifaces.CommandSignature` ports seen from the mailbox
(it drives ``cmd`` and takes ``resp``). A write to CMD while not busy decodes the opcode:
SET_QP/QUERY_QP → ``qp`` (index must be 2 ≤ QPN < num_qp: QPN 0 and 1 are reserved),
SET_CQ → ``cq`` (index < num_cq), SET_KEY/QUERY_KEY → ``key`` (index < key_entries),
INVALIDATE → ``key`` (no index). The ``index`` a port receives keeps the bits the largest
table needs (log2(max(num_qp, num_cq, key_entries))); an index with a bit above them is out of
range for every table. Any other opcode completes at once with result 1, a bad index
with result 2. Otherwise the command goes out on the owner's ``cmd`` stream and busy stays set
until its ``resp`` returns the result. Meanwhile the owner reads (and a query writes) the ARGs
one word at a time through its port's ARG access.

Storage
-------
ARG0..15 are one 16 × 32-bit LUT RAM with one read port: the command's owner's while the
command is issued or runs, software's otherwise (an AXI4-Lite read of an ARG waits while a
command is busy); its writes land through one register, a cycle after they are made. The
sixteen counters are a 16 × 33-bit LUT RAM (the count and a sticky "saturated" bit; a
saturated counter reads all ones) with one adder: each counter has a small tally that only
ever adds its ``stat_inc`` lane and wraps, and a scan visits one counter per
cycle and adds to its RAM word what the tally gained since the visit before (the tally minus
its snapshot, kept in a second LUT RAM), in two stages (read, then add and write back). A read
of a counter takes the scan's slot and returns the sum written back, so it is exact; a read of
the counter the scan visits in that cycle waits a cycle, so no counter is visited in two
cycles in a row. Reads come at most one in five cycles (the AXI4-Lite slave's read latency is
2), so a counter is visited at least once every 20 cycles and its tally holds 20 × its
``max_inc``. rst does not reach a RAM: the scan's first pass after rst (16 cycles) writes 0 to
every ARG and counter and takes every tally whole; until the pass is over the AXI4-Lite port
holds writes and reads of an ARG or a counter (other registers read at once).

Registers are read in two stages after the slave's ``rd_en``: the address (held by the slave
for the whole read) is decoded into one-hot selects in the first, the sources are ANDed with
them and ORed in the second.

Doorbells
---------
RQ_DB, SQ_DB, CQ_DB and CQ_ARM writes are decoded into the ``rq_db``, ``sq_db``, ``cq_db`` and
``cq_arm`` streams ({number 16, value 16}) through one register, in the order written: a
doorbell write waits (the AXI4-Lite write is held, back-pressure) while the register still
holds the one before it, whichever stream that goes to; it is never lost.

Events
------
The event queue holds max(16, num_cq) entries (interface.md §4.4: at least num_cq) in LUT RAM.
An entry keeps the number in the bits a QPN or a CQN of the configuration has
(log2(max(num_qp, num_cq))): every event names one of the two.

Reset sweep
-----------
While ``sweeping`` is high (any block clearing its tables after ``rst``), CMD_STATUS reads busy,
CMD writes are ignored and ``drop_all`` tells RX Parse to drop and count every frame (as 2).
"""

import types

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..ifaces import NUM_ARGS, NUM_COUNTERS, CmdOp, CommandSignature, Result, event_layout
from ..params import RnicConfig
from ..parts import add as _add
from ..stream import Queue
from .axil import AxiLiteSignature, AxiLiteSlave
from .regmap import BY_NAME, ID_VALUE, VERSION_NO_READ, VERSION_VALUE

__all__ = ["ControlPlane", "doorbell_layout"]

doorbell_layout = data.StructLayout({"value": 16, "number": 16})


def _off(name, i=0):
    return BY_NAME[name].offset + 4 * i


def _at(name, i=0):
    """The word address of register ``name`` (element ``i``)."""
    return _off(name, i) >> 2


def _decoder(m, word, kind):
    """Register hits of a word address: each 16-word page compared once, then the word
    within it (a 4-bit compare) rather than every register's whole address. Returns
    ``page(p)`` (the address is in page ``p``; one ``{kind}_page_{p}`` signal per page, made
    at its first use) and ``hit(name)`` (the address is register ``name``'s)."""
    pages = {}

    def page(p):
        if p not in pages:
            pages[p] = Signal(name=f"{kind}_page_{p:x}")
            m.d.comb += pages[p].eq(word[4:] == p)
        return pages[p]

    def hit(name):
        return page(_at(name) >> 4) & (word[:4] == (_at(name) & 15))
    return page, hit


def _below(idx, idx_over, limit):
    """The command's index is below ``limit``, a power of two: no bit of ``idx`` at or above
    log2(limit), and none above ``idx`` (``idx_over``)."""
    return ~idx_over & ~idx[limit.bit_length() - 1:].any()


class ControlPlane(wiring.Component):
    """Register file, mailbox, doorbells, event queue and counters.

    Parameters
    ----------
    config : RnicConfig
    max_inc : int or sequence of 16 ints
        The most each counter's ``stat_inc`` lane carries in one cycle (0..15; one figure for
        every counter or one per counter: the top passes the number of strobe sources it adds
        into each lane). It sizes the tallies; a lane carrying more is a design error.

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
        bounds = (max_inc,) * NUM_COUNTERS if isinstance(max_inc, int) else tuple(max_inc)
        if (len(bounds) != NUM_COUNTERS or not all(isinstance(b, int) and 0 <= b <= 15
                                                   for b in bounds) or not any(bounds)):
            raise ValueError(f"max_inc must be an integer in 1..15 or {NUM_COUNTERS} integers "
                             f"in 0..15, not all 0, not {max_inc!r}")
        self.config = config
        self.max_inc = bounds
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
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace()
        _add(t, self._axil_slave(m, t))
        _add(t, self._plain_registers(m, t))
        _add(t, self._scan(m, t))
        _add(t, self._counters(m, t))
        _add(t, self._event_queue(m, t))
        self._doorbells(m, t)
        _add(t, self._command_register(m, t))
        _add(t, self._arg_ram(m, t))
        self._mailbox_fsm(m, t)
        self._register_writes(m, t)
        self._register_reads(m, t)
        return m

    def _axil_slave(self, m, t):
        """The AXI4-Lite slave (read latency 2) on the ``axil`` port, and the decoders of its
        write and read word addresses (:func:`_decoder`). Adds ``slave``, ``word_w``,
        ``word_r`` and the decoders' ``page_w``, ``hit_w``, ``page_r``, ``hit_r``."""
        m.submodules.axil = slave = AxiLiteSlave(read_latency=2)
        for name, member in self.axil.signature.members.items():
            ours, theirs = getattr(self.axil, name), getattr(slave.bus, name)
            m.d.comb += (theirs.eq(ours) if member.flow == In else ours.eq(theirs))
        word_w = slave.wr_addr[2:]
        word_r = slave.rd_addr[2:]
        page_w, hit_w = _decoder(m, word_w, "w")
        page_r, hit_r = _decoder(m, word_r, "r")
        return types.SimpleNamespace(slave=slave, word_w=word_w, word_r=word_r, page_w=page_w,
                                     hit_w=hit_w, page_r=page_r, hit_r=hit_r)

    def _plain_registers(self, m, t):
        """The plain registers MAC_LO, MAC_HI, IPV4, US_CYCLES and IRQ_EN, the outputs they
        drive, and ``drop_all`` (``sweeping``). Adds the registers."""
        # ---- plain registers ---------------------------------------------------------------
        mac_lo, mac_hi, ipv4 = Signal(32), Signal(16), Signal(32)
        us_cycles = Signal(32, init=self.config.us_cycles)
        irq_en = Signal()
        m.d.comb += [self.local_mac.eq(Cat(mac_lo, mac_hi)), self.local_ip.eq(ipv4),
                     self.us_cycles.eq(us_cycles), self.drop_all.eq(self.sweeping)]
        return types.SimpleNamespace(mac_lo=mac_lo, mac_hi=mac_hi, ipv4=ipv4,
                                     us_cycles=us_cycles, irq_en=irq_en)

    def _scan(self, m, t):
        """The scan, which visits one ARG/counter entry per cycle, its first pass after rst
        (``clearing``) clearing them; a counter read takes its slot (``ctr_rd``), and a read of
        the counter it visits now waits a cycle (``rd_wait``). Adds ``scan``, ``clearing``,
        ``word_r_ctr`` (the read address is a counter's), ``ctr_rd`` and ``rd_wait``."""
        word_r = t.word_r
        # ---- the scan: one ARG/counter entry per cycle; its first pass after rst clears ------
        assert NUM_ARGS == NUM_COUNTERS == 16
        scan = Signal(4)
        clearing = Signal(init=1)
        word_r_ctr = t.page_r(_at("COUNTER") >> 4)
        ctr_rd = Signal()               # a counter read takes the scan's slot (read stage 1)
        m.d.sync += ctr_rd.eq(t.slave.rd_en & word_r_ctr)
        # The scan moves on unless a read takes its slot for another counter; a read of the
        # counter the scan visits this cycle waits a cycle. So no counter is visited in two
        # cycles in a row, and a visit always reads what the one before it wrote.
        with m.If(~ctr_rd | (word_r[:4] == scan)):
            m.d.sync += scan.eq(scan + 1)
            with m.If(scan == 15):
                m.d.sync += clearing.eq(0)
        rd_wait = word_r_ctr & (word_r[:4] == scan)
        return types.SimpleNamespace(scan=scan, clearing=clearing, word_r_ctr=word_r_ctr,
                                     ctr_rd=ctr_rd, rd_wait=rd_wait)

    def _counters(self, m, t):
        """The counters: a LUT RAM of counts, one adder, and a free-running tally per counter
        whose gain since the last visit is folded into the count, in two stages (A reads, B
        adds, saturates and writes back). Adds ``s_value``, the value of the counter in stage
        B, which a counter read answers."""
        clearing = t.clearing
        # ---- counters: LUT RAM, one adder, a free-running tally per counter ------------------
        # Each counter has a small tally that only ever adds its lane (it wraps). A visit
        # folds into the RAM word what the tally gained since the counter's last visit: the
        # tally minus its snapshot, kept in a second LUT RAM and rewritten at the visit.
        # Between two visits a tally gains at most 20 x its max_inc (a counter read takes the
        # scan's slot at most once in five cycles), which its width holds, so the difference
        # is exact. Two stages: the visit reads the RAM word and takes the tally's gain into
        # registers (A); the next cycle adds, saturates and writes back (B).
        # a RAM word is the count and a sticky "saturated" bit above it: the count may wrap
        # once saturated, the value read is all ones
        m.submodules.counters = cmem = memory.Memory(shape=33, depth=NUM_COUNTERS, init=[])
        c_wr = cmem.write_port()
        c_rd = cmem.read_port(domain="comb")
        # every tally as wide as the largest needs (the difference wraps at one width)
        tally_w = (20 * max(self.max_inc)).bit_length()
        tally = [Signal(tally_w, name=f"tally{i}") for i in range(NUM_COUNTERS)]
        m.submodules.snapshots = smem = memory.Memory(shape=tally_w, depth=NUM_COUNTERS, init=[])
        t_wr = smem.write_port()
        t_rd = smem.read_port(domain="comb")
        for i in range(NUM_COUNTERS):
            inc_bits = self.max_inc[i].bit_length()     # the lane carries ≤ max_inc[i]
            if inc_bits:
                m.d.sync += tally[i].eq(tally[i] + self.stat_inc[i][:inc_bits])
        visit = Signal(4)               # the counter visited this cycle (stage A)
        now = Signal(tally_w)           # its tally
        m.d.comb += [visit.eq(Mux(t.ctr_rd, t.word_r[:4], t.scan)),
                     now.eq(Cat(*tally).word_select(visit, tally_w)),
                     c_rd.addr.eq(visit), t_rd.addr.eq(visit),
                     t_wr.addr.eq(visit), t_wr.data.eq(now), t_wr.en.eq(1)]
        b_visit = Signal(4)
        b_ram = Signal(33)
        b_gain = Signal(tally_w)
        s_total = Signal(33)
        s_sat = Signal()                # stage B: the counter is saturated
        s_value = Signal(32)            # stage B: the counter's value
        # the clearing pass starts every counter from 0 and takes the tally's whole value
        # (its reset value is 0; rst does not reach a RAM)
        m.d.sync += [b_visit.eq(visit),
                     b_gain.eq(now - Mux(clearing, 0, t_rd.data)),
                     b_ram.eq(Mux(clearing, 0, c_rd.data))]
        m.d.comb += [s_total.eq(b_ram[:32] + b_gain),
                     s_sat.eq(b_ram[32] | s_total[32]),
                     s_value.eq(s_total[:32] | s_sat.replicate(32)),
                     c_wr.addr.eq(b_visit), c_wr.data.eq(Cat(s_total[:32], s_sat)),
                     c_wr.en.eq(1)]
        return types.SimpleNamespace(s_value=s_value)

    def _event_queue(self, m, t):
        """The event queue: every event offered is taken, queued or, when the queue is full,
        dropped with the next one queued carrying "lost"; ``irq`` while IRQ_EN is set and the
        queue is not empty. Adds ``num_bits`` (the bits of an entry's number) and ``evq``."""
        cfg = self.config
        # ---- event queue -------------------------------------------------------------------
        # an entry keeps the type in 3 bits (types 1..4) and the number in the bits a QPN or a
        # CQN of this configuration has (every event names one of the two)
        num_bits = max(cfg.num_qp, cfg.num_cq).bit_length() - 1
        ev_entry = data.StructLayout({"type": 3, "number": num_bits, "lost": 1})
        m.submodules.evq = evq = Queue(ev_entry, self.event_depth, buffered=False)
        lost_pending = Signal()
        m.d.comb += [self.event.ready.eq(1),
                     evq.i.payload.type.eq(self.event.payload.type),
                     evq.i.payload.number.eq(self.event.payload.number),
                     evq.i.payload.lost.eq(lost_pending),
                     evq.i.valid.eq(self.event.valid)]
        with m.If(self.event.valid):
            m.d.sync += lost_pending.eq(~evq.i.ready)    # set on a loss, cleared once carried
        m.d.comb += self.irq.eq(t.irq_en & evq.o.valid)
        return types.SimpleNamespace(num_bits=num_bits, evq=evq)

    def _doorbells(self, m, t):
        """The doorbells: one register for RQ_DB, SQ_DB, CQ_DB and CQ_ARM, tagged with the
        register written and emptied by its stream, which holds a doorbell write while full
        (and every write during the clearing pass) through the slave's ``wr_ready``."""
        slave, word_w = t.slave, t.word_w
        # ---- doorbells ---------------------------------------------------------------------
        # One register for the four doorbell registers, tagged with the register written; it
        # goes to that register's stream. The slave issues a doorbell write only when the
        # register is empty (a write of another register is not held), so doorbells leave in
        # the order written and a full register holds the AXI4-Lite write, never loses it. No
        # write is issued during the clearing pass (the ARG RAM's write port is the pass's).
        db_names = ("rq_db", "sq_db", "cq_db", "cq_arm")
        # the four doorbells are the words 0..3 of a 4-word-aligned block
        base = _at("RQ_DB")
        assert base % 4 == 0 and [_at(n.upper()) for n in db_names] == [base + k for k in range(4)]
        db = Signal(doorbell_layout)
        db_kind = Signal(2)
        db_valid = Signal()
        db_hit = Signal()
        m.d.comb += db_hit.eq(t.page_w(base >> 4) & (word_w[2:4] == (base >> 2) % 4))
        for k, name in enumerate(db_names):
            out = getattr(self, name)
            m.d.comb += [out.payload.eq(db), out.valid.eq(db_valid & (db_kind == k))]
            with m.If(out.valid & out.ready):
                m.d.sync += db_valid.eq(0)
        with m.If(slave.wr_en & db_hit):
            m.d.sync += [db.eq(slave.wr_data), db_kind.eq(word_w[:2]), db_valid.eq(1)]
        m.d.comb += slave.wr_ready.eq(~t.clearing & ~(db_hit & db_valid))

    def _command_register(self, m, t):
        """The mailbox's command register (opcode, the index bits the largest table needs, and
        whether a bit above them was set), its target port, ``busy`` and the result, and
        CMD_STATUS's busy bit (``status_busy``: also while sweeping or clearing). Adds
        these, ``idx_bits`` and the command ports ``ports``."""
        cfg = self.config
        # ---- mailbox -----------------------------------------------------------------------
        busy = Signal()
        result = Signal(2)              # CMD_STATUS [15:8]: the result codes are 0..3
        # the command register keeps the index bits the largest table needs and whether any
        # bit above them was set (such an index is out of range for every table)
        idx_bits = max(cfg.num_qp, cfg.num_cq, cfg.key_entries).bit_length() - 1
        cmd_op = Signal(8)
        cmd_idx = Signal(idx_bits)
        cmd_idx_over = Signal()
        target = Signal(2)      # 0 qp, 1 cq, 2 key
        ports = [self.qp, self.cq, self.key]
        for p in ports:
            m.d.comb += [p.cmd.payload.opcode.eq(cmd_op), p.cmd.payload.index.eq(cmd_idx)]
        status_busy = busy | self.sweeping | t.clearing
        return types.SimpleNamespace(
            busy=busy, result=result, idx_bits=idx_bits, cmd_op=cmd_op, cmd_idx=cmd_idx,
            cmd_idx_over=cmd_idx_over, target=target, ports=ports, status_busy=status_busy)

    def _arg_ram(self, m, t):
        """ARG0..15, one LUT RAM: its write port is the clearing pass's, then software's while
        no command runs, then the command's owner's; its read port the owner's while the
        command is issued or runs (``blk_owns``), software's otherwise, answering a cycle
        after the address (``blk_rdata``). Also the slave's ``rd_ready``: an ARG or counter
        read waits for the clearing pass, an ARG read while busy. Adds ``blk_owns``,
        ``blk_rdata`` and ``arg_page_r`` (the read address is an ARG's)."""
        slave, word_w, word_r, busy, clearing = t.slave, t.word_w, t.word_r, t.busy, t.clearing
        # ARG0..15: one LUT RAM. Its write port is the clearing pass's, then software's while
        # no command runs, then the command's owner's. Its one read port is the owner's while
        # the command is issued or runs (``blk_owns``), software's otherwise (an ARG read waits
        # while a command is busy); it answers a cycle after the address, like a block RAM.
        m.submodules.args = amem = memory.Memory(shape=32, depth=NUM_ARGS, init=[])
        a_wr = amem.write_port()
        a_rd = amem.read_port(domain="comb")
        blk_owns = Signal()
        blk_addr, blk_we, blk_wdata = Signal(4), Signal(), Signal(32)
        with m.Switch(t.target):
            for k, p in enumerate(t.ports):
                with m.Case(k):
                    m.d.comb += [blk_addr.eq(p.arg_addr), blk_we.eq(p.arg_we),
                                 blk_wdata.eq(p.arg_wdata)]
        # Every write reaches the RAM through one register of its address, data and enable (it
        # lands a cycle after it is made): a block's ARG address, data and enable come from
        # another block, and the LUT RAM's write inputs want their setup before the edge. No
        # read can miss a write that waits in the register: a block reads no ARG it wrote in
        # its command, software reads an ARG only after the command's response, and a software
        # read waits while a software ARG write is made (``rd_ready``).
        blk_rdata = Signal(32)
        m.d.comb += a_rd.addr.eq(Mux(blk_owns, blk_addr, word_r[:4]))
        m.d.sync += blk_rdata.eq(a_rd.data)
        for p in t.ports:
            m.d.comb += p.arg_data.eq(blk_rdata)
        arg_page_r = t.page_r(_at("ARG") >> 4)
        # an ARG or counter read waits for the clearing pass; other registers answer at once
        # (and an ARG read waits while software writes an ARG: the write lands a cycle later)
        sw_arg = slave.wr_en & t.page_w(_at("ARG") >> 4) & ~busy
        m.d.comb += slave.rd_ready.eq(~(clearing & (arg_page_r | t.word_r_ctr)) & ~t.rd_wait
                                      & ~((busy | sw_arg) & arg_page_r))
        w_addr, w_data, w_en = Signal(4), Signal(32), Signal()
        m.d.comb += [a_wr.addr.eq(w_addr), a_wr.data.eq(w_data), a_wr.en.eq(w_en)]
        with m.If(clearing):
            m.d.sync += [w_addr.eq(t.scan), w_data.eq(0), w_en.eq(1)]
        with m.Elif(busy):
            m.d.sync += [w_addr.eq(blk_addr), w_data.eq(blk_wdata), w_en.eq(blk_we)]
        with m.Else():
            m.d.sync += [w_addr.eq(word_w[:4]), w_data.eq(slave.wr_data), w_en.eq(sw_arg)]
        return types.SimpleNamespace(blk_owns=blk_owns, blk_rdata=blk_rdata,
                                     arg_page_r=arg_page_r)

    def _mailbox_fsm(self, m, t):
        """The mailbox FSM: IDLE takes a CMD write while CMD_STATUS is not busy, DECODE
        (:meth:`_decode_state`) checks the opcode and index, ISSUE offers the command to its
        owner's port and WAIT takes the owner's result; the owner has the ARG RAM's read port
        in ISSUE and WAIT."""
        slave, busy, result, target, ports = t.slave, t.busy, t.result, t.target, t.ports
        idx_bits, blk_owns = t.idx_bits, t.blk_owns
        with m.FSM(name="mailbox"):
            with m.State("IDLE"):
                # The command register follows the write data in every IDLE cycle (no port
                # looks at it before ISSUE): its enables are a state decode only.
                m.d.sync += [t.cmd_op.eq(slave.wr_data[:8]),
                             t.cmd_idx.eq(slave.wr_data[8:8 + idx_bits]),
                             t.cmd_idx_over.eq(slave.wr_data[8 + idx_bits:].any())]
                with m.If(slave.wr_en & t.hit_w("CMD") & ~t.status_busy):
                    m.d.sync += busy.eq(1)
                    m.next = "DECODE"
            self._decode_state(m, t)
            with m.State("ISSUE"):
                m.d.comb += blk_owns.eq(1)
                for k, p in enumerate(ports):
                    with m.If(target == k):
                        m.d.comb += p.cmd.valid.eq(1)
                        with m.If(p.cmd.ready):
                            m.next = "WAIT"
            with m.State("WAIT"):
                m.d.comb += blk_owns.eq(1)
                for k, p in enumerate(ports):
                    with m.If(target == k):
                        m.d.comb += p.resp.ready.eq(1)
                        with m.If(p.resp.valid):
                            m.d.sync += [result.eq(p.resp.payload.result[:2]), busy.eq(0)]
                            m.next = "IDLE"

    def _decode_state(self, m, t):
        """DECODE (inside the mailbox FSM): the opcode selects the target port and the table
        whose size bounds the index (QPN 0 and 1 reserved); a bad index or an unknown opcode
        completes the command at once with its result."""
        cfg, cmd_op, cmd_idx, result, busy = self.config, t.cmd_op, t.cmd_idx, t.result, t.busy
        with m.State("DECODE"):
            with m.Switch(cmd_op):
                for opc, tgt, limit, low in (
                        (CmdOp.SET_QP, 0, cfg.num_qp, 2), (CmdOp.QUERY_QP, 0, cfg.num_qp, 2),
                        (CmdOp.SET_CQ, 1, cfg.num_cq, 0),
                        (CmdOp.SET_KEY, 2, cfg.key_entries, 0),
                        (CmdOp.QUERY_KEY, 2, cfg.key_entries, 0),
                        (CmdOp.INVALIDATE, 2, None, 0)):
                    with m.Case(opc):
                        ok = Const(1) if limit is None else _below(cmd_idx, t.cmd_idx_over, limit)
                        if low:
                            ok = ok & cmd_idx[1:].any()            # QPN 0 and 1 reserved
                        with m.If(ok):
                            m.d.sync += t.target.eq(tgt)
                            m.next = "ISSUE"
                        with m.Else():
                            m.d.sync += [result.eq(Result.BAD_INDEX), busy.eq(0)]
                            m.next = "IDLE"
                with m.Default():
                    m.d.sync += [result.eq(Result.UNKNOWN_OPCODE), busy.eq(0)]
                    m.next = "IDLE"

    def _register_writes(self, m, t):
        """The plain registers' writes, each from the slave's write data on a hit of its
        address."""
        # ---- register writes ---------------------------------------------------------------
        for reg, name in ((t.mac_lo, "MAC_LO"), (t.mac_hi, "MAC_HI"), (t.ipv4, "IPV4"),
                          (t.us_cycles, "US_CYCLES"), (t.irq_en, "IRQ_EN")):
            with m.If(t.slave.wr_en & t.hit_w(name)):
                m.d.sync += reg.eq(t.slave.wr_data[:len(reg)])

    def _register_reads(self, m, t):
        """The register reads, in two stages after the slave's ``rd_en``: the held address
        decoded into one-hot selects (``rsel``) in stage 1, the sources ANDed with them and
        ORed into ``rd_data`` in stage 2, where a read of EVENT pops one event."""
        cfg, slave, hit_r, evq, num_bits = self.config, t.slave, t.hit_r, t.evq, t.num_bits
        # ---- register reads: rd_en (stage 0) -> stage 1 -> stage 2, where rd_data is sampled.
        #      The slave holds the address from rd_en to the response, so its decode is
        #      registered: one-hot selects in stage 1, an AND-OR of the sources in stage 2. A
        #      counter read takes the scan's slot in stage 1 (its stage A) and answers with the sum
        #      stage B writes back; EVENT pops in stage 2. No ARG or counter read is served
        #      during the clearing pass, so every such word has been written when it is read. ---
        caps0 = Cat(Const(cfg.data_width // 8, 8), Const(cfg.num_qp.bit_length() - 1, 8),
                    Const(cfg.num_cq.bit_length() - 1, 8),
                    Const(cfg.key_entries.bit_length() - 1, 8))
        rd_stage1, rd_stage2 = Signal(), Signal()
        m.d.sync += [rd_stage1.eq(slave.rd_en), rd_stage2.eq(rd_stage1)]
        ev = evq.o.payload
        sources = {     # name: (selected when, value)
            "id": (hit_r("ID"), Const(ID_VALUE, 32)),
            "version": (hit_r("VERSION"),
                        Const(VERSION_VALUE if cfg.read else VERSION_NO_READ, 32)),
            "caps0": (hit_r("CAPS0"), caps0),
            "mac_lo": (hit_r("MAC_LO"), t.mac_lo),
            "mac_hi": (hit_r("MAC_HI"), t.mac_hi),
            "ipv4": (hit_r("IPV4"), t.ipv4),
            "us_cycles": (hit_r("US_CYCLES"), t.us_cycles),
            "status": (hit_r("CMD_STATUS"), Cat(t.status_busy, Const(0, 7), t.result)),
            "irq_en": (hit_r("IRQ_EN"), t.irq_en),
            "event": (hit_r("EVENT"),
                      Cat(ev.number, Const(0, 24 - num_bits), ev.type, Const(0, 3), ev.lost,
                          evq.o.valid)),
            "arg": (t.arg_page_r, t.blk_rdata),        # read in stage 1
            "counter": (t.word_r_ctr, t.s_value),
        }
        rsel = Signal(data.StructLayout({name: 1 for name in sources}))
        terms = []
        for name, (hit, value) in sources.items():
            m.d.sync += getattr(rsel, name).eq(hit)
            valid = evq.o.valid if name == "event" else 1     # an empty queue reads 0
            terms.append(Mux(getattr(rsel, name) & valid, value, 0))
        rd_data = terms[0]
        for term in terms[1:]:
            rd_data = rd_data | term
        m.d.comb += [slave.rd_data.eq(rd_data),
                     evq.o.ready.eq(rd_stage2 & rsel.event)]       # a read pops one event
