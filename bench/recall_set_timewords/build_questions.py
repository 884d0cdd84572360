"""Write questions.yaml for the time-words recall set from the question list below.

Standalone (standard library only); it does not use the project's code. Each question names its
gold daily note(s) and an anchor; the line number is found from the anchor, which must occur exactly
once in its file. Ids, line ranges and `heldout` (every third question per kind) are filled in here,
so editing a turn only needs this script re-run.

`changed` questions also list where the OLD value is still stated (MEMORY.md and/or older notes);
those are checked here (they must exist and be older than the gold note) but not written out.

    python3 build_questions.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
WS = HERE / "workspace"

R, L, C, D = "recently", "relative", "changed", "dated"

# (kind, question language, question, [(daily note date, anchor), ...])
QUESTIONS: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    # --- recently: what a speaker called recent AT THE TIME of that conversation ---
    (
        R,
        "en",
        "What had Owen recently started making at home when he caught up with Rosa in early March?",
        [("2025-03-08", "I've recently started fermenting my own kimchi")],
    ),
    (
        R,
        "en",
        "Which evening class did Rosa say she had been going to lately?",
        [("2025-03-08", "lately I've been going to a pottery class in Stockbridge")],
    ),
    (R, "zh", "林浩三月份说他最近在试哪款新茶？", [("2025-03-23", "我最近在试一款桂花乌龙")]),
    (R, "zh", "三月底晓岚跟表哥说她这阵子在学什么？", [("2025-03-23", "我这阵子在学游泳")]),
    (
        R,
        "en",
        "Which Chinese TV drama had Rosa recently been watching to practise her Chinese?",
        [("2025-04-05", "我最近在看《琅琊榜》")],
    ),
    (
        R,
        "en",
        "How had Xiaolan been finding time to write lately, according to what she told Rosa in April?",
        [("2025-04-05", "Lately I've been getting up at five")],
    ),
    (
        R,
        "en",
        "What had Owen and Gethin recently started doing on Monday nights?",
        [("2025-04-19", "Recently we've been taking salsa lessons")],
    ),
    (
        R,
        "en",
        "What volunteering had Rosa recently started when she talked to Owen in April?",
        [("2025-04-19", "I've recently started volunteering at the food bank")],
    ),
    (R, "zh", "五月份林浩说最近店里生意为什么不好？", [("2025-05-10", "最近生意被隔壁新开的一家连锁奶茶店抢了不少")]),
    (R, "zh", "晓岚近来被导师揪着反复修改的是论文的哪一章？", [("2025-05-10", "近来导师一直揪着第三章不放")]),
    (
        R,
        "en",
        "What animal had Owen recently started looking after, around the time he bought the van?",
        [("2025-05-22", "I've recently been fostering a retired greyhound called Sprout")],
    ),
    (
        R,
        "en",
        "How did Rosa say she was getting to work these days, back in May?",
        [("2025-05-22", "Lately I've been cycling to work along the Water of Leith path")],
    ),
    (
        R,
        "en",
        "What had Xiaolan recently done about a job in China, as she told Rosa in June?",
        [("2025-06-14", "Recently I had a video interview with the East China Sea Marine Institute")],
    ),
    (
        R,
        "en",
        "What had been waking Rosa up so early lately, when she still lived in Leith?",
        [("2025-06-14", "Lately the seagulls on my roof have been waking me at four")],
    ),
    (R, "zh", "六月底林浩说小雨这阵子在学做什么？", [("2025-06-28", "这阵子小雨在学做巴斯克蛋糕")]),
    (R, "zh", "晓岚六月底说她最近迷上了什么运动？", [("2025-06-28", "我最近迷上了打羽毛球")]),
    (
        R,
        "en",
        "Which dish had Owen recently been testing for the truck in July?",
        [("2025-07-12", "recently I've been testing a lamb cawl bao")],
    ),
    (R, "zh", "林浩七月来爱丁堡时说，他这阵子每天晚上在抖音上做什么？", [("2025-07-27", "这阵子我在抖音上直播卖茶叶")]),
    (
        R,
        "en",
        "What new pastime had Rosa recently taken up by the sea, as she told Owen in August?",
        [("2025-08-16", "recently I've taken up sea swimming at Portobello")],
    ),
    (R, "zh", "林浩八月底说他最近在忙着找什么？", [("2025-08-30", "我最近在看二店的铺面")]),
    (R, "zh", "晓岚答辩后这阵子每天晚上在忙什么？", [("2025-08-30", "我这阵子每天晚上都在打包寄书回国")]),
    (
        R,
        "en",
        "What had Xiaolan been doing with her furniture lately, before she left Edinburgh?",
        [("2025-09-17", "Lately I've been selling all my furniture on Gumtree")],
    ),
    (
        R,
        "en",
        "What contract had Owen's business recently won, as he told Rosa in October?",
        [("2025-10-26", "recently we got a contract to feed the Cardiff Uni open days")],
    ),
    (R, "zh", "Rosa 最近每个星期三去哪里练中文？", [("2025-11-15", "最近我每个星期三去图书馆的中文角")]),
    (R, "zh", "晓岚最近在跟谁学做上海菜？", [("2025-11-15", "我最近在跟房东阿姨学做上海菜")]),
    # --- relative: a relative date that needs the session's date to resolve ---
    (
        L,
        "en",
        "What big event did Owen's hotel kitchen cater on 7 March 2025?",
        [("2025-03-08", "Yesterday we did a wedding for a hundred and forty guests")],
    ),
    (L, "zh", "2025年3月22日半山茶铺出了什么故障？", [("2025-03-23", "昨天制冰机坏了")]),
    (
        L,
        "en",
        "On what date did Xiaolan send the complete draft of her thesis to her supervisor?",
        [("2025-04-05", "the day before yesterday I sent the whole draft to Professor Mackie")],
    ),
    (
        L,
        "en",
        "What did Owen and Gethin drive to Newport to see on the weekend before Easter?",
        [("2025-04-19", "Last weekend Gethin and I drove to Newport to look at a van")],
    ),
    (L, "zh", "豆豆是哪天从后窗跑出去的？", [("2025-05-10", "前天豆豆从后窗跑出去了")]),
    (L, "zh", "晓岚的导师是哪一天终于同意第三章的？", [("2025-05-10", "昨天他终于回邮件说第三章可以了")]),
    (L, "en", "On which date did Owen buy the Citroën van?", [("2025-05-22", "I bought the van on Tuesday")]),
    (
        L,
        "en",
        "What did Xiaolan host on Saturday 17 May, and what was the rule at the table?",
        [("2025-05-22", "Last Saturday Xiaolan made hotpot for six of us")],
    ),
    (
        L,
        "en",
        "When did Xiaolan find out that her viva had been postponed?",
        [("2025-06-14", "Yesterday I got an email from the graduate school")],
    ),
    (
        L,
        "en",
        "How did Rosa say the exam she sat in Glasgow on 7 June 2025 went?",
        [("2025-06-14", "Last weekend I sat HSK 3 in Glasgow")],
    ),
    (L, "zh", "林浩是哪天向小雨求婚的？", [("2025-06-28", "昨天我跟小雨求婚了")]),
    (L, "zh", "小雨是哪个月考的咖啡师证？", [("2025-06-28", "她上个月还考了个咖啡师证")]),
    (
        L,
        "en",
        "What was the date of Owen's last shift at the Hotel Glanmor?",
        [("2025-07-12", "Yesterday was my last shift at the Glanmor")],
    ),
    (L, "zh", "林浩是哪天到的爱丁堡？", [("2025-07-27", "我前天到的爱丁堡")]),
    (
        L,
        "en",
        "How did Owen's truck do at the Llandaff Food Fair on 9–10 August?",
        [("2025-08-16", "Last weekend at Llandaff we sold out of everything")],
    ),
    (L, "zh", "晓岚是哪天通过博士答辩的？", [("2025-08-30", "前天答辩通过了")]),
    (L, "zh", "林浩的二手五菱宏光大概是什么时候买的？", [("2025-08-30", "上周买了一辆二手的五菱宏光")]),
    (L, "en", "On what date did Rosa move into her Portobello flat?", [("2025-09-17", "We moved on Saturday")]),
    (L, "zh", "半山茶铺二店是哪天开业的？", [("2025-10-11", "昨天二店开业了")]),
    (
        L,
        "en",
        "What happened to Owen in Bute Park on 24 October?",
        [("2025-10-26", "The day before yesterday the dog saw a squirrel in Bute Park")],
    ),
    (
        L,
        "en",
        "On which date did Xiaolan first go out to sea with her institute?",
        [("2025-11-15", "Yesterday I went out to sea for the first time")],
    ),
    # --- changed: the latest value; an older note and/or MEMORY.md still hold the old one ---
    (C, "en", "Which company does Rosa work for now?", [("2025-10-26", "I passed my probation at Tidewell")]),
    (
        C,
        "en",
        "Which part of Edinburgh does Rosa live in now?",
        [("2025-11-15", "My flat in Portobello is tiny")],
    ),
    (
        C,
        "en",
        "How much rent does Rosa pay a month for her current flat?",
        [("2025-09-17", "the landlord knocked the rent down to 1,120")],
    ),
    (C, "zh", "Rosa 现在在准备考 HSK 几级？", [("2025-10-26", "I've also signed up for HSK 4")]),
    (C, "en", "What is Owen's job at the moment?", [("2025-10-26", "The truck is my full-time job now")]),
    (C, "en", "What is Owen's food truck called?", [("2025-07-12", "Little Dragon Kitchen. Gethin came up with it")]),
    (
        C,
        "en",
        "When are Owen and Gethin getting married?",
        [("2025-08-16", "We've moved it forward to the eighteenth of April 2026")],
    ),
    (
        C,
        "en",
        "Where will Owen and Gethin's wedding take place?",
        [("2025-10-26", "We've booked the Norwegian Church in Cardiff Bay")],
    ),
    (C, "en", "What is Owen's dog called?", [("2025-08-16", "renamed him Brenin")]),
    (C, "zh", "晓岚现在住在哪个城市？", [("2025-11-15", "我现在住在上海杨浦区")]),
    (
        C,
        "en",
        "What does Xiaolan do for a living now?",
        [("2025-11-15", "I'm an assistant researcher in the seagrass restoration group now")],
    ),
    (C, "zh", "半山茶铺的招牌奶茶现在卖多少钱一杯？", [("2025-06-28", "招牌奶茶我从十五涨到十八了")]),
    (C, "zh", "林浩现在一共有几家店？", [("2025-10-11", "对，现在两家店")]),
    (C, "zh", "林浩现在骑什么或者开什么去店里？", [("2025-08-30", "上周买了一辆二手的五菱宏光")]),
    (C, "zh", "林浩和小雨的婚礼定在什么时候？", [("2025-10-11", "改到明年一月十八号了")]),
    (C, "zh", "晓岚现在能游多远？", [("2025-10-11", "能游五百米了")]),
    # --- dated: the date is only in the note's file name and heading ---
    (
        D,
        "en",
        "Which film did Rosa tell Owen to watch in their chat on 8 March 2025?",
        [("2025-03-08", "Watch Aftersun")],
    ),
    (D, "zh", "2025年3月23日，晓岚说她的论文写到多少字了？", [("2025-03-23", "现在写到五万八千字了")]),
    (
        D,
        "en",
        "What Chinese name did Xiaolan propose for Rosa on 5 April 2025?",
        [("2025-04-05", "What do you think of 戴若溪?")],
    ),
    (D, "en", "What book did Rosa recommend to Owen on 19 April 2025?", [("2025-04-19", "Klara and the Sun")]),
    (D, "zh", "2025年5月10日那次聊天，林浩说店里这个月新上了哪款饮品？", [("2025-05-10", "新上了一款青提茉莉")]),
    (
        D,
        "en",
        "On 22 May 2025, which Chinese word did Rosa say she had learned at the hotpot dinner?",
        [("2025-05-22", "I learned the word for tripe")],
    ),
    (
        D,
        "en",
        "Which restaurant did Xiaolan pick for Rosa's birthday dinner when they talked on 14 June 2025?",
        [("2025-06-14", "Let's go to Shu Xiang on Clerk Street")],
    ),
    (
        D,
        "en",
        "What did Owen recommend Rosa watch when they spoke on 12 July 2025?",
        [("2025-07-12", "I have a thing to watch: Jiro Dreams of Sushi")],
    ),
    (D, "zh", "2025年7月27日，林浩给 Rosa 带了什么礼物？", [("2025-07-27", "我给你带了一个熊猫茶壶")]),
    (D, "zh", "8月30日那次，林浩介绍了什么新品？", [("2025-08-30", "荔枝冰酿")]),
    (
        D,
        "en",
        "In the conversation of 17 September 2025, which appliance did Xiaolan say she would give Rosa?",
        [("2025-09-17", "I'm giving you my rice cooker")],
    ),
    (D, "zh", "10月11日那次，林浩说二店每个月租金多少？", [("2025-10-11", "二店一个月租金一万二")]),
    (D, "en", "Which TV series did Rosa recommend to Owen on 26 October 2025?", [("2025-10-26", "Slow Horses.")]),
    (D, "zh", "11月15日晓岚说她在上海的房子一个月房租多少？", [("2025-11-15", "一个月六千五")]),
]

# For each `changed` question (by its gold anchor): where the OLD value is still stated.
# ("MEMORY", anchor) means workspace/MEMORY.md; a date means that daily note.
OLD_VALUES: dict[str, list[tuple[str, str]]] = {
    "I passed my probation at Tidewell": [("MEMORY", "Forthline Buses"), ("2025-03-08", "Still at Forthline")],
    "My flat in Portobello is tiny": [("MEMORY", "flat in Leith"), ("2025-03-08", "for the Leith flat")],
    "the landlord knocked the rent down to 1,120": [
        ("MEMORY", "£950 a month"),
        ("2025-03-08", "950 a month"),
        ("2025-08-16", "It's 1,150 a month"),
    ],
    "I've also signed up for HSK 4": [("MEMORY", "studying for HSK 3"), ("2025-03-08", "I'm doing HSK 3 in June")],
    "The truck is my full-time job now": [
        ("MEMORY", "a sous-chef at the Hotel Glanmor"),
        ("2025-03-08", "The hotel has been chaos"),
    ],
    "Little Dragon Kitchen. Gethin came up with it": [
        ("MEMORY", "Smoke & Leek"),
        ("2025-03-08", "I even have a name: Smoke & Leek"),
        ("2025-04-19", "it'll say Smoke & Leek on the side"),
    ],
    "We've moved it forward to the eighteenth of April 2026": [
        ("MEMORY", "(August) 2026"),
        ("2025-03-08", "We're thinking August 2026"),
    ],
    "We've booked the Norwegian Church in Cardiff Bay": [
        ("MEMORY", "farm near Brecon"),
        ("2025-03-08", "at his parents' farm near Brecon"),
    ],
    "renamed him Brenin": [("MEMORY", "No pets"), ("2025-05-22", "greyhound called Sprout")],
    "我现在住在上海杨浦区": [("MEMORY", "student flat in Marchmont")],
    "I'm an assistant researcher in the seagrass restoration group now": [
        ("MEMORY", "fourth-year PhD student"),
        ("2025-03-23", "你论文写得怎么样了"),
    ],
    "招牌奶茶我从十五涨到十八了": [("MEMORY", "costs 15 元"), ("2025-03-23", "还是十五，不敢涨")],
    "对，现在两家店": [("MEMORY", "runs one tea shop")],
    "上周买了一辆二手的五菱宏光": [("MEMORY", "电瓶车"), ("2025-03-23", "一人一辆电瓶车")],
    "改到明年一月十八号了": [("2025-08-30", "婚礼我们打算明年五一办")],
    "能游五百米了": [("2025-03-23", "现在能游二十五米了"), ("2025-05-10", "现在能游一百米了")],
}


def read(where: str) -> str:
    path = WS / "MEMORY.md" if where == "MEMORY" else WS / "memory" / f"{where}.md"
    return path.read_text(encoding="utf-8")


def locate(date: str, anchor: str) -> int:
    """Return the 1-based line of `anchor` in the daily note; fail unless it occurs exactly once."""
    text = read(date)
    if text.count(anchor) != 1:
        raise SystemExit(f"{date}.md: anchor {anchor!r} occurs {text.count(anchor)} times")
    hits = [i for i, line in enumerate(text.split("\n"), 1) if anchor in line]
    if len(hits) != 1 or hits[0] < 3:
        raise SystemExit(f"{date}.md: anchor {anchor!r} not on one turn line: {hits}")
    return hits[0]


def check_old(gold_date: str, anchor: str) -> None:
    olds = OLD_VALUES.get(anchor)
    if not olds:
        raise SystemExit(f"changed question with gold {anchor!r} lists no old value")
    for where, old in olds:
        if old not in read(where):
            raise SystemExit(f"old value {old!r} not found in {where}")
        if where != "MEMORY" and where >= gold_date:
            raise SystemExit(f"old value {old!r} in {where} is not older than {gold_date}")


def q(s: str) -> str:
    """Double-quoted YAML scalar (JSON string syntax is valid YAML)."""
    return json.dumps(s, ensure_ascii=False)


def main() -> None:
    out: list[str] = []
    seen: dict[str, int] = {}
    for n, (kind, lang, question, gold) in enumerate(QUESTIONS, 1):
        seen[kind] = seen.get(kind, 0) + 1
        heldout = seen[kind] % 3 == 0
        out += [
            f"- id: t{n:03d}",
            f"  kind: {kind}",
            f"  lang: {lang}",
            f"  heldout: {'true' if heldout else 'false'}",
            f"  question: {q(question)}",
            "  gold:",
        ]
        for date, anchor in gold:
            line = locate(date, anchor)
            if kind == C:
                check_old(date, anchor)
            out += [f"  - file: memory/{date}.md", f"    lines: [{line}, {line}]", f"    anchor: {q(anchor)}"]
    (HERE / "questions.yaml").write_text("\n".join(out) + "\n", encoding="utf-8")
    print(len(QUESTIONS), "questions;", ", ".join(f"{k} {v}" for k, v in seen.items()))


if __name__ == "__main__":
    main()
