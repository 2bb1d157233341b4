"""The config loader: nested dataclasses from YAML files plus ``a.b=c`` overrides, strict keys and types.

Every stage owns a dataclass, beside it (``slm.<package>.config``); a job spec is a YAML mapping over
``slm.job.JobConfig``. Loading is strict in the lingua/torchtitan way: an unknown key or a value of the
wrong type fails with the full key path and what was allowed, before anything runs; a section's
``validate(prefix)`` checks what types cannot. The resolved config is written next to the outputs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

T = TypeVar("T")
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")

class ConfigError(ValueError):
    """A config file, override or value that does not fit the schema."""


# A name that becomes a folder (a run, a domain): one path component of ordinary characters, so that
# no config can write outside its root (`run.name=../../x`) or fail late on the file system.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_name(name: str, key: str) -> str:
    if not _NAME.fullmatch(name) or name.endswith("."):
        raise ConfigError(f"config key '{key}': {name!r} is not a valid name (1-128 letters, digits, '.', '_' "
                          "or '-', starting with a letter or digit; it names a folder)")
    return name


# ------------------------------------------------------------------------------ registered sections


# A registered name (a method, a subset method, a stage): it becomes part of folder and run names
# (``generic-d1-seed0``, ``resampled/legal/crisp``), where '-' separates fields: lower-case letters, digits and '_'.
REGISTERED_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


class Registry(typing.Generic[T]):
    """Things the platform knows by name, registered by the modules that own them (levanter's
    ``register_subclass``, torchtitan's train specs): the methods, the subset methods of the resample stage, the
    stages, and the config sections of methods' own settings. One type for all of them: a name may be registered
    once and must be ``REGISTERED_NAME`` (it names folders and runs), and an unknown one fails with the config
    key that named it and the names there are.

    A registry of config sections (``sections=True``: its items are dataclasses) gives a dataclass field
    (:meth:`field`) holding one section per registered name; YAML writes each under its own name beside the
    dataclass's other keys (``pretrain.model.projected.bank_size``), and the loader builds the registered class
    (strict keys and types, its ``validate``) and names a key that is no registered section."""

    def __init__(self, what: str, key: str = "", sections: bool = False):
        self.what, self.key, self.sections = what, key, sections
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        if not isinstance(name, str) or not REGISTERED_NAME.fullmatch(name):
            raise ValueError(f"{self.what} {name!r}: a registered name is 1-32 lower-case letters, digits or '_', "
                             "starting with a letter (it becomes part of folder and run names, where '-' separates "
                             "fields)")
        if self.sections and not dataclasses.is_dataclass(item):
            raise TypeError(f"{self.what} {name!r}: {item!r} is not a dataclass")
        if name in self._items and self._items[name] is not item:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._items[name] = item
        return item

    def remove(self, name: str) -> None:
        """Forget ``name`` (a test's temporary registration)."""
        self._items.pop(name, None)

    def get(self, name: str, key: str = "") -> T:
        """The item called ``name``; an unknown one fails with the config key that named it (``key``, or the
        registry's own)."""
        try:
            return self._items[name]
        except KeyError:
            raise ConfigError(f"config key '{key or self.key}': unknown {self.what} {name!r}; "
                              f"{self.what}s: {self.names()}") from None

    def names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> typing.Iterator[str]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    # ---- config sections

    def defaults(self) -> dict[str, Any]:
        return {name: cls() for name, cls in self._items.items()}

    def build(self, name: str, value: Any, prefix: str) -> Any:
        return from_dict(self._items[name], value, prefix=f"{prefix}{name}.")

    def field(self) -> Any:
        """The dataclass field holding every registered section (defaults for those not given)."""
        return dataclasses.field(default_factory=self.defaults, metadata={"registry": self})


def _registries(cls: type) -> dict[str, Registry]:
    return {f.name: f.metadata["registry"] for f in dataclasses.fields(cls) if "registry" in f.metadata}


# ----------------------------------------------------------------------------------------- loading


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _coerce(tp: Any, value: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (ints widen to floats)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(option, value, key)
            except ConfigError:
                continue
        raise ConfigError(f"config key '{key}': expected {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"config key '{key}': {value!r} is not one of {list(allowed)}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"config key '{key}': expected a list, got {value!r}")
        (item_tp,) = typing.get_args(tp)
        return [_coerce(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping, got {value!r}")
        key_tp, val_tp = typing.get_args(tp)
        return {_coerce(key_tp, k, key): _coerce(val_tp, v, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, prefix=f"{key}.")
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float) and isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        # YAML 1.1 reads 1e-3 and 2e6 (no dot) as strings; they are numbers to anyone writing a config.
        number = float(value)
        if tp is float:
            return number
        if number.is_integer():
            return int(number)
        raise ConfigError(f"config key '{key}': expected int, got {value!r}")
    if tp is str and isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # `run.name=2024`: YAML reads an int, the user wrote a name
    if tp is bool and not isinstance(value, bool):
        raise ConfigError(f"config key '{key}': expected true or false, got {value!r}")
    if tp is int and isinstance(value, bool):
        raise ConfigError(f"config key '{key}': expected int, got {value!r}")
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"config key '{key}': expected {_type_name(tp)}, got {value!r}")
    return value


def _merged(default: Any, value: dict) -> dict:
    """``value`` over the fields of the dataclass instance ``default``, section by section; a section
    marked ``replaced_whole`` (a budget) is taken as given. Unknown keys stay, for from_dict to refuse."""
    out = {}
    for f in dataclasses.fields(default):
        d = getattr(default, f.name)
        if "registry" in f.metadata:  # from_dict fills the registered sections not given
            continue
        if f.name not in value:
            out[f.name] = to_dict(d) if dataclasses.is_dataclass(d) else d
        elif dataclasses.is_dataclass(d) and isinstance(value[f.name], dict) and not getattr(d, "replaced_whole", False):
            out[f.name] = _merged(d, value[f.name])
        else:
            out[f.name] = value[f.name]
    return {**value, **out}


def _merge_defaults(cls: type, name: str, value: Any) -> Any:
    f = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    if f is None or not isinstance(value, dict) or f.default_factory is dataclasses.MISSING:
        return value
    default = f.default_factory()
    if not dataclasses.is_dataclass(default) or getattr(default, "replaced_whole", False):
        return value
    return _merged(default, value)


def from_dict(cls: type[T], data: Any, prefix: str = "") -> T:
    """Build dataclass ``cls`` from a mapping, failing on unknown keys and wrong types."""
    where = prefix.rstrip(".") or "<root>"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config key '{where}': expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    registries = _registries(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in registries]
    sections = [name for r in registries.values() for name in r.names()]
    for key in data:
        if key not in names and key not in sections:
            raise ConfigError(f"unknown config key '{prefix}{key}'; allowed keys under '{where}': {names + sections}")
    # A nested section given in part keeps the parent's defaults for the rest (SpecializeConfig's
    # train section defaults to a shorter budget than TrainConfig's: `specialize.train.seed=1` keeps it).
    data = {k: _merge_defaults(cls, k, v) for k, v in data.items()}
    kwargs = {name: _coerce(hints[name], data[name], f"{prefix}{name}") for name in names if name in data}
    for field_name, registry in registries.items():
        kwargs[field_name] = {name: registry.build(name, data.get(name), prefix) for name in registry.names()}
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        validate(prefix)
    return obj


def with_value(obj: T, key: str, value: Any, prefix: str = "") -> T:
    """``obj`` (a config dataclass) with one dotted ``key`` set to ``value``, typed as a loaded config types it
    (``3e-3`` from YAML is a float) and the section holding it validated again; an unknown key or a wrong type
    fails naming ``prefix + key``. Only the path to the key is rebuilt (``dataclasses.replace``): values the
    code set elsewhere in the config are kept as they are, not checked again."""
    head, _, rest = key.partition(".")
    where = f"{prefix}{head}"
    registries = _registries(type(obj))
    for field_name in registries:  # a registered section: pretrain.model.<method>.<key>
        sections = getattr(obj, field_name)
        if head in sections:
            if not rest:
                raise ConfigError(f"config key '{where}' is a section, not a value")
            return dataclasses.replace(obj, **{field_name: {**sections, head: with_value(sections[head], rest, value,
                                                                                         f"{where}.")}})
    names = [f.name for f in dataclasses.fields(obj) if f.name not in registries]
    if head not in names:
        sections = [name for r in registries.values() for name in r.names()]
        raise ConfigError(f"unknown config key '{where}'; allowed keys under '{prefix.rstrip('.') or '<root>'}': "
                          f"{names + sections}")
    current = getattr(obj, head)
    if rest:
        if not dataclasses.is_dataclass(current):
            raise ConfigError(f"config key '{where}' is a value, not a section")
        return dataclasses.replace(obj, **{head: with_value(current, rest, value, f"{where}.")})
    changed = dataclasses.replace(obj, **{head: _coerce(typing.get_type_hints(type(obj))[head], value, where)})
    validate = getattr(changed, "validate", None)
    if callable(validate):
        validate(prefix)
    return changed


def to_dict(obj: Any) -> dict[str, Any]:
    """A config as its YAML would say it: registered sections under their own names."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if "registry" in f.metadata:
            out.update({name: to_dict(section) for name, section in value.items()})
        else:
            out[f.name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b=c`` → (["a", "b"], c), the value parsed as YAML (so 3 is an int, [a, b] a list)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key.path=value")
    key, raw = text.split("=", 1)
    path = key.strip().split(".")
    if not all(path):
        raise ConfigError(f"override {text!r} has an empty key segment")
    try:
        value = yaml.load(raw, Loader=StrictLoader) if raw.strip() else ""  # noqa: S506
    except ConfigError as err:
        raise ConfigError(f"override {text!r}: {err}") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"override {text!r}: value is not valid YAML ({err})") from err
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    data = json.loads(json.dumps(data))  # a deep copy that stays plain YAML types
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for i, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {text!r}: '{'.'.join(path[: i + 1])}' is not a section")
            node = child
        node[path[-1]] = value
    return data


# What a job spec may expand to through YAML aliases: a spec is a few hundred values; a "billion laughs"
# file of a few hundred bytes expands to millions.
MAX_YAML_NODES = 100_000
MAX_YAML_BYTES = 1 << 20


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a key given twice in one mapping (YAML says keys are unique;
    PyYAML silently keeps the last) and a document whose aliases expand past ``MAX_YAML_NODES``."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise ConfigError(f"line {key_node.start_mark.line + 1}: key {key!r} is given twice")
            seen.add(key)
        return super().construct_mapping(node, deep)

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None and _expanded_size(node, {}) > MAX_YAML_NODES:
            raise ConfigError(f"its aliases expand to more than {MAX_YAML_NODES:,} values")
        return node


def _expanded_size(node, memo: dict[int, int]) -> int:
    """Values in ``node`` with every alias expanded (an alias is the same node object again)."""
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = 1  # a recursive alias counts once instead of looping
    if isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(v, memo) for v in node.value)
    else:
        size = 1
    memo[id(node)] = size
    return size


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_file() and path.stat().st_size > MAX_YAML_BYTES:
        raise ConfigError(f"config file {path} is over {MAX_YAML_BYTES >> 20} MiB: not a job spec")
    try:
        data = yaml.load(path.read_text(), Loader=StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except ConfigError as err:
        raise ConfigError(f"config file {path}: {err}") from err
    except FileNotFoundError as err:
        raise ConfigError(f"config file {path} does not exist") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {err}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping at the top level")
    return data


def load(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Load ``cls`` from an optional YAML file plus overrides; errors name the file and key."""
    data = read_yaml(path) if path is not None else {}
    data = apply_overrides(data, overrides or [])
    try:
        return from_dict(cls, data)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}" if path is not None else str(err)) from err


def dump_yaml(obj: Any) -> str:
    data = to_dict(obj) if dataclasses.is_dataclass(obj) else obj
    return yaml.safe_dump(data, sort_keys=False)


# A field's metadata that keeps it out of ``config_hash``: where a run's logs go and who else is told
# (TensorBoard folder, experiment trackers) do not change what the run computes, so changing them must
# neither retrain a finished run nor start a resumed one afresh.
NOT_HASHED = {"hashed": False}
# A field added after runs were keyed, whose default reproduces exactly what those runs computed: hashed only when
# set to something else, so that adding it leaves every finished run current (issue 65) while a run that uses it
# is a new one.
HASHED_WHEN_SET = {"hashed": "when set"}


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _hashed(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _hashed(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.metadata.get("hashed", True) is True
                or (f.metadata.get("hashed") == "when set" and getattr(value, f.name) != _default(f))}
    if isinstance(value, list | tuple):
        return [_hashed(v) for v in value]
    if isinstance(value, dict):
        return {k: _hashed(v) for k, v in value.items()}
    return value


def config_hash(obj: Any) -> str:
    """A stable hash of a config (section): what a stage's manifest is keyed on (``NOT_HASHED`` fields left out,
    ``HASHED_WHEN_SET`` ones at their default too)."""
    blob = json.dumps(_hashed(obj), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
