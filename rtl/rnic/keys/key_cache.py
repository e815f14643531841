"""Key Cache: the key-table CAM, memory registration, lookup checks and the invalidate unit.

The key table holds ``key_entries`` (K) slots.

* **CAM.** A transposed CAM in LUT RAM: the 32-bit key is 8 nibbles, and plane ``p`` is a
  16-entry table of K-bit vectors where bit ``j`` of entry ``v`` is 1 when slot ``j``'s key has
  nibble ``v`` at position ``p``. A lookup reads the 8 planes at the 8 nibbles of its key and ANDs
  the 8 vectors with the slot valid bits (registers, cleared by reset): the match vector.
* **Table.** Everything else about a slot is in one block-RAM ``Memory`` of 2K rows of 216 bits
  (six 36-bit lanes): row ``j`` is the *lookup row* (PD, access, iova, iova + length, the
  translation ``bus − iova``, type), row ``K + j`` the *command row* (key, length, bus, PD,
  access, type, the MR of a window, the MR's bound-window count). A lookup reads one row.
* **Lookup pipeline.** One lookup is accepted per cycle from ``num_ports`` requesters, served
  round-robin; it flows through 6 stages without stalls (each port's responses queue in a FIFO
  whose space is reserved when the request is accepted, so the FIFO never checks its room; into
  an empty FIFO the response is offered in the cycle it is written, from s6's registers).
  Only the 32-bit key travels from stage to stage in registers; the rest of the request is
  registered once as it is accepted and waits in a 16-entry LUT-RAM delay line that later
  stages read at a fixed offset.

Commands (SET_KEY, QUERY_KEY, INVALIDATE) and remote invalidations are executed by one control
FSM over a 36-bit datapath: it reads the ARGs one word a cycle, writes the table one lane a cycle
and rewrites a slot's CAM column in 16 cycles (one plane entry per cycle, all planes at once). The
planes are written without being read: a write covers the 4-bit lane of four slots, and the FSM
forms it from the new key and the keys of the three other slots, read from their command rows.
While it works, the arbiter accepts no lookup and the FSM first lets the pipeline drain, so
every table change happens with no lookup in flight: a lookup accepted before the change sees the
old table, one accepted after sees the new one, never a mix. See ``docs/key_cache.md``.

The invalidate unit (INVALIDATE and remote invalidation) is the FSM's INV_* states, in
:mod:`rnic.keys.invalidate` (``invalidate.py``), whose docstring tells which of the states here
it goes through.
"""

import types

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..ifaces import CmdOp, CommandSignature, Result
from ..parts import add as _add
from ..stream import Queue
from .invalidate import invalidate_states

__all__ = [
    "KeyType", "Access", "lookup_req_layout", "lookup_resp_layout", "inval_req_layout",
    "inval_resp_layout", "LookupSignature", "InvalSignature", "KeyCache", "LOOKUP_LATENCY",
    "lookup_row_layout", "command_row_layout",
]


class KeyType(enum.IntEnum, shape=2):
    """Slot type, ARG7 [25:24] of SET_KEY."""
    MR = 0
    FAST_REG_MR = 1
    MW_TYPE1 = 2
    MW_TYPE2 = 3


class Access(enum.IntFlag, shape=5):
    """Access flags, IB numbering (interface.md §4.2)."""
    LOCAL_WRITE = 0x01
    REMOTE_WRITE = 0x02
    REMOTE_READ = 0x04
    REMOTE_ATOMIC = 0x08
    MW_BIND = 0x10


#: One lookup: the key, the QP's PD, the access flags required (LOCAL_WRITE for a receive SGE,
#: REMOTE_WRITE for an RDMA WRITE rkey, 0 for a gather lkey), the range ``[va, va + len)`` and a
#: tag returned with the response.
lookup_req_layout = data.StructLayout({
    "key": 32,
    "pd": 16,
    "access": 5,
    "va": 64,
    "len": 32,
    "tag": 8,
})

#: The checked result. ``ok`` = hit & PD & access & range. ``miss``: no valid slot holds the key
#: (the other error bits are then 0). ``bad_pd``/``bad_access``/``bad_range`` tell a hit's failed
#: checks. ``bus_addr`` = bus address of ``va`` (meaningful when ``ok``).
lookup_resp_layout = data.StructLayout({
    "ok": 1,
    "miss": 1,
    "bad_pd": 1,
    "bad_access": 1,
    "bad_range": 1,
    "tag": 8,
    "bus_addr": 64,
})

inval_req_layout = data.StructLayout({"key": 32, "tag": 8})
inval_resp_layout = data.StructLayout({"ok": 1, "tag": 8})

#: Cycles from a lookup request's acceptance to its response's ``valid`` (with an empty FIFO).
LOOKUP_LATENCY = 6

#: Width of a table lane: one DP16KD in its 512 × 36 mode. A row is six lanes.
LANE = 36
LANES = 6

#: Table row ``j``: what a lookup of slot ``j`` checks. Each lane is a 32-bit word (as the ARG
#: words it comes from) plus 4 bits, so the FSM writes it from one ARG word per cycle.
lookup_row_layout = data.StructLayout({
    "iova_lo": 32, "pd0": 4,
    "iova_hi": 32, "pd1": 4,
    "end_lo": 32, "pd2": 4,                  # end = iova + length, 65 bits
    "end_hi": 32, "pd3": 4,
    "delta_lo": 32, "end_top": 1, "acc_lo": 3,   # delta = bus − iova of the translating MR
    "delta_hi": 32, "acc_hi": 2, "type": 2,
})

#: Table row ``K + j``: what the commands need of slot ``j`` (QUERY_KEY's words, the window
#: bookkeeping).
command_row_layout = data.StructLayout({
    "key": 32, "pd0": 4,
    "len_lo": 32, "pd1": 4,
    "len_hi": 32, "pd2": 4,
    "bus_lo": 32, "pd3": 4,
    "bus_hi": 32, "acc_lo": 4,
    "mr": 10, "nwin": 11, "acc_hi": 4, "type": 2, "pad": 9,   # ARG8; windows bound to an MR
})


def LookupSignature():
    """A lookup port as seen by the Key Cache: ``req`` in, ``resp`` out (in request order)."""
    return wiring.Signature({
        "req": In(stream.Signature(lookup_req_layout)),
        "resp": Out(stream.Signature(lookup_resp_layout)),
    })


def InvalSignature():
    """The remote-invalidate port as seen by the Key Cache."""
    return wiring.Signature({
        "req": In(stream.Signature(inval_req_layout)),
        "resp": Out(stream.Signature(inval_resp_layout)),
    })


def _bits_for(n):
    """Bits needed to hold 0 .. n - 1 (at least 1)."""
    return max(1, (n - 1).bit_length())


