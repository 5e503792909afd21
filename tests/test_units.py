"""Units are defined once, in bytesup.units: no other module of the package defines its own."""

from __future__ import annotations

import re
from pathlib import Path

from bytesup import units
from bytesup.course import formulas
from bytesup.host import hostbench

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "bytesup"
UNIT = re.compile(r"^\s*(KB|MB|GB|KiB|MiB|GiB|MIB|GIB)\s*=", re.M)


def test_the_units_are_what_their_names_say():
    assert (units.KB, units.MB, units.GB) == (1_000, 1_000_000, 1_000_000_000)
    assert (units.KiB, units.MiB, units.GiB) == (1_024, 1_048_576, 1_073_741_824)


def test_no_module_but_units_defines_a_unit():
    found = [f"{p.relative_to(PACKAGE)}: {m.group(0).strip()}" for p in sorted(PACKAGE.rglob("*.py"))
             if p.name != "units.py" for m in UNIT.finditer(p.read_text(encoding="utf-8"))]
    assert found == []


def test_the_names_lessons_read_are_the_units_own():
    assert formulas.GB is units.GB and hostbench.GB is units.GB and hostbench.MiB is units.MiB
