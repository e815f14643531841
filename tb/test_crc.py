"""CRC-32 unit against zlib at every width and every tkeep on the last beat (cocotb, Icarus)."""
import zlib

import pytest

from rnic.crc import CRC32, crc_init_skipping, crc32_update, CRC_INIT
from rnic.rx.parse import ICRC_RESIDUE
from sim.runner import run_cocotb
from sim.wrap import flat_top


@pytest.mark.parametrize("width", [64, 128, 256, 512])
@pytest.mark.parametrize("skip", [0, 14])
@pytest.mark.parametrize("check", [False, True])
def test_crc(width, skip, check):
    """The CRC (``check``: the residue checker, good and corrupted packets) against zlib, with
    every packet's result ``latency`` cycles after its last beat."""
    init = crc_init_skipping(14, b"\xff" * 8) if skip else CRC_INIT
    residue = ICRC_RESIDUE if check else None
    latency = CRC32(width, init=init, residue=residue).latency
    run_cocotb("crc", lambda: flat_top(CRC32(width, init=init, residue=residue)),
               params={"width": width, "init": init, "residue": residue},
               test_module="tb.cocotb_crc",
               extra_env={"CRC_WIDTH": str(width), "CRC_SKIP": str(skip),
                          "CRC_CHECK": str(int(check)), "CRC_LATENCY": str(latency)},
               test_name=f"w{width}-s{skip}-c{int(check)}")


def test_residue_constant():
    # zlib.crc32 of any message followed by its own CRC-32 (little-endian)
    for m in (b"", b"123456789", bytes(range(200))):
        assert zlib.crc32(m + zlib.crc32(m).to_bytes(4, "little")) == ICRC_RESIDUE


def test_refuses_bad_residue():
    for r in (-1, 1 << 32, "x"):
        with pytest.raises(ValueError):
            CRC32(64, residue=r)


def test_skip_init_model():
    # the skipping init reproduces a prefix: 14 zero bytes from it == 8 x 0xFF from INIT
    init = crc_init_skipping(14, b"\xff" * 8)
    assert crc32_update(init, bytes(14)) == crc32_update(CRC_INIT, b"\xff" * 8)
