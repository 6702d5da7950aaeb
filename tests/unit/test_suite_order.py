"""The suite's scheduling order on two workers (``tests/suite_order.py``): longest scope first."""

from __future__ import annotations

import json

import pytest
import suite_order
from suite_order import longest_first, scope_of, store_seconds


def test_the_demo_pipelines_readers_are_one_scope_and_other_tests_their_module():
    assert scope_of("tests/integration/test_ui_plugin.py::test_overview") == "demo_pipeline"
    assert scope_of("tests/integration/test_pipeline_e2e.py::test_x[a-b]") == "demo_pipeline"
    assert scope_of("tests/integration/test_chaos.py::test_kills") == "tests/integration/test_chaos.py"


def test_recorded_scopes_go_longest_first_and_a_new_one_is_estimated_per_test():
    tests = {"small.py": 40, "demo_pipeline": 39, "chaos.py": 2, "new.py": 10}
    seconds = {"small.py": 20.0, "demo_pipeline": 760.0, "chaos.py": 580.0}
    # 1,360 s over 81 recorded tests: the new module's 10 tests are ~168 s, ahead of small.py
    assert longest_first(tests, seconds) == ["demo_pipeline", "chaos.py", "new.py", "small.py"]
    # nothing recorded: every scope's estimate is 0, and the collection's order stays
    assert longest_first(tests, {}) == list(tests)


def test_stored_seconds_merge_with_the_recorded_ones_and_drop_a_module_that_is_gone(tmp_path, monkeypatch):
    file = tmp_path / "scope_seconds.json"
    file.write_text(json.dumps({"tests/a.py": 5, "tests/gone.py": 9, "demo_pipeline": 700}))
    monkeypatch.setattr(suite_order, "SCOPE_SECONDS", file)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "a.py").touch()
    (tmp_path / "tests" / "b.py").touch()
    store_seconds({"tests/b.py": 30.4, "demo_pipeline": 650.6}, tmp_path)
    assert json.loads(file.read_text()) == {"demo_pipeline": 651, "tests/b.py": 30, "tests/a.py": 5}
    assert list(json.loads(file.read_text())) == ["demo_pipeline", "tests/b.py", "tests/a.py"]


@pytest.mark.parametrize("module", ["tests/integration/test_chaos.py", "demo_pipeline"])
def test_the_recorded_file_names_the_suites_longest_scopes(module):
    assert module in suite_order.recorded_seconds()
