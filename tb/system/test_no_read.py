"""The core built without RDMA READ (``RnicConfig(read=False)``, ``rnic generate --no-read``):
contract version 1.0 for READ at the `rnic` top (cocotb, `tb/system/cocotb_no_read.py`)."""

from rnic.params import RnicConfig
from sim.runner import Core, run_cocotb

CONFIG = RnicConfig(num_qp=16, num_cq=4, key_entries=16, read=False)
TESTS = ["no_read_responder", "no_read_requester"]


def test_no_read():
    run_cocotb("rnic", Core(CONFIG), toplevel="rnic", params=CONFIG.as_dict(),
               test_module="tb.system.cocotb_no_read", testcase=TESTS, test_name="no-read-w64",
               ports_only=True)
