"""The docs site: antsibull-docs and Sphinx render every module, plugin and role, and Chromium shows each page.

scripts/docs_site.py builds build/docs-site (its tools in build/docs-venv, reused while
requirements-docs.txt is unchanged) and loads every page in one headless Chromium with no network.
What the pages show is compared with what plugins/ and roles/ declare (docs/docs-site.md).
"""

import ast
import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urldefrag

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "docs_site.py"
SITE = REPO / "build" / "docs-site"
COLLECTION_DIR = "collections/gpufleet/inference"
# plugins/ folders that hold no plugin of their own, so no page.
# An action plugin is documented on the page of its module (modules/<name>.py).
NOT_PLUGINS = {"module_utils", "plugin_utils", "doc_fragments", "modules", "action"}
# Filter and test files map plugin names to functions; the page is per name, not per file.
MAPPING_CLASSES = {"filter": "FilterModule", "test": "TestModule"}
# antsibull-docs writes "--" between a name and its short_description; Sphinx typesets it as an en dash.
DASH = "\u2013"


def script(*args: str) -> str:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False, cwd=REPO)
    assert proc.returncode == 0, f"docs_site.py {' '.join(args)} failed:\n{proc.stdout[-6000:]}{proc.stderr[-6000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    script("build")
    out = tmp_path_factory.mktemp("docs-site") / "pages.json"
    script("render", "--json", str(out))
    return json.loads(out.read_text())


def page_url(relative: str) -> str:
    return (SITE / relative).as_uri()


def documentation(path: Path) -> dict:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DOCUMENTATION" for t in node.targets):
            return yaml.safe_load(node.value.value)
    return {}


