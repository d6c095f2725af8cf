"""The compiled-kernel disk cache: naming, whole-or-nothing entries, one build across processes."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest
from helpers import extras

from stagebot.kernels.cute import disk_cache
from stagebot.kernels.cute.compile import CompileKey, disk_entry_name
from stagebot.kernels.cute.disk_cache import DiskCache, entry_name
from stagebot.kernels.cute.tactics import TACTICS


def _key(**changes) -> CompileKey:
    fields = dict(
        kernel="grouped_gemm", tactic=TACTICS[0], dtypes=("nvfp4", "nvfp4", "bfloat16"),
        n=4096, k=2048, num_experts=8, tile_size=128, arch="sm_90a",
    )  # fmt: skip
    return CompileKey(**{**fields, **changes})


def test_every_field_of_the_key_names_another_entry():
    base = disk_entry_name(_key())
    assert disk_entry_name(_key()) == base  # stable within and across processes
    variants = [
        _key(tactic=TACTICS[-1]), _key(n=2048), _key(k=4096), _key(num_experts=32),
        _key(tile_size=256), _key(arch="sm_100a"), _key(top_k=8), _key(mn_limit=True),
        _key(kernel="grouped_gemm_f32_rows"), _key(variant="no_mma"),
    ]  # fmt: skip
    names = {disk_entry_name(k) for k in variants}
    assert base not in names and len(names) == len(variants)


def test_the_kernel_sources_and_versions_are_part_of_the_name(monkeypatch):
    from stagebot.kernels.cute import compile as compile_module

    base = disk_entry_name(_key())
    compile_module._sources_digest.cache_clear()
    monkeypatch.setattr(compile_module, "KERNEL_SOURCES", ("grouped_gemm.py",))
    assert disk_entry_name(_key()) != base
    compile_module._sources_digest.cache_clear()
    monkeypatch.undo()
    assert disk_entry_name(_key()) == base
    monkeypatch.setattr(compile_module, "_version", lambda name: "9.9")
    assert disk_entry_name(_key()) != base


def test_parts_are_delimited():
    assert entry_name(["ab", "c"]) != entry_name(["a", "bc"])


def test_the_folder_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(disk_cache.ENV, str(tmp_path / "c"))
    assert disk_cache.default_dir() == tmp_path / "c"
    monkeypatch.setenv(disk_cache.ENV, disk_cache.OFF)
    assert disk_cache.default_dir() is None
    monkeypatch.delenv(disk_cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert disk_cache.default_dir() == tmp_path / "stagebot" / "cute"


def test_an_entry_round_trips_and_a_damaged_one_is_dropped(tmp_path):
    cache = DiskCache(tmp_path)
    assert cache.read("x") is None
    cache.write("x", b"payload")
    assert cache.read("x") == b"payload"
    data = bytearray(cache.path("x").read_bytes())
    data[-1] ^= 0xFF  # a torn or corrupted file
    cache.path("x").write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="damaged cache entry"):
        assert cache.read("x") is None
    assert not cache.path("x").exists()


def test_a_failed_write_leaves_no_entry_and_no_temporary(tmp_path, monkeypatch):
    cache = DiskCache(tmp_path)

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        cache.write("x", b"payload")
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_an_unloadable_entry_is_rebuilt(tmp_path):
    cache = DiskCache(tmp_path)
    cache.write("x", b"old format")

    def load(payload: bytes) -> str:
        if payload != b"new":
            raise ValueError("unknown format")
        return "loaded"

    with pytest.warns(UserWarning, match="unloadable"):
        assert cache.get_or_build("x", load, lambda: ("built", b"new")) == ("built", False)
    assert cache.get_or_build("x", load, lambda: ("built again", b"new")) == ("loaded", True)


def _build_in_child(folder: str, name: str, log: str) -> None:
    def build():
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.5)  # a compile: the other processes must wait, not compile too
        return "built", b"kernel"

    obj, loaded = DiskCache(Path(folder)).get_or_build(name, bytes.decode, build)
    assert obj == ("kernel" if loaded else "built")


def test_concurrent_processes_build_an_entry_once(tmp_path):
    log = tmp_path / "builds.log"
    context = multiprocessing.get_context("fork")
    children = [
        context.Process(target=_build_in_child, args=(str(tmp_path / "c"), "k", str(log)))
        for _ in range(4)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=600)  # only stops a hang: the builds take a second
    assert [child.exitcode for child in children] == [0, 0, 0, 0]
    assert len(log.read_text().split()) == 1
    assert DiskCache(tmp_path / "c").read("k") == b"kernel"


@pytest.fixture
def fake_compiler(monkeypatch, tmp_path):
    """compile_kernel with a stand-in compiler and payload format, the cache in tmp_path (the
    kernel classes it looks up still import CuTe DSL)."""
    extras.require("cutlass")
    from stagebot.kernels.cute import compile as compile_module
    from stagebot.kernels.cute import compiled_io

    compiles: list[CompileKey] = []

    def fake_compile(key, keep_ptx):
        compiles.append(key)
        return f"kernel {key.n}"

    monkeypatch.setenv(disk_cache.ENV, str(tmp_path))
    monkeypatch.setattr(compile_module, "_compile", fake_compile)
    monkeypatch.setattr(compiled_io, "dumps", lambda compiled: compiled.encode())
    monkeypatch.setattr(compile_module, "_load", lambda kernel_cls, payload: payload.decode())
    monkeypatch.setattr(compile_module, "_cache", {})
    monkeypatch.setattr(compile_module, "stats", compile_module.Counter())
    return compile_module, compiles


def test_a_new_process_loads_what_another_compiled(fake_compiler):
    compile_module, compiles = fake_compiler
    assert compile_module.compile_kernel(_key()) == "kernel 4096"
    assert compile_module.compile_kernel(_key()) == "kernel 4096"  # the memory cache
    compile_module._cache.clear()  # what a new process starts with
    assert compile_module.compile_kernel(_key()) == "kernel 4096"
    assert compiles == [_key()]
    assert (compile_module.stats["compiled"], compile_module.stats["loaded"]) == (1, 1)
    assert compile_module.compile_kernel(_key(n=2048)) == "kernel 2048"
    assert compiles == [_key(), _key(n=2048)]


def test_keep_ptx_and_an_off_cache_always_compile(fake_compiler, monkeypatch):
    compile_module, compiles = fake_compiler
    compile_module.compile_kernel(_key())
    compile_module.compile_kernel(_key(), keep_ptx=True)
    monkeypatch.setenv(disk_cache.ENV, disk_cache.OFF)
    compile_module._cache.clear()
    compile_module.compile_kernel(_key())
    assert compiles == [_key()] * 3


def test_the_least_recently_used_entries_go_when_the_folder_is_full(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=3 * 1100)  # room for three entries of ~1 kB
    for i, name in enumerate(["a", "b", "c"]):
        cache.write(name, bytes(1000))
        os.utime(cache.path(name), (1000 + i, 1000 + i))  # written in this order
    assert cache.read("a") is not None  # a is used again: b is now the oldest
    cache.write("d", bytes(1000))
    assert sorted(p.name[0] for p in tmp_path.glob(f"*{disk_cache.SUFFIX}")) == ["a", "c", "d"]
    DiskCache(tmp_path, max_bytes=0).write("e", bytes(1000))  # the new entry always stays
    assert [p.name[0] for p in tmp_path.glob(f"*{disk_cache.SUFFIX}")] == ["e"]


def test_a_bad_size_limit_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv(disk_cache.MAX_MB_ENV, "lots")
    with pytest.raises(ValueError, match="STAGEBOT_CUTE_CACHE_MAX_MB='lots': it must be a number"):
        DiskCache(tmp_path)
