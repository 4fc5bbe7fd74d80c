"""Cross products of test parameters, tiered: the quick tier runs a covering set of pairs (every
value of every axis meets every value of every other axis at least once), the slow tier the rest.

A "fast path == general path" test over a 4-axis product has 100-200 cases; a bug that needs
one value of one axis shows in any case that has it, one that needs two values of two axes in
the covering set, and only a bug that needs three axes at once waits for the slow tier.

>>> cases = covering_pairs([("a", [1, 2, 3]), ("b", "xy"), ("c", [True, False])])
>>> len(cases) < 3 * 2 * 2
True
>>> {(case[0], case[1]) for case in cases} == {(a, b) for a in (1, 2, 3) for b in "xy"}
True
"""

from __future__ import annotations

from itertools import combinations, product

import pytest


def _pairs(case: tuple) -> set:
    return {(i, case[i], j, case[j]) for i, j in combinations(range(len(case)), 2)}


def covering_pairs(axes: list[tuple[str, list]]) -> list[tuple]:
    """A small set of cases of the product of `axes` ((name, values), ...) covering every pair
    of values of two axes; greedy: each pick covers the most pairs not covered yet."""
    everything = list(product(*(values for _, values in axes)))
    left = set().union(*(_pairs(case) for case in everything))
    chosen = []
    while left:
        best = max(everything, key=lambda case: len(_pairs(case) & left))
        chosen.append(best)
        left -= _pairs(best)
    return chosen


def tiered(axes: list[tuple[str, list]]) -> list:
    """pytest.param cases of the whole product of `axes`; those outside the covering set are
    marked slow. An axis named "a, b" has tuples as values, spread over its names."""
    quick = set(covering_pairs(axes))
    cases = []
    for case in product(*(values for _, values in axes)):
        flat = []
        for (name, _), value in zip(axes, case):
            flat.extend(value if "," in name else (value,))
        marks = () if case in quick else (pytest.mark.slow,)
        cases.append(pytest.param(*flat, marks=marks))
    return cases


def names(axes: list[tuple[str, list]]) -> str:
    return ", ".join(name for name, _ in axes)
