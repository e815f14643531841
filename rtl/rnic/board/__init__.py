"""The core on a board: an ECPIX-5 85F build kept alive by on-chip surroundings.

* :mod:`.program` — the sequencer's script, recorded by running the project's own driver
  (``sim/driver``) against a recorder: every AXI4-Lite write it makes, every CMD_STATUS poll,
  the host-memory image it leaves (rings, WQE, zeroed CQ), the SEND frame (scapy) and the
  expected ACK frame, CQE and payload.
* :mod:`.bram_axi` — host memory on block RAM behind an AXI4 slave.
* :mod:`.sequencer` — plays the script into the core and checks what comes back.
* :mod:`.top` — ``BoardCore`` (core + RAM + sequencer, pass/fail outputs; simulated by
  ``tb/test_board.py``) and ``ECPIX5Top`` (PLL, reset, LEDs) for ``make bitstream``.
"""
