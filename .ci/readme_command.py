"""Prints one of the README's two quick-start commands (`main` or `test`): the bash blocks of its
"Quick start" section, in that order. .ci/run runs the test command exactly as written."""

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def quick_start_commands() -> dict[str, str]:
    section = README.read_text(encoding="utf-8").split("## Quick start")[1].split("\n## ")[0]
    blocks = re.findall(r"^```bash\n(.*?)\n```$", section, re.M | re.S)
    return dict(zip(("main", "test"), blocks, strict=True))


if __name__ == "__main__":
    print(quick_start_commands()[sys.argv[1]])
