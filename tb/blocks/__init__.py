"""Unit tests of one hardware block each (``test_<block>.py``) and their cocotb benches
(``cocotb_<block>.py``; ``cocotb_axi_master.py`` and ``cocotb_mailbox.py`` also hold the stream
drivers and mailbox models other block benches import)."""
