"""The simulator's side of :mod:`sim.vsim`: obey the testbenches of the pytest process.

Each message is a list of operations, answered by one reply (the list of their results):
``("w", port, value)`` writes an input; ``("s",)`` lets the design settle (one time step);
``("r", [ports])`` reads ports (an int each, or the text of a value with X or Z);
``("e",)`` is a rising clock edge and the settling after it (the clock falls with the next
settle, or a step before the next edge); ``("q",)`` ends the test.
"""

from multiprocessing.connection import Client

import cocotb
from cocotb.triggers import Timer

from .knobs import knob


def _read(handle):
    text = str(handle.value)
    if set(text) <= {"0", "1"}:
        return int(text, 2)
    return text


@cocotb.test()
async def obey(dut):
    host, port = knob("RNIC_VSIM_ADDR").rsplit(":", 1)
    conn = Client((host, int(port)), authkey=bytes.fromhex(knob("RNIC_VSIM_KEY")))
    handles = {}

    def h(name):
        if name not in handles:
            handles[name] = getattr(dut, name)
        return handles[name]

    for name in ("clk", "rst"):
        try:
            h(name).value = 0
        except AttributeError:
            pass            # a design without a clock domain
    for item in filter(None, (knob("RNIC_VSIM_INPUTS") or "").split(",")):
        name, value = item.split("=")
        h(name).value = int(value, 16)
    await Timer(1, "step")
    clk_high = False        # the clock falls with the next settle, or just before the next edge
    while True:
        try:
            ops = conn.recv()
        except EOFError:
            return
        out = []
        for op in ops:
            kind = op[0]
            if kind == "w":
                h(op[1]).value = op[2]
                out.append(None)
            elif kind == "s":
                if clk_high:
                    h("clk").value = 0
                    clk_high = False
                await Timer(1, "step")
                out.append(None)
            elif kind == "r":
                out.append([_read(h(n)) for n in op[1]])
            elif kind == "e":
                if clk_high:
                    h("clk").value = 0
                    await Timer(1, "step")
                h("clk").value = 1
                clk_high = True
                await Timer(1, "step")
                out.append(None)
            elif kind == "q":
                conn.close()
                return
        conn.send(out)
