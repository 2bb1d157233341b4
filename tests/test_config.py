import json
from pathlib import Path

import pytest
import yaml

from slm.config import ConfigError, apply_overrides, config_hash, dump_yaml, from_dict
from slm.job import JobConfig, load_job

REPO = Path(__file__).resolve().parents[1]


def test_defaults_and_overrides_typed():
    cfg = load_job(None, ["corpus.valid_fraction=0.1", "ray.num_cpus=2", "stages=[stats]",
                          "corpus.domains=[code, legal]", "run.name=x"])
    assert cfg.corpus.valid_fraction == 0.1 and isinstance(cfg.corpus.valid_fraction, float)
    assert cfg.ray.num_cpus == 2 and cfg.stages == ["stats"] and cfg.corpus.domains == ["code", "legal"]
    assert cfg.run.dir == Path("runs/x")


def test_int_widens_to_float_but_not_the_reverse():
    assert load_job(None, ["corpus.valid_fraction=1"]).corpus.valid_fraction == 1.0
    with pytest.raises(ConfigError, match=r"'corpus.shard_docs': expected int, got 1.5"):
        load_job(None, ["corpus.shard_docs=1.5"])


def test_unknown_key_names_full_path_and_allowed_keys(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("corpus:\n  dirr: x\n")
    with pytest.raises(ConfigError) as err:
        load_job(spec)
    msg = str(err.value)
    assert str(spec) in msg and "'corpus.dirr'" in msg and "'dir'" in msg and "'cache_dir'" in msg


def test_unknown_top_level_section_and_override():
    with pytest.raises(ConfigError, match=r"unknown config key 'nope'"):
        load_job(None, ["nope.x=1"])
    with pytest.raises(ConfigError, match=r"unknown config key 'ray.adress'"):
        load_job(None, ["ray.adress=auto"])


def test_wrong_types_fail_with_key():
    with pytest.raises(ConfigError, match=r"'ray.include_dashboard': expected true or false"):
        load_job(None, ["ray.include_dashboard=maybe"])
    with pytest.raises(ConfigError, match=r"'corpus.domains\[1\]': expected str"):
        load_job(None, ["corpus.domains=[code, 3.5]"])  # an int is a name (run.name=2024), a float is not
    with pytest.raises(ConfigError, match=r"'corpus': expected a mapping"):
        load_job(None, ["corpus=7"])
    with pytest.raises(ConfigError, match=r"not of the form"):
        load_job(None, ["corpus.dir"])


def test_optional_fields_accept_null():
    assert load_job(None, ["ray.address=null"]).ray.address is None
    assert load_job(None, ["ray.address=auto"]).ray.address == "auto"


def test_resolved_config_round_trips_and_hash_is_stable():
    cfg = load_job(REPO / "jobs" / "quickstart.yaml", ["corpus.shard_docs=100"])
    data = yaml.safe_load(dump_yaml(cfg))
    assert from_dict(JobConfig, data) == cfg
    assert config_hash(cfg) == config_hash(from_dict(JobConfig, data))
    assert config_hash(cfg.corpus) != config_hash(load_job(None).corpus)


def test_apply_overrides_does_not_mutate_and_refuses_scalar_parent():
    base = {"corpus": {"dir": "a"}, "stages": ["x"]}
    out = apply_overrides(base, ["corpus.dir=b"])
    assert base["corpus"]["dir"] == "a" and out["corpus"]["dir"] == "b"
    with pytest.raises(ConfigError, match="is not a section"):
        apply_overrides(base, ["stages.x=1"])


@pytest.mark.parametrize("spec", sorted((REPO / "jobs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_job_spec_loads(spec):
    from slm.pipeline import check_stages

    check_stages(load_job(spec))


def test_unknown_stage_fails_before_running(slm_cli, tmp_path):
    proc = slm_cli("run", "jobs/quickstart.yaml", "stages=[corpus, embedd]", f"run.root={tmp_path}", check=False)
    assert proc.returncode == 2
    assert "unknown stage(s) ['embedd']" in proc.stderr
    assert not (tmp_path / "quickstart").exists()


def test_cli_config_prints_resolved_yaml(slm_cli):
    out = slm_cli("config", "jobs/quickstart.yaml", "corpus.valid_fraction=0.2").stdout
    assert yaml.safe_load(out)["corpus"]["valid_fraction"] == 0.2


@pytest.mark.ray  # the resample stage it runs starts a local Ray
def test_slm_data_maps_flags_to_the_resample_section(slm_cli, tmp_path):
    """`slm data resample --domain …` is the resample stage with those keys; a missing input is named."""
    proc = slm_cli("data", "resample", "--domain", "medical", "--tokens", "1000", "--method", "crisp",
                   f"run.root={tmp_path}", "run.name=r", check=False)
    config = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())
    assert config["stages"] == ["resample"] and config["resample"]["domain"] == "medical"
    assert config["resample"]["tokens"] == 1000 and config["resample"]["methods"] == ["crisp"]
    assert proc.returncode == 1
    assert "histograms.json does not exist: run the 'histogram' stage first" in proc.stderr


# Issue 19: the config probes that were accepted and failed late (or wrote outside run.root), and the
# YAML that loaded silently wrong.
@pytest.mark.parametrize("override, key", [
    ("pretrain.train.budget.flops=.inf", "pretrain.train.budget.flops"),
    ("pretrain.train.budget.flops=.nan", "pretrain.train.budget.flops"),
    ("pretrain.train.optim.lr=-1", "pretrain.train.optim.lr"),
    ("specialize.train.optim.beta2=1.5", "specialize.train.optim.beta2"),
    ("pretrain.train.checkpoint_every=-1", "pretrain.train.checkpoint_every"),
    ("pretrain.train.max_failures=-5", "pretrain.train.max_failures"),
    ("pretrain.train.keep_checkpoints=0", "pretrain.train.keep_checkpoints"),
    ("ray.num_cpus=0", "ray.num_cpus"),
    ("ray.dashboard_port=99999", "ray.dashboard_port"),
    ("pretrain.model.depth=100000", "pretrain.model.depth"),
    ("corpus.shard_docs=0", "corpus.shard_docs"),
    ("corpus.valid_fraction=2", "corpus.valid_fraction"),
    ("run.name=../../x", "run.name"),
    ("run.name=a/b", "run.name"),
    ("run.name=''", "run.name"),
    # Issue 44: every name and output folder that becomes a path, and the values that planned or crashed
    ("sweep.name=../../../../x", "sweep.name"),
    ("sweep.name=''", "sweep.name"),
    ("sweep.output=../../..", "sweep.output"),
    ("pretrain.name=../../../../y", "pretrain.name"),
    ("pretrain.output=/tmp", "pretrain.output"),
    ("specialize.name=../../../x", "specialize.name"),
    ("specialize.output=a/../..", "specialize.output"),
    ("cluster.output=../c", "cluster.output"),
    ("stats.output=..", "stats.output"),
    ("pack.output=x/y", "pack.output"),
    ("sweep.sizes=[d999]", "sweep.sizes"),
    ("sweep.sizes=[d0]", "sweep.sizes"),
    ("sweep.sizes=[enormous]", "sweep.sizes"),
    ("sweep.large_size=d65", "sweep.large_size"),
    ("sweep.max_concurrent_trials=-1", "sweep.max_concurrent_trials"),
    ("sweep.assumed_mfu=0", "sweep.assumed_mfu"),
    ("sweep.assumed_mfu=-1", "sweep.assumed_mfu"),
    ("sweep.assumed_mfu=1.5", "sweep.assumed_mfu"),
])
def test_config_holes_fail_before_anything_runs(override, key):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        load_job(None, [override])


def test_eval_tokens_says_what_zero_means():
    with pytest.raises(ConfigError, match=r"'pretrain.train.eval_tokens': must be ≥ 0 \(0: the whole valid split\)"):
        load_job(None, ["pretrain.train.eval_tokens=-1"])


def test_a_numeric_name_is_a_name():
    assert load_job(None, ["run.name=2024"]).run.name == "2024"


def test_a_key_given_twice_fails_with_its_line(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("run:\n  name: a\n  root: runs\n  name: b\n")
    with pytest.raises(ConfigError, match=r"job.yaml: line 4: key 'name' is given twice"):
        load_job(spec)


def test_a_yaml_alias_bomb_is_refused(tmp_path):
    lines = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for prev, name in zip("abcdef", "bcdefg", strict=True):
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 10)}]")
    spec = tmp_path / "bomb.yaml"
    spec.write_text("\n".join(lines) + "\n")
    assert spec.stat().st_size < 600  # 10⁷ values when expanded
    with pytest.raises(ConfigError, match="aliases expand to more than"):
        load_job(spec)
    anchors = tmp_path / "anchors.yaml"  # ordinary anchors still work
    anchors.write_text("stages: &s [stats]\nrun: {name: x}\nsweep: {methods: [generic]}\n")
    assert load_job(anchors).stages == ["stats"]


def test_unknown_domains_fail_before_any_stage(corpus_dir):
    from slm.pipeline import check_stages

    with pytest.raises(ConfigError, match=r"'sweep.domains': no domain 'nosuch'"):
        check_stages(load_job(None, [f"corpus.dir={corpus_dir}", "stages=[sweep]", "sweep.domains=[nosuch]"]))
    with pytest.raises(ConfigError, match=r"'resample.domain': no domain 'nosuch'"):
        check_stages(load_job(None, [f"corpus.dir={corpus_dir}", "stages=[resample]", "resample.domain=nosuch"]))
    with pytest.raises(ConfigError, match=r"'corpus.domains': no domain 'nosuch'"):  # the valid sets, evaluation
        check_stages(load_job(None, [f"corpus.dir={corpus_dir}", "stages=[pack]", "corpus.domains=[legal, nosuch]"]))
    check_stages(load_job(None, [f"corpus.dir={corpus_dir}", "stages=[stats]", "resample.domain=nosuch"]))  # unread


@pytest.mark.parametrize("name, message", [("generic", "import it with --generic"), ("", "not a valid name"),
                                           ("x" * 300, "not a valid name"), ("a/b", "not a valid name")])
def test_corpus_import_refuses_a_bad_domain_name_before_ray_starts(name, message, slm_cli, tmp_path):
    proc = slm_cli("corpus", "import", str(tmp_path / "missing.jsonl"), "--domain", name, check=False,
                   timeout=60)
    assert proc.returncode == 2 and message in proc.stderr and "[ray]" not in proc.stdout


@pytest.mark.ray
@pytest.mark.slow  # ~22 s of Ray start-up; the message itself is tested on the library call
def test_a_bad_import_is_one_line_naming_the_file_and_line(slm_cli, tmp_path):
    """`slm corpus import --on-error fail` on a malformed line: one line on stderr naming file and line,
    no traceback, exit 1, nothing written."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "A sentence."}) + "\n{\"text\": \"cut off\n")
    proc = slm_cli("corpus", "import", str(bad), "--generic", "--on-error", "fail", f"corpus.dir={tmp_path / 'c'}",
                   check=False, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"slm: corpus import: {bad}:2: not JSON" in proc.stderr and not (tmp_path / "c" / "generic").exists()


def test_the_ray_token_file_is_made_private(tmp_path):
    from slm.runtime import private_auth_token

    token = tmp_path / "auth_token"
    token.write_text("secret")
    token.chmod(0o644)
    assert private_auth_token(token) and token.stat().st_mode & 0o777 == 0o600
    assert not private_auth_token(token)  # already private: left alone


def test_each_command_keeps_the_other_stages_results_and_its_config(corpus_dir, tmp_path):
    """Issue 19: `results.json` and `config.yaml` were overwritten by each command; now every stage's
    latest result stays, and every invocation's config is kept."""
    import json

    from slm.pipeline import run_job

    base = [f"corpus.dir={corpus_dir}", f"run.root={tmp_path}", "run.name=r", "tokenizer.vocab_size=300",
            "tokenizer.max_chars=100000"]
    run_job(load_job(None, [*base, "stages=[corpus]"]))
    run_job(load_job(None, [*base, "stages=[tokenizer]"]))
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert set(results) == {"corpus", "tokenizer"} and results["tokenizer"]["vocab_size"] == 300
    configs = sorted((tmp_path / "r" / "configs").glob("*.yaml"))
    assert [c.name.rsplit("-", 1)[-1] for c in configs] == ["corpus.yaml", "tokenizer.yaml"]
    assert yaml.safe_load(configs[0].read_text())["stages"] == ["corpus"]
    assert yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())["stages"] == ["tokenizer"]


