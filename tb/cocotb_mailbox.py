"""The control plane's side of a block's command port (:func:`rnic.ifaces.CommandSignature`),
modelled in Python for the block benches.

A bench states a command as {opcode, index, args}, as software writes it, and gets the answer
as {result, write_args, args}: ``args`` are ARG0..ARG15 when the response was taken and
``write_args`` says whether the block wrote any of them. :class:`ArgRegs` keeps the ARGs and
serves the port's ARG access like the mailbox does: ``arg_data`` is the ARG addressed at the
previous clock edge, and ``arg_we`` writes ``arg_wdata`` at the edge. Drive on FallingEdge,
sample after ReadOnly, as the stream drivers of tb/cocotb_axi_master.py.
"""
import random
from collections import deque

import cocotb
from amaranth.lib import data
from cocotb.triggers import FallingEdge, ReadOnly

from rnic.ifaces import NUM_ARGS, cmd_layout, resp_layout
from sim.wrap import pack, unpack

__all__ = ["tb_cmd_layout", "tb_resp_layout", "ArgRegs", "CommandSource", "CommandSink"]

#: A command as software states it: CMD and the ARGs written before it.
tb_cmd_layout = data.StructLayout({"opcode": 8, "index": 24,
                                   "args": data.ArrayLayout(32, NUM_ARGS)})
#: An answer as software sees it: CMD_STATUS's result and the ARGs after the command.
tb_resp_layout = data.StructLayout({"result": 8, "write_args": 1,
                                    "args": data.ArrayLayout(32, NUM_ARGS)})


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


class CommandSource:
    """Drives ``<prefix>cmd`` from a queue of {opcode, index, args} and loads the ARGs into
    ``regs`` as the command is taken (the block reads them only afterwards)."""

    def __init__(self, dut, prefix, clk, regs, *, rng=None, idle=0.0):
        self.valid = getattr(dut, f"{prefix}cmd_valid")
        self.ready = getattr(dut, f"{prefix}cmd_ready")
        self.payload = getattr(dut, f"{prefix}cmd_payload")
        self.clk, self.regs = clk, regs
        self.rng, self.idle = rng or random.Random(0), idle
        self.q = deque()
        self.cur = None
        self.valid.value = 0
        cocotb.start_soon(self._run())

    def put(self, values):
        self.q.append(values)

    @property
    def busy(self):
        return self.cur is not None or bool(self.q)

    async def _run(self):
        taken = False
        while True:
            await FallingEdge(self.clk)
            if taken:
                self.cur, taken = None, False
            if self.cur is None:
                if self.q and self.rng.random() >= self.idle:
                    self.cur = self.q.popleft()
                    self.payload.value = pack(cmd_layout, {"opcode": self.cur["opcode"],
                                                           "index": self.cur["index"]})
                    self.valid.value = 1
                else:
                    self.valid.value = 0
            await ReadOnly()
            if self.cur is not None and int(self.ready.value):
                taken = True
                self.regs.load(self.cur.get("args"))


class CommandSink:
    """Takes ``<prefix>resp`` with random back-pressure; ``items`` are answers
    ({result, write_args, args}) as software would read them."""

    def __init__(self, dut, prefix, clk, regs, *, rng=None, stall=0.0):
        self.valid = getattr(dut, f"{prefix}resp_valid")
        self.ready = getattr(dut, f"{prefix}resp_ready")
        self.payload = getattr(dut, f"{prefix}resp_payload")
        self.clk, self.regs = clk, regs
        self.rng, self.stall = rng or random.Random(0), stall
        self.items = []
        self.ready.value = 0
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            await FallingEdge(self.clk)
            rdy = self.rng.random() >= self.stall
            self.ready.value = int(rdy)
            await ReadOnly()
            if rdy and int(self.valid.value):
                result = unpack(resp_layout, int(self.payload.value))["result"]
                self.items.append(self.regs.answer(result))
