"""One RunIdentity: what resume, compare and history read from a manifest, worded one way."""

from __future__ import annotations

import copy

from bytesup.store.identity import Difference, RunIdentity, differences, resume_differences, value_text
from bytesup.store.manifest import Manifest

RECORDED = {
    "host": {"hostname": "box", "cpu": "Xeon", "cores": 2, "memory_bytes": 8_000_000_000, "gpus": [], "os": "Linux",
             "python": "3.11.7"},
    "engine": {"engine": "embedded", "build": "xllamacpp 1", "build_info": "b0",
               "flags": {"--port": "8099", "--ctx-size": "2048", "--metrics": None, "--api-key": "secret"}},
    "model": {"path": "/m/smollm2.gguf", "size_bytes": 100, "sha256": "ab" * 32},
    "packages": {"numpy": "2.4"},
    "repository": {"commit": "c1", "dirty": False},
    "options": {"repeat": 3, "lesson_options": {"bandwidth_gbs": 273}},
}


MANIFEST = Manifest.model_validate(RECORDED)


def edited(**changes) -> Manifest:
    m = copy.deepcopy(RECORDED)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = m
        for p in parents:
            node = node[p]
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return Manifest.model_validate(m)


def test_the_identity_reads_every_property_and_leaves_out_flags_that_measure_nothing():
    ident = RunIdentity.of(MANIFEST)
    e = ident.entries()
    assert e["host"] == "box" and e["model file"] == "smollm2.gguf" and e["model sha256"] == "ab" * 32
    assert e["flag --ctx-size"] == "2048" and e["flag --metrics"] == "(set)"
    assert not any(k in e for k in ("flag --port", "flag --api-key"))
    assert e["package numpy"] == "2.4" and e["--repeat"] == 3 and e["--bandwidth-gbs"] == 273
    assert "engine build" not in ident.entries("setup") and "model sha256" not in ident.entries("software")


def test_setup_groups_runs_and_software_changes_do_not_split_a_group():
    base = RunIdentity.of(MANIFEST)
    upgraded = RunIdentity.of(edited(engine__build="xllamacpp 2", packages__numpy="2.5", options__repeat=5))
    other_host = RunIdentity.of(edited(host__hostname="spark"))
    assert base.setup_key() == upgraded.setup_key()
    assert base.setup_key() != other_host.setup_key()
    rebooted = RunIdentity.of(edited(host__memory_bytes=7_999_500_000))  # the OS reports a little less memory
    assert rebooted.setup_key() == base.setup_key() and differences(base, rebooted, "software") == []
    assert differences(base, rebooted) == [Difference("memory", 8_000_000_000, 7_999_500_000)]
    assert [d.label for d in differences(base, upgraded, "software")] == ["engine build", "package numpy", "--repeat"]
    fewer_flags = RunIdentity.of(edited())
    fewer_flags.flags.pop("--ctx-size")
    assert differences(base, fewer_flags) == [Difference("flag --ctx-size", "2048", None)]


def test_a_difference_is_one_sentence_with_the_same_value_wording_everywhere():
    d = Difference("flag --threads", None, "4")
    assert d.sentence("in the folder", "now") == "flag --threads: (not set) in the folder, 4 now"
    assert value_text(1_000_000) == "1,000,000" and value_text(True) == "yes" and value_text(None) == "(not set)"


def test_resume_checks_its_properties_and_not_what_the_folder_did_not_record():
    assert resume_differences(MANIFEST, MANIFEST) == []
    changed = edited(engine__build="xllamacpp 2", options__repeat=5, packages__numpy="9", repository__commit="c2")
    labels = [d.label for d in resume_differences(MANIFEST, changed)]
    assert labels == ["engine build", "--repeat"]  # packages and the commit may change between lessons of a run
    older = edited(options=None, engine__build=None)  # an older manifest: no options, no build recorded
    assert resume_differences(older, changed) == []
    flag_added = edited()
    flag_added.engine.flags["--threads"] = "4"
    assert [d.sentence("in the folder", "now") for d in resume_differences(MANIFEST, flag_added)] == [
        "flag --threads: (not set) in the folder, 4 now"]
