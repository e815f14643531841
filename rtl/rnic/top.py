"""The ``rnic`` top module: every port of interface.md §2 by its exact Verilog name.

This is the composer of the core (the LUNA pattern), with a composer per layer under it: the
responder layer (:class:`~rnic.resp.layer.ResponderLayer`, instance ``resp``: PSN Check, Execute,
CQE Generation and the merges and the skid buffer between them) and the requester layer
(:class:`~rnic.req.layer.RequesterLayer`, instance ``req``: the Requester, its context, READ
Place, their merge and lookup register). Each layer's ports are its blocks' own, passed through.

What both layers use stays here, one of each (design-rules.md §5), and this module connects
it to both: RX Parse (its frames carry requests for the responder and responses for the
requester, both judged by PSN Check), the Key Cache (lookup port 0 the responder's, 1 the
requester's), the Scatter Path (Execute's payload and the READ responses READ Place accepts, in
arrival order), the host-memory AXI master, the TX side (READ response engine, arbiter, frame
builder: frames of both layers), the control plane with its event merge and counters, and
the microsecond strobe. So do the few connections between the layers: SET_QP and QUERY_QP
between PSN Check and the requester context, the response frames for READ Place, the
requester's completions and error completions into the responder layer's merges. CQE
Generation sits in the responder layer, the consumer of Execute's reservations, with the
requester's completions one input of its merge. The data path reads top to bottom here
(``docs/architecture.md`` has the picture):

* **Responder**: MAC receive → RX Parse → PSN Check (QP context, pending ACK/NAKs) → Execute
  (RQ fetch, Key Cache lookups, Scatter, invalidate) → CQE Generation; ACK/NAK descriptors and
  Execute's RDMA READ jobs → the READ response engine (:class:`~rnic.tx.read_resp.ReadResp`:
  one ordered stream of READ responses and ACK/NAKs, with the responses' gather chunks) → TX
  arbiter.
* **Requester**: SQ_DB → Requester (WQE fetch, lkey checks through Key Cache port 1,
  segmentation) → packet descriptors → TX arbiter, gather chunks → TX frame builder; received
  ACKNOWLEDGE and READ response frames (PSN Check's ``ack_out``, to an RTS QP from its remote
  IPv4; a READ response's payload on ``rr_pay``) → READ placement
  (:class:`~rnic.req.read_place.ReadPlace`: the requester's completer judges each READ
  response, the placement writes it through the READ's SGEs) → Requester; its completions →
  :class:`~rnic.req.req_context.ReqContext` (send CQN, flush marking, QP-to-ERROR reports,
  event 4) → CQE Generation. The requester sees the QP context through ``ReqContext``'s shadow
  table, written from PSN Check's ``qp_set``.
* **Transmit**: the TX arbiter picks whole frames (the responder's and the requester's
  descriptors, round-robin; each frame's gather chunks follow it) for the one TX frame builder
  (:class:`~rnic.tx.build.TxBuild`: headers, gather reads, IPv4 checksum, ICRC), which drives the
  MAC transmit stream.
* **Host memory**: one AXI4 master (:class:`~rnic.host.axi_master.HostMemory`): read clients
  0 receive WQEs (Execute), 1 send WQEs (Requester), 2 gather data (TX frame builder); write
  clients 0 placed payload, 1 CQEs. ARID/AWID = client number. One Scatter Path
  (:class:`~rnic.resp.scatter.SharedScatter`, with the payload FIFO) places both the payload
  Execute writes (SEND, RDMA WRITE) and the READ responses the READ placement accepts, in the
  order their packets arrive, through write client 0.
* **Errors**: Execute's and CQE Generation's host faults and the requester's error completions
  reach PSN Check's ``fault`` port, which moves the QP to ERROR (event 3) for both halves.
* Response frames for an unknown QPN, a QP not in RTS or from another IPv4 are counted as 6 by
  PSN Check; atomic ACKs are dropped here and READ responses the READ placement does not place
  (out of sequence, duplicates, inconsistent) there, both counted as 6.
* ``US_CYCLES`` divides the clock into the microsecond strobe of the requester's timers.

Built without RDMA READ (``RnicConfig.read`` False, ``--no-read``: contract version 1.0 for
READ) the core has no READ response engine and no READ placement: PSN Check's ACK/NAK
descriptors go straight to the TX arbiter (its READ-response chunk input idle), the ACKNOWLEDGE
headers to the requester layer, and READ responses are dropped and counted as 6 here, as atomic
ACKs are; the Scatter Path's second client is left idle.

The reset sweep: for ``max(num_qp, num_cq, key_entries)`` cycles after ``rst`` — the time a
block takes to clear a table of that depth one entry per cycle — CMD_STATUS reads busy and
received frames are dropped and counted as 2. Blocks with their own sweep OR theirs in.
"""

