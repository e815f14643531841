"""Formal harness of the Key Cache's lookup check (``rtl/rnic/keys/key_cache.py``).

Specification, kept here independently of the block: a *shadow* key table that follows only the
commands the block answered OK. SET_KEY OK on slot ``i`` makes the shadow slot ``i`` hold the
command's key, PD, access, ``[iova, iova + length)`` and valid bit (ARG7[28]); INVALIDATE OK
and an OK remote invalidation clear the valid bit of the slot holding that key. A lookup is
*justified* when, at its acceptance, some valid shadow slot holds its key with the same PD, every
access bit asked for granted, and ``iova ≤ va`` and ``va + len ≤ iova + length`` (65-bit sums).

Properties (asserted on every response the lookup port delivers, in request order):

* ``ok`` ⇒ justified (no grant without a valid key, matching PD, access and range);
* justified ⇒ ``ok`` (no refusal of a justified lookup);
* ``miss`` ⇔ no valid shadow slot holds the key;
* for a grant through an MR slot (type 0/1): ``bus_addr = va + bus − iova`` (mod 2^64).

Two starting points:

* ``preload=None``: reset, an empty table; the first grant possible needs a SET_KEY (its
  response 40 cycles after reset) then a lookup (6): bounded proofs must reach depth 48;
* ``preload=PRELOAD``: the table starts as if SET_KEYs had filled it with edge cases (an MR whose
  range ends past 2^64, a type 2 window bound to it, an empty fast-reg MR of another PD, an
  invalid slot with a stale key), the shadow likewise; the harness elaborates the unchanged
  Key Cache with those initial values (``_preloaded``). Lookups (symbolic key, PD, access, va,
  len) are answered from cycle 7 on, commands and invalidations change the table as before.

Environment: every input is free (``AnySeq``) except that the mailbox's opcode is one of SET_KEY,
QUERY_KEY, INVALIDATE with an index below ``key_entries`` (the mailbox checks both), and the
command and invalidate responses are taken at once (the mailbox and the execute stage always
take them). The lookup response ``ready`` is free. Reset is asserted in the first cycle only.
"""
from amaranth.hdl import Assert, Assume, Cat, Module, ResetSignal, Signal, Elaboratable
from amaranth.hdl._ast import AnySeq, Initial

from rnic.ifaces import CmdOp, Result
from rnic.keys.key_cache import KeyCache

__all__ = ["KeyCacheHarness", "PRELOAD"]

import contextlib

import rnic.keys.key_cache as _kc

M64 = (1 << 64) - 1

#: slot: (valid, key, pd, access, type, iova, length, bus, mr, nwin)
PRELOAD = [
    (1, 0x11110000, 1, 0x03, 0, 0xFFFFFFFFFFFFF000, 0x2000, 0x80000000, 0, 1),
    (1, 0x22220002, 1, 0x02, 3, 0xFFFFFFFFFFFFF800, 0x100, 0, 0, 0),
    (1, 0x33330003, 2, 0x01, 1, 0x1000, 0, 0x5000, 0, 0),
    (0, 0x44440004, 1, 0x1F, 0, 0, M64, 0, 0, 0),
]


def _rows(slot, table):
    """The slot's lookup row and command row (``rnic.keys.key_cache``'s table layouts)."""
    valid, key, pd, acc, typ, iova, length, bus, mr, nwin = table[slot]
    mr_iova, mr_bus = (table[mr][5], table[mr][7]) if typ >= 2 else (iova, bus)
    delta, end = (mr_bus - mr_iova) & M64, iova + length
    look = _kc.lookup_row_layout.const({
        "iova_lo": iova & 0xFFFFFFFF, "iova_hi": iova >> 32,
        "end_lo": end & 0xFFFFFFFF, "end_hi": end >> 32 & 0xFFFFFFFF, "end_top": end >> 64,
        "delta_lo": delta & 0xFFFFFFFF, "delta_hi": delta >> 32,
        "pd0": pd & 15, "pd1": pd >> 4 & 15, "pd2": pd >> 8 & 15, "pd3": pd >> 12 & 15,
        "acc_lo": acc & 7, "acc_hi": acc >> 3 & 3, "type": typ})
    cmd = _kc.command_row_layout.const({
        "key": key, "len_lo": length & 0xFFFFFFFF, "len_hi": length >> 32,
        "bus_lo": bus & 0xFFFFFFFF, "bus_hi": bus >> 32,
        "pd0": pd & 15, "pd1": pd >> 4 & 15, "pd2": pd >> 8 & 15, "pd3": pd >> 12 & 15,
        "acc_lo": acc & 15, "acc_hi": acc >> 4 & 15, "type": typ, "mr": mr, "nwin": nwin})
    return look.as_value().value, cmd.as_value().value


