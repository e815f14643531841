"""Tests of the whole ``rnic`` core, or of several cores joined by a wire (``test_*.py``), their
cocotb benches (``cocotb_*.py``), the fuzz campaign's helpers (``fuzz_*.py``) and the tests of
the driver and of ``rnic generate``."""
