"""Host-memory master (rnic.host.HostMemory) against the hostile AxiRam of sim/hostmem.py."""
import gc
import warnings

import pytest

from rnic.host import HostMemory
from sim.bench_tops import flat_top_axi
from sim.runner import run_cocotb
from sim.wrap import flat_top

# the configuration the bench uses (the bench reads the same numbers from the environment)
# (client 1's read buffer holds four of the 32-beat bursts: the deep_buffer test)
CFG = dict(read_clients=2, write_clients=2, max_reads=3, max_writes=3, read_buffer=(32, 128))


@pytest.mark.parametrize("width", [64, 512, pytest.param(128, marks=pytest.mark.full),
                                   pytest.param(256, marks=pytest.mark.full)])
def test_axi_master(width):
    run_cocotb("axi_master", lambda: flat_top_axi(HostMemory(width=width, **CFG)),
               params={"width": width, **CFG}, test_module="tb.blocks.cocotb_axi_master",
               extra_env={"HOST_MEM_WIDTH": str(width),
                          **{f"HOST_MEM_{k.upper()}": ",".join(map(str, v)) if isinstance(v, tuple)
                             else str(v) for k, v in CFG.items()}},
               test_name=f"w{width}")


# the core's own configuration (rtl/rnic/top.py: three readers, the gather buffer four bursts
# deep, two writers) and the smallest one (a client alone in its channel's turns)
OTHER_CFGS = {
    "core": dict(read_clients=3, write_clients=2, max_reads=4, max_writes=4,
                 read_buffer=(64, 64, 256), max_burst=64),
    "single": dict(read_clients=1, write_clients=1, max_reads=2, max_writes=2,
                   read_buffer=(48,)),
}


@pytest.mark.parametrize("cfg", OTHER_CFGS)
def test_axi_master_configs(cfg):
    c = OTHER_CFGS[cfg]
    run_cocotb("axi_master", lambda: flat_top_axi(HostMemory(width=64, **c)),
               params={"width": 64, **c}, test_module="tb.blocks.cocotb_axi_master",
               testcase=["faults", "slow_reader", "top_of_address_space", "many_clients",
                         "fast_fire"]
               if c["read_clients"] > 1 else ["top_of_address_space", "many_clients", "fast_fire"],
               extra_env={"HOST_MEM_WIDTH": "64",
                          **{f"HOST_MEM_{k.upper()}": ",".join(map(str, v)) if isinstance(v, tuple)
                             else str(v) for k, v in c.items()}},
               test_name=f"w64-{cfg}")


def test_parameters_refused():
    # refused components are garbage: silence amaranth's "created but never used" on collection
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError):
            HostMemory(width=48)
        with pytest.raises(ValueError):
            HostMemory(width=64, max_reads=0)
        with pytest.raises(ValueError, match="2 figures for 3"):
            HostMemory(width=64, read_clients=3, read_buffer=(64, 64))
        with pytest.raises(ValueError, match="smallest read_buffer"):
            HostMemory(width=64, read_clients=2, read_buffer=(32, 256), max_burst=64)
        with pytest.raises(ValueError, match="max_burst"):
            HostMemory(width=64, max_burst=257, read_buffer=512)
        gc.collect()
