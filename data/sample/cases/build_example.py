"""Build the constructed example cases from the bundled 食疗方 recipes (stdlib only, deterministic).

    python data/sample/cases/build_example.py   # writes cases_example.jsonl and cases_example.csv here

NOT real patients: each recipe's indications become the complaint of an invented patient whose sex,
age and past history are drawn from the SHA-1 of the recipe id; the recipe (name, ingredients,
method) becomes the treatment. See PROVENANCE.md.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECIPES = HERE.parent / "tcm_classics" / "shiliaofang_recipes.jsonl"
HISTORY = ["高血压", "糖尿病", "慢性胃炎", "冠心病", "", "", ""]  # empty: no history stated


def _pick(key: str, salt: str, n: int) -> int:
    return int(hashlib.sha1(f"{salt}:{key}".encode("utf-8")).hexdigest(), 16) % n


def _clean(text: str) -> str:
    return re.sub(r"\s+", "", text or "").strip("。")


def build() -> list[dict]:
    cases = []
    for line in RECIPES.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        ind = _clean(r.get("indications", "")).lstrip("治")
        if not ind or "此方" in ind or len(ind) > 40:
            continue  # a narrative, not a list of indications
        rid = r["recipe_id"]
        sex = "女" if _pick(rid, "sex", 2) else "男"
        age = 25 + _pick(rid, "age", 60)
        hist = HISTORY[_pick(rid, "history", len(HISTORY))]
        n = len(cases) + 1
        complaint = f"自述{ind}。"
        case = {"case_id": f"ex{n:03d}", "sex": sex, "age": age, "history": [hist] if hist else [],
                "treatment": f"{r['name']}：{_clean(r['ingredients'])}。{_clean(r.get('method', ''))}。",
                "source_recipe": rid}
        if n % 5 == 0:  # some as a consultation dialogue
            case["dialogue"] = [{"role": "医生", "content": "哪里不舒服？"}, {"role": "患者", "content": complaint},
                                {"role": "医生", "content": "以前有什么病？"}, {"role": "患者", "content": f"有{hist}史。" if hist else "没有。"}]
            case["text"] = f"患者，{sex}，{age}岁。"
        else:
            case["text"] = f"患者，{sex}，{age}岁。" + (f"有{hist}史。" if hist else "既往体健。") + complaint
        cases.append(case)
    return cases


def main() -> None:
    cases = build()
    with open(HERE / "cases_example.jsonl", "w", encoding="utf-8") as fh:
        for c in cases:
            fh.write(json.dumps(c, ensure_ascii=False) + "\n")
    with open(HERE / "cases_example.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["case_id", "sex", "age", "history", "text", "treatment"])
        for c in cases[:10]:
            w.writerow([f"csv-{c['case_id']}", c["sex"], c["age"], "、".join(c["history"]), c["text"], c["treatment"]])
    print(f"{len(cases)} cases")


if __name__ == "__main__":
    main()
