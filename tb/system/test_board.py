"""The ECPIX-5 board top's BoardCore (core + block-RAM host memory + sequencer) reaches PASS.

A second run with a wrong expected CQE must FAIL: the sequencer's checks can fail (marked
``full``: another ~80 s of Verilog generation and simulation).
"""
import dataclasses
import hashlib

import pytest

from sim.board_program import record
from rnic.board.top import BOARD_CONFIG, BoardCore
from sim.runner import run_cocotb


def _run(program, tag, expect, retries=1 << 12):
    board = BoardCore(BOARD_CONFIG, program, timeout=150_000, retries=retries)
    run_cocotb(f"board-{tag}", lambda: (board, [board.passed, board.failed, board.stage]),
               params={**BOARD_CONFIG.as_dict(), "tag": tag, "retries": retries,
                       "program": hashlib.sha256(repr(program).encode()).hexdigest()[:12]},
               test_module="tb.system.cocotb_board", testcase="board_reaches_pass",
               extra_env={"BOARD_EXPECT": expect}, test_name=f"board-{tag}")


def test_board_sequencer_passes():
    _run(record(), "ok", "pass")


@pytest.mark.full
def test_board_sequencer_catches_a_wrong_cqe():
    p = record()
    addr, cqe = p.checks[0]
    bad = bytearray(cqe)
    bad[8] ^= 1                      # byte_len off by one
    _run(dataclasses.replace(p, checks=[(addr, bytes(bad))] + p.checks[1:]), "badcqe", "fail",
         retries=64)
