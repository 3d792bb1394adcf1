"""``lone_surrogate``: the one check that parsed JSON is Unicode text (the explorer's API and ``evaluate`` use it)."""

from __future__ import annotations

import json

from ragtrace_collector.internal.unicode import lone_surrogate


def test_a_lone_surrogate_anywhere_is_named_escaped():
    assert lone_surrogate(json.loads('{"a": ["ok", {"b": "x \\ud800 y"}]}')) == "\\ud800"
    assert lone_surrogate(json.loads('"\\udfff"')) == "\\udfff"


def test_unicode_text_and_paired_surrogates_are_text():
    assert lone_surrogate(json.loads('{"a": "\\ud83d\\ude42 caf\\u00e9", "n": [1, 2.5, null, true]}')) is None
    assert lone_surrogate("plain") is None
