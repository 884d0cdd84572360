"""Write questions.yaml for the time-words DEV recall set from the question list below.

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
        "What had Hannah lately been doing on Thursday nights, when she caught up with Marcus in February?",
        [("2024-02-10", "Lately I've been going to the bouldering wall in Ancoats")],
    ),
    (
        R,
        "en",
        "What had Marcus recently been teaching himself, back in the winter before he bought the boat?",
        [("2024-02-10", "I've recently been teaching myself to weld")],
    ),
    (R, "zh", "二月底雨桐说她最近在练什么运动？", [("2024-02-25", "所以我最近在练拳击")]),
    (
        R,
        "en",
        "What had Hannah recently started learning at a centre in Chinatown, as she told Yutong in March?",
        [("2024-03-09", "我最近在学写毛笔字")],
    ),
    (
        R,
        "en",
        "How had Yutong been using her morning tram rides lately, in March?",
        [("2024-03-09", "Lately I've been revising for the Life in the UK test")],
    ),
    (
        R,
        "en",
        "What early-morning hobby had Hannah recently taken up while waiting to hear about St Aidan's?",
        [("2024-03-23", "Recently I've been getting up early to go birdwatching")],
    ),
    (
        R,
        "en",
        "Which instrument had Marcus recently been learning for the band's new songs?",
        [("2024-03-23", "Recently I've been learning the pedal steel guitar")],
    ),
    (R, "zh", "雨桐被裁员以后，这阵子在忙什么？", [("2024-04-13", "我这阵子在投简历")]),
    (R, "zh", "四月份陈磊说他最近在偷偷做什么？", [("2024-04-13", "我最近在偷偷写工作室的计划书")]),
    (
        R,
        "en",
        "Whose matches had Yutong recently started going to, in the weeks before her new job?",
        [("2024-05-11", "Recently I started going to his Sunday league football games")],
    ),
    (
        R,
        "en",
        "What had Hannah lately been doing on Saturday mornings after parkrun, in May?",
        [("2024-05-11", "Lately I've been going to open viewings every Saturday morning")],
    ),
    (R, "zh", "五月底陈磊说他这阵子天天在跑哪里？", [("2024-05-26", "这阵子我天天在跑装修市场")]),
    (R, "zh", "五月底雨桐说她最近和 Daniel 在忙什么？", [("2024-05-26", "最近我和 Daniel 在看房子")]),
    (
        R,
        "en",
        "What had lately been waking Marcus at five in the morning, just after he moved aboard?",
        [("2024-06-15", "Lately the ducks have been knocking on the hull")],
    ),
    (
        R,
        "en",
        "What had Hannah recently started sharing with her neighbour Doreen?",
        [("2024-06-15", "Recently I've started sharing an allotment")],
    ),
    (R, "zh", "雨桐六月底说她这阵子在学打什么？", [("2024-06-29", "这阵子我在学打高尔夫")]),
    (R, "zh", "陈磊的工作室开业前，他说最近在小红书上做什么？", [("2024-06-29", "我最近在小红书上拍康复小视频")]),
    (R, "zh", "去杭州之前，Hannah 说她最近在练习什么？", [("2024-07-17", "我最近在练用筷子夹花生")]),
    (
        R,
        "en",
        "Who had Northgate recently asked Yutong to look after, as she told Hannah in July?",
        [("2024-07-17", "最近公司让我带一个实习生")],
    ),
    (R, "zh", "八月在杭州时，陈磊说可可最近在学什么？", [("2024-08-10", "她最近在学英语口语")]),
    (
        R,
        "en",
        "Where had Marcus recently been sleeping, once the tour got going?",
        [("2024-08-31", "Recently I've been sleeping in a different Travelodge")],
    ),
    (
        R,
        "en",
        "What had Hannah lately been doing every evening in the weeks before her house move?",
        [("2024-08-31", "Lately I've been packing boxes every evening")],
    ),
    (R, "zh", "九月中陈磊说近来工作室来了很多什么客人？", [("2024-09-14", "近来来了好多桨板俱乐部的会员")]),
    (
        R,
        "en",
        "Which club had Hannah recently joined after moving house?",
        [("2024-10-01", "Recently I've joined the Levenshulme running club")],
    ),
    (R, "zh", "Hannah 最近在学做哪道中国菜？", [("2024-10-27", "最近我在学做红烧肉")]),
    # --- relative: a relative date that needs the session's date to resolve ---
    (
        L,
        "en",
        "What happened to Hannah's Year 9 field trip on Friday 9 February 2024?",
        [("2024-02-10", "Yesterday the Year 9 trip to Castleton got rained off")],
    ),
    (
        L,
        "en",
        "What went wrong during the preview at Marcus's theatre on 7 February 2024?",
        [("2024-02-10", "On Wednesday the lighting desk crashed")],
    ),
    (L, "zh", "2024年2月23日，雨桐的公司在全员大会上宣布了什么？", [("2024-02-25", "前天我们公司开了全员大会")]),
    (
        L,
        "en",
        "On what date did Yutong fail her second driving test?",
        [("2024-03-09", "前天我考驾照又挂了")],
    ),
    (
        L,
        "en",
        "On what date did Hannah send off her application to St Aidan's?",
        [("2024-03-23", "On Tuesday I sent off my application")],
    ),
    (L, "zh", "陈磊是哪个月搬出父母家的？", [("2024-04-13", "上个月我搬到滨江了")]),
    (L, "zh", "雨桐是哪一天正式接到裁员通知的？", [("2024-04-13", "前天公司正式通知我被裁了")]),
    (
        L,
        "en",
        "On what date was Hannah offered the head of geography job?",
        [("2024-04-25", "Yesterday the head rang and offered me the job")],
    ),
    (
        L,
        "en",
        "What did Hannah achieve at parkrun on Saturday 20 April 2024?",
        [("2024-04-25", "last Saturday I finally broke twenty-nine minutes")],
    ),
    (
        L,
        "en",
        "What good news did Yutong get on 10 May 2024?",
        [("2024-05-11", "Yesterday Northgate called with an offer")],
    ),
    (
        L,
        "en",
        "What did Hannah go to view over the early May bank holiday weekend?",
        [("2024-05-11", "Last weekend I saw a little two-bed terrace")],
    ),
    (L, "zh", "陈磊是哪一周递交辞职信的？", [("2024-05-26", "我上周辞职了")]),
    (
        L,
        "en",
        "When did Marcus move onto his narrowboat?",
        [("2024-06-15", "I moved aboard last weekend")],
    ),
    (L, "zh", "雨桐是哪一天考过驾照的？", [("2024-06-29", "上周二我驾照考过了")]),
    (L, "zh", "2024年6月28日，陈磊的工作室有什么进展？", [("2024-06-29", "昨天装修终于完工了")]),
    (
        L,
        "en",
        "Which weekend did Yutong and Daniel move to Salford Quays?",
        [("2024-07-17", "上周末我们搬到 Salford Quays 了")],
    ),
    (
        L,
        "en",
        "Where did Lei take Hannah and Yutong on 9 August 2024?",
        [("2024-08-10", "Yesterday Lei took us to Longjing village")],
    ),
    (
        L,
        "en",
        "Where did The Lantern Keeper tour open on 27 August 2024?",
        [("2024-08-31", "Last Tuesday we opened at the Lyceum")],
    ),
    (L, "zh", "雨桐是哪天把永居申请交上去的？", [("2024-09-14", "前天交上去了")]),
    (
        L,
        "en",
        "On what date did Hannah move into her new house?",
        [("2024-10-01", "we finally moved on Saturday")],
    ),
    (L, "zh", "雨桐的永居是哪一天批下来的？", [("2024-10-19", "上周三永居批下来了")]),
    # --- changed: the latest value; an older note and/or MEMORY.md still hold the old one ---
    (C, "en", "Which school does Hannah teach at now?", [("2024-10-27", "the kids at St Aidan's are lovely")]),
    (C, "zh", "Hannah 现在住在曼彻斯特哪个区？", [("2024-10-27", "我现在住在 Levenshulme")]),
    (C, "en", "What is Hannah's parkrun personal best now?", [("2024-10-01", "I got a new PB a fortnight ago, 26:58")]),
    (
        C,
        "en",
        "How does Hannah get to work now?",
        [("2024-10-01", "I get the train from Levenshulme to Stockport now")],
    ),
    (C, "en", "What is Marcus's job at the moment?", [("2024-10-01", "they've extended the tour to March")]),
    (
        C,
        "en",
        "Where does Marcus live now?",
        [("2024-10-01", "Wren's on a winter mooring at Bradford on Avon now")],
    ),
    (C, "en", "What is the name of Marcus's band?", [("2024-06-15", "We're called Low Tide Radio now")]),
    (
        C,
        "en",
        "What does Marcus drive or ride now?",
        [("2024-08-31", "I sold the Fiesta last month and bought a Honda CB500")],
    ),
    (C, "zh", "雨桐现在在哪家公司上班？", [("2024-10-27", "Northgate gave me a pay rise")]),
    (C, "en", "What is Yutong's immigration status in the UK now?", [("2024-10-27", "I've got ILR now")]),
    (C, "zh", "雨桐现在住在哪里？", [("2024-09-14", "我们 Salford Quays 的公寓楼下就是运河")]),
    (C, "zh", "雨桐现在开什么车？", [("2024-10-19", "上个月买了辆二手的红色 Yaris")]),
    (C, "zh", "陈磊现在在哪里工作？", [("2024-10-19", "自己开工作室比在医院累多了")]),
    (C, "zh", "陈磊现在住在杭州哪个区？", [("2024-08-10", "我住滨江，每天过江上班")]),
    (C, "zh", "陈磊的工作室现在一节课收多少钱？", [("2024-10-19", "十月起一节课涨到三百二了")]),
    (C, "zh", "陈磊现在养了几只猫？", [("2024-09-14", "家里两只猫现在天天打架")]),
    # --- dated: the date is only in the note's file name and heading ---
    (
        D,
        "en",
        "Which album did Marcus tell Hannah to listen to on 10 February 2024?",
        [("2024-02-10", "listen to Salt Roads")],
    ),
    (D, "zh", "2024年2月25日，陈磊说妈妈给雨桐寄了什么？", [("2024-02-25", "两包笋干和一罐藕粉")]),
    (
        D,
        "en",
        "Which Chinese idiom did Yutong teach Hannah on 9 March 2024?",
        [("2024-03-09", "今天教你一个成语：入乡随俗")],
    ),
    (
        D,
        "en",
        "What podcast did Hannah recommend to Marcus on 23 March 2024?",
        [("2024-03-23", "Under the Floorboards. Two archaeologists")],
    ),
    (D, "zh", "2024年4月13日，陈磊给雨桐推荐了哪部剧？", [("2024-04-13", "《漫长的季节》")]),
    (
        D,
        "en",
        "Which album did Marcus recommend when he and Hannah talked on 25 April 2024?",
        [("2024-04-25", "Northern Lights Motel by The Hollow Pines")],
    ),
    (D, "zh", "2024年5月11日，雨桐教了 Hannah 哪个成语？", [("2024-05-11", "Today's idiom is 一石二鸟")]),
    (D, "zh", "5月26日那次聊天，陈磊说妈妈给雨桐寄了什么？", [("2024-05-26", "一箱嘉兴粽子")]),
    (
        D,
        "en",
        "Which book did Hannah recommend to Marcus on 15 June 2024?",
        [("2024-06-15", "Take The Overstory")],
    ),
    (D, "zh", "6月29日，陈磊推荐雨桐看什么剧？", [("2024-06-29", "看《我的阿勒泰》吧")]),
    (
        D,
        "en",
        "What idiom did Yutong teach Hannah in their lesson on 17 July 2024?",
        [("2024-07-17", "塞翁失马，焉知非福。")],
    ),
    (
        D,
        "en",
        "What did Lei give Hannah to take back to England, in the chat of 10 August 2024?",
        [("2024-08-10", "这罐狮峰龙井送给你")],
    ),
    (D, "zh", "9月14日那次，陈磊说妈妈为中秋给雨桐寄了什么？", [("2024-09-14", "知味观的桂花月饼")]),
    (
        D,
        "en",
        "Which podcast did Hannah suggest for Marcus's trip to Glasgow, on 1 October 2024?",
        [("2024-10-01", "Listen to The Long Field")],
    ),
]

# For each `changed` question (by its gold anchor): where the OLD value is still stated.
# ("MEMORY", anchor) means workspace/MEMORY.md; a date means that daily note.
OLD_VALUES: dict[str, list[tuple[str, str]]] = {
    "the kids at St Aidan's are lovely": [
        ("MEMORY", "Burnage Vale Academy"),
        ("2024-02-10", "Still happy at Burnage Vale?"),
    ],
    "我现在住在 Levenshulme": [
        ("MEMORY", "shared house in Chorlton"),
        ("2024-02-10", "a room in Chorlton"),
        ("2024-03-09", "Same in Chorlton"),
    ],
    "I got a new PB a fortnight ago, 26:58": [
        ("MEMORY", "personal best 31:05"),
        ("2024-02-10", "still stuck on 31:05"),
        ("2024-04-25", "28:50!"),
    ],
    "I get the train from Levenshulme to Stockport now": [
        ("MEMORY", "Keira and cycles to"),
        ("2024-02-10", "Do you still cycle to Burnage every morning?"),
    ],
    "they've extended the tour to March": [
        ("MEMORY", "lighting technician at the Harbourside Playhouse"),
        ("2024-02-10", "The Playhouse is in tech week"),
    ],
    "Wren's on a winter mooring at Bradford on Avon now": [
        ("MEMORY", "Rents a flat in Easton"),
        ("2024-02-10", "The Easton flat is fine"),
        ("2024-06-15", "Wren's moored just outside Bath"),
    ],
    "We're called Low Tide Radio now": [
        ("MEMORY", "The Night Ferries"),
        ("2024-02-10", "The Night Ferries have a gig"),
        ("2024-04-25", "What's wrong with The Night Ferries?"),
    ],
    "I sold the Fiesta last month and bought a Honda CB500": [
        ("MEMORY", "drives a 2009 Ford Fiesta"),
        ("2024-03-23", "Yesterday I drove the Fiesta down to Bath"),
    ],
    "Northgate gave me a pay rise": [
        ("MEMORY", "a UX designer at Brightloom"),
        ("2024-02-25", "Brightloom 今年要裁掉三分之一的人"),
    ],
    "I've got ILR now": [
        ("MEMORY", "on a Skilled Worker visa"),
        ("2024-03-09", "Five years on my visa by then"),
    ],
    "我们 Salford Quays 的公寓楼下就是运河": [
        ("MEMORY", "flat-share in Rusholme"),
        ("2024-03-09", "Rusholme 这套房子四个人用一个厕所"),
    ],
    "上个月买了辆二手的红色 Yaris": [
        ("MEMORY", "has no car"),
        ("2024-06-29", "先不买，攒够钱再说"),
    ],
    "自己开工作室比在医院累多了": [
        ("MEMORY", "at 西溪康复医院"),
        ("2024-02-25", "医院这份工作还算稳"),
    ],
    "我住滨江，每天过江上班": [
        ("MEMORY", "Lives with their parents in 萧山"),
        ("2024-02-25", "每天从萧山坐地铁过去"),
    ],
    "十月起一节课涨到三百二了": [
        ("2024-06-29", "一节课二百六"),
        ("2024-08-10", "还是二百六一节课"),
    ],
    "家里两只猫现在天天打架": [
        ("MEMORY", "Has one cat, 年糕"),
        ("2024-02-25", "年糕又胖了吧"),
    ],
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
