"""
Sphinx configuration of the acpkit documentation (MyST Markdown + autodoc).

Build (warnings are errors), with only the docs extra installed
(``python -m pip install '.[docs]'``; CI's "docs only" leg does exactly that)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Everything here works offline: no intersphinx, no theme downloads.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
# The checkout, so that autodoc imports the acpkit being documented (not an installed one).
sys.path.insert(0, _ROOT)

from acpkit import __version__  # noqa: E402

project = "acpkit"
author = "the acpkit authors"
copyright = "2026, the acpkit authors"
release = __version__
version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "examples/README.md", "Thumbs.db", ".DS_Store"]

# MyST: ``:::`` fences for directives, anchors for ``page.md#section`` links, and
# ``{attrs}`` for headings.
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# autodoc: document members in source order, with their type hints in the description.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

nitpicky = False
# Docstrings write `name` (single backticks) for Python names: make them references
# (shown as code even when the target is not documented; nitpicky is off).
default_role = "py:obj"

# No warning is suppressed. The toctrees of index.md list the first pages of each section
# explicitly and end with a glob (``how-to/*``...) that reaches every other page, so a page
# added later is in the site without editing index.md (a glob that matches nothing is a
# warning, hence the lists are kept partial). A page in no toctree is an error (-W).

# Furo: its content column is wide enough for the 100-column code samples (ruff's line
# length), which alabaster's narrow column cut off; it works offline (no downloads).
html_theme = "furo"
html_title = f"acpkit {release}"
html_static_path = ["_static"]
html_css_files = ["wide-code.css"]
