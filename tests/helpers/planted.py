# ruff: noqa: E501 - the sample repository's files are written out as they read
"""A sample repository for planted regressions against reuse by key
(tests/harness/reuse/test_planted_regressions.py; tests/bench/adopted_reuse.py --sample): a
package ``shop`` whose modules reach their inputs every way issue 46 lists (package resources,
bare-name and aliased calls, native libraries, paths named by configuration files, an env file
named in pyproject.toml, files opened by computed paths), one test file per way, and a root
conftest that loads ``.env`` with ``os.environ.setdefault`` (the common env-file pattern, which
must not switch reuse off).

Each ``Kind`` is a one-input change that makes exactly its test fail."""

from __future__ import annotations

import _bisect
import _heapq
import importlib.machinery
from dataclasses import dataclass, field
from pathlib import Path

from helpers.files import write_tree

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
LIBM = next(
    (
        p
        for p in map(Path, ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib64/libm.so.6"))
        if p.is_file()
    ),
    None,
)

TREE: dict[str, str] = {
    "pyproject.toml": (
        '[project]\nname = "shop"\nversion = "0.1"\n\n'
        '[tool.pytest.ini_options]\naddopts = "-p no:cacheprovider"\n\n'
        '[tool.shop]\nenv_file = "config/test.env"\n'
    ),
    ".env": "SHOP_CURRENCY=EUR\nSHOP_COUNTRY=DE\n",
    "conftest.py": (
        "import os\nfrom pathlib import Path\n\n"
        'pytest_plugins = ["shop.testing"]\n\n\n'
        "def _pairs(text):\n    for line in text.splitlines():\n"
        '        if "=" in line and not line.startswith("#"):\n'
        '            yield line.split("=", 1)\n\n\n'
        'for key, value in _pairs((Path(__file__).parent / ".env").read_text()):\n'
        "    os.environ.setdefault(key.strip(), value.strip())\n"
    ),
    "README.md": "# shop\n",
    "docs/guide.md": "How to shop.\n",
    "shop/__init__.py": "",
    "shop/testing.py": "import pytest\n\n\n@pytest.fixture\ndef unit():\n    return 'kg'\n",
    # 1: importlib.resources.files by its bare name, a resource in a sub-package
    "shop/tables.py": (
        "import json\nfrom importlib.resources import files\n\n\n"
        'def rate():\n    return json.loads(files("shop.data").joinpath("rates.json").read_text())["eur"]\n'
    ),
    "shop/data/__init__.py": "",
    "shop/data/rates.json": '{"eur": 2}\n',
    # 2: pkgutil.get_data of another package
    "shop/coeffs.py": (
        "import pkgutil\n\n\n"
        'def coeffs():\n    return pkgutil.get_data("shop.sub", "coeffs.txt").decode().split()\n'
    ),
    "shop/sub/__init__.py": "",
    "shop/sub/coeffs.txt": "1 2 3\n",
    # 3: import_module by its bare name, of a computed name
    "shop/engine.py": (
        "from importlib import import_module\n\n\n"
        'def speed(name="fast"):\n    return import_module(f"shop.backends.{name}").SPEED\n'
    ),
    "shop/backends/__init__.py": "",
    "shop/backends/fast.py": "SPEED = 1\n",
    # 4: subprocess.run by its bare name, running a repository script
    "shop/report.py": (
        "import sys\nfrom subprocess import run\n\n\n"
        "def summary():\n"
        '    done = run([sys.executable, "tools/summary.py"], capture_output=True, text=True)\n'
        "    return done.stdout.strip()\n"
    ),
    "tools/summary.py": 'from summary_width import WIDTH\n\nprint("=" * WIDTH)\n',
    "tools/summary_width.py": "WIDTH = 3\n",
    # 5: os.getenv by its bare name
    "shop/mode.py": 'from os import getenv\n\n\ndef mode():\n    return getenv("SHOP_MODE", "plain")\n',
    # 6: a native extension module beside the package (written by ``build``)
    "shop/search.py": (
        "def position(values, x):\n    from shop import _bisect\n\n"
        "    return _bisect.bisect_left(values, x)\n"
    ),
    # 7: a data path read from a configuration file
    "shop/prices.py": (
        "import configparser\nfrom pathlib import Path\n\n"
        "ROOT = Path(__file__).resolve().parents[1]\n\n\n"
        "def price():\n    settings = configparser.ConfigParser()\n"
        '    settings.read(Path(__file__).with_name("settings.ini"))\n'
        '    return (ROOT / settings["data"]["prices"]).read_text().split(",")[0]\n'
    ),
    "shop/settings.ini": "[data]\nprices = fixtures/prices.csv\n",
    "fixtures/prices.csv": "10,20\n",
    # 8: an env file named only in pyproject.toml's tool table
    "tests/envfile/conftest.py": (
        "import os\nimport tomllib\nfrom pathlib import Path\n\n"
        "ROOT = Path(__file__).resolve().parents[2]\n"
        'settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["shop"]\n'
        'for line in (ROOT / settings["env_file"]).read_text().splitlines():\n'
        '    name, _, value = line.partition("=")\n    os.environ[name] = value\n'
    ),
    "config/test.env": "SHOP_GREETING=hello\n",
    "shop/greet.py": 'import os\n\n\ndef greeting():\n    return os.environ["SHOP_GREETING"]\n',
    # 9: subprocess through an alias, running a repository script
    "shop/audit.py": (
        "import subprocess as sp\nimport sys\n\n\n"
        "def audit():\n"
        '    done = sp.run([sys.executable, "tools/audit.py"], capture_output=True, text=True)\n'
        "    return done.stdout.strip()\n"
    ),
    "tools/audit.py": "from audit_rules import LIMIT\n\nprint(LIMIT)\n",
    "tools/audit_rules.py": "LIMIT = 5\n",
    # 10: import_module bound to another name
    "shop/plugins.py": (
        "import importlib\n\nload = importlib.import_module\n\n\n"
        'def plugin_value(name="alpha"):\n    return load("shop.extras." + name).VALUE\n'
    ),
    "shop/extras/__init__.py": "",
    "shop/extras/alpha.py": 'VALUE = "a"\n',
    # 11: os.environ by its bare name
    "shop/level.py": (
        'from os import environ\n\n\ndef level():\n    return environ.get("SHOP_LEVEL", "1")\n'
    ),
    # 12: importlib.resources through an alias, an attribute of it
    "shop/motd.py": (
        "import importlib.resources as ir\n\n\n"
        'def motd():\n    return ir.files("shop.assets").joinpath("motd.txt").read_text().strip()\n'
    ),
    "shop/assets/__init__.py": "",
    "shop/assets/motd.txt": "welcome\n",
    # 13: ctypes loading a library by a computed path
    "shop/mathlib.py": (
        "import ctypes\nfrom pathlib import Path\n\n"
        'FOLDER = Path(__file__).resolve().parents[1] / ("nat" + "ive")\n\n\n'
        "def cosine(x):\n"
        '    library = ctypes.CDLL(str(next(FOLDER.glob("libm*"))))\n'
        "    library.cos.restype = ctypes.c_double\n"
        "    return library.cos(ctypes.c_double(x))\n"
    ),
    # 14: a module imported through another
    "shop/pricing.py": "from shop.tax import RATE\n\n\ndef gross(net):\n    return net * (100 + RATE) // 100\n",
    "shop/tax.py": "RATE = 20\n",
    # 15: a data file a literal names
    "shop/catalog.py": (
        "from pathlib import Path\n\n\n"
        'def items():\n    return Path("data/catalog.txt").read_text().split()\n'
    ),
    "data/catalog.txt": "apple pear\n",
    # 16: a conftest fixture
    "tests/withfixture/conftest.py": "import pytest\n\n\n@pytest.fixture\ndef answer():\n    return 42\n",
    # 18: python -c with literal code
    "shop/child.py": (
        "import subprocess\nimport sys\n\n"
        'CODE = "from shop.child_lib import N; print(N)"\n\n\n'
        "def child():\n"
        '    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)\n'
        "    return done.stdout.strip()\n"
    ),
    "shop/child_lib.py": "N = 7\n",
    # 19: a file the test opens by a computed path
    "resources/value.txt": "1\n",
    # 20: open through an alias of io.open, a computed path
    "shop/labels.py": (
        "from io import open as io_open\n\n\n"
        'def label(name="label"):\n    with io_open("lab" + "els/" + name + ".txt") as f:\n'
        "        return f.read().strip()\n"
    ),
    "labels/label.txt": "fresh\n",
    # 21: os.getenv through its module
    "shop/region.py": 'import os\n\n\ndef region():\n    return os.getenv("SHOP_REGION", "eu")\n',
    # 22: python -m of a repository module
    "shop/tool.py": 'from shop.tool_lib import NAME\n\nif __name__ == "__main__":\n    print(NAME)\n',
    "shop/tool_lib.py": 'NAME = "hammer"\n',
    "shop/toolrun.py": (
        "import subprocess\nimport sys\n\n\n"
        "def tool():\n"
        '    done = subprocess.run([sys.executable, "-m", "shop.tool"], capture_output=True, text=True)\n'
        "    return done.stdout.strip()\n"
    ),
    # 23: a file beside a module that locates itself
    "shop/factor.py": (
        "from pathlib import Path\n\n\n"
        'def factor():\n    return int(Path(__file__).with_name("factor.txt").read_text())\n'
    ),
    "shop/factor.txt": "3\n",
}

TESTS: dict[str, str] = {
    "tests/test_tables.py": "from shop.tables import rate\n\n\ndef test_rate():\n    assert rate() == 2\n",
    "tests/test_coeffs.py": (
        'from shop.coeffs import coeffs\n\n\ndef test_coeffs():\n    assert coeffs() == ["1", "2", "3"]\n'
    ),
    "tests/test_engine.py": "from shop.engine import speed\n\n\ndef test_speed():\n    assert speed() == 1\n",
    "tests/test_report.py": (
        'from shop.report import summary\n\n\ndef test_summary():\n    assert summary() == "==="\n'
    ),
    "tests/test_mode.py": 'from shop.mode import mode\n\n\ndef test_mode():\n    assert mode() == "plain"\n',
    "tests/test_search.py": (
        "from shop.search import position\n\n\ndef test_position():\n"
        "    assert position([1, 3, 5], 4) == 2\n"
    ),
    "tests/test_prices.py": 'from shop.prices import price\n\n\ndef test_price():\n    assert price() == "10"\n',
    "tests/envfile/test_greet.py": (
        'from shop.greet import greeting\n\n\ndef test_greeting():\n    assert greeting() == "hello"\n'
    ),
    "tests/test_audit.py": 'from shop.audit import audit\n\n\ndef test_audit():\n    assert audit() == "5"\n',
    "tests/test_plugins.py": (
        "from shop.plugins import plugin_value\n\n\n"
        'def test_plugin_value():\n    assert plugin_value() == "a"\n'
    ),
    "tests/test_level.py": 'from shop.level import level\n\n\ndef test_level():\n    assert level() == "1"\n',
    "tests/test_motd.py": 'from shop.motd import motd\n\n\ndef test_motd():\n    assert motd() == "welcome"\n',
    "tests/test_mathlib.py": (
        "from shop.mathlib import cosine\n\n\ndef test_cosine():\n    assert cosine(0.0) == 1.0\n"
    ),
    "tests/test_pricing.py": (
        "from shop.pricing import gross\n\n\ndef test_gross():\n    assert gross(100) == 120\n"
    ),
    "tests/test_catalog.py": (
        'from shop.catalog import items\n\n\ndef test_items():\n    assert items() == ["apple", "pear"]\n'
    ),
    "tests/withfixture/test_answer.py": "def test_answer(answer):\n    assert answer == 42\n",
    "tests/test_unit.py": 'def test_unit(unit):\n    assert unit == "kg"\n',
    "tests/test_child.py": 'from shop.child import child\n\n\ndef test_child():\n    assert child() == "7"\n',
    "tests/test_computed_open.py": (
        "from pathlib import Path\n\n"
        'FOLDER = "res" + "ources"  # no literal names the file\n\n\n'
        "def test_value():\n"
        '    assert (Path(__file__).parents[1] / FOLDER / "value.txt").read_text() == "1\\n"\n'
    ),
    "tests/test_labels.py": 'from shop.labels import label\n\n\ndef test_label():\n    assert label() == "fresh"\n',
    "tests/test_region.py": 'from shop.region import region\n\n\ndef test_region():\n    assert region() == "eu"\n',
    "tests/test_tool.py": 'from shop.toolrun import tool\n\n\ndef test_tool():\n    assert tool() == "hammer"\n',
    "tests/test_factor.py": "from shop.factor import factor\n\n\ndef test_factor():\n    assert factor() == 3\n",
    "tests/test_currency.py": (
        'import os\n\n\ndef test_currency():\n    assert os.environ["SHOP_CURRENCY"] == "EUR"\n'
    ),
}


@dataclass(frozen=True)
class Kind:
    """One planted regression: new contents for some files (bytes copied from ``copy``), or
    variables set for the run; ``test`` is the test id it makes fail."""

    name: str
    test: str
    write: dict[str, str] = field(default_factory=dict)
    copy: dict[str, Path] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    issue: bool = False  # one of the eight kinds issue 46 found escaping

    def apply(self, root: Path) -> dict[str, str]:
        """Plant it in the repository at ``root``; returns the variables the run needs."""
        for name, text in self.write.items():
            (root / name).write_text(text)
        for name, source in self.copy.items():
            (root / name).write_bytes(source.read_bytes())
        return dict(self.env)


KINDS = [
    Kind("package data read by importlib.resources.files", "tests/test_tables.py::test_rate",
         {"shop/data/rates.json": '{"eur": 3}\n'}, issue=True),
    Kind("package data read by pkgutil.get_data", "tests/test_coeffs.py::test_coeffs",
         {"shop/sub/coeffs.txt": "1 2 4\n"}, issue=True),
    Kind("a backend imported by import_module by its bare name", "tests/test_engine.py::test_speed",
         {"shop/backends/fast.py": "SPEED = 2\n"}, issue=True),
    Kind("a script run by run() by its bare name: its own import",
         "tests/test_report.py::test_summary", {"tools/summary_width.py": "WIDTH = 4\n"},
         issue=True),
    Kind("a variable read by getenv by its bare name", "tests/test_mode.py::test_mode",
         env={"SHOP_MODE": "fancy"}, issue=True),
    Kind("a native extension beside the package replaced", "tests/test_search.py::test_position",
         copy={f"shop/_bisect{SUFFIX}": Path(_heapq.__file__)}, issue=True),
    Kind("a data path read from a configuration file", "tests/test_prices.py::test_price",
         {"fixtures/prices.csv": "11,20\n"}, issue=True),
    Kind("an env file named only in pyproject.toml's tool table",
         "tests/envfile/test_greet.py::test_greeting", {"config/test.env": "SHOP_GREETING=hi\n"},
         issue=True),
    Kind("a script run by an alias of subprocess: its own import",
         "tests/test_audit.py::test_audit", {"tools/audit_rules.py": "LIMIT = 6\n"}),
    Kind("a module imported by import_module bound to another name",
         "tests/test_plugins.py::test_plugin_value", {"shop/extras/alpha.py": 'VALUE = "b"\n'}),
    Kind("a variable read by environ by its bare name", "tests/test_level.py::test_level",
         env={"SHOP_LEVEL": "2"}),
    Kind("package data read by an attribute of an alias of importlib.resources",
         "tests/test_motd.py::test_motd", {"shop/assets/motd.txt": "goodbye\n"}),
    Kind("a library loaded by ctypes by a computed path replaced",
         "tests/test_mathlib.py::test_cosine", copy={"native/libm.so.6": Path(_heapq.__file__)}),
    Kind("a module imported through another", "tests/test_pricing.py::test_gross",
         {"shop/tax.py": "RATE = 21\n"}),
    Kind("a data file a literal names", "tests/test_catalog.py::test_items",
         {"data/catalog.txt": "apple plum\n"}),
    Kind("a fixture of a folder's conftest", "tests/withfixture/test_answer.py::test_answer",
         {"tests/withfixture/conftest.py": TREE["tests/withfixture/conftest.py"].replace("42", "43")}),
    Kind("a plugin the root conftest names in pytest_plugins", "tests/test_unit.py::test_unit",
         {"shop/testing.py": TREE["shop/testing.py"].replace("'kg'", "'lb'")}),
    Kind("a module a python -c child imports", "tests/test_child.py::test_child",
         {"shop/child_lib.py": "N = 8\n"}),
    Kind("a file the test opens by a computed path", "tests/test_computed_open.py::test_value",
         {"resources/value.txt": "2\n"}),
    Kind("a file opened through an alias of io.open by a computed path",
         "tests/test_labels.py::test_label", {"labels/label.txt": "stale\n"}),
    Kind("a variable read by os.getenv", "tests/test_region.py::test_region",
         env={"SHOP_REGION": "us"}),
    Kind("a module a python -m child imports", "tests/test_tool.py::test_tool",
         {"shop/tool_lib.py": 'NAME = "saw"\n'}),
    Kind("a file beside a module that locates itself", "tests/test_factor.py::test_factor",
         {"shop/factor.txt": "4\n"}),
    Kind("a value in the env file the root conftest loads", "tests/test_currency.py::test_currency",
         {".env": "SHOP_CURRENCY=USD\nSHOP_COUNTRY=DE\n"}),
]  # fmt: skip

CATALOG = """
gpu_types:
  CPU: {device_names: [], runner_labels: [ubuntu-latest]}
families:
  - name: CPU-PyTorch
    kind: test
    timeout_minutes: 10
    suites: [{path: tests}]
"""


def build(root: Path) -> Path:
    """The sample repository at ``root`` (its catalog beside it, ``catalog.yaml``)."""
    if LIBM is None:
        raise RuntimeError("no libm.so.6 in /lib/x86_64-linux-gnu or /usr/lib64 to copy")
    write_tree(root, {**TREE, **TESTS})
    (root / "native").mkdir()
    (root / f"shop/_bisect{SUFFIX}").write_bytes(Path(_bisect.__file__).read_bytes())
    (root / "native/libm.so.6").write_bytes(LIBM.read_bytes())
    (root.parent / "catalog.yaml").write_text(CATALOG)
    return root
