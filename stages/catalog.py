"""The stage catalog: GPU types, stage families, suite attachments and waives, validated at load.

A catalog is a folder of fragments (``*.yaml``, merged in name order, one per suite or area, so
parallel work never edits one file) plus ``waives*.txt`` files, or a single YAML file. Loading
follows one path: parse with line numbers, validate each section, merge, then cross-check; every
error names the file, line, item and the valid choices.

Fragment keys: ``gpu_types`` (name -> arch, device_names, runner_labels, setup), ``families`` (a
list of stage families), ``attach`` (suites added to the families whose names match) and
``setup`` (what every stage job installs; stages/setup.py has how the levels merge).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from stagebot.stages import builtin
from stagebot.stages.errors import CatalogError
from stagebot.stages.names import BACKENDS, parse_test_stage_name, test_stage_name
from stagebot.stages.patterns import check_path_pattern, name_matches
from stagebot.stages.plan import DEFAULT_MAX_RERUNS, DEFAULT_RERUN_MAX_FAILURES
from stagebot.stages.setup import Setup, check_setup

DEFAULT_CATALOG = Path(__file__).parent / "catalog"
SCHEMA = Path(__file__).parent / "schemas" / "catalog_fragment.v1.json"
WAIVE_LINE = re.compile(
    r"^(?:full:(?P<gpu>[A-Za-z0-9_]+)/)?(?P<test>\S+)\s+SKIP\s+\((?P<reason>.*\S.*)\)\s*$"
)


@dataclass(frozen=True)
class GpuType:
    name: str
    arch: str | None
    device_names: tuple[str, ...]
    runner_labels: tuple[str, ...]
    setup: Setup = Setup()


@dataclass(frozen=True)
class SuiteRef:
    """A pytest path or node id, with optional ``-m`` / ``-k`` and extra arguments; ``builtin``:
    one of stagebot's own suites (stages/builtin.py), its path then under the stagebot package."""

    path: str
    marks: str | None = None
    keyword: str | None = None
    args: tuple[str, ...] = ()
    builtin: str | None = None

    def pytest_args(self) -> list[str]:
        args = [self.path]
        if self.marks:
            args += ["-m", self.marks]
        if self.keyword:
            args += ["-k", self.keyword]
        return args + list(self.args)

    def to_json(self) -> dict[str, Any]:
        data = {
            "path": self.path,
            "marks": self.marks,
            "keyword": self.keyword,
            "args": list(self.args),
        }
        return data | ({"builtin": self.builtin} if self.builtin else {})


@dataclass(frozen=True)
class Family:
    name: str
    kind: str
    gpu_type: str
    gpu_count: int
    nodes: int
    backend: str | None
    tags: tuple[str, ...]
    phase: str
    shards: int
    timeout_minutes: int
    max_reruns: int  # re-runs of a failed test (test stages)
    rerun_max_failures: int  # re-run only when at most this many tests failed
    suites: tuple[SuiteRef, ...]
    command: str | None
    run_if_changed: tuple[str, ...]
    skip_if_only_changed: tuple[str, ...]
    source: str  # "file:line"
    setup: Setup = Setup()  # merged: the catalog's, the GPU type's, then the family's own

    @property
    def multi_gpu(self) -> bool:
        return self.gpu_count > 1 or self.nodes > 1

    def stage_names(self) -> list[str]:
        if self.kind != "test":
            return [self.name]
        return [test_stage_name(self.name, k) for k in range(1, self.shards + 1)]


@dataclass(frozen=True)
class Stage:
    name: str
    family: Family
    shard: int  # 1-based shard index

    def __getattr__(self, attribute: str):  # the family's attributes, read through the stage
        return getattr(self.family, attribute)


@dataclass(frozen=True)
class Waive:
    test_id: str
    reason: str
    gpu_type: str | None
    source: str

    def applies_to(self, gpu_type: str) -> bool:
        return self.gpu_type is None or self.gpu_type == gpu_type


