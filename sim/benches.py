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


def _register():
    from rnic.rx import RxParse
    from sim.wrap import flat_top

    for w in (64, 128, 256, 512):
        cocotb_bench(f"rx_parse-w{w}", lambda w=w: flat_top(RxParse(width=w)),
                     test_module="tb.cocotb_rx_parse", testcase=["benchmark"],
                     params={"width": w}, extra_env={"RXP_WIDTH": str(w)})

    def psn_factory(w):
        from tb.test_psn_check import PsnBench
        return flat_top(PsnBench(w))

    def exe_factory(w):
        from tb.test_axi_master import flat_top_axi
        from tb.test_execute import ExecuteBench
        return flat_top_axi(ExecuteBench(w))

    for w in (64, 512):
        cocotb_bench(f"psn_check-w{w}", lambda w=w: psn_factory(w),
                     test_module="tb.cocotb_psn_check", testcase=["benchmark"],
                     params={"width": w}, extra_env={"PSN_WIDTH": str(w)})
        cocotb_bench(f"execute-w{w}", lambda w=w: exe_factory(w),
                     test_module="tb.cocotb_execute", testcase=["bench"],
                     params={"width": w}, extra_env={"EX_WIDTH": str(w), "EX_SEED": "11"})


_register()
