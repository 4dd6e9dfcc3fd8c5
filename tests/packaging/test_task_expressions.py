# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""No expression in a role's tasks, handlers, vars or defaults is longer than 300 characters.

Rules live in Python (docs/architecture.md, "Validation is a filter, not an assert chain"): a
long Jinja expression is a rule without unit tests, so the line is held here. An expression is
one `{{ ... }}` (measured with Jinja's own lexer, so nested braces count whole), one
`{% ... %}`, or a bare condition (`when`, `that`, `failed_when`, `changed_when`, `until`)."""

from pathlib import Path

import jinja2
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
LIMIT = 300
FOLDERS = ("tasks", "handlers", "vars", "defaults")
BARE = {"when", "that", "failed_when", "changed_when", "until"}
ENV = jinja2.Environment()
BEGIN = {"variable_begin": "variable_end", "block_begin": "block_end"}


def expressions(text):
    """Each `{{ }}` or `{% %}` of a template, as the text Jinja's lexer reads between the marks."""
    found, current, end = [], None, None
    for _line, kind, value in ENV.lex(text):
        if current is None and kind in BEGIN:
            current, end = [], BEGIN[kind]
        if current is not None:
            current.append(value)
            if kind == end:
                found.append("".join(current))
                current = None
    return found


def strings(node, key=None):
    if isinstance(node, dict):
        for name, value in node.items():
            yield from strings(value, name)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value, key)
    elif isinstance(node, str):
        yield key, node


def role_expressions():
    for path in sorted(REPO.glob("roles/*/*/*.yml")):
        if path.parent.name not in FOLDERS:
            continue
        for key, text in strings(yaml.safe_load(path.read_text())):
            found = expressions(text)
            if key in BARE and not found:
                found = [text]
            for expression in found:
                yield path.relative_to(REPO), key, expression


def test_the_measure_sees_whole_expressions():
    nested = "x {{ {'a': {'b': 1}} | dict2items }} y {% if a %}z{% endif %}"
    assert expressions(nested) == ["{{ {'a': {'b': 1}} | dict2items }}", "{% if a %}", "{% endif %}"]
    assert [len(found[2]) for found in role_expressions()], "no expressions found: the walk is broken"


@pytest.mark.parametrize("role", sorted(path.name for path in REPO.glob("roles/*")))
def test_no_role_expression_is_longer_than_the_limit(role):
    long = [
        f"{path}: {key}: {len(expression)} characters: {expression[:120]}..."
        for path, key, expression in role_expressions()
        if path.parts[1] == role and len(expression) > LIMIT
    ]
    assert not long, "move the rule into Python (role_problems, module_utils):\n" + "\n".join(long)
