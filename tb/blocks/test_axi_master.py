"""Host-memory master (rnic.host.HostMemory) against the hostile AxiRam of sim/hostmem.py."""
import gc
import warnings

import pytest

from rnic.host import HostMemory
from sim.bench_tops import flat_top_axi
from sim.runner import run_cocotb
from sim.wrap import flat_top

# the configuration the bench uses (the bench reads the same numbers from the environment)
# (client 1's read buffer holds four of the 32-beat bursts: the deep_buffer test)
CFG = dict(read_clients=2, write_clients=2, max_reads=3, max_writes=3, read_buffer=(32, 128))


@pytest.mark.parametrize("width", [64, 512, pytest.param(128, marks=pytest.mark.full),
                                   pytest.param(256, marks=pytest.mark.full)])
def test_axi_master(width):
    run_cocotb("axi_master", lambda: flat_top_axi(HostMemory(width=width, **CFG)),
               params={"width": width, **CFG}, test_module="tb.blocks.cocotb_axi_master",
               extra_env={"HOST_MEM_WIDTH": str(width),
                          **{f"HOST_MEM_{k.upper()}": ",".join(map(str, v)) if isinstance(v, tuple)
                             else str(v) for k, v in CFG.items()}},
               test_name=f"w{width}")


# the core's own configuration (rtl/rnic/top.py: three readers, the gather buffer four bursts
# deep, two writers) and the smallest one (a client alone in its channel's turns)
OTHER_CFGS = {
    "core": dict(read_clients=3, write_clients=2, max_reads=4, max_writes=4,
                 read_buffer=(64, 64, 256), max_burst=64),
    "single": dict(read_clients=1, write_clients=1, max_reads=2, max_writes=2,
                   read_buffer=(48,)),
}


@pytest.mark.parametrize("cfg", OTHER_CFGS)
def test_axi_master_configs(cfg):
    c = OTHER_CFGS[cfg]
    run_cocotb("axi_master", lambda: flat_top_axi(HostMemory(width=64, **c)),
               params={"width": 64, **c}, test_module="tb.blocks.cocotb_axi_master",
               testcase=["faults", "slow_reader", "top_of_address_space", "many_clients",
                         "fast_fire"]
               if c["read_clients"] > 1 else ["top_of_address_space", "many_clients", "fast_fire"],
               extra_env={"HOST_MEM_WIDTH": "64",
                          **{f"HOST_MEM_{k.upper()}": ",".join(map(str, v)) if isinstance(v, tuple)
                             else str(v) for k, v in c.items()}},
               test_name=f"w64-{cfg}")


def test_parameters_refused():
    # refused components are garbage: silence amaranth's "created but never used" on collection
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError):
            HostMemory(width=48)
        with pytest.raises(ValueError):
            HostMemory(width=64, max_reads=0)
        with pytest.raises(ValueError, match="2 figures for 3"):
            HostMemory(width=64, read_clients=3, read_buffer=(64, 64))
        with pytest.raises(ValueError, match="smallest read_buffer"):
            HostMemory(width=64, read_clients=2, read_buffer=(32, 256), max_burst=64)
        with pytest.raises(ValueError, match="max_burst"):
            HostMemory(width=64, max_burst=257, read_buffer=512)
        gc.collect()


def _stall_resume(other_reads):
    """HostMemory (two readers) with an AXI slave of 3 cycles' latency in the Amaranth simulator:
    client 0 reads 8 beats and takes none for 12 cycles, then takes one every cycle it can.
    With ``other_reads``, client 1 streams reads meanwhile (its words compete for the buffer's
    read port). Returns client 0's data and the cycles it took them in."""
    from amaranth.sim import Simulator
    dut = HostMemory(width=64, read_clients=2, write_clients=0, max_reads=4,
                     read_buffer=(64, 64))
    ax = dut.axi
    got, when = [], []

    async def slave(ctx):
        pending = []
        ctx.set(ax.ar_ready, 1)
        cyc = 0
        while True:
            await ctx.delay(1e-10)
            if ctx.get(ax.ar_valid):
                a, n, i = ctx.get(ax.ar_addr), ctx.get(ax.ar_len) + 1, ctx.get(ax.ar_id)
                pending.append([cyc + 3, a >> 3, n, i])
            if pending and pending[0][0] <= cyc:
                p = pending[0]
                ctx.set(ax.r_valid, 1)
                ctx.set(ax.r_id, p[3])
                ctx.set(ax.r_data, (p[3] << 32) | p[1])
                ctx.set(ax.r_last, p[2] == 1)
                p[1] += 1
                p[2] -= 1
                if not p[2]:
                    pending.pop(0)
            else:
                ctx.set(ax.r_valid, 0)
            await ctx.tick()
            cyc += 1

    async def bench(ctx):
        c0, c1 = dut.read_ports
        ctx.set(c0.req.payload.addr, 0x1000)
        ctx.set(c0.req.payload.len_bytes, 64)
        ctx.set(c0.req.valid, 1)
        ctx.set(c1.resp.ready, 1)
        n1 = 0
        for cyc in range(80):
            if other_reads and not ctx.get(c1.req.valid) and n1 < 6:
                ctx.set(c1.req.payload.addr, 0x8000 + 64 * n1)
                ctx.set(c1.req.payload.len_bytes, 64)
                ctx.set(c1.req.valid, 1)
            ctx.set(c0.resp.ready, len(got) > 0 or cyc >= 12)
            await ctx.delay(1e-10)
            done = [p.req for p in (c0, c1) if ctx.get(p.req.valid) and ctx.get(p.req.ready)]
            n1 += c1.req in done
            if ctx.get(c0.resp.valid) and ctx.get(c0.resp.ready):
                got.append(ctx.get(c0.resp.payload.data))
                when.append(cyc)
            await ctx.tick()
            for r in done:
                ctx.set(r.valid, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(slave, background=True)
    sim.add_testbench(bench)
    sim.run()
    return got, when


@pytest.mark.parametrize("other_reads", [False, True])
def test_stalled_reader_resumes_without_gap(other_reads):
    """A reader that held its first beat while the rest of its burst filled the buffer takes
    the whole burst, in order, one beat a cycle once it resumes: the word after the held beat
    was read ahead and waited on the RAM's output. With another reader streaming meanwhile, its
    words and the held reader's interleave on the read port: every beat still comes, in order."""
    got, when = _stall_resume(other_reads)
    assert got == [0x1000 // 8 + k for k in range(8)]
    assert when[0] == 12
    if not other_reads:
        assert when == list(range(12, 20))
