"""The fast parse of an answer's JSON (`recording.exact_json`) gives what the strict parse gives, or leaves the
text to it: a repeated key, a NaN, anything but plain JSON is never read by it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bytesup.llama import recording
from bytesup.llama.recording import UNDECIDED, DuplicateKey, answer_json, exact_json, unique_keys

from faultkit import json_values

ROOT = Path(__file__).resolve().parents[1]


def strict(text: bytes):
    """What the strict parse makes of `text`: its value, "repeated" or "malformed"."""
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except DuplicateKey:
        return "repeated"
    except (ValueError, RecursionError):
        return "malformed"


def same(a, b) -> bool:
    """Equal values of equal types (1 and 1.0 differ; NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


@st.composite
def written(draw, value) -> str:
    """`value` as some writer of JSON might write it: any spacing, any character escaped, floats to 17 digits,
    and now and then a key written twice (with another value or the same one)."""
    space = st.sampled_from(["", "", " ", "\n", "\t "])

    def string(s: str) -> str:
        out = []
        for ch in s:
            if ch in '"\\' or ord(ch) < 0x20 or draw(st.integers(0, 9)) == 0:
                out.append(json.dumps(ch)[1:-1] if ord(ch) >= 0x80 else "\\u%04x" % ord(ch))
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'

    def write(v) -> str:
        if isinstance(v, dict):
            items = [(k, write(x)) for k, x in v.items()]
            if items and draw(st.integers(0, 3)) == 0:
                k, x = draw(st.sampled_from(items))
                again = x if draw(st.booleans()) else write(draw(json_values))
                items.insert(draw(st.integers(0, len(items))), (k, again))
            parts = [draw(space) + string(k) + draw(space) + ":" + draw(space) + x + draw(space) for k, x in items]
            return "{" + ",".join(parts) + "}"
        if isinstance(v, list):
            return "[" + ",".join(draw(space) + write(x) + draw(space) for x in v) + "]"
        if isinstance(v, str):
            return string(v)
        if isinstance(v, float) and math.isfinite(v) and draw(st.booleans()):
            return "%.17g" % v  # as a C library writes doubles
        return json.dumps(v)

    return write(value)


@given(data=st.data())
@settings(max_examples=400, deadline=None)
def test_the_fast_parse_reads_what_the_strict_one_reads_or_leaves_it_to_it(data):
    value = data.draw(json_values | st.dictionaries(st.text(max_size=4), json_values, max_size=5))
    text = data.draw(written(value)).encode("utf-8", errors="surrogatepass")
    expected, got = strict(text), exact_json(text)
    if got is not UNDECIDED:
        assert expected not in ("repeated", "malformed") and same(got, expected)


REPEATED = [
    '{"a": 1, "a": 2}',
    '{"a": 1, "a": 1}',
    '{"a": {"b": "x", "b": "x"}}',
    '{"a:": 1, "a:": 2}',
    '{"a": "1:2", "a": "3"}',
    '[{"k": 1}, {"k": 2, "k": 3}]',
    '{"a" : 1, "a" : 2}',
    '{"x": "\\u003a", "x": 1}',
    # As many colons written out again as in the text: the key lost to the repeat, and the escaped colon written as one.
    '{"a": 1, "a": "\\u003a"}',
    '{"a": 1, "a": "\\u003A"}',
    # The same, the escape after more escapes than are read one by one.
    '{"a": 1, "a": "' + "\\n" * (recording.ESCAPES_READ + 5) + '\\u003a"}',
    '{"a": 1, "a": "' + "\\\\" * (recording.ESCAPES_READ + 5) + '\\u003a"}',
]


LONG = 5000  # bytes of a long text, as a server's answer with candidates is (27 KB at n_probs 8)


def padded(text: str) -> str:
    """`text` inside a list after a long string."""
    return '["' + "x" * LONG + '", ' + text + "]"


@pytest.mark.parametrize("text", [*REPEATED, *map(padded, REPEATED), '{"a":NaN}', '{"a":Infinity}'])
def test_a_repeated_key_or_a_nan_is_left_to_the_strict_parse(text):
    assert len(padded("")) > LONG
    assert exact_json(text.encode()) is UNDECIDED
    assert "NaN" in text or "Infinity" in text or strict(text.encode()) == "repeated"


@pytest.mark.parametrize("text", [
    '{"a": "\\\\u003a"}',  # an escaped backslash, then the text u003a: no colon
    '{"a": "' + "\\n" * 70 + '"}',
    '{"a": ":", "b": "\\u0041"}',
])
@pytest.mark.parametrize("pad", [False, True])
def test_a_text_without_a_repeated_key_is_read_by_the_fast_parse(text, pad):
    text = padded(text) if pad else text
    got = exact_json(text.encode())
    assert got is not UNDECIDED and same(got, json.loads(text))


@pytest.mark.parametrize("text, colons, escaped", [
    (b'{"a":"b:c"}', 2, False),
    (b'{"a":"\\u003a"}', 1, True),
    (b'{"a":"\\\\u003a"}', 1, False),
    (b'{"a":"\\n\\u0039"}', 1, True),
    (b'{"a":"' + b"\\n" * 100 + b'\\u003a"}', 1, True),
    (b'{"a":"' + b"\\n" * 100 + b'"}', 1, False),
    (b'{"a":"' + b"\\\\" * 100 + b'u003a"}', 1, True),  # past the escapes read one by one: found, to be safe
    (b'{"a":"\\\\' + b"\\\\" * 3 + b'u003a"}', 1, False),
])
@pytest.mark.parametrize("pad", [0, 5000])
def test_colons_and_escaped_colons_counted_by_hand(text, colons, escaped, pad):
    text = b'["' + b"x" * pad + b'",' + text + b"]" if pad else text
    assert recording.colons(text) == colons and recording.escapes_colon(text) is escaped


@pytest.mark.parametrize("value", [2.0 ** 63, -(2.0 ** 63), 2.0 ** 64, 1e16, 1.7976931348623157e308, -1e300])
def test_orjson_writes_every_float_from_1e16_on_with_its_exponent(value):
    """exact_json's "+" check rests on this: an integer past 64 bits comes back from orjson as such a float."""
    assert b"e+" in orjson.dumps(value)


@pytest.mark.parametrize("text, value", [
    ('{"id": 123456789012345678901234567890}', {"id": 123456789012345678901234567890}),
    ("[18446744073709551616, -9223372036854775809]", [18446744073709551616, -9223372036854775809]),
    ("12345678901234567890123", 12345678901234567890123),
    ('{"a": "\\ud800"}', {"a": "\ud800"}),
    ('{"a": 1e400}', {"a": math.inf}),
])
def test_an_integer_past_64_bits_or_a_lone_surrogate_is_read_by_the_strict_parse(text, value):
    """orjson reads an integer past 64 bits as a float: a run of 19 digits leaves the body to the strict parse, which
    reads it as the integer it is."""
    assert exact_json(text.encode()) is UNDECIDED
    assert same(answer_json(text.encode()), value)


@pytest.mark.parametrize("text, value", [
    ("9223372036854775807", 9223372036854775807),
    ("[18446744073709551615, -9223372036854775808]", [18446744073709551615, -9223372036854775808]),
    ('{"id": 1234567890123456789, "t": "a"}', {"id": 1234567890123456789, "t": "a"}),
    ('{"id": 123456789012345678, "x": 1e300, "t": "+"}', {"id": 123456789012345678, "x": 1e300, "t": "+"}),
])
def test_an_integer_within_64_bits_is_read_exactly_by_the_fast_parse(text, value):
    """Written out again, a value whose integers orjson read exactly holds no "+" (no float from 1e16 on, none in a
    string), or its text no run of 19 digits."""
    got = exact_json(text.encode())
    assert got is not UNDECIDED and same(got, value)


def test_a_plus_written_out_again_leaves_a_run_of_19_digits_to_the_strict_parse():
    for text in ('{"id": 1234567890123456789, "x": 1e300}', '{"id": 1234567890123456789, "t": "+"}'):
        assert exact_json(text.encode()) is UNDECIDED
        assert same(answer_json(text.encode()), json.loads(text))


@pytest.mark.parametrize("text, long", [
    (b"[1.0018616351298987865, 12345678901234567890]", True),
    (b'{"logprob":-0.0018616351298987865,"id":9223372036854775807}', True),
    (b'{"logprob":-0.0018616351298987865,"id":922337203685477580}', False),  # 18 digits: within 64 bits
    (b"[0.1234567890123456789012]", False),
    (b'"1234567890123456789"', True),  # in a string too: the strict parse reads it alike, only slower
    (b"[1e1234567890123456789]", True),
])
def test_a_run_of_19_digits_after_anything_but_a_point_may_be_an_integer_past_64_bits(text, long):
    from bytesup.llama.recording import long_integer

    assert long_integer(text) is long


def test_a_repeated_key_is_refused_by_the_client_parse():
    with pytest.raises(DuplicateKey):
        answer_json(b'{"content": "a", "content": "b", "timings": {}}')


def recorded_answers():
    for path in sorted([*ROOT.glob("outputs/*/http/*.jsonl"), *ROOT.glob("tests/fixtures/**/*.jsonl")]):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                if isinstance(entry, dict) and "response" in entry:
                    yield entry["response"]
    for path in sorted(ROOT.glob("tests/fixtures/answers/*.json")):
        if not path.name.endswith(".request.json"):
            yield json.loads(path.read_bytes())
    for path in sorted(ROOT.glob("tests/fixtures/server/*.json")):
        entry = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(entry, dict) and "response" in entry:
            yield entry["response"]


def test_every_recorded_answer_reads_alike_both_ways():
    seen = 0
    for response in recorded_answers():
        for text in (json.dumps(response, ensure_ascii=False, allow_nan=False),
                     json.dumps(response, ensure_ascii=False, separators=(",", ":"))):
            got = exact_json(text.encode("utf-8"))
            assert got is not UNDECIDED and same(got, json.loads(text))
        seen += 1
    assert seen > 100


@pytest.mark.parametrize("n_probs", [0, 8, 64])
def test_a_servers_answer_as_it_wrote_it_is_read_by_the_fast_parse(n_probs):
    """The bytes llama-server wrote (tests/fixtures/answers: the default model, 32 tokens), 27 KB and 189 KB at n_probs
    8 and 64: no repeated key, no long integer, every escape read, so the fast parse reads them as json.loads does."""
    body = (ROOT / "tests" / "fixtures" / "answers" / f"harness_np{n_probs}.json").read_bytes()
    got = exact_json(body)
    assert got is not UNDECIDED and same(got, json.loads(body))
    assert recording.colons(body) == body.count(b":") and not recording.escapes_colon(body)