import types

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .control.control_plane import ControlPlane
from .ifaces import NUM_COUNTERS, Counter, event_layout
from .params import RnicConfig
from .parts import add as _add
from .rx.parse import RxParse
from .resp.layer import ResponderLayer
from .keys.key_cache import KeyCache
from .host.axi_master import HostMemory
from .tx.arbiter import TxArbiter
from .tx.build import TxBuild
from .tx.read_resp import ReadResp
from .stream import StreamMerge
from .req.layer import RequesterLayer
from .resp.scatter import SharedScatter

#: HostMemory's read clients in port order, each with its read buffer in beats: the responder's
#: receive-WQE fetch, the requester's send-WQE fetch and its gather path. The gather buffer
#: holds four 64-beat bursts, so it keeps the read bus busy through ~190 cycles of host read
#: latency (one burst at a time covered 64 beats per round trip).
READ_CLIENTS = (("rq_wqe", 64), ("sq_wqe", 64), ("gather", 256))

#: The blocks that strobe the counters of interface.md §4.5, each with the counters it drives
#: (a strobe is 0 or 1 a cycle). A counter adds the strobes of the sources that name it and
#: carries at most their number a cycle, which sizes its tally in the control plane; a strobe
#: on a counter its source does not name here is not counted.
STAT_SOURCES = (
    ("top", (Counter.NO_QP,)),                  # responses for no requester QP
    ("rx_parse", (Counter.RX_FRAMES, Counter.MAC_DROP, Counter.NOT_ROCE, Counter.BAD_IP_UDP,
                  Counter.BAD_ICRC, Counter.BAD_BTH)),
    ("psn_check", (Counter.NO_QP, Counter.DUPLICATES)),
    ("cqe_gen", (Counter.COMPLETIONS,)),
    ("tx_build", (Counter.TX_FRAMES, Counter.SEQ_NAKS, Counter.RNR_NAKS, Counter.OTHER_NAKS,
                  Counter.ACKS)),
    ("requester", (Counter.RETRANSMITS,)),
    ("read_place", (Counter.NO_QP,)),           # READ responses not placed
)


def stat_bounds():
    """Per counter, how many strobes its lane adds (``ControlPlane(max_inc=)`` of the core)."""
    return [sum(i in drives for _, drives in STAT_SOURCES) for i in range(NUM_COUNTERS)]

__all__ = ["RNIC", "port_list", "build_verilog", "STAT_SOURCES", "stat_bounds"]


