"""Receive Queue fetch: read 64-byte receive WQEs from host memory (interface.md §5.1).

Each request ``{addr, tag}`` becomes one :class:`~rnic.host.HostMemory` read of 64 bytes; up to
``depth`` reads are outstanding at once (one read client, one ARID: the data comes back in
request order). A WQE is 64-byte aligned (every ring base is, interface.md §4.2: SET_QP refuses
another), so it fills whole beats at every W, at fixed lanes: RqFetch keeps no copy of it. Each
beat leaves on ``beat`` {data, index, tag} as it arrives (``index`` = its place in the WQE,
bytes ``index·W/8`` on; the caller writes it into the RAM that keeps the WQE, in the layout
:data:`wqe_layout`: the layout's field order is the byte order), and after the last beat
``resp`` {tag, err} says the WQE is complete (``err`` = some beat came back non-OKAY). Responses
leave in request order, from registers, one cycle after the WQE's last beat; the next read's
beats wait while a response waits. A WQE every ``ceil(64/(W/8))`` cycles at most while the
responses are taken at once.

WQE store
---------
(Used by the planner, stage 1 of :class:`~rnic.resp.execute.Execute`.)
One LUT-RAM store of ``prefetch`` + 1 rows, each what placement keeps of a WQE (wr_id,
min(num_sge, 4), the three SGEs: 451 bits, one RAM per 64-bit word of the WQE), written beat
by beat by the read that fills it: rows 0 to ``prefetch`` − 1 are the prefetch pool's slots,
row ``prefetch`` takes the planner's own reads. Each row is tagged {valid, QP, index, ring}
(``rq_base`` bits 63..6 and ``rq_log``; a pool slot's ring in a LUT RAM, compared for the slot
hit only): a WQE taken stays in its row, tagged, while its
message runs, and the later packets of the message read it there. A row is lost to a claim
(the prefetcher's, for a pool slot; the planner's next read, for its own row), to a take of
another WQE of the QP (except index + 1, read ahead), to ``qp_reset``, and a pool slot also
when the command that completes its WQE leaves the planner; the row the planner works from
is never claimed meanwhile. LUT RAM rather than block RAM: 16 rows of 451 bits are
113 DPR16X4 (the depth of one DPR16X4, whatever ``prefetch`` ≤ 15), read a field per state
with no output register, while the same store in 72-bit block RAM rows would take two DP16KD
plus, at W = 512, staging for the WQE's one 512-bit beat; a per-QP copy of the WQE
(``num_qp`` × 451 bits) would take at least seven DP16KD at ``num_qp`` = 256.

WQE prefetch
------------
``rq_post`` {qpn, index, rq_base, rq_log} (``rcqn`` unused) reports every RQ doorbell that took
effect (QP in INIT, RTR or RTS; PSN Check knows the state and the ring): per QP the producer
index and the ring are kept (table ``pst``, cleared by ``qp_reset``), beside the index of the
next WQE the QP's messages will take (table ``nxt``: the last taken + 1, 0 after ``qp_reset``).
After a doorbell, and after a message took its WQE, a prefetcher examines the QP: when WQE
``nxt`` is posted (behind the producer) and no pool slot holds {QP, ``nxt``}, it reads it
into a slot of a pool of ``prefetch`` slots {qpn, index, address, the WQE as placement keeps
it} (a free slot, else the next one round robin that has its data: the least recently filled
QPs lose theirs); with ``prefetch_depth`` ≥ 2 it then reads WQE ``nxt`` + 1 (and with 3,
``nxt`` + 2) the same way when it is posted and not held, but only into a free slot (a
deeper prefetch never evicts). A WQE is only read after the doorbell that posted it, so the
host wrote it before the read. The planner uses a slot whose {qpn, index, address} are its
command's (waiting if the read is still out) and otherwise reads the WQE itself; a
prefetched read that fails is dropped silently (the planner's own read then reports it).
Taking WQE i voids the QP's slots except the ones of index i (the WQE taken) to i + depth −
1, ``qp_reset`` voids all of them (a voided read in flight: its data is dropped). So a QP
with posted WQEs holds its next ones on chip while its current message runs, and strict
order, the consumer index, RNR (decided by PSN Check) and flush are unchanged. ``prefetch``
= 0 removes the pool (reads on demand; the store is the planner's row alone).
"""

import types

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect

# the receive WQE exactly as it lies in host memory (bit 8·i = byte i) and its scatter/gather
# element: the layouts of the host-memory format table (interface.md §5.1)
from ..formats import RECV_MAX_SGE as MAX_SGE, RECV_WQE_BYTES as WQE_BYTES
from ..formats import RecvWqe as wqe_layout, Sge as sge_layout
from ..host.axi_master import ReadClientSignature
from ..parts import add as _add, low_mask, one_hot, split_eq
from ..stream import Queue, check_width

__all__ = ["RqFetch", "wqe_store", "prefetch_pool", "slim_layout",
           "sge_layout", "wqe_layout", "WQE_BYTES", "MAX_SGE",
           "fetch_req_layout", "fetch_resp_layout", "fetch_beat_layout"]

fetch_req_layout = data.StructLayout({"addr": 64, "tag": 8})
fetch_resp_layout = data.StructLayout({"err": 1, "tag": 8})


def fetch_beat_layout(width):
    """One beat of a WQE: ``data`` = bytes ``index·width/8`` on of the WQE, the request's tag."""
    return data.StructLayout({"data": width, "index": 3, "tag": 8})


