"""Lesson 9: a model split across rpc-servers. The network bytes and the extended bytes model against hand
arithmetic, the topology read from a recorded server log, main on hand-made answers, the golden replay of the
recorded run, and compare's view of two topologies."""

from __future__ import annotations

import contextlib
import importlib.util
import json
from pathlib import Path

import pytest

from bytesup.course.ceiling import Spread
from bytesup.llama import topology
from bytesup.check.compare import Run, compare_runs, run_identity
from bytesup.store.results import LessonResult, Measurement
from bytesup.store.manifest import Manifest
from bytesup.store.views import lesson09

from lessonkit import QueuedServer, hand_context, recorded, recorded_exchanges, replay

LESSON_ID = "09_beyond_one_machine"
ROOT = Path(__file__).resolve().parents[1]
LOG = Path(__file__).parent / "fixtures" / "rpc" / "split-server.log"


def lesson():
    spec = importlib.util.spec_from_file_location("lesson09", ROOT / "lessons" / f"{LESSON_ID}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


L = lesson()


# --- the network term, by hand ------------------------------------------------------------------------

def test_network_bytes_per_token_two_nodes_by_hand():
    # SmolLM2-135M: width 576, vocabulary 49,152; F32 activations. Two nodes: in to node 1 (1 hop), node 1 ->
    # driver -> node 2 (2 hops): 3 hops of 576 × 4 = 2,304 bytes = 6,912; logits 49,152 × 4 = 196,608.
    n = L.network_bytes_per_token(576, 49152, 2)
    assert (n.hops, n.activation_bytes, n.logits_bytes, n.total_bytes) == (3, 6912, 196608, 203520)


def test_network_bytes_per_token_one_and_no_node():
    one = L.network_bytes_per_token(576, 49152, 1)
    assert (one.hops, one.activation_bytes, one.total_bytes) == (1, 2304, 2304 + 196608)
    four = L.network_bytes_per_token(4096, 32000, 4, bytes_per_value=2)  # 7 hops × 4,096 × 2 = 57,344; 64,000
    assert (four.hops, four.activation_bytes, four.logits_bytes) == (7, 57344, 64000)
    assert L.network_bytes_per_token(576, 49152, 0).total_bytes == 0


def test_predict_split_by_hand():
    whole = lesson09.Speeds("whole", 1, [2], Spread(500.0, 490.0, 510.0), Spread(100.0, 95.0, 105.0))
    net = L.network_bytes_per_token(576, 49152, 2)  # 203,520 bytes
    p = L.predict_split(whole, 100_000_000, [40_000_000, 60_000_000], [1, 1], 50e-6, net, 1.25e9)
    # 100 MB × 100 tokens/s ÷ 2 threads = 5 GB/s per thread; 40 MB ÷ 5 GB/s = 8 ms, 60 MB ÷ 5 GB/s = 12 ms;
    # 1 round trip × 2 nodes × 50 µs = 100 µs; 203,520 B ÷ 1.25 GB/s = 162.816 µs. Total 20.262816 ms.
    assert p.bytes_per_thread_per_s == pytest.approx(5e9)
    assert p.node_seconds == pytest.approx([0.008, 0.012])
    assert (p.round_trips, p.round_trip_seconds) == (2, pytest.approx(100e-6))
    assert p.link_seconds == pytest.approx(162.816e-6)
    assert p.seconds_per_token == pytest.approx(0.020262816)
    assert p.tokens_per_s == pytest.approx(49.351482, rel=1e-6)  # 1000 ÷ 20.262816
    # The record states what it assumed, and the prediction table reads it from there: 1 round trip a node, 1.25 GB/s.
    assert (p.round_trips_per_node, p.link_bytes_per_s) == (1, 1.25e9)
    outcome = lesson09.Outcome(whole, whole, [], net, {"127.0.0.1:1": 50e-6, "127.0.0.1:2": 50e-6}, p)
    terms = [r.term for r in lesson09.prediction_rows(outcome)]
    assert terms[2:4] == ["2 round trips (1 per node)", "203,520 bytes at 1.25 GB/s"]
    assert "1.25 GB/s is 10 Gbit/s Ethernet, slower than loopback" in lesson09.prediction(outcome).notes[1]


def test_node_shares_by_hand():
    # 40 MiB and 60 MiB of weights: 40% and 60% of the 100 MiB this server placed; a KV cache not given is 0 bytes.
    where = {"devices": [{"device": "RPC0", "endpoint": "127.0.0.1:1", "model_bytes": 40 * 2**20, "kv_bytes": 5},
                         {"device": "RPC1", "endpoint": "127.0.0.1:2", "model_bytes": 60 * 2**20}]}
    first, second = L.node_shares("split", where)
    assert (first.model_mib, first.share_percent, first.kv_bytes) == (40.0, 40.0, 5)
    assert (second.model_mib, second.share_percent, second.kv_bytes) == (60.0, 60.0, 0)
    # No weights at all: every share is 0%, not a division by zero.
    assert L.node_shares("whole", {"devices": [{"device": "CPU", "model_bytes": 0}]})[0].share_percent == 0.0
    assert L.node_shares("whole", {}) == []


# --- the topology, from a recorded log --------------------------------------------------------------

def test_topology_from_recorded_split_log():
    where = topology.from_log(LOG.read_text(), "127.0.0.1:49903,127.0.0.1:49904")
    assert where["rpc"] == ["127.0.0.1:49903", "127.0.0.1:49904"] and where["nodes"] == 2
    assert (where["layers_offloaded"], where["layers_total"]) == (31, 31)
    rpc_devices = topology.rpc_devices(where)
    assert [d["endpoint"] for d in rpc_devices] == ["127.0.0.1:49903", "127.0.0.1:49904"]
    assert [d["device"] for d in rpc_devices] == ["RPC0", "RPC0"]  # each rpc-server's first device; the endpoint tells them apart
    # Each "X.YZ MiB" × 1,048,576, rounded: checked against the log's own figures below.
    for d in rpc_devices:
        line = next(x for x in LOG.read_text().splitlines() if f"{d['device']}[{d['endpoint']}] model buffer size" in x)
        mib = float(line.split("=")[1].split()[0])
        assert d["model_bytes"] == round(mib * 1048576)
        assert d["model_bytes"] > 10 * 1048576  # each node holds a real share of the weights


def test_topology_from_hand_written_lines():
    text = ("load_tensors: offloaded 31/31 layers to GPU\n"
            "load_tensors:   CPU_Mapped model buffer size =    27.00 MiB\n"
            "load_tensors: RPC0[10.0.0.2:50052] model buffer size =   256.63 MiB\n"
            "llama_kv_cache: RPC0[10.0.0.2:50052] KV buffer size =     1.50 MiB\n")
    where = topology.from_log(text, "10.0.0.2:50052")
    cpu, node = where["devices"]
    assert cpu == {"device": "CPU_Mapped", "endpoint": None, "model_bytes": 27 * 1048576, "kv_bytes": 0}
    # 256.63 MiB = 268,435,456 + 0.63 × 1,048,576 (660,602.88) = 269,096,058.88 -> 269,096,059 bytes
    assert node == {"device": "RPC0", "endpoint": "10.0.0.2:50052", "model_bytes": 269_096_059, "kv_bytes": 1_572_864}


def test_describe_ignores_ports_and_differs_names_both():
    a = topology.from_log("RPC0[127.0.0.1:1111] model buffer size = 10.00 MiB\n", "127.0.0.1:1111")
    b = topology.from_log("RPC0[127.0.0.1:2222] model buffer size = 10.00 MiB\n", "127.0.0.1:2222")
    assert topology.describe(a) == "1 RPC nodes: 127.0.0.1 (10.0 MiB)"
    assert topology.differs(a, b) == ""
    assert topology.describe(None) == "one process" and topology.differs(None, {"rpc": []}) == ""
    assert topology.differs(None, a) == "different topology: one process vs 1 RPC nodes: 127.0.0.1 (10.0 MiB)"


# --- compare: another topology is another setup --------------------------------------------------------------

def _run(name: str, engine: dict, decode: list[float]) -> Run:
    result = LessonResult(lesson_id="04_next_token", title="t", started_at="2026-01-01T00:00:00+00:00",
                          finished_at="2026-01-01T00:00:01+00:00",
                          measurements=[Measurement.of("decode_tokens_per_s", "tokens/s", decode, higher_is_better=True)])
    manifest = Manifest(kind="bytesup-run", engine=engine, model={"path": "m.gguf", "size_bytes": 1, "sha256": "ab"})
    return Run(path=Path(name), manifest=manifest, results={"04_next_token": result})


def test_compare_marks_another_topology_not_comparable():
    split = topology.from_log(LOG.read_text(), "127.0.0.1:49903,127.0.0.1:49904")
    one = _run("a", {"engine": "llama-server", "build": "b1"}, [100.0, 101.0, 99.0])
    two = _run("b", {"engine": "llama-server", "build": "b1", "topology": split}, [45.0, 46.0, 44.0])
    assert run_identity(one).values["topology"] is None
    assert run_identity(two).values["topology"].startswith("2 RPC nodes: 127.0.0.1 (")
    c = compare_runs(one, two)
    assert [r.verdict for r in c.rows] == ["not comparable"]  # never "worse": 100 -> 45 tokens/s is the split, not a regression
    assert c.rows[0].reason.startswith("different topology: one process vs 2 RPC nodes")
    assert any(k == "topology" for k, _, _ in c.identity)
    same = compare_runs(two, _run("c", {"engine": "llama-server", "build": "b1", "topology": split}, [45.0, 46.0, 44.0]))
    assert [r.verdict for r in same.rows] != ["not comparable"]


# --- main on hand-made answers ----------------------------------------------------------------------------

def _completion(prompt_ms: float, predicted_ms: float) -> dict:
    return {"content": "x", "timings": {"prompt_n": 128, "prompt_ms": prompt_ms, "predicted_n": 32, "predicted_ms": predicted_ms}}


def test_main_on_hand_made_answers():
    tokens = {"tokens": list(range(200))}
    servers = {
        # whole: prefill 128 tokens in 256 ms = 500 tokens/s (and 320 ms: 400); decode 31 passes in 310 ms = 100 tokens/s (and 620: 50)
        "whole": QueuedServer({"/tokenize": [tokens], "/completion": [_completion(256, 310), _completion(320, 620)]}),
        # split: prefill 128 in 512 ms = 250 tokens/s (and 640: 200); decode 31 passes in 775 ms = 40 tokens/s (twice)
        "split": QueuedServer({"/tokenize": [tokens], "/completion": [_completion(512, 775), _completion(640, 775)]}),
    }
    mib = 1048576
    split_log = ("load_tensors: offloaded 31/31 layers to GPU\n"
                 "load_tensors: CPU_Mapped model buffer size = 27.00 MiB\n"
                 "load_tensors: RPC0[127.0.0.1:7001] model buffer size = 40.00 MiB\n"
                 "load_tensors: RPC1[127.0.0.1:7002] model buffer size = 60.00 MiB\n")
    host = {
        "model": {"name": "m", "path": "/m.gguf", "n_layer": 30, "n_embd": 576, "n_vocab": 49152, "tensor_bytes": 100 * mib},
        "option_rpc": None,
        "rpc_engine_available": True,
        "topology_whole": topology.from_log("load_tensors: CPU_Mapped model buffer size = 127.00 MiB\n"),
        "rpc_endpoints": ["127.0.0.1:7001", "127.0.0.1:7002"],
        "connect_seconds": {"127.0.0.1:7001": 40e-6, "127.0.0.1:7002": 60e-6},
        "topology_split": topology.from_log(split_log, "127.0.0.1:7001,127.0.0.1:7002"),
    }
    ctx = hand_context(LESSON_ID, servers["whole"], host_values=host,
                       identity={"server": {"flags": {"--threads": "2"}}})
    started = []

    @contextlib.contextmanager
    def local_server(label, shape):
        assert shape.native  # both setups on a native llama-server: the same engine, the split the only difference
        assert (shape.slots, shape.context) == (1, L.CTX)
        started.append((label, shape.model, shape.argv()))
        yield servers[label].server

    ctx.local_server = local_server
    result = L.main(ctx)

    assert [s.left() for s in servers.values()] == [{}, {}]
    (w_label, w_model, w_flags), (s_label, _, s_flags) = started
    assert (w_label, str(w_model), s_label) == ("whole", "/m.gguf", "split")
    assert w_flags[w_flags.index("-t") + 1] == "1" and "--rpc" not in w_flags  # the threads of one node: 2 ÷ 2
    assert s_flags[s_flags.index("--rpc") + 1] == "127.0.0.1:7001,127.0.0.1:7002" and s_flags[s_flags.index("-ngl") + 1] == "99"

    setups = {row[0]: row for row in result.table("setups").rows}
    assert setups["whole"][3:10] == [450.0, 400.0, 500.0, 75.0, 50.0, 100.0, 1.0]  # medians of two samples
    assert setups["split"][3:10] == [225.0, 200.0, 250.0, 40.0, 40.0, 40.0, pytest.approx(40 / 75)]
    assert setups["whole"][2] == "1" and setups["split"][2] == "1, 1"  # 2 threads ÷ 2 nodes, the same in both setups
    nodes = [r for r in result.table("nodes").rows if r[0] == "split"]
    assert [(r[1], r[3], r[5]) for r in nodes] == [("CPU_Mapped", 27 * mib, pytest.approx(100 * 27 / 127)),
                                                   ("RPC0", 40 * mib, pytest.approx(100 * 40 / 127)),
                                                   ("RPC1", 60 * mib, pytest.approx(100 * 60 / 127))]
    assert result.fact("network_bytes_per_token") == 203520
    assert result.fact("weights_bytes_per_node") == [40 * mib, 60 * mib]
    # Rate per thread: 100 MiB × 75 tokens/s ÷ 1 thread = 7,864,320,000 B/s. Node 1 (1 thread): 40 MiB ÷ that =
    # 5.3333 ms, node 2: 8 ms; 2 round trips × the median connect time 50 µs = 100 µs; 203,520 B ÷ 1.25 GB/s = 162.816 µs.
    seconds = 40 / 75 / 100 + 60 / 75 / 100 + 100e-6 + 162.816e-6
    assert seconds == pytest.approx(0.0135961493, rel=1e-8)
    assert result.fact("predicted_split_decode_tokens_per_s") == pytest.approx(1 / seconds)
    prediction = {row[0]: row for row in result.table("prediction").rows}
    assert prediction["predicted: one token"][1] == pytest.approx(1e3 * seconds)
    assert prediction["predicted ÷ measured − 1"][2] == pytest.approx(100 * ((1 / seconds) / 40 - 1))
    assert result.fact("decode_tokens_per_s") == {"whole": 75.0, "split": 40.0}
    decode = {m.settings["setup"]: m for m in result.measurements if m.name == "decode_tokens_per_s"}
    assert decode["whole"].settings["topology"] == "one process"
    assert decode["split"].settings["topology"].startswith("2 RPC nodes: 127.0.0.1 (40.0 MiB), 127.0.0.1 (60.0 MiB)")
    assert [p.name for p in result.plots] == ["decode_by_setup"]
    # The main table has the medians; every column is under Details
    assert result.table("setups").detail and [c.name for c in result.table("setups_main").columns] == lesson09.SETUP_SHOWN
    # What the run shows: 40 against 75 tokens/s is 0.53 ×, slower; predicted 1 ÷ seconds = 73.5 tokens/s, +84% of 40
    assert result.shows.plot == "decode_by_setup"
    assert result.shows.text.startswith("Split across 2 rpc-servers, ")
    assert "decoded 40 tokens/s against 75 in one process (0.53×): slower." in result.shows.text
    assert f"predicted {1 / seconds:.3g} tokens/s ({100 * ((1 / seconds) / 40 - 1):+.0f}%)" in result.shows.text


def test_without_an_rpc_capable_server_the_lesson_says_how_to_build_one():
    model = {"name": "m", "path": "/m.gguf", "n_layer": 30, "n_embd": 576, "n_vocab": 49152, "tensor_bytes": 1000}
    server = QueuedServer({})
    ctx = hand_context(LESSON_ID, server, host_values={"model": model, "option_rpc": None, "rpc_engine_available": False},
                       identity={"server": {"flags": {"--threads": "2"}}})
    result = L.main(ctx)
    assert server.requests == [] and result.tables == [] and result.measurements == []
    assert result.notes == [L.NO_RPC_ENGINE] and "scripts/build_llama_server.sh" in L.NO_RPC_ENGINE
    assert result.shows.text == lesson09.NOT_MEASURED and result.shows.plot is None


def test_the_rpc_engine_is_found_or_not(monkeypatch, tmp_path):
    (tmp_path / "llama-server").write_text("#!/bin/sh\n")
    (tmp_path / "llama-server").chmod(0o755)
    monkeypatch.setenv("LLAMA_SERVER", str(tmp_path / "llama-server"))
    assert L.rpc_engine_available() is True
    monkeypatch.delenv("LLAMA_SERVER")
    monkeypatch.setenv("BYTESUP_CACHE", str(tmp_path / "empty-cache"))
    assert L.rpc_engine_available() is False


# --- the recorded run ------------------------------------------------------------------------------------

def test_golden_replay(tmp_path):
    result = replay(LESSON_ID, tmp_path)
    manifest = json.loads((recorded(LESSON_ID) / "manifest.json").read_text(encoding="utf-8"))
    split = result.fact("split_topology")
    assert len(topology.rpc_devices(split)) == 2 and split["layers_offloaded"] == split["layers_total"]
    # The recorded speeds, recomputed by hand from the recorded exchanges' timings.

    decode = {}
    for e in recorded_exchanges(LESSON_ID):
        if e["path"] == "/completion":
            t = e["response"]["timings"]
            decode.setdefault(e["server"], []).append(1000.0 * (t["predicted_n"] - 1) / t["predicted_ms"])
    for setup, samples in decode.items():
        m = next(x for x in result.measurements if x.name == "decode_tokens_per_s" and x.settings["setup"] == setup)
        assert m.samples == pytest.approx(samples)
    assert manifest["lessons"][LESSON_ID]["status"] == "ok"


def test_what_the_run_shows_follows_hand_made_speeds():
    whole = lesson09.Speeds("whole", 1, [2], Spread(500.0, 490.0, 510.0), Spread(100.0, 95.0, 105.0))
    net = L.network_bytes_per_token(576, 49152, 2)  # 203,520 bytes
    p = L.predict_split(whole, 100_000_000, [40_000_000, 60_000_000], [1, 1], 50e-6, net, 1.25e9)  # 49.35 tokens/s

    def said(decode):
        split = lesson09.Speeds("split", 2, [1, 1], Spread(500.0, 490.0, 510.0), Spread(decode, decode, decode))
        return lesson09.shows(lesson09.Outcome(whole, split, [], net, {"127.0.0.1:1": 50e-6}, p), "m", 100_000_000)

    # 50 against 100 tokens/s: 0.5 ×, slower; 49.35 predicted is 1% under 50; 100,000,000 ÷ 203,520 = 491
    assert said(50.0) == ("Split across 2 rpc-servers, m decoded 50 tokens/s against 100 in one process (0.50×): slower. "
                          "The bytes model with a network term predicted 49.4 tokens/s (-1%), and the 203,520 bytes a token "
                          "sends over the network are 491× fewer than the 100,000,000 bytes of weights it reads: the split "
                          "buys room for a larger model, not speed.")
    assert "(1.00×): about as fast." in said(100.0)
    faster = said(130.0)
    assert "(1.30×): faster, which the split alone cannot do (the nodes take turns):" in faster
    assert faster.endswith("bytes of weights it reads.")


def test_split_verdict_is_judged_within_ten_percent():
    assert lesson09.split_verdict(0.74).startswith("slower")
    assert lesson09.split_verdict(0.95).startswith("about as fast") and lesson09.split_verdict(1.05).startswith("about as fast")
    assert lesson09.split_verdict(15.4).startswith("faster, which the split alone cannot do")


def test_loopback_wording_only_when_every_node_is_on_this_machine():
    def outcome(*endpoints):
        return lesson09.Outcome(None, None, [], None, {e: 1e-4 for e in endpoints}, None)

    assert outcome("127.0.0.1:50052", "localhost:50053", "[::1]:50054").on_loopback
    assert not outcome("127.0.0.1:50052", "10.0.0.2:50052").on_loopback
