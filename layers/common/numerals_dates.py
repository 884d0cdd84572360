"""Chinese numerals, and the names of weekdays and months in Chinese and English: defined once.

Two layers read them: L3 finds the days a question names (layers/local/text/dates.py: "上周三",
"九月中旬", "last Tuesday"), and L4's consolidation compares the anchors of two memories
(layers/conversation/consolidation/sameness.py: "周三" and "星期三" and "Wednesday" are one weekday,
"十五" is 15).  They cannot import each other (L3 and L4 are independent), so what both need of the
languages lives here.

Weekdays are numbered as ISO 8601 does, Monday 1 … Sunday 7 (``date.isoweekday()``); a caller that
counts from Monday 0 (``date.weekday()``, as dates.py does) subtracts one at its own door.  Each caller
also keeps its own few exceptions (which abbreviations are words of their own in the texts it reads),
beside its use of these tables.
"""

from __future__ import annotations

CN_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
CN_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10_000, "亿": 100_000_000}
CN_NUMERAL_CHARS = "".join(CN_DIGITS) + "".join(CN_UNITS)  # 零〇一二两三四五六七八九十百千万亿

# ISO numbering: Monday 1 … Sunday 7.  周日, 星期天: both 日 and 天 are Sunday.
WEEKDAYS_ZH = {"一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "日": 7, "天": 7}
WEEKDAY_CHARS_ZH = "".join(WEEKDAYS_ZH)  # 一二三四五六日天
# Full names and the abbreviations that are no other English word ("sat", "sun" and "weds" are left to
# each caller: a weekday in a question's words, a word of its own in a memory's).
WEEKDAYS_EN = {
    **dict.fromkeys(("monday", "mon"), 1),
    **dict.fromkeys(("tuesday", "tue", "tues"), 2),
    **dict.fromkeys(("wednesday", "wed"), 3),
    **dict.fromkeys(("thursday", "thu", "thur", "thurs"), 4),
    **dict.fromkeys(("friday", "fri"), 5),
    "saturday": 6,
    "sunday": 7,
}
# Months 1-12, with their abbreviations ("may" is both; "mar" is also a verb: callers that read free text
# leave those out).
MONTHS_EN = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}


def cn_numeral(text: str) -> str:
    """A Chinese numeral's value ("十五" 15, "二零二六" 2026); the text itself when it is not one."""
    if all(ch in CN_DIGITS for ch in text):
        return "".join(str(CN_DIGITS[ch]) for ch in text)
    total, section, digit = 0, 0, None
    for ch in text:
        if ch in "零〇":
            continue  # a placeholder between units (三千零五)
        if ch in CN_DIGITS:
            if digit is not None:
                return text  # two digits with no unit between ("四一百"): not one number
            digit = CN_DIGITS[ch]
        elif ch in ("万", "亿"):
            total = (total + section + (digit or 0)) * CN_UNITS[ch]
            section, digit = 0, None
        elif ch in CN_UNITS:
            section += (1 if digit is None else digit) * CN_UNITS[ch]
            digit = None
        else:
            return text
    return str(total + section + (digit or 0))


def day_number(text: str) -> int:
    """The number of a day, month or week as a date writes it: arabic digits, or Chinese up to 99.

    "9", "三" 3, "十五" 15, "二十三" 23, "一二" 12 (digit by digit).  Lenient where :func:`cn_numeral`
    is strict: it reads what a date pattern has already matched, and never refuses."""
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, ones = text.partition("十")
        return (CN_DIGITS.get(tens, 1) if tens else 1) * 10 + (CN_DIGITS.get(ones, 0) if ones else 0)
    value = 0
    for ch in text:
        value = value * 10 + CN_DIGITS.get(ch, 0)
    return value
