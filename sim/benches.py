"""The registered benchmarks (``make bench`` / ``rnic bench``); each records figures through
:func:`sim.bench.record` from a cocotb test run with $RNIC_BENCH_OUT set."""

from .bench import BENCH_ENV, BENCHES
from .runner import run_cocotb

__all__ = ["cocotb_bench"]


def cocotb_bench(name, factory, *, test_module, testcase, params, extra_env=None,
                 toplevel="dut"):
    """Register a cocotb benchmark under ``name``."""
    def run(simulator, out_path):
        run_cocotb(f"bench-{name}", factory, test_module=test_module, testcase=testcase,
                   params=params, toplevel=toplevel, simulator=simulator,
                   extra_env={**(extra_env or {}), BENCH_ENV: str(out_path)},
                   test_name=f"bench-{simulator}")
    BENCHES[name] = run
    return run
