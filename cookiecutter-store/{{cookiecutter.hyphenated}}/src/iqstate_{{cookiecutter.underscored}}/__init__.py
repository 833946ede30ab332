"""iqstate-{{ cookiecutter.hyphenated }}: {{ cookiecutter.description }}.

`{{ cookiecutter.class_prefix }}Store` and `{{ cookiecutter.class_prefix }}WindowStore` are imported on first use, so importing the package costs no more
than its plugin.
"""

from typing import TYPE_CHECKING

from iqstate.lazy import lazy_exports
from iqstate_{{ cookiecutter.underscored }}.plugin import ENGINE
from iqstate_{{ cookiecutter.underscored }}.query import EntryCountQuery

if TYPE_CHECKING:
    from iqstate_{{ cookiecutter.underscored }}.store import {{ cookiecutter.class_prefix }}Store, {{ cookiecutter.class_prefix }}WindowStore

__all__ = ["ENGINE", "EntryCountQuery", "{{ cookiecutter.class_prefix }}Store", "{{ cookiecutter.class_prefix }}WindowStore"]

__getattr__, __dir__ = lazy_exports(
    __name__, {"iqstate_{{ cookiecutter.underscored }}.store": ["{{ cookiecutter.class_prefix }}Store", "{{ cookiecutter.class_prefix }}WindowStore"]}
)