@dataclass
class Catalog:
    gpu_types: dict[str, GpuType]
    families: tuple[Family, ...]
    waives: tuple[Waive, ...]
    digest: str  # changes whenever any catalog or waives file changes
    stages: tuple[Stage, ...] = field(init=False)
    _by_name: dict[str, Stage] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.stages = tuple(
            Stage(name, family, k)
            for family in self.families
            for k, name in enumerate(family.stage_names(), start=1)
        )
        self._by_name = {stage.name: stage for stage in self.stages}

    def stage(self, name: str) -> Stage | None:
        return self._by_name.get(name)

    def suspect_patterns(self, stages: list[str]) -> dict[str, list[str]]:
        """Each stage's ``run_if_changed`` patterns: recorded with a pipeline, so the failure
        analysis can name suspects among the changed files."""
        return {name: list(self._by_name[name].run_if_changed) for name in stages}

    def waives_for(self, gpu_type: str) -> list[Waive]:
        return [waive for waive in self.waives if waive.applies_to(gpu_type)]


class _LineLoader(yaml.SafeLoader):
    """A YAML loader whose mappings remember their 1-based line and each key's line."""


class _Mapping(dict):
    line = 0
    key_lines: dict[Any, int] = {}


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> _Mapping:
    mapping = _Mapping(loader.construct_mapping(node, deep=True))
    mapping.line = node.start_mark.line + 1
    mapping.key_lines = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in mapping.key_lines:  # YAML lets a later key silently replace an earlier one
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"key {key!r} appears twice (first on line {mapping.key_lines[key]})",
                key_node.start_mark,
            )
        mapping.key_lines[key] = key_node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _Reader:
    """Validates one file's items; ``fail`` raises a CatalogError located in that file."""

    def __init__(self, path: Path, known_good: bool = False):
        self.path = path
        self.known_good = known_good  # its text passed check_shape and the pattern checks

    def fail(self, line: int, item: str, message: str) -> None:
        raise CatalogError(f"{self.path}:{line}: {item}: {message}")

    def check_shape(self, data: _Mapping) -> None:
        """The fragment against the catalog JSON Schema; the first error, with file, line and
        item, in the words of the catalog (key names, Python type names)."""
        from jsonschema.exceptions import best_match

        error = best_match(_validator().iter_errors(data))
        if error is not None:
            line, item = _locate(data, list(error.absolute_path))
            self.fail(line, item, _schema_message(error))


def _shape_marker(text: str) -> Path | None:
    """Where a fragment text that passed the schema and pattern checks is remembered: importing
    jsonschema and pathspec would double `bot dry-run`'s start-up, for checks whose answer
    depends on the text (and the schema) alone. None: no cache folder to use."""
    if os.environ.get("XDG_CACHE_HOME"):
        cache = Path(os.environ["XDG_CACHE_HOME"])
    else:
        try:
            home = Path.home()
        except RuntimeError:
            return None
        if not home.is_dir():  # a HOME that does not exist is not created for a cache
            return None
        cache = home / ".cache"
    key = hashlib.sha256(SCHEMA.read_bytes() + b"\0" + text.encode()).hexdigest()
    return cache / "stagebot" / "catalog-fragments" / key


def _shape_checked_before(text: str) -> bool:
    marker = _shape_marker(text)
    return marker is not None and marker.exists()


def _remember_shape_checked(text: str) -> None:
    marker = _shape_marker(text)
    try:
        if marker is not None:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
    except OSError:
        pass  # no cache: the next load checks again


def _value(spec: _Mapping, key: str, default: Any = None) -> Any:
    """A validated key's value; an absent or null (YAML ``key:``) one is ``default``."""
    value = spec.get(key)
    return default if value is None else value


@cache
def _validator():
    import jsonschema

    strict = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    )
    cls = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=strict)
    return cls(json.loads(SCHEMA.read_text()))


def _locate(data: _Mapping, path: list) -> tuple[int, str]:
    """The line of the innermost mapping on ``path`` and the item it belongs to."""
    line, item, node = data.line or 1, "fragment", data
    for depth, key in enumerate(path):
        if depth == 1 and path[0] == "gpu_types":
            item = f"gpu type {key!r}"
        elif depth == 1 and path[0] == "families":
            name = node[key].get("name") if isinstance(node[key], _Mapping) else None
            item = f"family {name!r}" if isinstance(name, str) else f"families[{key}]"
        elif depth == 1 and path[0] == "attach":
            item = "attach"
        elif depth == 2 and key == "suites" and len(path) > 3:
            item += " suite"
        if isinstance(node, _Mapping) and key in node.key_lines:
            line = node.key_lines[key]
        node = node[key]
        if isinstance(node, _Mapping):
            line = node.line
    return line, item


