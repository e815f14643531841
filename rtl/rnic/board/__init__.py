"""The core on a board: an ECPIX-5 85F build kept alive by on-chip surroundings.

* :mod:`.program` — the sequencer's script as data (``Program``): the AXI4-Lite writes and
  CMD_STATUS polls, the host-memory image, the SEND frame and the expected ACK, CQE and
  payload. ``sim/board_program.py`` records it from the project's own driver.
* :mod:`.bram_axi` — host memory on block RAM behind an AXI4 slave.
* :mod:`.sequencer` — plays the script into the core and checks what comes back.
* :mod:`.top` — ``BoardCore`` (core + RAM + sequencer, pass/fail outputs; simulated by
  ``tb/system/test_board.py``) and ``ECPIX5Top`` (PLL, reset, LEDs) for ``make bitstream``.
"""
