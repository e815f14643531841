"""PSN Check, QP context, ACK/NAK header builder and TX arbiter (cocotb on Icarus, W=64/512).

The bench (``tb/cocotb_psn_check.py``) drives RX Parse's metadata/payload streams with frames
built by scapy and parsed by the bench's own parser, plays the later stages through a stub of the
execute-outcome interface (always success, or a fatal outcome on one chosen PSN), and checks
every transmitted frame with its own parser, an independent ICRC/IPv4-checksum computation and
tshark, against ``sim/models/responder.py``.
"""
import os

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out, connect

from rnic.ifaces import NUM_COUNTERS, CommandSignature, event_layout, rx_meta_layout
from rnic.resp.psn_check import (PsnCheck, exe_layout, qpn_layout, rq_db_layout,
                                  rq_flush_layout)
from rnic.resp.qp_context import qp_set_event_layout
from rnic.stream import BeatStream
from rnic.tx.arbiter import TxArbiter
from sim.runner import run_cocotb
from sim.wrap import flat_top

NUM_QP = 16


class PsnBench(wiring.Component):
    """PsnCheck + TxArbiter + a stub of the later stages (exe → done)."""

    def __init__(self, width, num_qp=NUM_QP):
        self.width = width
        self.num_qp = num_qp
        super().__init__({
            "meta": In(stream.Signature(rx_meta_layout)),
            "payload": In(BeatStream(width)),
            "rq_db": In(stream.Signature(rq_db_layout)),
            "cmd": Out(CommandSignature()),
            "local_mac": In(48),
            "local_ip": In(32),
            "pay_out": Out(BeatStream(width)),
            "ack_out": Out(stream.Signature(rx_meta_layout)),
            "rq_flush": Out(stream.Signature(rq_flush_layout)),
            "event": Out(stream.Signature(event_layout)),
            "qp_reset": Out(stream.Signature(qpn_layout)),
            "qp_set": Out(stream.Signature(qp_set_event_layout, always_ready=True)),
            "fault": In(stream.Signature(qpn_layout)),
            "tx": Out(BeatStream(width)),
            "tx1": In(BeatStream(width)),
            "stat": Out(NUM_COUNTERS),
            "exe_mon_valid": Out(1),
            "exe_mon": Out(exe_layout),
            "fail_en": In(1),
            "fail_qpn": In(24),
            "fail_psn": In(24),
            "fail_syn": In(8),
            "exe_hold": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.psn = psn = PsnCheck(width=self.width, num_qp=self.num_qp)
        m.submodules.arb = arb = TxArbiter(self.width)
        for name in ("meta", "payload", "rq_db", "cmd", "fault"):
            connect(m, wiring.flipped(getattr(self, name)), getattr(psn, name))
        for name in ("pay_out", "ack_out", "rq_flush", "event", "qp_reset", "qp_set"):
            connect(m, getattr(psn, name), wiring.flipped(getattr(self, name)))
        connect(m, psn.tx, arb.i0)
        connect(m, wiring.flipped(self.tx1), arb.i1)
        connect(m, arb.o, wiring.flipped(self.tx))
        # the requester's context as QUERY_QP sees it: the send PSN of every qp_set event
        sqm = memory.Memory(shape=24, depth=self.num_qp, init=[])
        m.submodules.sqm = sqm
        sw, sr = sqm.write_port(), sqm.read_port()
        m.d.comb += [sw.addr.eq(psn.qp_set.payload.qpn), sw.data.eq(psn.qp_set.payload.sq_psn),
                     sw.en.eq(psn.qp_set.valid), sr.addr.eq(psn.q_qpn),
                     psn.q_psn.eq(sr.data), psn.q_cons.eq(0)]
        e = psn.exe
        m.d.comb += [
            psn.local_mac.eq(self.local_mac), psn.local_ip.eq(self.local_ip),
            self.stat.eq(psn.stat | arb.stat),
            # the stub: one done per exe, at once (unless held)
            psn.done.valid.eq(e.valid & ~self.exe_hold),
            e.ready.eq(psn.done.ready & ~self.exe_hold),
            psn.done.payload.fatal.eq(self.fail_en & (e.payload.psn == self.fail_psn)
                                      & (e.payload.qpn == self.fail_qpn)),
            psn.done.payload.syndrome.eq(self.fail_syn),
            self.exe_mon_valid.eq(e.valid & e.ready),
            self.exe_mon.eq(e.payload),
        ]
        return m


#: bump when PsnBench changes (the Verilog cache key covers rtl/ only; also in sim/benches.py)
BENCH_REV = 3


def _run(width, tests=None, name=None, extra=None):
    run_cocotb("psn_check", lambda: flat_top(PsnBench(width)),
               params={"width": width, "bench": BENCH_REV},
               test_module="tb.cocotb_psn_check", testcase=tests,
               extra_env={"PSN_WIDTH": str(width), **(extra or {})},
               test_name=name or f"w{width}")


@pytest.mark.parametrize("width", [64, 512])
def test_psn_check(width):
    """Every directed test plus a random run of ~1,500 packets against the model."""
    _run(width)


@pytest.mark.full
@pytest.mark.parametrize("width", [64, 512])
def test_psn_check_random_long(width):
    _run(width, tests=["random_sequences", "tshark_decodes_every_frame"], name=f"w{width}-long",
         extra={"PSN_RANDOM_PACKETS": "20000"})


def test_psn_rules():
    """The factored PSN classifier and opcode sequencer (``rnic.resp.psn_rules``), exhaustive
    over opcodes × open classes and over PSN corner cases + random pairs, against their Python
    twins and against ``roce-reference.md`` §3.2/§3.3 directly."""
    import random

    from amaranth.sim import Simulator

    from rnic.resp.psn_rules import (OpSequencer, PsnClassifier, op_sequence_model,
                                     psn_class_model)

    # the reference's own statements, independent of the twins
    assert psn_class_model(0, 0xFFFFFF)["ahead"] and psn_class_model(0xFFFFFE, 0xFFFFFF)["dup"]
    assert psn_class_model(0x7FFFFF, 0)["ahead"] and psn_class_model(0x800000, 0)["dup"]
    assert op_sequence_model(0x04, 1)["ok"] == 0 and op_sequence_model(0x0C, 1)["ok"] == 0
    assert op_sequence_model(0x16, 0)["ok"] == 0 and op_sequence_model(0x09, 2)["ok"] == 1
    assert op_sequence_model(0x07, 1)["ok"] == 0 and op_sequence_model(0x06, 0)["next_open"] == 2

    dut = OpSequencer()
    sim = Simulator(dut)

    async def tb(ctx):
        for op in range(256):
            for o in range(4):
                ctx.set(dut.opcode, op)
                ctx.set(dut.open_, o)
                v = ctx.get(dut.seq)
                exp = op_sequence_model(op, o)
                assert {k: int(getattr(v, k)) for k in exp} == exp, (op, o)
    sim.add_testbench(tb)
    sim.run()

    dut2 = PsnClassifier()
    sim = Simulator(dut2)

    async def tb2(ctx):
        rng = random.Random(4)
        cases = [(0, 0xFFFFFF), (0xFFFFFE, 0xFFFFFF), (0x7FFFFF, 0), (0x800000, 0), (5, 5),
                 (0xFFFFFF, 0), (0x800000, 0xFFFFFF)]
        cases += [(rng.randrange(1 << 24), rng.randrange(1 << 24)) for _ in range(500)]
        for p, e in cases:
            ctx.set(dut2.psn, p)
            ctx.set(dut2.epsn, e)
            v = ctx.get(dut2.cls)
            exp = psn_class_model(p, e)
            got = {k: int(getattr(v, k)) for k in exp}
            assert got == exp, (p, e)
            assert got["in_order"] + got["dup"] + got["ahead"] == 1
    sim.add_testbench(tb2)
    sim.run()
