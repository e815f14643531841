"""RX Parse (rnic.rx.RxParse): cocotb on Icarus at every width, plus the Python packet model.

Regression: every test below (~2 min of CPU). ``make regress-full`` (``-m full``) adds the full
opcode × length cross product.
"""
import json
import random

import pytest

from rnic.opcodes import OPCODES, Op
from rnic.rx import RxParse
from sim.packets import build_frame, decode_frame, drop_reason, expected_meta, icrc
from sim.runner import run_cocotb
from sim.wrap import flat_top

WIDTHS = [64, 128, 256, 512]


def widths(*regression):
    """Every width; those not in ``regression`` under make regress-full (every width runs the
    directed set, test_rx_parse, in the regression)."""
    return [w if w in regression else pytest.param(w, marks=pytest.mark.full) for w in WIDTHS]

TESTS = ["good_frames", "icrc_vectors", "icrc_coverage", "drop_1_mac_error",
         "drop_2_not_for_us", "drop_3_bad_ip_udp", "drop_4_bad_icrc", "drop_5_bad_bth",
         "drop_several_reasons", "spacing"]


def _run(width, tests, label, env=None):
    return run_cocotb("rx_parse", lambda: flat_top(RxParse(width=width)),
                      params={"width": width}, test_module="tb.blocks.cocotb_rx_parse",
                      testcase=tests, extra_env={"RX_PARSE_WIDTH": str(width), **(env or {})},
                      test_name=f"w{width}-{label}")


@pytest.mark.parametrize("width", WIDTHS)
def test_rx_parse(width):
    _run(width, TESTS, "all")


@pytest.mark.parametrize("width", widths(64, 128, 512))
def test_rx_parse_trailer(width):
    """Bytes after the IPv4 datagram (trailers, Ethernet padding) are ignored (interface.md §3)."""
    _run(width, ["trailer"], "trailer")


@pytest.mark.parametrize("width", widths(64, 128, 512))
def test_rx_parse_short_prefixes(width):
    """Header bytes past a short frame's end read as 0, not as the previous frame's."""
    _run(width, ["short_prefixes"], "short")


@pytest.mark.parametrize("width", widths(64))
def test_rx_parse_drop_meta_full(width):
    """A dropped frame on the idle path with no room in the meta queue is taken once its
    verdict is queued, not in the verdict's cycle, and still while ``meta`` is blocked."""
    _run(width, ["drop_meta_full"], "dropfull")


@pytest.mark.parametrize("width", widths(64))
def test_rx_parse_max_frames_backpressure(width):
    """Maximum frames back to back through a buffer of one maximum frame, back-pressured."""
    _run(width, ["max_frames_backpressure"], "maxbp")


@pytest.mark.parametrize("width", widths(64, 512))
def test_rx_parse_max_then_min(width):
    """Minimum frames behind a maximum frame never stall the input (the descriptor slots)."""
    _run(width, ["max_then_min_frames"], "maxmin")


@pytest.mark.parametrize("width", widths(64, 512))
def test_rx_parse_benchmark(width, tmp_path):
    out = tmp_path / "bench.json"
    _run(width, ["benchmark"], "bench", {"RX_PARSE_BENCH_FILE": str(out)})
    res = json.loads(out.read_text())
    print(f"RX Parse W={width}: {res}")
    for name in ("min60", "min62_1B", "max"):
        assert res[name]["beats_per_cycle"] == 1.0, (name, res[name])


@pytest.mark.full
@pytest.mark.parametrize("width", WIDTHS)
def test_rx_parse_full(width):
    _run(width, ["good_frames"], "full", {"RX_PARSE_FULL": "1"})


# ---- Python side: the packet model against the reference vectors and scapy -------------------

VECTOR_DATAGRAMS = {      # roce-reference.md §1.6: IP header .. pad, ICRC wire bytes
    "1": ("45010040047840004011b4d5c0a80007c0a80007c00012b7002caca22460ffff000000d300cf1710"
          "4630818be28935d90e9a95505401be885e500000", "78f353f3"),
    "2": ("45c2003c718c400040119161" "0a0011010a001201" "000012b700280000"
          "8100ffff4000011800000000" + "00" * 16, "82fd002a"),
    "A": ("4502003412344000401114810a0000010a000002c12312b700200000"
          "0430ffff00000011800001000102030405000000", "425ef66b"),
    "B": ("45020030432140004011e3970a0000020a000001c45612b7001c0000"
          "1100ffff00000012000001001f000001", "e6ab38b4"),
    "C": ("45020038123540004011147c0a0000010a000002c12312b700240000"
          "1780ffff000000118000010100001234aaaaaaaaaaaaaaaa", "3992d146"),
    "D": ("6021234500201140fe80" + "00" * 13 + "01fe80" + "00" * 13 + "02"
          "c12312b700200000" "0430ffff00000011800001000102030405000000", "476416cb"),
}


@pytest.mark.parametrize("name", list(VECTOR_DATAGRAMS))
def test_icrc_model_vectors(name):
    dgram, want = VECTOR_DATAGRAMS[name]
    assert icrc(bytes.fromhex(dgram)).hex() == want


def test_packets_scapy_roundtrip():
    rng = random.Random(1)
    for op in OPCODES:
        for n in (0, 1, 5, 64):
            f = build_frame(op, rng.randbytes(n), psn=rng.getrandbits(24), imm=7, ieth=9,
                            reth=dict(va=1, rkey=2, dmalen=3), aeth=dict(syndrome=0x1F, msn=4))
            d = decode_frame(f)
            assert d["icrc_ok"] and drop_reason(f) == 0 and len(f) >= 60
            assert len(d["payload"]) == n and expected_meta(f)["payload_len"] == n
            assert d["bth"]["opcode"] == op and d["bth"]["padcnt"] == (-n) & 3
    assert len(build_frame(Op.SEND_ONLY)) == 60


def test_drop_reason_trailer():
    """The model ignores bytes after the datagram; frames shorter than the datagram, shorter than
    60 bytes or longer than 4,200 bytes count 3."""
    rng = random.Random(2)
    for op in (Op.SEND_ONLY, Op.ACKNOWLEDGE, Op.RDMA_WRITE_ONLY):
        for n in (0, 1, 7, 100):
            d = build_frame(op, rng.randbytes(n), min_len=0)
            ref = d.ljust(60, b"\0")
            assert drop_reason(ref) == 0
            for t in list(range(1, 41)) + [64, 1000, 4200 - len(d)]:
                f = (d + rng.randbytes(t)).ljust(60, b"\xa5")
                assert drop_reason(f) == 0 and expected_meta(f) == expected_meta(ref), (op, n, t)
                assert decode_frame(f)["payload"] == decode_frame(ref)["payload"]
            assert drop_reason(d + bytes(4201 - len(d))) == 3
            assert drop_reason(d[:-1]) == 3         # truncated
            if len(d) < 60:
                assert drop_reason(d) == 3          # runt


@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_bad_parameters():
    with pytest.raises(ValueError):
        RxParse(width=32)
    with pytest.raises(ValueError):
        RxParse(width=64, buffer_frames=0)
