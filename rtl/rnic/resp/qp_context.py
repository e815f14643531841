"""QP context: the per-QP state of the responder in block RAM, and the SET_QP/QUERY_QP commands.

Two tables of ``num_qp`` entries, both in block RAM:

* the **static** table (:data:`qp_recv_layout`): what SET_QP writes that the receive engine
  uses and nothing else changes: path MTU, min_rnr_timer, PD, access flags, receive CQ, RQ
  ring base and size, remote IPv4, IRD (ARG15[7:4]). A row keeps
  each ARG's bits in 9-bit lanes (the block RAM's byte enables,
  :class:`~rnic.control.qp_args.ArgRow`), so SET_QP writes an ARG's lanes in the cycle it
  reads that ARG through the command port's one read port (design-rules.md §8): no ARG is held
  in flip-flops. The same write goes out on ``qp_arg`` to the requester's context and the TX
  frame builder's path table, which keep the other static fields
  (:mod:`rnic.control.qp_args`);
* the **dynamic** table (:data:`qp_dyn_layout`): what packets change: state, ePSN, MSN, the
  sent-NAK latch, the message in progress (class, byte offset, WRITE residue/VA/rkey), the
  on-chip RQ producer/consumer indices.

Up to 256 QPs each table keeps a QP's row in two words (address ``{qpn, word}``, see
:data:`dyn0_layout`, :data:`dyn1_layout` and the static words ``_ROW0``/``_ROW1``), read on two
consecutive cycles; above, in one word (``QpContext.split``), in banks of block RAM whose
read data is registered at the block RAM first (its output register, :meth:`_banked_tables`),
and the dynamic table's write is registered (stage W: made a cycle after PSN Check's stage C,
whose reads take the row from W's register until it is written).
Each table's read data is registered once more; that register is PSN Check's stage-B (word 0)
and stage-C (both words) context and the command's view of the QP. The PSN Check pipeline
(``psn_check.py``) owns the read-modify-write of the dynamic table through :class:`QpContext`'s
pipeline ports; this block serves SET_QP (0x01) and QUERY_QP (0x02) of the command mailbox
(interface.md §4.2) through the same read port while the pipeline is drained. The dynamic table
has one writer, the pipeline's stage C: a command's row write (``cw_*``) is made by the pipeline
from the row the command read, which the read register holds.

SET_QP reads ARG0..15 twice: a first pass keeps what the checks and the dynamic write need (new
state, path MTU, ARG2's ePSN, ARG3's send PSN, the refusals of ARG6/8/9), the QP's row is read
and the command judged; only an accepted SET_QP reads them again and writes each ARG's lanes
(and sends each on ``qp_arg``), then reads the row back and has the pipeline write the dynamic
entry from it (about 40 cycles in all).

SET_QP rules: QPN 0/1 or ≥ num_qp → result 2; state not one of 0,1,2,3,6, an illegal change
(only RESET→INIT→RTR→RTS and any→RESET/ERROR are legal; RTS→RTS is not), log2 ring sizes > 15,
an RQ or SQ ring base not 64-byte aligned, or a path MTU outside 1..5 when the new state is RTR
or RTS → result 3 and nothing is written (no table, no ``set_valid``: no other block sees it).
Otherwise every static field is written; ePSN is loaded from ARG2 only on entry to RTR, the send
PSN from ARG3 only on entry to RTS; RESET clears every dynamic field. SET_QP does not raise
event 3 (the event reports errors the hardware found, not software's own choice).
"""

import types

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..control.qp_args import ArgRow, qp_arg_layout
from ..ifaces import CmdOp, CommandSignature, Result
from ..parts import add as _add

__all__ = ["QpState", "MsgClass", "qp_recv_layout", "qp_dyn_layout", "QpContext",
           "pmtu_bytes", "qp_set_event_layout", "RECV_FIELDS"]


class QpState(enum.IntEnum, shape=3):
    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    ERROR = 6


class MsgClass(enum.IntEnum, shape=2):
    """Class of the message in progress (rxe's ``resp.opcode`` reduced to what check_op_seq
    needs): NONE after a LAST/ONLY or at reset, SEND after SEND_FIRST/MIDDLE, WRITE after
    RDMA_WRITE_FIRST/MIDDLE."""
    NONE = 0
    SEND = 1
    WRITE = 2


def pmtu_bytes(code):
    """Path MTU in bytes of the 1..5 code of ARG0[11:8]."""
    return 128 << code


#: The SET_QP fields the receive engine keeps (the rest are the requester's and the TX path
#: table's, :mod:`rnic.control.qp_args`).
RECV_FIELDS = ("pmtu", "min_rnr", "pd", "access", "rcqn", "rq_base", "rq_log", "rip", "ird")
#: The static row: those fields' ARG lanes.
_ROW = ArgRow(RECV_FIELDS)
_LANE = ArgRow.LANE
qp_recv_layout = _ROW.layout
#: The static row in two words of the table (address ``{qpn, word}``, read on two consecutive
#: cycles): word 0 the ARGs stage B checks (path MTU, access, remote IPv4; with min_rnr and PD,
#: which share their ARGs), word 1 the ARGs only stage C reads. Each ARG is in one word, so
#: SET_QP writes an ARG in one cycle.
_ROW0 = ArgRow(("pmtu", "min_rnr", "pd", "access", "rip"))
_ROW1 = ArgRow(("rcqn", "rq_base", "rq_log", "ird"))
_SWORD = max(_ROW0.width, _ROW1.width)

qp_dyn_layout = data.StructLayout({
    "state": 3,
    "epsn": 24,
    "msn": 24,
    "nak": 1,           # sent_psn_nak latch
    "open": 2,          # MsgClass of the message in progress
    "off": 32,          # bytes of the message in progress executed so far
    "resid": 32,        # bytes of the open WRITE still to come: its RETH DMA length is
                        # ``off + resid`` (mod 2^32), so the length itself is not kept
    "va": 64,           # RETH VA of the open WRITE
    "rkey": 32,         # RETH rkey of the open WRITE
    "rq_prod": 16,
    "rq_cons": 16,
})


