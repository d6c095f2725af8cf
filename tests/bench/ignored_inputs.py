"""Each planted regression must catch a key that ignores its input: plant one such bug at a time
in harness/reuse/dependency_key.py or harness/reuse/import_graph.py, run
tests/harness/reuse/test_dependency_key.py, and report how many of its tests fail (0 would mean that
input is not guarded by any test).

Run from the repository root (about 3 minutes on two cores; each file is restored afterwards):
    python tests/bench/ignored_inputs.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
F = ROOT / "harness" / "reuse" / "dependency_key.py"
G = ROOT / "harness" / "reuse" / "import_graph.py"
# the input ignored -> (file, the code that reads it, the code that ignores it)
MUTANTS = {
    "imports ignored (closure = start files)": (
        G,
        "        for name in facts(root, todo.pop()).imports:",
        "        for name in facts(root, todo.pop()).imports[:0]:",
    ),
    "data files ignored": (
        F,
        "    return set().union(*(repo.data_files(module) for module in code))",
        "    return set()",
    ),
    "beside files ignored": (
        F,
        "            if not facts.locates_itself:",
        "            if True:",
    ),
    "literal-named data ignored": (
        F,
        "            for literal in facts.literals:",
        "            for literal in ():",
    ),
    "conftests ignored": (
        F,
        '    return [str(PurePosixPath(f, "conftest.py")) for f in (folder, *folder.parents)]',
        "    return []",
    ),
    "pytest config and plugins ignored": (
        F,
        "    found = [name for name in PYTEST_CONFIGS if name in repo.present]\n    if",
        "    return []\n    found = []\n    if",
    ),
    "distributions ignored": (
        F,
        '"distributions": [f"{name}=={version}" for name, version in self.distributions],',
        '"distributions": [],',
    ),
    "python ignored": (F, '"python": self.python,', '"python": "",'),
    "variables ignored": (
        F,
        '"variables": {name: self.variables.get(name, UNSET) for name in sorted(set(read))},',
        '"variables": {},',
    ),
    "suite args ignored": (
        F,
        '"suite_args": family.suite_args,',
        '"suite_args": _digest([]),',
    ),
    "catalog entry ignored": (
        F,
        '"catalog": _digest(catalog_entry),',
        '"catalog": _digest(catalog_entry["waives"]),',
    ),
    "waives ignored": (
        F,
        "if waive_matches(test_id, pattern)",
        "        if False",
    ),
    "gpu ignored": (
        F,
        '"gpu": _digest([environment.gpu_type, environment.gpu_driver]),',
        '"gpu": _digest([]),',
    ),
    "test id ignored": (F, '"test": _digest([test_id, family.name]),', '"test": _digest([]),'),
    "blind files not conservative": (
        F,
        "chosen = repo.files if blind else",
        "chosen = repo.files if False else",
    ),
    "launcher calls not checked": (
        G,
        "            if name in launchers and not outside",
        "            if False",
    ),
    "computed env names not blind": (
        G,
        '            self._blind(at, "an environment variable read by a computed name")',
        "            pass",
    ),
    "python -c code's imports ignored": (
        G,
        "            self.imports += child.imports\n",
        "",
    ),
    "python -m module ignored": (G, "            self.imports += values\n", ""),
    "non-literal bindings of a name ignored": (
        G,
        "for name, found in values.items() if name not in other",
        "for name, found in values.items()",
    ),
    "importer calls not checked": (
        G,
        "                if name == importer and position not in conftests",
        "                if False",
    ),
    "configuration comments read as values": (
        F,
        '    text = _COMMENT_LINE.sub("", text)  # a comment is never a value code reads',
        "    pass",
    ),
    "a package's plug-ins not expanded": (
        G,
        "    if name.endswith(SUBMODULES):",
        "    if False:",
    ),
}


def main() -> int:
    caught = 0
    for name, (path, old, new) in MUTANTS.items():
        text = path.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"{name}: the code to replace is not in {path.name} exactly once")
        path.write_text(text.replace(old, new))
        try:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "tests/harness/reuse/test_dependency_key.py",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
            ).stdout
        finally:
            path.write_text(text)
        summary = out.strip().splitlines()[-1] if out.strip() else "no output"
        caught += "failed" in summary
        print(f"{name:42s} {summary}")
    print(f"{caught} of {len(MUTANTS)} ignored inputs caught")
    return 0 if caught == len(MUTANTS) else 1


if __name__ == "__main__":
    sys.exit(main())