@contextlib.contextmanager
def _preloaded(table):
    """While elaborating KeyCache, give its key table the initial values of ``table``: the
    ``valid`` register, the 8 CAM planes (``Memory`` of 16 × K bits, made in plane order) and
    the table ``Memory`` (2K rows: lookup rows, then command rows). The block's code is
    untouched, only the constructors it calls are wrapped."""
    real_signal, real_memory = _kc.Signal, _kc.Memory
    K = len(table)
    planes_made = []

    def signal(*args, src_loc_at=0, **kw):
        s = real_signal(*args, src_loc_at=src_loc_at + 1, **kw)
        if not isinstance(s, real_signal):
            return s                    # a View (struct-shaped signal)
        if s.name == "valid" and len(s) == K:
            init = sum(table[i][0] << i for i in range(K))
            return real_signal(*args, init=init, name="valid", **kw)
        return s

    def memory(*, shape, depth, init, **kw):
        if depth == 16 and shape == K and not init:
            p = len(planes_made)
            planes_made.append(p)
            init = [sum(1 << j for j in range(K) if (table[j][1] >> 4 * p) & 15 == v)
                    for v in range(16)]
        elif depth == 2 * K and not init:
            rows = [_rows(i, table) for i in range(K)]
            init = [r[0] for r in rows] + [r[1] for r in rows]
        return real_memory(shape=shape, depth=depth, init=init, **kw)

    signal.like = real_signal.like
    _kc.Signal, _kc.Memory = signal, memory
    try:
        yield
    finally:
        _kc.Signal, _kc.Memory = real_signal, real_memory
    assert len(planes_made) == 8, "the Key Cache's CAM planes were not found"


