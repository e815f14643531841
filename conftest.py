"""pytest configuration: the repository root on sys.path (for `sim` and `tb`), markers."""
import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
for p in (ROOT, os.path.join(ROOT, "rtl")):
    if p not in sys.path:
        sys.path.insert(0, p)
