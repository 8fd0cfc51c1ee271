"""Print the conformance suite's normalised fields and its count of sequences (markdown, for
the README): python -m tests.conformance"""

from __future__ import annotations

from collections import Counter

import tests.conformance.sequences  # noqa: F401  (registers every sequence)
from tests.conformance.known_divergences import KNOWN_DIVERGENCES
from tests.conformance.normalise import NORMALISED
from tests.conformance.runner import SEQUENCES


def main() -> None:
    areas = Counter(name.split("/", 1)[0] for name in SEQUENCES)
    per_area = ", ".join(f"{area} {count}" for area, count in sorted(areas.items()))
    print(f"{len(SEQUENCES)} sequences ({per_area}); {len(KNOWN_DIVERGENCES)} known divergences")
    print()
    print("| fields | in | normalised as | why |")
    print("|---|---|---|---|")
    for rule in NORMALISED:
        print(f"| {rule.fields} | {rule.apis} | {rule.how} | {rule.why} |")


if __name__ == "__main__":
    main()
