"""The manual as a reader sees it: `mkdocs build --strict` of docs/ (what `make docs` and CI
run), served on 127.0.0.1 and opened in headless Chromium. Its home page leads into the pages,
the configuration page shows the groups generated from conf/, the option reference the schema's
ranges. The screenshots the manual shows of itself are taken here (keep_for_docs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.browser import Browser, chromium, keep_for_docs
from helpers.machine import unavailable
from helpers.servers import free_port, stop, wait_until_healthy
from helpers.shell import user_env
from helpers.train import REPO


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The built site, served by Python's http.server on a free loopback port: (its URL, its
    folder)."""
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=user_env({"NO_MKDOCS_2_WARNING": "1"}),
        check=False,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port), "-d", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    wait_until_healthy(url, server, timeout=30, path="/")
    yield url, out
    stop(server)


@pytest.fixture
def browser(tmp_path):
    if chromium() is None:
        unavailable("no Chromium here: .ci/run installs Debian's `chromium` for this test")
    with Browser(tmp_path / "profile", width=1400, height=1000) as b:
        yield b


def test_the_home_page_leads_into_every_part_of_the_manual(site, browser, tmp_path):
    site, _ = site
    browser.open(f"{site}/")
    browser.wait_for_text(
        [
            "Train MindSpore image classifiers",
            "Getting started",
            "Option reference",
            "When things go wrong",
        ]
    )
    links = browser.evaluate("Array.from(document.querySelectorAll('a')).map(a => a.href)")
    for page in ("getting-started", "configuration", "reference", "troubleshooting", "sweeps"):
        assert f"{site}/{page}.html" in links, page
    keep_for_docs(browser.screenshot(tmp_path / "site_home.png"))


def test_the_configuration_page_shows_the_groups_from_conf(site, browser, tmp_path):
    site, _ = site
    browser.open(f"{site}/configuration.html")
    text = browser.wait_for_text(
        ["Config groups", "resnet50", "fashion_mnist", "dim_reduce_optuna"]
    )
    # momentum.yaml's own value, rendered from the file
    assert "optimizer.lr=0.02" in text
    keep_for_docs(browser.screenshot(tmp_path / "site_configuration.png"))


def test_the_option_reference_shows_each_fields_range(site, browser):
    site, _ = site
    browser.open(f"{site}/reference.html")
    text = browser.wait_for_text(["boost.rho", "parallel.cluster_time_out"])
    assert "in (0, 1)" in text and "standalone, data, semi_auto, auto" in text


def test_the_built_site_works_opened_from_files(site, tmp_path):
    """issue 51 item 5: `make docs` then site/index.html in a browser, no server: the nav
    links open pages (not folder listings), the search box finds an option, and in a narrow
    window an option key in the reference stays on one line."""
    _, out = site
    if chromium() is None:
        unavailable("no Chromium here: .ci/run installs Debian's `chromium` for this test")
    with Browser(tmp_path / "profile", width=700, height=1000) as browser:
        browser.open(f"file://{out}/index.html")
        browser.wait_for_text(["Train MindSpore image classifiers"])
        links = browser.evaluate("Array.from(document.querySelectorAll('nav a')).map(a => a.href)")
        pages = [link for link in links if link.startswith("file://") and "#" not in link]
        assert f"file://{out}/reference.html" in pages, pages
        for link in pages:
            assert Path(link.removeprefix("file://")).is_file(), link
        browser.evaluate(
            "(() => { const q = document.querySelector('[data-md-component=search-query]');"
            " q.focus(); q.value = 'parallel.cluster_time_out';"
            " q.dispatchEvent(new Event('input', {bubbles: true}));"
            " q.dispatchEvent(new KeyboardEvent('keyup', {bubbles: true})); })()"
        )
        found = (
            "Array.from(document.querySelectorAll('.md-search-result__item a')).map(a => a.href)"
        )
        browser.wait_for(lambda: browser.evaluate(found), 60)
        assert any(
            link.startswith(f"file://{out}/reference.html") for link in browser.evaluate(found)
        ), browser.evaluate(found)
        browser.open(f"file://{out}/reference.html")
        browser.wait_for_text(["parallel.cluster_time_out"])
        lines = browser.evaluate(
            "Array.from(document.querySelectorAll('table td:first-child code'))"
            ".filter(c => c.textContent === 'parallel.cluster_time_out')"
            ".map(c => c.getClientRects().length)"
        )
        assert lines and set(lines) == {1}, lines
