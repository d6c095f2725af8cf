"""The stage catalog: the shipped one is complete; every malformed input is a located error."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from stagebot.stages.catalog import SCHEMA, load_catalog
from stagebot.stages.errors import CatalogError
from stagebot.stages.names import parse_test_stage_name

REQUIRED_FAMILIES = [
    "CPU-PyTorch",
    "A10-PyTorch",
    "A30-AutoDeploy",
    "A100X-PyTorch",
    "H100_PCIe-AutoDeploy",
    "H100_PCIe-PyTorch",
    "DGX_H100-4_GPUs-AutoDeploy",
    "DGX_H200-4_GPUs-AutoDeploy",
    "DGX_H200-PyTorch",
    "B200-PyTorch",
    "DGX_B200-AutoDeploy",
    "DGX_B200-4_GPUs-AutoDeploy",
    "DGX_B200-4_GPUs-PyTorch-Post-Merge",
    "A10-Build_Docs",
    "A10-PackageSanityCheck-PY311-UB2204",
    "A100X-PackageSanityCheck-PY312-UB2404",
]

GPU_TYPES = """
gpu_types:
  CPU: {arch: null, device_names: [], runner_labels: [ubuntu-latest]}
  A10: {arch: sm_86, device_names: ["NVIDIA A10"], runner_labels: [gpu-a10]}
  DGX_H200: {arch: sm_90a, device_names: ["NVIDIA H200"], runner_labels: [gpu-h200]}
