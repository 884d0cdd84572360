"""Write questions.yaml for the people recall set from the question list below.

Standalone (standard library plus PyYAML for the final check); it does not use the project's code.
Each question names its gold file(s) and an anchor; the line number is found from the anchor, which
must occur exactly once in its file. Ids, line ranges and `heldout` (every third question per kind)
are filled in here, so editing a turn only needs this script re-run.

    python3 bench/recall_set_people/build_questions.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
WS = HERE / "workspace"

S, M, T, X, P = "single-hop", "multi-hop", "temporal", "cross-lingual", "paraphrase"

# (kind, question language, question, [(daily note date, anchor), ...])
QUESTIONS: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    # --- single-hop: question and answer in the same language ---
    (S, "zh", "丽丽在曼彻斯特 Ancoats 的一室户每月房租多少？", [("2024-01-06", "一个月 850 镑")]),
    (S, "zh", "敏敏怀孕后，最初说的预产期是什么时候？", [("2024-01-06", "预产期是六月中旬")]),
    (S, "zh", "陈伟和敏敏一开始看中的滨江那套房子多大、多少钱？", [("2024-01-06", "89平的大概要四百二十万")]),
    (S, "zh", "旺财在一月份最关心的是什么？", [("2024-01-06", "楼下那只新来的柯基")]),
    (
        S,
        "en",
        "How far did Hannah run along the canal on her long run in January?",
        [("2024-01-20", "Fourteen miles along the canal")],
    ),
    (
        S,
        "en",
        "How many times had Lily asked Brightloop for a raise before she started applying elsewhere?",
        [("2024-01-20", "Fourth. So I've started applying")],
    ),
    (
        S,
        "en",
        "Where and when did Lily and Hannah agree to go for a short run?",
        [("2024-01-20", "Wednesday after school, Castlefield, six o'clock")],
    ),
    (S, "zh", "陈伟看中的滨江小区叫什么名字？", [("2024-02-03", "叫江景华庭")]),
    (S, "zh", "丽丽给妈妈买的关节保健品是什么，买了几瓶？", [("2024-02-03", "Boots 的葡萄糖胺")]),
    (S, "zh", "旺财二月初咬坏了什么？", [("2024-02-03", "把敏敏的拖鞋咬烂了两双")]),
    (
        S,
        "en",
        "What will Wei present at the battery expo in Munich?",
        [("2024-02-17", "I will present our thermal management system")],
    ),
    (S, "zh", "奶奶让丽丽拿红包去做什么？", [("2024-02-17", "她说一定要拿去买件新衣服")]),
    (S, "en", "Where did Tom propose to Hannah?", [("2024-03-02", "on Formby beach, at sunset")]),
    (
        S,
        "en",
        "How did Lily's boss at Brightloop react when she resigned?",
        [("2024-03-02", "My boss suddenly offered me a raise")],
    ),
    (S, "en", "Which place did Hannah rule out for her hen do?", [("2024-03-02", "Anywhere but Blackpool")]),
    (S, "zh", "陈伟想给女儿起什么名字？", [("2024-03-23", "我想叫陈思远")]),
    (S, "zh", "谁开车帮丽丽把东西运到伦敦？", [("2024-03-23", "Tom 开车帮我把东西运过去")]),
    (S, "en", "How many designers work at Fernway?", [("2024-04-16", "there are eleven designers")]),
    (S, "en", "Where does Lily's housemate Aoife work?", [("2024-04-16", "Aoife works nights at Whipps Cross")]),
    (S, "en", "How many guests did Hannah plan to invite to the wedding at most?", [("2024-04-16", "Sixty, max.")]),
    (S, "zh", "陈伟从慕尼黑给丽丽带了什么礼物？", [("2024-05-25", "一个啤酒杯形状的冰箱贴")]),
    (
        S,
        "en",
        "Which question from a German engineer tripped Wei up in Munich?",
        [("2024-05-25", "cooling performance at minus twenty degrees")],
    ),
    (S, "zh", "陈伟有几天陪产假？", [("2024-06-08", "陪产假十五天")]),
    (
        S,
        "en",
        "What colour are the bridesmaid dresses, and where are they from?",
        [("2024-06-22", "Sage green, long, with little sleeves")],
    ),
    (S, "en", "Why did Lily call her cat Mochi?", [("2024-06-22", "like the dessert")]),
    (S, "zh", "青禾机器人给陈伟开的年薪比现在高多少？", [("2024-07-13", "年薪比现在高百分之四十")]),
    (S, "zh", "陈伟新家的阳台能看到什么？", [("2024-07-13", "阳台能看到钱塘江")]),
    (
        S,
        "en",
        "Which Bristol neighbourhood is Hannah and Tom's new house in?",
        [("2024-07-27", "a little terraced house in Bishopston")],
    ),
    (
        S,
        "en",
        "What hint did Lily give Hannah about the hen do?",
        [("2024-07-27", "bring shoes you can walk up a hill in")],
    ),
    (S, "zh", "领导暗示陈伟年底可能得到什么职位？", [("2024-08-17", "可能让我当热管理组的组长")]),
    (
        S,
        "en",
        "Why did Wei think asking for a counter-offer was risky in China?",
        [("2024-08-17", "The boss may think you are not loyal")],
    ),
    (
        S,
        "en",
        "Where did the comedian pick on Lily during the hen weekend?",
        [("2024-08-31", "picked on you at the Pleasance")],
    ),
    (S, "zh", "陈伟升组长以后管几个人？", [("2024-09-14", "管八个人")]),
    (S, "en", "Who asked for a copy of Lily's wedding speech?", [("2024-09-28", "Tom's grandad asked for a copy")]),
    (
        S,
        "en",
        "What sign did Wei plan to hold up for Hannah at the airport?",
        [("2024-10-19", 'I will write "Welcome Hannah" in English and Chinese')],
    ),
    (S, "en", "Where is Hannah spending Christmas before Lisbon?", [("2024-12-07", "At Tom's parents' in Sheffield")]),
    # --- multi-hop: two or three turns, usually from different sessions ---
    (
        M,
        "zh",
        "丽丽从曼城搬到伦敦后，每月房租比原来多付多少？",
        [("2024-01-06", "一个月 850 镑"), ("2024-03-23", "1400 镑，包水电和网")],
    ),
    (
        M,
        "zh",
        "陈伟的房子最后成交价比最初的报价便宜了多少？",
        [("2024-01-06", "89平的大概要四百二十万"), ("2024-03-23", "最后谈到三百九十五万")],
    ),
    (
        M,
        "zh",
        "丽丽春节机票最后比一月初查到的价格贵了多少？",
        [("2024-01-06", "往返要 720 镑"), ("2024-02-03", "最后花了 780 镑")],
    ),
    (
        M,
        "en",
        "By how much did Hannah beat her marathon goal time?",
        [
            ("2024-01-20", "under four and a half hours"),
            ("2024-04-16", "Four hours, twelve minutes and thirty-eight seconds"),
        ],
    ),
    (
        M,
        "en",
        "How much more a month is Lily's Leyton flat than her room after the September rent rise?",
        [("2024-07-27", "From 1,400 to 1,475 a month"), ("2024-12-07", "1,650 a month")],
    ),
    (
        M,
        "en",
        "What new jobs did Hannah and Tom each take in Bristol?",
        [
            ("2024-06-22", "senior physio post at Southmead Hospital"),
            ("2024-07-27", "Deputy head at St Werburgh's Primary"),
        ],
    ),
    (
        M,
        "en",
        "What present did Hannah bring Lily's grandmother, and what did the grandmother do with it?",
        [
            ("2024-09-28", "a nice tin of English breakfast"),
            ("2024-11-20", "She put the tin on the shelf next to her photos"),
        ],
    ),
    (
        M,
        "zh",
        "陈伟去慕尼黑演讲之前丽丽帮了他什么忙？演讲效果怎么样？",
        [("2024-03-23", "你帮我看看英文有没有错"), ("2024-05-25", "overall it was a good presentation")],
    ),
    (
        M,
        "zh",
        "宝宝的名字有过哪两个候选，最后用了哪个？",
        [("2024-03-23", "敏敏想叫陈悦"), ("2024-06-08", "定了，叫陈悦")],
    ),
    (
        M,
        "en",
        "What problem did Hannah have with her knee, and how did it do during the marathon?",
        [("2024-01-20", "Tom keeps taping it for me"), ("2024-04-16", "It started grumbling around mile twenty")],
    ),
    (
        M,
        "zh",
        "陈伟为什么拒绝了深圳的工作？后来他在极光得到了什么？",
        [("2024-08-17", "我想留在杭州，看着悦悦长大"), ("2024-09-14", "我升热管理组组长了")],
    ),
    (
        M,
        "zh",
        "旺财搬进新家后怕什么？到年底这个问题解决了吗？",
        [("2024-07-13", "不敢坐电梯"), ("2024-12-28", "还有旺财学会了坐电梯")],
    ),
    (
        M,
        "en",
        "What does Aoife do for a living, and how did she change Mochi while Lily was in China?",
        [
            ("2024-04-16", "Aoife works nights at Whipps Cross"),
            ("2024-12-07", "He's put on half a kilo and now sleeps in her room"),
        ],
    ),
    (
        M,
        "en",
        "How does Mochi react to Marco's cello, and what does Marco plan for Lily's move-out?",
        [
            ("2024-06-22", "He hides under my bed whenever it starts"),
            ("2024-12-07", "He's going to play a farewell concert"),
        ],
    ),
    (
        M,
        "en",
        "Where did Hannah leave the teacup Wei bought her, and how did it get to her?",
        [
            ("2024-11-20", "Wei says you left the teacup he bought you in his car"),
            ("2024-12-07", "wrapped in about ten layers of bubble wrap"),
        ],
    ),
    (
        M,
        "zh",
        "丽丽做的预约流程改版原定什么时候上线？上线后效果如何？",
        [("2024-07-27", "the booking redesign will launch in September"), ("2024-09-14", "第一天用户投诉少了一半")],
    ),
    (
        M,
        "zh",
        "丽丽给妈妈买的关节保健品是什么？妈妈吃了以后怎么样？",
        [("2024-02-03", "Boots 的葡萄糖胺"), ("2024-06-08", "吃了以后好多了")],
    ),
    (
        M,
        "en",
        "Which story opened Lily's wedding speech, and whom did it make laugh until they cried?",
        [
            ("2024-08-31", "It opens with the Lego Hadrian's Wall story"),
            ("2024-09-28", "made the head of Oakfield cry with laughter"),
        ],
    ),
    (
        M,
        "en",
        "Which Chinese phrase did Lily teach Hannah, and how did it go down at the party?",
        [("2024-09-28", "Start with 谢谢 and 奶奶生日快乐"), ("2024-11-20", "the whole room clapping")],
    ),
    (
        M,
        "zh",
        "丽丽给悦悦买的彼得兔衣服，悦悦后来在什么场合穿了？",
        [("2024-06-22", "a tiny Peter Rabbit outfit"), ("2024-09-14", "彼得兔那套")],
    ),
    # --- temporal: the gold turn is in the session whose date answers "when" ---
    (T, "zh", "悦悦是哪天出生的？", [("2024-06-08", "前天凌晨三点四十生的")]),
    (
        T,
        "en",
        "On what date did Hannah run the Manchester Marathon?",
        [("2024-04-16", "ran a whole marathon on Sunday")],
    ),
    (T, "en", "When did Tom propose to Hannah?", [("2024-03-02", "Tom proposed. Last weekend")]),
    (T, "zh", "陈伟哪天交的买房定金？", [("2024-03-23", "昨天交了定金五十万")]),
    (T, "en", "When did Lily adopt Mochi?", [("2024-06-22", "Battersea, last weekend")]),
    (T, "zh", "陈伟一家是什么时候搬进滨江新家的？", [("2024-07-13", "上周末搬的")]),
    (
        T,
        "en",
        "On what day did Hannah find out she had got the deputy head job?",
        [("2024-07-27", "I found out yesterday afternoon")],
    ),
    (T, "zh", "悦悦第一次自己翻身是哪天？", [("2024-08-17", "前天第一次自己翻过去")]),
    (
        T,
        "en",
        "Which weekend was Hannah's hen do in Edinburgh?",
        [("2024-06-22", "the weekend of the twenty-third of August")],
    ),
    (T, "zh", "悦悦的百天是哪一天？", [("2024-09-14", "昨天悦悦百天")]),
    (T, "zh", "陈伟升组长的通知是哪天发的？", [("2024-09-14", "这周一公司正式发了通知")]),
    (
        T,
        "en",
        "What was the date of Hannah and Tom's wedding day, as Hannah recalled it a week later?",
        [("2024-09-28", "Last Saturday was the best day of my life")],
    ),
    (T, "zh", "Fernway 的新预约系统是哪天上线的？", [("2024-09-14", "这周二上线了")]),
    (T, "zh", "陈伟大概什么时候提的新车？", [("2024-10-19", "上个月底，公司内部价")]),
    (
        T,
        "en",
        "When did Hannah land back in England after the China trip?",
        [("2024-11-20", "Landed at Heathrow yesterday afternoon")],
    ),
    (
        T,
        "en",
        "On which day did Hannah and Tom move into the Bishopston house?",
        [("2024-08-31", "We moved into the Bishopston house on Tuesday")],
    ),
    (T, "en", "When is Lily moving into her Leyton flat?", [("2024-12-07", "The first of February.")]),
    (T, "zh", "丽丽春节是哪天到杭州的？", [("2024-02-03", "二月八号下午到萧山机场")]),
    (T, "zh", "丽丽过完春节是哪天回到曼城的？", [("2024-02-17", "昨天晚上落地曼城")]),
    (
        T,
        "en",
        "On what day did Lily hand in her notice at Brightloop?",
        [("2024-03-02", "I handed in my notice at Brightloop on Monday")],
    ),
    (T, "zh", "陈伟是哪天从慕尼黑回来的？", [("2024-05-25", "上周五回来的")]),
    (T, "zh", "悦悦大概什么时候开始会爬的？", [("2024-12-28", "上周开始满屋子爬")]),
    (
        T,
        "en",
        "What has Lily decided about housing most recently?",
        [("2024-12-07", "Leyton, ten minutes from the Central line")],
    ),
    (
        T,
        "en",
        "Which came first, Hannah's wedding or Lily's grandmother's 80th birthday banquet, and how far apart?",
        [("2024-09-28", "Last Saturday was the best day of my life"), ("2024-10-19", "十六号中午，一共十二桌")],
    ),
    # --- cross-lingual: the question is in the other language than its answer ---
    (
        X,
        "en",
        "What did Lily's mother start knitting when she heard about the pregnancy?",
        [("2024-01-06", "妈已经开始织小毛衣了")],
    ),
    (
        X,
        "en",
        "Which dishes did Lily want her mum to cook when she came home for Spring Festival?",
        [("2024-02-03", "想吃妈做的糖醋排骨和笋干老鸭煲")],
    ),
    (X, "en", "What flight number did Lily take home for Chinese New Year?", [("2024-02-03", "东航的 MU5406")]),
    (X, "en", "How much was the deposit Wei paid on the new flat?", [("2024-03-23", "昨天交了定金五十万")]),
    (X, "en", "Who are Lily's two housemates in Walthamstow?", [("2024-03-23", "一个是爱尔兰的护士叫 Aoife")]),
    (X, "en", "How much did the vet cost when Wangcai swallowed a sock?", [("2024-05-25", "花了一千二百块")]),
    (X, "en", "How much did Wei's daughter weigh when she was born?", [("2024-06-08", "宝宝六斤四两")]),
    (X, "en", "Which floor is Wei's new apartment on?", [("2024-07-13", "现在住二十三楼")]),
    (X, "en", "What is the name of the Shenzhen startup that tried to hire Wei?", [("2024-07-13", "叫青禾机器人")]),
    (X, "en", "How much is Wei's monthly mortgage payment?", [("2024-07-13", "房贷每个月一万六")]),
    (
        X,
        "en",
        "What did the grandmother give Yueyue at her hundred-day celebration?",
        [("2024-09-14", "奶奶还给她戴了一个银锁")],
    ),
    (X, "en", "How big a pay rise came with Wei's promotion?", [("2024-09-14", "涨了百分之二十")]),
    (X, "en", "How many tables were booked for the grandmother's birthday banquet?", [("2024-10-19", "一共十二桌")]),
    (X, "en", "What car did Wei buy, and how did he get a good price?", [("2024-10-19", "公司内部价买的极光 S7")]),
    (
        X,
        "en",
        "What did Min want to cook for Lily before she flew back to London?",
        [("2024-11-20", "敏敏说要给你做饺子")],
    ),
    (X, "en", "Why can't Lily go home for Spring Festival 2025?", [("2024-12-28", "一月底还有一个大项目上线")]),
    (X, "zh", "Hannah 在布里斯托尔当副校长的学校叫什么？", [("2024-07-27", "Deputy head at St Werburgh's Primary")]),
    (
        X,
        "zh",
        "Hannah 跑曼彻斯特马拉松用了多长时间？",
        [("2024-04-16", "Four hours, twelve minutes and thirty-eight seconds")],
    ),
    (X, "zh", "丽丽在 Fernway 的上司叫什么名字？", [("2024-04-16", "Her name is Priya")]),
    (X, "zh", "Hannah 和 Tom 的婚礼在什么地方办？", [("2024-04-16", "at a barn near Hathersage in the Peak District")]),
    (X, "zh", "丽丽领养的猫几岁，长什么样？", [("2024-06-22", "He's two years old, grey with white socks")]),
    (X, "zh", "Hannah 在梅家坞买了多少龙井茶？", [("2024-11-20", "two kilos of Longjing tea")]),
    (X, "zh", "Hannah 和 Tom 的蜜月去哪里？", [("2024-09-28", "Lisbon, the week after Christmas")]),
    (X, "zh", "单身派对那次，大家日出时爬了哪座山？", [("2024-08-31", "sunrise hike up Arthur's Seat")]),
    # --- paraphrase: same language as the answer, but few of its words ---
    (
        P,
        "en",
        "What kind of medical visits can people arrange with the product made by Lily's new employer?",
        [("2024-01-20", "an app for booking physio and GP appointments")],
    ),
    (
        P,
        "en",
        "Which classroom construction about Roman Britain blocked the pupils' books?",
        [("2024-01-20", "built Hadrian's Wall out of Lego")],
    ),
    (
        P,
        "en",
        "What drink container concealed the engagement ring?",
        [("2024-03-02", "hidden the ring in a flask of hot chocolate")],
    ),
    (
        P,
        "en",
        "For which broadcaster did Lily's new manager previously work?",
        [("2024-04-16", "she used to work at the BBC")],
    ),
    (
        P,
        "en",
        "Which housemate practises a string instrument late in the evening?",
        [("2024-04-16", "Marco plays the cello at eleven at night")],
    ),
    (
        P,
        "en",
        "How much simpler did Lily's redesign make the appointment-making process?",
        [("2024-07-27", "from nine to four")],
    ),
    (
        P,
        "en",
        "Which gift is considered unlucky for an elderly Chinese relative?",
        [("2024-09-28", "clocks are bad luck as presents")],
    ),
    (
        P,
        "en",
        "What did Hannah secretly slip the shiba inu during a meal?",
        [("2024-11-20", "She fed him half a 小笼包 under the table")],
    ),
    (
        P,
        "en",
        "How long is Lily's journey to the office after the move south?",
        [("2024-04-16", "twenty minutes on the Victoria line")],
    ),
    (
        P,
        "en",
        "What festive alternative to turkey is Lily planning with her flatmates?",
        [("2024-12-07", "Chinese hotpot Christmas with Aoife and Marco")],
    ),
    (P, "zh", "哥哥在那家电动车企业具体负责哪块技术？", [("2024-01-06", "我现在负责电池热管理那一块")]),
    (P, "zh", "老人家平时靠什么锻炼身体？", [("2024-02-03", "每天早上还去公园打太极")]),
    (P, "zh", "哥哥家的宠物因为误食了什么被送去动物医院？", [("2024-05-25", "旺财上周吞了一只袜子")]),
    (P, "zh", "侄女的名字最终是哪位长辈决定的？", [("2024-06-08", "最后还是奶奶拍板的")]),
    (P, "zh", "新系统上线后，领导怎么犒劳设计团队？", [("2024-09-14", "Priya 请整个团队吃了饭")]),
    (P, "zh", "杭州的家长现在流行给小婴儿安排什么课程？", [("2024-12-28", "敏敏说明年想给悦悦报个早教班")]),
]


def locate(date: str, anchor: str) -> int:
    """Return the 1-based line of `anchor` in the daily note; fail unless it occurs exactly once."""
    path = WS / "memory" / f"{date}.md"
    text = path.read_text(encoding="utf-8")
    if text.count(anchor) != 1:
        raise SystemExit(f"{path.name}: anchor {anchor!r} occurs {text.count(anchor)} times")
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines, 1) if anchor in line]
    if len(hits) != 1 or hits[0] < 3:
        raise SystemExit(f"{path.name}: anchor {anchor!r} not on one turn line: {hits}")
    return hits[0]


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
            f"- id: p{n:03d}",
            f"  kind: {kind}",
            f"  lang: {lang}",
            f"  heldout: {'true' if heldout else 'false'}",
            f"  question: {q(question)}",
            "  gold:",
        ]
        for date, anchor in gold:
            line = locate(date, anchor)
            out += [f"  - file: memory/{date}.md", f"    lines: [{line}, {line}]", f"    anchor: {q(anchor)}"]
    (HERE / "questions.yaml").write_text("\n".join(out) + "\n", encoding="utf-8")
    print(len(QUESTIONS), "questions;", ", ".join(f"{k} {v}" for k, v in seen.items()))


if __name__ == "__main__":
    main()
