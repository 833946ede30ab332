"""iqstate-{{ cookiecutter.hyphenated }}: {{ cookiecutter.description }}."""

from iqstate_{{ cookiecutter.underscored }}.plugin import ENGINE
from iqstate_{{ cookiecutter.underscored }}.query import EntryCountQuery
from iqstate_{{ cookiecutter.underscored }}.store import {{ cookiecutter.class_prefix }}Store

__all__ = ["ENGINE", "EntryCountQuery", "{{ cookiecutter.class_prefix }}Store"]