def test_workers_a_fixed_cluster_cannot_hold_fail_with_the_numbers():
    """Issue 19: num_workers=64 on a 2-CPU embedded Ray waited forever. The embedded Ray (no address)
    checks the ask against what it has before Ray Train starts (slm.train.trainer._run calls this)."""
    from slm.train.config import TrainConfig
    from slm.train.trainer import TrainingInputError, check_fits

    with pytest.raises(TrainingInputError, match=r"'pretrain.train.num_workers'.*asks for 64 CPUs \(64 workers\) "
                                                 r"and this Ray has 2"):
        check_fits(TrainConfig(num_workers=64), "pretrain.train", {"CPU": 2.0})
    with pytest.raises(TrainingInputError, match="asks for 2 GPUs"):
        check_fits(TrainConfig(num_workers=2, use_gpu=True), "pretrain.train", {"CPU": 16.0, "GPU": 1.0})
    check_fits(TrainConfig(num_workers=2, cpus_per_worker=1.0), "pretrain.train", {"CPU": 2.0})  # fits


def test_a_submitted_job_refuses_relative_output_paths(tmp_path):
    """Issue 19: the README's `ray job submit` example set no run.root: the outputs landed in the job's
    temporary copy of its working directory and vanished with it."""
    from slm.pipeline import check_submitted_paths

    copy = tmp_path / "runtime_resources" / "working_dir_files" / "_ray_pkg_0123"
    with pytest.raises(ConfigError, match=r"'run.root': 'runs' is relative.*run.root=/mnt/shared/runs"):
        check_submitted_paths(load_job(None, ["corpus.dir=/mnt/shared/corpus"]), copy)
    with pytest.raises(ConfigError, match=r"'corpus.dir'"):
        check_submitted_paths(load_job(None, ["run.root=/mnt/shared/runs"]), copy)
    check_submitted_paths(load_job(None, ["run.root=/mnt/shared/runs", "corpus.dir=/mnt/shared/corpus"]), copy)
    check_submitted_paths(load_job(None, []), tmp_path)  # run by hand: relative paths are the checkout's


