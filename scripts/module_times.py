"""The slowest test modules of a pytest run, from its JUnit XML (what ``.ci/run`` prints after the suite).

    python scripts/module_times.py results.xml [--top 10]

Each test case's time in pytest's JUnit XML is its setup, call and teardown together, so a module's sum includes
the module fixtures it starts and stops (a live server, an engine) and the session fixtures its first test starts.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

__all__ = ["main", "module_of", "module_times"]


def module_of(classname: str) -> str:
    """The test file of a JUnit ``classname`` (``tests.api.test_x`` or ``tests.api.test_x.TestClass``)."""
    parts = classname.split(".")
    for index, part in enumerate(parts):
        if part.startswith("test_") or part == "conftest":
            return "/".join(parts[: index + 1]) + ".py"
    return "/".join(parts) + ".py"


def module_times(junit_xml: Path) -> dict[str, float]:
    """Seconds per test module (setup, call and teardown of each of its tests, summed)."""
    totals: defaultdict[str, float] = defaultdict(float)
    for case in ElementTree.parse(junit_xml).iter("testcase"):
        totals[module_of(case.get("classname", ""))] += float(case.get("time", "0") or 0)
    return dict(totals)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("junit_xml", type=Path)
    parser.add_argument("--top", type=int, default=10)
    options = parser.parse_args(argv)
    totals = module_times(options.junit_xml)
    print(f"slowest {options.top} modules (setup + call + teardown), of {sum(totals.values()):.0f} s in all:")
    for module, seconds in sorted(totals.items(), key=lambda item: -item[1])[: options.top]:
        print(f"{seconds:8.1f} s  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
