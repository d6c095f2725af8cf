"""Maps the repository's code folders to the ``stagebot.<folder>`` namespace.

The top-level folders are the product's design (see ARCHITECTURE.md), but ``kernels``, ``harness``,
``stages`` and ``templates`` are taken on PyPI, so each folder is installed as a sub-package of the
``stagebot`` namespace package, never importable under its bare name. Sub-packages are discovered,
so adding one needs no edit here; so are data-only folders (the stage catalog, the JSON schemas),
as namespace packages, so that a wheel carries their package-data too.
"""

from setuptools import find_namespace_packages, setup

CODE_FOLDERS = ("bot", "stages", "harness", "kernels", "templates")

packages: list[str] = []
package_dir: dict[str, str] = {}
for folder in CODE_FOLDERS:
    packages.append(f"stagebot.{folder}")
    package_dir[f"stagebot.{folder}"] = folder
    found = find_namespace_packages(where=folder, exclude=["*__pycache__*"])
    packages += [f"stagebot.{folder}.{sub}" for sub in found]

setup(packages=packages, package_dir=package_dir)