class RqFetch(wiring.Component):
    """Fetch receive WQEs, several in flight, answered in request order.

    Parameters
    ----------
    width : int
        Host-memory data width W (64, 128, 256, 512).
    depth : int
        Reads outstanding at most (requests accepted whose response has not left).

    Attributes
    ----------
    req : In(stream.Signature({addr 64, tag 8}))
        Bus address of the WQE (``rq_base + 64·(index mod 2^rq_log)``, 64-byte aligned: its low
        6 bits are not used) and the caller's tag.
    beat : Out(stream.Signature({data W, index 3, tag 8}, always_ready=True))
        The WQE's beats as they arrive (the caller takes every one): ``data`` is bytes
        ``index·W/8`` to ``(index+1)·W/8 − 1`` of the WQE of the request tagged ``tag``.
    resp : Out(stream.Signature({err 1, tag 8}))
        The WQE of the request tagged ``tag`` has been delivered on ``beat`` (in the cycles
        before); ``err`` = the read got a non-OKAY response (the beats are then meaningless).
    mem : Out(ReadClientSignature(width))
        A read client of :class:`rnic.host.HostMemory`.
    """

    def __init__(self, *, width, depth=4):
        self.width = check_width(width)
        self.depth = depth
        super().__init__({
            "req": In(stream.Signature(fetch_req_layout)),
            "beat": Out(stream.Signature(fetch_beat_layout(self.width), always_ready=True)),
            "resp": Out(stream.Signature(fetch_resp_layout)),
            "mem": Out(ReadClientSignature(width)),
        })

    def elaborate(self, platform):
        m = Module()
        fl_layout = data.StructLayout({"tag": 8})

        # request side: a registered queue, then one read per request while room in flight
        m.submodules.req_q = req_q = Queue(fetch_req_layout, 2)
        connect(m, wiring.flipped(self.req), req_q.i)
        # the head's tag from a register: it picks the WQE store row that every beat's bits are
        # written at (W/4 LUT-RAM address inputs). A beat waits for its entry (the buffered
        # queue's extra cycle), which a host read's latency already covers.
        m.submodules.inflight = inflight = Queue(fl_layout, self.depth)
        rq = req_q.o
        mr = self.mem.req
        m.d.comb += [
            mr.valid.eq(rq.valid & inflight.i.ready),
            mr.payload.addr.eq(Cat(Const(0, 6), rq.payload.addr[6:])),
            mr.payload.len_bytes.eq(WQE_BYTES),
            mr.payload.tag.eq(rq.payload.tag),
            rq.ready.eq(mr.ready & inflight.i.ready),
            inflight.i.valid.eq(rq.valid & mr.ready),
            inflight.i.payload.tag.eq(rq.payload.tag),
        ]

        # response side: pass the oldest read's beats on with their index; on its last beat the
        # WQE is complete (the in-flight entry is popped) and its {tag, err} is the response
        # until taken (the next read's beats wait meanwhile)
        k = Signal(3)
        err = Signal()
        full = Signal()
        f_tag = Signal(8)
        f_err = Signal()
        m.d.comb += [self.resp.valid.eq(full), self.resp.payload.err.eq(f_err),
                     self.resp.payload.tag.eq(f_tag)]
        r = self.mem.resp
        go = Signal()
        m.d.comb += go.eq(~full & inflight.o.valid)
        m.d.comb += [r.ready.eq(go), self.beat.valid.eq(r.valid & go),
                     self.beat.payload.data.eq(r.payload.data), self.beat.payload.index.eq(k),
                     self.beat.payload.tag.eq(inflight.o.payload.tag)]
        with m.If(r.valid & go):
            m.d.sync += [k.eq(k + 1), err.eq(err | r.payload.err)]
            with m.If(r.payload.last):
                m.d.comb += inflight.o.ready.eq(1)
                m.d.sync += [full.eq(1), k.eq(0), err.eq(0), f_err.eq(err | r.payload.err),
                             f_tag.eq(inflight.o.payload.tag)]
        with m.If(self.resp.ready):
            m.d.sync += full.eq(0)
        return m


#: What placement keeps of a receive WQE: wr_id, the SGEs, and ``nsge`` = min(num_sge, 4)
#: (num_sge > 3 is refused; the reserved word is not kept).
slim_layout = data.StructLayout({
    "wr_id": 64, "nsge": 3, "sge": data.ArrayLayout(sge_layout, MAX_SGE)})