def mapped_names(path: Path, class_name: str) -> list[str]:
    """The keys of FilterModule.filters() / TestModule.tests(): each is a plugin with a page."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Return) and isinstance(inner.value, ast.Dict):
                    names += [key.value for key in inner.value.keys if isinstance(key, ast.Constant)]
    return names


def modules() -> dict[str, str]:
    """Module name -> its short_description."""
    found = {}
    for path in sorted((REPO / "plugins" / "modules").glob("*.py")):
        if not path.name.startswith("_"):
            found[path.stem] = documentation(path).get("short_description", "")
    return found


def plugins() -> list[tuple[str, str]]:
    """(plugin type, name) of every plugin that is not a module."""
    found = []
    for folder in sorted(p for p in (REPO / "plugins").iterdir() if p.is_dir() and p.name not in NOT_PLUGINS):
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            if folder.name in MAPPING_CLASSES:
                found += [(folder.name, name) for name in mapped_names(path, MAPPING_CLASSES[folder.name])]
            else:
                found.append((folder.name, path.stem))
    return found


def roles() -> dict[str, dict]:
    """Role name -> its entry points (argument_specs), {} when the role has no meta/argument_specs.yml."""
    found = {}
    for role in sorted(p for p in (REPO / "roles").iterdir() if p.is_dir()):
        specs = role / "meta" / "argument_specs.yml"
        found[role.name] = yaml.safe_load(specs.read_text())["argument_specs"] if specs.is_file() else {}
    return found


def expected_pages() -> list[str]:
    names = [f"{name}_module" for name in modules()]
    names += [f"{name}_{kind}" for kind, name in plugins()]
    names += [f"{name}_role" for name in roles()]
    return [f"{COLLECTION_DIR}/{name}.html" for name in names]


def test_the_collection_has_something_to_document():
    # Guards the expectations below against an empty glob after a move of plugins/ or roles/.
    assert len(modules()) >= 10
    assert ("filter", "nccl_env") in plugins()
    assert ("inventory", "topology") in plugins()
    assert "main" in roles()["vllm"]


def test_every_page_loads_from_files_only(pages):
    problems = []
    for name, page in sorted(pages.items()):
        if page["error"]:
            problems.append(f"{name}: {page['error']}")
            continue
        outside = [url for url in page["requests"] if not url.startswith(("file:", "data:"))]
        if outside:
            problems.append(f"{name} requests {outside}")
        if page["failed"]:
            problems.append(f"{name}: failed to load {page['failed']}")
    assert not problems, "\n".join(problems)


def test_every_module_has_its_page_with_name_and_short_description(pages):
    problems = []
    for name, short_description in modules().items():
        page = pages.get(f"{COLLECTION_DIR}/{name}_module.html")
        heading = f"gpufleet.inference.{name} module {DASH} {short_description}"
        if page is None:
            problems.append(f"{name}: no page")
        elif page["h1"] != [heading] or not page["title"].startswith(heading):
            problems.append(f"{name}: expected heading {heading!r}, Chromium shows {page['h1']} ({page['title']!r})")
    assert not problems, "\n".join(problems)


def test_every_other_plugin_has_its_page(pages):
    problems = []
    for kind, name in plugins():
        page = pages.get(f"{COLLECTION_DIR}/{name}_{kind}.html")
        heading = f"gpufleet.inference.{name} {kind}"
        if page is None:
            problems.append(f"{kind} {name}: no page")
        elif len(page["h1"]) != 1 or not page["h1"][0].startswith(heading):
            problems.append(f"{kind} {name}: expected a heading {heading!r}..., Chromium shows {page['h1']}")
    assert not problems, "\n".join(problems)


def test_no_private_plugin_has_a_page(pages):
    # Role internals (names starting with "_") are not public API: the published docs leave them out.
    private = [path.stem for path in (REPO / "plugins").glob("*/_*.py") if path.parent.name not in NOT_PLUGINS]
    assert private, "no private plugin: drop this test or the rule in docs/architecture.md"
    shown = [name for name in pages if name.startswith(f"{COLLECTION_DIR}/_")]
    assert not shown, f"pages of private plugins: {shown}"


def test_every_role_has_its_page_listing_its_entry_points(pages):
    problems = []
    for role, entry_points in roles().items():
        page = pages.get(f"{COLLECTION_DIR}/{role}_role.html")
        if not entry_points:
            problems.append(f"{role}: no meta/argument_specs.yml, so no role page")
            continue
        if page is None:
            problems.append(f"{role}: no page")
            continue
        if len(page["h1"]) != 1 or not page["h1"][0].startswith(f"gpufleet.inference.{role} role"):
            problems.append(f"{role}: Chromium shows the heading {page['h1']}")
        for entry_point, spec in entry_points.items():
            heading = f"Entry point {entry_point}"
            if spec.get("short_description"):
                heading += f" {DASH} {spec['short_description']}"
            if heading not in page["h2"]:
                problems.append(f"{role}: no section {heading!r}; sections shown: {page['h2']}")
    assert not problems, "\n".join(problems)


def test_the_collection_index_links_every_page(pages):
    index = pages.get(f"{COLLECTION_DIR}/index.html")
    assert index is not None, "no collection index page"
    linked = {urldefrag(url).url for url in index["links"]}
    unlinked = [name for name in expected_pages() if page_url(name) not in linked]
    assert not unlinked, f"the collection index does not link {unlinked}"
    # And the site's front page leads to it: front page -> collection list -> this collection.
    front = {urldefrag(url).url for url in pages["index.html"]["links"]}
    assert page_url("collections/index.html") in front
    listing = {urldefrag(url).url for url in pages["collections/index.html"]["links"]}
    assert page_url(f"{COLLECTION_DIR}/index.html") in listing


def test_docs_venv_uses_the_controller_ansible_core_pin():
    def pin(path: Path) -> list[str]:
        return [line.strip() for line in path.read_text().splitlines() if line.startswith("ansible-core==")]

    assert pin(REPO / "requirements-docs.txt") == pin(REPO / "requirements.txt") != []


def test_the_serving_report_renders_offline(tmp_path):
    """The serving acceptance's HTML report (docs/serving-acceptance.md) loads in the same headless
    Chromium with no network: only its own file, every chart an SVG, the verdict shown."""
    sys.path.insert(0, str(REPO / "collections"))
    from ansible_collections.gpufleet.inference.plugins.module_utils import (
        _serving_acceptance,
        _serving_report,
    )

    capacity = {"max_num_seqs": 4, "num_blocks": 1024, "block_size": 16, "max_model_len": 512}
    hostvars = {
        "head": {"vllm_replica": "pp", "vllm_node_rank": 0, "vllm_api_host": "10.0.0.1", "vllm_capacity": capacity},
        "tail": {"vllm_replica": "pp", "vllm_node_rank": 1},
        "solo": {"vllm_replica": "tp", "vllm_node_rank": 0, "vllm_api_host": "10.0.0.3", "vllm_capacity": capacity},
        "front": {},
    }
    groups = {"vllm_nodes": ["head", "tail", "solo"]}
    frontdoor = {"host": "front", "address": "10.0.0.9", "port": 8443, "tls": True}
    settings = {"serving_acceptance_prompt_tokens": 64, "serving_acceptance_output_tokens": 32}
    run = _serving_acceptance.run_plan(settings, hostvars, groups, "front", {"vllm_api_port": 8000}, frontdoor)
    measurements = []
    for target in run["targets"]:
        for point in target["points"]:
            slow = 40.0 if target["name"] == "tp" else 1.0
            figures = {"num_prompts": point["num_prompts"], "completed": point["num_prompts"], "duration": 4.0}
            figures.update({"request_throughput": 2.0, "output_throughput": 60.0 * point["concurrency"] / slow})
            for metric, value in (("ttft", 80.0), ("tpot", 30.0), ("itl", 30.0), ("e2el", 1000.0)):
                for key in ("mean", "median", "p50", "p90", "p99"):
                    figures[f"{key}_{metric}_ms"] = value * slow * (1 + point["concurrency"] / 8)
            measurements.append(
                {
                    "target": target["name"],
                    "point": point["name"],
                    "result": _serving_acceptance.parse_result(figures),
                    "load_cpu_s": 2.0,
                }
            )
    document = dict(_serving_acceptance.evaluate(run, measurements), title="Serving acceptance", generated_at="")
    document.update(tool={"name": "vllm bench serve", "version": "0.32.0"}, load_host="front")
    site = tmp_path / "report"
    site.mkdir()
    (site / "serving-acceptance.html").write_text(_serving_report.render_html(document))
    out = tmp_path / "pages.json"
    script("render", "--site", str(site), "--json", str(out))
    page = json.loads(out.read_text())["serving-acceptance.html"]
    assert page["error"] is None and page["failed"] == []
    assert page["requests"] == [(site / "serving-acceptance.html").as_uri()]
    assert page["title"] == "Serving acceptance"
    assert not document["verdict"]["passed"]
    assert any("FAILED" in heading for heading in page["h1"] + page["h2"]), page