def port_list(config):
    """``{name: (direction, width)}`` of every port of module ``rnic`` (interface.md §2)."""
    w = config.data_width
    ports = {}

    def add(d, name, width=1):
        ports[name] = (d, width)

    for d, p in (("in", "s_axis_rx"),):
        add("in", f"{p}_tdata", w); add("in", f"{p}_tkeep", w // 8); add("in", f"{p}_tvalid")
        add("out", f"{p}_tready"); add("in", f"{p}_tlast"); add("in", f"{p}_tuser")
    p = "m_axis_tx"
    add("out", f"{p}_tdata", w); add("out", f"{p}_tkeep", w // 8); add("out", f"{p}_tvalid")
    add("in", f"{p}_tready"); add("out", f"{p}_tlast"); add("out", f"{p}_tuser")
    for ch in ("aw", "ar"):
        add("out", f"m_axi_{ch}id", 8); add("out", f"m_axi_{ch}addr", 64)
        add("out", f"m_axi_{ch}len", 8); add("out", f"m_axi_{ch}size", 3)
        add("out", f"m_axi_{ch}burst", 2); add("out", f"m_axi_{ch}valid")
        add("in", f"m_axi_{ch}ready")
    add("out", "m_axi_wdata", w); add("out", "m_axi_wstrb", w // 8); add("out", "m_axi_wlast")
    add("out", "m_axi_wvalid"); add("in", "m_axi_wready")
    add("in", "m_axi_bid", 8); add("in", "m_axi_bresp", 2); add("in", "m_axi_bvalid")
    add("out", "m_axi_bready")
    add("in", "m_axi_rid", 8); add("in", "m_axi_rdata", w); add("in", "m_axi_rresp", 2)
    add("in", "m_axi_rlast"); add("in", "m_axi_rvalid"); add("out", "m_axi_rready")
    add("in", "s_axil_awaddr", 16); add("in", "s_axil_awvalid"); add("out", "s_axil_awready")
    add("in", "s_axil_wdata", 32); add("in", "s_axil_wstrb", 4); add("in", "s_axil_wvalid")
    add("out", "s_axil_wready")
    add("out", "s_axil_bresp", 2); add("out", "s_axil_bvalid"); add("in", "s_axil_bready")
    add("in", "s_axil_araddr", 16); add("in", "s_axil_arvalid"); add("out", "s_axil_arready")
    add("out", "s_axil_rdata", 32); add("out", "s_axil_rresp", 2); add("out", "s_axil_rvalid")
    add("in", "s_axil_rready")
    add("out", "irq")
    return ports


class RNIC(wiring.Component):
    """The RoCEv2 RNIC core.

    Parameters
    ----------
    config : RnicConfig
        Checked at construction (``ConfigError`` with a one-line reason).

    Attributes
    ----------
    Every port of interface.md §2, named exactly as there (see :func:`port_list`), plus the
    implicit ``clk`` and ``rst`` (synchronous, active high).
    """

    def __init__(self, config=None):
        self.config = config or RnicConfig()
        members = {}
        for name, (d, width) in port_list(self.config).items():
            members[name] = (In if d == "in" else Out)(width)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace(cfg=self.config)
        _add(t, self._control(m, t))
        _add(t, self._sweep(m, t))
        _add(t, self._blocks(m, t))
        self._receive(m, t)
        self._responder(m, t)
        self._requester(m, t)
        _add(t, self._responses(m, t))
        self._transmit(m, t)
        self._counters(m, t)
        return m

    def _control(self, m, t):
        """The control plane (registers, commands, doorbells, events, counters) on the AXI4-Lite
        slave and ``irq``. Adds ``ctl``."""
        cfg = t.cfg
        m.submodules.control = ctl = ControlPlane(cfg, max_inc=stat_bounds())
        for sig in ("awaddr", "awvalid", "wdata", "wstrb", "wvalid", "bready", "araddr",
                    "arvalid", "rready"):
            m.d.comb += getattr(ctl.axil, sig).eq(getattr(self, f"s_axil_{sig}"))
        for sig in ("awready", "wready", "bresp", "bvalid", "arready", "rdata", "rresp",
                    "rvalid"):
            m.d.comb += getattr(self, f"s_axil_{sig}").eq(getattr(ctl.axil, sig))
        m.d.comb += self.irq.eq(ctl.irq)
        return types.SimpleNamespace(ctl=ctl)

    def _sweep(self, m, t):
        """The reset sweep's counter, for the depth of the largest table (``sweep``, 0 when done).
        Adds ``sweep``."""
        cfg = t.cfg
        # ---- reset sweep ------------------------------------------------------------------
        depth = max(cfg.num_qp, cfg.num_cq, cfg.key_entries)
        sweep = Signal(range(depth + 1), init=depth)
        with m.If(sweep != 0):
            m.d.sync += sweep.eq(sweep - 1)
        return types.SimpleNamespace(sweep=sweep)

    def _blocks(self, m, t):
        """The layers and the shared blocks of the core, each a submodule. Adds them (``rx``,
        ``resp``, ``req``, ``keys``, ``hmem`` with ``hmem_rd``, its read clients by name,
        ``scatter``, ``rdr``, ``arb``, ``build``)."""
        cfg = t.cfg
        W = cfg.data_width
        m.submodules.rx_parse = rx = RxParse(width=W)
        m.submodules.resp = resp = ResponderLayer(width=W, num_qp=cfg.num_qp, num_cq=cfg.num_cq,
                                                  read=cfg.read)
        m.submodules.key_cache = keys = KeyCache(key_entries=cfg.key_entries, num_ports=2)
        m.submodules.scatter = scatter = SharedScatter(width=W)
        m.submodules.host_memory = hmem = HostMemory(
            width=W, read_clients=len(READ_CLIENTS), write_clients=2,
            read_buffer=tuple(beats for _, beats in READ_CLIENTS), max_burst=64)
        hmem_rd = {name: getattr(hmem, f"read_{i}") for i, (name, _) in enumerate(READ_CLIENTS)}
        rdr = None
        if cfg.read:
            m.submodules.read_resp = rdr = ReadResp(num_qp=cfg.num_qp)
        m.submodules.tx_arbiter = arb = TxArbiter()
        m.submodules.tx_build = build = TxBuild(W, num_qp=cfg.num_qp)
        m.submodules.req = req = RequesterLayer(width=W, num_qp=cfg.num_qp, read=cfg.read)
        return types.SimpleNamespace(
            rx=rx, resp=resp, keys=keys, hmem=hmem, hmem_rd=hmem_rd, rdr=rdr, arb=arb,
            build=build, req=req, scatter=scatter)

    def _receive(self, m, t):
        """The responder's input: the MAC receive stream into RX Parse, on to PSN Check; the control
        plane's command ports and doorbells to their blocks."""
        ctl, keys, resp, req, rx = t.ctl, t.keys, t.resp, t.req, t.rx
        # MAC receive
        m.d.comb += [
            rx.i.payload.data.eq(self.s_axis_rx_tdata),
            rx.i.payload.keep.eq(self.s_axis_rx_tkeep),
            rx.i.payload.last.eq(self.s_axis_rx_tlast),
            rx.i.payload.user.eq(self.s_axis_rx_tuser),
            rx.i.valid.eq(self.s_axis_rx_tvalid),
            self.s_axis_rx_tready.eq(rx.i.ready),
            rx.local_mac.eq(ctl.local_mac), rx.local_ip.eq(ctl.local_ip),
            rx.drop_all.eq(ctl.drop_all),
        ]
        wiring.connect(m, rx.meta, resp.meta)
        wiring.connect(m, rx.payload, resp.payload)

        # command ports and doorbells
        wiring.connect(m, ctl.qp, resp.qp_cmd)
        wiring.connect(m, ctl.cq, resp.cq_cmd)
        wiring.connect(m, ctl.key, keys.cmd)
        for src, dst, fields in ((ctl.rq_db, resp.rq_db, ("qpn", "index")),
                                 (ctl.cq_db, resp.cq_db, ("cqn", "index")),
                                 (ctl.cq_arm, resp.cq_arm, ("cqn", "mode"))):
            num, val = fields
            m.d.comb += [getattr(dst.payload, num).eq(src.payload.number),
                         getattr(dst.payload, val).eq(src.payload.value),
                         dst.valid.eq(src.valid), src.ready.eq(dst.ready)]
        m.d.comb += [req.sq_db.payload.number.eq(ctl.sq_db.payload.number),
                     req.sq_db.payload.value.eq(ctl.sq_db.payload.value),
                     req.sq_db.valid.eq(ctl.sq_db.valid), ctl.sq_db.ready.eq(req.sq_db.ready)]

    def _responder(self, m, t):
        """The responder layer's shared resources: the Scatter Path for its payload, the Key
        Cache's lookup port 0 and invalidate port, host memory (receive WQEs, CQEs) and the
        requester's completions and error completions into it."""
        hmem, hmem_rd, keys, req, resp = t.hmem, t.hmem_rd, t.keys, t.req, t.resp
        wiring.connect(m, resp.pay_out, t.scatter.pay0)
        wiring.connect(m, req.qp_err, resp.req_err)
        wiring.connect(m, keys.lookup0, resp.lookup)
        wiring.connect(m, keys.inval, resp.inval)
        wiring.connect(m, req.cqe, resp.req_cpl)
        wiring.connect(m, resp.rd, hmem_rd["rq_wqe"])
        wiring.connect(m, resp.wr, t.scatter.client0)
        wiring.connect(m, t.scatter.wr, hmem.write_0)
        wiring.connect(m, resp.mem, hmem.write_1)
        for name, member in hmem.axi.signature.members.items():
            ch, sig = name.split("_", 1)
            port = getattr(self, f"m_axi_{ch}{sig}")
            ours = getattr(hmem.axi, name)
            m.d.comb += (ours.eq(port) if member.flow == In else port.eq(ours))

    def _requester(self, m, t):
        """The requester layer: the QP context's shadow from PSN Check, its faults, Key Cache
        lookups, WQE and gather reads, QUERY_QP's progress and the microsecond strobe of its
        timers."""
        build, ctl, hmem_rd, keys, rdr, req, resp = (
            t.build, t.ctl, t.hmem_rd, t.keys, t.rdr, t.req, t.resp)
        wiring.connect(m, resp.qp_set, req.qp_set)
        # SET_QP's ARG writes, to the requester's context and the builder's path table, through
        # one register (each lands a cycle after PSN Check's own): the word comes from the
        # control plane's ARG RAM through PSN Check and reaches two more blocks' tables. The
        # QP's ``qp_set`` follows its last ARG write by three cycles or more, the sweep's
        # last write lands before any command can run.
        qa = Signal(resp.qp_arg.payload.shape())
        qa_v = Signal()
        m.d.sync += [qa_v.eq(resp.qp_arg.valid), qa.eq(resp.qp_arg.payload)]
        for dst in (req.qp_arg, build.qp_arg):
            m.d.comb += [dst.valid.eq(qa_v), dst.payload.eq(qa)]
        # a payload read failed: the requester context moves the QP to ERROR (event 4); a READ
        # response's read ends its READ
        wiring.connect(m, build.fault, req.tx_fault)
        if rdr is not None:
            m.d.comb += [rdr.fault.valid.eq(build.fault.valid & build.fault.ready),
                         rdr.fault.payload.eq(build.fault.payload)]
        wiring.connect(m, keys.lookup1, req.lookup)
        wiring.connect(m, req.wqe_rd, hmem_rd["sq_wqe"])
        wiring.connect(m, build.rd, hmem_rd["gather"])
        # QUERY_QP's next send PSN and SQ consumer index: the requester's, through ReqContext
        m.d.comb += [req.q_qpn.eq(resp.q_qpn), resp.q_psn.eq(req.q_psn),
                     resp.q_cons.eq(req.q_cons)]
        if hasattr(req, "us_tick"):
            # one strobe per microsecond of US_CYCLES clock cycles (the time base of every timer)
            # (``tick`` is a register, the compare made a cycle ahead: it reaches every timer
            # of the requester, so it must not be the end of the compare's carry chain, nor
            # feed the counter's own reset from there. It uses US_CYCLES of the cycle before;
            # the strobes are otherwise the same.)
            us_cnt = Signal(32)
            tick = Signal()
            m.d.sync += [us_cnt.eq(Mux(tick, 0, us_cnt + 1)),
                         tick.eq(Mux(tick, ctl.us_cycles <= 1, us_cnt + 2 >= ctl.us_cycles))]
            m.d.comb += req.us_tick.eq(tick)

    def _responses(self, m, t):
        """Response frames that PSN Check accepted, to the READ placement of the requester layer.
        Adds ``stat`` and ``rpl_stat``, their counter strobes."""
        req, resp = t.req, t.resp
        # Response frames that PSN Check accepted (an RTS QP, from its remote IPv4):
        # ACKNOWLEDGE (0x11) and READ responses (0x0D–0x10, their payload on rr_pay) go to the
        # READ placement, which places the responses it may (asking the requester's completer)
        # and passes the ACKs on in order; atomic ACKs (not in version 2) are counted as 6, as
        # are READ responses it drops. (Without READ only ACKNOWLEDGE goes on: READ responses
        # are counted as 6 with the atomic ACKs.)
        stat = Signal(NUM_COUNTERS)
        ao = resp.ack_out
        ack_ok = Signal()
        m.d.comb += ack_ok.eq((ao.payload.opcode >= 0x0D) & (ao.payload.opcode <= 0x11)
                              if t.cfg.read else ao.payload.opcode == 0x11)
        m.d.comb += [req.hdr.payload.eq(ao.payload), req.hdr.valid.eq(ao.valid & ack_ok),
                     ao.ready.eq(~ack_ok | req.hdr.ready)]
        with m.If(ao.valid & ~ack_ok):
            m.d.comb += stat[Counter.NO_QP].eq(1)
        rpl_stat = Signal(NUM_COUNTERS)
        if t.cfg.read:
            m.d.comb += rpl_stat[Counter.NO_QP].eq(req.rpl_drop)
            wiring.connect(m, resp.rr_pay, t.scatter.pay1)
            wiring.connect(m, req.wr, t.scatter.client1)
        else:
            # (PSN Check sends no READ payload then; the Scatter Path's client 1 stays idle)
            m.d.comb += resp.rr_pay.ready.eq(1)
        return types.SimpleNamespace(stat=stat, rpl_stat=rpl_stat)

    def _transmit(self, m, t):
        """MAC transmit: the responder's READ responses and ACK/NAKs and the requester's packets
        through the TX arbiter to the TX frame builder."""
        arb, build, ctl, rdr, req, resp = t.arb, t.build, t.ctl, t.rdr, t.req, t.resp
        # MAC transmit: the responder's READ responses and ACK/NAKs (one ordered stream, so an
        # ACK decided after a READ never overtakes its responses) and the requester's packets
        # -> TX arbiter (whole frames, and their gather chunks in the same order) -> the TX
        # frame builder
        if rdr is not None:
            wiring.connect(m, resp.read, rdr.job)
            wiring.connect(m, resp.ack_tx, rdr.ack)
            wiring.connect(m, rdr.pkt, arb.resp)
            wiring.connect(m, rdr.chunk, arb.resp_chunk)
        else:
            # without READ: the ACK/NAK descriptors as the READ response engine passes them
            # when it has no job (no payload, no RETH/IMMDT fields); no chunk, no READ job
            a, p = resp.ack_tx, arb.resp
            m.d.comb += [getattr(p.payload, f).eq(getattr(a.payload, f)) for f in
                         ("qpn", "opcode", "se", "ackreq", "psn", "aeth", "syndrome", "msn")]
            m.d.comb += [p.valid.eq(a.valid), a.ready.eq(p.ready), resp.read.ready.eq(1)]
        wiring.connect(m, req.pkt, arb.req)
        wiring.connect(m, req.chunk, arb.req_chunk)
        wiring.connect(m, arb.o, build.pkt)
        # (the builder's chunk.ready comes from a register of its two-entry input queue)
        wiring.connect(m, arb.chunk, build.chunk)
        m.d.comb += [build.local_mac.eq(ctl.local_mac), build.local_ip.eq(ctl.local_ip)]
        o = build.tx
        m.d.comb += [
            self.m_axis_tx_tdata.eq(o.payload.data), self.m_axis_tx_tkeep.eq(o.payload.keep),
            self.m_axis_tx_tlast.eq(o.payload.last), self.m_axis_tx_tuser.eq(0),
            self.m_axis_tx_tvalid.eq(o.valid), o.ready.eq(self.m_axis_tx_tready),
        ]

    def _counters(self, m, t):
        """Events, counters and the sweep: the blocks' events merged into the control plane, the
        counter strobes summed per counter, and ``sweeping``."""
        (build, ctl, keys, req, resp, rpl_stat, rx, stat, sweep) = (
            t.build, t.ctl, t.keys, t.req, t.resp, t.rpl_stat, t.rx, t.stat, t.sweep)
        # events, counters, sweep
        req_stat = Signal(NUM_COUNTERS)
        if hasattr(req, "retx"):
            m.d.comb += req_stat[Counter.RETRANSMITS].eq(req.retx)
        # (registered: an input is popped from the merge's registers when its event is taken, so
        # no producer's ready depends on another producer's valid; the pick a cycle before the
        # load keeps the merge a 4:1 mux; events are rare, one every third cycle is enough)
        m.submodules.event_merge = events = StreamMerge(
            event_layout, 4, registered=("type", "number"), grant_cycle=True)
        wiring.connect(m, resp.psn_event, events.i[0])
        wiring.connect(m, resp.exe_event, events.i[1])
        wiring.connect(m, resp.cqe_event, events.i[2])
        wiring.connect(m, req.event, events.i[3])
        wiring.connect(m, events.o, ctl.event)
        # The per-counter sums are registered: a counter moves one cycle after its event, and
        # the blocks' strobe logic (some of it a handshake, e.g. the transmit arbiter's) ends
        # here instead of running on through the sum and the 32-bit saturating add.
        strobes = {"top": stat, "rx_parse": rx.stat, "psn_check": resp.psn_stat,
                   "cqe_gen": resp.cqe_stat, "tx_build": build.stat, "requester": req_stat,
                   "read_place": rpl_stat}
        assert set(strobes) == {name for name, _ in STAT_SOURCES}
        for i in range(NUM_COUNTERS):
            m.d.sync += ctl.stat_inc[i].eq(sum(strobes[name][i] for name, drives in STAT_SOURCES
                                               if i in drives))
        m.d.comb += ctl.sweeping.eq((sweep != 0) | keys.sweeping | resp.sweeping)


def build_verilog(config, path=None):
    """Verilog text of module ``rnic`` for ``config``; written to ``path`` if given."""
    from .emit import verilog
    text = verilog(RNIC(config), "rnic")
    if path is not None:
        from pathlib import Path
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    return text