_TYPE_NAMES = {"integer": "int", "string": "str", "array": "list", "object": "dict"}


def _schema_message(error) -> str:
    path, value, expected = list(error.path), error.instance, error.validator_value
    key = path[-1] if path else None
    if error.validator == "type" and "object" in expected:
        return f"must be a mapping of {', '.join(error.schema['properties'])}"
    if isinstance(key, int) and error.validator in ("type", "minLength"):  # a list's element
        what = "non-empty strings" if "minLength" in error.schema else "strings"
        return f"{path[-2]!r} must be a list of {what}"
    if error.validator == "additionalProperties":
        unknown = next(k for k in value if k not in error.schema["properties"])
        return f"unknown key {unknown!r} (valid: {', '.join(error.schema['properties'])})"
    if error.validator == "required":
        return f"missing required key {next(k for k in expected if k not in value)!r}"
    if error.validator == "type":
        types = [expected] if isinstance(expected, str) else expected
        names = " or ".join(_TYPE_NAMES[t] for t in types if t != "null")
        return f"{key!r} must be {names}, not {value!r}"
    if error.validator == "enum":
        return f"{key} {value!r} is not one of {', '.join(str(v) for v in expected if v)}"
    if error.validator == "minimum":
        return f"{key} is {value}; it must be {expected} or more"
    if error.validator == "minLength":
        return f"{key!r} must be a non-empty string"
    return error.message


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Load a catalog folder (fragments + waives) or one YAML file (default: the shipped one)."""
    root = Path(path) if path is not None else DEFAULT_CATALOG
    if root.is_dir():
        fragments = sorted([*root.glob("*.yaml"), *root.glob("*.yml")])
        waive_files = sorted(root.glob("waives*.txt"))
        if not fragments:
            raise CatalogError(f"{root}: no *.yaml catalog fragments in this folder")
    elif root.is_file():
        fragments, waive_files = [root], []
    else:
        raise CatalogError(f"{root}: no such catalog file or folder")
    digest = hashlib.sha256()
    gpu_types: dict[str, GpuType] = {}
    family_data: list[tuple[_Reader, _Mapping]] = []
    attachments: list[tuple[_Reader, _Mapping]] = []
    default_setup = Setup()
    texts = [_read(fragment) for fragment in fragments]
    for fragment, text in zip(fragments, texts, strict=True):
        digest.update(fragment.name.encode() + b"\0" + text.encode())
        reader = _Reader(fragment, _shape_checked_before(text))
        data = _parse_yaml(fragment, text)
        if not reader.known_good:
            reader.check_shape(data)
        types = _value(data, "gpu_types", _Mapping())
        for name, spec in types.items():
            if name in gpu_types:
                reader.fail(types.key_lines[name], f"gpu type {name!r}", "defined twice")
            gpu_types[name] = _gpu_type(reader, name, spec)
        if _value(data, "setup") is not None:
            default_setup = default_setup.then(_setup(reader, data, "setup"))
        family_data += [(reader, f) for f in _mappings(reader, data, "families")]
        attachments += [(reader, a) for a in _mappings(reader, data, "attach")]
    families = [_family(reader, spec, gpu_types, default_setup) for reader, spec in family_data]
    _check_unique(families)
    families = [_with_builtin_setup(family) for family in _attach(attachments, families)]
    for family in families:
        if family.kind == "test" and not family.suites and family.command is None:
            raise CatalogError(
                f"{family.source}: family {family.name!r}: a test family needs suites (attach "
                "them in a suite fragment) or a command"
            )
    for text in texts:  # every fragment passed: later loads skip the slow checks
        _remember_shape_checked(text)
    waives: list[Waive] = []
    for waive_file in waive_files:
        text = _read(waive_file)
        digest.update(waive_file.name.encode() + b"\0" + text.encode())
        waives += _waives(waive_file, text, gpu_types)
    return Catalog(gpu_types, tuple(families), tuple(waives), digest.hexdigest()[:16])


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CatalogError(f"{path}: cannot read this catalog file: {error}") from None


def _parse_yaml(path: Path, text: str) -> _Mapping:
    try:
        data = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise CatalogError(f"{where}: not valid YAML: {getattr(error, 'problem', error)}") from None
    if data is None:
        return _Mapping()
    if not isinstance(data, _Mapping):
        raise CatalogError(
            f"{path}:1: a catalog fragment must be a mapping of gpu_types, families, attach, setup"
        )
    return data


def _mappings(reader: _Reader, data: _Mapping, key: str) -> list[_Mapping]:
    return _value(data, key, [])


def _gpu_type(reader: _Reader, name: str, spec: _Mapping) -> GpuType:
    return GpuType(
        name,
        _value(spec, "arch"),
        tuple(_value(spec, "device_names", ())),
        tuple(_value(spec, "runner_labels", ())),
        _setup(reader, spec, f"gpu type {name!r}"),
    )


def _setup(reader: _Reader, spec: _Mapping, item: str) -> Setup:
    data = _value(spec, "setup", {})
    try:
        return check_setup(data)
    except ValueError as error:
        reader.fail(spec.key_lines.get("setup", spec.line), item, str(error))


def _family(
    reader: _Reader, spec: _Mapping, gpu_types: dict[str, GpuType], default_setup: Setup
) -> Family:
    name, kind = spec["name"], spec["kind"]
    item = f"family {name!r}"
    declared = {
        key: spec[key]
        for key in ("gpu_type", "gpu_count", "nodes", "backend", "phase")
        if key in spec
    }
    if kind == "test":
        try:
            parsed = parse_test_stage_name(name, with_shard=False)
        except ValueError as error:
            reader.fail(
                spec.line,
                item,
                f"{error}; test families are named "
                "<GPU>[-<N>_GPUs][-<M>_Nodes]-<Backend>[-<Tag>…][-Post-Merge]",
            )
        from_name = {
            "gpu_type": parsed.gpu_type,
            "gpu_count": parsed.gpu_count,
            "nodes": parsed.nodes,
            "backend": parsed.backend,
            "phase": "post_merge" if parsed.post_merge else "pre_merge",
        }
        if "tags" in spec and tuple(_value(spec, "tags", ())) != parsed.tags:
            reader.fail(
                spec.line,
                item,
                f"tags {spec['tags']} disagree with the name (which says {list(parsed.tags)})",
            )
        tags = parsed.tags
    else:
        first = name.split("-")[0]
        from_name = {
            "gpu_type": first,
            "gpu_count": 0 if first == "CPU" else 1,
            "nodes": 1,
            "backend": None,
            "phase": "pre_merge",
        }
        from_name.update({k: v for k, v in declared.items() if k in ("gpu_count", "phase")})
        tags = tuple(_value(spec, "tags", ()))
    for key, value in declared.items():
        if value != from_name[key]:
            reader.fail(
                spec.line,
                item,
                f"{key} {value!r} disagrees with the name, which says {from_name[key]!r}",
            )
    gpu_type = from_name["gpu_type"]
    if gpu_type not in gpu_types:
        reader.fail(
            spec.line,
            item,
            f"unknown GPU type {gpu_type!r} (valid: "
            f"{', '.join(gpu_types)}); declare it under gpu_types",
        )
    gpu_count = _value(spec, "gpu_count", from_name["gpu_count"])
    if (gpu_type == "CPU") != (gpu_count == 0):
        reader.fail(spec.line, item, "GPU type CPU means 0 GPUs, and only CPU does")
    if from_name["backend"] is not None and from_name["backend"] not in BACKENDS.values():
        reader.fail(spec.line, item, f"unknown backend {from_name['backend']!r}")
    shards = _value(spec, "shards", 1)
    if shards < 1 or (kind != "test" and shards != 1):
        reader.fail(spec.line, item, "shards must be ≥ 1, and exactly 1 for build/sanity stages")
    timeout = spec["timeout_minutes"]
    reruns = {
        key: _value(spec, key, default)
        for key, default in (
            ("max_reruns", DEFAULT_MAX_RERUNS),
            ("rerun_max_failures", DEFAULT_RERUN_MAX_FAILURES),
        )
    }
    for key in reruns:  # (the schema refuses a negative one)
        if kind != "test" and key in spec:
            reader.fail(spec.line, item, f"{key} applies to test stages only (this is {kind})")
    suites = tuple(_suite(reader, s, item) for s in _value(spec, "suites", []))
    command = _value(spec, "command")
    if suites and command is not None:
        reader.fail(spec.line, item, "give either suites or a command, not both")
    if kind != "test" and command is None:
        reader.fail(spec.line, item, f"a {kind} stage needs a command (a real check to run)")
    run_if = tuple(_value(spec, "run_if_changed", ()))
    skip_if = tuple(_value(spec, "skip_if_only_changed", ()))
    if run_if and skip_if:
        reader.fail(
            spec.line,
            item,
            "run_if_changed and skip_if_only_changed are mutually exclusive; keep one",
        )
    for pattern in () if reader.known_good else run_if + skip_if:
        try:
            check_path_pattern(pattern)
        except ValueError as error:
            reader.fail(spec.line, item, str(error))
    return Family(
        name,
        kind,
        gpu_type,
        gpu_count,
        from_name["nodes"],
        from_name["backend"],
        tags,
        spec.get("phase", from_name["phase"]),
        shards,
        timeout,
        reruns["max_reruns"],
        reruns["rerun_max_failures"],
        suites,
        command,
        run_if,
        skip_if,
        f"{reader.path}:{spec.line}",
        default_setup.then(gpu_types[gpu_type].setup).then(_setup(reader, spec, item)),
    )


def _suite(reader: _Reader, spec: _Mapping, item: str) -> SuiteRef:
    path, name = _value(spec, "path"), _value(spec, "builtin")
    if (path is None) == (name is None):
        reader.fail(
            spec.line,
            f"{item} suite",
            "give a path (repository-relative) or a builtin suite's name "
            f"({', '.join(builtin.names())}), one of them",
        )
    if name is not None:
        try:
            path = builtin.suite_path(name)
        except ValueError as error:
            reader.fail(spec.line, f"{item} suite", str(error))
    elif path.startswith("/") or ".." in Path(path.split("::")[0]).parts:
        reader.fail(spec.line, f"{item} suite", f"path {path!r} must be repository-relative")
    return SuiteRef(
        path,
        _value(spec, "marks"),
        _value(spec, "keyword"),
        tuple(_value(spec, "args", ())),
        name,
    )


def _with_builtin_setup(family: Family) -> Family:
    """A family that runs a built-in suite installs stagebot's [harness] extra too."""
    from dataclasses import replace

    if any(suite.builtin for suite in family.suites):
        return replace(family, setup=family.setup.then(builtin.setup()))
    return family


