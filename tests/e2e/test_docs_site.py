"""The manual as a reader sees it: `mkdocs build --strict` of docs/ (what `make docs` and CI
run), served on 127.0.0.1 and opened in headless Chromium. Its home page leads into the pages,
the configuration page shows the groups generated from conf/, the option reference the schema's
ranges. The screenshots the manual shows of itself are taken here (keep_for_docs)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers.browser import Browser, chromium, keep_for_docs
from helpers.machine import unavailable
from helpers.servers import free_port, stop, wait_until_healthy
from helpers.train import REPO


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The built site, served by Python's http.server on a free loopback port: its URL."""
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
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
    yield url
    stop(server)


@pytest.fixture
def browser(tmp_path):
    if chromium() is None:
        unavailable("no Chromium here: .ci/run installs Debian's `chromium` for this test")
    with Browser(tmp_path / "profile", width=1400, height=1000) as b:
        yield b


def test_the_home_page_leads_into_every_part_of_the_manual(site, browser, tmp_path):
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
    for page in ("getting-started/", "configuration/", "reference/", "troubleshooting/", "sweeps/"):
        assert f"{site}/{page}" in links, page
    keep_for_docs(browser.screenshot(tmp_path / "site_home.png"))


def test_the_configuration_page_shows_the_groups_from_conf(site, browser, tmp_path):
    browser.open(f"{site}/configuration/")
    text = browser.wait_for_text(
        ["Config groups", "resnet50", "fashion_mnist", "dim_reduce_optuna"]
    )
    # momentum.yaml's own value, rendered from the file
    assert "optimizer.lr=0.02" in text
    keep_for_docs(browser.screenshot(tmp_path / "site_configuration.png"))


def test_the_option_reference_shows_each_fields_range(site, browser):
    browser.open(f"{site}/reference/")
    text = browser.wait_for_text(["boost.rho", "parallel.cluster_time_out"])
    assert "in (0, 1)" in text and "standalone, data, semi_auto, auto" in text
