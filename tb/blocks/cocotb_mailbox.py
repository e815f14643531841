"""The control plane's side of a block's command port (:func:`rnic.ifaces.CommandSignature`),
modelled in Python for the block benches.

A bench states a command as {opcode, index, args}, as software writes it, and gets the answer
as {result, write_args, args}: ``args`` are ARG0..ARG15 when the response was taken and
``write_args`` says whether the block wrote any of them. :class:`ArgRegs` keeps the ARGs and
serves the port's ARG access like the mailbox does: ``arg_data`` is the ARG addressed at the
previous clock edge, and ``arg_we`` writes ``arg_wdata`` at the edge. Drive on FallingEdge,
sample after ReadOnly, as the stream drivers of tb/blocks/cocotb_axi_master.py.
"""
import cocotb
from cocotb.triggers import FallingEdge, ReadOnly

from rnic.ifaces import NUM_ARGS, cmd_layout, resp_layout
from sim.wrap import pack, unpack
from tb.blocks.cocotb_axi_master import Sink, Source

__all__ = ["ArgRegs", "CommandSource", "CommandSink"]


class ArgRegs:
    """ARG0..ARG15 behind the ARG access of the command port ``<prefix>arg_*``."""

    def __init__(self, dut, prefix, clk):
        self.addr = getattr(dut, f"{prefix}arg_addr")
        self.data = getattr(dut, f"{prefix}arg_data")
        self.we = getattr(dut, f"{prefix}arg_we")
        self.wdata = getattr(dut, f"{prefix}arg_wdata")
        self.clk = clk
        self.args = [0] * NUM_ARGS
        self.written = False
        self.data.value = 0
        cocotb.start_soon(self._run())

    def load(self, args):
        """Software's ARG writes before CMD."""
        args = list(args or [])
        self.args = args + [0] * (NUM_ARGS - len(args))
        self.written = False

    def answer(self, result):
        return {"result": result, "write_args": int(self.written), "args": list(self.args)}

    async def _run(self):
        nxt = 0
        while True:
            await FallingEdge(self.clk)
            self.data.value = nxt
            await ReadOnly()
            a = int(self.addr.value)
            nxt = self.args[a]                       # a read port: the old value on a write
            if int(self.we.value):
                self.args[a] = int(self.wdata.value)
                self.written = True


class CommandSource(Source):
    """Drives ``<prefix>cmd`` from a queue of {opcode, index, args} and loads the ARGs into
    ``regs`` as the command is taken (the block reads them only afterwards)."""

    def __init__(self, dut, prefix, clk, regs, *, rng=None, idle=0.0):
        self.regs = regs
        super().__init__(dut, f"{prefix}cmd", cmd_layout, clk, rng=rng, idle=idle)

    def encode(self, values):
        return pack(cmd_layout, {"opcode": values["opcode"], "index": values["index"]})

    def on_taken(self, values):
        self.regs.load(values.get("args"))


class CommandSink(Sink):
    """Takes ``<prefix>resp`` with random back-pressure; ``items`` are answers
    ({result, write_args, args}) as software would read them."""

    def __init__(self, dut, prefix, clk, regs, *, rng=None, stall=0.0):
        self.regs = regs
        super().__init__(dut, f"{prefix}resp", resp_layout, clk, rng=rng, stall=stall)

    def decode(self, value):
        return self.regs.answer(unpack(resp_layout, value)["result"])
