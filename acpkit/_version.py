"""The version of acpkit, kept in one place."""

# A development version of the next minor release: [Unreleased] in CHANGELOG.md holds
# breaking changes since 0.1.0 (PEP 440: 0.2.0.dev0 sorts before 0.2.0).
__version__ = "0.2.0.dev0"
