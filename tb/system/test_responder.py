"""The responder end to end at the `rnic` top: the book's walk-throughs (cocotb)."""
import pytest

from rnic.params import RnicConfig
from sim.knobs import knob
from sim.runner import Core, run_cocotb

CONFIGS = {"w64": RnicConfig(num_qp=16, num_cq=4, key_entries=16),
           "w512": RnicConfig(data_width=512, num_qp=16, num_cq=4, key_entries=16)}
TESTS = ["send_9_steps", "send_with_immediate", "send_with_invalidate_then_stale_write",
         "rnr_then_success", "s2_multi_packet_send", "s5_s6_sequence_nak_and_duplicate",
         "s8a_middle_without_first", "s9_buffer_too_small", "s10_refused_invalidate",
         "s11b_s11c_writes", "s8bcd_sequence_and_length_errors"]


def _scenario_cases():
    """W=64 on Icarus (at W=512 Icarus runs them back-pressured,
    test_responder_backpressure); the other three under make regress-full."""
    for cfg in CONFIGS:
        for sim in ("icarus", "verilator"):
            marks = [] if (cfg, sim) == ("w64", "icarus") else [pytest.mark.full]
            yield pytest.param(cfg, sim, marks=marks, id=f"{sim}-{cfg}")


@pytest.mark.parametrize("cfg, simulator", list(_scenario_cases()))
def test_responder_scenarios(cfg, simulator):
    c = CONFIGS[cfg]
    run_cocotb("rnic", Core(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.system.cocotb_responder", testcase=TESTS, simulator=simulator,
               test_name=f"resp-{cfg}-{simulator}", ports_only=True)


@pytest.mark.parametrize("cfg", [c if c == "w64" else pytest.param(c, marks=pytest.mark.full)
                                 for c in CONFIGS])
def test_responder_backpressure(cfg):
    """The same walk-throughs with a hostile host memory: random latency, reordering and
    back-pressure on every AXI channel (W=64; the other widths under make regress-full)."""
    c = CONFIGS[cfg]
    run_cocotb("rnic", Core(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.system.cocotb_responder", testcase=TESTS,
               extra_env={"RESP_BACKPRESSURE": "1"}, test_name=f"resp-bp-{cfg}",
               ports_only=True)


# ---- the block trace (sim/trace.py) ------------------------------------------------------------
TRACE_TESTS = ["send_9_steps", "send_with_immediate", "send_with_invalidate_then_stale_write"]


def _trace_run(simulator, tests, label):
    import os
    import shutil
    from pathlib import Path

    from sim.runner import ROOT
    c = CONFIGS["w64"]
    waves = knob("RNIC_WAVES")
    out = ROOT / "build" / "trace"
    params = {**c.as_dict(), "waves": True} if waves else c.as_dict()
    test_dir = run_cocotb("rnic", Core(c), toplevel="rnic", params=params,
                          test_module="tb.system.cocotb_responder", testcase=tests,
                          simulator=simulator,
                          test_name=label, waves=waves,
                          extra_env={"RNIC_TRACE": "1", "RNIC_TRACE_DIR": str(out)})
    if waves:                            # keep the waveform beside the trace and the pcaps
        here = [Path(test_dir), Path(test_dir).parent.parent / simulator]   # Icarus: build dir
        for w in [w for d in here for pat in ("*.fst", "*.vcd") for w in d.glob(pat)]:
            shutil.copy(w, out / f"w64-{simulator}" / f"{label}-{w.name}")
    return out / f"w64-{simulator}"


# Verilator's run (a model build of its own, about 80 s) is in make regress-full; the regression
# keeps Icarus's.
@pytest.mark.parametrize("simulator", ["icarus",
                                       pytest.param("verilator", marks=pytest.mark.full)])
def test_responder_trace(simulator):
    """The trace sees inside the top on both simulators: the 9-step SEND passes the blocks in
    the book's order, and the SEND with Invalidate passes the invalidate step."""
    import json
    from sim.trace import load, steps
    d = _trace_run(simulator, TRACE_TESTS, f"trace-{simulator}")
    _, secs = load(d / "send_9_steps.jsonl")
    (sec,) = [s for s in secs if s["title"].startswith("The 9-step SEND")]
    first = {}
    for s in steps(sec):
        first.setdefault(s["key"], s["first"])
    order = ["rx_in", "rx_meta", "psn_exe", "wr_data", "complete", "cqe_data"]
    assert all(k in first for k in order + ["rq_db", "rq_rd", "rq_data", "key_req", "key_resp",
                                            "ack_build", "tx_out"]), first
    assert [first[k] for k in order] == sorted(first[k] for k in order), first
    # WQE prefetch: the receive WQE is read on its doorbell, ahead of the frame
    assert first["rq_db"] < first["rq_rd"] < first["rq_data"] < first["wr_data"], first
    assert first["rq_rd"] < first["rx_meta"], first
    assert first["rq_data"] < first["key_req"] < first["key_resp"] < first["wr_data"], first
    assert first["psn_exe"] < first["ack_build"] <= first["tx_out"], first
    _, secs = load(d / "send_with_invalidate_then_stale_write.jsonl")
    (inv,) = [s for s in secs if s["title"].startswith("SEND with Invalidate")]
    keys = [s["key"] for s in steps(inv)]
    assert "inval_req" in keys and "inval_resp" in keys, keys
    (stale,) = [s for s in secs if s["title"].startswith("The stale WRITE")]
    keys = [s["key"] for s in steps(stale)]
    assert "wr_data" not in keys and "tx_out" in keys, keys
    # the pcap holds the frames both ways: SEND in, ACK out
    from scapy.all import rdpcap
    assert len(rdpcap(str(d / "send_9_steps.pcap"))) == 2
    json.loads((d / "send_9_steps.jsonl").read_text().splitlines()[0])


@pytest.mark.full
def test_responder_trace_every_scenario():
    """Traces (and with RNIC_WAVES=1 waveforms) of every responder scenario."""
    _trace_run("icarus", TESTS, "trace-all-icarus")


def test_responder_rate():
    """Back-to-back 0-byte SEND_ONLY at the top (W=64, WQEs posted ahead): at least 0.85 beats
    per cycle on one QP and 0.88 on 8 QPs round robin, which the WQE prefetch must keep up
    (the responder bench of ``rnic bench resp_top-w64`` with its figures asserted). On the
    ports-only Verilator model of test_top's W=64 case: a rate does not depend on the
    simulator, and Icarus takes a minute over it."""
    c = CONFIGS["w64"]
    run_cocotb("rnic", Core(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.system.cocotb_resp_bench", testcase=["bench"],
               extra_env={"RESP_BENCH_PAYLOADS": "0", "RESP_BENCH_MIN_RATE": "0.85,0.88"},
               simulator="verilator", test_name="resp-rate-w64", ports_only=True)
