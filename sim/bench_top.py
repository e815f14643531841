"""Benchmarks of the whole ``rnic`` top (registered by :mod:`sim.benches`).

They run on the configuration of the top's scenario tests (``tb/system/test_responder.py``: 16 QPs,
4 CQs, 16 key slots) under the build name ``rnic``, so the Verilog and the Verilator model
are the ones those tests already built (``sim/runner.py`` caches by name, parameters and RTL).
"""

from .bench import BENCH_ENV, BENCHES
from .runner import Core, run_cocotb

__all__ = ["top_config", "top_bench"]


def top_config(width):
    from rnic.params import RnicConfig
    return RnicConfig(data_width=width, num_qp=16, num_cq=4, key_entries=16)


def top_bench(name, width, *, test_module, testcase, extra_env=None):
    """Register a cocotb benchmark ``name`` of the ``rnic`` top at data width ``width``."""
    def run(simulator, out_path):
        cfg = top_config(width)
        run_cocotb("rnic", Core(cfg), toplevel="rnic", params=cfg.as_dict(),
                   test_module=test_module, testcase=testcase, simulator=simulator,
                   extra_env={**(extra_env or {}), BENCH_ENV: str(out_path)},
                   test_name=f"bench-{name}-{simulator}")
    BENCHES[name] = run
    return run
