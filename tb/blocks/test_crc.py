"""CRC-32 unit against zlib at every width and every tkeep on the last beat (cocotb, Icarus)."""
import zlib

import pytest

import random

from rnic.crc import (CRC32, crc_fixed_word, crc_init_before, crc_init_skipping, crc32_update,
                      CRC_INIT)
from rnic.rx.parse import ICRC_RESIDUE
from sim.runner import run_cocotb
from sim.wrap import flat_top


#: (skip, check, end_mod4, latency): the generator and the checker at their least latency; the
#: generator told every packet's length modulo 4 (the TX builder's 2, and 0); a checker delayed
#: by one cycle and more (its compare's halves registered: RX Parse's 4 is one above the least
#: above W=128, two at W <= 128)
CASES = [(0, False, None, None), (14, False, None, None), (0, True, None, None),
         (14, True, None, None), (14, False, 2, None), (0, False, 0, None), (14, True, None, 7),
         (14, True, None, 4)]


#: the cases the core instantiates (RX Parse's delayed checker, the TX builder's generator), run
#: at every width; every case runs at the two extreme widths, the rest under make regress-full
CORE_CASES = [(14, True, None, 4), (14, False, 2, None)]


def _crc_cases():
    for width in (64, 128, 256, 512):
        for case in CASES:
            full = width in (128, 256) and case not in CORE_CASES
            yield pytest.param(width, *case, marks=[pytest.mark.full] if full else [],
                               id=f"{width}-{'-'.join(map(str, case))}")


@pytest.mark.parametrize("width,skip,check,end4,lat", list(_crc_cases()))
def test_crc(width, skip, check, end4, lat):
    """The CRC (``check``: the residue checker, good and corrupted packets) against zlib, with
    every packet's result ``latency`` cycles after its last beat; with ``end4``, packets of
    those lengths only."""
    init = crc_init_skipping(14, b"\xff" * 8) if skip else CRC_INIT
    residue = ICRC_RESIDUE if check else None

    def unit():
        return CRC32(width, init=init, residue=residue, end_mod4=end4, latency=lat)
    run_cocotb("crc", lambda: flat_top(unit()),
               params={"width": width, "init": init, "residue": residue, "end4": end4,
                       "latency": lat},
               test_module="tb.blocks.cocotb_crc",
               extra_env={"CRC_WIDTH": str(width), "CRC_SKIP_BYTES": str(skip),
                          "CRC_CHECKER": str(int(check)), "CRC_LATENCY": str(unit().latency),
                          "CRC_END_MOD4": "" if end4 is None else str(end4)},
               test_name=f"w{width}-s{skip}-c{int(check)}-e{end4}-l{lat}")


def test_latencies():
    """The least latencies the units promise (RX Parse and the TX builder count on them)."""
    for w, gen, chk, tx in ((64, 4, 2, 3), (128, 5, 2, 3), (256, 6, 3, 5), (512, 7, 3, 5)):
        assert CRC32(w).latency == gen
        assert CRC32(w, residue=ICRC_RESIDUE).latency == chk
        assert CRC32(w, end_mod4=2).latency == tx


def test_residue_constant():
    # zlib.crc32 of any message followed by its own CRC-32 (little-endian)
    for m in (b"", b"123456789", bytes(range(200))):
        assert zlib.crc32(m + zlib.crc32(m).to_bytes(4, "little")) == ICRC_RESIDUE


def test_refuses_bad_residue():
    for r in (-1, 1 << 32, "x"):
        with pytest.raises(ValueError):
            CRC32(64, residue=r)


def test_refuses_bad_end_and_latency():
    for kw in ({"end_mod4": 4}, {"end_mod4": -1}, {"latency": 7}, {"latency": 1},
               {"residue": ICRC_RESIDUE, "latency": 1}, {"residue": ICRC_RESIDUE, "latency": "7"}):
        with pytest.raises(ValueError):
            CRC32(64, **kw)


def test_skip_init_model():
    # the skipping init reproduces a prefix: 14 zero bytes from it == 8 x 0xFF from INIT
    init = crc_init_skipping(14, b"\xff" * 8)
    assert crc32_update(init, bytes(14)) == crc32_update(CRC_INIT, b"\xff" * 8)


def test_whole_beats_model():
    """The TX builder's whole-beat feed (``whole``): a stream of 14 + 4·n bytes + 2 started
    behind s = 2 mod 4 bytes of ``y`` repeated (``y`` the fixed word of the register before the
    Ethernet header), from ``crc_init_before(y[2:], ·)``, ends where the stream alone does, for
    every shift a width allows; and the unit has no correction stage then."""
    start = crc_init_skipping(14, b"\xff" * 8)
    y = crc_fixed_word(start)
    assert crc32_update(start, y) == start
    init = crc_init_before(y[2:], start)
    rng = random.Random(5)
    for nb in (8, 16, 32, 64):
        lead = bytes(y[i % 4] for i in range(nb))
        for s in range(2, nb, 4):
            body = bytes(14) + rng.randbytes(4 * rng.randint(10, 40) + 2)
            assert (crc32_update(init, lead[nb - s:] + body)
                    == crc32_update(start, body))
    for w, lat in ((64, 2), (128, 2), (256, 3), (512, 3)):
        assert CRC32(w, whole=True, premasked=True).latency == lat
        if w <= 128:
            assert CRC32(w, whole=True, premasked=True, fold=True).latency == lat - 1
