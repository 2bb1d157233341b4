"""cluster.yaml: valid for Ray's cluster launcher, and shaped the way the platform needs."""

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster():
    return yaml.safe_load((REPO / "cluster.yaml").read_text())


def test_passes_the_launchers_own_validation(cluster):
    import copy

    from ray.autoscaler._private.util import prepare_config, validate_config

    # What `ray up` does before it touches a cloud: fill in the provider's defaults, then check the
    # result against ray-schema.json and the launcher's own rules (raises on any violation).
    validate_config(prepare_config(copy.deepcopy(cluster)))


def test_has_a_head_and_gpu_workers(cluster):
    types = cluster["available_node_types"]
    assert cluster["head_node_type"] in types
    gpu_types = [name for name, t in types.items() if t.get("resources", {}).get("GPU", 0) > 0]
    assert gpu_types and all(types[n]["max_workers"] >= 1 for n in gpu_types)
    assert cluster["max_workers"] >= max(types[n]["max_workers"] for n in gpu_types)


def test_installs_the_package_and_mounts_shared_storage(cluster):
    assert any("pip install" in c and "slm-platform" in c for c in cluster["setup_commands"])
    assert "." in cluster["file_mounts"].values()
    assert any("/mnt/shared" in c for c in cluster["initialization_commands"])
    assert any("/mnt/shared" in o for o in cluster["docker"]["run_options"])
    for pattern in ("**/.git", "**/.venv", "**/data", "**/runs"):
        assert pattern in cluster["rsync_exclude"]


def test_ray_version_matches_the_pin(cluster):
    import ray

    assert f"rayproject/ray:{ray.__version__}-" in cluster["docker"]["image"]
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f"ray[train,tune,data,default]=={ray.__version__}" in pyproject


def test_the_validation_does_reject_a_broken_config(cluster):
    import copy

    from ray.autoscaler._private.util import prepare_config, validate_config

    broken = copy.deepcopy(cluster)
    del broken["available_node_types"]["gpu_a100x8"]["node_config"]
    with pytest.raises(Exception, match="node_config"):
        validate_config(prepare_config(broken))
