"""QP context: the per-QP state of the responder (and, statically, of the requester) in block RAM.

Two tables of ``num_qp`` entries, both in block RAM:

* the **static** table (:data:`qp_static_layout`): everything SET_QP writes and nothing else
  changes: path MTU, min_rnr_timer, timeout, destination QPN, PD, access flags, CQ numbers,
  RQ/SQ ring bases and sizes, retry counts, remote MAC/IPv4, UDP source port;
* the **dynamic** table (:data:`qp_dyn_layout`): what packets change: state, ePSN, MSN, the
  sent-NAK latch, the message in progress (class, byte offset, WRITE length/VA/rkey), the on-chip
  RQ producer/consumer indices, the next send PSN and the SQ consumer index.

The PSN Check pipeline (``psn_check.py``) owns the read-modify-write of the dynamic table
through :class:`QpContext`'s pipeline ports; this block serves SET_QP (0x01) and QUERY_QP (0x02)
of the command mailbox (interface.md §4.2) through the same ports while the pipeline is drained.

SET_QP rules: QPN 0/1 or ≥ num_qp → result 2; state not one of 0,1,2,3,6, an illegal change
(only RESET→INIT→RTR→RTS and any→RESET/ERROR are legal; RTS→RTS is not), log2 ring sizes > 15,
an RQ or SQ ring base not 64-byte aligned, or a path MTU outside 1..5 when the new state is RTR
or RTS → result 3 and nothing is written (no table, no ``set_valid``: no other block sees it).
Otherwise every static field is written; ePSN is loaded from ARG2 only on entry to RTR, the send
PSN from ARG3 only on entry to RTS; RESET clears every dynamic field. SET_QP does not raise
event 3 (the event reports errors the hardware found, not software's own choice).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..ifaces import CmdOp, CommandSignature, Result

__all__ = ["QpState", "MsgClass", "qp_static_layout", "qp_dyn_layout", "QpContext",
           "pmtu_bytes", "qp_set_event_layout"]


class QpState:
    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    ERROR = 6


class MsgClass:
    """Class of the message in progress (rxe's ``resp.opcode`` reduced to what check_op_seq
    needs): NONE after a LAST/ONLY or at reset, SEND after SEND_FIRST/MIDDLE, WRITE after
    RDMA_WRITE_FIRST/MIDDLE."""
    NONE = 0
    SEND = 1
    WRITE = 2


def pmtu_bytes(code):
    """Path MTU in bytes of the 1..5 code of ARG0[11:8]."""
    return 128 << code


qp_static_layout = data.StructLayout({
    "pmtu": 3,          # 1=256 … 5=4096
    "min_rnr": 5,
    "timeout": 5,
    "dest_qpn": 24,
    "pd": 16,
    "access": 8,
    "rcqn": 16,
    "scqn": 16,
    "rq_base": 64,
    "rq_log": 5,
    "sq_log": 5,
    "retry_cnt": 3,
    "rnr_retry": 3,
    "sq_base": 64,
    "rmac": 48,         # wire order: rmac[47:40] is the first byte on the wire
    "rip": 32,          # first octet in [31:24]
    "sport": 16,
})

qp_dyn_layout = data.StructLayout({
    "state": 3,
    "epsn": 24,
    "msn": 24,
    "nak": 1,           # sent_psn_nak latch
    "open": 2,          # MsgClass of the message in progress
    "off": 32,          # bytes of the message in progress executed so far
    "wlen": 32,         # RETH DMA length of the open WRITE
    "resid": 32,        # bytes of the open WRITE still to come (DMA length − offset)
    "va": 64,           # RETH VA of the open WRITE
    "rkey": 32,         # RETH rkey of the open WRITE
    "rq_prod": 16,
    "rq_cons": 16,
    "sq_psn": 24,
    "sq_cons": 16,
})


#: What the requester learns of a QP's context (PsnCheck ``qp_set``): every SET_QP that was
#: written (its new state, every static field, the send PSN it wrote) and every move to ERROR
#: the responder makes on its own (state = ERROR).
qp_set_event_layout = data.StructLayout({
    "qpn": 24,
    "state": 3,
    "sq_psn": 24,
    "static": qp_static_layout,
})

class QpContext(wiring.Component):
    """The two QP tables and the SET_QP/QUERY_QP command handler.

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
    idle : In(1)
        The pipeline and every outstanding execute are drained; the command may run.
    rd_addr, rd_en : In
        Pipeline read port (both tables), synchronous: data one cycle after ``rd_en``;
        ``rd_en`` low holds the data.
    rd_static : Out(qp_static_layout)
    rd_dyn : Out(qp_dyn_layout)
    wr_addr, wr_en : In
    wr_dyn : In(qp_dyn_layout)
        Pipeline write port of the dynamic table.
    set_valid : Out(1)
        One-cycle strobe when SET_QP writes a QP, with ``set_qpn`` and ``set_state``.
    set_qpn : Out(range(num_qp))
    set_state : Out(3)
    set_to_error : Out(1)
        With ``set_valid``: SET_QP moves the QP from another state into ERROR.
    set_prod : Out(16)
        With ``set_valid``: the QP's RQ producer index.
    set_static : Out(qp_static_layout)
        With ``set_valid``: the static fields written.
    """

    def __init__(self, *, num_qp):
        if num_qp & (num_qp - 1) or not 4 <= num_qp <= 4096:
            raise ValueError(f"num_qp must be a power of two in 4..4096, not {num_qp!r}")
        self.num_qp = num_qp
        self.abits = (num_qp - 1).bit_length()
        super().__init__({
            "cmd": Out(CommandSignature()),
            "busy": Out(1),
            "idle": In(1),
            "rd_addr": In(self.abits),
            "rd_en": In(1),
            "rd_static": Out(qp_static_layout),
            "rd_dyn": Out(qp_dyn_layout),
            "wr_addr": In(self.abits),
            "wr_en": In(1),
            "wr_dyn": In(qp_dyn_layout),
            "set_valid": Out(1),
            "set_qpn": Out(self.abits),
            "set_state": Out(3),
            "set_to_error": Out(1),
            "set_prod": Out(16),
            "set_sq_psn": Out(24),
            "q_qpn": Out(self.abits),
            "q_psn": In(24),
            "q_cons": In(16),
            "set_static": Out(qp_static_layout),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qp
        m.submodules.smem = smem = memory.Memory(shape=qp_static_layout, depth=n, init=[])
        m.submodules.dmem = dmem = memory.Memory(shape=qp_dyn_layout, depth=n, init=[])
        srd = smem.read_port()
        swr = smem.write_port()
        drd = dmem.read_port()
        dwr = dmem.write_port()

        cmd = self.cmd.cmd
        resp = self.cmd.resp
        owned = Signal()        # the command FSM drives the memory ports
        c_addr = Signal(self.abits)
        c_rd_en = Signal()
        c_wr_dyn = Signal(qp_dyn_layout)
        c_wr_static = Signal(qp_static_layout)
        c_wr_en = Signal()

        m.d.comb += [
            srd.addr.eq(Mux(owned, c_addr, self.rd_addr)),
            drd.addr.eq(Mux(owned, c_addr, self.rd_addr)),
            srd.en.eq(Mux(owned, c_rd_en, self.rd_en)),
            drd.en.eq(Mux(owned, c_rd_en, self.rd_en)),
            self.rd_static.eq(srd.data),
            self.rd_dyn.eq(drd.data),
            dwr.addr.eq(Mux(owned, c_addr, self.wr_addr)),
            dwr.data.eq(Mux(owned, c_wr_dyn, self.wr_dyn)),
            dwr.en.eq(Mux(owned, c_wr_en, self.wr_en)),
            swr.addr.eq(c_addr),
            swr.data.eq(c_wr_static),
            swr.en.eq(owned & c_wr_en),
        ]

        op = Signal(8)
        args = Signal(data.ArrayLayout(32, 15))     # SET_QP's ARG0..14, read one per cycle
        index = Signal(24)
        result = Signal(8)
        rargs = Signal(data.ArrayLayout(32, 6))     # QUERY_QP's answer, written one per cycle
        cnt = Signal(range(16))
        sweeping = Signal()
        sweep_cnt = Signal(self.abits)
        m.d.comb += [
            c_addr.eq(Mux(sweeping, sweep_cnt, index[:self.abits])),
            resp.payload.result.eq(result),
            self.cmd.arg_addr.eq(cnt),
            self.cmd.arg_wdata.eq(Mux(cnt < 6, rargs.as_value().word_select(cnt[:3], 32), 0)),
        ]

        cur = Signal(qp_dyn_layout)         # the QP's dynamic entry, registered off the EBR
        m.d.sync += cur.eq(drd.data)
        new_state = Signal(4)
        m.d.comb += new_state.eq(args[0][0:4])
        # The command's checks are registers by EXEC: computed in READ from the block RAM's
        # output (what ``cur`` holds in EXEC) and from ``op``/``index``/``args`` (set on entry to
        # ADDR), so EXEC's write enable -- which fans out to the requester context, Execute's
        # ``qp_reset`` and the flush queue -- starts from flip-flops. Cycle-identical.
        legal = Signal()
        m.d.comb += legal.eq(
            (new_state == QpState.RESET) | (new_state == QpState.ERROR)
            | ((drd.data.state == QpState.RESET) & (new_state == QpState.INIT))
            | ((drd.data.state == QpState.INIT) & (new_state == QpState.RTR))
            | ((drd.data.state == QpState.RTR) & (new_state == QpState.RTS)))
        pmtu = Signal(4)
        m.d.comb += pmtu.eq(args[0][8:12])
        bad = Signal()          # in EXEC: the SET_QP arguments or state change are refused
        is_set = Signal()
        is_query = Signal()
        m.d.sync += [
            bad.eq(~legal
                   | (args[8][0:5] > 15) | (args[8][8:13] > 15)
                   # ring bases are 64-byte aligned (interface.md §4.2): RQ ARG6, SQ ARG9
                   | args[6][0:6].any() | args[9][0:6].any()
                   | (((new_state == QpState.RTR) | (new_state == QpState.RTS))
                      & ((pmtu < 1) | (pmtu > 5)))),
            is_set.eq(op == CmdOp.SET_QP),
            is_query.eq(op == CmdOp.QUERY_QP),
        ]

        st = Signal(qp_static_layout)
        m.d.comb += [
            st.pmtu.eq(pmtu),
            st.min_rnr.eq(args[0][16:21]),
            st.timeout.eq(args[0][24:29]),
            st.dest_qpn.eq(args[1][0:24]),
            st.pd.eq(args[4][0:16]),
            st.access.eq(args[4][16:24]),
            st.rcqn.eq(args[5][0:16]),
            st.scqn.eq(args[5][16:32]),
            st.rq_base.eq(Cat(args[6], args[7])),
            st.rq_log.eq(args[8][0:5]),
            st.sq_log.eq(args[8][8:13]),
            st.retry_cnt.eq(args[8][16:19]),
            st.rnr_retry.eq(args[8][20:23]),
            st.sq_base.eq(Cat(args[9], args[10])),
            st.rmac.eq(Cat(args[11], args[12][0:16])),
            st.rip.eq(args[13]),
            st.sport.eq(args[14][0:16]),
            c_wr_static.eq(Mux(sweeping, 0, st)),
        ]
        nd = Signal(qp_dyn_layout)
        with m.If(new_state == QpState.RESET):
            m.d.comb += nd.eq(0)
        with m.Else():
            m.d.comb += nd.eq(cur)
            m.d.comb += nd.state.eq(new_state)
            with m.If(new_state == QpState.RTR):
                m.d.comb += nd.epsn.eq(args[2][0:24])
            with m.If(new_state == QpState.RTS):
                m.d.comb += nd.sq_psn.eq(args[3][0:24])
        m.d.comb += c_wr_dyn.eq(Mux(sweeping, 0, nd))

        qpn_ok = Signal()       # registered like ``bad``: ``index`` is set on entry to ADDR
        m.d.sync += qpn_ok.eq((index < self.num_qp) & (index > 1))

        with m.FSM(init="SWEEP"):
            with m.State("SWEEP"):
                # after rst: every QP to RESET, one entry per cycle
                m.d.comb += [self.busy.eq(1), owned.eq(1), sweeping.eq(1), c_wr_en.eq(1),
                             self.set_valid.eq(1)]
                m.d.sync += sweep_cnt.eq(sweep_cnt + 1)
                with m.If(sweep_cnt == self.num_qp - 1):
                    m.next = "IDLE"
            with m.State("IDLE"):
                m.d.comb += self.busy.eq(cmd.valid)
                with m.If(cmd.valid & self.idle):
                    m.d.comb += cmd.ready.eq(1)
                    m.d.sync += [op.eq(cmd.payload.opcode), index.eq(cmd.payload.index),
                                 rargs.eq(0), cnt.eq(0)]
                    with m.If(cmd.payload.opcode == CmdOp.SET_QP):
                        m.next = "LOAD"
                    with m.Else():
                        m.next = "ADDR"
            with m.State("LOAD"):
                # ARG cnt is addressed this cycle and arrives the next: ARG0..14 in 16 cycles
                m.d.comb += self.busy.eq(1)
                m.d.sync += cnt.eq(cnt + 1)
                with m.If(cnt != 0):
                    m.d.sync += args[(cnt - 1)[:4]].eq(self.cmd.arg_data)
                with m.If(cnt == 15):
                    m.next = "ADDR"
            with m.State("ADDR"):
                m.d.comb += [self.busy.eq(1), owned.eq(1), c_rd_en.eq(1)]
                m.next = "READ"
            with m.State("READ"):
                m.d.comb += [self.busy.eq(1), owned.eq(1)]
                m.next = "EXEC"
            with m.State("EXEC"):
                m.d.comb += [self.busy.eq(1), owned.eq(1)]
                with m.If(~qpn_ok):
                    m.d.sync += result.eq(Result.BAD_INDEX)
                with m.Elif(is_query):
                    m.d.sync += [
                        result.eq(Result.OK), cnt.eq(0),
                        rargs[0].eq(cur.state), rargs[1].eq(cur.epsn), rargs[2].eq(self.q_psn),
                        rargs[3].eq(cur.msn), rargs[4].eq(cur.rq_cons),
                        rargs[5].eq(self.q_cons),
                    ]
                with m.Elif(is_set):
                    with m.If(bad):
                        m.d.sync += result.eq(Result.BAD_ARGUMENT)
                    with m.Else():
                        m.d.sync += result.eq(Result.OK)
                        m.d.comb += [c_wr_en.eq(1), self.set_valid.eq(1)]
                with m.Else():
                    m.d.sync += result.eq(Result.UNKNOWN_OPCODE)
                with m.If(qpn_ok & is_query):
                    m.next = "ANSWER"
                with m.Else():
                    m.next = "RESP"
            with m.State("ANSWER"):
                # QUERY_QP: ARG0..5, and 0 in ARG6..15, written one per cycle before the response
                m.d.comb += [self.busy.eq(1), self.cmd.arg_we.eq(1)]
                m.d.sync += cnt.eq(cnt + 1)
                with m.If(cnt == 15):
                    m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [self.busy.eq(1), resp.valid.eq(1)]
                with m.If(resp.ready):
                    m.next = "IDLE"
        m.d.comb += [self.set_qpn.eq(c_addr), self.set_state.eq(Mux(sweeping, 0, new_state)),
                     self.set_to_error.eq(~sweeping & (new_state == QpState.ERROR)
                                          & (cur.state != QpState.ERROR)),
                     self.set_prod.eq(cur.rq_prod), self.set_static.eq(c_wr_static),
                     self.set_sq_psn.eq(c_wr_dyn.sq_psn), self.q_qpn.eq(index)]
        return m
