"""``internal/json_input``: JSON from outside, its two ways to be bad besides syntax, said once (the explorer's API,
the relay and replica streams, ``evaluate``, the conventions, judge replies use it)."""

from __future__ import annotations

import json

import pytest

from ragtrace_collector.internal.json_input import loads, lone_surrogate


def test_a_lone_surrogate_anywhere_is_named_escaped():
    assert lone_surrogate(json.loads('{"a": ["ok", {"b": "x \\ud800 y"}]}')) == "\\ud800"
    assert lone_surrogate(json.loads('"\\udfff"')) == "\\udfff"


def test_unicode_text_and_paired_surrogates_are_text():
    assert lone_surrogate(json.loads('{"a": "\\ud83d\\ude42 caf\\u00e9", "n": [1, 2.5, null, true]}')) is None
    assert lone_surrogate("plain") is None


def test_json_nested_past_the_parsers_depth_is_a_value_error_like_any_bad_json():
    with pytest.raises(ValueError, match="nested past the parser's depth"):
        loads("[" * 5000 + "]" * 5000)
    with pytest.raises(ValueError):
        loads("{not json")
    assert loads(b'{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
