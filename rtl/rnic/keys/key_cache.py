"""Key Cache: the key-table CAM, memory registration, lookup checks and the invalidate unit.

The key table holds ``key_entries`` slots. The 32-bit key and the valid bit of every slot live in
registers and are compared in parallel (the CAM); everything else about a slot lives in one
``lib.memory.Memory`` read by the matched slot number. One lookup is accepted per cycle from
``num_ports`` requesters, served round-robin; lookups flow through a 7-stage pipeline without
stalls (each port's responses queue in a FIFO whose space is reserved when the request is
accepted).

Commands (SET_KEY, QUERY_KEY, INVALIDATE) and remote invalidations are executed by one control
FSM. While it works, the arbiter accepts no lookup and the FSM first lets the pipeline drain, so
every table change happens with no lookup in flight: a lookup accepted before the change sees the
old table, one accepted after sees the new one, never a mix. See ``docs/key_cache.md``.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..ifaces import CmdOp, CommandSignature, Result
from ..stream import Queue

__all__ = [
    "KeyType", "Access", "lookup_req_layout", "lookup_resp_layout", "inval_req_layout",
    "inval_resp_layout", "LookupSignature", "InvalSignature", "KeyCache", "LOOKUP_LATENCY",
]


#: CAM slots served by one copy of the search key and of the CAM write registers.
_GROUP = 16


class KeyType:
    """Slot type, ARG7 [25:24] of SET_KEY."""
    MR = 0
    FAST_REG_MR = 1
    MW_TYPE1 = 2
    MW_TYPE2 = 3


class Access:
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
LOOKUP_LATENCY = 8


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
        and no stale block-RAM field is ever used without a valid bit).
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
        K = self.key_entries
        P = self.num_ports
        ib = _bits_for(K)

        # ---- the table ------------------------------------------------------------------
        entry_layout = data.StructLayout({
            "key": 32,          # copy of the CAM key, for QUERY_KEY
            "iova": 64,
            "length": 64,
            "bus": 64,          # as written (ARG5/ARG6), for QUERY_KEY
            "pd": 16,
            "access": 8,
            "type": 2,
            "mr": ib,           # ARG8: slot of the MR a window is bound to
            "delta": 64,        # bus - iova of the MR that translates (the window's MR for a MW)
            "end": 65,          # iova + length, without overflow
            "nwin": ib + 1,     # windows bound to this MR
        })
        keys = [Signal(32, name=f"key_{i}") for i in range(K)]
        valid = Signal(K)
        m.submodules.table = table = Memory(shape=entry_layout, depth=K, init=[])
        rd = table.read_port()
        wr_port = table.write_port()
        # The FSM drives `wr`; the write is registered once before the memory (it lands one
        # cycle later, still under the lock, and before any later read of that slot).
        wr = wiring.Signature({"addr": Out(ib), "data": Out(entry_layout), "en": Out(1)}).create()
        m.d.sync += [wr_port.addr.eq(wr.addr), wr_port.data.eq(wr.data), wr_port.en.eq(wr.en)]

        # One write path into the CAM registers, driven by the FSM and registered once (the
        # write lands one cycle after the FSM state that orders it, still under the lock).
        cam_we = Signal()
        cam_idx = Signal(ib)
        cam_key = Signal(32)
        cam_valid = Signal()
        # The write registers are replicated per group of _GROUP slots (as the search key
        # below): each copy drives 16 slots nearby instead of one net reaching all K slots
        # across the die (routing congestion, docs/synthesis.md). The copies carry `keep` so
        # that yosys does not merge them back.
        G = _GROUP
        groups = range((K + G - 1) // G)
        for g in groups:
            cam_we_r = Signal(name=f"cam_we_r{g}", attrs={"keep": 1})
            cam_idx_r = Signal(ib, name=f"cam_idx_r{g}", attrs={"keep": 1})
            cam_key_r = Signal(32, name=f"cam_key_r{g}", attrs={"keep": 1})
            cam_valid_r = Signal(name=f"cam_valid_r{g}", attrs={"keep": 1})
            m.d.sync += [cam_we_r.eq(cam_we), cam_idx_r.eq(cam_idx), cam_key_r.eq(cam_key),
                         cam_valid_r.eq(cam_valid)]
            for i in range(g * G, min(K, (g + 1) * G)):
                with m.If(cam_we_r & (cam_idx_r == i)):
                    m.d.sync += [keys[i].eq(cam_key_r), valid[i].eq(cam_valid_r)]

        # ---- lookup pipeline ------------------------------------------------------------
        pbits = _bits_for(P)
        req_fields = data.StructLayout({
            "port": pbits, "pd": 16, "access": 5, "va": 64, "len": 32, "tag": 8})

        lock = Signal()         # no lookup accepted this cycle
        fsm_key = Signal(32)    # key the FSM searches (s1 when the pipeline is its own)
        fsm_search = Signal()

        # Per-port response FIFOs and credits.
        fifos = []
        credit_ok = Signal(P)
        accept = Signal(P)
        for p, port in enumerate(self.lookups):
            q = Queue(lookup_resp_layout, self.fifo_depth, buffered=False)
            m.submodules[f"resp_fifo{p}"] = q
            fifos.append(q)
            wiring.connect(m, q.o, wiring.flipped(port.resp))
            outstanding = Signal(range(self.fifo_depth + 1), name=f"outstanding{p}")
            took = port.resp.valid & port.resp.ready
            # outstanding + accept - took, with the grant only selecting between two sums that
            # do not depend on it (the grant comes late; it stays off the carry chain).
            out_keep = Signal.like(outstanding, name=f"out_keep{p}")
            out_inc = Signal.like(outstanding, name=f"out_inc{p}")
            m.d.comb += [out_keep.eq(outstanding - took), out_inc.eq(outstanding + 1 - took)]
            m.d.sync += outstanding.eq(Mux(accept[p], out_inc, out_keep))
            m.d.comb += [
                credit_ok[p].eq(outstanding < self.fifo_depth),
                port.req.ready.eq(accept[p]),
            ]

        # Round-robin grant: the port after the last one granted has the highest priority.
        want = Signal(P)
        m.d.comb += want.eq(Cat(*[port.req.valid for port in self.lookups]) & credit_ok
                            & ~lock.replicate(P))
        last = Signal(range(P))
        with m.Switch(last):
            for l in range(P):
                with m.Case(l):
                    order = [(l + 1 + k) % P for k in range(P)]
                    for n, p in enumerate(order):
                        higher = [want[q] for q in order[:n]]
                        cond = want[p]
                        for h in higher:
                            cond = cond & ~h
                        m.d.comb += accept[p].eq(cond)
        granted = Signal(range(P))
        for p in range(P):
            with m.If(accept[p]):
                m.d.comb += granted.eq(p)
        with m.If(accept.any()):
            m.d.sync += last.eq(granted)

        # s1: the accepted request (or the FSM's search key).
        s1_v = Signal()
        # the search key, one copy per group of _GROUP CAM slots (see the CAM write above)
        s1_keys = [Signal(32, name=f"s1_key{g}", attrs={"keep": 1}) for g in groups]
        s1 = Signal(req_fields)
        sel_key = Signal(32)
        sel_rest = Signal(req_fields)
        # AND-OR multiplexer on the one-hot grant (no encode on the path into s1).
        keys_in, rest_in = [], []
        for p, port in enumerate(self.lookups):
            rest = Signal(req_fields, name=f"rest{p}")
            m.d.comb += [
                rest.port.eq(p), rest.pd.eq(port.req.payload.pd),
                rest.access.eq(port.req.payload.access), rest.va.eq(port.req.payload.va),
                rest.len.eq(port.req.payload.len), rest.tag.eq(port.req.payload.tag),
            ]
            keys_in.append(port.req.payload.key & accept[p].replicate(32))
            rest_in.append(rest.as_value() & accept[p].replicate(req_fields.size))
        key_or, rest_or = keys_in[0], rest_in[0]
        for k_, r_ in zip(keys_in[1:], rest_in[1:]):
            key_or, rest_or = key_or | k_, rest_or | r_
        m.d.comb += [sel_key.eq(key_or), sel_rest.eq(rest_or)]
        m.d.sync += [s1_v.eq(accept.any()), s1.eq(sel_rest)]
        m.d.sync += [k.eq(Mux(fsm_search, fsm_key, sel_key)) for k in s1_keys]

        # s2: the CAM match vector.
        s2_v = Signal()
        s2 = Signal(req_fields)
        match = Signal(K)
        for i in range(K):
            m.d.sync += match[i].eq(valid[i] & (keys[i] == s1_keys[i // G]))
        m.d.sync += [s2_v.eq(s1_v), s2.eq(s1)]

        # s3: hit and slot number (keys are unique among valid slots: at most one match).
        s3_v = Signal()
        s3 = Signal(req_fields)
        s3_hit = Signal()
        s3_idx = Signal(ib)
        enc = []
        for b in range(ib):
            terms = [match[i] for i in range(K) if (i >> b) & 1]
            enc.append(Cat(*terms).any())
        m.d.sync += [s3_v.eq(s2_v), s3.eq(s2), s3_hit.eq(match.any()), s3_idx.eq(Cat(*enc))]

        # s4: the slot's entry out of the memory (read address = s3's slot, or the FSM's).
        fsm_rd = Signal()       # registered: the memory read port is the FSM's
        fsm_raddr = Signal(ib)  # registered read address of the FSM
        m.d.comb += rd.addr.eq(Mux(fsm_rd, fsm_raddr, s3_idx))
        s4_v = Signal()
        s4 = Signal(req_fields)
        s4_hit = Signal()
        m.d.sync += [s4_v.eq(s3_v), s4.eq(s3), s4_hit.eq(s3_hit)]

        # s5: the entry registered (block-RAM clock-to-out is long on ECP5).
        s5_v = Signal()
        s5 = Signal(req_fields)
        s5_hit = Signal()
        s5_e = Signal(entry_layout)
        m.d.sync += [s5_v.eq(s4_v), s5.eq(s4), s5_hit.eq(s4_hit), s5_e.eq(rd.data)]

        # s6: PD, access, lower bound, end of the request, translation.
        s6_v = Signal()
        s6 = Signal(req_fields)
        s6_hit = Signal()
        s6_pd_ok = Signal()
        s6_acc_ok = Signal()
        s6_lo_ok = Signal()
        s6_vend = Signal(65)
        s6_end = Signal(65)
        s6_bus = Signal(64)
        m.d.sync += [
            s6_v.eq(s5_v), s6.eq(s5), s6_hit.eq(s5_hit),
            s6_pd_ok.eq(s5_e.pd == s5.pd),
            s6_acc_ok.eq((s5.access & ~s5_e.access[:5]) == 0),
            s6_lo_ok.eq(s5.va >= s5_e.iova),
            s6_vend.eq(s5.va + s5.len),
            s6_end.eq(s5_e.end),
            s6_bus.eq(s5.va + s5_e.delta),
        ]

        # s7: upper bound; the response is pushed into its port's FIFO.
        s7_v = Signal()
        s7 = Signal(req_fields)
        s7_resp = Signal(lookup_resp_layout)
        range_ok = s6_lo_ok & (s6_vend <= s6_end)
        m.d.sync += [
            s7_v.eq(s6_v), s7.eq(s6),
            s7_resp.ok.eq(s6_hit & s6_pd_ok & s6_acc_ok & range_ok),
            s7_resp.miss.eq(~s6_hit),
            s7_resp.bad_pd.eq(s6_hit & ~s6_pd_ok),
            s7_resp.bad_access.eq(s6_hit & ~s6_acc_ok),
            s7_resp.bad_range.eq(s6_hit & ~range_ok),
            s7_resp.tag.eq(s6.tag),
            s7_resp.bus_addr.eq(s6_bus),
        ]
        for p, q in enumerate(fifos):
            m.d.comb += [
                q.i.payload.eq(s7_resp),
                q.i.valid.eq(s7_v & (s7.port == p)),
            ]
        # "Pipeline empty", registered for the FSM's DRAIN test (no 7-input OR on the control
        # path). The register holds ~(s1_v | .. | s6_v) of the previous cycle, which is exactly
        # "s2_v .. s7_v are 0 now". The FSM reads it only while the lock has held since the
        # previous cycle (DRAIN follows the taking cycle, which is locked), so s1_v is 0 too:
        # the registered value equals the combinational s1_v | .. | s7_v = 0, cycle for cycle.
        pipe_empty = Signal()
        m.d.sync += pipe_empty.eq(~(s1_v | s2_v | s3_v | s4_v | s5_v | s6_v))

        # ---- control FSM: commands and invalidations -------------------------------------
        cmd = self.cmd.cmd
        resp = self.cmd.resp
        inv = self.inval

        op = Signal(8)              # CmdOp, or 0 for a remote invalidate
        index = Signal(ib)
        args = Signal(data.ArrayLayout(32, 9))
        itag = Signal(8)
        result = Signal(8)
        ok_bit = Signal()
        cnt = Signal(range(16))     # ARG word being read (SET_KEY layout) or written (QUERY_KEY)

        new_valid = args[7][28]
        new_type = args[7][24:26]
        new_is_mw = new_type[1]
        new_iova = Cat(args[1], args[2])
        new_len = Cat(args[3], args[4])
        new_bus = Cat(args[5], args[6])
        arg8 = args[8]

        hit = Signal()
        hidx = Signal(ib)
        ent = Signal(entry_layout)      # scratch: the last entry the FSM read
        old_valid = Signal()
        old_type = Signal(2)
        old_mr = Signal(ib)
        old_nwin = Signal(ib + 1)
        mr_delta = Signal(64)
        cmp_lo = Signal()
        cmp_end = Signal(65)
        rmw_addr = Signal(ib)
        rmw_up = Signal()
        nxt = Signal(2)                 # where a read-modify-write returns: 0 done, 1 bind, 2 write
        new_ent = Signal(entry_layout)
        cmp_hi = Signal()
        # Facts about the command's arguments, registered (used several cycles after capture).
        idx_valid_r = Signal()          # the slot named by the index is valid
        mr_valid_r = Signal()           # the slot named by ARG8 is valid
        bad_mr_arg_r = Signal()         # ARG8 out of range or the slot itself
        m.d.sync += [
            idx_valid_r.eq(valid.bit_select(index, 1)),
            mr_valid_r.eq(valid.bit_select(arg8[:ib], 1)),
            bad_mr_arg_r.eq((arg8 >= K) | (arg8[:ib] == index)),
        ]
        fair = Signal()                 # give the lookups a cycle before the next table change
        busy = Signal()                 # from a command's acceptance to its response
        prefer_cmd = Signal()

        # Write data: the window-count update of `ent` in RMW_WRITE, else the new entry. The
        # choice is a register (wr_upd, set only in the cycle before RMW_WRITE), not a state
        # decode, because it fans out to every bit of the entry.
        wr_upd = Signal()
        upd = Signal(entry_layout)
        m.d.sync += wr_upd.eq(0)
        m.d.comb += [
            upd.eq(ent),
            upd.nwin.eq(Mux(rmw_up, ent.nwin + 1, ent.nwin - 1)),
            wr.data.eq(Mux(wr_upd, upd, new_ent)),
        ]

        m.d.comb += [
            self.sweeping.eq(0),
            fsm_key.eq(args[0]),
        ]

        # The lookup lock: a pending command or invalidate request (the idle FSM takes it this
        # cycle unless the lookups have their fair cycle), then the whole command until the
        # response. Registered except for the two valids, so no FSM decode is on this path.
        m.d.comb += lock.eq(busy | ((inv.req.valid | cmd.valid) & ~fair))

        with m.FSM(name="ctl"):
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
                    m.d.sync += [op.eq(0), args[0].eq(inv.req.payload.key),
                                 itag.eq(inv.req.payload.tag)]
                    m.next = "DRAIN"
                with m.Elif(cmd.valid):
                    m.d.sync += prefer_cmd.eq(0)
                    m.d.comb += cmd.ready.eq(1)
                    m.d.sync += busy.eq(1)
                    m.d.sync += [op.eq(cmd.payload.opcode), index.eq(cmd.payload.index),
                                 cnt.eq(0)]
                    with m.If(cmd.payload.opcode == CmdOp.QUERY_KEY):
                        m.next = "DRAIN"
                    with m.Else():
                        m.next = "ARGS"
            with m.State("ARGS"):
                # ARG cnt is addressed this cycle and arrives the next: SET_KEY's ARG0..8 in
                # 10 cycles, INVALIDATE's ARG0 in 2. The lookups are locked from the command's
                # acceptance: a lookup taken after it sees the new table.
                m.d.comb += self.cmd.arg_addr.eq(cnt)
                m.d.sync += cnt.eq(cnt + 1)
                for i in range(9):
                    with m.If(cnt == i + 1):
                        m.d.sync += args[i].eq(self.cmd.arg_data)
                with m.If(cnt == Mux(op == CmdOp.INVALIDATE, 1, 9)):
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                with m.If(pipe_empty):
                    m.d.comb += fsm_search.eq(1)
                    m.d.sync += fsm_rd.eq(1)
                    m.next = "SEARCH1"
            with m.State("SEARCH1"):           # s1 holds the key
                m.next = "SEARCH2"
            with m.State("SEARCH2"):           # s2 holds the match vector
                m.next = "SEARCHED"
            with m.State("SEARCHED"):          # s3 holds hit and slot
                m.d.sync += [hit.eq(s3_hit), hidx.eq(s3_idx)]
                with m.Switch(op):
                    with m.Case(CmdOp.SET_KEY):
                        m.next = "SET_CHECK"
                    with m.Case(CmdOp.QUERY_KEY):
                        m.next = "Q_READ"
                    with m.Default():           # INVALIDATE, remote invalidate
                        m.next = "INV_READ"

            # -- QUERY_KEY
            with m.State("Q_READ"):
                m.d.sync += fsm_raddr.eq(index)
                m.next = "Q_READ_WAIT"
            with m.State("Q_READ_WAIT"):
                m.next = "Q_READ_WAIT2"
            with m.State("Q_READ_WAIT2"):     # rd.data valid; s5_e takes it
                m.next = "Q_DATA"
            with m.State("Q_DATA"):
                m.d.sync += [ent.eq(s5_e), old_valid.eq(idx_valid_r),
                             result.eq(Result.OK), cnt.eq(0)]
                m.next = "Q_ANSWER"
            with m.State("Q_ANSWER"):
                # the entry in the SET_KEY layout, ARG0..8, and 0 in ARG9..15, one word per
                # cycle; the table is not changed, so the lookups run meanwhile (as in RESPOND)
                m.d.sync += [fair.eq(1), fsm_rd.eq(0), busy.eq(0)]
                words = [ent.key, ent.iova[0:32], ent.iova[32:64], ent.length[0:32],
                         ent.length[32:64], ent.bus[0:32], ent.bus[32:64],
                         Cat(ent.pd, ent.access, ent.type, Const(0, 2), old_valid), ent.mr]
                m.d.comb += [self.cmd.arg_addr.eq(cnt), self.cmd.arg_we.eq(1)]
                with m.Switch(cnt):
                    for i, w in enumerate(words):
                        with m.Case(i):
                            m.d.comb += self.cmd.arg_wdata.eq(w)
                m.d.sync += cnt.eq(cnt + 1)
                with m.If(cnt == 15):
                    m.next = "RESPOND"

            # -- SET_KEY
            with m.State("SET_CHECK"):
                dup = new_valid & hit & (hidx != index)
                bad_mr_slot = new_valid & new_is_mw & (bad_mr_arg_r | ~mr_valid_r)
                with m.If(dup | bad_mr_slot):
                    m.next = "REFUSE"
                with m.Else():
                    m.next = "SET_OLD_READ"
            with m.State("SET_OLD_READ"):
                m.d.sync += fsm_raddr.eq(index)
                m.next = "SET_OLD_READ_WAIT"
            with m.State("SET_OLD_READ_WAIT"):
                m.next = "SET_OLD_READ_WAIT2"
            with m.State("SET_OLD_READ_WAIT2"):     # rd.data valid; s5_e takes it
                m.next = "SET_OLD_DATA"
            with m.State("SET_OLD_DATA"):
                m.d.sync += [old_valid.eq(idx_valid_r), old_type.eq(s5_e.type),
                             old_mr.eq(s5_e.mr), old_nwin.eq(s5_e.nwin)]
                m.next = "SET_OLD_CHECK"
            with m.State("SET_OLD_CHECK"):
                with m.If(old_valid & ~old_type[1] & (old_nwin != 0)):
                    m.next = "REFUSE"       # an MR with windows bound cannot be rewritten
                with m.Elif(new_valid & new_is_mw):
                    m.next = "SET_MR_READ"
                with m.Else():
                    m.d.sync += mr_delta.eq(new_bus - new_iova)
                    m.next = "SET_BUILD"
            with m.State("SET_MR_READ"):
                m.d.sync += fsm_raddr.eq(arg8[:ib])
                m.next = "SET_MR_READ_WAIT"
            with m.State("SET_MR_READ_WAIT"):
                m.next = "SET_MR_READ_WAIT2"
            with m.State("SET_MR_READ_WAIT2"):     # rd.data valid; s5_e takes it
                m.next = "SET_MR_DATA"
            with m.State("SET_MR_DATA"):
                m.d.sync += [ent.eq(s5_e), cmp_end.eq(new_iova + new_len)]
                m.next = "SET_MR_CHECK1"
            with m.State("SET_MR_CHECK1"):
                m.d.sync += [cmp_lo.eq(new_iova >= ent.iova), mr_delta.eq(ent.delta)]
                with m.If(ent.type[1]):
                    m.next = "REFUSE"       # a window binds to an MR, not to a window
                with m.Else():
                    m.next = "SET_MR_CHECK2"
            with m.State("SET_MR_CHECK2"):
                m.d.sync += cmp_hi.eq(cmp_end > ent.end)
                m.next = "SET_MR_CHECK3"
            with m.State("SET_MR_CHECK3"):
                with m.If(~cmp_lo | cmp_hi):
                    m.next = "REFUSE"       # the window's range is not inside its MR
                with m.Else():
                    m.next = "SET_BUILD"
            with m.State("SET_BUILD"):
                m.d.sync += [
                    new_ent.key.eq(args[0]), new_ent.iova.eq(new_iova),
                    new_ent.length.eq(new_len), new_ent.bus.eq(new_bus),
                    new_ent.pd.eq(args[7][0:16]), new_ent.access.eq(args[7][16:24]),
                    new_ent.type.eq(new_type), new_ent.mr.eq(arg8[:ib]),
                    new_ent.delta.eq(mr_delta), new_ent.end.eq(new_iova + new_len),
                    new_ent.nwin.eq(0),
                ]
                with m.If(old_valid & old_type[1]):
                    # the slot held a bound window: release it from its MR
                    m.d.sync += [rmw_addr.eq(old_mr), rmw_up.eq(0), nxt.eq(1)]
                    m.next = "RMW_READ"
                with m.Else():
                    m.next = "SET_BIND"
            with m.State("SET_BIND"):
                with m.If(new_valid & new_is_mw):
                    m.d.sync += [rmw_addr.eq(arg8[:ib]), rmw_up.eq(1), nxt.eq(2)]
                    m.next = "RMW_READ"
                with m.Else():
                    m.next = "SET_WRITE"
            with m.State("SET_WRITE"):
                m.d.comb += [
                    wr.addr.eq(index), wr.en.eq(1),
                    cam_we.eq(1), cam_idx.eq(index), cam_key.eq(args[0]),
                    cam_valid.eq(new_valid),
                ]
                m.d.sync += [result.eq(Result.OK)]
                m.next = "RESPOND"

            # -- INVALIDATE and remote invalidate
            with m.State("INV_READ"):
                m.d.sync += fsm_raddr.eq(hidx)
                with m.If(~hit):
                    m.next = "REFUSE"       # unknown or already invalid key
                with m.Else():
                    m.next = "INV_READ_WAIT"
            with m.State("INV_READ_WAIT"):
                m.next = "INV_READ_WAIT2"
            with m.State("INV_READ_WAIT2"):     # rd.data valid; s5_e takes it
                m.next = "INV_DATA"
            with m.State("INV_DATA"):
                m.d.sync += ent.eq(s5_e)
                m.next = "INV_CHECK"
            with m.State("INV_CHECK"):
                fr_ok = (ent.type == KeyType.FAST_REG_MR) & (ent.nwin == 0)
                mw2 = ent.type == KeyType.MW_TYPE2
                with m.If(fr_ok | mw2):
                    m.d.comb += [cam_we.eq(1), cam_idx.eq(hidx), cam_key.eq(ent.key),
                                 cam_valid.eq(0)]
                with m.If(fr_ok):
                    m.next = "INV_OK"
                with m.Elif(mw2):
                    m.d.sync += [rmw_addr.eq(ent.mr), rmw_up.eq(0), nxt.eq(0)]
                    m.next = "RMW_READ"
                with m.Else():
                    m.next = "REFUSE"
            with m.State("INV_OK"):
                m.d.sync += [result.eq(Result.OK), ok_bit.eq(1)]
                m.next = "RESPOND"

            # -- read-modify-write of an MR's bound-window count
            with m.State("RMW_READ"):
                m.d.sync += fsm_raddr.eq(rmw_addr)
                m.next = "RMW_READ_WAIT"
            with m.State("RMW_READ_WAIT"):
                m.next = "RMW_READ_WAIT2"
            with m.State("RMW_READ_WAIT2"):     # rd.data valid; s5_e takes it
                m.next = "RMW_DATA"
            with m.State("RMW_DATA"):
                m.d.sync += [ent.eq(s5_e), wr_upd.eq(1)]
                m.next = "RMW_WRITE"
            with m.State("RMW_WRITE"):
                m.d.comb += [wr.addr.eq(rmw_addr), wr.en.eq(1)]
                with m.Switch(nxt):
                    with m.Case(0):
                        m.next = "INV_OK"
                    with m.Case(1):
                        m.next = "SET_BIND"
                    with m.Default():
                        m.next = "SET_WRITE"

            with m.State("REFUSE"):
                m.d.sync += [result.eq(Result.BAD_ARGUMENT), ok_bit.eq(0)]
                m.next = "RESPOND"

            with m.State("RESPOND"):
                # The table is already updated: lookups run again while the answer waits.
                m.d.sync += [fair.eq(1), fsm_rd.eq(0), busy.eq(0)]
                with m.If(op == 0):
                    m.d.comb += [inv.resp.valid.eq(1), inv.resp.payload.ok.eq(ok_bit),
                                 inv.resp.payload.tag.eq(itag)]
                    with m.If(inv.resp.ready):
                        m.next = "IDLE"
                with m.Else():
                    m.d.comb += [resp.valid.eq(1), resp.payload.result.eq(result)]
                    with m.If(resp.ready):
                        m.next = "IDLE"
        return m
