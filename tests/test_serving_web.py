"""The web page in headless Chromium (Debian's chromium + chromium-driver, driven by selenium):
type a question, see an answer with clickable citations, reasoning paths and sources; keep a screenshot
(out/test-artifacts/serving_web.png)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from serving_helpers import REPO, bencao_serve, serving_graph

ARTIFACTS = REPO / "out" / "test-artifacts"


def _driver(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        pytest.skip("needs Debian's chromium and chromium-driver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1100,1400",
                 "--lang=zh-CN"):
        opts.add_argument(flag)
    # An explicit driver path: selenium never tries to download one.
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)


@pytest.mark.browser
def test_question_to_answer_with_sources_in_chromium(tmp_path_factory):
    pytest.importorskip("selenium")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    graph = serving_graph(tmp_path_factory)
    tmp = tmp_path_factory.mktemp("web")
    with bencao_serve(graph, api_key="sk-web", log=tmp / "serve.log") as (base, _proc):
        driver = _driver(tmp / "profile")
        try:
            driver.get(base + "/")
            assert "bencao" in driver.title
            box = driver.find_element(By.ID, "question")
            box.send_keys("大枣的性味是什么？")
            driver.find_element(By.ID, "ask").click()
            wait = WebDriverWait(driver, 120)
            # the server wants a key: the page shows the API's message, then works once the key is given
            wait.until(EC.visibility_of_element_located((By.ID, "error")))
            assert "missing API key" in driver.find_element(By.ID, "error").text
            driver.find_element(By.CSS_SELECTOR, "#key-box summary").click()
            driver.find_element(By.ID, "api-key").send_keys("sk-web")
            driver.find_element(By.ID, "ask").click()
            wait.until(EC.visibility_of_element_located((By.ID, "answer-box")))
            answer = driver.find_element(By.ID, "answer").text
            assert answer.strip()
            sources = driver.find_elements(By.CSS_SELECTOR, "#sources li")
            assert sources, "at least one source is shown"
            headings = [s.find_element(By.CSS_SELECTOR, ".heading").text for s in sources]
            assert any(h.startswith("神农本草经 › ") for h in headings)
            cites = driver.find_elements(By.CSS_SELECTOR, "#answer a.cite")
            assert cites, "citations in the answer are links"
            target = cites[0].get_attribute("href").split("#", 1)[1]
            assert driver.find_elements(By.ID, target), "a citation links to its source"
            paths = driver.find_elements(By.CSS_SELECTOR, "#paths li")
            assert paths and paths[0].find_element(By.CSS_SELECTOR, ".score").text
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shot = ARTIFACTS / "serving_web.png"
            assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
            cites[0].click()
            assert driver.execute_script("return location.hash") == "#" + target
        finally:
            driver.quit()

