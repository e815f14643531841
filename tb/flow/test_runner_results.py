"""The cocotb results check of ``sim.runner``: a failure, no test at all, and a requested test
that did not run (a name in a test list that no longer matches any cocotb test) each fail."""
import pytest

from sim.runner import _check_results

XML = ('<?xml version="1.0" encoding="utf-8"?><testsuites name="cocotb tests">'
       '<testsuite name="tb.m">{}</testsuite></testsuites>')


def _results(tmp_path, *cases):
    body = "".join(f'<testcase classname="tb.m" name="{n}">{"<failure />" if bad else ""}'
                   "</testcase>" for n, bad in cases)
    path = tmp_path / "results.xml"
    path.write_text(XML.format(body))
    return path


def test_every_requested_name_ran(tmp_path):
    path = _results(tmp_path, ("read_sizes", False), ("length_rule/case=0", False))
    _check_results(path)
    _check_results(path, ["read_sizes", "length_rule/case=0"])
    _check_results(path, "read_sizes, length_rule/case=0")
    _check_results(path, "sizes")         # cocotb's filter: the names ending with it


@pytest.mark.parametrize("testcase", [["read_sizes", "read_errors"], "read_sizes,read_errors",
                                      "length_rule"])
def test_a_name_that_matched_nothing_fails(tmp_path, testcase):
    path = _results(tmp_path, ("read_sizes", False), ("length_rule/case=0", False))
    with pytest.raises(AssertionError, match="no cocotb test named"):
        _check_results(path, testcase)


def test_failure_or_nothing_ran_fails(tmp_path):
    with pytest.raises(AssertionError, match="failed: b"):
        _check_results(_results(tmp_path, ("a", False), ("b", True)))
    with pytest.raises(AssertionError, match="no cocotb test ran"):
        _check_results(_results(tmp_path))
