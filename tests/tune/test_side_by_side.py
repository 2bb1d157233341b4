"""Issue 66, items 1–2: a sweep's pretraining runs go side by side whatever trains them (Ray Train runs too, each
its own TorchTrainer), and small runs share a GPU (``train.gpus_per_worker``: Ray's fractional GPUs), checked
against the device's memory before anything trains. Real Ray throughout: GPUs declared to a local Ray are
scheduled as real ones are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slm.config import ConfigError
from slm.job import load_job
from tests.conftest import REPO, train_overrides

pytestmark = pytest.mark.ray


def model(path: Path) -> tuple[dict, dict[str, bytes]]:
    from safetensors import safe_open

    with safe_open(path, "pt") as f:
        return f.metadata(), {k: f.get_tensor(k).numpy().tobytes() for k in f.keys()}  # noqa: SIM118


def overlapping(spans: list[tuple[float, float]]) -> bool:
    spans = sorted(spans)
    return any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False))


SHARE = """
import json, sys, time
import ray
from slm.train.config import TrainConfig
from slm.tune.sweep import run_resources

ray.init(address="local", num_cpus=4, num_gpus=1, include_dashboard=False, log_to_driver=False)

@ray.remote
def run(seconds):
    began = time.time()
    time.sleep(seconds)
    return began, time.time(), ray.get_gpu_ids()

out = {}
for share in (0.5, 1.0):
    resources = run_resources(TrainConfig(num_workers=0, use_gpu=True, gpus_per_worker=share))
    out[str(share)] = ray.get([run.options(**resources).remote(3) for _ in range(2)])
print(json.dumps(out))
"""


def test_runs_share_a_declared_gpu_by_their_share():
    """Two single-process runs at ``gpus_per_worker: 0.5`` run at once on one declared GPU, both seeing device 0;
    at 1.0 the second waits for the first."""
    proc = subprocess.run([sys.executable, "-c", SHARE], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    spans = json.loads(proc.stdout.strip().splitlines()[-1])
    assert overlapping([tuple(s[:2]) for s in spans["0.5"]]) and all(s[2] == [0] for s in spans["0.5"])
    assert not overlapping([tuple(s[:2]) for s in spans["1.0"]])


def test_a_share_of_a_gpu_is_a_share():
    for bad in (0, 1.5, -0.25):
        with pytest.raises(ConfigError, match=r"'pretrain.train.gpus_per_worker': a share of one GPU, in \(0, 1\]"):
            load_job(None, [f"pretrain.train.gpus_per_worker={bad}"])


def test_runs_that_do_not_fit_a_shared_gpu_are_refused_before_anything_trains(train_run):
    from slm.tune.plan import SweepSpecError
    from slm.tune.sweep import check_device_share, device_needs, plan_sweep

    cfg = load_job(REPO / "jobs" / "sweeps" / "quickstart.yaml", train_overrides(
        train_run, "sweep.methods=[generic, soup]", "sweep.sizes=[tiny]", "sweep.domains=[legal]",
        "resample.domains=[]", "sweep.pretrain_steps=[20]", "sweep.seeds=[0]", "pretrain.train.use_gpu=true",
        "pretrain.train.gpus_per_worker=0.25", "specialize.train.use_gpu=true", "specialize.train.gpus_per_worker=0.5"))
    plan = plan_sweep(cfg)
    needs = device_needs(cfg, plan)
    assert set(needs) == {"pretrain", "specialize"} and needs["pretrain"][1] == "soup-tiny-seed0"  # the soup is larger
    need = needs["pretrain"][0]
    with pytest.raises(SweepSpecError, match=r"'pretrain.train.gpus_per_worker': 0.25 puts 4 runs on a GPU, needing "
                                             r"~.* GiB together \(the largest, soup-tiny-seed0: ~.* GiB, estimated\) "
                                             r"of its .* GiB; raise the share"):
        check_device_share(cfg, plan, device_bytes=4 * need - 1)
    check_device_share(cfg, plan, device_bytes=4 * need)  # exactly fits


@pytest.mark.slow
def test_ray_train_runs_go_side_by_side_and_make_the_models_they_make_alone(train_run, slm_cli):
    """Two pretraining runs on Ray Train (one worker each): on 2 CPUs both train at once (the spans of their steps,
    ``ran`` in their manifests, overlap; long enough to outlast the runs' start-up, which differs by seconds), on
    1 CPU one after the other; each run's model is the same either way, bit for bit (its tensors and metadata; the
    file's header lists the metadata in an order of the writing process's own)."""
    common = train_overrides(
        train_run, "sweep.methods=[generic, soup]", "sweep.sizes=[tiny]", "sweep.domains=[legal]",
        "resample.domains=[]", "sweep.pretrain_steps=[400]", "sweep.domain_tokens=[3200]",
        "sweep.specialize_steps=[2]", "sweep.seeds=[0]", "pretrain.model.soup.experts=2",
        "pretrain.train.num_workers=1", "pretrain.train.cpus_per_worker=1", "pretrain.train.checkpoint_every=0",
        "specialize.train.checkpoint_every=0", "ray.include_dashboard=false")
    spans, models = {}, {}
    for cpus in (2, 1):
        slm_cli("sweep", "jobs/sweeps/quickstart.yaml", *common, f"sweep.name=side{cpus}", f"ray.num_cpus={cpus}")
        runs = sorted((train_run.run.dir / "sweeps" / f"side{cpus}" / "checkpoints").glob("*-tiny-seed0"))
        manifests = [json.loads((r / "manifest.json").read_text()) for r in runs]
        spans[cpus] = [(m["ran"]["from"], m["ran"]["to"]) for m in manifests]
        models[cpus] = {r.name: model(r / "model.safetensors") for r in runs}
    assert overlapping(spans[2]), spans
    assert not overlapping(spans[1]), spans
    assert models[2].keys() == models[1].keys() == {"generic-tiny-seed0", "soup-tiny-seed0"}
    assert all(models[2][name] == models[1][name] for name in models[2])


def test_the_spans_rule():
    assert overlapping([(0, 2), (1, 3)]) and not overlapping([(0, 1), (1, 2)]) and not overlapping([(2, 3), (0, 1)])