def test_a_run_directory_takes_one_command_at_a_time(corpus_dir, tmp_path):
    """Issue 19: two commands in one run directory pruned each other's checkpoints and logged each step
    twice. The second is refused with the holder's pid and command; a killed holder leaves no lock."""
    import subprocess
    import sys

    from slm.artifacts import RunLockedError
    from slm.pipeline import run_job

    run = tmp_path / "r"
    hold = ("import sys, time; from slm.artifacts import run_lock; lock = run_lock(sys.argv[1], 'the holder'); "
            "lock.__enter__(); print('held', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        cfg = load_job(None, [f"corpus.dir={corpus_dir}", f"run.root={tmp_path}", "run.name=r", "stages=[tokenizer]",
                              "tokenizer.vocab_size=300", "tokenizer.max_chars=100000"])
        with pytest.raises(RunLockedError, match=rf"in use by pid {holder.pid} on .* \(the holder\)"):
            run_job(cfg)
        assert not (run / "tokenizer").exists()
    finally:
        holder.kill()  # SIGKILL: no cleanup of its own
        holder.wait()
    assert run_job(cfg)["tokenizer"]["vocab_size"] == 300
    assert not (run / ".lock.json").exists()


def test_a_training_stage_line_gives_each_domain_its_perplexity():
    """Methods evaluate different domains: the stage's line gives each its own, never their mean."""
    from slm.pipeline import stage_summary

    line = stage_summary({"model": "m.safetensors", "eval": {"legal": {"perplexity": 1775.0},
                                                            "medical": {"perplexity": 2000.5},
                                                            "macro": {"perplexity": 3408.0}}})
    assert line == ": model m.safetensors; valid ppl legal 1775.00, medical 2000.50"


