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


@cocotb.test()
async def random_against_model(dut):
    entries = knob("KEY_CACHE_ENTRIES")
    ports = knob("KEY_CACHE_PORTS")
    cycles = knob("KEY_CACHE_CYCLES")
    rng = random.Random(knob("KEY_CACHE_SEED"))
    tr = Traffic(dut, entries, ports, rng)
    model = tr.model
    lk = [(getattr(dut, f"lookup{p}__req_valid"), getattr(dut, f"lookup{p}__req_ready"),
           getattr(dut, f"lookup{p}__req_payload"), getattr(dut, f"lookup{p}__resp_valid"),
           getattr(dut, f"lookup{p}__resp_ready"), getattr(dut, f"lookup{p}__resp_payload"))
          for p in range(ports)]
    for v, _, _, _, r, _ in lk:
        v.value = 0
        r.value = 0
    dut.cmd__cmd_valid.value = 0
    dut.cmd__resp_ready.value = 1
    regs = ArgRegs(dut, "cmd__", dut.clk)      # ARG0..15, read by the block one word a cycle
    dut.inval__req_valid.value = 0
    dut.inval__resp_ready.value = 1
    await reset(dut)

    pending = [None] * ports            # request being offered on each port
    expect = [[] for _ in range(ports)]
    cmd_pending = cmd_expect = None
    inv_pending = inv_expect = None
    tag = 0
    stats = dict(lookups=0, ok=0, miss=0, set=0, set_refused=0, query=0, inval=0, inval_ok=0)
    for cycle in range(cycles):
        await FallingEdge(dut.clk)
        # -- drive
        for p in range(ports):
            if pending[p] is None:
                tag = (tag + 1) & 0xFF
                pending[p] = tr.lookup_req(tag)
                lk[p][2].value = pack(lookup_req_layout, pending[p])
            lk[p][0].value = 1                                       # a lookup every cycle
            lk[p][4].value = int(rng.random() < 0.85)
        cmd_rate = 0.3 if cycle < 400 else 0.02
        if cmd_pending is None and cmd_expect is None and rng.random() < cmd_rate:
            r = rng.random()
            if r < 0.6 or cycle < 400:
                slot, args = tr.set_key_args()
                cmd_pending = (CmdOp.SET_KEY, slot, args)
            elif r < 0.75:
                cmd_pending = (CmdOp.QUERY_KEY, rng.randrange(entries), [])
            else:
                cmd_pending = (CmdOp.INVALIDATE, 0, [rng.choice(tr.pool)])
            op, idx, args = cmd_pending
            dut.cmd__cmd_payload.value = pack(cmd_layout, dict(opcode=op, index=idx))
        dut.cmd__cmd_valid.value = int(cmd_pending is not None)
        if inv_pending is None and inv_expect is None and rng.random() < 0.015:
            tag = (tag + 1) & 0xFF
            inv_pending = dict(key=rng.choice(tr.pool), tag=tag)
            dut.inval__req_payload.value = pack(inval_req_layout, inv_pending)
        dut.inval__req_valid.value = int(inv_pending is not None)
        # -- sample the transfers of this cycle
        await ReadOnly()
        accepted_lookups = 0
        for p in range(ports):
            v, rdy, _, rv, rr, rp = lk[p]
            if v.value and rdy.value:
                q = pending[p]
                exp = model.lookup(q["key"], q["pd"], q["access"], q["va"], q["len"])
                expect[p].append((q, exp))
                pending[p] = None
                accepted_lookups += 1
            if rv.value and rr.value:
                got = unpack(lookup_resp_layout, int(rp.value))
                assert expect[p], f"port {p}: response without request"
                q, exp = expect[p].pop(0)
                bus = exp["bus_addr"]
                want = dict(exp, tag=q["tag"], bus_addr=got["bus_addr"] if bus is None else bus)
                assert got == want, f"cycle {cycle} port {p}: {q} -> {got}, expected {want}"
                stats["lookups"] += 1
                stats["ok"] += got["ok"]
                stats["miss"] += got["miss"]
        assert accepted_lookups <= 1
        cmd_taken = cmd_pending is not None and dut.cmd__cmd_ready.value
        inv_taken = inv_pending is not None and dut.inval__req_ready.value
        assert not (accepted_lookups and (cmd_taken or inv_taken)), "lookup beside a table change"
        assert not (cmd_taken and inv_taken)
        if cmd_taken:
            op, idx, args = cmd_pending
            regs.load(args)
            if op == CmdOp.SET_KEY:
                cmd_expect = (op, model.set_key(idx, args), None)
            elif op == CmdOp.QUERY_KEY:
                cmd_expect = (op, 0, model.query(idx))
            else:
                cmd_expect = (op, 0 if model.invalidate(args[0]) else 3, None)
            cmd_pending = None
        if dut.cmd__resp_valid.value:
            got = regs.answer(unpack(resp_layout, int(dut.cmd__resp_payload.value))["result"])
            assert cmd_expect is not None
            op, res, qargs = cmd_expect
            assert got["result"] == res, f"cycle {cycle}: command {op} result {got['result']}"
            assert got["write_args"] == int(qargs is not None)
            if qargs is not None:
                assert got["args"][:9] == qargs and not any(got["args"][9:])
            stats["set"] += op == CmdOp.SET_KEY
            stats["set_refused"] += op == CmdOp.SET_KEY and res == 3
            stats["query"] += op == CmdOp.QUERY_KEY
            stats["inval"] += op == CmdOp.INVALIDATE
            stats["inval_ok"] += op == CmdOp.INVALIDATE and res == 0
            cmd_expect = None
        if inv_taken:
            inv_expect = (inv_pending["tag"], int(model.invalidate(inv_pending["key"])))
            inv_pending = None
        if dut.inval__resp_valid.value:
            got = unpack(inval_resp_layout, int(dut.inval__resp_payload.value))
            assert inv_expect is not None and (got["tag"], got["ok"]) == inv_expect
            stats["inval"] += 1
            stats["inval_ok"] += got["ok"]
            inv_expect = None
    dut._log.info("stats: %s", stats)
    with open("stats.txt", "w") as f:          # in the run's test_dir
        f.write(f"{cycles} cycles: {stats}\n")
    assert stats["lookups"] > cycles // 3, stats
    assert stats["ok"] > 50 and stats["miss"] > 50 and stats["inval_ok"] > 5
    assert stats["set"] - stats["set_refused"] > 20 and stats["set_refused"] > 5
