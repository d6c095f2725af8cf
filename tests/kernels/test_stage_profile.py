"""kernels/cute/stage_profile.py on the CPU: a real cProfile file and a shard's tests.jsonl."""

from __future__ import annotations

import cProfile
import json
import subprocess
import time

from stagebot.kernels.cute import stage_profile


def _stream(folder, records) -> None:
    folder.mkdir(parents=True)
    (folder / "tests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_it_names_the_subprocess_wait_and_the_slowest_tests(tmp_path, capsys) -> None:
    profile = tmp_path / "run.prof"
    cProfile.runctx(
        "subprocess.run(['sleep', '0.5'])", {"subprocess": subprocess}, {}, str(profile)
    )
    _stream(
        tmp_path / "out" / "STAGE-1",
        [
            {"event": "start", "time": 100.0, "test_id": "t.py::test_a[1]"},
            {"event": "result", "phase": "call", "test_id": "t.py::test_a[1]", "duration_s": 2.0},
            {"event": "result", "phase": "call", "test_id": "t.py::test_a[2]", "duration_s": 1.0},
            {"event": "result", "phase": "collect", "test_id": "t.py", "duration_s": 9.0},
            {"event": "result", "phase": "call", "test_id": "t.py::test_b", "duration_s": 0.5},
            {"event": "session_end", "time": 104.5},
        ],
    )
    assert stage_profile.main([str(profile), str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "subprocess.py" in out  # the wait, at least a third of a second
    assert "STAGE-1: first test to session end 4.5 s, 3 tests, their own durations 3.5 s" in out
    assert "     3.00 s     2 x  t.py::test_a" in out  # a function's cases summed, collection not
    assert out.index("slowest: t.py::test_a[1]") < out.index("slowest: t.py::test_b")


def test_a_folder_without_a_session_says_so(tmp_path) -> None:
    _stream(tmp_path / "out" / "STAGE-1", [{"event": "start", "time": time.time()}])
    assert stage_profile.session_lines(tmp_path / "out") == [
        f"{tmp_path / 'out' / 'STAGE-1' / 'tests.jsonl'}: no session"
    ]


def test_wrong_arguments_print_the_usage_and_exit_2(capsys) -> None:
    assert stage_profile.main(["only-one"]) == 2
    assert "stage_profile PROFILE RUN_FOLDER" in capsys.readouterr().err