def test_the_dashboards_job_name_says_the_method_and_size():
    from slm.pipeline import job_name

    cfg = load_job(None, ["run.name=quickstart", "stages=[pack, pretrain]", "pretrain.method=soup",
                          "pretrain.model.depth=2"])
    assert job_name(cfg) == "slm quickstart: pack, pretrain soup-d2"
    sweep = load_job(None, ["run.name=quickstart", "stages=[sweep, report]", "sweep.name=study-seed0"])
    assert job_name(sweep) == "slm quickstart: sweep study-seed0, report"


def test_loggers_are_checked_before_the_run_and_a_job_that_trains_nothing_says_so(monkeypatch, capsys):
    """Issue 46: a training stage with mlflow missing died in a ModuleNotFoundError traceback; loggers on a
    job with no training stage (the quickstart) exited 0 having logged nothing, without a word."""
    from slm import pipeline
    from slm.job import load_job

    data_job = load_job(REPO / "jobs" / "quickstart.yaml", ["pretrain.train.loggers=[tensorboard, mlflow, wandb]"])
    pipeline.check_loggers(data_job)
    assert ("pretrain.train.loggers lists tensorboard, mlflow, wandb, but no stage of this job trains"
            in capsys.readouterr().out)
    training = load_job(REPO / "jobs" / "pretrain.yaml", ["pretrain.train.loggers=[tensorboard, wandb]"])
    pipeline.check_loggers(training)  # installed here (the dev extras)
    # a package this environment does not have, under the name of one the check looks for
    monkeypatch.setitem(pipeline.LOGGER_PACKAGES, "wandb", ("slm_no_such_tracker", "pip install -e '.[trackers]'"))
    with pytest.raises(ConfigError, match=r"config key 'pretrain.train.loggers': wandb is not installed; "
                                          r"pip install -e '.\[trackers\]', or leave it out of the list"):
        pipeline.check_loggers(training)
    assert not capsys.readouterr().out


