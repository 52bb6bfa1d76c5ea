"""JSON lines are read as json.loads reads each line: the fast path (one raw_decode a line) and
the path that reports errors agree on every value, blank line and refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capgeo.captions.sources import iter_json_lines
from capgeo.errors import DataError

PATH = Path("captions.jsonl")

GOOD_LINES = [
    '{"caption": "a dog", "image_id": 3}',
    '  {"caption": "leading spaces"}',
    '{"caption": "trailing spaces"}   ',
    '{"caption": "a stray carriage return"}\r',
    '\t{"caption": "tabs"}\t',
    '{"caption": "first", "caption": "duplicate key: the last one wins"}',
    '{"caption": "\\u00e9t\\u00e9 \u2028 a line separator inside a string", "n": 1.0, "m": 1, "k": -0.0}',
    '{"caption": "nested", "meta": {"a": [1, 2, {"b": null}], "c": true}}',
    '{}',
    '{"caption": "not a number", "score": NaN, "big": Infinity}',
    '{"id": ' + "9" * 4300 + '}',
]


def _by_json_loads(lines):
    return [(number, json.loads(line)) for number, line in enumerate(lines, start=1) if line.strip()]


def test_every_object_line_reads_as_json_loads_reads_it():
    lines = [GOOD_LINES[0], "", "   ", *GOOD_LINES[1:], "\t", GOOD_LINES[0]]
    read = list(iter_json_lines("\n".join(lines) + "\n", PATH))
    expected = _by_json_loads(lines)
    assert [number for number, _ in read] == [number for number, _ in expected]   # blank lines keep their numbers
    # json.dumps tells 1 from 1.0 and -0.0 from 0.0, keeps key order, and writes NaN as NaN
    assert [json.dumps(record) for _, record in read] == [json.dumps(record) for _, record in expected]
    assert all(type(record) is dict for _, record in read)


@pytest.mark.parametrize("line", [
    '[{"caption": "a list"}]', '"a string"', "3", "null", '{"caption": "a"} {"caption": "b"}',
    '{"caption": "a"}x', '{"caption": "a",', "{", "[", '{"caption": }', "{'caption': 'single quotes'}",
])
def test_a_bad_line_is_refused_with_json_loads_message(line):
    text = '{"caption": "fine"}\n\n' + line + "\n"
    with pytest.raises(DataError) as raised:
        list(iter_json_lines(text, PATH))
    message = str(raised.value)
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        assert message.startswith(f"{PATH}:3: invalid JSON line: {error.msg} (column {error.colno})"), message
    else:
        assert not isinstance(value, dict)
        assert message.startswith(f"{PATH}:3: expected a JSON object on each line, found "), message


def test_numbers_and_nesting_json_loads_cannot_read_are_one_line_errors():
    long_number = '{"id": ' + "9" * 5000 + "}"
    with pytest.raises(DataError, match=r"captions.jsonl:2: invalid JSON line: a number of 5,000 digits"):
        list(iter_json_lines('{"caption": "fine"}\n' + long_number + "\n", PATH))
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(DataError, match=r"captions.jsonl:1: invalid JSON line: nested too deeply"):
        list(iter_json_lines('{"a": ' + deep + "}\n", PATH))


def test_records_of_different_keys_give_every_key_in_first_seen_order():
    from capgeo.captions.tabular import records_table

    records = [{"caption": "a", "image": 1}, {"id": "x", "caption": "b"}, {}, {"score": 2, "image": 3, 7: "k"}]
    seen = []
    for record in records:
        seen += [key for key in record if key not in seen]
    table = records_table(records, lambda row: f"line {row + 1}", ["1", "2", "3", "4"])
    assert table.columns == ["caption", "image", "id", "score", "7"] == [str(key) for key in seen]
    assert table.get("id") == [None, "x", None, None] and table.height == 4