class KeyCacheHarness(Elaboratable):
    def __init__(self, key_entries=4, fifo_depth=2, preload=None, wrong_spec=False):
        """``wrong_spec``: the shadow believes slot 0 starts one byte later than it does (a
        negative control: the proof must then fail on a grant at the range's first byte)."""
        self.wrong_spec = wrong_spec
        self.K = key_entries
        self.fifo_depth = fifo_depth
        self.preload = preload
        assert preload is None or len(preload) == key_entries

    def elaborate(self, platform):
        m = Module()
        K = self.K
        dut = KeyCache(key_entries=K, num_ports=1, fifo_depth=self.fifo_depth)
        if self.preload:
            from amaranth.hdl import Fragment
            with _preloaded(self.preload):
                m.submodules.dut = Fragment.get(dut, platform)
        else:
            m.submodules.dut = dut
        m.d.comb += Assume(ResetSignal() == Initial())

        self._free_inputs(m, dut)
        p_op, p_index, p_args = self._command(m, dut)
        shadow = self._shadow(m, dut, p_op, p_index, p_args)
        self._lookups(m, dut, shadow)
        return m

    def _free_inputs(self, m, dut):
        """Every input of the Key Cache free, within the commands it takes."""
        K = self.K
        cmd, cresp = dut.cmd.cmd, dut.cmd.resp
        inv, lk = dut.inval, dut.lookup0
        m.d.comb += [
            cmd.valid.eq(AnySeq(1)),
            cmd.payload.opcode.eq(AnySeq(8)),
            cmd.payload.index.eq(AnySeq(24)),
            cresp.ready.eq(1),
            inv.req.valid.eq(AnySeq(1)),
            inv.req.payload.key.eq(AnySeq(32)),
            inv.req.payload.tag.eq(AnySeq(8)),
            inv.resp.ready.eq(1),
            lk.req.valid.eq(AnySeq(1)),
            lk.req.payload.key.eq(AnySeq(32)),
            lk.req.payload.pd.eq(AnySeq(16)),
            lk.req.payload.access.eq(AnySeq(5)),
            lk.req.payload.va.eq(AnySeq(64)),
            lk.req.payload.len.eq(AnySeq(32)),
            lk.req.payload.tag.eq(AnySeq(8)),
            lk.resp.ready.eq(AnySeq(1)),
        ]
        m.d.comb += Assume(cmd.payload.index < K)
        m.d.comb += Assume((cmd.payload.opcode == CmdOp.SET_KEY)
                           | (cmd.payload.opcode == CmdOp.QUERY_KEY)
                           | (cmd.payload.opcode == CmdOp.INVALIDATE))

    def _command(self, m, dut):
        """The command in flight (or the remote invalidation) and software's ARGs for it."""
        K = self.K
        cmd, inv = dut.cmd.cmd, dut.inval
        p_op = Signal(8)       # 0: a remote invalidation
        p_index = Signal(range(K))
        p_args = [Signal(32, name=f"p_arg{i}") for i in range(9)]
        with m.If(cmd.valid & cmd.ready):
            # software's ARG0..8 for this command: free values, fixed until the next command
            m.d.sync += [p_op.eq(cmd.payload.opcode), p_index.eq(cmd.payload.index)]
            m.d.sync += [p_args[i].eq(AnySeq(32)) for i in range(9)]
        # the mailbox's ARG access: a read answers at the next edge (ARG9..15 read as 0)
        arg_rd = Signal(32)
        with m.Switch(dut.cmd.arg_addr):
            for i in range(9):
                with m.Case(i):
                    m.d.sync += arg_rd.eq(p_args[i])
            with m.Default():
                m.d.sync += arg_rd.eq(0)
        m.d.comb += dut.cmd.arg_data.eq(arg_rd)
        with m.If(inv.req.valid & inv.req.ready):
            m.d.sync += [p_op.eq(0), p_args[0].eq(inv.req.payload.key)]
        return p_op, p_index, p_args

    def _shadow(self, m, dut, p_op, p_index, p_args):
        """The shadow table: each slot as the commands that succeeded left it."""
        K = self.K
        cresp, inv = dut.cmd.resp, dut.inval
        pre = self.preload or [(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)] * K
        sv = [Signal(name=f"sv{i}", init=pre[i][0]) for i in range(K)]
        skey = [Signal(32, name=f"skey{i}", init=pre[i][1]) for i in range(K)]
        spd = [Signal(16, name=f"spd{i}", init=pre[i][2]) for i in range(K)]
        sacc = [Signal(8, name=f"sacc{i}", init=pre[i][3]) for i in range(K)]
        siova = [Signal(64, name=f"siova{i}", init=(pre[i][5] + (self.wrong_spec and i == 0)) & M64)
                 for i in range(K)]
        slen = [Signal(64, name=f"slen{i}", init=pre[i][6]) for i in range(K)]
        # type MR or FAST_REG_MR: the translation is checked
        smr = [Signal(name=f"smr{i}", init=int(pre[i][4] < 2)) for i in range(K)]
        sdelta = [Signal(64, name=f"sdelta{i}", init=(pre[i][7] - pre[i][5]) & M64)
                  for i in range(K)]   # bus - iova (MR slots)

        set_ok = cresp.valid & cresp.ready & (cresp.payload.result == Result.OK) \
            & (p_op == CmdOp.SET_KEY)
        inv_ok = ((cresp.valid & cresp.ready & (cresp.payload.result == Result.OK)
                   & (p_op == CmdOp.INVALIDATE))
                  | (inv.resp.valid & inv.resp.ready & inv.resp.payload.ok & (p_op == 0)))
        iova = Cat(p_args[1], p_args[2])
        length = Cat(p_args[3], p_args[4])
        bus = Cat(p_args[5], p_args[6])
        for i in range(K):
            with m.If(set_ok & (p_index == i)):
                m.d.sync += [
                    sv[i].eq(p_args[7][28]), skey[i].eq(p_args[0]), spd[i].eq(p_args[7][0:16]),
                    sacc[i].eq(p_args[7][16:24]), siova[i].eq(iova), slen[i].eq(length),
                    smr[i].eq(~p_args[7][25]), sdelta[i].eq(bus - iova),
                ]
            with m.Elif(inv_ok & (skey[i] == p_args[0])):
                m.d.sync += sv[i].eq(0)
        return sv, skey, spd, sacc, siova, slen, smr, sdelta

    def _lookups(self, m, dut, shadow):
        """Lookups: justified by the shadow table at acceptance, checked at the response."""
        K = self.K
        lk = dut.lookup0
        sv, skey, spd, sacc, siova, slen, smr, sdelta = shadow
        rq = lk.req.payload
        hit_any = Signal()
        just = Signal()
        mr_hit = Signal()
        exp_bus = Signal(64)
        terms_hit, terms_just = [], []
        for i in range(K):
            h = sv[i] & (skey[i] == rq.key)
            j = (h & (spd[i] == rq.pd) & ((rq.access & ~sacc[i][:5]) == 0)
                 & (rq.va >= siova[i])
                 & ((rq.va + rq.len) <= (siova[i] + slen[i])))
            terms_hit.append(h)
            terms_just.append(j)
            with m.If(h):
                m.d.comb += [mr_hit.eq(smr[i]), exp_bus.eq(rq.va + sdelta[i])]
        m.d.comb += [hit_any.eq(Cat(*terms_hit).any()), just.eq(Cat(*terms_just).any())]

        D = self.fifo_depth + 2
        q_just = [Signal(name=f"q_just{i}") for i in range(D)]
        q_hit = [Signal(name=f"q_hit{i}") for i in range(D)]
        q_mr = [Signal(name=f"q_mr{i}") for i in range(D)]
        q_bus = [Signal(64, name=f"q_bus{i}") for i in range(D)]
        count = Signal(range(D + 1))
        push = lk.req.valid & lk.req.ready
        pop = lk.resp.valid & lk.resp.ready
        rs = lk.resp.payload
        with m.If(pop):
            m.d.comb += [
                Assert(count != 0, "a response without a request"),
                Assert(~rs.ok | q_just[0], "grant without a valid key, PD, access and range"),
                Assert(~q_just[0] | rs.ok, "a justified lookup refused"),
                Assert(rs.miss == ~q_hit[0], "miss differs from the shadow table"),
                Assert(~(rs.ok & q_mr[0]) | (rs.bus_addr == q_bus[0]), "wrong translation"),
            ]
        m.d.comb += Assert(count <= self.fifo_depth, "more lookups outstanding than credits")
        # shift register FIFO
        for i in range(D):
            src_j, src_h, src_m, src_b = ((q_just[i + 1], q_hit[i + 1], q_mr[i + 1], q_bus[i + 1])
                                          if i + 1 < D else (0, 0, 0, 0))
            with m.If(pop):
                with m.If(push & (count - 1 == i)):
                    m.d.sync += [q_just[i].eq(just), q_hit[i].eq(hit_any), q_mr[i].eq(mr_hit),
                                 q_bus[i].eq(exp_bus)]
                with m.Else():
                    m.d.sync += [q_just[i].eq(src_j), q_hit[i].eq(src_h), q_mr[i].eq(src_m),
                                 q_bus[i].eq(src_b)]
            with m.Elif(push & (count == i)):
                m.d.sync += [q_just[i].eq(just), q_hit[i].eq(hit_any), q_mr[i].eq(mr_hit),
                             q_bus[i].eq(exp_bus)]
        m.d.sync += count.eq(count + push - pop)
