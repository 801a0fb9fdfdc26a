"""The admin page in a real browser (Debian's chromium, driven by Playwright): sign in, create
a key, rotate it, watch a request made with it appear, revoke it."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.integration.test_store import MASTER, chat, start


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "chromium is not installed (apt-get install chromium)"
        if os.environ.get("SHARDGATE_REQUIRE_ENGINES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture
def page() -> Iterator[Page]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        yield browser.new_page()
        browser.close()


def test_a_key_is_created_rotated_used_and_revoked_from_the_page(
    page: Page, tmp_path: Path
) -> None:
    c = start(tmp_path / "store.db")
    try:
        page.goto(f"{c.http_url}/ui")
        page.fill("#master-key", MASTER)
        page.click("#sign-in")
        expect(page.locator("#replicas tbody tr")).to_have_count(1)
        expect(page.locator("#replicas tbody tr td").nth(2)).to_have_text("up")

        page.fill("#new-alias", "web")
        page.click("#create-key")
        expect(page.locator("#shown-key")).to_have_text(re.compile(r"^sk-"))
        first = page.text_content("#shown-key") or ""
        row = page.locator('#keys tbody tr[data-alias="web"]')
        expect(row).to_have_count(1)

        row.locator("button.rotate").click()
        expect(page.locator("#shown-key")).not_to_have_text(first)
        rotated = page.text_content("#shown-key") or ""
        assert rotated.startswith("sk-")
        with pytest.raises(openai.AuthenticationError):
            chat(c, first)  # rotated without a grace period: the old key stops at once

        answer = chat(c, rotated)
        request_id = answer.id.removeprefix("chatcmpl-")
        seen = page.locator(f'#recent tbody tr[data-request-id="{request_id}"]')
        expect(seen).to_have_count(1)  # the page's next poll shows it
        expect(seen.locator("td").nth(2)).to_have_text("web")
        expect(page.locator("#spend-chart rect.bar").last).not_to_have_attribute("height", "0")

        row.locator("button.revoke").click()
        expect(row).to_have_count(0)
        with pytest.raises(openai.AuthenticationError):
            chat(c, rotated)
        assert page.text_content("#error") == ""
    finally:
        c.stop()
