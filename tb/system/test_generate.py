"""`rnic generate`: every bound of interface.md §1 enforced (each bound ±1), ports exact."""
import re

import pytest

from rnic.cli import main
from rnic.params import ConfigError, RnicConfig
from rnic.top import port_list

GOOD = [("--data-width", v) for v in (64, 128, 256, 512)] + [
    ("--num-qp", 4), ("--num-qp", 4096), ("--num-cq", 1), ("--num-cq", 1024),
    ("--key-entries", 4), ("--key-entries", 1024), ("--clock-mhz", 0.001), ("--clock-mhz", 400)]
BAD = [("--data-width", v) for v in (0, 32, 63, 65, 96, 511, 513, 1024)] + [
    ("--num-qp", 2), ("--num-qp", 3), ("--num-qp", 5), ("--num-qp", 4095), ("--num-qp", 4097),
    ("--num-qp", 8192), ("--num-cq", 0), ("--num-cq", 3), ("--num-cq", 1023),
    ("--num-cq", 1025), ("--num-cq", 2048), ("--key-entries", 2), ("--key-entries", 3),
    ("--key-entries", 5), ("--key-entries", 1023), ("--key-entries", 1025),
    ("--key-entries", 2048), ("--clock-mhz", 0), ("--clock-mhz", -1), ("--clock-mhz", "nan")]


@pytest.mark.parametrize("flag,value", BAD)
def test_generate_refuses(flag, value, tmp_path, capsys):
    out = tmp_path / "x.v"
    with pytest.raises(SystemExit) as e:
        main(["generate", "-o", str(out), flag, str(value)])
    assert e.value.code != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and flag in err, err      # one line naming the option
    assert not out.exists()


@pytest.mark.parametrize("flag,value", GOOD)
def test_config_accepts(flag, value):
    RnicConfig(**{flag[2:].replace("-", "_"): value})


def _ports_of(text):
    m = re.search(r"module rnic\((.*?)\);", text, re.S)
    names = {p.strip() for p in m.group(1).split(",")}
    decl = {}
    body = text[m.end():text.index("endmodule", m.end())]
    for d, w, n in re.findall(r"^\s*(input|output)\s+(?:\[(\d+):0\]\s+)?(\w+);", body, re.M):
        decl[n] = ("in" if d == "input" else "out", int(w) + 1 if w else 1)
    return names, decl


def _assert_ports_exact(text, cfg):
    names, decl = _ports_of(text)
    want = port_list(cfg)
    assert names == set(want) | {"clk", "rst"}
    for n, (d, w) in want.items():
        assert decl[n] == (d, w), n
    assert decl["clk"] == ("in", 1) and decl["rst"] == ("in", 1)


def test_top_ports_exact():
    """W=512 here (the Verilog of the W=512 top the system tests simulate, shared); W=64 on the
    command's own output (test_cli_writes_file)."""
    from sim.runner import Core, generate_verilog
    from tb.system.test_responder import CONFIGS
    cfg = CONFIGS["w512"]
    _, vpath = generate_verilog("rnic", Core(cfg), cfg.as_dict(), toplevel="rnic")
    _assert_ports_exact(vpath.read_text(), cfg)


def test_cli_writes_file():
    """The installed command's own output for the default configuration (the file
    tb/system/test_ports.py simulates, shared)."""
    from tb.system.test_ports import _generate
    _, vpath = _generate("default")
    _assert_ports_exact(vpath.read_text(), RnicConfig())


def test_no_read_option(tmp_path, capsys):
    """``--no-read``: a core without RDMA READ, with the same ports; ``read`` must be a bool."""
    out = tmp_path / "x.v"
    assert main(["generate", "-o", str(out), "--no-read", "--num-qp", "4", "--num-cq", "1",
                 "--key-entries", "4"]) == 0
    assert "no RDMA READ" in capsys.readouterr().out
    cfg = RnicConfig(num_qp=4, num_cq=1, key_entries=4, read=False)
    names, decl = _ports_of(out.read_text())
    assert names == set(port_list(cfg)) | {"clk", "rst"}
    assert "read_resp" not in out.read_text() and "read_place" not in out.read_text()
    with pytest.raises(ConfigError, match="read"):
        RnicConfig(read=1)
