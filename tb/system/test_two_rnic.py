"""Two `rnic` cores on a clean wire: the requester end to end (cocotb, Icarus and Verilator)."""
import shutil
from pathlib import Path

import pytest

from rnic.params import RnicConfig
from sim.knobs import knob
from sim.pair import RnicPair
from sim.runner import ROOT, run_cocotb, run_fast_verilator

CONFIGS = {"w64": RnicConfig(num_qp=16, num_cq=4, key_entries=16),
           "w512": RnicConfig(data_width=512, num_qp=16, num_cq=4, key_entries=16)}
DIRECTED = ["send_13_steps", "send_with_immediate", "send_with_invalidate", "rdma_write",
            "rdma_write_with_imm", "zero_length_send", "doorbells_in_reset_ignored"]


def _run(cfg, simulator, tests, name, env=None, module="tb.system.cocotb_two_rnic", waves=False):
    """Run cocotb ``tests`` of ``module`` on the two-core build of ``cfg`` (shared); returns the
    run directory. They drive and watch only the pair's ports (``ports_only``)."""
    c = CONFIGS[cfg]
    params = {**c.as_dict(), "waves": True} if waves else c.as_dict()
    return run_cocotb("pair", lambda: RnicPair(c), toplevel="rnic_pair", params=params,
                      test_module=module, testcase=tests, simulator=simulator,
                      test_name=name, extra_env=env, waves=waves, ports_only=True)


def _run_fast(cfg, tests, name, env, module="tb.system.cocotb_two_rnic"):
    """Run ``tests`` on a Verilator model of the two-core top built for speed (only its ports
    public, -O2; its own build): the soaks drive and watch only the ports, and are bound by
    the model's speed, not the build."""
    c = CONFIGS[cfg]
    return run_fast_verilator(lambda: RnicPair(c), c.as_dict(), name="pair",
                              toplevel="rnic_pair", test_module=module, testcase=tests,
                              extra_env=env, test_name=name)


def _trace_env(cfg, simulator):
    """With ``RNIC_TRACE=1`` (``make trace``) the W=64 directed runs record the block trace of
    both cores into ``build/trace/pair-w64-<simulator>/`` (``RNIC_WAVES=1``: and the Icarus run
    its waveform); otherwise nothing (no regression time)."""
    if cfg != "w64" or not knob("RNIC_TRACE"):
        return None, False
    waves = simulator == "icarus" and knob("RNIC_WAVES")
    return {"RNIC_TRACE": "1", "RNIC_TRACE_DIR": str(ROOT / "build" / "trace")}, waves


def _directed_cases():
    """Both widths on both simulators. The regression runs W=64 on Verilator (W=512 reaches
    the regression through the block tests and the one-core top at W=512); the other three
    under make regress-full (W=512 on Verilator shares its two-core build with the lossy random
    run at W=512)."""
    for cfg in CONFIGS:
        for sim in ("icarus", "verilator"):
            marks = [] if (cfg, sim) == ("w64", "verilator") else [pytest.mark.full]
            yield pytest.param(cfg, sim, marks=marks, id=f"{sim}-{cfg}")


@pytest.mark.parametrize("cfg, simulator", list(_directed_cases()))
def test_pair_directed(cfg, simulator):
    env, waves = _trace_env(cfg, simulator)
    run_dir = _run(cfg, simulator, DIRECTED, f"pair-{cfg}-{simulator}", env, waves=waves)
    if env:
        out = ROOT / "build" / "trace" / f"pair-w64-{simulator}"
        check_pair_trace(out)
        for pcap in Path(run_dir).glob("two_rnic_*.pcap"):      # the wire's pcaps, by scenario
            shutil.copy(pcap, out / pcap.name)
        if waves:                        # keep the waveform beside the trace and the pcaps
            here = [Path(run_dir), Path(run_dir).parent.parent / simulator]
            for w in [w for d in here for pat in ("*.fst", "*.vcd") for w in d.glob(pat)]:
                shutil.copy(w, out / f"pair-{w.name}")


