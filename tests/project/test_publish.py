"""
Ready to publish: the version says what ``[Unreleased]`` holds, the README's links work on
the package index's page (absolute, to the documentation site setup.cfg names), the
project URLs are that site only (no placeholder repository), and ``.readthedocs.yaml``
builds the docs as CI does.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import yaml
from packaging.version import Version

from acpkit import __version__

ROOT = Path(__file__).resolve().parent.parent.parent


def _setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def _project_urls() -> dict[str, str]:
    lines = _setup_cfg()["metadata"]["project_urls"].strip().splitlines()
    return dict(tuple(part.strip() for part in line.split("=", 1)) for line in lines)  # type: ignore[misc]


def test_the_version_is_a_development_release_after_the_last_one() -> None:
    """With changes under [Unreleased], the version is a .dev release above the last
    released version in CHANGELOG.md (0.2.0.dev0 after 0.1.0: breaking changes, minor)."""
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.M)
    unreleased = changelog.split("## [Unreleased]", 1)[1].split(f"## [{released[0]}]", 1)[0]
    assert unreleased.strip(), "nothing under [Unreleased]"
    version = Version(__version__)
    assert version.is_devrelease
    assert version > Version(released[0])
    assert __version__ == "0.2.0.dev0"


def test_readme_links_are_absolute_and_docs_links_go_to_the_docs_site() -> None:
    """Every Markdown link of the README is absolute (a relative one is broken on the
    package index's page), and the links into the documentation use setup.cfg's
    Documentation URL."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert targets
    assert [t for t in targets if not t.startswith(("https://", "http://"))] == []
    docs = _project_urls()["Documentation"]
    assert any(t.startswith(docs) and t != docs for t in targets)


def test_project_urls_name_no_placeholder() -> None:
    """The project URLs are the documentation site only (the placeholder repository
    addresses are gone until the project has a public one)."""
    urls = _project_urls()
    assert list(urls) == ["Documentation"]
    assert urls["Documentation"].startswith("https://") and "acpkit/acpkit" not in str(urls)


def test_readthedocs_builds_the_docs_as_ci_does() -> None:
    """``.readthedocs.yaml``: Sphinx on docs/conf.py with warnings as errors, installing
    this project with the ``docs`` extra."""
    config = yaml.safe_load((ROOT / ".readthedocs.yaml").read_text(encoding="utf-8"))
    assert config["version"] == 2
    assert config["sphinx"] == {"configuration": "docs/conf.py", "fail_on_warning": True}
    assert (ROOT / config["sphinx"]["configuration"]).is_file()
    (install,) = config["python"]["install"]
    assert install == {"method": "pip", "path": ".", "extra_requirements": ["docs"]}
    assert "docs" in _setup_cfg()["options.extras_require"]
    assert config["build"]["tools"]["python"] in {"3.11", "3.12", "3.13"}
