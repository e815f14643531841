"""The responder layer: PSN Check → Execute → CQE Generation, with the merges and the skid
buffer between them (``docs/architecture.md``).

A composer only: it instantiates the three blocks and connects them; each port of the layer is
a port of one of its blocks, declared by that block (:data:`PORTS`) and passed through. What
the layer shares with the requester — the Key Cache, the Scatter Path, the host-memory master,
the TX side, the control plane — stays in :class:`rnic.top.RNIC`, which connects it here.

* PSN Check's execute commands go to Execute, whose ``done`` reports come back through a skid
  buffer.
* Execute's and the requester context's completions meet in the CQE merge in front of CQE
  Generation (``req_cpl``: the requester's).
* Execute's and CQE Generation's host faults and the requester's error completions
  (``req_err``) meet in the fault merge in front of PSN Check's ``fault`` port, which moves the
  QP to ERROR (event 3) for both halves.
"""

from amaranth.hdl import Module
from amaranth.lib import wiring

from ..host.cqe_gen import CqeGen
from ..parts import pass_through
from ..stream import SkidBuffer, StreamMerge
from .execute import Execute
from .psn_check import PsnCheck

__all__ = ["ResponderLayer", "PORTS"]

#: The layer's ports: ``(layer port, block, the block's port)``. A port keeps the flow and
#: the signature its block declares.
PORTS = (
    # from RX Parse, the control plane and its doorbells
    ("meta", "psn", "meta"), ("payload", "psn", "payload"), ("rq_db", "psn", "rq_db"),
    ("qp_cmd", "psn", "cmd"), ("cq_cmd", "cqe", "cmd"), ("cq_db", "cqe", "cq_db"),
    ("cq_arm", "cqe", "cq_arm"),
    # payload to the Scatter Path, response frames to the requester, ACK/NAKs and READ jobs
    # to the READ response engine
    ("pay_out", "psn", "pay_out"), ("rr_pay", "psn", "rr_pay"), ("ack_out", "psn", "ack_out"),
    ("ack_tx", "psn", "ack_tx"), ("read", "exe", "read"),
    # SET_QP and QUERY_QP, to and from the requester context
    ("qp_set", "psn", "qp_set"), ("qp_arg", "psn", "qp_arg"), ("q_qpn", "psn", "q_qpn"),
    ("q_psn", "psn", "q_psn"), ("q_cons", "psn", "q_cons"),
    # the requester context's completions and error completions
    ("req_cpl", "cqe", "complete"), ("req_err", "psn", "fault"),
    # Key Cache port 0 and its invalidate port, host memory (through the Scatter Path for
    # the payload writes)
    ("lookup", "exe", "lookup"), ("inval", "exe", "inval"), ("rd", "exe", "rd"),
    ("wr", "exe", "wr"), ("mem", "cqe", "mem"),
    # events, counter strobes, the CQ table's reset sweep
    ("psn_event", "psn", "event"), ("exe_event", "exe", "event"), ("cqe_event", "cqe", "event"),
    ("psn_stat", "psn", "stat"), ("cqe_stat", "cqe", "stat"), ("sweeping", "cqe", "sweeping"),
)

#: Block ports the layer connects inside, or passes out under another name (the rest of
#: PORTS passes through to the port of the same name).
_INNER = {"req_cpl", "req_err"}


class ResponderLayer(wiring.Component):
    """PSN Check, Execute and CQE Generation, connected.

    Parameters
    ----------
    width : int
        Data width W.
    num_qp, num_cq : int
        QP and CQ table depths.
    read : bool
        RDMA READ (default True); False: PSN Check refuses READ requests and drops READ
        responses' payload, Execute takes no command as a READ (its ``read`` port stays idle).

    Attributes
    ----------
    The ports of :data:`PORTS`; ``psn_check``, ``execute``, ``cqe_gen``: the blocks.
    """

    def __init__(self, *, width, num_qp, num_cq, read=True):
        self.psn_check = PsnCheck(width=width, num_qp=num_qp, read=read)
        self.execute = Execute(width=width, num_qp=num_qp, read=read)
        self.cqe_gen = CqeGen(width=width, num_cq=num_cq)
        super().__init__({name: self._block(b).signature.members[port]
                          for name, b, port in PORTS})

    def _block(self, key):
        return {"psn": self.psn_check, "exe": self.execute, "cqe": self.cqe_gen}[key]

    def elaborate(self, platform):
        m = Module()
        m.submodules.psn_check = psn = self.psn_check
        m.submodules.execute = exe = self.execute
        m.submodules.cqe_gen = cqe = self.cqe_gen
        for name, b, port in PORTS:
            if name not in _INNER:
                pass_through(m, self, name, self._block(b), port)

        # PSN Check <-> Execute
        wiring.connect(m, psn.exe, exe.exe)
        # (a skid buffer: PSN Check's done.ready and Execute's done.valid each end at registers;
        # the handshake ran from one block's pipeline through the other's into its own queues)
        m.submodules.done_skid = done_skid = SkidBuffer(exe.done.payload.shape())
        wiring.connect(m, exe.done, done_skid.i)
        wiring.connect(m, done_skid.o, psn.done)
        wiring.connect(m, psn.qp_reset, exe.qp_reset)
        wiring.connect(m, psn.rq_flush, exe.flush)
        wiring.connect(m, psn.rq_post, exe.rq_post)         # RQ doorbells: WQE prefetch
        m.submodules.fault_merge = faults = StreamMerge(exe.fault.payload.shape(), 3)
        wiring.connect(m, exe.fault, faults.i[0])
        wiring.connect(m, cqe.fault, faults.i[1])
        wiring.connect(m, wiring.flipped(self.req_err), faults.i[2])
        # (PSN Check's fault port has a registered ready: its own two-entry queue)
        wiring.connect(m, faults.o, psn.fault)

        # Execute <-> CQE Generation
        wiring.connect(m, exe.reserve, cqe.reserve)
        wiring.connect(m, cqe.reserve_resp, exe.reserve_resp)
        # (CQE Generation addresses its CQ table with ``cqn`` as it takes the record: that field
        # leaves from the merge's register; the record stays with its producer until taken)
        m.submodules.cpl_merge = cpl_merge = StreamMerge(exe.complete.payload.shape(), 2,
                                                         registered=("cqn", "status", "flush"))
        wiring.connect(m, exe.complete, cpl_merge.i[0])
        wiring.connect(m, wiring.flipped(self.req_cpl), cpl_merge.i[1])
        wiring.connect(m, cpl_merge.o, cqe.complete)
        return m
