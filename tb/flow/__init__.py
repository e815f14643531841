"""Tests of the tooling and the docs: synthesis, area, placed timing, logic depth, benchmarks,
generated pages, the package layout and the trace rendering (``data/`` holds captured tool
outputs they parse)."""
