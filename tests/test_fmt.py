"""One way to print a number on every page (bytesup.store.render.fmt, and percent for a share): four significant
digits, and a value that is not whole keeps its digits where rounding to four would make it look whole."""

from __future__ import annotations

import pytest

from bytesup.store.render import fmt, percent


@pytest.mark.parametrize("value,shown", [
    (77.996, "78.00"),          # the server's probability of ' Paris' in %: not 78 exactly, so not "78"
    (78.0, "78"),               # 78 exactly
    (77.25, "77.25"),
    (281.99, "282.0"),
    (0.99999996, "1.000"),
    (-77.996, "-78.00"),
    (100 * 0.1, "10"),          # 10.000000000000002: whole but for the last bit of its float
    (2.000320610909515, "2.000"),
    (33.2, "33.2"),             # a published figure keeps the digits it was given
    (0.1, "0.1"),
    (999.96, "1,000"),          # four digits already
    (1426.26, "1,426"),
    (12345.6, "12,346"),
    (5.1e-16, "5.1e-16"),
    (0.0, "0"),
    (4.0, "4"),
    (7, "7"),
])
def test_four_significant_digits(value, shown):
    assert fmt(value) == shown


def test_a_share_reads_as_its_table_prints_it():
    for p in (0.77996, 0.7725249, 0.0622341, 0.4536, 8.049e-11, 1.0, 0.005731):
        assert percent(p) == fmt(100 * p) + "%"
    assert (percent(0.927), percent(0.58), percent(0.005731), percent(0.77996)) == ("92.7%", "58%", "0.5731%", "78.00%")
