"""cocotb bench for the CRC-32 unit (driven through sim.wrap.flat_top names)."""
import random
import zlib

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from rnic.crc import crc_init_skipping
from sim.knobs import knob


@cocotb.test()
async def crc_against_zlib(dut):
    width = knob("CRC_WIDTH")
    nb = width // 8
    skip = knob("CRC_SKIP_BYTES")
    # a checker (``residue=``): each body carries its CRC, every third one corrupted in one bit
    check = int(knob("CRC_CHECKER"))
    latency = knob("CRC_LATENCY")
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.i_valid.value = 0
    await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    rng = random.Random(width)
    # every keep on the last beat, 1- and 3-beat packets, plus a keep=0 last beat
    bodies = [rng.randbytes(nb * extra + tail) for extra in (0, 2) for tail in range(1, nb + 1)]
    # a unit told the packets' length modulo 4 gets only such packets (the region's bytes: the
    # skipped ones and, for a checker, the CRC too)
    end4 = knob("CRC_END_MOD4")
    if end4 is not None:
        bodies = [b for b in bodies if (skip + len(b) + 4 * check) % 4 == end4]
        assert len(bodies) >= nb // 2
    expected = []
    got = []

    lasts = []          # cycle of each packet's last beat
    cycle = 0

    async def collect():
        nonlocal cycle
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            cycle += 1
            if dut.i_valid.value and (int(dut.i_payload.value) >> (width + nb + 1)) & 1:
                lasts.append(cycle - 1)         # offered in the cycle before this edge
            if dut.o_valid.value:
                got.append(int(dut.o_payload.value))
                assert cycle - lasts[len(got) - 1] == latency

    cocotb.start_soon(collect())
    layout_first = 1 << (width + nb)       # data, keep, first, last
    layout_last = 1 << (width + nb + 1)
    for n, body in enumerate(bodies):
        crc = zlib.crc32(b"\xff" * 8 + body) if skip else zlib.crc32(body)
        if check:
            body = body + crc.to_bytes(4, "little")
            good = n % 3 != 2
            if not good:
                bit = rng.randrange(8 * len(body))
                body = (int.from_bytes(body, "little") ^ (1 << bit)).to_bytes(len(body), "little")
            expected.append(int(good))
        else:
            expected.append(crc)
        pkt = bytes(skip) + body if skip else body
        beats = [pkt[i:i + nb] for i in range(0, len(pkt), nb)]
        if len(beats[-1]) == nb and n % 2:
            beats.append(b"")                  # the region ended on the previous, full beat
        for i, beat in enumerate(beats):
            await FallingEdge(dut.clk)
            word = int.from_bytes(beat.ljust(nb, b"\0"), "little")
            word |= ((1 << len(beat)) - 1) << width
            word |= layout_first if i == 0 else 0
            word |= layout_last if i == len(beats) - 1 else 0
            dut.i_payload.value = word
            dut.i_valid.value = 1
            if n % 3 == 1:                      # an idle cycle now and then
                await FallingEdge(dut.clk)
                dut.i_valid.value = 0
    await FallingEdge(dut.clk)
    dut.i_valid.value = 0
    for _ in range(40):
        await RisingEdge(dut.clk)
    assert got == expected
