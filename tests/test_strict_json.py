"""Numbers JSON cannot hold (NaN, infinities) are never written: results and recordings stay strict JSON."""

from __future__ import annotations

import json

import pytest

from bytesup.errors import BytesupError

from faultkit import completion_with, RawServer


def test_nan_is_never_written_to_json(tmp_path):
    from bytesup.files import write_json_atomic

    with pytest.raises(BytesupError, match=r"not a finite number.*rows\[0\]\[1\]"):
        write_json_atomic(tmp_path / "x.json", {"rows": [[1.0, float("nan")]]})
    assert not (tmp_path / "x.json").exists()


def test_a_recording_of_a_nan_answer_is_strict_json():
    from bytesup.llama.client import LlamaServer
    from bytesup.errors import ImplausibleValue
    from bytesup.llama.recording import RecordingTransport

    body = json.dumps(completion_with(completion_probabilities__0__top_logprobs__0__logprob=float("nan"))).encode()
    assert b"NaN" in body

    def nan(wfile):
        wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    sink: list = []
    with RawServer(nan) as server:
        with pytest.raises(ImplausibleValue):
            LlamaServer(server.url, transport=RecordingTransport(sink)).completion("x", n_predict=1, n_probs=8)
    line = json.dumps(sink[0], allow_nan=False)  # strict: the server's NaN kept as the text it sent
    assert '"logprob": "NaN"' in line
