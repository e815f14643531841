"""The registered benchmarks (``make bench`` / ``rnic bench``); each records figures through
:func:`sim.bench.record` from a cocotb test run with $RNIC_BENCH_OUT set."""

from .bench import BENCH_ENV, BENCHES, RDLAT_ENV
from .runner import run_cocotb

__all__ = ["cocotb_bench"]


def cocotb_bench(name, factory, *, test_module, testcase, params, extra_env=None,
                 toplevel="dut", build=None):
    """Register a cocotb benchmark under ``name``; ``build`` names a test's build to share
    (same factory and params) instead of a build of its own."""
    def run(simulator, out_path):
        run_cocotb(build or f"bench-{name}", factory, test_module=test_module, testcase=testcase,
                   params=params, toplevel=toplevel, simulator=simulator,
                   extra_env={**(extra_env or {}), BENCH_ENV: str(out_path)},
                   test_name=f"bench-{name}-{simulator}")
    BENCHES[name] = run
    return run


def _register():
    from rnic.rx import RxParse
    from sim.wrap import flat_top

    for w in (64, 128, 256, 512):
        cocotb_bench(f"rx_parse-w{w}", lambda w=w: flat_top(RxParse(width=w)),
                     test_module="tb.blocks.cocotb_rx_parse", testcase=["benchmark"],
                     params={"width": w}, extra_env={"RX_PARSE_WIDTH": str(w)})

    def psn_factory(w):
        return flat_top(PsnBench(w))

    def exe_factory(w, prefetch=4):
        from .bench_tops import ExecuteBench, flat_top_axi
        return flat_top_axi(ExecuteBench(w, prefetch))

    from .bench_tops import PsnBench
    for w in (64, 128, 256, 512):
        cocotb_bench(f"psn_check-w{w}", lambda w=w: psn_factory(w),
                     test_module="tb.blocks.cocotb_psn_check", testcase=["benchmark"],
                     params={"width": w, "bench": PsnBench.REV},
                     extra_env={"PSN_CHECK_WIDTH": str(w)})

    # execute: zero-wait host memory and 100 cycles of read latency at every width; at W = 64
    # and 512 also without the WQE prefetch (prefetch=0) for comparison
    for w in (64, 128, 256, 512):
        for pf in ((4, 0) if w in (64, 512) else (4,)):
            for lat in ((100,) if pf == 0 else (0, 100)):
                cocotb_bench(f"execute-w{w}-rd{lat}" + ("-noprefetch" if pf == 0 else ""),
                             lambda w=w, pf=pf: exe_factory(w, pf),
                             test_module="tb.blocks.cocotb_execute", testcase=["bench"],
                             params={"width": w, "prefetch": pf},
                             extra_env={"EXECUTE_WIDTH": str(w), "EXECUTE_SEED": "11",
                                        "EXECUTE_PREFETCH": str(pf),
                                        "EXECUTE_READ_LATENCY": str(lat)})

    # two cores on one wire: goodput A -> B at every width (W = 64 and 512 share the build of
    # tb/system/test_two_rnic.py; 128 and 256 use the same configuration at their width)
    def pair_config(w):
        from rnic.params import RnicConfig
        return RnicConfig(data_width=w, num_qp=16, num_cq=4, key_entries=16)

    def pair_factory(w):
        from sim.pair import RnicPair
        return RnicPair(pair_config(w))

    # ... and with 100 cycles of host read latency (WQE fetch and gather on A, WQE fetch on B)
    for w in (64, 128, 256, 512):
        for lat in (0, 100):
            cocotb_bench(f"pair-w{w}" + (f"-rd{lat}" if lat else ""),
                         lambda w=w: pair_factory(w), test_module="tb.system.cocotb_two_rnic",
                         testcase=["goodput"], params=pair_config(w).as_dict(),
                         toplevel="rnic_pair", build="pair",
                         extra_env={RDLAT_ENV: str(lat)} if lat else None)
        # RDMA READ A <- B: the responses' share of the wire
        cocotb_bench(f"read_pair-w{w}", lambda w=w: pair_factory(w),
                     test_module="tb.system.cocotb_read_pair", testcase=["read_goodput"],
                     params=pair_config(w).as_dict(), toplevel="rnic_pair", build="pair")


_register()


def _register_top():
    from .bench_top import top_bench

    for w in (64, 128, 256, 512):
        for lat in (0, 100):
            top_bench(f"resp_top-w{w}" + (f"-rd{lat}" if lat else ""), w,
                      test_module="tb.system.cocotb_resp_bench", testcase=["bench"],
                      extra_env={RDLAT_ENV: str(lat)} if lat else None)
        # RDMA READ as responder: latency and goodput of its responses
        top_bench(f"read_top-w{w}", w, test_module="tb.system.cocotb_read", testcase=["read_bench"])


_register_top()
