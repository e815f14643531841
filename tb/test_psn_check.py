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
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect

from rnic.ifaces import NUM_COUNTERS, CommandSignature, event_layout, rx_meta_layout
from rnic.resp.psn_check import (PsnCheck, exe_layout, qpn_layout, rq_db_layout,
                                  rq_flush_layout)
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
        for name in ("pay_out", "ack_out", "rq_flush", "event", "qp_reset"):
            connect(m, getattr(psn, name), wiring.flipped(getattr(self, name)))
        connect(m, psn.tx, arb.i0)
        connect(m, wiring.flipped(self.tx1), arb.i1)
        connect(m, arb.o, wiring.flipped(self.tx))
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


def _run(width, tests=None, name=None, extra=None):
    run_cocotb("psn_check", lambda: flat_top(PsnBench(width)), params={"width": width},
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