def _check_unique(families: list[Family]) -> None:
    seen: dict[str, Family] = {}
    for family in families:
        for name in family.stage_names():
            if name in seen:
                raise CatalogError(
                    f"{family.source}: stage {name!r} is also defined at "
                    f"{seen[name].source}; stage names must be unique"
                )
            seen[name] = family


def _attach(attachments: list[tuple[_Reader, _Mapping]], families: list[Family]) -> list[Family]:
    from dataclasses import replace

    by_name = {family.name: family for family in families}
    for reader, spec in attachments:
        patterns = _value(spec, "families", [])
        suites = tuple(_suite(reader, s, "attach") for s in spec["suites"])
        for pattern in patterns:
            matched = [name for name in by_name if name_matches(name, pattern)]
            if not matched:
                reader.fail(
                    spec.line,
                    "attach",
                    f"family pattern {pattern!r} matches no family "
                    f"(families: {', '.join(by_name)})",
                )
            for name in matched:
                family = by_name[name]
                if family.kind != "test" or family.command is not None:
                    reader.fail(
                        spec.line,
                        "attach",
                        f"suites can only be attached to test families "
                        f"without a command; {name!r} is not one",
                    )
                by_name[name] = replace(family, suites=family.suites + suites)
    return [by_name[family.name] for family in families]


def _waives(path: Path, text: str, gpu_types: dict[str, GpuType]) -> list[Waive]:
    waives = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = WAIVE_LINE.match(line)
        if not match:
            raise CatalogError(
                f"{path}:{number}: waive {line!r}: expected "
                "'[full:<GPU>/]<test id> SKIP (<reason>)'"
            )
        if match["gpu"] and match["gpu"] not in gpu_types:
            raise CatalogError(
                f"{path}:{number}: waive {match['test']!r}: unknown GPU type "
                f"{match['gpu']!r} (valid: {', '.join(gpu_types)})"
            )
        waives.append(Waive(match["test"], match["reason"], match["gpu"], f"{path}:{number}"))
    return waives
