"""Platform yaml files (hpcshuffle/scale/platform_yaml.py, read into scale/platform.py through an OmegaConf
structured config): the shipped ones load, every mistake in one is refused with the file, the key and the fix
named (OmegaConf's words for a wrong type, the section's `__post_init__` for a value out of range), and the
α–β allreduce and fat-tree capacity are exact."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from hpcshuffle.scale.platform import (
    Allreduce,
    Distribution,
    Network,
    Platform,
    PlatformError,
)
from hpcshuffle.scale.platform_yaml import (
    PLATFORM_DIR,
    load_platform,
    platform_from_dict,
)

TINY = Path(__file__).resolve().parents[1] / "data" / "platform_tiny.yaml"
# costs a platform may leave out of the model on purpose ("not charged"): 0 is a valid value
MAY_BE_ZERO = {"loader.cpu_per_file", "shared.client_cpu_per_file", "shared.background_load", "allreduce.overlap",
               "loader.prefetch", "exchange.slot_cpu", "exchange.slot_bytes", "exchange.noise.mean", "machine_cores"}
USED = {"fixed": {"mean"}, "lognormal": {"mean", "cv"}, "pareto": {"mean", "shape"}}  # a distribution's parameters


def tiny_raw() -> dict:
    """tests/data/platform_tiny.yaml as a fresh dict, to break one key at a time."""
    return copy.deepcopy(yaml.safe_load(TINY.read_text()))


def refused(raw: dict) -> str:
    with pytest.raises(PlatformError) as caught:
        platform_from_dict(raw, "broken.yaml")
    assert isinstance(caught.value, ValueError)  # the CLI prints ValueErrors as usage errors
    message = str(caught.value)
    assert "broken.yaml" in message  # the file is named
    return message


def numbers(value, prefix: str = ""):
    """(dotted key, number) for every int/float of a platform, sections and tables included."""
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            if f.name != "extra" and (not isinstance(value, Distribution) or f.name in USED[value.dist]):
                yield from numbers(getattr(value, f.name), f"{prefix}{f.name}.")
    elif isinstance(value, dict):
        for key, entry in value.items():
            yield from numbers(entry, f"{prefix}{key}.")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield prefix.rstrip("."), value


# ---- the shipped platforms ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["abci", "lassen"])
def test_shipped_platform_loads_with_every_number_positive(name):
    platform = load_platform(name)
    assert platform.name == name
    assert platform.source == str(PLATFORM_DIR / f"{name}.yaml")
    assert platform.network.topology == "fat_tree"
    assert "resnet50" in platform.models and "imagenet1k" in platform.datasets
    values = dict(numbers(platform))
    assert len(values) > 30
    for key, value in values.items():
        assert math.isfinite(value), key
        if key.split(".", 1)[-1] not in MAY_BE_ZERO and key not in MAY_BE_ZERO:
            assert value > 0, f"{name}: {key} = {value}"


@pytest.mark.parametrize("path", sorted(PLATFORM_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_yaml_loads_with_finite_non_negative_numbers(path):
    platform = load_platform(str(path))
    assert platform.name == path.stem
    for key, value in numbers(platform):
        assert math.isfinite(value) and value >= 0, f"{path.name}: {key} = {value}"


def test_abci_fat_tree_holds_1088_nodes_of_4_ranks():
    abci = load_platform("abci")
    assert abci.network.fat_tree == "2;34,32;1,2;2,12"
    assert abci.network.leaves() == 1088 == abci.nodes
    abci.check_workers(4352)
    assert abci.nodes_for(4352) == 1088
    assert abci.nodes_for(4) == 1
    assert abci.nodes_for(5) == 2
    with pytest.raises(PlatformError) as caught:
        abci.check_workers(5000)
    message = str(caught.value)
    assert "at most 4352 ranks" in message and "asked for 5000" in message
    assert "1088 nodes × 4 ranks per node" in message
    assert "fewer workers" in message and "nodes:" in message  # the fix


def test_lassen_capacity_is_bounded_by_its_fat_tree_not_its_node_count():
    lassen = load_platform("lassen")
    assert lassen.nodes == 795
    assert lassen.network.leaves() == 18 * 44 == 792
    lassen.check_workers(792 * 4)
    with pytest.raises(PlatformError, match="at most 3168 ranks"):
        lassen.check_workers(792 * 4 + 1)


@pytest.mark.parametrize("workers", [0, -3])
def test_check_workers_refuses_fewer_than_one(workers):
    with pytest.raises(PlatformError, match=f"workers must be >= 1, got {workers}"):
        load_platform("abci").check_workers(workers)


def test_network_leaves():
    fabric = Network("fat_tree", 1.0, 1.0, 1.0, 1.0, fat_tree="2;34,32;1,2;2,12")
    assert fabric.leaves() == 1088
    assert Network("fat_tree", 1.0, 1.0, 1.0, 1.0, fat_tree="3;4,4,2;1,2,2;1,1,1").leaves() == 32
    assert Network("star", 1.0, 1.0, 1.0, 1.0).leaves() == math.inf


def test_star_capacity_is_its_nodes():
    raw = tiny_raw()
    raw["network"] = {key: value for key, value in raw["network"].items() if key != "fat_tree"}
    raw["network"]["topology"] = "star"
    platform = platform_from_dict(raw)
    platform.check_workers(32)
    with pytest.raises(PlatformError, match="at most 32 ranks"):
        platform.check_workers(33)


# ---- the α–β allreduce ------------------------------------------------------------------------

def test_allreduce_seconds_is_the_ring_alpha_beta_model():
    ring = Allreduce(alpha=1e-5, bandwidth=1e9)
    # 2(M−1)α + 2(M−1)/M · S/B with M = 4, S = 1 MB: 6e-5 + 1.5e-3
    assert ring.seconds(4, 1e6) == pytest.approx(1.56e-3, rel=1e-12)
    # M = 2: 2α + S/B
    assert ring.seconds(2, 1e6) == pytest.approx(2e-5 + 1e-3, rel=1e-12)
    # abci at 4,096 ranks, ResNet-50: 2·4095·9.4e-6 + 2·4095/4096 · 102228128 / 2.3e10
    abci = load_platform("abci")
    expected = 2 * 4095 * 9.4e-6 + 2 * 4095 / 4096 * 1.02228128e8 / 2.3e10
    assert abci.allreduce.seconds(4096, abci.model("resnet50").gradient_bytes) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("ranks", [1, 0])
def test_allreduce_of_one_rank_costs_nothing(ranks):
    assert Allreduce(alpha=1.0, bandwidth=1.0).seconds(ranks, 1e9) == 0.0


# ---- loading: names, paths, tables ---------------------------------------------------------------

def test_tiny_fixture_loads_from_its_path():
    platform = load_platform(str(TINY))
    assert isinstance(platform, Platform)
    assert (platform.name, platform.nodes, platform.ranks_per_node) == ("tiny", 16, 2)
    assert platform.network.leaves() == 16
    assert platform.source == str(TINY)
    assert platform.model("tiny").fwbw_per_sample == 1e-4
    assert platform.dataset("tiny").samples == 2048
    assert isinstance(platform.dataset("tiny").samples, int)
    assert isinstance(platform.loader.workers, int)


def test_calibration_notes_are_kept():
    raw = tiny_raw()
    raw["calibration"] = {"runs": ["a", "b"]}
    extra = platform_from_dict(raw).extra
    assert extra["calibration"] == {"runs": ["a", "b"]}
    assert extra["raw"] == raw and extra["ranges"] == {}


def test_unknown_platform_name_lists_the_known_ones():
    with pytest.raises(PlatformError) as caught:
        load_platform("abcd")
    message = str(caught.value)
    assert "unknown platform 'abcd'" in message
    assert "'abci'" in message and "'lassen'" in message
    assert "yaml file's path" in message and "scale calibrate" in message  # the fixes


def test_missing_platform_file_is_named(tmp_path):
    missing = tmp_path / "nowhere.yaml"
    with pytest.raises(PlatformError, match=f"platform file {missing} does not exist"):
        load_platform(str(missing))


def test_a_yaml_that_is_not_a_mapping_is_refused(tmp_path):
    listed = tmp_path / "list.yaml"
    listed.write_text("- nodes\n- network\n")
    with pytest.raises(PlatformError, match="a platform is a mapping of keys, got list"):
        load_platform(str(listed))


def test_unknown_model_lists_the_platforms_models():
    with pytest.raises(PlatformError) as caught:
        load_platform("abci").model("resnet51")
    message = str(caught.value)
    assert "describes no model 'resnet51'" in message
    assert "'resnet50'" in message and "'densenet161'" in message
    assert "models: in the yaml" in message


def test_unknown_dataset_lists_the_platforms_datasets():
    with pytest.raises(PlatformError) as caught:
        load_platform("abci").dataset("imagenet21k")
    message = str(caught.value)
    assert "describes no dataset 'imagenet21k'" in message
    assert "['imagenet1k']" in message and "datasets: in the yaml" in message


# ---- refused yaml: each message names the key and the fix ---------------------------------------

def test_unknown_top_level_key_is_named_with_the_allowed_keys():
    raw = tiny_raw()
    raw["node"] = 4
    message = refused(raw)
    assert "unknown key node;" in message
    for allowed in ("nodes", "ranks_per_node", "network", "shared", "models", "calibration"):
        assert f"'{allowed}'" in message
    assert "conf/platform/abci.yaml" in message


def test_misspelt_section_key_is_named_with_the_sections_keys():
    raw = tiny_raw()
    raw["shared"]["read_bandwith"] = raw["shared"].pop("read_bandwidth")
    message = refused(raw)
    assert "unknown key shared.read_bandwith;" in message
    keys = ["read_bandwidth", "metadata_rate", "servers", "service", "file_latency", "client_cpu_per_file",
            "client_spread", "background_load"]
    assert str(sorted(keys)) in message


def test_misspelt_model_key_is_named_with_its_table_entry():
    raw = tiny_raw()
    raw["models"]["tiny"]["gradient_byte"] = 1.0
    message = refused(raw)
    assert "unknown key models.tiny.gradient_byte;" in message
    assert "'gradient_bytes'" in message and "'fwbw_per_sample'" in message


def test_missing_top_level_key_is_named():
    raw = tiny_raw()
    del raw["loader"], raw["ranks_per_node"]
    message = refused(raw)
    assert "missing loader, ranks_per_node" in message
    assert "conf/platform/abci.yaml" in message


def test_description_is_optional():
    raw = tiny_raw()
    del raw["description"]
    assert platform_from_dict(raw).description == ""


@pytest.mark.parametrize("section, key", [("network", "link_latency"), ("datasets", "samples")])
def test_missing_section_key_is_named(section, key):
    raw = tiny_raw()
    where = raw["datasets"]["tiny"] if section == "datasets" else raw[section]
    del where[key]
    message = refused(raw)
    assert (f"missing {section}.tiny.{key}" if section == "datasets" else f"missing {section}.{key}") in message
    assert "conf/platform/abci.yaml" in message


def test_non_number_is_refused():
    raw = tiny_raw()
    raw["local"]["read_bandwidth"] = "fast"
    assert "local.read_bandwidth: Value 'fast' of type 'str' could not be converted to Float" in refused(raw)


def test_non_number_scalar_is_refused():
    raw = tiny_raw()
    raw["nodes"] = "many"
    assert "nodes: Value 'many' of type 'str' could not be converted to Integer" in refused(raw)


@pytest.mark.parametrize("key", ["nodes", "loader.workers", "datasets.tiny.samples"])
def test_fractional_count_is_refused(key):
    raw = tiny_raw()
    *path, last = key.split(".")
    where = raw
    for part in path:
        where = where[part]
    where[last] = 2.5
    assert f"{key}: Value '2.5' of type 'float' could not be converted to Integer" in refused(raw)


def test_negative_number_is_refused():
    raw = tiny_raw()
    raw["shared"]["file_latency"] = -1e-3
    assert "shared.file_latency must be >= 0, got -0.001" in refused(raw)


@pytest.mark.parametrize("key, value, message", [
    ("nodes", 0, "nodes must be >= 1, got 0"), ("ranks_per_node", 0, "ranks_per_node must be >= 1, got 0"),
    ("cpu_cores_per_node", 0, "cpu_cores_per_node must be >= 1, got 0"),
    ("accelerators_per_node", -1, "accelerators_per_node must be >= 0 (0: FW+BW on the CPU cores), got -1"),
    ("machine_cores", -2, "machine_cores must be >= 0 (0: each node has its own cores), got -2"),
])
def test_node_shape_out_of_range_is_refused(key, value, message):
    raw = tiny_raw()
    raw[key] = value
    assert message in refused(raw)


def test_cpu_only_platform_loads():
    raw = tiny_raw()
    raw["accelerators_per_node"] = 0
    assert platform_from_dict(raw).accelerators_per_node == 0


def test_section_that_is_not_a_mapping_is_refused():
    raw = tiny_raw()
    raw["network"] = "infiniband"
    assert "network: Invalid type assigned: str is not a subclass of Network. value: infiniband" in refused(raw)


@pytest.mark.parametrize("table", ["models", "datasets"])
@pytest.mark.parametrize("value, message", [
    ({}, "{table}: needs at least one named entry, got {{}}"),
    (None, "{table}: field '{table}' is not Optional"),
    (["tiny"], "{table}: Invalid type assigned: list is not a subclass of Dict[str, "),
])
def test_empty_table_is_refused(table, value, message):
    raw = tiny_raw()
    raw[table] = value
    assert message.format(table=table) in refused(raw)


def test_unknown_topology_lists_the_known_ones():
    raw = tiny_raw()
    raw["network"]["topology"] = "torus"
    message = refused(raw)
    assert "network.topology 'torus' is not one of ['fat_tree', 'star']" in message


@pytest.mark.parametrize("fat_tree", [
    "2;4,4;1,2",  # three parts
    "2;4;1,2;1,1",  # one count where the levels need two
    "two;4,4;1,2;1,1",  # levels not a number
    "2;4,x;1,2;1,1",  # a count not a number
    "2;4,0;1,2;1,1",  # a count below 1
    "0;;;",  # no level
    "",  # missing
])
def test_malformed_fat_tree_is_refused_with_an_example(fat_tree):
    raw = tiny_raw()
    raw["network"]["fat_tree"] = fat_tree
    message = refused(raw)
    assert f"network.fat_tree {fat_tree!r} is not SimGrid's 'levels;down;up;link_counts'" in message
    assert "e.g. '2;32,16;1,16;2,1'" in message


# A bandwidth, rate or loader width of 0 is not "free": SimGrid then deadlocks (shared.metadata_rate,
# and the run comes back as a 0 s epoch), divides by zero (allreduce.bandwidth, loader.workers,
# which aborts the simulation's process), takes the disk as infinitely fast (local.read_bandwidth)
# or refuses the fabric with its own message (network.link_bandwidth). The yaml must say which key.
MUST_BE_POSITIVE = [
    "network.link_bandwidth", "network.intra_node_bandwidth", "local.read_bandwidth", "local.write_bandwidth",
    "shared.read_bandwidth", "shared.servers", "shared.metadata_rate", "loader.workers", "allreduce.bandwidth",
    "allreduce.bucket_bytes",
]


@pytest.mark.parametrize("key", MUST_BE_POSITIVE)
def test_zero_bandwidth_rate_or_loader_width_is_refused(key):
    raw = tiny_raw()
    section, name = key.split(".")
    raw[section][name] = 0
    assert f"{key} must be > 0" in refused(raw)


@pytest.mark.parametrize("key, value, message", [
    ("local.file_latency", float("nan"), "local.file_latency must be a finite number, got nan"),
    ("shared.read_bandwidth", float("inf"), "shared.read_bandwidth must be a finite number, got inf"),
    ("nodes", float("inf"), "nodes: Value 'inf' of type 'float' could not be converted to Integer"),
    ("nodes", float("nan"), "nodes: Value 'nan' of type 'float' could not be converted to Integer"),
    ("loader.workers", float("inf"), "loader.workers: Value 'inf' of type 'float' could not be converted to Integer"),
])
def test_nan_and_infinity_are_refused(key, value, message):
    """yaml's .nan and .inf parse as floats; no platform number may be either (a count is not even a float)."""
    raw = tiny_raw()
    *path, last = key.split(".")
    (raw[path[0]] if path else raw)[last] = value
    assert message in refused(raw)
