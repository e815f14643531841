"""PSN Check, QP context, pending ACK/NAKs, the TX arbiter and the TX frame builder (cocotb on
Icarus, W=64/512).

The bench (``tb/blocks/cocotb_psn_check.py``) drives RX Parse's metadata/payload streams with frames
built by scapy and parsed by the bench's own parser, plays the later stages through a stub of the
execute-outcome interface (always success, or a fatal outcome on one chosen PSN), and checks
every transmitted frame with its own parser, an independent ICRC/IPv4-checksum computation and
tshark, against ``sim/models/responder.py``.
"""
import pytest

from sim.bench_tops import PsnBench
from sim.runner import run_cocotb
from sim.wrap import flat_top

NUM_QP = 16


def _run(width, tests=None, name=None, extra=None, num_qp=NUM_QP):
    params = {"width": width, "bench": PsnBench.REV}
    if num_qp != NUM_QP:
        params["num_qp"] = num_qp
    run_cocotb("psn_check", lambda: flat_top(PsnBench(width, num_qp)), params=params,
               test_module="tb.blocks.cocotb_psn_check", testcase=tests,
               extra_env={"PSN_CHECK_WIDTH": str(width), "PSN_CHECK_NUM_QP": str(num_qp),
                          **(extra or {})},
               test_name=name or f"w{width}")


#: the random run's packets in the regression (the knob's PSN_CHECK_RANDOM_PACKETS, 1,000,
#: under make regress-full: test_psn_check_w64_long_random)
SHORT_RANDOM = {"PSN_CHECK_RANDOM_PACKETS": "300"}


#: at W=512 the regression runs the tests whose subject depends on the width: the frames built
#: and their back-pressure, the arbiter, random traffic and the packet rate (every test, the
#: long TX stall and the paced random run among them, under make regress-full,
#: ``test_psn_check_w512_all``)
W512_TESTS = ["psn_ahead_first_nak", "psn_behind_duplicate", "outcome_ack_rules",
              "doorbell_and_ack_out", "output_queues_backpressure", "tx_backpressure_coalesce",
              "tx_arbiter_shares", "random_sequences", "benchmark", "tshark_decodes_every_frame"]


@pytest.mark.parametrize("width", [64, 512])
def test_psn_check(width):
    """Every directed test plus a random run against the model at W=64; at W=512 the
    width-dependent tests; the random run 300 packets."""
    if width == 64:
        _run(width, extra=SHORT_RANDOM)
    else:
        _run(width, tests=W512_TESTS, name="w512-width", extra=SHORT_RANDOM)


@pytest.mark.full
def test_psn_check_w64_long_random():
    """The random run at W=64 with the knob's packets (1,000 by default)."""
    _run(64, tests=["random_sequences"], name="w64-long-random")


@pytest.mark.full
def test_psn_check_w512_all():
    _run(512, extra=SHORT_RANDOM)


#: the directed tests whose subject is the QP context (its reads, writes, forwarding and
#: SET_QP) or a per-QP table that is block RAM above 256 QPs (the error bits, the pending
#: table's flags under TX back-pressure), for the one-word table; every test at 512 QPs under
#: make regress-full
CONTEXT_TESTS = ["psn_ahead_first_nak", "psn_ahead_repeated_one_nak", "psn_equal_clears_latch",
                 "psn_behind_duplicate", "psn_duplicate_while_nak_latched", "psn_wrap",
                 "forwarding_while_command_waits", "context_forward_and_spacing",
                 "context_high_qps",
                 "context_words_split", "access_rules", "rnr_empty_rq", "state_drops",
                 "set_qp_transitions", "set_qp_in_flight", "fault_moves_qp_to_error",
                 "fatal_then_waiting_heads", "fatal_then_queued_nak",
                 "tx_backpressure_coalesce", "tx_flicker_ack_and_nak_pending",
                 "qp_set_events", "set_qp_unaligned_base", "reset_forgets_pending_responses",
                 "random_sequences", "random_paced_exact", "tshark_decodes_every_frame"]


def test_psn_check_one_word():
    """The directed QP-context tests at 512 QPs, where the QP tables keep a row in one word
    (``QpContext.split`` is for up to 256 QPs); the random runs there under make regress-full
    (``test_psn_check_one_word_all``)."""
    _run(64, tests=[t for t in CONTEXT_TESTS if not t.startswith(("random", "tshark"))],
         name="w64-qp512-ctx", num_qp=512)


