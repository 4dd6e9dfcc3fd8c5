"""Validation patterns anchor their end with \\Z, not $.

In Python's re, `$` also matches just before a final newline: `'abc\\n' is match('^[a-z]+$')` is
true, so a value with a trailing newline passed such a check and reached a unit, a sources file
or a rule as an extra line. Every `match`/`search`/`regex` test in the roles' tasks, and every
pattern of the roles' rules in Python (module_utils/_*_rules.py and _render.py, the one
validation helper), therefore ends with \\Z (or is used with fullmatch), so that no value can
inject a line into a rendered file.
"""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# `x is match('...')`, `select('match', '...')` and friends, and the pattern variables the tasks
# pass to them.
JINJA_TEST = re.compile(
    r"is (?:not )?(?:match|search|regex)\('(?P<pattern>[^']*)'\)"
    r"|'(?:match|search|regex)', '(?P<filter>[^']*)'"
    r"|^\s+__\w+: '(?P<variable>\^[^']*)'$"
)


def jinja_patterns():
    for path in sorted(REPO.glob("roles/*/tasks/*.yml")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for found in JINJA_TEST.finditer(line):
                pattern = found.group("pattern") or found.group("filter") or found.group("variable")
                yield f"{path.relative_to(REPO)}:{number}", pattern


def python_patterns():
    """(where, pattern) of each literal pattern the rules modules hand to re.compile, match or search."""
    paths = [*sorted(REPO.glob("plugins/module_utils/_*_rules.py")), REPO / "plugins" / "module_utils" / "_render.py"]
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and getattr(node.func.value, "id", None) == "re"
                and node.func.attr in ("compile", "match", "search")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                yield f"{path.relative_to(REPO)}:{node.lineno}", node.args[0].value


def test_the_scan_finds_the_roles_checks():
    # Guards the test itself: a regex that matched nothing would pass vacuously. Most rules are
    # Python now; the tasks keep the checks of what a host holds.
    assert len(list(jinja_patterns())) >= 10
    assert len(list(python_patterns())) >= 10


def test_no_rule_pattern_ends_with_dollar():
    dollar = [f"{where}: {pattern}" for where, pattern in python_patterns() if re.search(r"\$(\||\)*$)", pattern)]
    assert dollar == [], "anchor with \\Z instead of $:\n" + "\n".join(dollar)


def test_no_task_pattern_ends_with_dollar():
    # A '$' before '|' ends one alternative; '\\.netdev$' (a file name filter) is the one kind left.
    dollar = [
        f"{where}: {pattern}"
        for where, pattern in jinja_patterns()
        if re.search(r"\$(\||$)", pattern) and not pattern.endswith("netdev$")
    ]
    assert dollar == [], "anchor with \\Z instead of $:\n" + "\n".join(dollar)


def test_backslash_z_refuses_what_dollar_lets_through():
    assert re.match(r"^[a-z]+$", "abc\n")
    assert not re.match(r"^[a-z]+\Z", "abc\n")
