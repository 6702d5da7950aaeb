"""The command line: help for every command, and errors that name the bad argument or field."""

from __future__ import annotations

import pytest
import yaml

from jobs.cli import build_parser, main

COMMANDS = ["kafka", "airflow", "demo", "generate", "land", "batch", "stream", "compare", "recommend",
            "attribute", "report", "plan", "checkpoint"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "--help"])
    assert exc.value.code == 0
    assert "usage" in capsys.readouterr().out.lower()


def test_a_bad_date_names_the_argument(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["land", "--ds", "20-11-2026"])
    err = capsys.readouterr().err
    assert "--ds" in err and "YYYY-MM-DD" in err


def test_a_bad_slice_length_is_refused(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--slice-minutes", "0"])
    assert "--slice-minutes" in capsys.readouterr().err


def test_a_range_that_ends_before_it_starts_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="--to"):
        main(["land", "--ds", "2026-11-20", "--to", "2026-11-19"])


def test_an_invalid_spec_fails_naming_the_field(tmp_path):
    data = yaml.safe_load(open("include/specs/search_sessions.yaml"))
    data["window"]["upper"] = "soon"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(SystemExit, match=r"window\.upper"):
        main(["compare", "--spec", str(bad), "--ds", "2026-11-20"])
