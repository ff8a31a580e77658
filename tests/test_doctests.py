"""The examples in the pure modules' docstrings run and say what is true (``doctest``; one
test here, so ``make test``'s collection stays as it is).

An example reads as a user's session after ``from ray_ladder import *`` (the names the
flat namespace loads without Ray), from the repository root (``examples/ladders/...``).
One that needs a live cluster, a GPU or names it does not build is marked
``# doctest: +SKIP``.
"""

from __future__ import annotations

import doctest
import importlib
import sys

import pytest

import ray_ladder
from tests.test_no_ray_import import ROOT, pure_modules

#: Examples that run (not skipped) across the pure modules: a floor, so that a finder
#: that finds nothing fails (250 ran, 44 skipped, in 70 modules when this test came).
MIN_RUN = 200


def run_doctests(names: list[str]) -> tuple[doctest.TestResults, int, list[str]]:
    """Run the docstring examples of modules ``names``: (results, skipped, failure
    reports)."""
    eager = {n: getattr(ray_ladder, n) for n in ray_ladder.__all__ if n in vars(ray_ladder)}
    reports: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    skipped = 0
    for name in names:
        for test in doctest.DocTestFinder().find(importlib.import_module(name), name,
                                                  extraglobs=eager):
            skipped += sum(1 for e in test.examples if e.options.get(doctest.SKIP))
            runner.run(test, out=reports.append)
    return runner.summarize(verbose=False), skipped, reports


def test_the_runner_reports_a_wrong_example(monkeypatch: pytest.MonkeyPatch) -> None:
    # Guard against a runner that passes everything (a check that cannot fail).
    module = type(sys)("doctest_probe")
    module.__doc__ = ">>> 1 + 1\n3\n>>> 2  # doctest: +SKIP\n5\n"
    monkeypatch.setitem(sys.modules, "doctest_probe", module)
    results, skipped, reports = run_doctests(["doctest_probe"])
    assert (results.failed, results.attempted, skipped) == (1, 1, 1)
    assert "Expected:\n    3\nGot:\n    2" in "".join(reports)


def test_the_examples_of_the_pure_modules_are_true(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    results, skipped, reports = run_doctests(pure_modules())
    assert results.failed == 0, "".join(reports)
    assert results.attempted >= MIN_RUN, (results, skipped)
