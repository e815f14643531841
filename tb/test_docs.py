"""Generated documentation stays in step with the tables it is made from."""
from pathlib import Path

from rnic.control.regmap import markdown

ROOT = Path(__file__).resolve().parent.parent


def test_register_doc_current():
    text = (ROOT / "docs" / "registers.md").read_text()
    assert markdown() in text, "docs/registers.md is stale: run `make docs`"