#: The dynamic row in two words of the table (address ``{qpn, word}``), 144 bits (4 DP16KD at
#: 512 × 36): word 0 the fields stage B checks, read first; word 1 the fields only stage C reads
#: (MSN, NAK latch, the open WRITE's VA and rkey), read a cycle later. Word 0's state, open
#: class and RQ consumer (the deepest of C's decision) sit above word 1's bits, so their write
#: data needs no word select.
DYN0 = ("state", "epsn", "open", "off", "resid", "rq_prod", "rq_cons")
DYN1 = ("msn", "nak", "va", "rkey")
dyn1_layout = data.StructLayout({f: qp_dyn_layout.members[f] for f in DYN1})
_W1 = dyn1_layout.size
dyn0_layout = data.StructLayout({"epsn": 24, "off": 32, "resid": 32, "rq_prod": 16,
                                 "pad": _W1 - 104, "state": 3, "open": 2, "rq_cons": 16})
_DWORD = 144
_OVL = 104                      # word 0's bits below this share their positions with word 1's
#: The most QPs at which the tables keep a row in two words (:attr:`QpContext.split`).
SPLIT_MAX_QP = 256
#: Rows of a bank of the one-word tables (_banked_tables): the depth of the DP16KD
#: configuration yosys builds them of (2,048 × 9), so that no multiplexer sits between a block
#: RAM and its output register.
BANK = 2048


#: What the requester learns of a QP's state (PsnCheck ``qp_set``): every SET_QP that was
#: written (its new state, and ARG3's send PSN on entry to RTS, else 0: the requester takes the
#: send PSN only then) and every move to ERROR the responder makes on its own (state = ERROR,
#: ``sq_psn`` 0). The static fields go out as SET_QP writes them, on
#: ``qp_arg``.
qp_set_event_layout = data.StructLayout({
    "qpn": 24,
    "state": 3,
    "sq_psn": 24,
})


