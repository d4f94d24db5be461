"""Turns the GPU suite's JUnit XML into the summary committed under bench/results/."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree


def main(junit: str, environment: str) -> int:
    print("# GPU suite\n")
    print(open(environment).read())
    root = ElementTree.parse(junit).getroot()
    rows = []
    for case in root.iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "FAILED"
            elif child.tag == "skipped":
                outcome = "skipped"
        rows.append((f"{case.get('classname')}::{case.get('name')}", outcome, float(case.get("time", 0))))
    counts = {k: sum(1 for _, o, _ in rows if o == k) for k in ("passed", "FAILED", "skipped")}
    print(f"{counts['passed']} passed, {counts['FAILED']} failed, {counts['skipped']} skipped\n")
    print("| test | result | seconds |\n|---|---|---|")
    for name, outcome, seconds in rows:
        print(f"| {name} | {outcome} | {seconds:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