"""


def write_catalog(tmp_path: Path, families: str, extra: dict[str, str] | None = None) -> Path:
    (tmp_path / "gpus.yaml").write_text(GPU_TYPES)
    (tmp_path / "stages.yaml").write_text(textwrap.dedent(families))
    for name, text in (extra or {}).items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


def test_shipped_catalog_has_the_required_families_and_suites() -> None:
    catalog = load_catalog()
    names = [family.name for family in catalog.families]
    assert [name for name in REQUIRED_FAMILIES if name not in names] == []
    for family in catalog.families:
        assert family.suites or family.command, family.name
        if family.kind == "test":
            assert family.backend in ("pytorch", "autodeploy")
    by_name = {family.name: family for family in catalog.families}
    assert by_name["CPU-PyTorch"].gpu_count == 0
    assert by_name["DGX_H200-4_GPUs-AutoDeploy"].gpu_count == 4
    assert by_name["DGX_B200-4_GPUs-PyTorch-Post-Merge"].phase == "post_merge"
    paths = {suite.path for suite in by_name["CPU-PyTorch"].suites}
    assert paths == {"harness/suites/nvfp4_moe", "harness/suites/sharding_ir"}
    assert catalog.gpu_types["DGX_H200"].arch == "sm_90a"


def test_every_gpu_family_asks_for_an_ephemeral_self_hosted_runner() -> None:
    """Stage jobs run PR code: on a persistent runner it could trojan the tool cache, pip's
    config or leave processes for the next job (main's post-merge jobs included). Every GPU type
    asks for the `ephemeral` label (one job per runner); CPU stages use GitHub-hosted runners,
    which are fresh VMs."""
    catalog = load_catalog()
    for family in catalog.families:
        labels = catalog.gpu_types[family.gpu_type].runner_labels
        if family.gpu_type == "CPU":
            assert labels == ("ubuntu-latest",), family.name
        else:
            assert {"self-hosted", "ephemeral"} <= set(labels), (family.name, labels)


def test_every_pytorch_family_runs_the_nvfp4_suite_and_the_h200_one_forces_cute() -> None:
    nvfp4 = "harness/suites/nvfp4_moe"
    for family in load_catalog().families:
        if family.backend != "pytorch":
            continue
        runs = [suite for suite in family.suites if suite.path == nvfp4]
        assert len(runs) == 1, (family.name, runs)
        forced = "--moe-backend" in runs[0].args
        assert forced == (family.name == "DGX_H200-PyTorch"), (family.name, runs[0].args)
        if forced:
            assert runs[0].pytest_args()[-2:] == ["--moe-backend", "cute"]


def test_shipped_suite_paths_exist() -> None:
    root = Path(__file__).resolve().parents[2]
    for stage in load_catalog().stages:
        for suite in stage.suites:
            assert (root / suite.path.split("::")[0]).exists(), (stage.name, suite.path)


def test_stage_names_expand_shards(tmp_path: Path) -> None:
    catalog = load_catalog(
        write_catalog(
            tmp_path,
            """
        families:
          - {name: A10-PyTorch-DeepSeek, kind: test, shards: 3, timeout_minutes: 5,
             suites: [{path: tests/a}]}
    """,
        )
    )
    assert [stage.name for stage in catalog.stages] == [
        "A10-PyTorch-DeepSeek-1",
        "A10-PyTorch-DeepSeek-2",
        "A10-PyTorch-DeepSeek-3",
    ]
    assert catalog.stage("A10-PyTorch-DeepSeek-2").shard == 2
    assert catalog.stage("A10-PyTorch-DeepSeek-2").tags == ("DeepSeek",)


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("A10-PyTorch-1", ("A10", 1, 1, "pytorch", (), False, 1)),
        ("CPU-PyTorch-2", ("CPU", 0, 1, "pytorch", (), False, 2)),
        ("DGX_H200-4_GPUs-AutoDeploy-1", ("DGX_H200", 4, 1, "autodeploy", (), False, 1)),
        (
            "GB200-8_GPUs-2_Nodes-PyTorch-Ray-Post-Merge-3",
            ("GB200", 8, 2, "pytorch", ("Ray",), True, 3),
        ),
        (
            "DGX_B200-8_GPUs-PyTorch-PerfSanity-Post-Merge-1",
            ("DGX_B200", 8, 1, "pytorch", ("PerfSanity",), True, 1),
        ),
    ],
)
def test_stage_name_grammar(name: str, parts: tuple) -> None:
    parsed = parse_test_stage_name(name, with_shard=True)
    assert (
        parsed.gpu_type,
        parsed.gpu_count,
        parsed.nodes,
        parsed.backend,
        parsed.tags,
        parsed.post_merge,
        parsed.shard,
    ) == parts


@pytest.mark.parametrize("name", ["A10-PyTorch", "A10-Jax-1", "A10--PyTorch-1", "A10-4_GPUs-1"])
def test_stage_name_grammar_rejects(name: str) -> None:
    with pytest.raises(ValueError):
        parse_test_stage_name(name, with_shard=True)


def family(line: str) -> str:
    return f"families:\n  - {line}\n"


CATALOG_ERRORS = [
    pytest.param(
        family("{name: A10-PyTorch, kind: test, timeout_minutes: 5, shards: 2.0}"),
        "stages.yaml:2: family 'A10-PyTorch': 'shards' must be int, not 2.0",
        id="a float is no int",
    ),
    pytest.param(
        family("{name: A10-PyTorch, kind: test, timeout_minutes: 5, run_if_changed: ['']}"),
        "'run_if_changed' must be a list of non-empty strings",
        id="an empty path pattern",
    ),
    pytest.param(
        family("A10-PyTorch"),
        "stages.yaml:1: families[0]: must be a mapping of name, kind, gpu_type",
        id="a family that is no mapping",
    ),
    pytest.param(
        family("{name: A10-PyTorch, timeout_minutes: 5, suites: [{path: t}]}"),
        "missing required key 'kind'",
        id="no kind",
    ),
    pytest.param(
        family("{name: A10-PyTorch, kind: test, timeout_minutes: 5, suites: t}"),
        "family 'A10-PyTorch': 'suites' must be list, not 't'",
        id="suites that are no list",
    ),
    pytest.param(
        family("{name: A10-PyTorch, kind: test, timeout_minutes: 5, suites: [{path: t, k: 1}]}"),
        "family 'A10-PyTorch' suite: unknown key 'k'",
        id="a suite's own error names the suite",
    ),
    pytest.param(
        family(
            "{name: A10-PyTorch, kind: test, timeout_minutes: 5, suites: [{path: t}], shard: 2}"
        ),
        "stages.yaml:2: family 'A10-PyTorch': unknown key 'shard' (valid: name, kind,",
        id="unknown key",
    ),
    pytest.param(
        family("{name: A10-PyTorch, kind: tests, timeout_minutes: 5}"),
        "kind 'tests' is not one of test, build, sanity",
        id="bad kind",
    ),
    pytest.param(
        family("{name: A10-PyTorch, kind: test, suites: [{path: t}]}"),
        "missing required key 'timeout_minutes'",
        id="missing timeout",
    ),
    pytest.param(
        family("{name: A10-PyTorch, kind: test, timeout_minutes: soon, suites: [{path: t}]}"),
        "'timeout_minutes' must be int, not 'soon'",
        id="mistyped timeout",
    ),
    pytest.param(
        family("{name: H300-PyTorch, kind: test, timeout_minutes: 5, suites: [{path: t}]}"),
        "unknown GPU type 'H300' (valid: CPU, A10, DGX_H200)",
        id="unknown GPU type",
    ),
    pytest.param(
        family("{name: A10-Jax, kind: test, timeout_minutes: 5, suites: [{path: t}]}"),
        "has no backend after the GPU part (expected one of PyTorch",
        id="unknown backend",
    ),
    pytest.param(
        family(
            "{name: A10-PyTorch, kind: test, gpu_count: 2, timeout_minutes: 5, suites: [{path: t}]}"
        ),
        "gpu_count 2 disagrees with the name, which says 1",
        id="gpu count disagrees",
    ),
    pytest.param(
        family(
            "{name: DGX_H200-4_GPUs-AutoDeploy, kind: test, gpu_type: A10, "
            "timeout_minutes: 5, suites: [{path: t}]}"
        ),
        "gpu_type 'A10' disagrees with the name, which says 'DGX_H200'",
        id="gpu type disagrees",
    ),
    pytest.param(
        family(
            "{name: A10-PyTorch, kind: test, backend: cpp, timeout_minutes: 5, suites: [{path: t}]}"
        ),
        "backend 'cpp' disagrees",
        id="backend disagrees",
    ),
    pytest.param(
        family(
            "{name: A10-PyTorch, kind: test, phase: post_merge, timeout_minutes: 5, "
            "suites: [{path: t}]}"
        ),
        "phase 'post_merge' disagrees",
        id="phase disagrees",
    ),
    pytest.param(
        family(
            "{name: A10-PyTorch-Ray, kind: test, tags: [Perf], timeout_minutes: 5, "
            "suites: [{path: t}]}"
        ),
        "tags ['Perf'] disagree with the name",
        id="tags disagree",
    ),
    pytest.param(
        family(
            "{name: CPU-PyTorch, kind: test, gpu_count: 1, timeout_minutes: 5, suites: [{path: t}]}"
        ),
        "disagrees with the name, which says 0",
        id="CPU with a GPU",
    ),
    pytest.param(
        family("{name: A10-PyTorch, kind: test, timeout_minutes: 5}"),
        "a test family needs suites",
        id="test family without suites",
    ),
    pytest.param(
        family(
            "{name: A10-PyTorch, kind: test, timeout_minutes: 5, max_reruns: -1, "
            "suites: [{path: t}]}"
        ),
        "max_reruns is -1; it must be 0 or more",
        id="negative reruns",
    ),
    pytest.param(
        family(
            "{name: A10-Build_X, kind: build, timeout_minutes: 5, rerun_max_failures: 3, "
            "command: x}"
        ),
        "rerun_max_failures applies to test stages only (this is build)",
        id="reruns on a build stage",
    ),
    pytest.param(
        family(
            "{name: A10-PyTorch, kind: test, timeout_minutes: 5, suites: [{path: t}], "
            "command: make}"
        ),
        "either suites or a command, not both",
        id="suites and command",
    ),
    pytest.param(
        family("{name: A10-Build_Docs, kind: build, timeout_minutes: 5}"),
        "a build stage needs a command",
        id="build without command",
    ),
    pytest.param(
        family("{name: A10-Build_Docs, kind: build, shards: 2, timeout_minutes: 5, command: make}"),
        "exactly 1 for build/sanity stages",
        id="sharded build stage",
    ),
    pytest.param(
        family(
            "{name: A10-PyTorch, kind: test, shards: 0, timeout_minutes: 5, suites: [{path: t}]}"
        ),
        "shards must be ≥ 1",
        id="zero shards",
    ),
    pytest.param(
        family(
            "{name: A10-PyTorch, kind: test, timeout_minutes: 5, suites: [{path: t}], "
            "run_if_changed: [a/**], skip_if_only_changed: [docs/**]}"
        ),
        "run_if_changed and skip_if_only_changed are mutually exclusive",
        id="both path rules",
    ),
    pytest.param(
        family(
            "{name: A10-PyTorch, kind: test, timeout_minutes: 5, suites: [{path: t}], "
            "run_if_changed: [/abs]}"
        ),
        "must be a non-empty repository-relative glob",
        id="absolute path pattern",
    ),
    pytest.param(
        family("{name: A10-PyTorch, kind: test, timeout_minutes: 5, suites: [{path: ../outside}]}"),
        "must be repository-relative",
        id="suite path escapes the repo",
    ),
    pytest.param(
        family("{name: A10-PyTorch, kind: test, timeout_minutes: 5, suites: [{builtin: moe}]}"),
        "stages.yaml:2: family 'A10-PyTorch' suite: unknown builtin suite 'moe' (known: "
        "nvfp4_moe, sharding_ir)",
        id="an unknown built-in suite, with the known ones",
    ),
    pytest.param(
        family("{name: A10-PyTorch, kind: test, timeout_minutes: 5, suites: [{marks: gpu}]}"),
        "family 'A10-PyTorch' suite: give a path (repository-relative) or a builtin suite's "
        "name (nvfp4_moe, sharding_ir), one of them",
        id="a suite with neither a path nor a built-in name",
    ),
    pytest.param(
        family(
            "{name: A10-PyTorch, kind: test, timeout_minutes: 5, "
            "suites: [{path: t, builtin: sharding_ir}]}"
        ),
        "give a path (repository-relative) or a builtin suite's name",
        id="a suite with both a path and a built-in name",
    ),
    pytest.param(
        family(
            "{name: A10-PyTorch, kind: test, timeout_minutes: 5, suites: [{path: t, mark: gpu}]}"
        ),
        "unknown key 'mark'",
        id="suite unknown key",
    ),
    pytest.param(
        "families:\n  - {name: A10-PyTorch, kind: test, timeout_minutes: 5, suites: "
        "[{path: t}]}\n  - {name: A10-PyTorch, kind: test, timeout_minutes: 5, suites: "
        "[{path: u}]}\n",
        "stage 'A10-PyTorch-1' is also defined at",
        id="duplicate stage",
    ),
    pytest.param(
        "families:\n  - {name: A10-PyTorch\n",
        "stages.yaml:3: not valid YAML",
        id="YAML syntax error",
    ),
    pytest.param(
        "stages: []\n",
        "unknown key 'stages' (valid: gpu_types, families, attach, setup)",
        id="unknown top-level key",
    ),
    pytest.param("- a\n- b\n", "a catalog fragment must be a mapping", id="fragment not a mapping"),
]


@pytest.mark.parametrize(("families", "message"), CATALOG_ERRORS)
def test_catalog_errors(tmp_path: Path, families: str, message: str) -> None:
    write_catalog(tmp_path, families)
    with pytest.raises(CatalogError) as raised:
        load_catalog(tmp_path)
    assert message in str(raised.value)
    assert str(tmp_path) in str(raised.value)  # every error names the file


BASE = """
families:
  - {name: A10-PyTorch, kind: test, timeout_minutes: 5}
  - {name: A10-Build_Docs, kind: build, timeout_minutes: 5, command: make docs}
"""


@pytest.mark.parametrize(
    ("attach", "message"),
    [
        (
            "attach:\n  - {families: [H100-*], suites: [{path: t}]}\n",
            "family pattern 'H100-*' matches no family",
        ),
        (
            "attach:\n  - {families: [A10-Build_Docs], suites: [{path: t}]}\n",
            "suites can only be attached to test families",
        ),
        ("attach:\n  - {families: [A10-*]}\n", "missing required key 'suites'"),
        (
            "attach:\n  - {families: [A10-PyTorch], suites: [{path: t}], args: [-x]}\n",
            "attach: unknown key 'args' (valid: families, suites)",
        ),
        (
            "attach:\n  - {families: [A10-PyTorch], suites: [{path: t, mark: x}]}\n",
            "attach suite: unknown key 'mark'",
        ),
    ],
)
def test_attach_errors(tmp_path: Path, attach: str, message: str) -> None:
    write_catalog(tmp_path, BASE, {"suite_x.yaml": attach})
    with pytest.raises(CatalogError, match="suite_x.yaml:2") as raised:
        load_catalog(tmp_path)
    assert message in str(raised.value)


def test_attach_merges_suites_from_fragments(tmp_path: Path) -> None:
    catalog = load_catalog(
        write_catalog(
            tmp_path,
            BASE,
            {
                "suite_a.yaml": "attach:\n  - {families: ['*-PyTorch'],\n"
                "    suites: [{path: a, marks: gpu}]}\n",
                "suite_b.yaml": "attach:\n  - {families: [A10-PyTorch],\n"
                "    suites: [{path: b, args: [-x]}]}\n",
            },
        )
    )
    suites = catalog.stage("A10-PyTorch-1").suites
    assert [suite.pytest_args() for suite in suites] == [["a", "-m", "gpu"], ["b", "-x"]]


def test_waives(tmp_path: Path) -> None:
    write_catalog(
        tmp_path, BASE, {"s.yaml": "attach:\n  - {families: [A10-*Py*], suites: [{path: t}]}\n"}
    )
    (tmp_path / "waives.txt").write_text(
        "# comment\n\nt/test_a.py::test_x SKIP (https://bugs/1)\n"
        "full:A10/t/test_b.py::test_y[p] SKIP (flaky on A10)\n"
    )
    catalog = load_catalog(tmp_path)
    assert [(w.test_id, w.gpu_type, w.reason) for w in catalog.waives] == [
        ("t/test_a.py::test_x", None, "https://bugs/1"),
        ("t/test_b.py::test_y[p]", "A10", "flaky on A10"),
    ]
    assert [w.test_id for w in catalog.waives_for("DGX_H200")] == ["t/test_a.py::test_x"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("t/test_a.py::test_x", "expected '[full:<GPU>/]<test id> SKIP (<reason>)'"),
        ("t/test_a.py::test_x SKIP ()", "expected '[full:<GPU>/]"),
        ("full:H300/t/test_a.py SKIP (x)", "unknown GPU type 'H300'"),
    ],
)
def test_waive_errors(tmp_path: Path, line: str, message: str) -> None:
    write_catalog(
        tmp_path, BASE, {"s.yaml": "attach:\n  - {families: [A10-*Py*], suites: [{path: t}]}\n"}
    )
    (tmp_path / "waives.txt").write_text(f"# header\n{line}\n")
    with pytest.raises(CatalogError, match="waives.txt:2") as raised:
        load_catalog(tmp_path)
    assert message in str(raised.value)


def test_digest_changes_with_waives(tmp_path: Path) -> None:
    write_catalog(
        tmp_path, BASE, {"s.yaml": "attach:\n  - {families: [A10-*Py*], suites: [{path: t}]}\n"}
    )
    before = load_catalog(tmp_path).digest
    assert load_catalog(tmp_path).digest == before
    (tmp_path / "waives.txt").write_text("t::x SKIP (r)\n")
    assert load_catalog(tmp_path).digest != before


def test_missing_catalog(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="no such catalog"):
        load_catalog(tmp_path / "nope")
    with pytest.raises(CatalogError, match="no \\*.yaml catalog fragments"):
        load_catalog(tmp_path)


def test_duplicate_keys_are_errors_with_both_lines(tmp_path: Path) -> None:
    write_catalog(
        tmp_path,
        "families:\n  - {name: A10-PyTorch, kind: test, timeout_minutes: 5,\n"
        "     timeout_minutes: 50, suites: [{path: t}]}\n",
    )
    with pytest.raises(
        CatalogError,
        match=r"stages.yaml:3: not valid YAML: key 'timeout_minutes' "
        r"appears twice \(first on line 2\)",
    ):
        load_catalog(tmp_path)


def test_a_malformed_gpu_type_is_located_on_its_own_line(tmp_path: Path) -> None:
    (tmp_path / "gpus.yaml").write_text("gpu_types:\n  CPU: {runner_labels: []}\n  A10: [x]\n")
    with pytest.raises(CatalogError, match=r"gpus.yaml:3: gpu type 'A10': must be a mapping"):
        load_catalog(tmp_path)


def test_unreadable_files_are_catalog_errors(tmp_path: Path) -> None:
    write_catalog(
        tmp_path, BASE, {"s.yaml": "attach:\n  - {families: [A10-*Py*], suites: [{path: t}]}\n"}
    )
    (tmp_path / "waives.txt").write_bytes(b"\xff\xfe not UTF-8\n")
    with pytest.raises(CatalogError, match=r"waives.txt: cannot read this catalog file"):
        load_catalog(tmp_path)
    (tmp_path / "waives.txt").unlink()
    (tmp_path / "folder.yaml").mkdir()
    with pytest.raises(CatalogError, match=r"folder.yaml: cannot read this catalog file"):
        load_catalog(tmp_path)


def test_the_catalog_schema_is_valid_and_nulls_take_defaults(tmp_path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA.read_text()))
    (tmp_path / "stages.yaml").write_text(
        "gpu_types:\n  A10: {device_names: [a], runner_labels: [b]}\n"
        "families:\n  - {name: A10-PyTorch, kind: test, timeout_minutes: 5, shards:,"
        " suites: [{path: t, args:}], run_if_changed:}\n"
    )
    (family,) = load_catalog(tmp_path / "stages.yaml").families
    assert (family.shards, family.suites[0].args, family.run_if_changed) == (1, (), ())


def test_a_fragment_checked_once_skips_the_schema_next_time(tmp_path, monkeypatch) -> None:
    """jsonschema and pathspec cost `bot dry-run` as much as the rest of its start-up: a fragment
    text that passed is remembered (by its digest) and not checked again; an edited one is."""
    import stagebot.stages.catalog as catalog_module

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "stages.yaml"
    path.write_text(
        "gpu_types:\n  CPU: {runner_labels: [u]}\nfamilies:\n"
        "  - {name: CPU-PyTorch, kind: test, timeout_minutes: 5, suites: [{path: t}]}\n"
    )
    load_catalog(path)
    assert len(list((tmp_path / "cache" / "stagebot" / "catalog-fragments").iterdir())) == 1

    def no_schema():
        raise AssertionError("checked again")

    monkeypatch.setattr(catalog_module, "_validator", no_schema)
    load_catalog(path)
    path.write_text(path.read_text().replace("timeout_minutes: 5", "timeout_minutes: 6"))
    with pytest.raises(AssertionError, match="checked again"):
        load_catalog(path)
    bad = path.read_text().replace("timeout_minutes: 6", "timeout_minutes: soon")
    path.write_text(bad)
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for _ in range(2):  # a failing fragment is never remembered
        with pytest.raises(CatalogError, match="'timeout_minutes' must be int, not 'soon'"):
            load_catalog(path)


def test_no_cache_is_made_where_home_does_not_exist(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "nowhere"))
    load_catalog()
    assert not (tmp_path / "nowhere").exists()
