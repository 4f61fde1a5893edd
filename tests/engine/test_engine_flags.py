"""The flags every engine command shares, into EngineConfig keyword arguments."""

from __future__ import annotations

import argparse

import pytest

from pagoda.engine.engine_flags import add_engine_flags, add_step_flags, engine_kwargs


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_engine_flags(parser)
    return parser.parse_args(list(argv))


def test_quantization_is_off_unless_asked():
    assert engine_kwargs(parse())["quantization"] is None
    assert engine_kwargs(parse("--quantization", "fp8"))["quantization"] == "fp8"


def test_an_unknown_quantization_is_refused_by_name(capsys):
    parser = argparse.ArgumentParser()
    add_step_flags(parser)  # what `pagoda bench` takes
    with pytest.raises(SystemExit):
        parser.parse_args(["--quantization", "int4"])
    assert "--quantization: invalid choice: 'int4'" in capsys.readouterr().err
