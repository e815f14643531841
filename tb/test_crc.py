"""CRC-32 unit against zlib at every width and every tkeep on the last beat (cocotb, Icarus)."""
import pytest

from rnic.crc import CRC32, crc_init_skipping, crc32_update, CRC_INIT
from sim.runner import run_cocotb
from sim.wrap import flat_top


@pytest.mark.parametrize("width", [64, 128, 256, 512])
@pytest.mark.parametrize("skip", [0, 14])
def test_crc(width, skip):
    init = crc_init_skipping(14, b"\xff" * 8) if skip else CRC_INIT
    run_cocotb("crc", lambda: flat_top(CRC32(width, init=init)),
               params={"width": width, "init": init}, test_module="tb.cocotb_crc",
               extra_env={"CRC_WIDTH": str(width), "CRC_SKIP": str(skip)},
               test_name=f"w{width}-s{skip}")


def test_skip_init_model():
    # the skipping init reproduces a prefix: 14 zero bytes from it == 8 x 0xFF from INIT
    init = crc_init_skipping(14, b"\xff" * 8)
    assert crc32_update(init, bytes(14)) == crc32_update(CRC_INIT, b"\xff" * 8)