#: at 4,096 QPs (each one-word table two banks of block RAM, the bank selected after their
#: output registers) the regression runs the tests whose QPs reach the second bank or whose
#: subject is the read, its forward and the command's read (each rst sweeps 4,096 QPs); every
#: QP-context test under make regress-full
BANK_TESTS = ["context_high_qps", "context_forward_and_spacing", "set_qp_in_flight",
              "forwarding_while_command_waits"]


def test_psn_check_one_word_banks():
    """QPs in both banks of the one-word tables at 4,096 QPs, and the forward and command
    reads there."""
    _run(64, tests=BANK_TESTS, name="w64-qp4096-banks", num_qp=4096)


@pytest.mark.full
def test_psn_check_one_word_banks_all():
    _run(64, tests=CONTEXT_TESTS, name="w64-qp4096-ctx", num_qp=4096, extra=SHORT_RANDOM)


@pytest.mark.full
def test_psn_check_one_word_all():
    _run(64, name="w64-qp512", num_qp=512)


@pytest.mark.full
@pytest.mark.parametrize("width", [64, 512])
def test_psn_check_random_long(width):
    _run(width, tests=["random_sequences", "tshark_decodes_every_frame"], name=f"w{width}-long",
         extra={"PSN_CHECK_RANDOM_PACKETS": "20000"})


def test_psn_rules():
    """The factored PSN classifier and opcode sequencer (``rnic.resp.psn_rules``), exhaustive
    over opcodes × open classes and over PSN corner cases + random pairs, against their Python
    twins and against ``roce-reference.md`` §3.2/§3.3 directly."""
    import random

    from sim.vsim import Simulator

    from rnic.resp.psn_rules import (OpSequencer, PsnClassifier, op_sequence_model,
                                     psn_class_model)

    # the reference's own statements, independent of the twins
    assert psn_class_model(0, 0xFFFFFF)["ahead"] and psn_class_model(0xFFFFFE, 0xFFFFFF)["dup"]
    assert psn_class_model(0x7FFFFF, 0)["ahead"] and psn_class_model(0x800000, 0)["dup"]
    assert op_sequence_model(0x04, 1)["ok"] == 0 and op_sequence_model(0x0C, 1)["ok"] == 0
    assert op_sequence_model(0x16, 0)["ok"] == 0 and op_sequence_model(0x09, 2)["ok"] == 1
    assert op_sequence_model(0x07, 1)["ok"] == 0 and op_sequence_model(0x06, 0)["next_open"] == 2

    dut = OpSequencer()
    sim = Simulator(dut)

    async def tb(ctx):
        for op in range(256):
            for o in range(4):
                ctx.set(dut.opcode, op)
                ctx.set(dut.open_, o)
                v = ctx.get(dut.seq)
                exp = op_sequence_model(op, o)
                assert {k: int(getattr(v, k)) for k in exp} == exp, (op, o)
    sim.add_testbench(tb)
    sim.run()

    dut2 = PsnClassifier()
    sim = Simulator(dut2)

    async def tb2(ctx):
        rng = random.Random(4)
        cases = [(0, 0xFFFFFF), (0xFFFFFE, 0xFFFFFF), (0x7FFFFF, 0), (0x800000, 0), (5, 5),
                 (0xFFFFFF, 0), (0x800000, 0xFFFFFF)]
        cases += [(rng.randrange(1 << 24), rng.randrange(1 << 24)) for _ in range(500)]
        for p, e in cases:
            ctx.set(dut2.psn, p)
            ctx.set(dut2.epsn, e)
            v = ctx.get(dut2.cls)
            exp = psn_class_model(p, e)
            got = {k: int(getattr(v, k)) for k in exp}
            assert got == exp, (p, e)
            assert got["in_order"] + got["dup"] + got["ahead"] == 1
    sim.add_testbench(tb2)
    sim.run()


def test_psn_check_parameters():
    """Bad parameters are refused at elaboration with a clear error."""
    from rnic.resp.ack_table import AckTable
    from rnic.resp.psn_check import PsnCheck

    for depth in (0, 1, 2.0):
        with pytest.raises(ValueError, match="resp_depth"):
            PsnCheck(width=64, num_qp=16, resp_depth=depth)
    for n in (0, 1, 3, 12):
        with pytest.raises(ValueError, match="num_qp"):
            AckTable(num_qp=n)
    assert PsnCheck(width=64, num_qp=16, resp_depth=2).resp_depth == 2
    assert AckTable(num_qp=4096).abits == 12