def check_pair_trace(d):
    """The traced 13-step SEND passes both cores' blocks in the book's order: A's doorbell, WQE
    fetch, lkey checks and gather, the three request frames built and sent; B's parse, PSN
    check, placement, receive CQE and ACK; back at A the ACK taken, the WQE retired and the send
    CQE written. The SEND with Invalidate passes B's invalidate step."""
    from sim.trace import load, steps
    _, secs = load(d / "send_13_steps.jsonl")
    (sec,) = [s for s in secs if s["title"].startswith("The 13-step SEND")]
    st = steps(sec)
    first, count = {}, {}
    for s in st:
        first.setdefault((s["core"], s["key"]), s["first"])
    for s in sec["events"]:
        k = (s.get("core", ""), s["key"])
        count[k] = count.get(k, 0) + 1
    order = [("B", "rq_db"), ("A", "sq_db"), ("A", "wqe_rd"), ("A", "wqe_data"),
             ("A", "gather_key"), ("A", "tx_build"), ("A", "gather"), ("A", "gather_data"),
             ("A", "tx_out"), ("B", "rx_in"), ("B", "rx_meta"), ("B", "psn_exe"),
             ("B", "wr_data"), ("B", "ack_build"), ("B", "tx_out"), ("A", "rx_in"),
             ("A", "rx_meta"), ("A", "ack_in"), ("A", "retire"), ("A", "send_cqe"),
             ("A", "cqe_data")]
    missing = [k for k in order if k not in first]
    assert not missing, (missing, sorted(first))
    assert [first[k] for k in order] == sorted(first[k] for k in order), \
        [(k, first[k]) for k in order]
    # three request packets through B's RX Parse and PSN Check; A checks the lkey of each of
    # its two SGEs; one signaled WQE retired
    assert count[("B", "rx_meta")] == 3 and count[("B", "psn_exe")] == 3, count
    assert count[("A", "gather_key")] >= 2 and count[("A", "retire")] == 1, count
    # one receive completion at B, after the payload's writes; one send completion at A
    assert count[("B", "complete")] == 1 and count[("A", "send_cqe")] == 1, count
    assert first[("B", "complete")] > first[("B", "wr_data")], first
    _, secs = load(d / "send_with_invalidate.jsonl")
    (inv,) = [s for s in secs if s["title"].startswith("SEND with Invalidate")]
    keys = {(s["core"], s["key"]) for s in steps(inv)}
    assert ("B", "inval_req") in keys and ("B", "inval_resp") in keys, keys
    # the frames both cores sent, as a pcap: three requests and one ACK
    from scapy.all import rdpcap
    assert len(rdpcap(str(d / "send_13_steps.pcap"))) == 4


@pytest.mark.parametrize("cfg", [c if c == "w64" else pytest.param(c, marks=pytest.mark.full)
                                 for c in CONFIGS])
def test_pair_random(cfg):
    """A few hundred random messages both ways (Verilator; the same build as above; W=512
    under ``make regress-full``)."""
    _run(cfg, "verilator", ["random_messages"], f"pair-random-{cfg}",
         {"PAIR_MESSAGES": "150", "PAIR_SEED": "7" if cfg == "w64" else "8"})


def test_pair_random_icarus_hostile():
    """Random messages with random latency and back-pressure on both host memories, on both
    MAC transmit streams and on every AXI4-Lite channel (Icarus); every byte and CQE checked
    against the model as in the unstalled runs."""
    _run("w64", "icarus", ["random_messages"], "pair-random-hostile",
         {"PAIR_MESSAGES": "16", "PAIR_HOSTILE": "1", "PAIR_SEED": "3"})


@pytest.mark.soak
@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_pair_soak(cfg):
    """10,000 random messages both ways (make soak; ``PAIR_SOAK_MESSAGES`` sets the number), on the
    model built for speed."""
    _run_fast(cfg, ["random_messages"], f"pair-soak-{cfg}",
              {"PAIR_MESSAGES": str(knob("PAIR_SOAK_MESSAGES")), "PAIR_SEED": "11",
               "PAIR_MAX_LENGTH": "2000"})