def wqe_store(m, rows, width, beat):
    """The fetched WQEs, :data:`slim_layout` per row, written beat by beat from ``beat`` (the
    :class:`RqFetch` beat stream; row ``rows − 1`` for the tag ``DEMAND`` (bit 7), else the
    tag) and read asynchronously (LUT RAM). The WQE's 64-bit words sit at fixed lanes of fixed
    beats (64-byte aligned): word 0 wr_id, 1 num_sge (kept as min(num_sge, 4), the reserved
    word dropped), 2 + 2i and 3 + 2i SGE i; one RAM per word, written when its beat comes.
    Returns (read address, read data as :data:`slim_layout`)."""
    per = width // 64                          # words per beat
    rb = max(1, (rows - 1).bit_length())
    row = Signal(rb, name="wqs_row")
    m.d.comb += row.eq(Mux(beat.payload.tag[7], rows - 1, beat.payload.tag[:rb]))
    addr = Signal(rb, name="wqs_raddr")
    words = []
    for w in range(WQE_BYTES // 8):
        lane = beat.payload.data[(w % per) * 64:(w % per + 1) * 64]
        if w == 1:
            num = lane[:32]
            shape, wdata = 3, Mux(num > MAX_SGE, MAX_SGE + 1, num[:3])
        else:
            shape, wdata = 64, lane
        # LUT RAM on purpose (see the pool, :func:`prefetch_pool`)
        mem = Memory(shape=shape, depth=max(rows, 2), init=[])
        m.submodules[f"wqs{w}"] = mem
        wp = mem.write_port()
        rp = mem.read_port(domain="comb")
        m.d.comb += [wp.addr.eq(row), wp.data.eq(wdata),
                     wp.en.eq(beat.valid & (beat.payload.index == w // per)),
                     rp.addr.eq(addr)]
        words.append(rp.data)
    out = Signal(slim_layout, name="wqs_data")
    m.d.comb += out.as_value().eq(Cat(*words))
    return addr, out


#: The per-QP row of the pool (``pst`` and ``nxt``) in 9-bit write lanes: ``pst`` in lanes
#: 0..9, ``nxt`` from lane 10 on
_PST_LANES = 12
_NXT_LANE = 10


def prefetch_pool(m, *, prefetch, prefetch_depth, num_qp, fetch, plan_fetch, plan_look,
                  plan_hit_r, plan_tk, c_qpn_n, take, take_r, c, ab, rst, rp, prow_oh, pin,
                  release):
    """The WQE prefetch pool (see the module docstring): slots 0..P-1 of the WQE store.
    ``prow_oh``/``pin``: while ``pin``, the planner works from the slot set in ``prow_oh``
    (one-hot; never claimed while ``pin``);
    ``release``: it is done with that slot's WQE (completed): the slot is free; ``take``:
    the planner takes WQE c.rq_index of c.qpn (the pool acts on it a cycle later, from a
    register, while c stays as it is); ``plan_hit_r``, ``plan_tk``: registers, 1 while the
    planner is in HIT, and from DEC to the take of c's WQE (the QP's next); ``c_qpn_n``:
    the QP c holds in the next cycle (c.qpn, or the command's while the planner loads c).
    Returns the
    signals the planner uses: ``match_c`` (valid in LOOK, the state after the one that
    loaded c's index: slots holding c's WQE),
    ``claim_d`` (the slots the prefetcher claimed in the cycle before, one-hot; none is
    claimed in HIT), ``match`` (the planner's register of ``match_c``), ``m_new`` (a register
    the planner sets to 1 with ``match``: the prefetcher's claim waits a cycle), ``valid``,
    ``ok`` (data present), ``hit`` (driven by the planner: the first matched slot with data
    is used now) and ``hsel`` (in HIT, the store row of that slot)."""
    # The parts below share their signals through ``t``: each takes from it what it reads
    # and adds what it makes (_add). They are called in the order their statements had in
    # one function, which the generated Verilog follows.
    t = types.SimpleNamespace(
        P=prefetch, sb=max(1, (prefetch - 1).bit_length()), D=prefetch_depth, num_qp=num_qp,
        fetch=fetch, fr=fetch.resp, plan_fetch=plan_fetch, plan_look=plan_look,
        plan_hit_r=plan_hit_r, plan_tk=plan_tk, c_qpn_n=c_qpn_n, take=take, take_r=take_r,
        c=c, ab=ab, rst=rst, rst_q=rst.payload.qpn, rp=rp, prow_oh=prow_oh, pin=pin,
        release=release)
    _add(t, _qp_tables(m, t))
    _add(t, _next_index(m, t))
    _add(t, _pool_slots(m, t))
    _add(t, _visit_registers(m, t))
    _add(t, _visit_choice(m, t))
    _prefetcher_fsm(m, t)
    _add(t, _hit_select(m, t))
    _slot_updates(m, t)
    return {"match_c": t.match_c, "match": t.match, "m_new": t.m_new, "valid": t.valid,
            "ok": t.ok, "hit": t.hit,
            "claim_d": t.claim_d, "hsel": t.hsel, "ring_ok": t.ring_ok}


def _qp_tables(m, t):
    """The pool's per-QP tables: ``pst``, the producer index and ring of the last RQ doorbell
    that took effect (written by ``rq_post``, cleared by ``qp_reset``), and ``nxt``, the index
    of the next WQE the QP's messages will take, in one block RAM row (below); and the queues
    of QPs to examine, after a doorbell (``chk_post``) and after a take (``chk_take``). Adds
    ``post_row``, the tables' read views, the row's write port and the two queues."""
    ab = t.ab
    # per-QP: the producer index and ring of the last RQ doorbell that took effect
    post_row = data.StructLayout({"on": 1, "prod": 16, "base": 64, "log": 5})
    # ``pst`` and ``nxt`` share a row of 9-bit write lanes: ``pst`` in lanes 0..9, ``nxt``
    # (16 bits) in lanes 10 and 11, 108 bits, the width of three DP16KD with their byte
    # enables (two tables of 86 and 16 bits would take four). They are read together (the
    # prefetcher reads both for the QP it visits) and written through one port: a reset
    # writes both, a doorbell ``pst``'s lanes, a take's next index ``nxt``'s (_next_index).
    # ``no_rw_check``: a read in IDLE that meets a write of the same row is voided
    # (``hazard``), so its data is never used
    m.submodules.pst = pst = Memory(shape=_PST_LANES * 9, depth=t.num_qp, init=[],
                                    attrs={"no_rw_check": 1})
    rd = pst.read_port()
    pst_wr = pst.write_port(granularity=9)
    pst_rd = types.SimpleNamespace(addr=rd.addr, en=rd.en,
                                   data=post_row(rd.data[:post_row.size]))
    # per-QP: the ring index of the next WQE the QP's messages will take
    nxt_rd = types.SimpleNamespace(data=rd.data[_NXT_LANE * 9:_NXT_LANE * 9 + 16])

    # QPs to examine: after a doorbell, after a message took its WQE
    m.submodules.chk_post = chk_post = Queue(data.StructLayout({"qpn": ab}), 4)
    m.submodules.chk_take = chk_take = Queue(data.StructLayout({"qpn": ab}), 2)
    return types.SimpleNamespace(post_row=post_row, pst_rd=pst_rd, nxt_rd=nxt_rd,
                                 pst_wr=pst_wr, chk_post=chk_post, chk_take=chk_take)


def _next_index(m, t):
    """The writes of the per-QP row (``pst`` and ``nxt``), by priority: ``qp_reset`` (``on`` =
    0, ``nxt`` = 0), a doorbell (``pst``'s lanes; queues the QP on ``chk_post``), the next
    index after a take (``nxt``'s lanes: the planner's next index, loaded into registers from
    the take itself and written when neither of the others competes, which then queues the QP
    on ``chk_take``). Adds the pending write ``nx_pend``, ``nx_q``."""
    take, c, ab, rst, rp, pst_wr = t.take, t.c, t.ab, t.rst, t.rp, t.pst_wr
    chk_post, chk_take = t.chk_post, t.chk_take
    # A take's effects on the slots (those it voids, the claims it holds off) start from
    # ``take_r``, so the take's decision (a planner state, a read response) reaches no
    # slot's tags; c is unchanged in the cycle after a take (the planner is in SUMS). The
    # next index and the visit's void, a few registers, are loaded from the take itself,
    # so the QP's next visit starts a cycle sooner.
    # The planner's next index = taken + 1, written when no qp_reset or doorbell competes.
    nx_pend = Signal()
    nx_q = Signal(ab)
    nx_v = Signal(16)
    with m.If(take):
        m.d.sync += [nx_pend.eq(1), nx_q.eq(c.qpn[:ab]), nx_v.eq(c.rq_index + 1)]
    # The row's fields other than ``on`` are the doorbell's whether or not it is valid: a
    # reset writes ``on`` = 0 alone that matters (the prefetcher reads prod, base and log only
    # for a row with ``on``), so no multiplexer zeroes them
    row = Signal(t.post_row)
    m.d.comb += [row.on.eq(~rst.valid), row.prod.eq(rp.payload.index),
                 row.base.eq(rp.payload.rq_base), row.log.eq(rp.payload.rq_log),
                 pst_wr.data.eq(Cat(row, Const(0, _NXT_LANE * 9 - t.post_row.size),
                                    Mux(rst.valid, 0, nx_v)))]
    lanes_pst = (1 << _NXT_LANE) - 1
    lanes_all = (1 << _PST_LANES) - 1
    with m.If(rst.valid):
        m.d.comb += [pst_wr.addr.eq(t.rst_q), pst_wr.en.eq(lanes_all)]
    with m.Elif(rp.valid):
        m.d.comb += [pst_wr.addr.eq(rp.payload.qpn[:ab]), pst_wr.en.eq(lanes_pst),
                     chk_post.i.valid.eq(1), chk_post.i.payload.qpn.eq(rp.payload.qpn[:ab])]
    with m.Elif(nx_pend):
        m.d.comb += [pst_wr.addr.eq(nx_q), pst_wr.en.eq(lanes_all & ~lanes_pst),
                     chk_take.i.valid.eq(1), chk_take.i.payload.qpn.eq(nx_q)]
        with m.If(~take):
            m.d.sync += nx_pend.eq(0)
    return types.SimpleNamespace(nx_pend=nx_pend, nx_q=nx_q, nx_v=nx_v)


def _pool_slots(m, t):
    """The pool's P slots, their tags {valid, busy (read in flight), ok (data), qpn, index}
    in registers and their rings in a LUT RAM; the registered compare of every slot with c
    (``match_c``); and the responses of the prefetch reads, always taken. Adds the slots'
    tags, the ring RAM's ports, ``match_c``, ``match``, ``claim_d``, ``ring_ok``, ``hit``,
    the response's slot ``rs`` and ``pf_resp``."""
    P, ab, c, fr = t.P, t.ab, t.c, t.fr
    # ---- the pool: P slots {valid, busy (read in flight), ok (data), qpn, index, addr} ----
    valid = Signal(P)
    busy = Signal(P)
    ok = Signal(P)
    sq = [Signal(ab, name=f"pf_qpn{i}") for i in range(P)]
    sidx = [Signal(16, name=f"pf_index{i}") for i in range(P)]
    # the ring each slot's WQE was read from, rq_base bits 63..6 (64-byte aligned) and
    # rq_log, in LUT RAM by slot: only the slot the planner hits is compared with c's ring
    # (``ring_ok``), not every slot every cycle
    m.submodules.pf_ring = pf_ring = Memory(shape=63, depth=max(P, 2), init=[])
    ring_wr = pf_ring.write_port()
    ring_rd = pf_ring.read_port(domain="comb")
    # the slots' WQEs are rows 0..P-1 of the WQE store (:func:`wqe_store`), written by the
    # reads' beats

    match_c = Signal(P)
    match = Signal(P)
    # A slot matches c when it holds c's QP and ring index. The compare is registered:
    # made in the cycle before LOOK uses it (DEC, or LOOK's first cycle when DEC changed
    # c's index to the held WQE's). A slot claimed in that cycle has new tags by then, so
    # it is left out (``claim_d``), as a slot claimed in LOOK's last cycle is by the
    # planner (HIT); none is claimed in HIT (``plan_hit_r``); ``valid`` is used as it
    # stands. The slot hit serves c only if its WQE was read
    # from c's ring (base and size; a ring SET_QP moved is not served from the old
    # one): ``ring_ok``, registered in the hit's cycle from the slot's ring (``hsel``, a
    # register, addresses the ring RAM), is tested by the planner in the state after HIT,
    # which reads the WQE itself on a mismatch.
    tag_eq = Signal(P)
    claim_d = Signal(P)
    for i in range(P):
        m.d.sync += tag_eq[i].eq((sq[i] == c.qpn[:ab]) & (sidx[i] == c.rq_index))
        m.d.comb += match_c[i].eq(valid[i] & tag_eq[i] & ~claim_d[i])
    ring_ok = Signal()
    hit = Signal()

    # responses of prefetch reads (always taken; the WQE is in the store by then)
    rs = fr.payload.tag[:t.sb]
    pf_resp = Signal()
    m.d.comb += pf_resp.eq(fr.valid & ~fr.payload.tag[7])
    with m.If(pf_resp):
        m.d.comb += fr.ready.eq(1)
    return types.SimpleNamespace(
        valid=valid, busy=busy, ok=ok, sq=sq, sidx=sidx, ring_wr=ring_wr, ring_rd=ring_rd,
        match_c=match_c, match=match, claim_d=claim_d, ring_ok=ring_ok, hit=hit, rs=rs,
        pf_resp=pf_resp)


def _visit_registers(m, t):
    """The prefetcher's registers for the QP it visits (``pf_q``): the QP's tables as read,
    its indices idx0..idx2 (``nxt`` and the next two), which of them are posted, fetched
    and held, the claim ALLOC decides; the void of the visit by a reset or a take of the
    QP; the tables' read address (a take's QP first) and the ``hazard`` of that read.
    Adds these."""
    P, sb, ab, c, rst, rst_q, take = t.P, t.sb, t.ab, t.c, t.rst, t.rst_q, t.take
    pst_rd, nxt_rd, chk_post, chk_take = t.pst_rd, t.nxt_rd, t.chk_post, t.chk_take
    # ---- the prefetcher FSM: examine one QP at a time -------------------------------------
    pf_q = Signal(ab)
    pf_void = Signal()          # the QP was reset or took a WQE since its tables were read
    # the tables' row as read (READ): reset-less, loaded in READ only and from the read port
    # alone, so synthesis folds them into the block RAM's output register (read only after
    # READ loaded them)
    row = Signal(t.post_row, reset_less=True)
    pf_idx = Signal(16, reset_less=True)    # idx0 = nxt
    pf_idx1 = Signal(16)        # idx1 = nxt + 1
    pf_idx2 = Signal(16)        # idx2 = nxt + 2
    pf_want = Signal()          # WQE idx0 is posted
    pf_want1 = Signal()         # WQE idx1 is posted
    pf_want2 = Signal()         # WQE idx2 is posted
    pf_try = Signal(3)          # idx0 / idx1 / idx2 already fetched in this visit
    pf_m0 = Signal(P)           # slots tagged {pf_q, idx0}
    pf_m1 = Signal(P)           # slots tagged {pf_q, idx1}
    pf_m2 = Signal(P)           # slots tagged {pf_q, idx2}
    ev = Signal(sb)             # eviction pointer
    alloc = Signal()            # CLAIM claims slot ``a_slot`` now
    a_slot = Signal(sb)         # ALLOC's choice: the slot to claim,
    a_sel1 = Signal()           # for a deeper index (else idx0): idx1, or idx2 with
    a_k2 = Signal()             # this,
    a_ev = Signal()             # by eviction (the pointer moves on at the claim)
    a_oh = Signal(P)            # ``a_slot`` one-hot (the claim's enables start from it,
                                # not from a decode)
    # A take of the visited QP's idx0 leaves idx1 wanted (the take keeps its slot): the visit
    # goes on without idx0; any other take of the QP, or its reset, voids the visit. (Acted
    # on from ``take_r``, c unchanged: ALLOC and CLAIM hold in that cycle, so no claim reads
    # the visit's marks before they are set.)
    take_q = Signal()
    m.d.comb += take_q.eq(t.take_r & (c.qpn[:ab] == pf_q))
    with m.If((rst.valid & (rst_q == pf_q)) | (take_q & (c.rq_index != pf_idx))):
        m.d.sync += pf_void.eq(1)
    with m.Elif(take_q):
        m.d.sync += pf_try[0].eq(1)
    # the QP visited is c's (registered: pf_q is loaded in IDLE, three cycles or more before
    # CLAIM, and compared with the QP c holds in the next cycle, so the compare is exact in
    # every cycle the planner holds c's WQE, DEC included: no planner state decode reaches
    # the claim)
    same_q = Signal()
    m.d.sync += same_q.eq(pf_q == t.c_qpn_n)
    m.d.comb += pst_rd.addr.eq(Mux(chk_take.o.valid, chk_take.o.payload.qpn,
                                   chk_post.o.payload.qpn))
    # the tables read in IDLE may miss a write of this or the previous cycle (read ports
    # not transparent): a take being written to ``nxt`` (nx_pend), a take, a reset or a
    # doorbell (``pst``; the doorbell queues the QP again) now
    hazard = Signal()
    m.d.comb += hazard.eq((rst.valid & (rst_q == pst_rd.addr))
                          | (take & (c.qpn[:ab] == pst_rd.addr))
                          | (t.nx_pend & (t.nx_q == pst_rd.addr))
                          | (t.rp.valid & (t.rp.payload.qpn[:ab] == pst_rd.addr)))
    return types.SimpleNamespace(
        pf_q=pf_q, pf_void=pf_void, row=row, pf_idx=pf_idx, pf_idx1=pf_idx1, pf_idx2=pf_idx2,
        pf_want=pf_want, pf_want1=pf_want1, pf_want2=pf_want2, pf_try=pf_try, pf_m0=pf_m0,
        pf_m1=pf_m1, pf_m2=pf_m2, ev=ev, alloc=alloc, a_slot=a_slot,
        a_oh=a_oh,
        a_sel1=a_sel1, a_k2=a_k2, a_ev=a_ev, same_q=same_q, hazard=hazard)


def _visit_choice(m, t):
    """What ALLOC decides from: the free slots (neither valid, busy nor pinned by the
    planner) and the first of them (``fsel``), whether the slot at the eviction pointer is
    evictable, which of idx0..idx2 the visit still needs (``need0``..``need2``), the bank of
    slot compares that finds them (``pf_cmp`` for ``pf_key``), and the holds on a claim
    (``hold``, ``hit_hold``). Adds these, the ring mask ``lmask`` and the address ``pf_addr``
    of the read CLAIM and ISSUE offer."""
    P, sb, D, valid, busy, ev = t.P, t.sb, t.D, t.valid, t.busy, t.ev
    pf_try, pf_idx, pf_q, sq, sidx = t.pf_try, t.pf_idx, t.pf_q, t.sq, t.sidx
    # the slot the planner works from (``prow`` with ``pin``) is neither free nor evictable:
    # its row must not change until the planner is done with it (``prow_oh``: a register,
    # so the pin's compare does not run into ALLOC's decision)
    pinned = Signal(P)
    m.d.comb += pinned.eq(Mux(t.pin, t.prow_oh, 0))
    free = Signal(P)
    m.d.comb += free.eq(~valid & ~busy & ~pinned)
    evictable = Signal()
    m.d.comb += evictable.eq(valid.bit_select(ev, 1) & ~busy.bit_select(ev, 1)
                             & ~pinned.bit_select(ev, 1))
    fsel = Signal(sb)
    for i in reversed(range(P)):
        with m.If(free[i]):
            m.d.comb += fsel.eq(i)
    # the same two, one-hot
    fsel_oh = Signal(P)
    ev_oh = Signal(P)
    m.d.comb += [fsel_oh[i].eq(free[i] & ~free[:i].any() if i else free[0])
                 for i in range(P)]
    m.d.comb += [ev_oh[i].eq(ev == i) for i in range(P)]
    # the ring mask 2^log − 1, one compare a bit (no carry chain in front of ALLOC's adder)
    lmask = Signal(16)
    m.d.comb += lmask.eq(low_mask(t.row.log))
    # the WQE address (bits 63..6) of the index ALLOC chose: its ring slot (``a_im``, loaded
    # by ALLOC) added to the ring base, both registers, in CLAIM and ISSUE: the fetch
    # registers the request
    a_im = Signal(16)
    pf_addr = Signal(58)
    m.d.comb += pf_addr.eq(t.row.base[6:] + a_im)
    need0 = Signal()            # WQE idx0 posted, not held, not yet fetched in this visit
    need1 = Signal()
    need2 = Signal()
    m.d.comb += [need0.eq(t.pf_want & ~pf_try[0] & ((t.pf_m0 & valid) == 0)),
                 need1.eq(t.pf_want1 & ~pf_try[1] & ((t.pf_m1 & valid) == 0) if D > 1 else 0),
                 need2.eq(t.pf_want2 & ~pf_try[2] & ((t.pf_m2 & valid) == 0) if D > 2 else 0)]
    # the slots tagged {pf_q, pf_key}: idx0 in CALC, idx1 in CALC1, idx2 in CALC2 (one bank
    # of compares; ``pf_key`` is idx0, idx1 or idx2 as ``pf_off``, a register set in the
    # state before, selects, so no state decode selects the compares' operand, and idx0, the
    # block RAM's output register, meets a multiplexer, not a carry chain: idx1 and idx2 are
    # registers CALC loads)
    pf_off = Signal(2)
    pf_key = Signal(16)
    m.d.comb += pf_key.eq(Mux(pf_off[1], t.pf_idx2, Mux(pf_off[0], t.pf_idx1, pf_idx)))
    pf_cmp = Signal(P)
    for i in range(P):
        m.d.comb += pf_cmp[i].eq((sq[i] == pf_q) & (sidx[i] == pf_key))

    hold = Signal()             # no claim now (see ALLOC)
    m.d.comb += hold.eq(t.take_r | t.rst.valid)
    # While the planner is in HIT (``plan_hit_r``: it may hit a slot, and it may wait there
    # for a matched slot's data) a visit claims only a free slot outside the planner's
    # match: it decides no eviction (HIT may pin the slot), and a slot of ``match`` freed
    # since LOOK is not re-tagged under it (HIT would take the new tags for c's).
    # (``a_m``: the slot ALLOC chose is in ``match``, registered by ALLOC; ``m_new``: the
    # planner loaded ``match`` in the cycle before, so ``a_m`` may be stale: held as well)
    a_m = Signal()
    m_new = Signal()
    m.d.sync += m_new.eq(0)
    hit_hold = Signal()
    m.d.comb += hit_hold.eq(t.plan_hit_r & (t.a_ev | a_m | m_new))
    return types.SimpleNamespace(
        pinned=pinned, free=free, evictable=evictable, fsel=fsel, fsel_oh=fsel_oh, ev_oh=ev_oh,
        lmask=lmask, pf_addr=pf_addr, need0=need0,
        need1=need1, need2=need2, pf_key=pf_key, pf_off=pf_off, pf_cmp=pf_cmp, hold=hold,
        hit_hold=hit_hold,
        a_im=a_im, a_m=a_m, m_new=m_new)


def _prefetcher_fsm(m, t):
    """The prefetcher FSM ``prefetch``, which examines one QP at a time: its visit reads the
    QP's tables and compares the slots (:func:`_visit_read_states`), then claims a slot and
    issues the read of each WQE it needs (:func:`_visit_claim_states`)."""
    # the request's payload is the prefetcher's whenever the planner's own read is not
    # offered (its select one register, the planner's FETCH state): ``valid`` alone waits
    # for CLAIM's decision
    with m.If(~t.plan_fetch):
        m.d.comb += [t.fetch.req.payload.addr.eq(Cat(Const(0, 6), t.pf_addr)),
                     t.fetch.req.payload.tag.eq(t.a_slot)]
    with m.FSM(name="prefetch") as fsm:
        _visit_read_states(m, t)
        _visit_claim_states(m, t)
    one_hot(fsm)


def _visit_read_states(m, t):
    """IDLE, READ, CALC and (with a deeper prefetch) CALC1, CALC2 (inside the prefetcher FSM):
    take a QP to examine, register its tables' read data, find which of idx0..idx2 are posted
    and which slots hold each, one bank of compares a cycle."""
    D, row, pf_idx, pf_cmp = t.D, t.row, t.pf_idx, t.pf_cmp
    pst_rd, nxt_rd, chk_post, chk_take = t.pst_rd, t.nxt_rd, t.chk_post, t.chk_take
    with m.State("IDLE"):
        with m.If(chk_take.o.valid | chk_post.o.valid):
            m.d.comb += [pst_rd.en.eq(1),
                         chk_take.o.ready.eq(1),
                         chk_post.o.ready.eq(~chk_take.o.valid)]
            m.d.sync += [t.pf_q.eq(pst_rd.addr), t.pf_void.eq(t.hazard), t.pf_try.eq(0)]
            m.next = "READ"
    with m.State("READ"):
        # the tables' read data registered as is, into registers loaded in this state only:
        # the block RAM's output register
        m.d.sync += [row.eq(pst_rd.data), pf_idx.eq(nxt_rd.data), t.pf_off.eq(0)]
        m.next = "CALC"
    def wants(ahead):
        # the WQEs posted of idx0..idx2, from the producer index's lead over idx0 (a lead of
        # 2^15 or more left out: conservative)
        return [t.pf_want.eq(row.on & (ahead != 0) & ~ahead[15]),
                t.pf_want1.eq(row.on & (ahead != 0) & (ahead != 1) & ~ahead[15]),
                t.pf_want2.eq(row.on & (ahead != 0) & (ahead != 1) & (ahead != 2) & ~ahead[15])]
    # (with a deeper prefetch the lead is registered in CALC and the wants made in CALC1,
    # before ALLOC reads them: the block RAM's output register meets one carry chain)
    ahead_r = Signal(16)
    with m.State("CALC"):
        ahead = Signal(16)
        m.d.comb += ahead.eq(row.prod - pf_idx)
        m.d.sync += ahead_r.eq(ahead) if D > 1 else wants(ahead)
        m.d.sync += [t.pf_idx1.eq(pf_idx + 1), t.pf_idx2.eq(pf_idx + 2)]
        m.d.sync += [t.pf_m0.eq(pf_cmp), t.pf_off.eq(1)]
        m.next = "CALC1" if D > 1 else "ALLOC"
    if D > 1:
        with m.State("CALC1"):
            m.d.sync += wants(ahead_r)
            m.d.sync += [t.pf_m1.eq(pf_cmp), t.pf_off.eq(2)]
            m.next = "CALC2" if D > 2 else "ALLOC"
    if D > 2:
        with m.State("CALC2"):
            m.d.sync += t.pf_m2.eq(pf_cmp)
            m.next = "ALLOC"


def _visit_claim_states(m, t):
    """ALLOC, CLAIM and ISSUE (inside the prefetcher FSM): decide the slot the visit claims
    (a free one, else for idx0 the evictable one at the pointer), claim it, and issue its
    read (:func:`_issue`); back to ALLOC for a deeper index, to IDLE when nothing is left."""
    P, ev, a_slot, a_sel1, a_k2, a_ev = t.P, t.ev, t.a_slot, t.a_sel1, t.a_k2, t.a_ev
    need0, need1, need2, free, fsel, hold = t.need0, t.need1, t.need2, t.free, t.fsel, t.hold
    pf_void, plan_hit_r, c = t.pf_void, t.plan_hit_r, t.c
    # ALLOC decides which slot the visit claims (registered: ``a_slot``, ``a_sel1``,
    # ``a_ev``) and CLAIM claims it, so the slot tags' enables start from registers. The
    # choice stays good for CLAIM: only the prefetcher claims slots and only HIT pins
    # one (no decision is made in HIT); responses, takes, resets and releases only make
    # slots free. CLAIM goes back to ALLOC when a claim is held off there.
    with m.State("ALLOC"):
        # no claim in a cycle with a take (take_r) or a qp_reset (they void by the
        # slots' tags), nor an eviction while the planner is in HIT; in CLAIM,
        # no claim of the visited QP's next WQE (idx0) while the planner holds that
        # WQE (``plan_tk``: from DEC to the take; after the take idx0 is stale, and
        # the take voids the visit a cycle later). The choice's registers are loaded in
        # every ALLOC cycle (CLAIM and ISSUE read them, entered from here only), so only
        # the state and the pointer wait for the decision: idx0 if needed (a free slot,
        # else the one at the pointer), else idx1 if needed, else idx2 (free slots);
        # ``a_im`` the chosen index's ring slot
        by_ev = Signal()
        m.d.comb += by_ev.eq(need0 & (free == 0))
        m.d.sync += [a_slot.eq(Mux(by_ev, ev, fsel)), t.a_oh.eq(Mux(by_ev, t.ev_oh, t.fsel_oh)),
                     a_sel1.eq(~need0), a_k2.eq(~need1), a_ev.eq(by_ev),
                     t.a_im.eq(Mux(need0, t.pf_idx, Mux(need1, t.pf_idx1, t.pf_idx2)) & t.lmask),
                     t.a_m.eq((t.match & t.fsel_oh).any())]
        with m.If(hold):
            pass
        with m.Elif(pf_void | ~(need0 | need1 | need2)):
            m.next = "IDLE"
        with m.Elif(need0):
            # WQE nxt: a free slot, else eviction -- but not while the planner's slot is
            # about to be freed (its command completes the slot's WQE): wait for it
            # rather than evict another QP's next WQE
            with m.If((free == 0) & t.pin & c.comp):
                pass
            with m.Elif(free != 0):
                m.next = "CLAIM"
            with m.Elif(plan_hit_r):
                pass
            with m.Elif(t.evictable):
                m.next = "CLAIM"
            with m.Else():
                m.d.sync += ev.eq(Mux(ev == P - 1, 0, ev + 1))
                m.next = "IDLE"
        with m.Else():
            # WQE nxt + 1 (or + 2): only into a free slot (a deeper prefetch never
            # evicts)
            with m.If(free != 0):
                m.next = "CLAIM"
            with m.Else():
                m.next = "IDLE"
    with m.State("CLAIM"):
        # the slot is claimed and its read issued in the same cycle when the read port
        # is free (else ISSUE waits for it)
        with m.If(hold | t.hit_hold | (t.plan_tk & t.same_q & ~a_sel1)):
            m.next = "ALLOC"
        with m.Elif(pf_void):
            m.next = "IDLE"
        with m.Else():
            m.d.comb += t.alloc.eq(1)
            m.d.sync += t.pf_try.bit_select(Mux(a_sel1, Mux(a_k2, 2, 1), 0), 1).eq(1)
            with m.If(a_ev):
                m.d.sync += ev.eq(Mux(ev == P - 1, 0, ev + 1))
            m.next = "ISSUE"
            _issue(m, t)
    with m.State("ISSUE"):
        _issue(m, t)


def _issue(m, t):
    """The read of the slot claimed (inside CLAIM or ISSUE): a prefetch read of WQE address
    ``pf_addr`` tagged with the slot, unless the planner's own read has the port (it has
    priority); once taken, back to ALLOC (the other index may be fetched in the same visit)
    or, with a prefetch depth of 1, to IDLE."""
    fetch = t.fetch
    with m.If(~t.plan_fetch):
        m.d.comb += fetch.req.valid.eq(1)
        with m.If(fetch.req.ready):
            # back to ALLOC: the other index may be fetched in the same visit
            m.next = "ALLOC" if t.D > 1 else "IDLE"


def _hit_select(m, t):
    """The hit select (registered): ``hsel``, the first slot of the planner's match with data,
    read on a hit, which also addresses the ring RAM for ``ring_ok``; and c's next two
    indices, registered, for the slots a take keeps. Adds ``hsel``, ``c_nxt``, ``c_nxt2``."""
    P, sb, c, fr, rs = t.P, t.sb, t.c, t.fr, t.rs
    # ---- the hit select (registered): the first slot of match & valid & ok, read on a hit --
    # In LOOK it is the first of match_c with data next cycle (a response now sets ok;
    # a reset of c's QP voids every match; a slot claimed now sends the planner to FETCH
    # in HIT, so the select never reads it). In
    # HIT, while no matched slot has data, the only way one gets it is a response: the
    # next cycle's select is its slot (a don't-care when no hit follows).
    # (the first matched slot with data from registers alone, ``f_ok``; a response's slot
    # ``rs`` wins when it is matched and before ``f_ok`` or no slot has data: the response's
    # ``valid`` meets only the last select, not the priority encoder)
    m_ok = Signal(P)
    m.d.comb += m_ok.eq(t.match_c & t.ok)
    f_ok = Signal(sb)
    for i in reversed(range(P)):
        with m.If(m_ok[i]):
            m.d.comb += f_ok.eq(i)
    rs_first = Signal()
    m.d.comb += rs_first.eq(t.match_c.bit_select(rs, 1) & ~fr.payload.err
                            & ((m_ok == 0) | (rs < f_ok)))
    hsel = Signal(sb)
    m.d.sync += hsel.eq(Mux(t.plan_look | (t.pf_resp & rs_first), rs, f_ok))
    m.d.comb += t.ring_rd.addr.eq(hsel)
    # (two halves of the 63-bit compare registered, ANDed where ``ring_ok`` is tested: the
    # LUT-RAM read and a 32-bit compare fit the cycle, the whole compare's last level did not)
    c_ring = Cat(c.rq_base[6:], c.rq_log)
    m.d.comb += t.ring_ok.eq(split_eq(m, t.ring_rd.data, c_ring, "ring_eq"))
    # the slot hit is read (store row ``hsel``, asynchronously) in the hit's cycle: a slot
    # with its data gets no beat (no read out) and no claim in a HIT cycle

    # a take of WQE i keeps the QP's slots of indices i .. i+D-1; the
    # planner's c.rq_index is stable for cycles before a take, so its successors registered
    c_nxt = Signal(16)
    c_nxt2 = Signal(16)
    m.d.sync += [c_nxt.eq(c.rq_index + 1), c_nxt2.eq(c.rq_index + 2)]
    return types.SimpleNamespace(hsel=hsel, c_nxt=c_nxt, c_nxt2=c_nxt2)


def _slot_updates(m, t):
    """The slots' tag updates, later ones winning: a prefetch response (data present, or
    the slot freed on an error), a claim (new tags, a read in flight), and the voids (a
    take of another WQE of the QP, except the ones it keeps; ``qp_reset``; the planner's
    release); and the claimed slot's ring, written into the ring RAM."""
    P, D, ab, c, fr, rs, rst = t.P, t.D, t.ab, t.c, t.fr, t.rs, t.rst
    valid, busy, ok, sq, sidx = t.valid, t.busy, t.ok, t.sq, t.sidx
    alloc, a_slot, a_sel1, a_k2, row = t.alloc, t.a_slot, t.a_sel1, t.a_k2, t.row
    # ---- slot state updates (later ones win) -----------------------------------------------
    claim = Signal(P)           # the slot claimed this cycle (one-hot)
    m.d.sync += t.claim_d.eq(claim)

    def keep(idx):
        # a take of WQE i keeps the QP's slots of index i (the slot hit: its WQE serves the
        # message's later packets) and i + 1 .. i + D − 1; the others are behind or stale
        # (c's index and its successors are registers here: c is unchanged from the cycle
        # before a take to the cycle after it)
        return ((idx == c.rq_index) | ((idx == t.c_nxt) if D > 1 else Const(0, 1))
                | ((idx == t.c_nxt2) if D > 2 else Const(0, 1)))
    # The slots a take voids, decided a cycle ahead (registered in every cycle, so in the
    # take's cycle, from c and the slots' tags of that cycle) and applied from ``take_r``:
    # ``void_r`` for every slot as its tags stand, ``void_cl`` for the tags a claim writes
    # now (the slot claimed in the take's cycle, ``claim_d`` in the next, has them)
    void_r = Signal(P)
    void_cl = Signal()
    cl_idx = Signal(16)
    m.d.comb += cl_idx.eq(Mux(a_sel1, Mux(a_k2, t.pf_idx2, t.pf_idx1), t.pf_idx))
    m.d.sync += void_cl.eq((t.pf_q == c.qpn[:ab]) & ~keep(cl_idx))
    for i in range(P):
        m.d.sync += void_r[i].eq((sq[i] == c.qpn[:ab]) & ~keep(sidx[i]))
    for i in range(P):
        with m.If(t.pf_resp & (rs == i)):
            m.d.sync += [busy[i].eq(0), ok[i].eq(~fr.payload.err)]
            with m.If(fr.payload.err):
                m.d.sync += valid[i].eq(0)
        m.d.comb += claim[i].eq(alloc & t.a_oh[i])
        with m.If(claim[i]):
            m.d.sync += [valid[i].eq(1), busy[i].eq(1), ok[i].eq(0), sq[i].eq(t.pf_q),
                         sidx[i].eq(cl_idx),
                         t.pf_m0[i].eq(~a_sel1 if D > 1 else 1),
                         t.pf_m1[i].eq(a_sel1 & ~a_k2), t.pf_m2[i].eq(a_sel1 & a_k2)]
        with m.If((t.take_r & Mux(t.claim_d[i], void_cl, void_r[i]))
                  | (rst.valid & (sq[i] == t.rst_q))
                  | (t.release & t.prow_oh[i])):
            m.d.sync += valid[i].eq(0)
    m.d.comb += [t.ring_wr.addr.eq(a_slot), t.ring_wr.data.eq(Cat(row.base[6:], row.log)),
                 t.ring_wr.en.eq(alloc)]