class QpContext(wiring.Component):
    """The two QP tables and the SET_QP/QUERY_QP command handler.

    Rows: the static table keeps SET_QP's ARG bits in 9-bit lanes
    (:class:`~rnic.control.qp_args.ArgRow`), written an ARG at a time; the dynamic table
    keeps :data:`qp_dyn_layout`. Each
    table's read data is registered once (``rd_static``/``rd_dyn``, the block RAM's output
    register), and that register is both the pipeline's stage-B context and the command's.

    Parameters
    ----------
    num_qp : int
        Number of QPs (power of two, 4..4096).

    Attributes
    ----------
    cmd : CommandSignature()
        Mailbox command port (SET_QP, QUERY_QP).
    busy : Out(1)
        A command is pending or running, or the reset sweep (``num_qp`` cycles after ``rst``,
        every QP to RESET) is running: the pipeline must not start new packet operations.
        A register: a command is taken only after ``busy`` has been high for a cycle.
    idle : In(1)
        The pipeline and every outstanding execute are drained; the command may run.
    rd_addr, rd_en : In
        Pipeline read port (both tables): with ``rd_en`` the tables are read at ``rd_addr``,
        word 0 (the block RAM's clock enable: ``rd_en`` low holds its output).
    rd_hi, rd_hi_addr : In
        With ``rd_hi`` the read is of word 1 at ``rd_hi_addr`` instead (a register's choice).
        With one word a QP (``split`` false) ``rd_hi``, ``rd_load1``, ``fwd1_en``, ``fwd_en``
        and ``fwd_dyn`` are not used: ``rd_load`` loads the whole row, read two enabled
        cycles before (through the block RAMs' output registers), and ``cw_h1clr`` is 0.
    rd_load : In(1)
        The word-0 read registers take the block RAM's output (the data of the last read), the
        dynamic word replaced by ``fwd_dyn``'s with ``fwd_en``; they hold otherwise, so one
        operation's row stays in them from its read until the next load.
    fwd_en : In(1)
    fwd_dyn : In(qp_dyn_layout)
    rd_load1 : In(1)
        The word-1 read registers take the block RAM's output; the dynamic one holds with
        ``fwd1_en`` (it has the word 1 of the last ``wr_dyn``).
    fwd1_en : In(1)
    rd_static : Out(qp_recv_layout)
    rd_dyn : Out(qp_dyn_layout)
    wr_addr, wr_en : In
    wr_dyn : In(qp_dyn_layout)
        The dynamic table's write (the pipeline's stage C): word 0 in this cycle, word 1 in
        the next from the word-1 read register, which takes it now. With one word a QP the
        row is written in the next cycle, from registers (stage W).
    w_pend : Out(1)
        With one word a QP only: the row of the last cycle's ``wr_en`` is written in this
        cycle.
    fwd_w_en : In(1)
        With one word a QP only: ``rd_load`` takes the row of the last ``wr_dyn`` (stage W's
        register) instead of the block RAM's output.
    cw_valid : Out(1)
        The command's write of the dynamic row, one cycle after ``set_valid``: the pipeline
        writes QP ``cw_qpn`` with 0 (``cw_clr``, which comes with ``cw_valid``) or with the row
        the command read (``rd_dyn`` of the cycle before: the drained pipeline's stages hold
        it), its state ``cw_state`` and, with ``cw_rtr``, its ePSN ``cw_epsn``. Registers.
    cw_qpn : Out(range(num_qp))
    cw_clr, cw_rtr : Out(1)
    cw_h1clr : Out(1)
        With ``cw_valid``: the row was read in RESET, its word 1 (which the sweep does not
        write) is written as 0.
    cw_state : Out(3)
    cw_epsn : Out(24)
    set_valid : Out(1)
        One-cycle strobe when SET_QP writes a QP, with ``set_qpn`` and ``set_state``.
    set_qpn : Out(range(num_qp))
    set_state : Out(3)
    set_to_error : Out(1)
        With ``set_valid``: SET_QP moves the QP from another state into ERROR.
    set_sq_psn : Out(24)
        With ``set_valid``: ARG3's send PSN on entry to RTS, else 0.
    qp_arg : Out(stream.Signature(qp_arg_layout, always_ready=True))
        Every ARG word an accepted SET_QP writes, in the cycle it is written (ARG0..15, before
        ``set_valid``), and one write with ``all`` per QP of the reset sweep: for the other
        tables of SET_QP's fields (:mod:`rnic.control.qp_args`).
    """

    def __init__(self, *, num_qp):
        if num_qp & (num_qp - 1) or not 4 <= num_qp <= 4096:
            raise ValueError(f"num_qp must be a power of two in 4..4096, not {num_qp!r}")
        self.num_qp = num_qp
        self.abits = (num_qp - 1).bit_length()
        #: Two words a QP only where they save block RAM: up to 256 QPs a one-word row
        #: leaves most of each DP16KD empty (512 deep), from 512 it fills them by capacity, and
        #: the split would only add depth, output muxes and a cycle of read.
        self.split = num_qp <= SPLIT_MAX_QP
        super().__init__({
            "cmd": Out(CommandSignature()),
            "busy": Out(1),
            "idle": In(1),
            "rd_addr": In(self.abits),
            "rd_en": In(1),
            "rd_load": In(1),
            "rd_hi": In(1),
            "rd_hi_addr": In(self.abits),
            "rd_load1": In(1),
            "fwd1_en": In(1),
            "fwd_en": In(1),
            "fwd_dyn": In(qp_dyn_layout),
            "rd_static": Out(qp_recv_layout),
            "rd_dyn": Out(qp_dyn_layout),
            "wr_addr": In(self.abits),
            "wr_en": In(1),
            "wr_dyn": In(qp_dyn_layout),
            **({} if self.split else {"w_pend": Out(1), "fwd_w_en": In(1)}),
            "cw_valid": Out(1),
            "cw_qpn": Out(self.abits),
            "cw_clr": Out(1),
            "cw_h1clr": Out(1),
            "cw_rtr": Out(1),
            "cw_state": Out(3),
            "cw_epsn": Out(24),
            "set_valid": Out(1),
            "set_qpn": Out(self.abits),
            "set_state": Out(3),
            "set_to_error": Out(1),
            "set_sq_psn": Out(24),
            "q_qpn": Out(self.abits),
            "q_psn": In(24),
            "q_cons": In(16),
            "qp_arg": Out(stream.Signature(qp_arg_layout, always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace(n=self.num_qp)
        _add(t, self._tables(m, t))
        _add(t, self._port_select(m, t))
        _add(t, self._command_registers(m, t))
        self._dyn_write_port(m, t)
        _add(t, self._set_args(m, t))
        _add(t, self._checks(m, t))
        _add(t, self._static_write(m, t))
        _add(t, self._dynamic_write(m, t))
        _add(t, self._busy(m, t))
        self._command_fsm(m, t)
        self._set_outputs(m, t)
        return m

    def _tables(self, m, t):
        """The static and the dynamic table in block RAM, each with one read and one write port,
        two words a QP (address ``{qpn, word}``). Adds ``srd``, ``swr``, ``drd`` and ``dwr``."""
        n = t.n
        # ``no_rw_check`` (design-rules.md §9): a read never meets a write of its word. The
        # pipeline does not issue an operation whose QP's word 0 is written in that cycle (PSN
        # Check's same-QP hazard; a read that does meet it is a bubble's, never used); word 1
        # is written the cycle after word 0, when R holds no operation of that QP; a word-1
        # read in the cycle its QP's word 0 is written is another word. The command FSM reads
        # (ADDR, READ) and writes the static table (WRITE) in different states, and a command
        # starts only once the pipeline has written its last word.
        # (one word a QP: the same, with no word; see ``split``)
        if not self.split:
            return self._banked_tables(m, t)
        words = 2 if self.split else 1
        sw, dw = (_SWORD, _DWORD) if self.split else (_ROW.width, qp_dyn_layout.size)
        m.submodules.smem = smem = memory.Memory(shape=sw, depth=words * n, init=[],
                                                 attrs={"no_rw_check": 1})
        m.submodules.dmem = dmem = memory.Memory(shape=dw, depth=words * n, init=[],
                                                 attrs={"no_rw_check": 1})
        srd = smem.read_port()
        swr = smem.write_port(granularity=_LANE)
        drd = dmem.read_port()
        dwr = dmem.write_port()
        return types.SimpleNamespace(srd=srd, swr=swr, drd=drd, dwr=dwr)

    def _banked_tables(self, m, t):
        """One word a QP: each table as banks of ``BANK`` rows, each bank's read data
        registered (``rd_en`` its enable) with nothing between the block RAM and that register,
        so it folds into the block RAM's output register (``REGMODE`` ``OUTREG``,
        rnic_flow.outreg): the block RAMs' slow clock to out ends at no logic. The bank is
        selected after that register (its number registered with the read's two steps), so a
        row is in ``data`` two enabled cycles after its read (``rd_en`` in the cycle the
        address is applied and in one after it). Returns ``srd``, ``swr``, ``drd``, ``dwr``:
        ports with ``addr``, ``en``, ``data`` (the write ports' ``en`` per lane for the static
        table) driven across the banks."""
        n, ab = t.n, self.abits
        nb = max(1, n // BANK)
        lo = ab if nb == 1 else (BANK - 1).bit_length()

        def port(width, lanes=None, name=""):
            return types.SimpleNamespace(
                addr=Signal(ab, name=f"{name}_addr"), data=Signal(width, name=f"{name}_data"),
                en=Signal(lanes or 1, name=f"{name}_en"))
        srd = port(_ROW.width, name="srd")
        drd = port(qp_dyn_layout.size, name="drd")
        swr = port(_ROW.width, _ROW.width // _LANE, name="swr")
        dwr = port(qp_dyn_layout.size, name="dwr")
        # (the bank number of a read: ``bs_l`` with the block RAM's read latch, ``bs_o`` with
        # its output register)
        bs_l = Signal(range(nb), name="bank_l")
        bs_o = Signal(range(nb), name="bank_o")
        if nb > 1:
            with m.If(srd.en):
                m.d.sync += [bs_l.eq(srd.addr[lo:]), bs_o.eq(bs_l)]
        for rd, wr, width, gran, name in ((srd, swr, _ROW.width, _LANE, "smem"),
                                           (drd, dwr, qp_dyn_layout.size, None, "dmem")):
            outs = []
            for b in range(nb):
                # ``no_rw_check``: as the whole table's (see _tables)
                mem = memory.Memory(shape=width, depth=min(n, BANK), init=[],
                                    attrs={"no_rw_check": 1})
                m.submodules[f"{name}{b}"] = mem
                rp = mem.read_port()
                wp = mem.write_port(granularity=gran) if gran else mem.write_port()
                here = 1 if nb == 1 else (wr.addr[lo:] == b)
                q = Signal(width, name=f"{name}{b}_q", reset_less=True)
                with m.If(srd.en):
                    m.d.sync += q.eq(rp.data)
                m.d.comb += [rp.addr.eq(rd.addr[:lo]), rp.en.eq(srd.en),
                             wp.addr.eq(wr.addr[:lo]), wp.data.eq(wr.data)]
                if gran:
                    m.d.comb += [wp.en[k].eq(wr.en[k] & here) for k in range(len(wr.en))]
                else:
                    m.d.comb += wp.en.eq(wr.en & here)
                outs.append(q)
            m.d.comb += rd.data.eq(Array(outs)[bs_o] if nb > 1 else outs[0])
        # (both tables are read at one address with one enable: the static port's)
        m.d.comb += [drd.addr.eq(srd.addr), drd.en.eq(srd.en)]
        return types.SimpleNamespace(srd=srd, swr=swr, drd=drd, dwr=dwr)

    def _port_select(self, m, t):
        """The tables' read ports, the pipeline's or, while ``owned``, the command FSM's
        (``c_*``), and the read data registered once (``dq``, and ``st``, the static row's
        fields), for both (``split``: word 0 a cycle before word 1). Adds ``owned``,
        ``c_addr``, ``c_rd_en``, ``c_half``, ``c_ld1``, ``c_wr_en``, ``dq`` and ``st`` (and
        ``d1`` with ``split``)."""
        # the command FSM drives the read ports: a register, from taking a command (or rst)
        # to its response (or the sweep's end), so that it reaches the address muxes straight
        # from a flip-flop
        owned = Signal(init=1)
        c_addr = Signal(self.abits)
        c_rd_en = Signal()
        c_half = Signal()       # the command reads word 1 (READ; word 0 in ADDR)
        c_ld1 = Signal()        # the cycle after READ: word 1 arrives
        m.d.sync += c_ld1.eq(c_half)
        # the command's dynamic write (``set_valid``, and ``cw_valid`` a cycle later): a
        # register, decided in the cycle before SWEEP's next write and before EXEC
        c_wr_en = Signal(init=1)

        c = types.SimpleNamespace(owned=owned, c_addr=c_addr, c_rd_en=c_rd_en, c_half=c_half,
                                  c_ld1=c_ld1, c_wr_en=c_wr_en)
        if self.split:
            return self._read_words(m, t, c)
        return self._read_row(m, t, c)

    def _read_words(self, m, t, c):
        """The read ports and registers of two words a QP: word 0 is read at ``rd_addr`` and
        loaded with ``rd_load``, word 1 is read at ``rd_hi_addr`` with ``rd_hi`` and loaded a
        cycle later with ``rd_load1`` (the command: ADDR, READ). Adds to ``c`` ``dq``, ``st``
        and ``d1`` (the word-1 register, which the table's write takes) and returns it."""
        srd, drd = t.srd, t.drd
        owned, c_addr, c_rd_en, c_half, c_ld1 = c.owned, c.c_addr, c.c_rd_en, c.c_half, c.c_ld1

        # The read address: A's QPN (word 0), or from registers only (a 2:1 select after
        # A's select, as without the words): R's QPN (word 1 of the operation in R, which
        # keeps A from issuing) or the command's.
        alt = Signal()
        alt_addr = Signal(self.abits)
        half = Signal()
        qaddr = Signal(self.abits)
        m.d.comb += [alt.eq(owned | self.rd_hi),
                     alt_addr.eq(Mux(owned, c_addr, self.rd_hi_addr)),
                     half.eq(Mux(owned, c_half, self.rd_hi)),
                     qaddr.eq(Mux(alt, alt_addr, self.rd_addr))]
        # the read data, registered once (shared by the pipeline and the command): word 0 on
        # the R→B edge (or with the row the operation ahead writes), word 1 on the B→C edge
        # (held when the operation ahead of its QP wrote it: the register has that write)
        rd_en = Signal()
        ld0 = Signal()
        ld1 = Signal()
        # reset-less (read only for a QP's packet, after its load), so each can be the block
        # RAM's output register
        s0 = Signal(_ROW0.width, reset_less=True)
        s1 = Signal(_ROW1.width, reset_less=True)
        d0 = Signal(dyn0_layout)
        d1 = Signal(dyn1_layout)
        fwd0 = Signal(dyn0_layout)
        m.d.comb += [fwd0[f].eq(self.fwd_dyn[f]) for f in DYN0]
        with m.If(ld0):
            m.d.sync += [s0.eq(srd.data[:_ROW0.width]),
                         d0.eq(Mux(self.fwd_en & ~owned, fwd0, drd.data[:dyn0_layout.size]))]
        with m.If(ld1):
            m.d.sync += s1.eq(srd.data[:_ROW1.width])
            with m.If(owned | ~self.fwd1_en):
                m.d.sync += d1.eq(drd.data[:dyn1_layout.size])
        dq = Signal(qp_dyn_layout)
        m.d.comb += [dq[f].eq(d0[f]) for f in DYN0]
        m.d.comb += [dq[f].eq(d1[f]) for f in DYN1]
        st = Signal(qp_recv_layout)
        for row, word, name in ((_ROW0, s0, "st0"), (_ROW1, s1, "st1")):
            fields = row.decode(m, word, name)
            m.d.comb += [st[f].eq(fields[f]) for f in row.layout.members]

        m.d.comb += [
            srd.addr.eq(Cat(half, qaddr)),
            drd.addr.eq(Cat(half, qaddr)),
            rd_en.eq(Mux(owned, c_rd_en, self.rd_en)),
            ld0.eq(Mux(owned, c_half, self.rd_load)),
            ld1.eq(Mux(owned, c_ld1, self.rd_load1)),
            srd.en.eq(rd_en),
            drd.en.eq(rd_en),
            self.rd_static.eq(st),
            self.rd_dyn.eq(dq),
        ]
        c.dq, c.st, c.d1 = dq, st, d1
        return c

    def _read_row(self, m, t, c):
        """The read ports and registers of one word a QP: the row is read at ``rd_addr`` (with
        ``rd_en``), in the block RAMs' output registers after the next enabled cycle, and loaded
        whole with ``rd_load`` in the cycle after that, the dynamic row replaced by W's
        ``w_dyn`` with ``fwd_w_en`` (the command: read in ADDR and READ, loaded in READ2);
        ``fwd_en``, ``fwd_dyn``, ``rd_hi``, ``rd_load1`` and ``fwd1_en`` are not used. Adds to
        ``c`` ``dq`` and ``st`` and returns it."""
        srd, drd, owned = t.srd, t.drd, c.owned
        rd_en = Signal()
        ld = Signal()
        # (the command reads in ADDR and READ only, never in SWEEP: its read address is the
        # command's QPN register, not ``c_addr``, whose sweep select would sit ahead of the
        # address multiplexer; the address reaches every block RAM of the tables)
        c_raddr = Signal(self.abits)
        srow = Signal(_ROW.width, reset_less=True)     # the block RAM's output register
        dq = Signal(qp_dyn_layout)
        # (the row stage W writes now, ``fwd_w_en``: a read made in the cycle before missed it)
        w_dyn = Signal(qp_dyn_layout, name="w_dyn")
        with m.If(ld):
            m.d.sync += [srow.eq(srd.data),
                         dq.eq(Mux(self.fwd_w_en & ~owned, w_dyn, drd.data))]
        st = _ROW.decode(m, srow, "st")     # srow's fields
        m.d.comb += [
            srd.addr.eq(Mux(owned, c_raddr, self.rd_addr)),
            # (the command reads at its QPN, fixed while it owns the port, in every cycle it
            # owns it: the read enable of every block RAM of the tables is one LUT of two
            # registers, not the FSM's decode; only READ2's load takes the data)
            rd_en.eq(owned | self.rd_en),
            ld.eq(Mux(owned, c.c_ld1, self.rd_load)),
            srd.en.eq(rd_en),
            self.rd_static.eq(st),
            self.rd_dyn.eq(dq),
        ]
        c.dq, c.st, c.w_dyn, c.c_raddr = dq, st, w_dyn, c_raddr
        return c

    def _dyn_write_port(self, m, t):
        """The dynamic table's write port: word 0 of ``wr_dyn`` with ``wr_en``, word 1 the
        cycle after from ``d1`` (the word-1 read register, which takes ``wr_dyn``'s word 1
        with ``wr_en``: the row an operation of the QP that follows reads). The reset sweep
        writes word 0 only (a QP in RESET has word 0 clear; its word 1 is read as 0 and
        cleared by the command that takes it out of RESET, ``cw_h1clr``). One word a QP: the
        whole row of ``wr_dyn`` with ``wr_en`` (the sweep's clears the row)."""
        if not self.split:
            # Stage W: the write registered, so that its address, data and enable reach the
            # block RAMs (8 deep at 4096 QPs) from flip-flops: the row is written a cycle after
            # ``wr_en`` (PSN Check's issue rule counts that cycle; a command starts only once
            # the write is made, ``w_pend``).
            # (``w_dyn`` keeps the last row written: the read register's second forward)
            w_en = Signal(name="w_en")
            w_addr = Signal(self.abits, name="w_addr")
            m.d.sync += w_en.eq(self.wr_en)
            with m.If(self.wr_en):
                m.d.sync += [w_addr.eq(self.wr_addr), t.w_dyn.eq(self.wr_dyn)]
            m.d.comb += [t.dwr.addr.eq(w_addr), t.dwr.data.eq(t.w_dyn), t.dwr.en.eq(w_en),
                         self.w_pend.eq(w_en)]
            return
        dwr, d1 = t.dwr, t.d1
        w1_valid = Signal()
        w1_addr = Signal(self.abits)
        cw_sw = Signal(init=1)          # ``cw_valid`` is the sweep's
        m.d.sync += [cw_sw.eq(t.sweeping),
                     w1_valid.eq(self.wr_en & ~(self.cw_valid & cw_sw)),
                     w1_addr.eq(self.wr_addr)]
        w0 = Signal(dyn0_layout)
        m.d.comb += [w0[f].eq(self.wr_dyn[f]) for f in DYN0]
        with m.If(self.wr_en):
            m.d.sync += [d1[f].eq(self.wr_dyn[f]) for f in DYN1]
        # (a write of one word writes the other's bits above ``_OVL`` with junk: unused there)
        m.d.comb += [
            dwr.addr.eq(Cat(w1_valid, Mux(w1_valid, w1_addr, self.wr_addr))),
            dwr.data.eq(Cat(Mux(w1_valid, d1.as_value()[:_OVL], w0.as_value()[:_OVL]),
                            d1.as_value()[_OVL:], w0.as_value()[_W1:])),
            dwr.en.eq(w1_valid | self.wr_en),
        ]

    def _command_registers(self, m, t):
        """The command's registers: opcode, index (the QPN), result, the ARG counter ``cnt``,
        the reset sweep's ``sweeping`` and ``sweep_cnt``, and ``written``; the command FSM's
        table address ``c_addr`` comes from them. Adds these."""
        op = Signal(8)
        index = Signal(24)
        result = Signal(8)
        cnt = Signal(range(17))
        sweeping = Signal(init=1)       # the FSM is in SWEEP (a register of its own)
        sweep_cnt = Signal(self.abits)
        written = Signal()      # SET_QP's ARG lanes are written; the next read is the new row
        m.d.comb += [
            t.c_addr.eq(Mux(sweeping, sweep_cnt, index[:self.abits])),
            self.cmd.resp.payload.result.eq(result),
            self.cmd.arg_addr.eq(cnt),
        ]
        if not self.split:
            m.d.comb += t.c_raddr.eq(index[:self.abits])
        return types.SimpleNamespace(op=op, index=index, result=result, cnt=cnt,
                                     sweeping=sweeping, sweep_cnt=sweep_cnt, written=written)

    def _set_args(self, m, t):
        """What SET_QP keeps of its ARGs (LOAD sets them), and ``argn``, the number of the ARG
        on ``arg_data``. Adds ``new_state``, ``pmtu``, ``arg_epsn``, ``arg_sq``, ``arg_bad``,
        ``ad`` (the ARG word) and ``argn``."""
        # What SET_QP's checks and its dynamic write need, kept while the ARGs are read: the
        # new state and path MTU (ARG0), ePSN (ARG2), send PSN (ARG3), and the refusals found
        # in ARG6 (RQ base alignment), ARG8 (log2 sizes) and ARG9 (SQ base alignment).
        new_state = Signal(4)
        pmtu = Signal(4)
        arg_epsn = Signal(24)
        arg_sq = Signal(24)
        arg_bad = Signal()
        ad = self.cmd.arg_data
        argn = Signal(4)        # the ARG on ``arg_data`` (read in the previous cycle)
        m.d.comb += argn.eq(t.cnt - 1)
        return types.SimpleNamespace(new_state=new_state, pmtu=pmtu, arg_epsn=arg_epsn,
                                     arg_sq=arg_sq, arg_bad=arg_bad, ad=ad, argn=argn)

    def _checks(self, m, t):
        """SET_QP's judgement: ``legal`` (the state change), ``bad`` (set in CHECK) and the
        decoded opcode (``is_set``, ``is_query``). Adds these."""
        new_state, dq, op = t.new_state, t.dq, t.op
        legal = Signal()
        m.d.comb += legal.eq(
            (new_state == QpState.RESET) | (new_state == QpState.ERROR)
            | ((dq.state == QpState.RESET) & (new_state == QpState.INIT))
            | ((dq.state == QpState.INIT) & (new_state == QpState.RTR))
            | ((dq.state == QpState.RTR) & (new_state == QpState.RTS)))
        bad = Signal()          # from CHECK on: the SET_QP arguments or state change are refused
        is_set = Signal()
        is_query = Signal()
        m.d.sync += [is_set.eq(op == CmdOp.SET_QP), is_query.eq(op == CmdOp.QUERY_QP)]
        return types.SimpleNamespace(legal=legal, bad=bad, is_set=is_set, is_query=is_query)

    def _static_write(self, m, t):
        """The static table's writes, also sent on ``qp_arg``: an ARG's lanes in WRITE
        (``s_arg_we``), every lane with 0 in SWEEP. Adds ``s_arg_we``."""
        sweeping = t.sweeping
        # static-table writes: ARG ``argn``'s lanes with its bits (WRITE), every lane with 0
        # (SWEEP)
        # (the same ARG writes go out on ``qp_arg`` to the other tables of SET_QP's fields)
        # (``s_arg_we`` and the ARG number are registers, not decoded from the FSM's state and
        # ``cnt - 1`` in the cycle: ``qp_arg`` reaches the other blocks' tables from
        # flip-flops. WRITE counts ``cnt`` 0..16 and writes ARG ``cnt - 1`` from 1 on, so
        # ``s_arg_we`` is "the cycle before was WRITE's, before 16" and the ARG number is
        # ``cnt`` of the cycle before.)
        s_arg_we = Signal()
        arg_r = Signal(4)
        m.d.sync += [arg_r.eq(t.cnt[:4]), s_arg_we.eq(0)]     # (WRITE sets s_arg_we)
        aw = self.qp_arg.payload
        m.d.comb += [self.qp_arg.valid.eq(sweeping | s_arg_we),
                     aw.qpn.eq(t.c_addr), aw.arg.eq(arg_r), aw.data.eq(t.ad),
                     aw.all.eq(sweeping)]
        if not self.split:
            _ROW.write(m, t.swr, aw, self.qp_arg.valid)         # one word: the ARG's lanes
            return types.SimpleNamespace(s_arg_we=s_arg_we)
        # (ARG ``argn`` decoded in registers, from ``cnt`` of the cycle before as WRITE counts:
        # the lanes' enables and the word come from flip-flops, not from ``cnt - 1``)
        arg_is = {a: Signal(name=f"arg_is{a}") for a in (*_ROW0.plan, *_ROW1.plan)}
        m.d.sync += [v.eq(t.cnt == a) for a, v in arg_is.items()]
        self._static_word_write(m, t.swr, aw, self.qp_arg.valid, arg_is)
        return types.SimpleNamespace(s_arg_we=s_arg_we)

    @staticmethod
    def _static_word_write(m, wp, arg, valid, arg_is):
        """Drive the static table's write port ``wp`` from a :data:`qp_arg_layout` value
        ``arg`` with ``valid``: the ARG's lanes of the word that keeps it (``arg_is[a]``: the
        ARG is ``a``), or (``all``, the reset sweep) every lane of word 0 with 0."""
        d = Signal(32, name="arg_wdata")
        hi = Signal(name="arg_word1")
        m.d.comb += [d.eq(Mux(arg.all, 0, arg.data)),
                     hi.eq(~arg.all & Cat(arg_is[a] for a in _ROW1.plan).any()),
                     wp.addr.eq(Cat(hi, arg.qpn))]
        words = []
        en = [[] for _ in range(_SWORD // _LANE)]
        for k, row in enumerate((_ROW0, _ROW1)):
            w = Signal(_SWORD, name=f"arg_word{k}_data")
            for a, (lane, n, bits) in row.plan.items():
                for lo, width, field, flo, pos in bits:
                    m.d.comb += w[pos:pos + width].eq(d[lo:lo + width])
                for j in range(lane, lane + n):
                    en[j].append((arg.all if k == 0 else 0) | arg_is[a])
            words.append(w)
        m.d.comb += wp.data.eq(Mux(hi, words[1], words[0]))
        m.d.comb += [wp.en[j].eq(valid & Cat(e).any()) for j, e in enumerate(en) if e]

    def _dynamic_write(self, m, t):
        """The command's dynamic write (SWEEP, EXEC), made by the pipeline a cycle after
        ``set_valid`` (``cw_*``), with its selects ``w_zero`` and ``w_rtr`` (LOAD sets them),
        and ``sq_w``, the send PSN for the requester. Adds ``sq_w``, ``w_zero`` and
        ``w_rtr``."""
        new_state = t.new_state
        # the send PSN for the requester: ARG3 on entry to RTS, else 0 (it takes it only then)
        sq_w = Signal(24)
        m.d.comb += sq_w.eq(Mux(~t.sweeping & (new_state == QpState.RTS), t.arg_sq, 0))
        # The dynamic write (SWEEP, EXEC): 0 for the sweep and RESET, else the row read with
        # the new state, and ARG2's ePSN on entry to RTR. Its selects are registers decoded
        # when ARG0 is read (``w_zero`` also covers the sweep); the strobe, the QPN and the
        # clear are registered with ``set_valid`` (the QPN of the sweep moves every cycle).
        w_zero = Signal(init=1)
        w_rtr = Signal()
        m.d.sync += [self.cw_valid.eq(t.c_wr_en), self.cw_qpn.eq(t.c_addr),
                     self.cw_clr.eq(t.c_wr_en & w_zero)]
        if self.split:
            # a row read in RESET: its word 1 is cleared (the sweep does not write it)
            m.d.sync += self.cw_h1clr.eq(t.c_wr_en & (t.dq.state == QpState.RESET))
        m.d.comb += [self.cw_rtr.eq(w_rtr), self.cw_state.eq(new_state),
                     self.cw_epsn.eq(t.arg_epsn)]
        return types.SimpleNamespace(sq_w=sq_w, w_zero=w_zero, w_rtr=w_rtr)

    def _busy(self, m, t):
        """``qpn_ok``, the QPN's range test, registered, and ``busy`` (the FSM's states drive
        it) with its register ``busy_r`` on the ``busy`` output. Adds these."""
        qpn_ok = Signal()       # registered: ``index`` is set on entry to LOAD/ADDR
        m.d.sync += qpn_ok.eq((t.index < self.num_qp) & (t.index > 1))

        busy = Signal()
        busy_r = Signal(init=1)
        m.d.sync += busy_r.eq(busy)
        m.d.comb += self.busy.eq(busy_r)
        return types.SimpleNamespace(qpn_ok=qpn_ok, busy=busy, busy_r=busy_r)

    def _command_fsm(self, m, t):
        """The command FSM: the reset sweep, then SET_QP and QUERY_QP one at a time; its
        states are in the parts below, in this order."""
        with m.FSM(init="SWEEP"):
            self._intake_states(m, t)
            self._judge_states(m, t)
            self._answer_states(m, t)

    def _intake_states(self, m, t):
        """SWEEP, IDLE and LOAD (inside the command FSM): the reset sweep, the command's
        acceptance, and SET_QP's first pass over ARG0..15."""
        cmd, busy, busy_r, owned, cnt, argn, ad = (self.cmd.cmd, t.busy, t.busy_r, t.owned,
                                                    t.cnt, t.argn, t.ad)
        sweep_cnt, arg_bad = t.sweep_cnt, t.arg_bad
        with m.State("SWEEP"):
            # after rst: every QP to RESET, one entry per cycle
            m.d.comb += busy.eq(1)
            m.d.sync += sweep_cnt.eq(sweep_cnt + 1)
            with m.If(sweep_cnt == self.num_qp - 1):
                m.d.sync += [owned.eq(0), t.sweeping.eq(0), t.c_wr_en.eq(0)]
                m.next = "IDLE"
        with m.State("IDLE"):
            m.d.comb += busy.eq(cmd.valid)
            with m.If(cmd.valid & self.idle & busy_r):
                m.d.comb += cmd.ready.eq(1)
                m.d.sync += [t.op.eq(cmd.payload.opcode), t.index.eq(cmd.payload.index),
                             cnt.eq(0), t.written.eq(0), arg_bad.eq(0), owned.eq(1)]
                with m.If(cmd.payload.opcode == CmdOp.SET_QP):
                    m.next = "LOAD"
                with m.Else():
                    m.next = "ADDR"
        with m.State("LOAD"):
            # ARG cnt is addressed this cycle and arrives the next: ARG0..15 in 17 cycles
            m.d.comb += busy.eq(1)
            m.d.sync += cnt.eq(cnt + 1)
            with m.Switch(argn):
                with m.Case(0):
                    m.d.sync += [t.new_state.eq(ad[0:4]), t.pmtu.eq(ad[8:12]),
                                 t.w_zero.eq(ad[0:4] == QpState.RESET),
                                 t.w_rtr.eq(ad[0:4] == QpState.RTR)]
                with m.Case(2):
                    m.d.sync += t.arg_epsn.eq(ad[0:24])
                with m.Case(3):
                    m.d.sync += t.arg_sq.eq(ad[0:24])
                with m.Case(6, 9):
                    # ring bases are 64-byte aligned (interface.md §4.2): RQ ARG6, SQ ARG9
                    with m.If(ad[0:6].any()):
                        m.d.sync += arg_bad.eq(1)
                with m.Case(8):
                    with m.If((ad[0:5] > 15) | (ad[8:13] > 15)):
                        m.d.sync += arg_bad.eq(1)
            with m.If(cnt == 16):
                m.next = "ADDR"

    def _judge_states(self, m, t):
        """ADDR, READ, CHECK, ACCEPT and WRITE (inside the command FSM): the QP's row read and
        the command judged, and an accepted SET_QP's second pass, which writes its ARGs."""
        busy, cnt, c_rd_en, written, new_state, pmtu = (t.busy, t.cnt, t.c_rd_en, t.written,
                                                        t.new_state, t.pmtu)
        is_set, qpn_ok, bad = t.is_set, t.qpn_ok, t.bad
        with m.State("ADDR"):
            m.d.comb += [busy.eq(1), c_rd_en.eq(1)]
            m.next = "READ"
        with m.State("READ"):
            # word 0 read in ADDR moves to the read registers; word 1 is read now and moves
            # there in the next cycle (CHECK or EXEC)
            m.d.comb += [busy.eq(1), c_rd_en.eq(1), t.c_half.eq(1)]
            if self.split:
                self._after_read(m, t)
            else:
                m.next = "READ2"
        if not self.split:
            with m.State("READ2"):
                # one word a QP: the row read in ADDR is in the block RAMs' output registers now,
                # in the read registers in the next cycle
                m.d.comb += busy.eq(1)
                self._after_read(m, t)
        with m.State("CHECK"):
            m.d.comb += busy.eq(1)
            m.d.sync += [
                bad.eq(~t.legal | t.arg_bad
                       | (((new_state == QpState.RTR) | (new_state == QpState.RTS))
                          & ((pmtu < 1) | (pmtu > 5)))),
                cnt.eq(0),
            ]
            with m.If(is_set & qpn_ok):
                m.next = "ACCEPT"
            with m.Else():
                m.next = "EXEC"
        with m.State("ACCEPT"):
            m.d.comb += busy.eq(1)
            with m.If(bad):
                m.next = "EXEC"
            with m.Else():
                m.next = "WRITE"
        with m.State("WRITE"):
            # ARG0..15 again, each written into its lanes of the static row as it arrives
            # (``s_arg_we`` a register: ``cnt != 0`` in the next cycle of WRITE)
            m.d.comb += busy.eq(1)
            m.d.sync += [cnt.eq(cnt + 1), t.s_arg_we.eq(cnt != 16)]
            with m.If(cnt == 16):
                m.d.sync += written.eq(1)
                m.next = "ADDR"

    @staticmethod
    def _after_read(m, t):
        """The step after the row's read: EXEC (an accepted SET_QP's lanes are written: its
        dynamic write) or CHECK."""
        with m.If(t.written):
            # (EXEC's write: only an accepted SET_QP writes its lanes, ``written``)
            m.d.sync += t.c_wr_en.eq(t.is_set & t.qpn_ok & ~t.bad)
            m.next = "EXEC"
        with m.Else():
            m.next = "CHECK"

    def _answer_states(self, m, t):
        """EXEC, ANSWER and RESP (inside the command FSM): the dynamic write and the result,
        QUERY_QP's ARG words, and the response."""
        busy, cnt, result, dq, qpn_ok, is_query = (t.busy, t.cnt, t.result, t.dq, t.qpn_ok,
                                                   t.is_query)
        resp = self.cmd.resp
        with m.State("EXEC"):
            m.d.comb += busy.eq(1)
            m.d.sync += [cnt.eq(0), t.c_wr_en.eq(0)]
            with m.If(~qpn_ok):
                m.d.sync += result.eq(Result.BAD_INDEX)
            with m.Elif(is_query):
                m.d.sync += result.eq(Result.OK)
            with m.Elif(t.is_set):
                with m.If(t.bad):
                    m.d.sync += result.eq(Result.BAD_ARGUMENT)
                with m.Else():
                    m.d.sync += result.eq(Result.OK)
            with m.Else():
                m.d.sync += result.eq(Result.UNKNOWN_OPCODE)
            with m.If(qpn_ok & is_query):
                m.next = "ANSWER"
            with m.Else():
                m.next = "RESP"
        with m.State("ANSWER"):
            # QUERY_QP: ARG0..5 from the row read (held) and the requester's context, and 0
            # in ARG6..15, written one per cycle before the response
            m.d.comb += [busy.eq(1), self.cmd.arg_we.eq(1)]
            m.d.sync += cnt.eq(cnt + 1)
            # (a QP in RESET has MSN 0: with ``split`` its word 1 is not cleared by the sweep)
            msn = Mux(dq.state == QpState.RESET, 0, dq.msn) if self.split else dq.msn
            answer = (dq.state, dq.epsn, self.q_psn, msn, dq.rq_cons, self.q_cons)
            with m.Switch(cnt):
                for k, word in enumerate(answer):       # ARG0..5 of interface.md §4.2
                    with m.Case(k):
                        m.d.comb += self.cmd.arg_wdata.eq(word)
            with m.If(cnt == 15):
                m.next = "RESP"
        with m.State("RESP"):
            m.d.comb += [busy.eq(1), resp.valid.eq(1)]
            with m.If(resp.ready):
                m.d.sync += t.owned.eq(0)
                m.next = "IDLE"

    def _set_outputs(self, m, t):
        """What SET_QP (and the reset sweep) tells the other blocks as it writes a QP
        (``set_*``, strobed by the dynamic write's enable), and the QPN of the requester's
        context read (``q_qpn``)."""
        sweeping, new_state, dq = t.sweeping, t.new_state, t.dq
        m.d.comb += [self.set_valid.eq(t.c_wr_en), self.set_qpn.eq(t.c_addr),
                     self.set_state.eq(Mux(sweeping, 0, new_state)),
                     self.set_to_error.eq(~sweeping & (new_state == QpState.ERROR)
                                          & (dq.state != QpState.ERROR)),
                     self.set_sq_psn.eq(t.sq_w), self.q_qpn.eq(t.index)]
