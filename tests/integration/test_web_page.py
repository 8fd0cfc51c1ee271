"""The web page the server serves on its HTTP port (observability/web_page.html), in headless
Chromium (Debian's /usr/bin/chromium, driven by Playwright; .ci/run installs it): the list
of groups, then a live group's page showing its members and lag (real confluent-kafka
consumers), updating without a reload when the test makes a second consumer join (a
rebalance the timeline shows with its cause). Nothing is fetched from anywhere but the
server. Screenshots go to tests/artifacts/web_page/ (ignored by git), CI's artifacts."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from playwright.sync_api import Page, expect, sync_playwright

from tests.integration.test_clients import create_topic
from tests.support import ROOT, ServerProcess, serving

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = ROOT / "tests" / "artifacts" / "web_page"
TOPIC = "web-orders"
GROUP = "web-group"
PARTITIONS = 4
RECORDS_PER_PARTITION = 10
COMMITTED = 2  # each member commits this offset on what it is given: the lag stays put
WAIT_MS = 30_000  # the page polls every 2 s; generous for a loaded machine


class HoldingConsumer(threading.Thread):
    """A live member of GROUP (confluent-kafka, classic protocol) that commits offset
    COMMITTED on each partition it is assigned and keeps polling (so it stays a member)."""

    def __init__(self, server: ServerProcess, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.config = {
            "bootstrap.servers": server.bootstrap,
            "group.id": GROUP,
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
        }
        self.stop = threading.Event()

    def run(self) -> None:
        consumer = Consumer(self.config)
        committed: set[int] = set()
        consumer.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                consumer.poll(0.1)
                fresh = [tp.partition for tp in consumer.assignment()]
                fresh = [p for p in fresh if p not in committed]
                if fresh:
                    offsets = [TopicPartition(TOPIC, p, COMMITTED) for p in fresh]
                    consumer.commit(offsets=offsets, asynchronous=False)
                    committed.update(fresh)
        finally:
            consumer.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(
        Path(tmp_path_factory.mktemp("web-page")) / "data", group_initial_rebalance_delay_ms=0
    ) as proc:
        create_topic(proc.bootstrap, TOPIC, PARTITIONS)
        producer = Producer({"bootstrap.servers": proc.bootstrap})
        for partition in range(PARTITIONS):
            for i in range(RECORDS_PER_PARTITION):
                producer.produce(TOPIC, b"order-%d" % i, partition=partition)
        assert producer.flush(20) == 0
        yield proc


@pytest.fixture
def page() -> Iterator[Page]:
    if not Path(CHROMIUM).exists():
        raise AssertionError(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 900})
        finally:
            browser.close()


def test_the_page_shows_a_live_group_and_a_rebalance(server: ServerProcess, page: Page) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    base = f"http://127.0.0.1:{server.metrics_port}"
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    total_lag = PARTITIONS * (RECORDS_PER_PARTITION - COMMITTED)
    first = HoldingConsumer(server, "web-first")
    second = HoldingConsumer(server, "web-second")
    first.start()
    try:
        page.goto(base + "/")
        row = page.locator(f'#groups tr[data-group="{GROUP}"]')
        expect(row).to_be_visible(timeout=WAIT_MS)
        # members (5th cell) and total lag (last cell), once the member has committed
        expect(row.locator("td").nth(4)).to_have_text("1", timeout=WAIT_MS)
        expect(row.locator("td").last).to_have_text(str(total_lag), timeout=WAIT_MS)
        expect(row.locator("td").nth(1)).to_have_text("Stable")
        page.screenshot(path=str(ARTIFACTS / "1-groups.png"), full_page=True)

        row.locator("a.group-link").click()
        expect(page.locator("#group-name")).to_have_text(GROUP, timeout=WAIT_MS)
        expect(page.locator("#members tr[data-member]")).to_have_count(1, timeout=WAIT_MS)
        expect(page.locator("#members")).to_contain_text("web-first")
        expect(page.locator("#total-lag")).to_have_text(str(total_lag), timeout=WAIT_MS)
        offsets = page.locator("#offsets tr[data-partition]")
        expect(offsets).to_have_count(PARTITIONS, timeout=WAIT_MS)
        lag_cell = page.locator(f'#offsets tr[data-partition="{TOPIC}-0"] td').nth(4)
        expect(lag_cell).to_have_text(str(RECORDS_PER_PARTITION - COMMITTED))
        expect(page.locator("#assignment td.held")).to_have_count(PARTITIONS, timeout=WAIT_MS)
        expect(page.locator("#lag-chart polyline")).to_have_count(1)
        rebalances = page.locator("#timeline tr", has_text="rebalance_started")
        before = rebalances.count()
        assert before >= 1
        page.screenshot(path=str(ARTIFACTS / "2-group-one-member.png"), full_page=True)

        # A second consumer joins: the page, never reloaded, shows the rebalance.
        url = page.url
        second.start()
        expect(page.locator("#members tr[data-member]")).to_have_count(2, timeout=WAIT_MS)
        expect(page.locator("#members")).to_contain_text("web-second")
        expect(rebalances).to_have_count(before + 1, timeout=WAIT_MS)
        expect(rebalances.first).to_contain_text("joined")
        expect(page.locator("#assignment tr[data-member]")).to_have_count(2)
        expect(page.locator("#assignment td.held")).to_have_count(PARTITIONS, timeout=WAIT_MS)
        expect(page.locator("#group-state")).to_have_text("Stable", timeout=WAIT_MS)
        assert page.url == url
        page.screenshot(path=str(ARTIFACTS / "3-group-after-rebalance.png"), full_page=True)
    finally:
        for consumer in (first, second):
            consumer.stop.set()
        for consumer in (first, second):
            if consumer.ident is not None:  # started
                consumer.join(15)
    assert requested and all(url.startswith(base + "/") for url in requested), requested
