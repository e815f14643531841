"""The wire as a file: write frames to a pcap and decode them with tshark.

* :func:`write_pcap` — frames (bytes, optionally with a cycle number used as the timestamp in
  microseconds) to a classic pcap file through scapy.
* :func:`tshark_fields` — one dict per frame of the pcap: the protocols tshark found, BTH
  opcode/PSN/QPN, AETH syndrome/MSN, and whether tshark flagged the frame malformed or raised
  an expert warning or error. tshark decodes UDP port 4791 as RRoCE by default.
"""

import shutil
import subprocess

__all__ = ["write_pcap", "tshark_fields", "check_rroce"]

_FIELDS = ["frame.protocols", "infiniband.bth.opcode", "infiniband.bth.psn",
           "infiniband.bth.destqp", "infiniband.aeth.syndrome", "infiniband.aeth.msn",
           "_ws.expert.severity", "_ws.malformed"]


def write_pcap(path, frames):
    """``frames``: bytes, or ``(cycle, bytes)`` pairs (timestamp = cycle µs)."""
    from scapy.all import Ether, wrpcap
    pkts = []
    for k, f in enumerate(frames):
        t, b = f if isinstance(f, tuple) else (k, f)
        p = Ether(bytes(b))
        p.time = t * 1e-6
        pkts.append(p)
    wrpcap(str(path), pkts)


#: Heuristic dissectors that tshark runs on the *payload* of InfiniBand/RRoCE packets (RPC over
#: RDMA, Ethernet over IB, NVMe over RDMA, iSER, SMB Direct, SMC-R, SDP, LNet, FCoIB). Random
#: payload bytes sometimes look like one of those protocols' headers; the dissector then takes
#: the payload and reports it malformed. Our payloads are opaque data, so these are switched off;
#: the headers tshark checks (Ethernet, IPv4, UDP, BTH, RETH, IMMDT/IETH, AETH, ICRC length) and
#: every expert check stay on.
PAYLOAD_HEURISTICS = ("rpcrdma_infiniband", "mellanox_eoib", "eth_over_ib", "nvme_rdma",
                      "iser_infiniband", "smb_direct_infiniband", "smcr_infiniband",
                      "sdp_infiniband", "lnet_ib", "fc_infiniband")
_HEUR_OK = None


def _payload_heuristics(tshark, path):
    """The names of :data:`PAYLOAD_HEURISTICS` this tshark knows (probed once)."""
    global _HEUR_OK
    if _HEUR_OK is None:
        _HEUR_OK = [h for h in PAYLOAD_HEURISTICS
                    if subprocess.run([tshark, "-r", str(path), "-c", "1",
                                       "--disable-heuristic", h],
                                      capture_output=True, timeout=60).returncode == 0]
    return _HEUR_OK


def tshark_fields(path):
    tshark = shutil.which("tshark")
    if tshark is None:
        raise RuntimeError("tshark is not installed (scripts/setup.sh installs it as root)")
    args = [tshark, "-r", str(path), "-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]
    for h in _payload_heuristics(tshark, path):
        args += ["--disable-heuristic", h]
    for f in _FIELDS:
        args += ["-e", f]
    out = subprocess.run(args, capture_output=True, text=True, timeout=300,
                         check=True).stdout.splitlines()
    rows = []
    for line in out:
        v = (line.split("|") + [""] * len(_FIELDS))[:len(_FIELDS)]
        num = lambda s: int(s, 0) if s else None
        rows.append({"protocols": v[0], "opcode": num(v[1]), "psn": num(v[2]),
                     "dqpn": num(v[3]), "syndrome": num(v[4]), "msn": num(v[5]),
                     "severity": v[6], "malformed": v[7]})
    return rows


def check_rroce(path, count):
    """Assert tshark decodes all ``count`` frames as RRoCE (InfiniBand over UDP) with no
    malformed-packet mark and no expert warning/error; return the rows."""
    rows = tshark_fields(path)
    assert len(rows) == count, (len(rows), count)
    for k, r in enumerate(rows):
        assert "infiniband" in r["protocols"] and "udp" in r["protocols"], (k, r)
        assert not r["malformed"], (k, r)
        assert r["severity"] in ("", "Chat", "Note"), (k, r)
    return rows
