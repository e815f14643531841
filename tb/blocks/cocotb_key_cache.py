"""cocotb bench for the Key Cache: random registration, lookup and invalidation traffic against
sim.models.keys.KeyModel, with lookups offered on every port every cycle (flat_top names)."""
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from rnic.ifaces import CmdOp, cmd_layout, resp_layout
from tb.blocks.cocotb_mailbox import ArgRegs
from rnic.keys import (inval_req_layout, inval_resp_layout, lookup_req_layout,
                       lookup_resp_layout)
from sim.knobs import knob
from sim.models.keys import FAST_REG_MR, MR, MW_TYPE1, MW_TYPE2, KeyModel, set_args
from sim.wrap import pack, unpack

M64 = (1 << 64) - 1


class Traffic:
    def __init__(self, dut, entries, ports, rng):
        self.dut, self.k, self.p, self.rng = dut, entries, ports, rng
        self.model = KeyModel(entries)
        self.pool = [rng.getrandbits(32) for _ in range(entries // 2)]
        self.bases = [0x1000, 0x7FFF_0000_0000, M64 - 0x3FFF]      # the last one ends at 2^64

    # -- random operations
    def region(self):
        rng = self.rng
        base = rng.choice(self.bases) + rng.randrange(0, 0x100)
        length = rng.choice([0, 1, 64, 0x800, 0x1000, 0x3F00])
        length = min(length, M64 + 1 - base) if rng.random() < 0.9 else length
        return base, length

    def set_key_args(self):
        rng, model = self.rng, self.model
        slot = rng.randrange(self.k)
        key = rng.choice(self.pool)
        valid = rng.random() < 0.9
        pd = rng.choice([1, 2])
        access = rng.choice([0x1F, 0x01, 0x02, 0x03, 0x10])
        if rng.random() < 0.45:
            type_ = rng.choice([MW_TYPE1, MW_TYPE2])
            mrs = [i for i, s in enumerate(model.slots) if s.valid and s.type in (MR, FAST_REG_MR)]
            mr = rng.choice(mrs) if mrs and rng.random() < 0.85 else rng.randrange(self.k + 2)
            t = model.slots[mr % self.k]
            off = rng.randrange(0, max(1, t.length // 2 + 1))
            iova = (t.iova + off - (rng.random() < 0.1)) & M64
            length = rng.randrange(0, max(1, t.length - off + 1)) + (rng.random() < 0.1)
            bus = rng.getrandbits(64)
        else:
            type_ = rng.choice([MR, FAST_REG_MR])
            mr = rng.randrange(self.k)
            iova, length = self.region()
            bus = rng.getrandbits(64)
        return slot, set_args(key, iova, length, bus, pd, access, type_, valid, mr)

    def lookup_req(self, tag):
        rng, model = self.rng, self.model
        live = [s.key for s in model.slots if s.valid]
        r = rng.random()
        key = (rng.choice(live) if live and r < 0.7 else rng.choice(self.pool) if r < 0.95
               else rng.getrandbits(32))
        h = [s for s in model.slots if s.key == key]
        s = rng.choice(h) if h else None
        iova, length = (s.iova, s.length) if s else self.region()
        va = (iova + rng.randrange(-2, length + 3)) & M64
        n = rng.choice([0, 1, 4, rng.randrange(0, length + 8), max(0, iova + length - va),
                        max(0, iova + length - va + 1), 0xFFFF_FFFF])
        good = s is not None and rng.random() < 0.7
        pd = s.pd if good else rng.choice([1, 2])
        access = s.access & rng.choice([0, 1, 2, 3]) if good else rng.choice([0, 1, 2, 3])
        return dict(key=key, pd=pd, access=access, va=va, len=n & 0xFFFF_FFFF, tag=tag)


async def reset(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0


class _Bench:
    """The state of :func:`random_against_model`: the request offered on each lookup port, the
    command and the invalidation offered, and what each must answer (from the model)."""

    def __init__(self, dut, tr, rng):
        self.dut, self.tr, self.model, self.rng = dut, tr, tr.model, rng
        self.regs = None                         # the ArgRegs of the command port
        ports = tr.p
        self.lk = [(getattr(dut, f"lookup{p}__req_valid"), getattr(dut, f"lookup{p}__req_ready"),
                    getattr(dut, f"lookup{p}__req_payload"),
                    getattr(dut, f"lookup{p}__resp_valid"),
                    getattr(dut, f"lookup{p}__resp_ready"),
                    getattr(dut, f"lookup{p}__resp_payload"))
                   for p in range(ports)]
        self.pending = [None] * ports            # request being offered on each port
        self.expect = [[] for _ in range(ports)]
        self.cmd_pending = self.cmd_expect = None
        self.inv_pending = self.inv_expect = None
        self.tag = 0
        self.stats = dict(lookups=0, ok=0, miss=0, set=0, set_refused=0, query=0, inval=0,
                          inval_ok=0)

    def drive(self, cycle):
        """Offer a lookup on every port every cycle, perhaps a command and an invalidation."""
        dut, tr, rng, lk = self.dut, self.tr, self.rng, self.lk
        for p in range(tr.p):
            if self.pending[p] is None:
                self.tag = (self.tag + 1) & 0xFF
                self.pending[p] = tr.lookup_req(self.tag)
                lk[p][2].value = pack(lookup_req_layout, self.pending[p])
            lk[p][0].value = 1                                       # a lookup every cycle
            lk[p][4].value = int(rng.random() < 0.85)
        cmd_rate = 0.3 if cycle < 400 else 0.02
        if self.cmd_pending is None and self.cmd_expect is None and rng.random() < cmd_rate:
            r = rng.random()
            if r < 0.6 or cycle < 400:
                slot, args = tr.set_key_args()
                self.cmd_pending = (CmdOp.SET_KEY, slot, args)
            elif r < 0.75:
                self.cmd_pending = (CmdOp.QUERY_KEY, rng.randrange(tr.k), [])
            else:
                self.cmd_pending = (CmdOp.INVALIDATE, 0, [rng.choice(tr.pool)])
            op, idx, args = self.cmd_pending
            dut.cmd__cmd_payload.value = pack(cmd_layout, dict(opcode=op, index=idx))
        dut.cmd__cmd_valid.value = int(self.cmd_pending is not None)
        if self.inv_pending is None and self.inv_expect is None and rng.random() < 0.015:
            self.tag = (self.tag + 1) & 0xFF
            self.inv_pending = dict(key=rng.choice(tr.pool), tag=self.tag)
            dut.inval__req_payload.value = pack(inval_req_layout, self.inv_pending)
        dut.inval__req_valid.value = int(self.inv_pending is not None)

    def lookups(self, cycle):
        """The lookups taken and answered this cycle; returns how many were taken."""
        accepted_lookups = 0
        stats = self.stats
        for p in range(self.tr.p):
            v, rdy, _, rv, rr, rp = self.lk[p]
            if v.value and rdy.value:
                q = self.pending[p]
                exp = self.model.lookup(q["key"], q["pd"], q["access"], q["va"], q["len"])
                self.expect[p].append((q, exp))
                self.pending[p] = None
                accepted_lookups += 1
            if rv.value and rr.value:
                got = unpack(lookup_resp_layout, int(rp.value))
                assert self.expect[p], f"port {p}: response without request"
                q, exp = self.expect[p].pop(0)
                bus = exp["bus_addr"]
                want = dict(exp, tag=q["tag"], bus_addr=got["bus_addr"] if bus is None else bus)
                assert got == want, f"cycle {cycle} port {p}: {q} -> {got}, expected {want}"
                stats["lookups"] += 1
                stats["ok"] += got["ok"]
                stats["miss"] += got["miss"]
        return accepted_lookups

    def command(self, cycle, cmd_taken):
        """The command taken this cycle (applied to the model) and its answer."""
        dut, model, stats = self.dut, self.model, self.stats
        if cmd_taken:
            op, idx, args = self.cmd_pending
            self.regs.load(args)
            if op == CmdOp.SET_KEY:
                self.cmd_expect = (op, model.set_key(idx, args), None)
            elif op == CmdOp.QUERY_KEY:
                self.cmd_expect = (op, 0, model.query(idx))
            else:
                self.cmd_expect = (op, 0 if model.invalidate(args[0]) else 3, None)
            self.cmd_pending = None
        if dut.cmd__resp_valid.value:
            got = self.regs.answer(
                unpack(resp_layout, int(dut.cmd__resp_payload.value))["result"])
            assert self.cmd_expect is not None
            op, res, qargs = self.cmd_expect
            assert got["result"] == res, f"cycle {cycle}: command {op} result {got['result']}"
            assert got["write_args"] == int(qargs is not None)
            if qargs is not None:
                assert got["args"][:9] == qargs and not any(got["args"][9:])
            stats["set"] += op == CmdOp.SET_KEY
            stats["set_refused"] += op == CmdOp.SET_KEY and res == 3
            stats["query"] += op == CmdOp.QUERY_KEY
            stats["inval"] += op == CmdOp.INVALIDATE
            stats["inval_ok"] += op == CmdOp.INVALIDATE and res == 0
            self.cmd_expect = None

    def invalidation(self, inv_taken):
        """The invalidation taken this cycle (applied to the model) and its answer."""
        dut = self.dut
        if inv_taken:
            self.inv_expect = (self.inv_pending["tag"],
                               int(self.model.invalidate(self.inv_pending["key"])))
            self.inv_pending = None
        if dut.inval__resp_valid.value:
            got = unpack(inval_resp_layout, int(dut.inval__resp_payload.value))
            assert self.inv_expect is not None and (got["tag"], got["ok"]) == self.inv_expect
            self.stats["inval"] += 1
            self.stats["inval_ok"] += got["ok"]
            self.inv_expect = None

    def sample(self, cycle):
        """Check the transfers of this cycle."""
        dut = self.dut
        accepted_lookups = self.lookups(cycle)
        assert accepted_lookups <= 1
        cmd_taken = self.cmd_pending is not None and dut.cmd__cmd_ready.value
        inv_taken = self.inv_pending is not None and dut.inval__req_ready.value
        assert not (accepted_lookups and (cmd_taken or inv_taken)), "lookup beside a table change"
        assert not (cmd_taken and inv_taken)
        self.command(cycle, cmd_taken)
        self.invalidation(inv_taken)


@cocotb.test()
async def random_against_model(dut):
    entries = knob("KEY_CACHE_ENTRIES")
    ports = knob("KEY_CACHE_PORTS")
    cycles = knob("KEY_CACHE_CYCLES")
    rng = random.Random(knob("KEY_CACHE_SEED"))
    tr = Traffic(dut, entries, ports, rng)
    b = _Bench(dut, tr, rng)
    for v, _, _, _, r, _ in b.lk:
        v.value = 0
        r.value = 0
    dut.cmd__cmd_valid.value = 0
    dut.cmd__resp_ready.value = 1
    b.regs = ArgRegs(dut, "cmd__", dut.clk)    # ARG0..15, read by the block one word a cycle
    dut.inval__req_valid.value = 0
    dut.inval__resp_ready.value = 1
    await reset(dut)

    for cycle in range(cycles):
        await FallingEdge(dut.clk)
        b.drive(cycle)
        await ReadOnly()
        b.sample(cycle)
    stats = b.stats
    dut._log.info("stats: %s", stats)
    with open("stats.txt", "w") as f:          # in the run's test_dir
        f.write(f"{cycles} cycles: {stats}\n")
    assert stats["lookups"] > cycles // 3, stats
    assert stats["ok"] > 50 and stats["miss"] > 50 and stats["inval_ok"] > 5
    assert stats["set"] - stats["set_refused"] > 20 and stats["set_refused"] > 5
