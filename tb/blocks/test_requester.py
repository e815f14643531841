"""Requester send half (rnic.req): WQEs in host memory → RoCEv2 request frames, checked with scapy
against the segmentation model of sim/models/requester.py."""
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rnic.control.qp_args import qp_arg_layout
from rnic.host import HostMemory
from rnic.host.axi_master import AxiSignature
from rnic.ifaces import CommandSignature, QpnStream
from rnic.keys.key_cache import KeyCache
from rnic.req import Requester, ack_layout, cpl_layout, qp_set_layout, req_ctx_layout
from rnic.req.requester import doorbell_layout
from rnic.stream import BeatStream
from rnic.tx.build import TxBuild
from sim.models import requester as model
from sim.runner import run_cocotb
from sim.bench_tops import flat_top_axi

NUM_QP = 16


class ReqHarness(wiring.Component):
    """Requester + the TX frame builder (its packet descriptors and gather chunks) + HostMemory
    (2 read clients: WQEs, gather) + KeyCache (1 lookup port), context and the builder's path
    table served by the bench."""

    def __init__(self, width, num_qp=NUM_QP, ring_depth=None):
        self.width, self.num_qp, self.ring_depth = width, num_qp, ring_depth
        super().__init__({
            "axi": Out(AxiSignature(width)),
            "tx": Out(BeatStream(width)),
            "sq_db": In(stream.Signature(doorbell_layout)),
            "qp_set": In(stream.Signature(qp_set_layout)),
            "qp_arg": In(stream.Signature(qp_arg_layout)),
            "ctx_req": Out(QpnStream()),
            "ctx_resp": In(stream.Signature(req_ctx_layout)),
            "ack": In(stream.Signature(ack_layout)),
            "key": Out(CommandSignature()),
            "cpl": Out(stream.Signature(cpl_layout)),
            "fault": Out(QpnStream()),
            "local_mac": In(48),
            "local_ip": In(32),
            "us_cycles": In(8),
            "retx": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.req = req = Requester(width=self.width, num_qp=self.num_qp,
                                           ring_depth=self.ring_depth)
        m.submodules.build = build = TxBuild(self.width, num_qp=self.num_qp)
        m.submodules.hm = hm = HostMemory(width=self.width, read_clients=2, write_clients=0,
                                          max_reads=4, read_buffer=64)
        m.submodules.kc = kc = KeyCache(key_entries=8, num_ports=1)
        wiring.connect(m, wiring.flipped(self.axi), hm.axi)
        wiring.connect(m, req.wqe_rd, hm.read_0)
        wiring.connect(m, build.rd, hm.read_1)
        wiring.connect(m, req.pkt, build.pkt)
        wiring.connect(m, req.chunk, build.chunk)
        wiring.connect(m, build.tx, wiring.flipped(self.tx))
        wiring.connect(m, build.fault, wiring.flipped(self.fault))
        wiring.connect(m, kc.lookup0, req.lookup)
        wiring.connect(m, kc.cmd, wiring.flipped(self.key))
        for name in ("ctx_req", "cpl"):
            wiring.connect(m, getattr(req, name), wiring.flipped(getattr(self, name)))
        for name in ("sq_db", "qp_set", "ctx_resp", "ack"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(req, name))
        # the builder's path table, written by the bench (always ready)
        m.d.comb += [build.qp_arg.valid.eq(self.qp_arg.valid),
                     build.qp_arg.payload.eq(self.qp_arg.payload), self.qp_arg.ready.eq(1)]
        m.d.comb += [build.local_mac.eq(self.local_mac), build.local_ip.eq(self.local_ip),
                     self.retx.eq(req.retx)]
        # us_tick every us_cycles cycles, as the top derives it from US_CYCLES
        cnt = Signal(8)
        m.d.sync += cnt.eq(cnt + 1)
        with m.If(cnt + 1 >= self.us_cycles):
            m.d.sync += cnt.eq(0)
            m.d.comb += req.us_tick.eq(1)
        return m


def _run(width, window, label, test="frames", us=2, num_qp=NUM_QP, simulator=None,
         ring_depth=None):
    params = {"width": width} if num_qp == NUM_QP else {"width": width, "num_qp": num_qp}
    if ring_depth is not None:
        params["ring_depth"] = ring_depth
    run_cocotb("requester", lambda: flat_top_axi(ReqHarness(width, num_qp, ring_depth)),
               params=params, test_module="tb.blocks.cocotb_requester", simulator=simulator,
               extra_env={"REQUESTER_WIDTH": str(width),
                          "REQUESTER_WINDOW_TEST": str(int(window)), "REQUESTER_TEST_GROUP": test,
                          "REQUESTER_US_CYCLES": str(us), "REQUESTER_NUM_QP": str(num_qp),
                          "REQUESTER_RING_DEPTH": str(ring_depth or 0)},
               test_name=f"w{width}-{label}")


@pytest.mark.parametrize("width", [64, 512])
def test_requester(width):
    """Doorbell in RTR then RTS, segmentation sweep, ACKs and completions, errors, payload fault."""
    _run(width, False, "short")


@pytest.mark.parametrize("width", [64])
def test_requester_retry(width):
    """Reliability Engine: lost request (timer), lost ACK, go-back-N mid-message, RNR then
    recovery, RNR and retry exhaustion, NAK 0x61/0x62/0x63/reserved, SET_QP to ERROR in flight;
    frames and completions against sim/models/requester.py SendQp, timer gaps in cycles."""
    _run(width, False, "retry", test="retry")


def test_requester_read_parked():
    """A READ whose request waits for PSN room after its PSN count was made, and another QP's
    WRITE sent meanwhile: one PSN a packet; the READ then at its PSN and the next WQE after its
    responses' PSNs (~6,000 cycles at W=64)."""
    _run(64, False, "read-parked", test="readpark")


def test_requester_ring():
    """The shared in-flight ring at 16 entries beyond the QPs' own (ring_depth 32, N = 16): the
    WQEs beyond it wait and go as ACKs give entries back; a reset QP and a QP ended by a NAK
    give theirs back (16 in flight again)."""
    _run(64, False, "ring", test="ring", ring_depth=32)


@pytest.mark.parametrize("num_qp, us", [(256, 4),
                                        pytest.param(4096, 25, marks=pytest.mark.full)])
def test_requester_timers(num_qp, us):
    """Retransmit (timeout 8, 1.05 ms) and RNR (code 14, 1.28 ms) timers on 16 QPs spread over
    the QPN space, idle then under a continuous ACK stream: never early, within twice the
    value (interface.md §6), and within docs/requester.md's scan bound. N = 4096 at US_CYCLES
    25 (a 25 MHz clock; Verilator, ~76,000 cycles: -m full); N = 256 at US_CYCLES 4 (Icarus),
    where 1 ms is ~4,200 cycles, less than a scan of more than ~8 cycles per QP can meet."""
    _run(64, False, f"timers-n{num_qp}-us{us}", test="timers", us=us, num_qp=num_qp,
         simulator="verilator" if num_qp > 256 else None)


@pytest.mark.full
@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_requester_full(width):
    """The same plus the 129-packet message against the 128-PSN window (~45,000 cycles at W=64;
    Icarus needs ~3 minutes at W=512)."""
    _run(width, True, "full")


# ---- the Python model against roce-reference.md ------------------------------------------------

def test_model_reference_s2():
    """§7 S2: SEND 2500 B at PMTU 1024: FIRST, MIDDLE (AckReq 0), LAST 452 B (AckReq 1)."""
    pkts, noack = model.segment(model.SEND, 2500, 1024, psn=0xFFFFFF)
    assert [(p["opcode"], p["psn"], p["len"], p["padcnt"], p["ackreq"]) for p in pkts] == [
        (0x00, 0xFFFFFF, 1024, 0, 0), (0x01, 0, 1024, 0, 0), (0x02, 1, 452, 0, 1)]
    assert noack == 0


def test_model_opcodes_and_headers():
    imm = bytes([0xDE, 0xAD, 0xBE, 0xEF])
    (p,), _ = model.segment(model.SEND_WITH_IMM, 10, 256, flags=model.SOLICITED, imm=imm)
    assert (p["opcode"], p["se"], p["padcnt"], p["imm"]) == (0x05, 1, 2, imm)   # §7 S3
    (p,), _ = model.segment(model.SEND_WITH_INV, 0, 256, imm=(0x1234).to_bytes(4, "little"))
    assert (p["opcode"], p["imm"], p["len"]) == (0x17, bytes([0, 0, 0x12, 0x34]), 0)
    pkts, _ = model.segment(model.RDMA_WRITE, 600, 256, flags=model.SOLICITED, raddr=5, rkey=7)
    assert [p["opcode"] for p in pkts] == [0x06, 0x07, 0x08]
    assert pkts[0]["reth"] == dict(va=5, rkey=7, dmalen=600) and pkts[1]["reth"] is None
    assert [p["se"] for p in pkts] == [0, 0, 0]                 # SE: SEND and WRITE_WITH_IMM only
    pkts, _ = model.segment(model.RDMA_WRITE_WITH_IMM, 256, 256, flags=model.SOLICITED, imm=imm)
    assert [(p["opcode"], p["se"]) for p in pkts] == [(0x0B, 1)]
    assert pkts[0]["reth"]["dmalen"] == 256 and pkts[0]["imm"] == imm
    pkts, _ = model.segment(model.SEND_WITH_INV, 257, 256)
    assert [p["opcode"] for p in pkts] == [0x00, 0x16]          # no IETH on FIRST


def test_model_ackreq_66th():
    """AckReq on the 66th consecutive packet without it (rxe), counting across messages."""
    pkts, noack = model.segment(model.SEND, 100 * 256, 256)
    assert [i for i, p in enumerate(pkts) if p["ackreq"]] == [65, 99] and noack == 0
    pkts, noack = model.segment(model.SEND, 30 * 256, 256, noack=40)
    assert [i for i, p in enumerate(pkts) if p["ackreq"]] == [25, 29]


def test_model_wqe_layout():
    b = model.wqe_bytes(0x0102030405060708, 4, 3, [(0x1000, 5, 0xAB), (0x2000, 6, 0xCD)],
                        imm=b"\x11\x22\x33\x44", raddr=0xFEDC, rkey=0x99)
    assert len(b) == 64 and b[8:12] == bytes([4, 3, 2, 0]) and b[12:16] == b"\x11\x22\x33\x44"
    assert int.from_bytes(b[16:24], "little") == 0xFEDC
    assert int.from_bytes(b[24:28], "little") == 0x99
    assert int.from_bytes(b[32:40], "little") == 0x1000 and int.from_bytes(b[56:60], "little") == 6


def test_parameters_refused():
    with pytest.raises(ValueError):
        Requester(width=48)
    with pytest.raises(ValueError):
        Requester(width=64, num_qp=6)


def test_requester_starve():
    """Completer liveness: ACKs of one QP completed within docs/requester.md's bound while
    doorbells of another QP keep the engine reloading it through the shared read port."""
    _run(64, False, "starve", test="starve")
