"""SkidBuffer, Queue and StreamMerge: order kept, nothing lost or duplicated, under random
valid/ready patterns (Amaranth simulator; these blocks are narrow, the simulator is fast)."""
import random

import pytest
from amaranth.sim import Simulator

from rnic.stream import Queue, SkidBuffer, StreamMerge


def _run_pipe(dut, items, seed, stall_in=0.3, stall_out=0.3):
    rng = random.Random(seed)
    got = []

    async def producer(ctx):
        for x in items:
            ctx.set(dut.i.payload, x)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
            while rng.random() < stall_in:
                await ctx.tick()

    async def consumer(ctx):
        while len(got) < len(items):
            ready = rng.random() >= stall_out
            ctx.set(dut.o.ready, ready)
            await ctx.tick()
            # sample the transfer that happened at this edge
        ctx.set(dut.o.ready, 0)

    async def monitor(ctx):
        async for clk, rst, valid, ready, payload in ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload):
            if valid and ready:
                got.append(payload)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.add_process(monitor)
    sim.run_until(1e-8 * (len(items) * 8 + 100))
    return got


@pytest.mark.parametrize("seed", [1, 2])
def test_skid_buffer(seed):
    items = list(range(1, 200))
    assert _run_pipe(SkidBuffer(16), items, seed) == items


def test_skid_buffer_full_rate():
    items = list(range(1, 100))
    assert _run_pipe(SkidBuffer(16), items, 3, stall_in=0, stall_out=0) == items


@pytest.mark.parametrize("depth,buffered", [(1, False), (4, True), (16, False)])
def test_queue(depth, buffered):
    items = [random.Random(depth).getrandbits(24) for _ in range(150)]
    assert _run_pipe(Queue(24, depth, buffered=buffered), items, depth) == items


def test_queue_refuses_bad_depth():
    with pytest.raises(ValueError):
        Queue(8, 0)


def test_merge_round_robin():
    n = 3
    dut = StreamMerge(16, n)
    rng = random.Random(4)
    sent = {k: [(k << 8) | i for i in range(40)] for k in range(n)}
    got = []

    def producer(k):
        async def run(ctx):
            for x in sent[k]:
                ctx.set(dut.i[k].payload, x)
                ctx.set(dut.i[k].valid, 1)
                await ctx.tick().until(dut.i[k].ready)
                ctx.set(dut.i[k].valid, 0)
                while rng.random() < 0.2:
                    await ctx.tick()
        return run

    async def consumer(ctx):
        ctx.set(dut.o.ready, 1)
        async for clk, rst, valid, payload in ctx.tick().sample(dut.o.valid, dut.o.payload):
            if valid:
                got.append(payload)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for k in range(n):
        sim.add_testbench(producer(k))
    sim.add_process(consumer)
    sim.run_until(1e-8 * 600)
    for k in range(n):
        assert [x for x in got if x >> 8 == k] == sent[k]     # per-input order, nothing lost
    assert len(got) == sum(len(v) for v in sent.values())
    # fairness: while all three are busy, no input waits more than n grants
    first = got[:30]
    for k in range(n):
        idx = [i for i, x in enumerate(first) if x >> 8 == k]
        assert max(b - a for a, b in zip(idx, idx[1:])) <= 2 * n
