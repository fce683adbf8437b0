"""Tests of the project as a whole: docs, README, packaging, public names, the test rules."""
