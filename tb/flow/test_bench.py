"""`rnic bench` smoke test: a benchmark runs and every figure is above 0 and within its limit."""
from sim.bench import run_benches


def test_bench_smoke(tmp_path):
    rows = run_benches(["rx_parse-w64"], simulator="icarus", out_dir=tmp_path)
    assert rows
    for r in rows:
        assert r["value"] > 0, r
        if r["limit"] is not None:
            assert r["value"] <= r["limit"] + 1e-9, r
    assert (tmp_path / "bench.json").exists() and (tmp_path / "bench.md").exists()
