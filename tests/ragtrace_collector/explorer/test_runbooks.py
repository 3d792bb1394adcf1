"""The alert runbooks at /runbooks/<alert>: every alert's runbook_url points there (tests/grafana/test_alert_links.py),
so each must be served, as written in docs/runbooks, without a token, and nothing else may be."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ragtrace_collector.explorer import runbooks
from tests.support.explorer_stack import Fed, served_collector

RUNBOOKS = Path(__file__).resolve().parents[3] / "docs" / "runbooks"


async def _client(pages: dict[str, str] | None = None) -> TestClient:
    app = web.Application()
    runbooks.add_routes(app, pages)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    client = await _client()
    yield client
    await client.close()


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fed]:
    with served_collector(tmp_path_factory.mktemp("runbooks")) as running:
        yield running


def test_the_package_ships_every_runbook_of_docs_runbooks():
    """The package's runbooks/ links to docs/runbooks: the same files, README as the index."""
    shipped = runbooks.load_runbooks()
    assert shipped == {p.stem: p.read_text(encoding="utf-8") for p in RUNBOOKS.glob("*.md")}
    assert runbooks.INDEX in shipped and len(shipped) > 10


async def test_each_runbook_is_served_as_written(client: TestClient):
    for path in sorted(RUNBOOKS.glob("*.md")):
        for url in (f"/runbooks/{path.stem}", f"/runbooks/{path.name}"):
            response = await client.get(url)
            assert response.status == 200, url
            assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert await response.text() == path.read_text(encoding="utf-8"), url


async def test_the_index_lists_the_runbooks(client: TestClient):
    response = await client.get("/runbooks", allow_redirects=False)
    assert response.status == 302 and response.headers["Location"] == "/runbooks/"
    index = await client.get("/runbooks/")
    assert await index.text() == (RUNBOOKS / "README.md").read_text(encoding="utf-8")


async def test_nothing_else_is_served(client: TestClient):
    """Unknown names and anything that could leave the directory answer 404, naming the runbooks there are."""
    for url in (
        "/runbooks/NoSuchAlert",
        "/runbooks/..%2F..%2Fpyproject.toml",
        "/runbooks/%2e%2e",
        "/runbooks/.md",
        "/runbooks/README.txt",
        "/runbooks/Rag-Quality",
        "/runbooks/RagQualityLow/extra",
    ):
        response = await client.get(url)
        assert response.status == 404, url
        text = await response.text()
        assert "pyproject" not in text and "[project]" not in text
    assert "RagFaithfulnessLow" in await (await client.get("/runbooks/NoSuchAlert")).text()


async def test_without_the_package_data_every_runbook_answers_404():
    client = await _client({})
    try:
        response = await client.get("/runbooks/RagFaithfulnessLow")
        assert response.status == 404 and "none installed" in await response.text()
    finally:
        await client.close()


def test_a_collector_serves_them_without_a_token_on_its_explorer_listener(collector: Fed):
    """An on-call opening a link from a page is not asked to sign in; the explorer's pages still are, and the
    listener's DNS-rebinding check applies to the runbooks as to every route."""
    page = httpx.get(collector.base + "/runbooks/RagFaithfulnessLow", timeout=10)
    assert page.status_code == 200 and page.text == (RUNBOOKS / "RagFaithfulnessLow.md").read_text(encoding="utf-8")
    assert httpx.get(collector.base + "/explorer/", timeout=10).status_code == 303  # to the sign-in form
    foreign = httpx.get(collector.base + "/runbooks/RagFaithfulnessLow", headers={"Host": "evil.example"}, timeout=10)
    assert foreign.status_code == 421
