"""Packages are found, not listed: every package under reportdb/, plus the top-level migrations/ folder shipped
as reportdb.migrations (its package-dir mapping is in pyproject.toml)."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["reportdb", "reportdb.*"]), "reportdb.migrations"])