class KeyCache(wiring.Component):
    """The key table (CAM), SET_KEY/QUERY_KEY/INVALIDATE and the remote-invalidate unit.

    Parameters
    ----------
    key_entries : int
        Number of key slots, a power of two, 4 ≤ key_entries ≤ 1024.
    num_ports : int
        Number of lookup ports, 1 ≤ num_ports ≤ 8.
    fifo_depth : int
        Response FIFO entries per lookup port (≥ 2); 16 sustains one lookup per cycle.

    Attributes
    ----------
    cmd : Out(CommandSignature())
        Mailbox command port: ``cmd.cmd`` in (SET_KEY 0x04 with index = slot, QUERY_KEY 0x05,
        INVALIDATE 0x06 with ARG0 = key), ``cmd.resp`` out (result 0 ok / 3 refused; QUERY_KEY
        writes the entry to ARG0..ARG8 in the SET_KEY layout before its response).
    lookup0 .. lookup{num_ports-1} : Out(LookupSignature())
        Lookup ports: ``req`` stream in (:data:`lookup_req_layout`), ``resp`` stream out
        (:data:`lookup_resp_layout`), responses in request order per port. Port 0 has no
        priority over the others: grants rotate.
    inval : Out(InvalSignature())
        Remote invalidate (IETH): ``req`` {key, tag} in, ``resp`` {ok, tag} out. A lookup
        accepted in the same cycle as an invalidate request or later sees its effect.
    sweeping : Out(1)
        Always 0: the table needs no clearing sweep (valid bits are registers cleared by reset,
        and no stale RAM content is ever used without a valid bit).
    """

    def __init__(self, key_entries=64, num_ports=3, *, fifo_depth=16):
        self._MustUse__silence = True   # a refused configuration is not an unused elaboratable
        if (not isinstance(key_entries, int) or key_entries < 4 or key_entries > 1024
                or key_entries & (key_entries - 1)):
            raise ValueError(f"key_entries must be a power of two in 4..1024, not {key_entries!r}")
        if not isinstance(num_ports, int) or not 1 <= num_ports <= 8:
            raise ValueError(f"num_ports must be in 1..8, not {num_ports!r}")
        if not isinstance(fifo_depth, int) or fifo_depth < 2:
            raise ValueError(f"fifo_depth must be an integer ≥ 2, not {fifo_depth!r}")
        self._MustUse__silence = False
        self.key_entries = key_entries
        self.num_ports = num_ports
        self.fifo_depth = fifo_depth
        members = {
            "cmd": Out(CommandSignature()),
            "inval": Out(InvalSignature()),
            "sweeping": Out(1),
        }
        for p in range(num_ports):
            members[f"lookup{p}"] = Out(LookupSignature())
        super().__init__(members)

    @property
    def lookups(self):
        return [getattr(self, f"lookup{p}") for p in range(self.num_ports)]

    def elaborate(self, platform):
        m = Module()
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace(K=self.key_entries, P=self.num_ports,
                                  ib=_bits_for(self.key_entries), pbits=_bits_for(self.num_ports))
        _add(t, self._cam(m, t))
        _add(t, self._table(m, t))
        _add(t, self._request_select(m, t))
        _add(t, self._search_stages(m, t))
        _add(t, self._check_stages(m, t))
        _add(t, self._command_registers(m, t))
        _add(t, self._valid_writes(m, t))
        _add(t, self._cam_sweep(m, t))
        self._lookup_lock(m, t)
        _add(t, self._lane_word(m, t))
        self._control_fsm(m, t)
        return m

    def _cam(self, m, t):
        """The CAM: the 8 nibble planes in LUT RAM (read at the nibbles of ``s1_key``, the key
        searched this cycle) and the slots' valid bits in registers; ``vec``, their AND, is the
        match vector of ``s1_key``. Adds ``valid``, ``s1_key``, ``planes`` (read and write port
        of each) and ``vec``."""
        K = t.K
        valid = Signal(K)
        s1_key = Signal(32)         # the key searched in this cycle (a lookup's or the FSM's)
        planes = []
        for p in range(8):
            plane = Memory(shape=K, depth=16, init=[])
            m.submodules[f"plane{p}"] = plane
            planes.append((plane.read_port(domain="comb"), plane.write_port(granularity=4)))
            m.d.comb += planes[p][0].addr.eq(s1_key[4 * p:4 * p + 4])
        vec = valid
        for rp, _ in planes:
            vec = vec & rp.data
        return types.SimpleNamespace(valid=valid, s1_key=s1_key, planes=planes, vec=vec)

    def _table(self, m, t):
        """The table (lookup rows 0..K-1, command rows K..2K-1) in one block RAM, its read port,
        the row read two cycles ago (``e``, seen as ``he`` and ``ce``) and the FSM's write path:
        one 36-bit lane register replicated to the six lanes, the lane's enable selecting.
        Adds ``rd``, ``e``, ``he``, ``ce`` and the write orders ``w_en``, ``w_addr``,
        ``w_lane``, ``w_data``."""
        K, ib = t.K, t.ib
        # `no_rw_check`: no read-during-write bypass. A lookup never meets a write (the lock),
        # and the FSM uses a row it read only after a fresh read issued after its last write.
        m.submodules.table = table = Memory(shape=LANE * LANES, depth=2 * K, init=[],
                                            attrs={"no_rw_check": 1})
        rd = table.read_port()
        wr = table.write_port(granularity=LANE)
        # the row read two cycles ago; reset-less (used only by a stage whose valid bit is
        # reset), so it can be the block RAM's output register
        e = Signal(LANE * LANES, reset_less=True)
        m.d.sync += e.eq(rd.data)
        he = lookup_row_layout(e)
        ce = command_row_layout(e)
        # The FSM's writes go through one 36-bit lane register (replicated to the six lanes,
        # the lane's enable selecting): a lane lands one cycle after the FSM orders it.
        w_en = Signal()
        w_addr = Signal(ib + 1)
        w_lane = Signal(range(LANES))
        w_data = Signal(LANE)
        wd = Signal(LANE)
        m.d.sync += [wr.addr.eq(w_addr), wd.eq(w_data),
                     wr.en.eq(Mux(w_en, Const(1, 1) << w_lane, 0))]
        m.d.comb += wr.data.eq(wd.replicate(LANES))
        return types.SimpleNamespace(rd=rd, e=e, he=he, ce=ce, w_en=w_en, w_addr=w_addr,
                                     w_lane=w_lane, w_data=w_data)

    def _request_select(self, m, t):
        """The lookup pipeline's entry: the ports (:meth:`_ports`), the picked request's AND-OR
        multiplexer (its key for s1) and the delay line that holds the rest of the request for
        s4 and s5 (written from a register one cycle after the acceptance), so only the key
        travels from stage to stage. Also makes the lock, busy and CAM
        sweep signals the later parts drive. Adds ``lock``, ``busy``, ``sweep_on``,
        ``sweep_v``, ``fifos``, ``fifo_layout``, ``accept``, ``pick``, ``key_or`` and the
        delay line's read ports ``dl_a_r``, ``dl_b_r``."""
        pbits = t.pbits
        lock = Signal()         # no lookup accepted this cycle
        busy = Signal()         # the FSM: from a command's acceptance to its response
        sweep_on = Signal()     # the CAM sweep is stepping through the plane entries
        sweep_v = Signal(4)

        # the ports: response FIFOs, credits and the round-robin grant (``pick``, and
        # ``accept`` = pick unless locked)
        fifos, fifo_layout, accept, pick = self._ports(m, lock)

        # The picked request: an AND-OR multiplexer on the one-hot pick. Its key goes to s1;
        # everything else to the register `s1_rest` and from it into the delay line, written
        # every cycle at `wptr`, so a stage n cycles after the acceptance finds its request at
        # `wptr - (n - 1)` (s4 and s5 read it). The register keeps the LUT RAM's write data
        # (127 bits of it, each from the pick) off the path from a requester's valid, which
        # comes from another block.
        rest_layout = data.StructLayout({
            "port": pbits, "pd": 16, "access": 5, "va": 64, "len": 32, "tag": 8})
        key_or, rest_or = Const(0, 32), Const(0, rest_layout.size)
        for p, port in enumerate(self.lookups):
            rest = Signal(rest_layout, name=f"rest{p}")
            m.d.comb += [
                rest.port.eq(p), rest.pd.eq(port.req.payload.pd),
                rest.access.eq(port.req.payload.access), rest.va.eq(port.req.payload.va),
                rest.len.eq(port.req.payload.len), rest.tag.eq(port.req.payload.tag),
            ]
            key_or = key_or | (port.req.payload.key & pick[p].replicate(32))
            rest_or = rest_or | (rest.as_value() & pick[p].replicate(rest_layout.size))
        s1_rest = Signal(rest_layout)
        m.d.sync += s1_rest.eq(rest_or)
        # write and read pointers, each its own counter (no subtractor before a read address)
        wptr = Signal(4)
        rptr_a = Signal(4, init=(-3) % 16)
        rptr_b = Signal(4, init=(-4) % 16)
        m.d.sync += [wptr.eq(wptr + 1), rptr_a.eq(rptr_a + 1), rptr_b.eq(rptr_b + 1)]
        # two copies, one per reading stage (s4 and s5), each a LUT RAM with one read port
        dl_a = Memory(shape=data.StructLayout({"va": 64, "len": 32}), depth=16, init=[])
        dl_b = Memory(shape=data.StructLayout({"va": 64, "pd": 16, "access": 5, "tag": 8,
                                               "port": pbits}), depth=16, init=[])
        m.submodules.delay_a, m.submodules.delay_b = dl_a, dl_b
        dl_a_w, dl_b_w = dl_a.write_port(), dl_b.write_port()
        dl_a_r, dl_b_r = dl_a.read_port(domain="comb"), dl_b.read_port(domain="comb")
        sel = s1_rest
        m.d.comb += [
            dl_a_w.addr.eq(wptr), dl_a_w.en.eq(1),
            dl_a_w.data.va.eq(sel.va), dl_a_w.data.len.eq(sel.len),
            dl_b_w.addr.eq(wptr), dl_b_w.en.eq(1),
            dl_b_w.data.va.eq(sel.va), dl_b_w.data.pd.eq(sel.pd),
            dl_b_w.data.access.eq(sel.access), dl_b_w.data.tag.eq(sel.tag),
            dl_b_w.data.port.eq(sel.port),
            dl_a_r.addr.eq(rptr_a),
            dl_b_r.addr.eq(rptr_b),
        ]
        return types.SimpleNamespace(
            lock=lock, busy=busy, sweep_on=sweep_on, sweep_v=sweep_v, fifos=fifos,
            fifo_layout=fifo_layout, accept=accept, pick=pick, key_or=key_or, dl_a_r=dl_a_r,
            dl_b_r=dl_b_r)

    def _search_stages(self, m, t):
        """Stages s1 to s3, the CAM search: s1 registers the key (a lookup's, or the FSM's
        ``key_r`` while it is busy), s2 the match vector, s3 the hit and the slot number, which
        addresses the lookup row unless the table's read port is the FSM's (``fsm_rd``). Adds
        ``key_r``, the stages' valids and results, ``fsm_rd`` and ``fsm_raddr``."""
        K, ib, rd = t.K, t.ib, t.rd
        # s1: the key: a lookup's, or while the FSM is busy (no lookup is accepted then) its
        # key (a register: no FSM decode on this path).
        key_r = Signal(32)      # the FSM's key: SET_KEY's ARG0, INVALIDATE's, IETH's
        s1_v = Signal()
        m.d.sync += [
            s1_v.eq(t.accept.any()),
            t.s1_key.eq(Mux(t.busy, key_r, t.key_or)),
        ]

        # s2: the match vector (keys are unique among valid slots: at most one bit set).
        s2_v = Signal()
        match = Signal(K)
        m.d.sync += [s2_v.eq(s1_v), match.eq(t.vec)]

        # s3: hit and slot number, registered; the lookup row's read address (or the FSM's).
        s3_v = Signal()
        s3_hit = Signal()
        s3_idx = Signal(ib)
        enc = Cat(*[Cat(*[match[i] for i in range(K) if (i >> b) & 1]).any()
                    for b in range(ib)])
        fsm_rd = Signal()       # registered: the table's read port is the FSM's
        fsm_raddr = Signal(ib + 1)
        m.d.comb += rd.addr.eq(Mux(fsm_rd, fsm_raddr, s3_idx))
        m.d.sync += [s3_v.eq(s2_v), s3_hit.eq(match.any()), s3_idx.eq(enc)]
        return types.SimpleNamespace(
            key_r=key_r, s1_v=s1_v, s2_v=s2_v, match=match, s3_v=s3_v, s3_hit=s3_hit,
            s3_idx=s3_idx, fsm_rd=fsm_rd, fsm_raddr=fsm_raddr)

    def _check_stages(self, m, t):
        """Stages s4 to s6, the checks: s4 waits for the row (in ``e``) and adds the request's
        end, s5 compares PD, access and bounds and adds the translation, each registered as it
        comes out of its comparator or adder, and s6 forms the response bits on the way into
        the port's FIFO. Adds ``pipe_empty``, the registered "s2..s5 are empty" of the FSM's
        DRAIN."""
        he, fifo_layout, dl_a_r = t.he, t.fifo_layout, t.dl_a_r
        s1_v, s2_v, s3_v, s3_hit = t.s1_v, t.s2_v, t.s3_v, t.s3_hit
        # s4: the row comes out of the block RAM (and is registered into `e`, see _table);
        # the request's end `va + len` (65 bits) from the delay line.
        s4_v = Signal()
        s4_hit = Signal()
        m.d.sync += [s4_v.eq(s3_v), s4_hit.eq(s3_hit)]
        s5_v = Signal()
        s5_hit = Signal()
        s5_vend = Signal(65)
        m.d.sync += [s5_v.eq(s4_v), s5_hit.eq(s4_hit),
                     s5_vend.eq(dl_a_r.data.va + dl_a_r.data.len)]

        # s5: PD, access, bounds and translation against the row in `e`, registered as they
        # come out of their comparators and adders; s6: the response bits are formed on the
        # way into the port's FIFO (no logic after a carry chain in the same cycle).
        s6_v = Signal()
        s6_port = Signal(t.pbits)
        s6_hit = Signal()
        s6_pd_ok = Signal()
        s6_acc_ok = Signal()
        s6_lo_ok = Signal()
        s6_hi_ok = Signal()
        s6_tag = Signal(8)
        s6_bus = Signal(64)
        req = t.dl_b_r.data
        row_pd = Cat(he.pd0, he.pd1, he.pd2, he.pd3)
        row_acc = Cat(he.acc_lo, he.acc_hi)
        m.d.sync += [
            s6_v.eq(s5_v), s6_port.eq(req.port), s6_hit.eq(s5_hit),
            s6_pd_ok.eq(row_pd == req.pd),
            s6_acc_ok.eq((req.access & ~row_acc) == 0),
            s6_lo_ok.eq(req.va >= Cat(he.iova_lo, he.iova_hi)),
            s6_hi_ok.eq(Cat(he.end_lo, he.end_hi, he.end_top) >= s5_vend),
            s6_tag.eq(req.tag),
            s6_bus.eq(req.va + Cat(he.delta_lo, he.delta_hi)),
        ]
        s6_resp = Signal(fifo_layout)
        range_ok = s6_lo_ok & s6_hi_ok
        m.d.comb += [
            s6_resp.miss.eq(~s6_hit),
            s6_resp.bad_pd.eq(s6_hit & ~s6_pd_ok),
            s6_resp.bad_access.eq(s6_hit & ~s6_acc_ok),
            s6_resp.bad_range.eq(s6_hit & ~range_ok),
            s6_resp.tag.eq(s6_tag),
            s6_resp.bus_addr.eq(s6_bus),
        ]
        for p, (q_in, q_wen) in enumerate(t.fifos):
            m.d.comb += [
                q_in.eq(s6_resp),
                q_wen.eq(s6_v & (s6_port == p)),
            ]
        # "Pipeline empty", registered for the FSM's DRAIN test. The register holds
        # ~(s1_v | .. | s4_v) of the previous cycle, which is exactly "s2..s5 are empty now"
        # (s5 is the last stage that reads `e`; s6 reads nothing the FSM uses). The FSM reads
        # it only while the lock has held since the previous cycle, so s1 is empty too.
        pipe_empty = Signal()
        m.d.sync += pipe_empty.eq(~(s1_v | s2_v | s3_v | s4_v))
        return types.SimpleNamespace(pipe_empty=pipe_empty)

    def _command_registers(self, m, t):
        """The control FSM's registers: the command (``op``, ``index``, the invalidate's tag,
        the result), the ARG counter ``cnt``, the ARGs it keeps (ARG7 and its fields, the MR
        slot of a window, iova and end), the invalidation's slot, the window bookkeeping, the
        registered valid bit of the slot the command names (``sel_valid_r``, seen as
        ``idx_valid_r`` and ``mr_valid_r``) and the fairness flags. Adds these."""
        ib = t.ib
        op = Signal(8)              # CmdOp, or 0 for a remote invalidate
        index = Signal(ib)
        itag = Signal(8)
        result = Signal(8)
        ok_bit = Signal()
        cnt = Signal(range(16))     # ARG word read or written, table lane written
        a7 = Signal(32)             # ARG7: PD, access, type, valid
        mr = Signal(ib)             # ARG8, the MR slot of a window
        mr_bad = Signal()           # ARG8 ≥ K
        iova = Signal(64)
        end = Signal(65)            # iova + length
        carry = Signal()
        new_valid = a7[28]
        new_type = a7[24:26]
        new_pd = a7[0:16]
        new_acc = a7[16:24]
        new_win = new_valid & new_type[1]   # a valid window: it binds to an MR

        hidx = Signal(ib)           # the slot holding the key of an invalidation
        old_bound = Signal()        # the slot held a valid window (released on rewrite)
        old_mr = Signal(ib)
        rmw_addr = Signal(ib)
        rmw_up = Signal()
        nxt = Signal(2)             # where a window-count update returns: 0 done, 1 bind, 2 end
        win_lo_ok = Signal()
        win_hi_ok = Signal()
        # Facts about the command's arguments, registered (used several cycles after capture).
        # `sel_valid_r`: the valid bit of the slot named by ARG8 in the cycle after SEARCH2
        # (SET_CHECK reads it), else of the slot named by the index (one multiplexer for both)
        sel_valid_r = Signal()
        sel_mr = Signal()
        m.d.sync += sel_valid_r.eq(t.valid.bit_select(Mux(sel_mr, mr, index), 1))
        idx_valid_r = mr_valid_r = sel_valid_r
        fair = Signal()             # give the lookups a cycle before the next table change
        prefer_cmd = Signal()
        return types.SimpleNamespace(
            op=op, index=index, itag=itag, result=result, ok_bit=ok_bit, cnt=cnt, a7=a7, mr=mr,
            mr_bad=mr_bad, iova=iova, end=end, carry=carry, new_valid=new_valid,
            new_type=new_type, new_pd=new_pd, new_acc=new_acc, new_win=new_win, hidx=hidx,
            old_bound=old_bound, old_mr=old_mr, rmw_addr=rmw_addr, rmw_up=rmw_up, nxt=nxt,
            win_lo_ok=win_lo_ok, win_hi_ok=win_hi_ok, sel_mr=sel_mr, idx_valid_r=idx_valid_r,
            mr_valid_r=mr_valid_r, fair=fair, prefer_cmd=prefer_cmd)

    def _valid_writes(self, m, t):
        """The valid-bit writes: the FSM orders one (``v_we``, ``v_idx``, ``v_val``) and it is
        registered once, landing one cycle later. Adds the three orders."""
        ib = t.ib
        v_we = Signal()
        v_idx = Signal(ib)
        v_val = Signal()
        v_we_r = Signal()
        v_idx_r = Signal(ib)
        v_val_r = Signal()
        m.d.sync += [v_we_r.eq(v_we), v_idx_r.eq(v_idx), v_val_r.eq(v_val)]
        with m.If(v_we_r):
            m.d.sync += t.valid.bit_select(v_idx_r, 1).eq(v_val_r)
        return types.SimpleNamespace(v_we=v_we, v_idx=v_idx, v_val=v_val)

    def _cam_sweep(self, m, t):
        """The CAM sweep, which rewrites slot ``index``'s 4-bit lane in all planes in 16 cycles
        (started by ``sweep_go``), writing each plane entry from the keys without reading the
        planes; and the ``sweeping`` output, always 0. Adds ``sweep_go``, ``sweep_busy`` and
        ``nb``, the neighbours' keys the FSM loads."""
        K, ib, index, key_r, new_valid = t.K, t.ib, t.index, t.key_r, t.new_valid
        sweep_on, sweep_v = t.sweep_on, t.sweep_v
        # The CAM sweep: rewrites the 4-bit lane of slot `index` (slots 4g..4g+3, g = index / 4)
        # in all planes, one plane entry v per cycle, v = 0..15, without reading the planes:
        # bit r of entry v of plane p is "slot 4g+r's key has nibble v at position p". For
        # slot `index` that key is `key_r` (and the bit is 0 when ARG7 says invalid); for the
        # three other slots of the lane it is the key of their command row, read while the
        # FSM searches the CAM (`nb`). An invalid neighbour's column is rewritten from its
        # stale key: harmless, its valid bit masks it and a SET_KEY rewrites it before setting
        # it. The lane of entry v is registered the cycle after v and written the next.
        sweep_go = Signal()
        sweep_rd = Signal()         # `sweep_a1` holds v: the lanes of entry v are formed
        sweep_wr = Signal()         # the lanes formed the cycle before are written
        sweep_a1 = Signal(4)
        sweep_addr = Signal(4)
        with m.If(sweep_go):
            m.d.sync += [sweep_on.eq(1), sweep_v.eq(0)]
        with m.Elif(sweep_on):
            m.d.sync += sweep_v.eq(sweep_v + 1)
            with m.If(sweep_v == 15):
                m.d.sync += sweep_on.eq(0)
        m.d.sync += [sweep_rd.eq(sweep_on), sweep_wr.eq(sweep_rd), sweep_a1.eq(sweep_v),
                     sweep_addr.eq(sweep_a1)]
        sweep_busy = sweep_on | sweep_rd | sweep_wr
        lane_q = index[2:] if ib > 2 else Const(0, 1)
        # nb[x - 1]: the key of slot index ^ x (x = 1, 2, 3), from its command row
        nb = [Signal(32, name=f"nb_key{x}") for x in (1, 2, 3)]
        for p, (rp, wp) in enumerate(t.planes):
            cmp = Cat(new_valid & (key_r[4 * p:4 * p + 4] == sweep_a1),
                      *[k[4 * p:4 * p + 4] == sweep_a1 for k in nb])   # by x = r ^ index[:2]
            lane = Signal(4, name=f"plane_lane{p}")
            for r in range(4):
                m.d.sync += lane[r].eq(cmp.bit_select(index[:2] ^ r, 1))
            m.d.comb += [
                wp.addr.eq(sweep_addr),
                wp.data.eq(lane.replicate(K // 4)),
                wp.en.eq(Mux(sweep_wr, Const(1, 1) << lane_q, 0)),
            ]

        m.d.comb += self.sweeping.eq(0)
        return types.SimpleNamespace(sweep_go=sweep_go, sweep_busy=sweep_busy, nb=nb)

    def _lookup_lock(self, m, t):
        """The lookup lock: a pending command or invalidate request (the idle FSM takes it this
        cycle unless the lookups have their fair cycle), then the whole command until the
        response. Registered except for the two valids, so no FSM decode is on this path."""
        m.d.comb += t.lock.eq(t.busy | ((self.inval.req.valid | self.cmd.cmd.valid) & ~t.fair))

    def _lane_word(self, m, t):
        """The FSM's datapath into the table: one 32-bit adder (``add``, for end = iova +
        length) and one subtractor (``borrow`` out, for delta = bus − iova), each a single
        carry chain over one word a cycle, and the 36-bit word of the lane written
        (``w_data``), a multiplexer on ``cnt`` rather than on the FSM's state. Adds ``arg``,
        ``add``, ``borrow`` and the lane's other inputs ``w_extra``, ``w_rmw``, ``w_nwin``."""
        cnt, iova, carry, end, mr, ib = t.cnt, t.iova, t.carry, t.end, t.mr, t.ib
        he, ce, new_acc, new_type = t.he, t.ce, t.new_acc, t.new_type
        arg = self.cmd.arg_data
        # One 32-bit adder and one subtractor, each a single carry chain with the carry (or
        # borrow) of the previous word entering at its bottom: `add` = iova word + ARG + carry
        # (end = iova + length, ARGS), `diff` = ARG − iova word − borrow (delta = bus − iova,
        # SET_WRITE). `carry` is 0 before the low word of each.
        iova_w = Mux(cnt[0], iova[32:64], iova[0:32])
        add = Signal(33)
        m.d.comb += add.eq((Cat(carry, iova_w) + Cat(carry, arg))[1:])
        diff_s = Signal(34)
        m.d.comb += diff_s.eq(Cat(Const(1, 1), arg) + Cat(~carry, ~iova_w))
        diff, borrow = diff_s[1:33], ~diff_s[33]
        # The word of the lane written, a multiplexer on `cnt` (the lane) rather than on the
        # FSM's state: an ARG word (cnt 0, 1, 6..10: iova, key, length, bus, read again), a
        # word of `end` (2, 3), the translation (4, 5: `diff` for an MR, its MR's for a
        # window), or lane 5 of a command row (cnt ≥ 11: a new row's, or the window-count
        # update's, where `cnt` is 12).
        w_extra = Signal(4)
        w_rmw = Signal()
        w_nwin = Signal(11)
        w_is_arg = Signal()
        m.d.comb += w_is_arg.eq((cnt < 2) | ((cnt >= 6) & (cnt <= 10)))
        l5_word = Mux(w_rmw, Cat(ce.mr, w_nwin, ce.acc_hi, ce.type, ce.pad[:5]),
                      Cat(mr, Const(0, 10 - ib), Const(0, 11), new_acc[4:8], new_type,
                          Const(0, 5)))
        delta_word = Mux(t.new_win, Mux(cnt[0], he.delta_hi, he.delta_lo), diff)
        end_word = Mux(cnt[0], end[32:64], end[0:32])
        w_word = Mux(w_is_arg, arg, Mux(cnt[3], l5_word, Mux(cnt[2], delta_word, end_word)))
        m.d.comb += t.w_data.eq(Cat(w_word, w_extra))
        return types.SimpleNamespace(arg=arg, add=add, borrow=borrow, w_extra=w_extra,
                                     w_rmw=w_rmw, w_nwin=w_nwin)

    def _read_row(self, m, t, name, addr, then):
        """States that read table row ``addr`` (inside the control FSM): ``e`` holds it in
        state ``then``, two cycles after ``name`` (the block RAM's latency)."""
        with m.State(name):
            m.d.sync += t.fsm_raddr.eq(addr)
            m.next = name + "_W1"
        with m.State(name + "_W1"):
            m.next = name + "_W2"
        with m.State(name + "_W2"):
            m.next = then

    def _to_rmw(self, m, t, slot, up, back):
        """Go to RMW: one more (``up``) or one fewer window bound to MR ``slot``, then on to
        ``nxt`` = ``back`` (0 INV_OK, 1 SET_BIND, 2 SET_END)."""
        m.d.sync += [t.rmw_addr.eq(slot), t.rmw_up.eq(up), t.nxt.eq(back)]
        m.next = "RMW"

    def _control_fsm(self, m, t):
        """The control FSM ``ctl``, one for the commands (SET_KEY, QUERY_KEY, INVALIDATE) and
        the remote invalidations, composed of the states of the parts below and of the
        invalidate unit (:func:`~rnic.keys.invalidate.invalidate_states`), and what it drives
        from its state: the ARG8 select of ``sel_valid_r`` and the loads of the neighbours'
        keys ``nb`` for the CAM sweep."""
        with m.FSM(name="ctl") as ctl:
            self._intake_states(m, t)
            self._search_states(m, t)
            self._query_states(m, t)
            self._set_check_states(m, t)
            self._set_write_states(m, t)
            invalidate_states(self, m, t)
            self._window_count_states(m, t)
            self._respond_states(m, t)
        # "in SEARCH2", as a register (SEARCH1 always goes on to SEARCH2, one cycle each): the
        # valid-bit multiplexer's select starts at a flip-flop, not at the state's decode
        m.d.sync += t.sel_mr.eq(ctl.ongoing("SEARCH1"))
        for x, state in enumerate(("SET_CHECK", "SET_OLD", "SET_OLD_W1")):
            with m.If(ctl.ongoing(state)):
                m.d.sync += t.nb[x].eq(t.ce.key)

    def _intake_states(self, m, t):
        """IDLE and ARGS (inside the control FSM): the choice between a command and a remote
        invalidation, taking turns and leaving the lookups a cycle after each, and the reading
        of a command's ARGs, one word a cycle, with end = iova + length on the adder."""
        cmd, inv, arg, add, ib = self.cmd.cmd, self.inval, t.arg, t.add, t.ib
        fair, prefer_cmd, busy, op, key_r, itag = (t.fair, t.prefer_cmd, t.busy, t.op, t.key_r,
                                                   t.itag)
        index, cnt, carry, iova, end = t.index, t.cnt, t.carry, t.iova, t.end
        a7, mr, mr_bad = t.a7, t.mr, t.mr_bad
        with m.State("IDLE"):
            # After each command or invalidation the lookups get one cycle (fair), and
            # commands and invalidations take turns (prefer_cmd): nobody waits unboundedly.
            m.d.sync += fair.eq(0)
            with m.If(fair):
                pass
            with m.Elif(inv.req.valid & ~(cmd.valid & prefer_cmd)):
                m.d.sync += prefer_cmd.eq(1)
                m.d.comb += inv.req.ready.eq(1)
                m.d.sync += busy.eq(1)
                m.d.sync += [op.eq(0), key_r.eq(inv.req.payload.key),
                             itag.eq(inv.req.payload.tag)]
                m.next = "DRAIN"
            with m.Elif(cmd.valid):
                m.d.sync += prefer_cmd.eq(0)
                m.d.comb += cmd.ready.eq(1)
                m.d.sync += busy.eq(1)
                m.d.sync += [op.eq(cmd.payload.opcode), index.eq(cmd.payload.index),
                             cnt.eq(0), carry.eq(0)]
                with m.If(cmd.payload.opcode == CmdOp.QUERY_KEY):
                    m.next = "DRAIN"
                with m.Else():
                    m.next = "ARGS"
        with m.State("ARGS"):
            # ARG cnt is addressed this cycle and arrives the next: SET_KEY's ARG0..8 in
            # 10 cycles (ARG5/ARG6 are read again when the table is written), INVALIDATE's
            # ARG0 in 2. The lookups are locked from the command's acceptance: a lookup
            # taken after it sees the new table.
            m.d.comb += self.cmd.arg_addr.eq(cnt)
            m.d.sync += cnt.eq(cnt + 1)
            # end = iova + length, a word a cycle (ARG3 then ARG4) on one adder
            with m.Switch(cnt):
                with m.Case(1):
                    m.d.sync += key_r.eq(arg)
                with m.Case(2):
                    m.d.sync += iova[0:32].eq(arg)
                with m.Case(3):
                    m.d.sync += iova[32:64].eq(arg)
                with m.Case(4):
                    m.d.sync += [end[0:32].eq(add[:32]), carry.eq(add[32])]
                with m.Case(5):
                    m.d.sync += end[32:65].eq(add)
                with m.Case(8):
                    m.d.sync += a7.eq(arg)
                with m.Case(9):
                    m.d.sync += [mr.eq(arg[:ib]), mr_bad.eq(arg[ib:].any())]
            with m.If(cnt == Mux(op == CmdOp.INVALIDATE, 1, 9)):
                m.next = "DRAIN"

    def _search_states(self, m, t):
        """DRAIN, SEARCH1 and SEARCH2 (inside the control FSM): wait until the lookup pipeline
        is empty, take the table's read port, and search the CAM for the command's key while
        reading the command rows of the three other slots of ``index``'s CAM lane."""
        op, index, cnt, carry, fsm_rd, fsm_raddr = (t.op, t.index, t.cnt, t.carry, t.fsm_rd,
                                                    t.fsm_raddr)
        with m.State("DRAIN"):
            with m.If(t.pipe_empty):
                # the table's read port is the FSM's from here on (the pipeline is empty)
                m.d.sync += [cnt.eq(0), carry.eq(0), fsm_rd.eq(1)]
                with m.If(op == CmdOp.QUERY_KEY):
                    m.next = "Q_HOT"
                with m.Else():
                    # the command rows of the other three slots of `index`'s CAM lane,
                    # read while the CAM is searched: `nb` takes their keys from `e` in
                    # SET_CHECK, SET_OLD and SET_OLD_W1 (used by SET_KEY's sweep only)
                    m.d.sync += fsm_raddr.eq(Cat(index ^ 1, 1))
                    m.next = "SEARCH1"
        with m.State("SEARCH1"):           # s1 holds the key
            m.d.sync += fsm_raddr.eq(Cat(index ^ 2, 1))
            m.next = "SEARCH2"
        with m.State("SEARCH2"):           # `match` holds the match vector, then s3
                                            # its hit and slot (s3_hit, s3_idx)
            m.d.sync += fsm_raddr.eq(Cat(index ^ 3, 1))
            with m.Switch(op):
                with m.Case(CmdOp.SET_KEY):
                    m.next = "SET_CHECK"
                with m.Default():           # INVALIDATE, remote invalidate
                    m.next = "INV_SEARCHED"

    def _respond_states(self, m, t):
        """REFUSE and RESPOND (inside the control FSM): the answer, to the mailbox or to the
        remote invalidate port; the table is already updated, so the lookups run again while
        it waits."""
        result, ok_bit, fair, fsm_rd, busy = t.result, t.ok_bit, t.fair, t.fsm_rd, t.busy
        resp, inv = self.cmd.resp, self.inval
        with m.State("REFUSE"):
            m.d.sync += [result.eq(Result.BAD_ARGUMENT), ok_bit.eq(0)]
            m.next = "RESPOND"

        with m.State("RESPOND"):
            # The table is already updated: lookups run again while the answer waits.
            m.d.sync += [fair.eq(1), fsm_rd.eq(0), busy.eq(0)]
            with m.If(t.op == 0):
                m.d.comb += [inv.resp.valid.eq(1), inv.resp.payload.ok.eq(ok_bit),
                             inv.resp.payload.tag.eq(t.itag)]
                with m.If(inv.resp.ready):
                    m.next = "IDLE"
            with m.Else():
                m.d.comb += [resp.valid.eq(1), resp.payload.result.eq(result)]
                with m.If(resp.ready):
                    m.next = "IDLE"

    def _ports(self, m, lock):
        """The lookup ports: each port's response FIFO (:meth:`_resp_fifo`) and credits
        (:meth:`_credit`), and the round-robin grant over the ports with a request and credit
        (:meth:`_grant`). Returns the FIFOs' write sides (``(data, enable)`` per port), the FIFO
        entry layout, ``accept`` (the port whose request is taken this cycle, one-hot; none
        while ``lock``) and ``pick`` (the port that would be granted, unlocked)."""
        P = self.num_ports
        # Per-port response FIFOs and credits.
        fifos = []
        credit_ok = Signal(P)
        credit_next = Signal(P)
        accept = Signal(P)
        # A FIFO entry is the response without `ok`, which is formed again at its output
        # (ok = none of the four error bits): 76 bits, 19 DPR16X4 per port.
        fifo_layout = data.StructLayout({
            name: shape for name, shape in lookup_resp_layout.members.items() if name != "ok"})
        for p, port in enumerate(self.lookups):
            fifos.append(self._resp_fifo(m, p, port, fifo_layout))
            self._credit(m, p, port, accept, credit_ok, credit_next)
        pick = self._grant(m, lock, accept, credit_ok, credit_next)
        return fifos, fifo_layout, accept, pick

    def _resp_fifo(self, m, p, port, fifo_layout):
        """Port ``p``'s response FIFO and its output to ``port.resp`` (``ok`` formed again from
        the four error bits). Its writes never need its room: the credits (:meth:`_credit`)
        reserve an entry for every request accepted. A response written into an empty FIFO is
        offered at once (fall-through), so an empty FIFO adds no cycle to a lookup.
        Returns the write side ``(data, enable)``, which the last lookup stage drives."""
        # With a power-of-two depth the FIFO is a ring whose two pointers carry one more bit
        # (the lap) and whose "not empty" is a register computed from their next values; no
        # level counter. Otherwise it is a `Queue`.
        D = self.fifo_depth
        ring = D & (D - 1) == 0
        if ring:
            q = Memory(shape=fifo_layout, depth=D, init=[], attrs={"no_rw_check": 1})
            m.submodules[f"resp_fifo{p}"] = q
            # no_rw_check: a write goes to a free entry, the read to a held one
            q_w, q_r = q.write_port(), q.read_port(domain="comb")
            produce = Signal(range(2 * D), name=f"produce{p}")
            consume = Signal(range(2 * D), name=f"consume{p}")
            q_valid = Signal(name=f"resp_valid{p}")
            q_in = Signal(fifo_layout, name=f"resp_in{p}")
            q_wen = Signal(name=f"resp_wen{p}")
            # fall-through: into an empty FIFO the response written this cycle (s6) is
            # offered at once; taken, it leaves the ring in the same cycle (its entry is
            # written and passed by both pointers)
            qv = Signal(name=f"resp_offer{p}")
            qo = Signal(fifo_layout, name=f"resp_out{p}")
            m.d.comb += [qv.eq(q_valid | q_wen), qo.eq(Mux(q_valid, q_r.data, q_in))]
            do_read = qv & port.resp.ready
            produce_n = Mux(q_wen, produce + 1, produce)[:len(produce)]
            consume_n = Mux(do_read, consume + 1, consume)[:len(consume)]
            m.d.sync += [produce.eq(produce_n), consume.eq(consume_n),
                         q_valid.eq(produce_n != consume_n)]
            m.d.comb += [q_w.addr.eq(produce[:len(produce) - 1]), q_w.data.eq(q_in),
                         q_w.en.eq(q_wen), q_r.addr.eq(consume[:len(consume) - 1])]
        else:
            q = Queue(fifo_layout, D, buffered=False)
            m.submodules[f"resp_fifo{p}"] = q
            q_in = Signal(fifo_layout, name=f"resp_in{p}")
            q_wen = Signal(name=f"resp_wen{p}")
            # the same fall-through: a response taken as it comes is not stored
            qv = Signal(name=f"resp_offer{p}")
            qo = Signal(fifo_layout, name=f"resp_out{p}")
            m.d.comb += [qv.eq(q.o.valid | q_wen),
                         qo.eq(Mux(q.o.valid, q.o.payload, q_in)),
                         q.i.payload.eq(q_in),
                         q.i.valid.eq(q_wen & (q.o.valid | ~port.resp.ready)),
                         q.o.ready.eq(port.resp.ready)]
        m.d.comb += [
            port.resp.valid.eq(qv),
            port.resp.payload.ok.eq(~(qo.miss | qo.bad_pd | qo.bad_access | qo.bad_range)),
            port.resp.payload.miss.eq(qo.miss),
            port.resp.payload.bad_pd.eq(qo.bad_pd),
            port.resp.payload.bad_access.eq(qo.bad_access),
            port.resp.payload.bad_range.eq(qo.bad_range),
            port.resp.payload.tag.eq(qo.tag),
            port.resp.payload.bus_addr.eq(qo.bus_addr),
        ]
        return q_in, q_wen

    def _credit(self, m, p, port, accept, credit_ok, credit_next):
        """Port ``p``'s credits: the responses it is owed or holds (``outstanding``, at most
        the FIFO's depth), so that a request is accepted only when its response has an entry
        waiting. Drives ``credit_ok[p]`` (from a register, so the grant starts from
        flip-flops), ``credit_next[p]`` (its next value, for the grant's order registers) and
        the port's ``req.ready`` (``accept[p]``)."""
        D = self.fifo_depth
        outstanding = Signal(range(self.fifo_depth + 1), name=f"outstanding{p}")
        # a response taken returns its credit a cycle later (``took`` registered): the
        # count is one high for that cycle, never low, and the path from the last stage
        # through the FIFO's fall-through and the port's ``ready`` ends at this register
        took = Signal(name=f"took{p}")
        m.d.sync += took.eq(port.resp.valid & port.resp.ready)
        # outstanding + accept - took, with the grant only selecting between two sums that
        # do not depend on it (the grant comes late; it stays off the carry chain).
        out_keep = Signal.like(outstanding, name=f"out_keep{p}")
        out_inc = Signal.like(outstanding, name=f"out_inc{p}")
        m.d.comb += [out_keep.eq(outstanding - took), out_inc.eq(outstanding + 1 - took)]
        m.d.sync += outstanding.eq(Mux(accept[p], out_inc, out_keep))
        # `credit_ok` = outstanding < depth, kept as a register (its four candidates are
        # compared from `outstanding` alone, before the grant and the response's handshake
        # are known: both only select), so the grant starts from flip-flops
        credit = Signal(name=f"credit{p}", init=1)
        w = len(outstanding)
        m.d.comb += credit_next[p].eq(
            Mux(accept[p], Mux(took, outstanding < D, (outstanding + 1)[:w] < D),
                Mux(took, (outstanding - 1)[:w] < D, outstanding < D)))
        m.d.sync += credit.eq(credit_next[p])
        m.d.comb += [
            credit_ok[p].eq(credit),
            port.req.ready.eq(accept[p]),
        ]

    def _grant(self, m, lock, accept, credit_ok, credit_next):
        """The round-robin grant over the ports with a request and credit: the port after the
        last one granted has the highest priority. Returns ``pick``, the port that would be
        granted were there no lock, and drives ``accept`` = ``pick`` unless ``lock``; the
        request's data is selected by ``pick``, so the lock (the FSM's busy) reaches only the
        grant, not the data."""
        P = self.num_ports
        # The order is kept as registers: `before[p, q]`, port q comes before port p, and
        # `before_cr[p, q]`, the same and q has credit (both loaded from the next cycle's order
        # and credits). `pick[p]` = valid & credit of p and no port before it with a valid and
        # credit: from the flip-flops, one level of logic before the request's multiplexer.
        def comes_before(last, p, q):       # q before p when `last` was granted last
            order = [(last + 1 + k) % P for k in range(P)]
            return order.index(q) < order.index(p)
        valid_in = Cat(*[port.req.valid for port in self.lookups])
        pick = Signal(P)
        m.d.comb += accept.eq(pick & ~lock.replicate(P))
        for p in range(P):
            cond = valid_in[p] & credit_ok[p]
            for q in range(P):
                if q == p:
                    continue
                bef = Signal(name=f"before{p}_{q}", init=comes_before(0, p, q))
                bef_cr = Signal(name=f"before_cr{p}_{q}", init=comes_before(0, p, q))
                # after a grant to port l the order is the one that starts after l
                bef_next = Mux(accept.any(),
                               Cat(*[accept[l] for l in range(P) if comes_before(l, p, q)]).any(),
                               bef)
                m.d.sync += [bef.eq(bef_next), bef_cr.eq(bef_next & credit_next[q])]
                cond = cond & ~(valid_in[q] & bef_cr)
            m.d.comb += pick[p].eq(cond)
        return pick

    def _query_states(self, m, t):
        """QUERY_KEY's states (inside the control FSM): the slot's words into the ARGs."""
        ib, index, he, ce, cnt = t.ib, t.index, t.he, t.ce, t.cnt
        fair, fsm_rd, busy, result, idx_valid_r = (t.fair, t.fsm_rd, t.busy, t.result,
                                                   t.idx_valid_r)
        # -- QUERY_KEY: ARG1/ARG2 (iova) from the lookup row, the rest from the command row
        self._read_row(m, t, "Q_HOT", index, "Q_IOVA_LO")
        with m.State("Q_IOVA_LO"):
            m.d.comb += [self.cmd.arg_addr.eq(1), self.cmd.arg_we.eq(1),
                         self.cmd.arg_wdata.eq(he.iova_lo)]
            m.next = "Q_IOVA_HI"
        with m.State("Q_IOVA_HI"):
            m.d.comb += [self.cmd.arg_addr.eq(2), self.cmd.arg_we.eq(1),
                         self.cmd.arg_wdata.eq(he.iova_hi)]
            m.next = "Q_COLD"
        self._read_row(m, t, "Q_COLD", Cat(index, 1), "Q_ANSWER")
        with m.State("Q_ANSWER"):
            # ARG0 and ARG3..8 in the SET_KEY layout, then 0 in ARG9..15, one word per
            # cycle; the lookups run again from ARG8 on (the row is no longer needed)
            words = {0: ce.key, 3: ce.len_lo, 4: ce.len_hi, 5: ce.bus_lo, 6: ce.bus_hi,
                     7: Cat(ce.pd0, ce.pd1, ce.pd2, ce.pd3, ce.acc_lo, ce.acc_hi, ce.type,
                            Const(0, 2), idx_valid_r),
                     8: ce.mr[:ib]}
            m.d.comb += [self.cmd.arg_addr.eq(cnt), self.cmd.arg_we.eq(1)]
            with m.Switch(cnt):
                for i, w in words.items():
                    with m.Case(i):
                        m.d.comb += self.cmd.arg_wdata.eq(w)
            with m.If(cnt == 8):
                m.d.sync += [fair.eq(1), fsm_rd.eq(0), busy.eq(0)]
            m.d.sync += cnt.eq(Mux(cnt == 0, 3, cnt + 1))     # ARG1/2 are written
            with m.If(cnt == 15):
                m.d.sync += result.eq(Result.OK)
                m.next = "RESPOND"

    def _set_check_states(self, m, t):
        """SET_KEY's checks (inside the control FSM): SET_CHECK to SET_MR_RANGE refuse a key
        another slot holds, a bad ARG8 slot, an MR with windows bound, a window on a window and
        a window outside its MR, before anything is written, so a refused SET_KEY leaves the
        table as it was. They go on to SET_WRITE (:meth:`_set_write_states`) and leave in
        ``old_bound``/``old_mr`` the window binding the slot held."""
        ib, index, he, ce = t.ib, t.index, t.he, t.ce
        idx_valid_r, mr_valid_r = t.idx_valid_r, t.mr_valid_r
        s3_hit, s3_idx, mr, mr_bad, iova, end = t.s3_hit, t.s3_idx, t.mr, t.mr_bad, t.iova, t.end
        new_valid, new_win = t.new_valid, t.new_win
        old_bound, old_mr, win_lo_ok, win_hi_ok = t.old_bound, t.old_mr, t.win_lo_ok, t.win_hi_ok
        # -- SET_KEY: every check first, then the writes
        # ARG8 out of range or the slot itself, registered (both are captured cycles before)
        mr_self = Signal()
        m.d.sync += mr_self.eq(mr_bad | (mr == index))
        with m.State("SET_CHECK"):
            dup = new_valid & s3_hit & (s3_idx != index)
            bad_mr_slot = new_win & (mr_self | ~mr_valid_r)
            with m.If(dup | bad_mr_slot):
                m.next = "REFUSE"
            with m.Else():
                m.next = "SET_OLD"
        self._read_row(m, t, "SET_OLD", Cat(index, 1), "SET_OLD_CHECK")
        with m.State("SET_OLD_CHECK"):
            m.d.comb += self.cmd.arg_addr.eq(1)     # iova_lo, for lane 0 of SET_WRITE
            m.d.sync += [old_bound.eq(idx_valid_r & ce.type[1]), old_mr.eq(ce.mr[:ib])]
            with m.If(idx_valid_r & ~ce.type[1] & (ce.nwin != 0)):
                m.next = "REFUSE"       # an MR with windows bound cannot be rewritten
            with m.Elif(new_win):
                m.next = "SET_MR"
            with m.Else():
                m.next = "SET_WRITE"
        # a window: its MR's lookup row stays in `e` until the writes below have taken its
        # translation (nothing writes row `mr` before)
        self._read_row(m, t, "SET_MR", mr, "SET_MR_CHECK")
        with m.State("SET_MR_CHECK"):
            m.d.sync += [
                win_lo_ok.eq(iova >= Cat(he.iova_lo, he.iova_hi)),
                win_hi_ok.eq(Cat(he.end_lo, he.end_hi, he.end_top) >= end),
            ]
            with m.If(he.type[1]):
                m.next = "REFUSE"       # a window binds to an MR, not to a window
            with m.Else():
                m.next = "SET_MR_RANGE"
        with m.State("SET_MR_RANGE"):
            m.d.comb += self.cmd.arg_addr.eq(1)     # iova_lo, for lane 0 of SET_WRITE
            with m.If(~win_lo_ok | ~win_hi_ok):
                m.next = "REFUSE"       # the window's range is not inside its MR
            with m.Else():
                m.next = "SET_WRITE"

    def _set_write_states(self, m, t):
        """SET_KEY's writes (inside the control FSM), once every check has passed: SET_WRITE
        writes the slot's lookup and command rows one lane a cycle while the CAM sweep rewrites
        the slot's CAM column; SET_BIND moves the bound-window counts of the MRs involved
        (through RMW); SET_END waits for the sweep, sets the slot's valid bit and answers OK.
        The valid bit comes last, so no lookup sees a half-written slot."""
        index, cnt = t.index, t.cnt
        result, mr, end = t.result, t.mr, t.end
        new_valid, new_win, new_pd, new_acc, new_type = (t.new_valid, t.new_win, t.new_pd,
                                                         t.new_acc, t.new_type)
        carry, borrow, old_bound, old_mr = t.carry, t.borrow, t.old_bound, t.old_mr
        sweep_go, sweep_busy = t.sweep_go, t.sweep_busy
        v_we, v_idx, v_val = t.v_we, t.v_idx, t.v_val
        w_en, w_addr, w_lane, w_extra = t.w_en, t.w_addr, t.w_lane, t.w_extra
        with m.State("SET_WRITE"):
            # lanes 0..5 of the lookup row, then 0..5 of the command row, one per cycle
            # (cnt); the ARG a lane needs is addressed the cycle before. The CAM column is
            # rewritten meanwhile (18 cycles).
            with m.If(cnt == 0):
                m.d.comb += sweep_go.eq(1)
            need = Signal(4)
            with m.Switch(cnt):
                with m.Case(0):
                    m.d.comb += need.eq(2)      # iova_hi (ARG1 was addressed before)
                with m.Case(3):
                    m.d.comb += need.eq(5)      # for lane 4: delta_lo = ARG5 − iova
                with m.Case(4):
                    m.d.comb += need.eq(6)
                with m.Case(5):
                    m.d.comb += need.eq(0)      # key
                with m.Case(6):
                    m.d.comb += need.eq(3)      # length
                with m.Case(7):
                    m.d.comb += need.eq(4)
                with m.Case(8):
                    m.d.comb += need.eq(5)      # bus
                with m.Case(9):
                    m.d.comb += need.eq(6)
            m.d.comb += self.cmd.arg_addr.eq(need)
            # the extra bits of each lane (its word is `w_word`, chosen by `cnt`)
            extras = [new_pd[0:4], new_pd[4:8], new_pd[8:12], new_pd[12:16],
                      Cat(end[64], new_acc[0:3]), Cat(new_acc[3:5], new_type),
                      new_pd[0:4], new_pd[4:8], new_pd[8:12], new_pd[12:16], new_acc[0:4],
                      Const(0, 4)]
            with m.Switch(cnt):
                for i, extra in enumerate(extras):
                    with m.Case(i):
                        m.d.comb += [w_extra.eq(extra), w_lane.eq(i % LANES),
                                     w_addr.eq(Cat(index, Const(i // LANES, 1)))]
            with m.If(cnt == 4):
                m.d.sync += carry.eq(borrow)    # into lane 5
            m.d.comb += w_en.eq(1)
            m.d.sync += cnt.eq(cnt + 1)
            with m.If(cnt == 11):
                with m.If(old_bound):
                    # the slot held a bound window: release it from its MR
                    self._to_rmw(m, t, old_mr, 0, 1)
                with m.Else():
                    m.next = "SET_BIND"
        with m.State("SET_BIND"):
            with m.If(new_win):
                self._to_rmw(m, t, mr, 1, 2)
            with m.Else():
                m.next = "SET_END"
        with m.State("SET_END"):
            with m.If(~sweep_busy & ~sweep_go):
                m.d.comb += [v_we.eq(1), v_idx.eq(index), v_val.eq(new_valid)]
                m.d.sync += result.eq(Result.OK)
                m.next = "RESPOND"

    def _window_count_states(self, m, t):
        """The read-modify-write of an MR's bound-window count (inside the control FSM): one more
        or one fewer window bound to MR ``rmw_addr``, for SET_KEY (a window bound or released)
        and for an invalidated type 2 window, then on to ``nxt``'s state."""
        ce, rmw_addr, rmw_up, nxt = t.ce, t.rmw_addr, t.rmw_up, t.nxt
        w_en, w_addr, w_lane, w_extra, w_rmw, w_nwin = (t.w_en, t.w_addr, t.w_lane, t.w_extra,
                                                        t.w_rmw, t.w_nwin)
        # -- read-modify-write of an MR's bound-window count (lane 5 of its command row)
        self._read_row(m, t, "RMW", Cat(rmw_addr, 1), "RMW_WRITE")
        with m.State("RMW_WRITE"):
            nwin = Mux(rmw_up, ce.nwin + 1, ce.nwin - 1)
            m.d.comb += [
                w_en.eq(1), w_addr.eq(Cat(rmw_addr, 1)), w_lane.eq(5),
                w_rmw.eq(1), w_nwin.eq(nwin[:11]), w_extra.eq(ce.pad[5:]),
            ]
            with m.Switch(nxt):
                with m.Case(0):
                    m.next = "INV_OK"
                with m.Case(1):
                    m.next = "SET_BIND"
                with m.Default():
                    m.next = "SET_END"