def test_one_key_set_in_a_loaded_config_is_typed_and_checked_like_the_loader_does():
    """slm.config.with_value (a sweep axis's value in a run's job): the key typed as YAML would be, its section
    validated, a method's registered section reached by name, and every other value kept as the code set it."""
    from dataclasses import replace

    from slm.config import with_value

    job = load_job(None, [])
    job = replace(job, pretrain=replace(job.pretrain, output="/abs/path/set/by/the/sweep"))  # no user key could say it
    changed = with_value(job, "pretrain.train.optim.lr", "2e-2")
    assert changed.pretrain.train.optim.lr == 0.02 and changed.pretrain.output == "/abs/path/set/by/the/sweep"
    assert job.pretrain.train.optim.lr == 0.003  # a new config, the old one untouched
    assert with_value(job, "pretrain.model.soup.experts", 2).pretrain.model.settings("soup").experts == 2
    with pytest.raises(ConfigError, match=r"unknown config key 'pretrain.train.optim.learning_rate'"):
        with_value(job, "pretrain.train.optim.learning_rate", 1e-3)
    with pytest.raises(ConfigError, match=r"'pretrain.train.optim.lr': must be a positive number"):
        with_value(job, "pretrain.train.optim.lr", -1.0)
    with pytest.raises(ConfigError, match=r"'pretrain.train.numerics': 'exact' is not one of"):
        with_value(job, "pretrain.train.numerics", "exact")


def test_a_field_added_with_a_neutral_default_leaves_keys_as_they_were():
    """Issue 65: a setting added after runs were keyed (``HASHED_WHEN_SET``, e.g. ``train.objective``) changes no
    finished run's key at its default, and makes a new run when set."""
    from dataclasses import dataclass, field

    from slm.config import HASHED_WHEN_SET, config_hash

    @dataclass
    class Before:
        lr: float = 1e-3

    @dataclass
    class Extra:
        z: float = 0.0

    @dataclass
    class After:
        lr: float = 1e-3
        extra: Extra = field(default_factory=Extra, metadata=HASHED_WHEN_SET)

    assert config_hash(After()) == config_hash(Before())
    assert config_hash(After(extra=Extra(z=0.1))) != config_hash(Before())
